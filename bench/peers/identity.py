"""The noisy input itself, as a peer."""

from __future__ import annotations

import numpy as np

from .base import Peer


class Identity(Peer):
    """The noisy input itself: the floor every enhancer has to beat."""

    name = "noisy input"
    native_sr = None
    params = 0
    macs_per_second = 0.0
    algorithmic_latency_ms = 0.0
    artifact_bytes = 0
    sources = {"all": "no processing"}

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        return np.asarray(x, np.float32).copy()
