"""Speech-quality metrics: PESQ (wb/nb), STOI/ESTOI, SI-SDR, CSIG/CBAK/COVL, batched.

Importing this package loads numpy only; scipy, pesq and pystoi load on first use.
"""

from .batch import MetricsResult, batch_metrics, summarize
from .scores import METRICS, compute_metrics, pesq_score, si_sdr, stoi_score

__all__ = ["METRICS", "MetricsResult", "batch_metrics", "compute_metrics", "pesq_score",
           "si_sdr", "stoi_score", "summarize"]
