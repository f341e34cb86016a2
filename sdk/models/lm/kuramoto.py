"""Kuramoto attention mixer: tokens as banks of phase oscillators coupled by causal attention.

Each token t holds, per head h, n oscillator phases theta_t (angles on the n-torus), read from
its normed hidden state, plus a per-oscillator coupling gain g_t chosen by the token:

    theta_t^0 = W_theta x_t                          (B, H, T, n)
    g_t       = W_g x_t                              (B, H, T, n)

RoPE is a position-dependent phase drift: oscillator i of token t is seen at
psi_t,i = theta_t,i + omega_i t with the RoPE frequencies omega_i = base^(-i/n). For a fixed
number of steps s = 0 .. S-1 (all tokens update together, each only from tokens u <= t):

    scores    s_tu  = sum_i g_t,i cos(psi_u,i^s - psi_t,i^s) / sqrt(2n)      (gated cosine)
    weights   A_tu  = softmax_u<=t(s_tu)                                     (causal softmax)
    mean      m_t   = sum_u A_tu exp(i psi_u^s)       (attention-weighted circular mean; the
                                                       values are the raw phase states)
    coupling  K_t   = Im(m_t exp(-i psi_t^s)) = sum_u A_tu sin(psi_u^s - psi_t^s)
    update    theta_t^{s+1} = theta_t^s + eta_{s,h} K_t

i.e. one explicit Euler step of the Kuramoto model d theta_t/dt = sum_u A_tu sin(theta_u -
theta_t) with a learned step size eta = softplus(rho) > 0 (one per step and head), which moves
each oscillator along the tangent of the circle toward the circular mean of its context. The
drift cancels in the coupling only when omega (u - t) does, so attention and coupling are both
functions of relative position. The mixer output reads the final phases:

    y_t = W_o [cos theta_t^S, sin theta_t^S]          (B, T, E)

Implementation: cos psi, sin psi come from cos theta, sin theta and the block's RoPE cos/sin
by the angle-sum identities, so the gated cosine scores are one matmul of [g cos psi, g sin psi]
against [cos psi, sin psi]. The decode cache holds [cos psi^s, sin psi^s] of every past token
for each step s (S tensors of (B, H, L, 2n)).

Cost per layer at the 1m preset (dim 128, 4 heads x 32 oscillators, S=2): W_theta, W_g: 2 E^2,
W_o: 2 E^2 = 65.5K params (the transformer's 4 E^2) and MAC/token; the context costs
S * 2 * T * 2n * H MAC/token, 2 S times the transformer's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .block import LMConfig, Mixer, attention, causal_mask


class KuramotoMixer(Mixer):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.h, self.n, self.steps = cfg.num_heads, cfg.num_oscillators, cfg.kuramoto_steps
        self.rope_dim = 2 * self.n  # the block hands over cos/sin(omega_i t), (T, n)
        self.phase_init_std = 1.0 / math.sqrt(cfg.dim)
        self.phase = nn.Linear(cfg.dim, self.h * self.n, bias=False)
        self.qk_gate = nn.Linear(cfg.dim, self.h * self.n, bias=False)
        self.ov_o = nn.Linear(2 * self.h * self.n, cfg.dim, bias=False)
        # eta = softplus(rho) = 1 at init
        self.folded_eta: list[torch.Tensor] | None = None
        self.step_rho = nn.Parameter(torch.full((self.steps, self.h, 1, 1), math.log(math.e - 1)))

    def init_extra(self) -> None:
        # phases of a normed input spread about 1 rad around the circle (std 0.02 would leave
        # every oscillator near angle 0, where cos is flat and the scores carry no signal)
        nn.init.normal_(self.phase.weight, std=self.phase_init_std)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.n).transpose(1, 2)  # (B, H, T, n)

    def _drifted(self, theta, cos_w, sin_w):
        """cos psi, sin psi (B, H, T, n) each, for psi = theta + omega t."""
        c, s = torch.cos(theta), torch.sin(theta)
        return c * cos_w - s * sin_w, s * cos_w + c * sin_w

    def step_sizes(self) -> list[torch.Tensor]:
        """eta_s = softplus(rho_s), (H, 1, 1) per step; constants once ``fold()`` ran."""
        if self.folded_eta is not None:
            return self.folded_eta
        return [F.softplus(r) for r in self.step_rho.unbind(0)]

    def fold(self) -> None:
        """Freeze the step sizes into constants (for export: no softplus in the graph)."""
        self.folded_eta = [e.detach().clone() for e in self.step_sizes()]

    def _couple(self, theta, cp, sp, g, keys, mask, eta):
        """One Kuramoto step of queries at phases psi (cp = cos psi, sp = sin psi,
        (B, H, Tq, n)) against keys [cos psi_u, sin psi_u] (B, H, Tk, 2n)."""
        q = torch.cat([g * cp, g * sp], dim=-1)  # (B, H, Tq, 2n): gated query phases
        m, a = attention(q, keys, keys, mask)  # m = [m_cos, m_sin] (B, H, Tq, 2n)
        self._keep(a)
        coupling = m[..., self.n :] * cp - m[..., : self.n] * sp  # sum_u A sin(psi_u - psi_t)
        return theta + eta * coupling

    def _out(self, theta):
        b, _, t, _ = theta.shape
        feats = torch.cat([torch.cos(theta), torch.sin(theta)], dim=-1)  # (B, H, T, 2n)
        return self.ov_o(feats.transpose(1, 2).reshape(b, t, 2 * self.h * self.n))

    def forward(self, x, cos, sin):
        theta, g = self._split(self.phase(x)), self._split(self.qk_gate(x))
        mask = causal_mask(x.shape[1], x.device)
        for eta in self.step_sizes():
            cp, sp = self._drifted(theta, cos, sin)
            theta = self._couple(theta, cp, sp, g, torch.cat([cp, sp], dim=-1), mask, eta)
        return self._out(theta)

    def init_cache(self, batch, cache_len):
        return tuple(torch.zeros(batch, self.h, cache_len, 2 * self.n) for _ in range(self.steps))

    def forward_cached(self, x, cos, sin, index, cache):
        theta, g = self._split(self.phase(x)), self._split(self.qk_gate(x))
        new = []
        for s, eta in enumerate(self.step_sizes()):
            cp, sp = self._drifted(theta, cos, sin)
            keys = index.update(cache[s], torch.cat([cp, sp], dim=-1))  # (B, H, L, 2n)
            new.append(keys)
            theta = self._couple(theta, cp, sp, g, keys, index.mask, eta)
        return self._out(theta), tuple(new)

    def circuit_groups(self):
        return {"qk": [self.qk_gate.weight], "ov": [self.ov_o.weight]}
