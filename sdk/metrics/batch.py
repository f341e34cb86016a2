"""Metrics over many pairs in a process pool, with a progress bar and NaN-aware means.

``batch_metrics(items, workers=2)`` accepts ``(name, ref, deg)`` tuples whose ``ref`` /
``deg`` are arrays or audio file paths (loaded in the worker, at ``sr``), or
``qsa.data.Pair`` objects (scored as the noisy input against its clean reference, the
"no enhancement" baseline). One failing item or metric gives NaN + reason for that item;
the batch always completes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .scores import METRICS, compute_metrics


@dataclass
class MetricsResult:
    """Per-item dicts (name, metrics, errors), NaN-skipping means and valid counts."""

    items: list[dict]
    means: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"means": self.means, "counts": self.counts, "items": self.items}


def _load(x, sr: int) -> np.ndarray:
    if isinstance(x, str | os.PathLike):
        from qsa.audio.io import read_audio

        return read_audio(x, sr)[0]
    return np.asarray(x, dtype=np.float64)


def _score(job: tuple) -> dict:
    name, ref, deg, sr, metrics = job
    try:
        if ref is None:
            raise ValueError("no clean reference for this item (noisy-only set)")
        r, d = _load(ref, sr), _load(deg, sr)
    except Exception as e:  # unreadable file etc.: this item is NaN, the batch goes on
        return {"name": name, **{m: float("nan") for m in metrics},
                "errors": {m: f"load: {e}" for m in metrics}}
    return {"name": name, **compute_metrics(r, d, sr, metrics)}


def _jobs(items: Iterable, sr: int, metrics: tuple[str, ...]):
    for i, it in enumerate(items):
        if hasattr(it, "noisy") and hasattr(it, "clean"):  # qsa.data.Pair
            yield (it.name, it.clean, it.noisy, sr, metrics)
        elif len(it) == 3:
            yield (it[0], it[1], it[2], sr, metrics)
        elif len(it) == 2:
            yield (str(i), it[0], it[1], sr, metrics)
        else:
            raise ValueError(f"item {i}: expected (name, ref, deg), (ref, deg) or a Pair")


def summarize(items: list[dict], metrics: tuple[str, ...] = METRICS) -> MetricsResult:
    """Means over the items where each metric is finite, with those counts."""
    means, counts = {}, {}
    for m in metrics:
        v = np.array([it[m] for it in items if m in it], dtype=np.float64)
        ok = np.isfinite(v)
        counts[m] = int(ok.sum())
        means[m] = float(v[ok].mean()) if ok.any() else float("nan")
    return MetricsResult(items, means, counts)


def batch_metrics(items: Iterable, workers: int = 2, sr: int = 16000,
                  metrics: tuple[str, ...] = METRICS, progress: bool = True,
                  stall_timeout: float = 900.0) -> MetricsResult:
    """Score every item (in order) with ``workers`` processes (0: in this process).

    Workers are spawned (they never inherit torch's threads), so a script calling this with
    ``workers > 0`` needs the usual ``if __name__ == "__main__":`` guard. The batch always
    completes: an item whose worker crashed gets NaN and the reason, and when no item has
    finished for ``stall_timeout`` seconds the workers are killed and the items left get NaN
    ("worker stalled") instead of the call hanging.
    """
    from tqdm import tqdm

    jobs = list(_jobs(items, sr, tuple(metrics)))
    bar = tqdm(total=len(jobs), unit="file", desc="metrics", disable=not progress)
    try:
        if workers > 0 and len(jobs) > 1:
            results = _pool_scores(jobs, min(workers, len(jobs)), bar, stall_timeout)
        else:
            results = []
            for j in jobs:
                results.append(_score(j))
                bar.update(1)
    finally:
        bar.close()
    return summarize(results, tuple(metrics))


def _failed(job: tuple, reason: str) -> dict:
    name, _, _, _, metrics = job
    return {"name": name, **{m: float("nan") for m in metrics},
            "errors": {m: reason for m in metrics}}


def _pool_scores(jobs: list[tuple], n: int, bar, stall_timeout: float) -> list[dict]:
    from concurrent.futures import FIRST_COMPLETED, wait

    from qsa.workers import kill_pool, spawn_pool

    ex = spawn_pool(n)
    results: list[dict | None] = [None] * len(jobs)
    index = {ex.submit(_score, j): i for i, j in enumerate(jobs)}
    pending = set(index)
    try:
        while pending:
            done, pending = wait(pending, timeout=stall_timeout, return_when=FIRST_COMPLETED)
            if not done:  # nothing finished in stall_timeout: a hung worker, not a slow file
                for f in pending:
                    results[index[f]] = _failed(
                        jobs[index[f]], f"worker stalled (no result in {stall_timeout:.0f} s)")
                break
            for f in done:
                i = index[f]
                try:
                    results[i] = f.result()
                except Exception as e:  # the worker died (native crash, OOM kill)
                    results[i] = _failed(jobs[i], f"worker failed: {type(e).__name__}: {e}")
                bar.update(1)
    finally:
        if pending:  # stalled or interrupted: never wait on the workers
            kill_pool(ex)
        else:
            ex.shutdown()
    return results  # type: ignore[return-value]
