"""Softmax attention mixer: the RoPE + SwiGLU transformer baseline.

    q = W_Q x, k = W_K x, v = W_V x                    per head (B, H, T, d), d = dim / H
    A = softmax(RoPE(q) RoPE(k)^T / sqrt(d) + causal)   (B, H, T, T)
    y = W_O concat_h(A v)

Cost at the 1m preset (dim 128, 4 heads): 4 dim^2 = 65.5K params and MAC/token per layer, plus
2 * T * dim MAC/token for the scores and the weighted sum over a context of T.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .block import LMConfig, Mixer, apply_rope, attention, causal_mask


class TransformerMixer(Mixer):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.h, self.d = cfg.num_heads, cfg.head_dim
        self.rope_dim = self.d
        self.qk_q = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.qk_k = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.ov_v = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.ov_o = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d).transpose(1, 2)  # (B, H, T, d)

    def _qkv(self, x, cos, sin):
        q = apply_rope(self._split(self.qk_q(x)), cos, sin)
        k = apply_rope(self._split(self.qk_k(x)), cos, sin)
        return q, k, self._split(self.ov_v(x))

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = y.shape
        return self.ov_o(y.transpose(1, 2).reshape(b, t, self.h * self.d))  # (B, T, E)

    def forward(self, x, cos, sin):
        q, k, v = self._qkv(x, cos, sin)
        if self.record_attention:
            y, a = attention(q, k, v, causal_mask(x.shape[1], x.device))
            self._keep(a)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self._out(y)

    def init_cache(self, batch, cache_len):
        z = torch.zeros(batch, self.h, cache_len, self.d)
        return z, z.clone()

    def forward_cached(self, x, cos, sin, index, cache):
        q, k, v = self._qkv(x, cos, sin)
        k_all, v_all = index.update(cache[0], k), index.update(cache[1], v)  # (B, H, L, d)
        y, a = attention(q, k_all, v_all, index.mask)
        self._keep(a)
        return self._out(y), (k_all, v_all)

    def circuit_groups(self):
        return {"qk": [self.qk_q.weight, self.qk_k.weight], "ov": [self.ov_v.weight,
                                                                    self.ov_o.weight]}
