"""Worker process pools for CPU-bound scoring and synthesis.

``spawn_pool(n)`` is a ``ProcessPoolExecutor`` of ``n`` spawned workers (they never inherit
torch's threads or locks) started with one BLAS/OpenMP thread each: the pool is the
parallelism. Left at their defaults, every worker's OpenBLAS runs one spinning thread per
core; on a loaded 2-core machine a 50k-sample dot product was seen busy-waiting for a minute.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, wait

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned, single-threaded worker processes, all started before return (a
    worker reads its environment when it starts, so they are started here, not on demand)."""
    ex = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update({k: "1" for k in THREAD_ENV})
    try:
        wait([ex.submit(os.getpid) for _ in range(workers)])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ex


def kill_pool(ex: ProcessPoolExecutor) -> None:
    """Stop ``ex`` now, without waiting on its workers (a stalled or interrupted batch)."""
    procs = getattr(ex, "_processes", None) or {}
    for p in list(procs.values()):
        p.kill()
    ex.shutdown(wait=False, cancel_futures=True)
