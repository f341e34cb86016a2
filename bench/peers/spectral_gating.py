"""Spectral gating (``noisereduce``), run at the input rate with the library's defaults.

``stationary=False`` is the library's default mode (a noise floor tracked per frequency with a
2 s time constant, smoothed forwards and backwards); ``stationary=True`` estimates one noise
spectrum from the whole signal. Both need the whole utterance: no streaming latency figure.

No learned parameters. MAC/s is an estimate for the defaults (1024-point STFT, hop 256):
forward + inverse real FFT (~2.5 N log2 N real MACs each) plus the mask-smoothing 2-D filter
(65 x 7 taps at 16 kHz) applied directly, per frame.
"""

from __future__ import annotations

import numpy as np

from .base import Peer

N_FFT = 1024
HOP = N_FFT // 4


def estimate_macs_per_second(sr: int, freq_smooth_hz: float = 500, time_smooth_ms: float = 50):
    frames_per_s = sr / HOP
    fft = 2 * 2.5 * N_FFT * np.log2(N_FFT)
    bins = N_FFT // 2 + 1
    n_freq = int(freq_smooth_hz / (sr / N_FFT))
    n_time = int(time_smooth_ms / (HOP / sr * 1000))
    smooth = bins * (2 * n_freq + 1) * (2 * n_time + 1)
    return float(frames_per_s * (fft + smooth))


class SpectralGating(Peer):
    """noisereduce ``reduce_noise`` (``stationary`` False: the default, non-stationary)."""

    native_sr = None
    algorithmic_latency_ms = None  # offline: statistics over the whole utterance
    params = 0
    artifact_bytes = 0

    def __init__(self, stationary: bool = False, score_sr: int = 16000):
        self.stationary = bool(stationary)
        self.name = "noisereduce (stationary)" if stationary else "noisereduce"
        self.macs_per_second = estimate_macs_per_second(score_sr)
        self.sources = {
            "params": "no learned parameters",
            "macs_per_second": f"estimate for the default STFT at {score_sr} Hz (FFTs + mask "
            "smoothing, direct form)",
            "algorithmic_latency_ms": "offline: needs the whole utterance",
        }

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        import noisereduce

        y = noisereduce.reduce_noise(y=x, sr=sr, stationary=self.stationary, n_jobs=1)
        return np.asarray(y, np.float32)
