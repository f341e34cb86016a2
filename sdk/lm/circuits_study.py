"""The QK/OV learning-rate study in the circuits setting: single-layer attention-only models on a
task whose relevant tokens are known, trained on it together with text.

Model (one per run, ``OneLayerAttention``; E = width, H heads, r = circuit rank):

    n_t = RMSNorm(embed(x_t))                                             (B, T, E)
    s^h_tu = (R_t W_QK^h n_t) . (R_u n_u) / sqrt(E)    RoPE R on the E-wide query and key
    A^h = softmax_u<=t(s^h)                                               (B, H, T, T)
    y_t = embed(x_t) + sum_h W_OV^h sum_u A^h_tu n_u
    logits_t = RMSNorm(y_t) @ embed^T                                     (tied unembedding)

Each circuit matrix (E x E per head) is either "collapsed" (one free matrix) or "factorised"
(W^h = P^h Q^h with P^h: E x r, Q^h: r x E). At the default r = E both forms span the same
matrices and RoPE rotates the same E-wide vectors, so collapsed vs factorised differ only in the
parametrisation, not in rank or position coding (the LM preset's factorised circuit has rank
E / H and RoPE inside the heads). Initial matrices have the same scale in both forms (entries of
std 1/sqrt(E); the factors' entries (E r)^(-1/4)).

Task (``make_batch``): each batch is half copy sequences and half text windows. A copy sequence
is P random bytes followed by the same P bytes; the query at t = P + j (second copy) predicts
r_{j+1}, and the one relevant key is u = j + 1 = t - (P - 1), the byte to copy (the induction
position of ``qsa.lm.diagnostics.induction_mass``). One attention layer solves it with a
positional QK pattern at lag P - 1 and an identity-like OV circuit.

Optimiser: AdamW with groups qk, ov, embed (decayed) and gains (not decayed). A ratio rho sets
the multipliers qk = sqrt(rho), ov = 1/sqrt(rho) (geometric mean 1); each group's weight decay is
divided by its multiplier, so the decoupled decay per step (lr * wd in AdamW) is the same in
every group: the multipliers change the learning rates only.

Measured every ``eval_every`` steps on fixed held-out batches: copy-task loss on the second copy
(bits), text BPC, and the attention mass on the relevant key (max over heads, mean over
queries). "At equal loss" compares the runs' mass interpolated at common copy-loss levels
(``mass_at_loss``), so a ratio that learns faster is not credited for being further along.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..models.lm.block import RMSNorm, apply_rope, causal_mask, rope_angles
from .train import grouped_adamw


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    form: str = "collapsed"  # "collapsed" | "factorised", both circuits
    ratio: float = 1.0  # QK / OV learning-rate ratio
    seed: int = 0
    dim: int = 64
    heads: int = 2
    rank: int = 0  # 0: dim (matched rank, full)
    prefix: int = 32  # copy task: P random bytes, then the same P bytes (ctx = 2P)
    steps: int = 2000
    batch: int = 32
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.1
    eval_every: int = 100
    eval_batch: int = 64
    rope_base: float = 10000.0

    def __post_init__(self):
        if self.form not in ("collapsed", "factorised"):
            raise ConfigError(f"form={self.form!r}; expected 'collapsed' or 'factorised'")
        if self.ratio <= 0:
            raise ConfigError(f"ratio={self.ratio} must be > 0 (e.g. 0.25, 1, 4)")
        if self.dim % 2 or self.dim < 2:
            raise ConfigError(f"dim={self.dim} must be even for RoPE")
        for name in ("heads", "prefix", "steps", "batch", "eval_every", "eval_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.batch % 2:
            raise ConfigError(f"batch={self.batch} must be even (half copy task, half text)")

    @property
    def ctx(self) -> int:
        return 2 * self.prefix

    @property
    def circuit_rank(self) -> int:
        return self.rank or self.dim

    @property
    def name(self) -> str:
        return f"{self.form}-r{self.ratio:g}-s{self.seed}"


class Circuit(nn.Module):
    """H matrices E x E: one free matrix each (collapsed) or P Q of rank r (factorised)."""

    def __init__(self, heads: int, dim: int, form: str, rank: int):
        super().__init__()
        self.form = form
        if form == "collapsed":
            self.w = nn.Parameter(torch.randn(heads, dim, dim) / math.sqrt(dim))
        else:
            a = (dim * rank) ** -0.25
            self.p = nn.Parameter(torch.randn(heads, dim, rank) * a)
            self.q = nn.Parameter(torch.randn(heads, rank, dim) * a)

    def matrix(self) -> torch.Tensor:
        return self.w if self.form == "collapsed" else self.p @ self.q  # (H, E, E)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, [H,] T, E) -> W^h x per head (B, H, T, E)."""
        if x.dim() == 3:
            x = x.unsqueeze(1)
        return torch.matmul(x, self.matrix().transpose(-1, -2))


class OneLayerAttention(nn.Module):
    """Attention-only byte model with one layer of QK / OV circuits (see the module doc)."""

    def __init__(self, cfg: StudyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(256, cfg.dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.norm_in = RMSNorm(cfg.dim)
        self.norm_out = RMSNorm(cfg.dim)
        self.qk = Circuit(cfg.heads, cfg.dim, cfg.form, cfg.circuit_rank)
        self.ov = Circuit(cfg.heads, cfg.dim, cfg.form, cfg.circuit_rank)
        with torch.no_grad():  # the OV output starts small, as for residual outputs in the LMs
            (self.ov.w if cfg.form == "collapsed" else self.ov.p).mul_(0.1)
        self.last_attention: torch.Tensor | None = None

    def forward(self, tokens: torch.Tensor, keep_attention: bool = False) -> torch.Tensor:
        b, t = tokens.shape
        h = self.embed(tokens)  # (B, T, E)
        n = self.norm_in(h)
        cos, sin = rope_angles(torch.arange(t, device=tokens.device), self.cfg.dim,
                               self.cfg.rope_base)
        q = apply_rope(self.qk.apply(n), cos, sin)  # (B, H, T, E)
        k = apply_rope(n, cos, sin).unsqueeze(1)  # (B, 1, T, E)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.cfg.dim)  # (B, H, T, T)
        a = torch.softmax(s + causal_mask(t, tokens.device), dim=-1)
        if keep_attention:
            self.last_attention = a.detach()
        ctx = torch.matmul(a, n.unsqueeze(1))  # (B, H, T, E)
        y = h + self.ov.apply(ctx).sum(1)  # (B, T, E)
        return F.linear(self.norm_out(y), self.embed.weight)  # (B, T, 256)


def build_optimizer(model: OneLayerAttention, cfg: StudyConfig) -> torch.optim.AdamW:
    """qk / ov / embed / gains groups; decay per step lr * wd in every decayed group."""
    mult = {"qk": math.sqrt(cfg.ratio), "ov": 1 / math.sqrt(cfg.ratio), "embed": 1.0,
            "gains": 1.0}
    params = {"qk": list(model.qk.parameters()), "ov": list(model.ov.parameters()),
              "embed": [model.embed.weight],
              "gains": [model.norm_in.weight, model.norm_out.weight]}
    return grouped_adamw(params, mult, lr=cfg.lr, weight_decay=cfg.weight_decay,
                         betas=(0.9, 0.95), no_decay="gains")


def copy_batch(rng: np.random.Generator, batch: int, prefix: int) -> np.ndarray:
    r = rng.integers(0, 256, size=(batch, prefix))
    return np.concatenate([r, r], axis=1)  # (B, 2P)


def text_batch(rng: np.random.Generator, data: np.ndarray, batch: int, ctx: int) -> np.ndarray:
    starts = rng.integers(0, data.size - ctx, size=batch)
    return data[starts[:, None] + np.arange(ctx)[None, :]].astype(np.int64)  # (B, ctx)


def make_batch(step: int, cfg: StudyConfig, text: np.ndarray) -> torch.Tensor:
    """(batch, ctx) tokens for ``step``: copy sequences then text windows, drawn from
    rng([seed, step]) so a run is reproducible."""
    rng = np.random.default_rng([cfg.seed, step])
    half = cfg.batch // 2
    x = np.concatenate([copy_batch(rng, half, cfg.prefix),
                        text_batch(rng, text, half, cfg.ctx)], axis=0)
    return torch.from_numpy(x.astype(np.int64))


def relevant_mass(a: torch.Tensor, prefix: int) -> torch.Tensor:
    """Mass on the relevant key u = t - (P - 1) for second-copy queries t = P .. 2P - 2, per
    head (H,), averaged over the batch and queries, for maps (B, H, 2P, 2P)."""
    j = torch.arange(prefix - 1)
    return a[:, :, prefix + j, j + 1].mean(dim=(0, 2))


@torch.no_grad()
def evaluate(model: OneLayerAttention, cfg: StudyConfig, copy_x: torch.Tensor,
             text_x: torch.Tensor) -> dict:
    was = model.training
    model.eval()
    logits = model(copy_x, keep_attention=True)
    p = cfg.prefix
    lp = F.log_softmax(logits[:, p:-1], -1)  # predicting the second copy r_1 .. r_{P-1}
    copy_bits = -lp.gather(-1, copy_x[:, p + 1:].unsqueeze(-1)).mean().item() / math.log(2)
    mass = relevant_mass(model.last_attention, p)
    tl = model(text_x[:, :-1])
    text_bpc = F.cross_entropy(tl.reshape(-1, 256), text_x[:, 1:].reshape(-1)).item() \
        / math.log(2)
    model.train(was)
    return {"copy_bits": copy_bits, "text_bpc": text_bpc, "mass_best_head": mass.max().item(),
            "mass_mean": mass.mean().item()}


def train_run(cfg: StudyConfig, train_text: np.ndarray, val_text: np.ndarray) -> dict:
    """One run; returns its record with the curve of ``evaluate`` every eval_every steps."""
    torch.manual_seed(cfg.seed)
    model = OneLayerAttention(cfg)
    opt = build_optimizer(model, cfg)
    erng = np.random.default_rng([10_000 + cfg.seed])  # held-out batches, fixed per seed
    copy_x = torch.from_numpy(copy_batch(erng, cfg.eval_batch, cfg.prefix).astype(np.int64))
    text_x = torch.from_numpy(text_batch(erng, val_text, cfg.eval_batch, cfg.ctx + 1))
    curve = [{"step": 0, **evaluate(model, cfg, copy_x, text_x)}]
    for step in range(cfg.steps):
        frac = min(1.0, (step + 1) / max(1, cfg.warmup))
        decay = 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = cfg.lr * frac * (0.1 + 0.9 * decay) * g["lr_mult"]
        x = make_batch(step, cfg, train_text)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            curve.append({"step": step + 1, "train_bits": loss.item() / math.log(2),
                          **evaluate(model, cfg, copy_x, text_x)})
    return {"config": dataclasses.asdict(cfg), "name": cfg.name, "curve": curve,
            "final": curve[-1],
            "params": {"qk": sum(p.numel() for p in model.qk.parameters()),
                       "ov": sum(p.numel() for p in model.ov.parameters()),
                       "total": sum(p.numel() for p in model.parameters())}}


def mass_at_loss(curve: list[dict], level: float, key: str = "copy_bits") -> float | None:
    """Relevant-key mass (best head) where the run's ``key`` loss first falls to ``level``,
    linearly interpolated between evaluations; None if it never gets there."""
    for a, b in zip(curve, curve[1:], strict=False):
        if a[key] >= level >= b[key]:
            w = 0.0 if a[key] == b[key] else (a[key] - level) / (a[key] - b[key])
            return a["mass_best_head"] + w * (b["mass_best_head"] - a["mass_best_head"])
    return None


def loss_levels(runs: list[dict], n: int = 4, key: str = "copy_bits") -> list[float]:
    """n copy-loss levels that every run reaches: evenly spaced between the highest final loss
    (the slowest run's end) and the lowest starting loss."""
    start = min(r["curve"][0][key] for r in runs)
    end = max(min(c[key] for c in r["curve"]) for r in runs)
    if end >= start:
        return []
    return [start - (start - end) * (i + 1) / n for i in range(n)]
