"""The one place the bench gets its metrics from: a thin adapter over ``qsa.metrics``
(PESQ wb/nb, STOI, SI-SDR, CSIG/CBAK/COVL; ``batch_metrics`` scores in a spawned process
pool). A pair whose metric cannot be computed comes back NaN for that metric, with the reason
in ``errors``; the bench's means skip NaN and the report says how many items were scored.
"""

from __future__ import annotations

import numpy as np

SR = 16000
METRICS = ("pesq_wb", "pesq_nb", "stoi", "si_sdr", "csig", "cbak", "covl")


def backend() -> str:
    return "qsa.metrics.batch_metrics"


def si_sdr(ref: np.ndarray, est: np.ndarray) -> float:
    from qsa.metrics import si_sdr as _si_sdr

    return _si_sdr(ref, est)


def score_batch(
    refs, degs, sr: int = SR, workers: int = 2, which: tuple[str, ...] = METRICS
) -> list[dict]:
    """Per-pair metric dicts (``which`` keys + ``errors``), in order; ``workers`` <= 1 scores
    in this process, more in a process pool of that size."""
    from qsa.metrics import batch_metrics

    items = [(str(i), r, d) for i, (r, d) in enumerate(zip(refs, degs, strict=True))]
    res = batch_metrics(
        items,
        workers=workers if workers > 1 else 0,
        sr=sr,
        metrics=tuple(which),
        progress=False,
    )
    return [{k: it.get(k) for k in (*which, "errors")} for it in res.items]


def dnsmos_scores(y: np.ndarray, sr: int = SR) -> dict:
    """DNSMOS P.835 of one output (no reference): dnsmos_sig / _bak / _ovrl (NaN for a
    recording it cannot score, e.g. all silence)."""
    from qsa.metrics.dnsmos import dnsmos_item

    r = dnsmos_item("y", y, sr)
    return {k: r[k] for k in ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl")}
