"""Artifact fuzzing: mutate a real file (bit flips, truncation, splices, random bytes) and
load each mutant in its own forked subprocess, classifying how it ended.

Outcomes per case: "error" (the SDK's own error type: the only acceptable result for a
mutant that changed meaning), "loaded" (the loader accepted it), "other" (a foreign
exception escaped), "signal" (the process died: segfault/abort — never acceptable).
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator

EXIT_ERROR, EXIT_LOADED, EXIT_OTHER = 10, 11, 12


def mutations(data: bytes, n: int, seed: int = 0, header: int | None = None) -> Iterator[bytes]:
    """``n`` distinct mutants of ``data``; ``header`` bounds a region to hit more often."""
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
        elif kind == 3:  # splice: copy a chunk over another place
            ln = rng.randint(1, max(1, len(b) // 8))
            src, dst = rng.randrange(len(b) - ln + 1), rng.randrange(len(b) - ln + 1)
            b[dst : dst + ln] = data[src : src + ln]
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
             suffix: str) -> str:
    """Load ``payload`` with ``loader`` in a forked child; returns the outcome name."""
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        pid = os.fork()
        if pid == 0:  # child
            code = EXIT_OTHER
            try:
                loader(path)
                code = EXIT_LOADED
            except error_type:
                code = EXIT_ERROR
            except BaseException:
                code = EXIT_OTHER
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        os.unlink(path)
    if os.WIFSIGNALED(status):
        return "signal"
    return {EXIT_ERROR: "error", EXIT_LOADED: "loaded"}.get(os.WEXITSTATUS(status), "other")


def fuzz(loader, error_type, data: bytes, n: int, suffix: str, seed: int = 0) -> Counter:
    return Counter(run_case(loader, error_type, m, suffix) for m in mutations(data, n, seed))
