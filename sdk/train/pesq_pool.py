"""Batch PESQ in a pool of worker processes, for MetricGAN training and validation.

A sample whose PESQ fails (silence, too short, ...) comes back as NaN and is masked by the
caller; the rest of the batch is kept. A worker that dies (killed, out of memory) breaks
only the batches in flight: their samples come back as NaN and the next ``submit`` starts a
fresh pool, with a warning, so a training run goes on instead of ending on
``BrokenProcessPool``. Workers import only numpy and pesq (spawned, so they never inherit
torch's thread pools).
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import numpy as np


def _pesq_one(args) -> float:
    ref, deg, sr, mode = args
    try:
        from pesq import pesq

        return float(pesq(sr, ref, deg, mode))
    except Exception:  # pesq raises on silence / no utterance: mask this sample
        return float("nan")


def normalise_pesq(p: np.ndarray, mode: str = "wb") -> np.ndarray:
    """MetricGAN target: (PESQ - 1) / 3.5 (wb range 1.04..4.64 maps to about 0..1)."""
    return (np.asarray(p, dtype=np.float64) - 1.0) / 3.5


class PesqPool:
    """``submit(ref, deg)`` -> future of per-sample PESQ (NaN where it failed)."""

    def __init__(self, workers: int = 2, sr: int = 16000, mode: str = "wb"):
        self.sr, self.mode = sr, mode
        self.workers = workers
        from qsa.workers import spawn_pool

        self._ex = spawn_pool(workers) if workers > 0 else None
        self.restarts = 0  # pools started again after a worker died

    def submit(self, ref: np.ndarray, deg: np.ndarray) -> Future | list[float]:
        jobs = [(np.asarray(r, np.float64), np.asarray(d, np.float64), self.sr, self.mode)
                for r, d in zip(ref, deg, strict=True)]
        if self._ex is None:
            return [_pesq_one(j) for j in jobs]
        try:
            futs = [self._ex.submit(_pesq_one, j) for j in jobs]
        except BrokenProcessPool:
            self._restart()
            futs = [self._ex.submit(_pesq_one, j) for j in jobs]
        return _Gather(futs)

    def _restart(self) -> None:
        from qsa.workers import kill_pool, spawn_pool

        kill_pool(self._ex)
        self.restarts += 1
        warnings.warn(
            f"a PESQ worker died (pool of {self.workers}); the batches it was scoring were "
            f"masked and a new pool was started (restart {self.restarts})",
            RuntimeWarning,
            stacklevel=3,
        )
        self._ex = spawn_pool(self.workers)

    def __call__(self, ref, deg) -> np.ndarray:
        r = self.submit(ref, deg)
        return np.array(r if isinstance(r, list) else r.result(), dtype=np.float64)

    def close(self):
        if self._ex is not None:
            self._ex.shutdown(cancel_futures=True)
            self._ex = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Gather:
    def __init__(self, futs):
        self.futs = futs

    def result(self) -> list[float]:
        out = []
        for f in self.futs:
            try:
                out.append(f.result())
            except BrokenProcessPool:  # its worker died: mask the sample, keep the batch
                out.append(float("nan"))
        return out
