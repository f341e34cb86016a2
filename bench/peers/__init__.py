"""Peers the bench compares qsa's enhancers with, behind one interface.

Every peer has ``enhance(x: float32 mono, sr) -> float32`` (same length, same rate, aligned
with ``x``) and its cost: ``name``, ``params``, ``native_sr``, ``algorithmic_latency_ms``
(None: offline), ``macs_per_second``, ``artifact_bytes``, and ``sources`` saying where each
figure comes from. A plain folder imported by ``bench/se_peers.py`` and ``tests/test_peers.py``;
not part of the installed package.
"""

from __future__ import annotations

from .base import Peer, fit_length, measure_delay, resample

PEER_NAMES = ("noisy", "rnnoise", "deepfilternet3", "noisereduce", "noisereduce-stationary")


def get_peer(name: str) -> Peer:
    """A fresh peer by short name (one of PEER_NAMES); imports its library lazily."""
    if name == "noisy":
        from .identity import Identity

        return Identity()
    if name == "rnnoise":
        from .rnnoise import RNNoise

        return RNNoise()
    if name == "deepfilternet3":
        from .deepfilternet import DeepFilterNet3

        return DeepFilterNet3()
    if name in ("noisereduce", "noisereduce-stationary"):
        from .spectral_gating import SpectralGating

        return SpectralGating(stationary=name.endswith("stationary"))
    raise ValueError(f"unknown peer {name!r}; expected one of {PEER_NAMES}")


__all__ = ["PEER_NAMES", "Peer", "fit_length", "get_peer", "measure_delay", "resample"]
