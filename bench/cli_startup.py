"""Start-up and default-thread timings of the `qsa` command, run as a user runs it.

    .venv/bin/python bench/cli_startup.py [--runs 3] [--seconds 60] [--out bench/out]

Each case is a fresh process (the `qsa` script beside this Python), timed from outside:
wall seconds (perf_counter around the child) and the child's own CPU seconds (user + sys,
from wait4), each as min / median / max over ``--runs`` runs (after one warm-up for the
start-up cases). A case stops repeating once its runs took ``--budget-s`` of wall time (a
slow case still gets one run).

Cases: ``qsa --help`` and ``import torch`` (the floors), ``qsa info``, the old `qsa info`
(every preset built to count its parameters, what `qsa info` did before it read a table),
``qsa enhance`` on a 1-sample file (default threads and ``--threads 0``), a ``--seconds``
file at the default threads, at ``--threads 1`` and at ``--threads 0`` (torch's own default:
a thread per core), and a folder of 3 files with progress on stderr (the progress lines
are counted).

Python's bytecode cache is on, in OUT/pycache (an installed package has its .pyc files;
with PYTHONDONTWRITEBYTECODE=1 every run compiles qsa's sources again); ``--no-pyc-cache``
keeps the environment as it is. On a shared machine read the CPU seconds: the wall time of
a process that shares its cores grows with the load (the load average is recorded).
Writes OUT/cli_startup.json (``--name``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SR = 16000
QSA = str(Path(sys.executable).with_name("qsa"))
OLD_INFO = ("from qsa.models.registry import build_model, preset_config, preset_names\n"
            "for n in preset_names():\n"
            "    print(n, sum(p.numel() for p in build_model(preset_config(n)).parameters()))")


def write_inputs(root: Path, seconds: float) -> dict[str, Path]:
    """A 1-sample file, a ``seconds`` file and a folder of three 10 s files (16 kHz, PCM_16:
    a tone under noise whose level changes every second)."""
    import soundfile as sf

    rng = np.random.default_rng(0)

    def signal(n: int) -> np.ndarray:
        t = np.arange(n) / SR
        level = np.repeat(rng.uniform(0.005, 0.05, n // SR + 1), SR)[:n]
        return (0.1 * np.sin(2 * np.pi * 220 * t) + level * rng.standard_normal(n)).astype(
            np.float32)

    files = {"one": root / "one.wav", "long": root / f"long{seconds:g}s.wav"}
    sf.write(files["one"], np.zeros(1, np.float32), SR, subtype="PCM_16")
    sf.write(files["long"], signal(int(seconds * SR)), SR, subtype="PCM_16")
    folder = root / "folder"
    folder.mkdir(exist_ok=True)
    for k in range(3):
        sf.write(folder / f"f{k}.wav", signal(10 * SR), SR, subtype="PCM_16")
    files["folder"] = folder
    return files


def run_once(cmd: list[str], env: dict, timeout: float) -> dict:
    """One run of ``cmd``: wall and CPU seconds, exit code, stdout/stderr line counts."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        so, se = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "returncode": rc,
            "timed_out": wall > timeout, "stdout_lines": len(so.splitlines()),
            "stderr_lines": len(se.splitlines()),
            "progress_lines": sum("%" in ln for ln in se.splitlines()),
            "stderr_tail": se.strip()[-300:] if rc else ""}


def summary(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}


def time_case(name: str, cmd: list[str], env: dict, runs: int, budget_s: float,
              timeout: float, warmup: bool) -> dict:
    print(f"{name}: {' '.join(cmd)}", flush=True)
    # the warm-up fills the bytecode and page caches; the long cases come after the 1-sample
    # enhance, whose warm-up imported the same modules
    warm = run_once(cmd, env, timeout) if warmup else {"wall_s": 0.0}
    rows = []
    spent = warm["wall_s"]
    for _ in range(runs):
        if rows and spent > budget_s:
            break
        rows.append(run_once(cmd, env, timeout))
        spent += rows[-1]["wall_s"]
    res = {"command": cmd, "runs": len(rows), "warmup": warmup,
           "wall_s": summary([r["wall_s"] for r in rows]),
           "cpu_s": summary([r["cpu_s"] for r in rows]),
           "returncodes": sorted({r["returncode"] for r in rows}),
           "timed_out": any(r["timed_out"] for r in rows),
           "stdout_lines": rows[-1]["stdout_lines"], "stderr_lines": rows[-1]["stderr_lines"],
           "progress_lines": rows[-1]["progress_lines"]}
    if any(r["returncode"] for r in rows):
        res["stderr_tail"] = next(r["stderr_tail"] for r in rows if r["returncode"])
    print(f"  wall median {res['wall_s']['median']:.2f} s, CPU median "
          f"{res['cpu_s']['median']:.2f} s over {len(rows)} run(s), exit "
          f"{res['returncodes']}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/out", help="folder for cli_startup.json")
    ap.add_argument("--runs", type=int, default=3, help="counted runs per case (3)")
    ap.add_argument("--seconds", type=float, default=60.0, help="the long file's length (60)")
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="stop repeating a case after this much wall time (120)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="one run's limit (1800)")
    ap.add_argument("--no-pyc-cache", action="store_true",
                    help="leave PYTHONDONTWRITEBYTECODE / the bytecode cache as they are")
    ap.add_argument("--only", default="", help="comma-separated case names to run")
    ap.add_argument("--name", default="cli_startup", help="OUT/NAME.json (cli_startup)")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if not args.no_pyc_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str((out / "pycache").resolve())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f = write_inputs(root, args.seconds)
        o = root / "out"
        enh = [QSA, "enhance"]
        cases = {
            "help": [QSA, "--help"],
            "import_torch": [sys.executable, "-c", "import torch"],
            "info": [QSA, "info"],
            "info_old_build_every_preset": [sys.executable, "-c", OLD_INFO],
            "enhance_1_sample": enh + [str(f["one"]), str(o / "one.wav"), "--force"],
            "enhance_1_sample_threads_0": enh + [str(f["one"]), str(o / "one0.wav"), "--force",
                                                 "--threads", "0"],
            "enhance_long_default_threads": enh + [str(f["long"]), str(o / "a.wav"), "--force"],
            "enhance_long_threads_1": enh + [str(f["long"]), str(o / "b.wav"), "--force",
                                             "--threads", "1"],
            "enhance_long_threads_0_torch_default": enh + [str(f["long"]), str(o / "c.wav"),
                                                           "--force", "--threads", "0"],
            "enhance_folder_progress": enh + [str(f["folder"]), str(o / "folder"), "--force"],
        }
        only = {c for c in args.only.split(",") if c}
        if only - set(cases):
            ap.error(f"--only {sorted(only - set(cases))}: unknown; cases: {list(cases)}")
        load0 = os.getloadavg()
        results = {name: time_case(name, cmd, env, args.runs, args.budget_s, args.timeout,
                                   warmup=not name.startswith(("enhance_long", "enhance_fo")))
                   for name, cmd in cases.items() if not only or name in only}
        load1 = os.getloadavg()
    for r in results.values():  # the temporary paths mean nothing after the run
        r["command"] = [Path(c).name if c.startswith(tmp) else c for c in r["command"]]
    report = {
        "what": "whole-process timings of the qsa CLI (wall and the child's CPU seconds)",
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or
                    platform.machine(), "python": platform.python_version(),
                    "loadavg_start": [round(x, 2) for x in load0],
                    "loadavg_end": [round(x, 2) for x in load1],
                    "nice": os.nice(0)},
        "bytecode_cache": not args.no_pyc_cache,
        "long_file_s": args.seconds,
        "cases": results,
    }
    from qsa.fileio import atomic_write_text

    dest = atomic_write_text(out / f"{args.name}.json", json.dumps(report, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
