"""A small streaming quaternion model for exporter tests and benchmarks (not a product model).

2,080 params (hop 64, 32 channels), 7.6 kMAC per hop = 1.9 MMAC/s at 16 kHz, one hop (4 ms)
algorithmic latency.
frame (B, hop) -> QuaternionLinear -> 2 causal QuaternionConv1d (one depthwise) with PReLU/tanh
-> QuaternionLinear -> frame (B, hop). The conv caches are explicit state tensors; ``forward``
(offline, whole waveform) and ``step`` use the same modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from qsa.layers import QuaternionConv1d, QuaternionLinear


class ToyStreamingQNet(nn.Module):
    """Streaming quaternion toy: explicit conv-state caches, offline == streaming."""

    def __init__(self, hop: int = 64, channels: int = 32, kernel: int = 3):
        super().__init__()
        self.hop, self.channels, self.kernel = hop, channels, kernel
        self.inp = QuaternionLinear(hop, channels)
        self.conv1 = QuaternionConv1d(channels, channels, kernel)
        self.act1 = nn.PReLU(channels)
        self.conv2 = QuaternionConv1d(channels, channels, kernel, groups=channels // 4)
        self.out = QuaternionLinear(channels, hop)

    def _body(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, C, k-1+T) with causal context -> (B, C, T) after conv1; used by both paths."""
        return self.act1(self.conv1(z))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        b, n = wave.shape
        t = n // self.hop
        frames = wave[:, : t * self.hop].reshape(b, t, self.hop)  # (B, T, hop)
        z = self.inp(frames).transpose(1, 2)  # (B, C, T)
        z = self._body(F.pad(z, (self.kernel - 1, 0)))  # (B, C, T)
        z = torch.tanh(self.conv2(F.pad(z, (self.kernel - 1, 0))))  # (B, C, T)
        y = self.out(z.transpose(1, 2))  # (B, T, hop)
        return y.reshape(b, t * self.hop)  # (B, T * hop)

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.zeros(batch, self.channels, self.kernel - 1)
        return z, z.clone()

    def step(self, frame: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor):
        z = self.inp(frame).unsqueeze(-1)  # (B, C, 1)
        x1 = torch.cat([c1, z], dim=-1)  # (B, C, k)
        z = self._body(x1)  # (B, C, 1)
        x2 = torch.cat([c2, z], dim=-1)  # (B, C, k)
        z = torch.tanh(self.conv2(x2))  # (B, C, 1)
        y = self.out(z.squeeze(-1))  # (B, hop)
        return y, x1[..., 1:], x2[..., 1:]


class ToyStep(nn.Module):
    """The StepModule form: forward(frame, *state) -> (out, *new_state)."""

    def __init__(self, model: ToyStreamingQNet):
        super().__init__()
        self.model = model
        self.hop = model.hop

    def init_state(self, batch: int = 1):
        return self.model.init_state(batch)

    def forward(self, frame, c1, c2):
        return self.model.step(frame, c1, c2)
