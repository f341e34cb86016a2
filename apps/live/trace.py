"""A per-callback trace of the live pipeline, for diagnosing xruns (``QSA_LIVE_TRACE=PATH``).

With the environment variable ``QSA_LIVE_TRACE`` set to a file path, ``LiveSession`` records,
in preallocated arrays (callback-safe: scalar stores only, nothing allocated), one row per
output callback, per input callback and per busy worker pass, and writes them to that path
as a NumPy ``.npz`` archive (plain numeric arrays, no pickle) when the session closes:

- ``out``: perf_counter, PortAudio time, input frames delivered so far, output frames played,
  output-ring fill before the read, samples read, jitter-buffer growth, trimmed so far,
  samples owed to late blocks, the streams' offset ``d`` (see ``jitter.py``), and the
  ring's lowest headroom since start-up (samples; 0 before);
- ``inp``: perf_counter, PortAudio time, frames;
- ``work``: perf_counter at the pass's end, its duration, hops processed, output-ring fill;
- ``gc``: perf_counter at the end of each garbage collection, its duration, its generation.

Load with ``np.load(PATH)``. Off by default.
"""

from __future__ import annotations

import os

import numpy as np

OUT_COLS = ("t", "pa", "frames_in", "frames_out", "avail", "read", "growth", "trimmed",
            "late", "offset", "head_min")  # fmt: skip
INP_COLS = ("t", "pa", "frames")
WORK_COLS = ("t", "dur", "hops", "avail")
GC_COLS = ("t", "dur", "generation")


class CallbackTrace:
    """Ring-less, fixed-size logs (they stop filling when full: ~22 minutes at 10 ms)."""

    def __init__(self, path: str, rows: int = 1 << 17):
        self.path = path
        self.out = np.full((rows, len(OUT_COLS)), np.nan)
        self.inp = np.full((rows, len(INP_COLS)), np.nan)
        self.work = np.full((2 * rows, len(WORK_COLS)), np.nan)
        self.gc = np.full((rows, len(GC_COLS)), np.nan)
        self.n_out = self.n_inp = self.n_work = self.n_gc = 0
        self._gc_t0 = 0.0

    def gc_callback(self, phase: str, info: dict) -> None:
        """For ``gc.callbacks``: when each collection ran and for how long."""
        import time

        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self.n_gc < len(self.gc):
            t = time.perf_counter()
            self.gc[self.n_gc] = (t, t - self._gc_t0, info.get("generation", -1))
            self.n_gc += 1

    @classmethod
    def from_env(cls) -> CallbackTrace | None:
        path = os.environ.get("QSA_LIVE_TRACE")
        return cls(path) if path else None

    def out_row(self, *values) -> None:
        i = self.n_out
        if i < len(self.out):
            row = self.out[i]
            for k, v in enumerate(values):
                row[k] = v
            self.n_out = i + 1

    def inp_row(self, t: float, pa: float, frames: int) -> None:
        i = self.n_inp
        if i < len(self.inp):
            row = self.inp[i]
            row[0], row[1], row[2] = t, pa, frames
            self.n_inp = i + 1

    def work_row(self, t: float, dur: float, hops: int, avail: int) -> None:
        i = self.n_work
        if i < len(self.work):
            row = self.work[i]
            row[0], row[1], row[2], row[3] = t, dur, hops, avail
            self.n_work = i + 1

    def save(self) -> None:
        from qsa.fileio import atomic_path

        with atomic_path(self.path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, out=self.out[: self.n_out], inp=self.inp[: self.n_inp],
                         work=self.work[: self.n_work], gc=self.gc[: self.n_gc],
                         gc_cols=np.array(GC_COLS), out_cols=np.array(OUT_COLS),
                         inp_cols=np.array(INP_COLS), work_cols=np.array(WORK_COLS))  # fmt: skip
