"""Quaternion transformer encoder: a stack of shared-score quaternion attention blocks.

A general-purpose sequence model built only from qsa.layers (QuaternionLinear projections,
QuaternionSelfAttention, quaternion feed-forward): the smallest complete model that the packed
file format, the quantiser and the exporters handle end to end, and the block the demo uses.

Cost of the default config (dim 64, 2 layers, 4 heads, ff x2, 16 -> 16 features):
56.1K params (a real-valued transformer of the same width: 214K), 0.11 MMAC per token.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..config import ModelConfig
from ..errors import ConfigError
from ..layers import QuaternionLinear, QuaternionSelfAttention
from .registry import register_model, register_preset


@dataclasses.dataclass(frozen=True)
class QTransformerConfig(ModelConfig):
    kind = "qtransformer"
    VERSION = 1

    in_features: int = 16
    out_features: int = 16
    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    ff_mult: int = 2
    score: str = "shared"
    causal: bool = False
    window: int | None = None

    def __post_init__(self):
        for name in ("in_features", "out_features", "dim"):
            v = getattr(self, name)
            if v <= 0 or v % 4:
                raise ConfigError(f"{name}={v} must be a positive multiple of 4 (quaternions)")
        if self.dim % (4 * self.num_heads):
            raise ConfigError(
                f"dim={self.dim} must be divisible by 4 * num_heads = {4 * self.num_heads}"
            )
        if self.score not in ("shared", "hamilton"):
            raise ConfigError(f"score={self.score!r}; expected 'shared' or 'hamilton'")
        if self.num_layers < 1 or self.ff_mult < 1:
            raise ConfigError("num_layers and ff_mult must be >= 1")


class QuaternionLayerNorm(nn.Module):
    """LayerNorm over each token's quaternion magnitudes, one gain per quaternion unit."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.n = dim // 4
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(self.n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x.reshape(*x.shape[:-1], 4, self.n)  # (..., 4, n)
        q = q - q.mean(dim=-1, keepdim=True)
        power = q.pow(2).sum(dim=-2, keepdim=True).mean(dim=-1, keepdim=True)  # (..., 1, 1)
        q = q * torch.rsqrt(power + self.eps) * self.gain
        return q.reshape(x.shape)


class QTransformerBlock(nn.Module):
    def __init__(self, cfg: QTransformerConfig):
        super().__init__()
        self.norm1 = QuaternionLayerNorm(cfg.dim)
        self.attn = QuaternionSelfAttention(
            cfg.dim, cfg.num_heads, cfg.score, cfg.causal, cfg.window
        )
        self.norm2 = QuaternionLayerNorm(cfg.dim)
        self.ff = nn.Sequential(
            QuaternionLinear(cfg.dim, cfg.ff_mult * cfg.dim),
            nn.GELU(),
            QuaternionLinear(cfg.ff_mult * cfg.dim, cfg.dim),
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class QTransformer(nn.Module):
    """(B, T, in_features) -> (B, T, out_features)."""

    def __init__(self, cfg: QTransformerConfig):
        super().__init__()
        self.config = cfg
        self.inp = QuaternionLinear(cfg.in_features, cfg.dim)
        self.blocks = nn.ModuleList(QTransformerBlock(cfg) for _ in range(cfg.num_layers))
        self.norm = QuaternionLayerNorm(cfg.dim)
        self.out = QuaternionLinear(cfg.dim, cfg.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)  # (B, T, dim)
        for blk in self.blocks:
            h = blk(h)
        return self.out(self.norm(h))


register_model(QTransformerConfig, QTransformer)
register_preset("qtransformer-small", QTransformerConfig)
