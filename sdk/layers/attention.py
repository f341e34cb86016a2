"""Quaternion self-attention: one shared real score, or four Hamilton component scores.

Input and output are (B, T, E) with E = 4 * H * d features laid out as [r|i|j|k] blocks
(see qsa.layers.hamilton). Q, K, V and the output projection are QuaternionLinear layers.
Per head, a token holds d quaternions q = (q_r, q_i, q_j, q_k), each component a d-vector.

``score="shared"`` (ours): one real score per token pair,
    s_tu = Re(q_t . conj(k_u)) / sqrt(4d) = sum_c <q_t,c, k_u,c> / sqrt(4d),
one softmax, and the same weights A_tu applied to all four value components:
    y_t = sum_u A_tu v_u.                      score MACs: T^2 * 4d, 1 softmax.

``score="hamilton"`` (Tay et al. 2019, quaternion transformer): the quaternion score
    S_tu = q_t (x) conj(k_u) / sqrt(4d)        (4 components, each a sum of 4 dot products),
one softmax per component, and a Hamilton-product value aggregation
    y_t = sum_u A_tu (x) v_u.                  score MACs: 4 * T^2 * 4d, 4 softmaxes.

Masks: ``causal`` keeps u <= t; ``window=W`` keeps t - u < W (and |t - u| < W when not
causal). With ``causal`` and a window, ``step`` runs one token at a time against a fixed-shape
cache of the last W - 1 keys and values, equal to the offline forward.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from .hamilton import RECOMBINE
from .quaternion import QuaternionLinear

Score = Literal["shared", "hamilton"]
_NEG = -1e9  # additive mask value: finite, so exported graphs stay free of inf arithmetic


def bmm4(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (B, Ha, M, K) @ b (B, Hb, K, N) with Hb in {Ha, 1} -> (B, Ha, M, N) as 3-d batched
    matmuls (4-d matmul exports with expand copies that XNNPACK does not take)."""
    bsz, ha, m, k = a.shape
    n = b.shape[-1]
    if b.shape[1] == 1:  # one key/value head shared by all query heads: fold heads into rows
        return torch.bmm(a.reshape(bsz, ha * m, k), b.reshape(bsz, k, n)).view(bsz, ha, m, n)
    return torch.bmm(a.reshape(bsz * ha, m, k), b.reshape(bsz * ha, k, n)).view(bsz, ha, m, n)


def _conj_score_keys(k: torch.Tensor) -> torch.Tensor:
    """For k (..., 4, d) return K4 (..., 4 out-comp, 4*d) such that the c-th component of
    q (x) conj(k) equals <q_flat, K4[c]> with q_flat = q.reshape(..., 4*d)."""
    kc = k * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=k.dtype).view(4, 1)  # conj(k)
    rows = []
    for c in range(4):
        # component c of q (x) kc = sum over (a, b, s) of s * q_a * kc_b  -> weight on q_a
        parts = [None] * 4
        for a, b, s in RECOMBINE[c]:
            parts[a] = kc[..., b, :] if s > 0 else -kc[..., b, :]
        rows.append(torch.cat(parts, dim=-1))
    return torch.stack(rows, dim=-2)


class QuaternionSelfAttention(nn.Module):
    """Multi-head quaternion self-attention (see module docstring)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int = 1,
        score: Score = "shared",
        causal: bool = False,
        window: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        if embed_dim % (4 * num_heads):
            raise ValueError(
                f"embed_dim={embed_dim} must be divisible by 4 * num_heads = {4 * num_heads} "
                "(each head holds whole quaternions in each [r|i|j|k] block)"
            )
        if score not in ("shared", "hamilton"):
            raise ValueError(f"score={score!r}; expected 'shared' or 'hamilton'")
        if window is not None and window < 1:
            raise ValueError(f"window={window}; expected a positive number of tokens or None")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_quaternions = embed_dim // (4 * num_heads)
        self.score = score
        self.causal = causal
        self.window = window
        # additive mask of the streaming cache's empty slots; an int8 export sets a small
        # value (-16: exp(-16) ~ 1e-7) so the masked scores share one int8 range with the rest
        self.mask_value = _NEG
        self.q_proj = QuaternionLinear(embed_dim, embed_dim, bias)
        self.k_proj = QuaternionLinear(embed_dim, embed_dim, bias)
        self.v_proj = QuaternionLinear(embed_dim, embed_dim, bias)
        self.out_proj = QuaternionLinear(embed_dim, embed_dim, bias)

    # (B, T, E) with E = [r|i|j|k] x (H x d)  ->  (B, H, T, 4, d)
    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        x = x.reshape(b, t, 4, self.num_heads, self.head_quaternions)  # (B, T, 4, H, d)
        return x.permute(0, 3, 1, 2, 4)  # (B, H, T, 4, d)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        b, h, t, _, d = y.shape  # (B, H, T, 4, d)
        return y.permute(0, 2, 3, 1, 4).reshape(b, t, 4 * h * d)  # (B, T, E)

    def mask(self, t_q: int, t_k: int, offset: int = 0) -> torch.Tensor:
        """Additive (t_q, t_k) mask; query i sits at absolute position offset + i."""
        qi = torch.arange(t_q).view(-1, 1) + offset
        ki = torch.arange(t_k).view(1, -1)
        keep = torch.ones(t_q, t_k, dtype=torch.bool)
        if self.causal:
            keep &= ki <= qi
        if self.window is not None:
            keep &= (qi - ki) < self.window
            if not self.causal:
                keep &= (ki - qi) < self.window
        return torch.where(keep, 0.0, _NEG)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Scaled scores: (B, H, Tq, Tk) for "shared", (B, H, 4, Tq, Tk) for "hamilton"."""
        b, h, tq, _, d = q.shape
        tk = k.shape[2]
        scale = 1.0 / math.sqrt(4 * d)
        qf = q.reshape(b, h, tq, 4 * d)  # (B, H, Tq, 4d)
        if self.score == "shared":
            kf = k.reshape(b, h, tk, 4 * d)  # Re(q conj k) = <q_flat, k_flat>
            return bmm4(qf, kf.transpose(-1, -2)) * scale  # (B, H, Tq, Tk)
        k4 = _conj_score_keys(k).permute(0, 1, 3, 2, 4)  # (B, H, 4, Tk, 4d)
        return (qf.unsqueeze(2) @ k4.transpose(-1, -2)) * scale  # (B, H, 4, Tq, Tk)

    def attend(self, q, k, v, mask) -> torch.Tensor:
        """q (B,H,Tq,4,d), k/v (B,H,Tk,4,d), additive mask broadcastable to the scores (None:
        every key visible)."""
        b, h, tq, _, d = q.shape
        tk = k.shape[2]
        s = self.scores(q, k)
        if mask is not None:
            s = s + mask
        if self.score == "shared":
            a = torch.softmax(s, dim=-1)  # one softmax for all four components
            y = bmm4(a, v.reshape(b, h, tk, 4 * d))  # (B, H, Tq, 4d)
            return y.reshape(b, h, tq, 4, d)
        a = torch.softmax(s, dim=-1)  # four softmaxes, one per score component
        # Hamilton aggregation: P[a, b] = A_a @ V_b in one matmul, then the signed recombination
        vf = v.reshape(b, h, tk, 4 * d)  # (B, H, Tk, 4d) as [b-comp, d]
        p = a @ vf.unsqueeze(2)  # (B, H, 4 a-comp, Tq, 4d)
        p = p.reshape(b, h, 4, tq, 4, d)  # (B, H, a, Tq, b, d)
        outs = []
        for c in range(4):
            acc = None
            for ac, bc, sg in RECOMBINE[c]:
                term = p[:, :, ac, :, bc]
                acc = (
                    (term if sg > 0 else -term)
                    if acc is None
                    else (acc + term if sg > 0 else acc - term)
                )
            outs.append(acc)
        return torch.stack(outs, dim=3)  # (B, H, Tq, 4, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"QuaternionSelfAttention expected (B, T, {self.embed_dim}), got {tuple(x.shape)}"
            )
        t = x.shape[1]
        q, k, v = (self._heads(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.window is not None and t > 2 * self.block_size(self.window):
            y = self._attend_banded(q, k, v)
        else:
            unmasked = not self.causal and (self.window is None or t <= self.window)
            y = self.attend(q, k, v, None if unmasked else self.mask(t, t))
        return self.out_proj(self._merge(y))

    @staticmethod
    def block_size(window: int) -> int:
        """Queries per block of the banded path (long sequences with a bounded window)."""
        return max(window, 256)

    def _attend_banded(self, q, k, v) -> torch.Tensor:
        """The windowed attention of a long sequence, one block of queries at a time against
        the keys its window can reach: the same result as the full (T, T) mask (masked keys
        get exactly zero weight either way) in O(T x (block + W)) memory instead of O(T^2)
        (10 min of qcgan-35k frames would need ~90 GB of scores)."""
        t, w = q.shape[2], self.window
        n = self.block_size(w)
        outs = []
        for s in range(0, t, n):
            e = min(s + n, t)
            k0 = max(0, s - (w - 1))
            k1 = e if self.causal else min(t, e + w - 1)
            mask = self.mask(e - s, k1 - k0, offset=s - k0)
            outs.append(self.attend(q[:, :, s:e], k[:, :, k0:k1], v[:, :, k0:k1], mask))
        return torch.cat(outs, dim=2)

    # -- streaming -----------------------------------------------------------------------
    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fixed-shape cache: keys, values (B, W-1, E) and a validity mask (B, W-1)."""
        if not self.causal or self.window is None:
            raise ValueError(
                "streaming needs causal=True and a bounded window=W (the cache holds W-1 tokens)"
            )
        n = self.window - 1
        z = torch.zeros(batch, n, self.embed_dim)
        return z, z.clone(), torch.zeros(batch, n)

    def step(self, x: torch.Tensor, state):
        """One token x (B, 1, E) against the cache -> (y (B, 1, E), new state)."""
        k_cache, v_cache, valid = state
        k_all = torch.cat([k_cache, self.k_proj(x)], dim=1)  # (B, W, E)
        v_all = torch.cat([v_cache, self.v_proj(x)], dim=1)
        valid_all = torch.cat([valid, torch.ones_like(x[:, :, 0])], dim=1)  # (B, W)
        mask = ((1.0 - valid_all) * self.mask_value).view(x.shape[0], 1, 1, -1)  # (B, 1, 1, W)
        if self.score == "hamilton":
            mask = mask.unsqueeze(2)  # (B, 1, 1, 1, W) against (B, H, 4, 1, W)
        q = self._heads(self.q_proj(x))
        y = self.attend(q, self._heads(k_all), self._heads(v_all), mask)
        y = self.out_proj(self._merge(y))
        return y, (k_all[:, 1:], v_all[:, 1:], valid_all[:, 1:])
