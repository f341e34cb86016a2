"""Kuramoto attention mixer: tokens as banks of phase oscillators coupled by causal attention
(Nunley 2026, "Kuramoto Attention: Synchronizing Self-Attention on the Torus").

Each token t holds, per head h, n oscillator phases theta_t (angles on the n-torus), read from
its normed hidden state, plus a per-oscillator score gain g_t chosen by the token:

    theta_t^0 = W_theta x_t                          (B, H, T, n)
    g_t       = W_g x_t                              (B, H, T, n)

RoPE enters as a position-dependent phase drift: oscillator i of token t is *scored* at
psi_t,i = theta_t,i + omega_i t with the RoPE frequencies omega_i = base^(-i/n). For a fixed
number of steps s = 0 .. S-1 (all tokens update together, each only from tokens u <= t):

    scores    s_tu  = sum_i g_t,i cos(psi_u,i^s - psi_t,i^s) / sqrt(2n)   (gated cosine, relative)
    weights   A_tu  = softmax_u<=t(s_tu)                                  (causal softmax)
    mean      m_t   = sum_u A_tu exp(i theta_u^s)    (attention-weighted circular mean of the
                                                      raw phase states: the values)
    coupling  K_t   = Im(m_t exp(-i theta_t^s)) = sum_u A_tu sin(theta_u^s - theta_t^s)
    update    theta_t^{s+1} = theta_t^s + eta_{s,h} K_t

i.e. one explicit Euler step of the Kuramoto model d theta_t/dt = sum_u A_tu sin(theta_u -
theta_t) with a learned step size eta = softplus(rho) > 0 (one per step and head), moving each
oscillator along the tangent of the circle toward the circular mean of the phases it attends
to. The mixer output reads the final phases:

    y_t = W_o [cos theta_t^S, sin theta_t^S]          (B, T, E)

Switches (LMConfig fields; the defaults above are the paper's layer, each switch changes only
its own component, tests/test_lm_kuramoto.py):

    kuramoto_values  "raw"      values exp(i theta_u), coupling sin(theta_u - theta_t)   (paper)
                     "drifted"  values exp(i psi_u), coupling sin(theta_u - theta_t + omega
                                (u - t)): a lagged coupling (drift in keys *and* values; the form
                                of version-1 files, preset lm-kuramoto-<size>-lagged)
    kuramoto_drift   "score"    psi = theta + omega t in the score                        (paper)
                     "none"     scores on theta: no position information at all
    kuramoto_gate    "signed"   g = W_g x (negative gains score anti-aligned phases high)
                     "positive" g = softplus(W_g x)
                     "off"      g = 1 and no W_g (the preset gives its E^2 to the SwiGLU)
    kuramoto_steps   S = 1, 2, ... coupling steps

Implementation: cos psi, sin psi come from cos theta, sin theta and the block's RoPE cos/sin by
the angle-sum identities, so the gated cosine scores are one matmul of [g cos psi, g sin psi]
against [cos psi, sin psi]. The decode cache holds, for each step s, the keys [cos psi^s,
sin psi^s] and the values [cos theta^s, sin theta^s] of every past token ((B, H, L, 2n) each;
one tensor per step where keys and values coincide: the lagged form, or drift "none" with raw
values).

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
    record_phases: bool = False  # keep theta^0..theta^S and |m_t| per step for diagnostics

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.h, self.n, self.steps = cfg.num_heads, cfg.num_oscillators, cfg.kuramoto_steps
        self.raw_values = cfg.kuramoto_values == "raw"
        self.drift = cfg.kuramoto_drift == "score"
        self.gate = cfg.kuramoto_gate
        # keys == values (one cache tensor per step) when both are drifted or both raw
        self.shared_kv = self.drift != self.raw_values
        self.rope_dim = 2 * self.n  # the block hands over cos/sin(omega_i t), (T, n)
        self.phase_init_std = 1.0 / math.sqrt(cfg.dim)
        self.phase = nn.Linear(cfg.dim, self.h * self.n, bias=False)
        if self.gate != "off":
            self.qk_gate = nn.Linear(cfg.dim, self.h * self.n, bias=False)
        self.ov_o = nn.Linear(2 * self.h * self.n, cfg.dim, bias=False)
        # eta = softplus(rho) = 1 at init
        self.folded_eta: list[torch.Tensor] | None = None
        self.step_rho = nn.Parameter(torch.full((self.steps, self.h, 1, 1), math.log(math.e - 1)))
        self.last_phases: list[torch.Tensor] | None = None
        self.last_local_order: list[torch.Tensor] | None = None

    def init_extra(self) -> None:
        # phases of a normed input spread about 1 rad around the circle (std 0.02 would leave
        # every oscillator near angle 0, where cos is flat and the scores carry no signal)
        nn.init.normal_(self.phase.weight, std=self.phase_init_std)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.n).transpose(1, 2)  # (B, H, T, n)

    def _gain(self, x: torch.Tensor) -> torch.Tensor | None:
        """g (B, H, T, n), or None for gate "off" (g = 1)."""
        if self.gate == "off":
            return None
        g = self._split(self.qk_gate(x))
        return F.softplus(g) if self.gate == "positive" else g

    @staticmethod
    def _rotate(c, s, cos_w, sin_w):
        """cos, sin of (angle + omega t) from cos, sin of the angle (B, H, T, n) each."""
        return c * cos_w - s * sin_w, s * cos_w + c * sin_w

    def step_sizes(self) -> list[torch.Tensor]:
        """eta_s = softplus(rho_s), (H, 1, 1) per step; constants once ``fold()`` ran."""
        if self.folded_eta is not None:
            return self.folded_eta
        return [F.softplus(r) for r in self.step_rho.unbind(0)]

    def fold(self) -> None:
        """Freeze the step sizes into constants (for export: no softplus in the graph)."""
        self.folded_eta = [e.detach().clone() for e in self.step_sizes()]

    def _phases(self, theta, cos_w, sin_w):
        """(query, key, value) phase features of the current step, each (c, s) (B, H, T, n):
        the score side (psi or theta) and the value side (theta or psi)."""
        c, s = torch.cos(theta), torch.sin(theta)
        drifted = self._rotate(c, s, cos_w, sin_w)
        score = drifted if self.drift else (c, s)
        value = (c, s) if self.raw_values else drifted
        return score, value

    def _couple(self, theta, score, value, g, keys, values, mask, eta):
        """One Kuramoto step: queries at their score phases (B, H, Tq, n) against keys and
        values [cos, sin] (B, H, Tk, 2n); the tangent is taken at the value-side phase."""
        cq, sq = score
        q = torch.cat([cq, sq], dim=-1) if g is None else torch.cat([g * cq, g * sq], dim=-1)
        m, a = attention(q, keys, values, mask)  # m = [m_cos, m_sin] (B, H, Tq, 2n)
        self._keep(a)
        cv, sv = value
        coupling = m[..., self.n:] * cv - m[..., : self.n] * sv  # sum_u A sin(phi_u - phi_t)
        if self.record_phases and self.last_local_order is not None:
            local = torch.sqrt(m[..., : self.n] ** 2 + m[..., self.n:] ** 2)  # |m_t| (B,H,Tq,n)
            self.last_local_order.append(local.detach())
        return theta + eta * coupling

    def _out(self, theta):
        b, _, t, _ = theta.shape
        feats = torch.cat([torch.cos(theta), torch.sin(theta)], dim=-1)  # (B, H, T, 2n)
        return self.ov_o(feats.transpose(1, 2).reshape(b, t, 2 * self.h * self.n))  # (B, T, E)

    def forward(self, x, cos, sin):
        theta, g = self._split(self.phase(x)), self._gain(x)
        mask = causal_mask(x.shape[1], x.device)
        if self.record_phases:
            self.last_phases, self.last_local_order = [theta.detach()], []
        for eta in self.step_sizes():
            score, value = self._phases(theta, cos, sin)
            keys = torch.cat(score, dim=-1)  # (B, H, T, 2n)
            values = keys if self.shared_kv else torch.cat(value, dim=-1)
            theta = self._couple(theta, score, value, g, keys, values, mask, eta)
            if self.record_phases and self.last_phases is not None:
                self.last_phases.append(theta.detach())
        return self._out(theta)

    def init_cache(self, batch, cache_len):
        per_step = 1 if self.shared_kv else 2
        return tuple(torch.zeros(batch, self.h, cache_len, 2 * self.n)
                     for _ in range(self.steps * per_step))

    def forward_cached(self, x, cos, sin, index, cache):
        theta, g = self._split(self.phase(x)), self._gain(x)
        per_step = 1 if self.shared_kv else 2
        new = []
        for s, eta in enumerate(self.step_sizes()):
            score, value = self._phases(theta, cos, sin)
            keys = index.update(cache[per_step * s], torch.cat(score, dim=-1))  # (B, H, L, 2n)
            new.append(keys)
            values = keys
            if not self.shared_kv:
                values = index.update(cache[per_step * s + 1], torch.cat(value, dim=-1))
                new.append(values)
            theta = self._couple(theta, score, value, g, keys, values, index.mask, eta)
        return self._out(theta), tuple(new)

    def circuit_groups(self):
        # W_theta feeds both the scores and the values: it belongs to neither circuit alone
        return {"qk": [self.qk_gate.weight] if self.gate != "off" else [],
                "ov": [self.ov_o.weight]}
