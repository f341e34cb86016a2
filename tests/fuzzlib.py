"""Artifact fuzzing: mutate a real file (bit flips, truncation, splices, random bytes) and
load each mutant in its own forked subprocess, classifying how it ended.

Outcomes per case: "error" (the SDK's own error type: the only acceptable result for a
mutant that changed meaning), "loaded" (the loader accepted it), "other" (a foreign
exception escaped), "signal" (the process died: segfault/abort — never acceptable), "hang"
(killed after ``timeout`` seconds). A loader may also return one of ``EXTRA_OUTCOMES`` (e.g.
"nonfinite": it loaded and ran, but produced NaN/Inf) to name what it saw.

``fuzz_in_workers`` runs many cases fast and still one process per case: a fresh worker
interpreter (``python fuzzlib.py``) imports the loader once, then forks a child per mutant
and reports each outcome on a line; if the worker itself dies, the remaining cases go to a
new worker and the lost case counts as a signal.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

EXIT_ERROR, EXIT_LOADED, EXIT_OTHER = 10, 11, 12
EXTRA_OUTCOMES = ("nonfinite", "badshape")
_CODES = {"error": EXIT_ERROR, "loaded": EXIT_LOADED, "other": EXIT_OTHER}
_CODES.update({name: 13 + k for k, name in enumerate(EXTRA_OUTCOMES)})
_NAMES = {v: k for k, v in _CODES.items()}


def mutations(data: bytes, n: int, seed: int = 0, header: int | None = None,
              donor: bytes | None = None) -> Iterator[bytes]:
    """``n`` distinct mutants of ``data``; ``header`` bounds a region to hit more often;
    ``donor`` (another file) is spliced into ``data`` in half of the splice cases."""
    rng = random.Random(seed)
    if header is None and len(data) >= 8:
        (h,) = struct.unpack("<Q", data[:8])
        header = 8 + h if 8 + h <= len(data) else min(len(data), 4096)
    header = header or min(len(data), 4096)
    made = 0
    while made < n:
        b = bytearray(data)
        kind = made % 6
        if kind == 0:  # single bit flip anywhere
            p = rng.randrange(len(b))
            b[p] ^= 1 << rng.randrange(8)
        elif kind == 1:  # truncation
            b = b[: rng.randrange(len(b))]
        elif kind == 2:  # random bytes in the header region
            for _ in range(rng.randint(1, 8)):
                p = rng.randrange(min(header, len(b)))
                b[p] = rng.randrange(256)
        elif kind == 3:  # splice: copy a chunk (of this file or the donor) over another place
            other = donor if donor and rng.random() < 0.5 else data
            ln = rng.randint(1, max(1, min(len(b), len(other)) // 8))
            src, dst = rng.randrange(len(other) - ln + 1), rng.randrange(len(b) - ln + 1)
            b[dst : dst + ln] = other[src : src + ln]
        elif kind == 4:  # bit flips anywhere
            for _ in range(rng.randint(2, 16)):
                p = rng.randrange(len(b))
                b[p] ^= 1 << rng.randrange(8)
        else:  # a block of zeros or 0xff
            ln = rng.randint(1, 64)
            p = rng.randrange(len(b))
            b[p : p + ln] = bytes([rng.choice((0, 255))]) * len(b[p : p + ln])
        if bytes(b) != data:
            made += 1
            yield bytes(b)


def run_case(loader: Callable[[str], object], error_type: type, payload: bytes,
             suffix: str, path: str | os.PathLike | None = None,
             timeout: float | None = None, quiet: bool = False) -> str:
    """Load ``payload`` with ``loader`` in a forked child; returns the outcome name.

    ``path``: where to write the mutant (default: a fresh temp file ending in ``suffix``);
    ``timeout``: seconds before the child is killed ("hang"); ``quiet``: the child's
    stdout/stderr go to /dev/null (native runtimes print their complaints)."""
    if path is None:
        fd, path = tempfile.mkstemp(suffix=suffix)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    hung = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        pid = os.fork()
        if pid == 0:  # child
            code = EXIT_OTHER
            try:
                if quiet:
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, 1)
                    os.dup2(null, 2)
                got = loader(str(path))
                code = _CODES[got] if isinstance(got, str) and got in EXTRA_OUTCOMES else (
                    EXIT_LOADED)
            except error_type:
                code = EXIT_ERROR
            except BaseException:
                code = EXIT_OTHER
            os._exit(code)
        if timeout is None:
            _, status = os.waitpid(pid, 0)
        else:
            deadline = time.monotonic() + timeout
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    hung = True
                    break
                time.sleep(0.002)
    finally:
        os.unlink(path)
    if hung:
        return "hang"
    if os.WIFSIGNALED(status):
        return "signal"
    return _NAMES.get(os.WEXITSTATUS(status), "other")


def fuzz(loader, error_type, data: bytes, n: int, suffix: str, seed: int = 0) -> Counter:
    return Counter(run_case(loader, error_type, m, suffix) for m in mutations(data, n, seed))


def _resolve(spec: str):
    """``"module:attr"`` -> the object (the module found on sys.path, e.g. tests/)."""
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def fuzz_in_workers(loader: str, error: str, data: bytes, n: int, name: str, seed: int = 0,
                    variants: dict[str, dict[str, bytes]] | None = None,
                    donor: bytes | None = None, timeout: float = 30.0,
                    fork: bool = True) -> tuple[Counter, list[dict]]:
    """``n`` mutants of ``data``, each loaded by ``loader`` ("module:function", called with the
    mutant's path) in a fresh worker interpreter (``python fuzzlib.py``).

    ``fork=True``: the worker forks a child per mutant (full isolation, ~0.1 s a case).
    ``fork=False``: the worker loads the mutants itself, one after another, reporting each
    outcome as it goes; when it dies (a signal) or stalls past ``timeout`` (a hang) on a case,
    that case is recorded as such and the remaining cases go to a fresh worker.
    Each mutant is written as ``name`` in one folder per entry of ``variants`` (default: one
    empty folder, variant ""), holding that entry's files (e.g. the artifact's report.json),
    and loaded from each in turn. ``error``: "module:Class" of the one acceptable exception.
    A ``preload()`` attribute of the loader runs once per worker, before the first case
    (import the heavy runtimes there, not in every child).
    Returns the outcome counts per (variant, outcome) and one record per case and variant
    (index, variant, outcome, mutation kind)."""
    records: list[dict] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "original"
        src.write_bytes(data)
        (Path(tmp) / "donor").write_bytes(donor or b"")
        paths = []
        for v, files in (variants or {"": {}}).items():
            d = Path(tmp) / f"case-{len(paths)}"
            d.mkdir()
            for fname, content in files.items():
                (d / fname).write_bytes(content)
            paths.append((v, str(d / name)))
        todo = [(k, v, p) for k in range(n) for v, p in paths]
        done = 0
        while done < len(todo):
            args = [sys.executable, __file__, loader, error, str(src), str(Path(tmp) / "donor"),
                    json.dumps(paths), str(n), str(seed), str(done), str(timeout),
                    "fork" if fork else "batch"]
            got, rc, err = _run_worker(args, env, timeout)
            records.extend(got)
            done += len(got)
            if done < len(todo) and rc == 0:
                raise RuntimeError(f"fuzz worker stopped early: {err[-2000:]}")
            if done < len(todo):  # the worker died (or hung) on this case: count it, go on
                k, v, _ = todo[done]
                outcome = "hang" if rc is None else "signal" if rc < 0 else "other"
                records.append({"case": k, "variant": v, "outcome": outcome,
                                "kind": MUTATION_KINDS[k % 6], "worker_rc": rc,
                                "stderr": err[-500:]})
                done += 1
    return Counter((r["variant"], r["outcome"]) for r in records), records


def _run_worker(args: list[str], env: dict, timeout: float) -> tuple[list[dict], int | None, str]:
    """Run one worker; returns its per-case records, its return code (None: killed because
    no case finished within ``timeout`` seconds) and its stderr's tail."""
    import selectors

    got: list[dict] = []
    with tempfile.TemporaryFile() as err, subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=err, env=env
    ) as proc:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        first = 120.0 + timeout  # the worker's imports come first
        buf = b""
        rc: int | None = 0
        while True:
            if not sel.select(first if not got else timeout):
                proc.kill()
                proc.wait()
                rc = None
                break
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                rc = proc.wait()
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            got.extend(json.loads(line) for line in lines if line.startswith(b"{"))
        sel.close()
        err.seek(0)
        return got, rc, err.read().decode(errors="replace")


MUTATION_KINDS = ("bitflip", "truncate", "header-bytes", "splice", "bitflips", "block")


def _in_process(fn, err, payload: bytes, path: str) -> str:
    with open(path, "wb") as f:
        f.write(payload)
    try:
        got = fn(path)
    except err:
        return "error"
    except Exception:
        return "other"
    return got if isinstance(got, str) and got in EXTRA_OUTCOMES else "loaded"


def _worker(argv: list[str]) -> None:
    loader, error, src, donor, paths, n, seed, start, timeout, mode = argv
    fn, err = _resolve(loader), _resolve(error)
    if hasattr(fn, "preload"):  # import the runtimes once, before the cases
        fn.preload()
    report = os.fdopen(os.dup(1), "w")  # outcomes; native chatter goes to /dev/null
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    if mode == "fork":  # batch mode keeps stderr: the parent shows its tail after a crash
        os.dup2(null, 2)
    data, other = Path(src).read_bytes(), Path(donor).read_bytes()
    paths = json.loads(paths)
    j = 0  # index into the (case, variant) list
    for k, m in enumerate(mutations(data, int(n), int(seed), donor=other or None)):
        for variant, path in paths:
            j += 1
            if j <= int(start):
                continue
            if mode == "fork":
                outcome = run_case(fn, err, m, "", path=path, timeout=float(timeout), quiet=True)
            else:
                outcome = _in_process(fn, err, m, path)
            report.write(json.dumps({"case": k, "variant": variant, "outcome": outcome,
                                     "kind": MUTATION_KINDS[k % 6]}) + "\n")
            report.flush()


if __name__ == "__main__":
    _worker(sys.argv[1:])
