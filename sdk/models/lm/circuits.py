"""QK / OV circuit mixer: softmax attention whose two circuits are factorised or collapsed.

Per head h (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"):

    QK circuit  s_tu = x_t^T W_QK^h x_u      factorised: W_QK^h = W_Q^h^T W_K^h (rank d = E/H)
                                             collapsed:  one full E x E matrix per head
    OV circuit  y_t  = sum_h W_OV^h sum_u A^h_tu x_u
                                             factorised: W_OV^h = W_O^h W_V^h (rank d)
                                             collapsed:  one full E x E matrix per head

with A^h = softmax(s^h / sqrt(width) + causal). RoPE rotates the query and key vectors: in the
factorised form q = W_Q x and k = W_K x (d wide); in the collapsed form q = W_QK x (E wide) and
k = x, so s_tu = (R_t W_QK x_t)^T (R_u x_u) = x_t^T W_QK^T R_{u-t} x_u stays relative.
The collapsed OV circuit sums the heads' context vectors through one (H E -> E) matrix.

Parameters live in the modules named ``qk_*`` and ``ov_*``: ``circuit_groups`` returns them so
the trainer can give each circuit its own learning-rate multiplier (--qk-lr-mult/--ov-lr-mult).

Cost per layer at the 1m preset (dim 128, 2 heads, both collapsed): QK 2 E^2 + OV 2 E^2 = 65.5K
params (the transformer's 4 E^2 at 4 heads) and MAC/token, plus 2 * H * T * E for the context.
"""

from __future__ import annotations

import torch
from torch import nn

from .block import LMConfig, Mixer, apply_rope, attention, causal_mask


class CircuitsMixer(Mixer):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        e, h = cfg.dim, cfg.num_heads
        self.e, self.h, self.d = e, h, cfg.head_dim
        self.qk_collapsed = cfg.qk == "collapsed"
        self.ov_collapsed = cfg.ov == "collapsed"
        self.rope_dim = e if self.qk_collapsed else self.d
        if self.qk_collapsed:
            self.qk_w = nn.Linear(e, h * e, bias=False)  # W_QK^h for every head
        else:
            self.qk_q = nn.Linear(e, e, bias=False)
            self.qk_k = nn.Linear(e, e, bias=False)
        if self.ov_collapsed:
            self.ov_w = nn.Linear(h * e, e, bias=False)  # [W_OV^1 ... W_OV^H]
        else:
            self.ov_v = nn.Linear(e, e, bias=False)
            self.ov_o = nn.Linear(e, e, bias=False)

    def _heads(self, x: torch.Tensor, n: int, w: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, w).transpose(1, 2)  # (B, n, T, w)

    def _qkv(self, x, cos, sin):
        if self.qk_collapsed:
            q = self._heads(self.qk_w(x), self.h, self.e)  # (B, H, T, E)
            k = x.view(x.shape[0], 1, x.shape[1], self.e)  # (B, 1, T, E): the token itself
        else:
            q = self._heads(self.qk_q(x), self.h, self.d)  # (B, H, T, d)
            k = self._heads(self.qk_k(x), self.h, self.d)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.ov_collapsed:
            v = x.view(x.shape[0], 1, x.shape[1], self.e)  # (B, 1, T, E)
        else:
            v = self._heads(self.ov_v(x), self.h, self.d)  # (B, H, T, d)
        return q, k, v

    def _out(self, y: torch.Tensor) -> torch.Tensor:
        b, h, t, w = y.shape  # (B, H, T, E or d)
        y = y.transpose(1, 2).reshape(b, t, h * w)  # (B, T, H*w)
        return self.ov_w(y) if self.ov_collapsed else self.ov_o(y)

    def forward(self, x, cos, sin):
        q, k, v = self._qkv(x, cos, sin)
        y, a = attention(q, k, v, causal_mask(x.shape[1], x.device))
        self._keep(a)
        return self._out(y)

    def init_cache(self, batch, cache_len):
        kh, kw = (1, self.e) if self.qk_collapsed else (self.h, self.d)
        vh, vw = (1, self.e) if self.ov_collapsed else (self.h, self.d)
        return torch.zeros(batch, kh, cache_len, kw), torch.zeros(batch, vh, cache_len, vw)

    def forward_cached(self, x, cos, sin, index, cache):
        q, k, v = self._qkv(x, cos, sin)
        k_all, v_all = index.update(cache[0], k), index.update(cache[1], v)
        y, a = attention(q, k_all, v_all, index.mask)
        self._keep(a)
        return self._out(y), (k_all, v_all)

    def circuit_groups(self):
        qk = [self.qk_w.weight] if self.qk_collapsed else [self.qk_q.weight, self.qk_k.weight]
        ov = [self.ov_w.weight] if self.ov_collapsed else [self.ov_v.weight, self.ov_o.weight]
        return {"qk": qk, "ov": ov}
