"""Worker process pools for CPU-bound scoring and synthesis.

``spawn_pool(n)`` is a ``ProcessPoolExecutor`` of ``n`` spawned workers (they never inherit
torch's threads or locks) started with one BLAS/OpenMP thread each: the pool is the
parallelism. Left at their defaults, every worker's OpenBLAS runs one spinning thread per
core; on a loaded 2-core machine a 50k-sample dot product was seen busy-waiting for a minute.
Each worker also watches its parent: when the parent process dies (a training run killed
with SIGKILL / SIGTERM, no ``shutdown``), the worker exits within a second instead of staying
behind as an orphan holding its memory.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, wait

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: a daemon thread ends this process once ``parent`` is gone (the
    worker is re-parented, so its parent pid changes)."""

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="qsa-parent-watch", daemon=True).start()


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned, single-threaded worker processes, all started before return (a
    worker reads its environment when it starts, so they are started here, not on demand);
    they exit by themselves if this process dies."""
    ex = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=_exit_with_parent, initargs=(os.getpid(),))
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
