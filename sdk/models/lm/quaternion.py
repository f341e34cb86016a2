"""Quaternion attention mixer: QuaternionLinear projections + QuaternionSelfAttention scores.

The mixer reuses qsa.layers.QuaternionSelfAttention (its q/k/v/out QuaternionLinear projections
and its ``attend``), adding RoPE and the static-shape cache. Per head a token holds d
quaternions; RoPE rotates each of the four components' d-vectors by the same angles, so both
score forms stay relative: <R_t q_a, R_u k_b> = q_a^T R_{u-t} k_b for every component pair.

    score="shared"   : s_tu = Re(q_t conj(k_u)) / sqrt(4d), one softmax, A applied to all four
                       value components                     (T * 4d MAC/token per head)
    score="hamilton" : S_tu = q_t (x) conj(k_u) / sqrt(4d), four softmaxes, Hamilton-product
                       aggregation y_t = sum_u A_tu (x) v_u  (4x the score and value MACs)

Cost per layer at the 1m preset (dim 128, 4 heads of 8 quaternions): projections 4 * E^2 / 4 =
16.4K params (a quarter of the transformer's); the preset widens the SwiGLU by dim so the whole
model stays parameter-matched.
"""

from __future__ import annotations

import torch

from ...layers import QuaternionSelfAttention
from .block import LMConfig, Mixer, attention, causal_mask


class QuaternionMixer(Mixer):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.attn = QuaternionSelfAttention(cfg.dim, cfg.num_heads, cfg.score, causal=True,
                                            bias=False)
        self.h = cfg.num_heads
        self.d = cfg.dim // (4 * cfg.num_heads)  # quaternions per head
        self.rope_dim = self.d

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, 4, d); cos/sin (T, d/2) shared by the four components."""
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)  # (T, 1, d/2)
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)

    def _qkv(self, x, cos, sin):
        a = self.attn
        q = self._rope(a._heads(a.q_proj(x)), cos, sin)  # (B, H, T, 4, d)
        k = self._rope(a._heads(a.k_proj(x)), cos, sin)
        return q, k, a._heads(a.v_proj(x))

    def _attend(self, q, k, v, mask):
        """q (B,H,Tq,4,d), k/v (B,H,Tk,4,d) -> (B, Tq, E)."""
        if self.attn.score == "shared":
            # Re(q conj k) = <q_flat, k_flat>: plain attention over the flattened 4d features
            # (the layer's ``attend`` computes the same with 5-d matmuls; this form exports
            # to XNNPACK in one piece)
            b, h, tq, _, d = q.shape
            tk = k.shape[2]
            y, w = attention(q.reshape(b, h, tq, 4 * d), k.reshape(b, h, tk, 4 * d),
                             v.reshape(b, h, tk, 4 * d), mask)
            self._keep(w)
            return self.attn.out_proj(self.attn._merge(y.view(b, h, tq, 4, d)))
        if self.record_attention:
            w = torch.softmax(self.attn.scores(q, k) + mask, dim=-1)  # (B, H, 4, Tq, Tk)
            self._keep(w.reshape(w.shape[0], -1, *w.shape[-2:]))  # (B, 4H, Tq, Tk)
        return self.attn.out_proj(self.attn._merge(self.attn.attend(q, k, v, mask)))

    def forward(self, x, cos, sin):
        q, k, v = self._qkv(x, cos, sin)
        return self._attend(q, k, v, causal_mask(x.shape[1], x.device))

    def init_cache(self, batch, cache_len):
        z = torch.zeros(batch, self.h, cache_len, 4 * self.d)
        return z, z.clone()

    def forward_cached(self, x, cos, sin, index, cache):
        q, k, v = self._qkv(x, cos, sin)
        b, h, t = k.shape[:3]
        k_all = index.update(cache[0], k.reshape(b, h, t, 4 * self.d))  # (B, H, L, 4d)
        v_all = index.update(cache[1], v.reshape(b, h, t, 4 * self.d))
        n = k_all.shape[2]
        y = self._attend(q, k_all.view(b, h, n, 4, self.d), v_all.view(b, h, n, 4, self.d),
                         index.mask)
        return y, (k_all, v_all)

    def circuit_groups(self):
        a = self.attn
        return {"qk": [a.q_proj.weight, a.k_proj.weight], "ov": [a.v_proj.weight,
                                                                a.out_proj.weight]}
