"""A reference enhancer whose output is known in closed form, for tests and demos.

``QuaternionLowpass``: a causal FIR low-pass (63 taps, 4 kHz cut-off at 16 kHz) written as
one ``QuaternionConv1d`` acting on real quaternions (the signal in the r component, i/j/k
zero; the weight's i/j/k components zero), so a Hamilton product reduces to the FIR and the
offline result is exactly ``scipy.signal.lfilter(taps, 1, x)``. It removes noise above 4 kHz
and keeps most speech energy: a stand-in for a trained enhancer until one ships.
Cost: 252 weights (63 used), 1.0 MMAC/s at 16 kHz; latency: one hop (8 ms) of framing plus
the linear-phase group delay of 31 samples (1.9 ms).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from qsa.layers import QuaternionConv1d

from .processors import REFERENCE_NAME  # noqa: F401  (the name `qsa live --model` takes)


def lowpass_taps(num_taps: int = 63, cutoff_hz: float = 4000.0, sr: int = 16000) -> np.ndarray:
    """Windowed-sinc (Hamming) low-pass taps, unit DC gain, float32 (num_taps,)."""
    n = np.arange(num_taps) - (num_taps - 1) / 2
    h = np.sinc(2 * cutoff_hz / sr * n) * np.hamming(num_taps)
    return (h / h.sum()).astype(np.float32)


class QuaternionLowpass(nn.Module):
    """Causal FIR low-pass as a quaternion convolution; offline and streaming share ``conv``."""

    def __init__(self, hop: int = 128, num_taps: int = 63, cutoff_hz: float = 4000.0):
        super().__init__()
        self.hop = hop
        self.sample_rate = 16000
        self.num_taps = num_taps
        self.taps = lowpass_taps(num_taps, cutoff_hz, self.sample_rate)
        # Frame collection (one hop) plus the linear-phase delay (num_taps - 1) / 2.
        self.algorithmic_latency_samples = hop + (num_taps - 1) // 2
        self.conv = QuaternionConv1d(4, 4, num_taps, bias=False)
        with torch.no_grad():
            self.conv.weight.zero_()  # (4, 1, 1, K): r, i, j, k components
            # conv1d is a cross-correlation: reversed taps give lfilter's convolution.
            self.conv.weight[0, 0, 0] = torch.from_numpy(self.taps[::-1].copy())
        self.eval()

    def _filter(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, K-1+T) real signal with causal context -> (B, T)."""
        q = F.pad(z.unsqueeze(1), (0, 0, 0, 3))  # (B, 4, K-1+T): [x, 0, 0, 0]
        return self.conv(q)[:, 0]  # (B, T): the r component

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        """Offline: wave (B, T) -> (B, T)."""
        return self._filter(F.pad(wave, (self.num_taps - 1, 0)))

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor]:
        return (torch.zeros(batch, self.num_taps - 1),)

    def step(self, frame: torch.Tensor, history: torch.Tensor):
        """frame (B, hop), history (B, K-1) -> (out (B, hop), new history (B, K-1))."""
        z = torch.cat([history, frame], dim=-1)  # (B, K-1+hop)
        return self._filter(z), z[:, -(self.num_taps - 1) :]
