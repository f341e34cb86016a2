"""The byte-level causal LM skeleton shared by every token mixer (config, block, model).

    tokens (B, T) bytes -> embed (tied) -> N x [x + mixer(RMSNorm(x)), x + SwiGLU(RMSNorm(x))]
    -> RMSNorm -> logits = h @ embed^T (B, T, 256)

Positions enter only through real-valued RoPE inside the mixer (rotation of feature pairs
(x_i, x_{i+d/2}) by angle pos * base^(-2i/d)); the Kuramoto mixer uses the same angles as a
position-dependent phase drift.

Mixers (one file each, same interface, see ``Mixer``): transformer.py, kuramoto.py,
circuits.py, quaternion.py. Every mixer has an offline ``forward`` over a causal sequence and a
``forward_cached`` over a static-shape cache of ``max_seq_len`` slots; the cache is written with
one-hot masks (multiply + add, no in-place writes, no slice_scatter), so the same graph exports
to ExecuTorch and LiteRT for both prefill (T new tokens) and decode (1 new token).

Cost of the presets (params are parameter-matched within 3% across mixers and within 0.1%
between transformer and every Kuramoto preset, see tests/test_lm_models.py and
tests/test_lm_kuramoto.py; MAC/token counts the weight matmuls, not the attention over the
context):
    lm-*-1m : dim 128, 5 layers, 4 heads, SwiGLU 352  ~1.04M params, ~1.0 MMAC/token
    lm-*-5m : dim 256, 6 layers, 8 heads, SwiGLU 704  ~4.88M params, ~4.8 MMAC/token
lm-kuramoto-<size> is the paper's layer (raw phases as values, drift only in the score);
lm-kuramoto-<size>-lagged is the earlier form (drifted phases as values).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ...config import ModelConfig
from ...errors import ConfigError
from ...layers.attention import bmm4

MIXERS = ("transformer", "kuramoto", "circuits", "quaternion")
SIZES = ("1m", "5m")
NEG = -1e9  # additive mask value: finite, so exported graphs stay free of inf arithmetic
KURAMOTO_CHOICES = {
    "kuramoto_values": ("raw", "drifted"),
    "kuramoto_drift": ("score", "none"),
    "kuramoto_gate": ("signed", "positive", "off"),
}
# The Kuramoto form of version-1 files (and of the docs' results before the paper form): drifted
# phases as keys *and* values, i.e. a lagged coupling. Preset lm-kuramoto-<size>-lagged.
KURAMOTO_LAGGED = {"kuramoto_values": "drifted", "kuramoto_drift": "score",
                   "kuramoto_gate": "signed"}


@dataclasses.dataclass(frozen=True)
class LMConfig(ModelConfig):
    """One config for every mixer; fields that a mixer does not use are ignored by it."""

    kind = "lm"
    VERSION = 2  # 2 added the Kuramoto switches; version-1 dicts load via upgrade_config_dict

    mixer: str = "transformer"
    vocab_size: int = 256
    dim: int = 128
    num_layers: int = 5
    num_heads: int = 4
    ff_hidden: int = 352
    max_seq_len: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    # kuramoto: oscillators per head (default dim // num_heads) and coupling steps S; the
    # defaults are the paper's layer, the other values its ablations (see kuramoto.py):
    #   kuramoto_values: "raw" phases as values (update = sum A sin(theta_u - theta_t)) or
    #                    "drifted" phases (sum A sin(theta_u - theta_t + omega (u - t)), lagged)
    #   kuramoto_drift:  RoPE-like drift omega (u - t) in the "score" or "none" (no position)
    #   kuramoto_gate:   per-oscillator score gain g = W_g x "signed", softplus(W_g x)
    #                    "positive", or "off" (g = 1, no W_g)
    oscillators: int = 0
    kuramoto_steps: int = 2
    kuramoto_values: str = "raw"
    kuramoto_drift: str = "score"
    kuramoto_gate: str = "signed"
    # circuits: each of the QK and OV circuits is "factorised" (W_Q W_K^T, W_O W_V) or
    # "collapsed" (one W_QK, one W_OV per head)
    qk: str = "factorised"
    ov: str = "factorised"
    # quaternion: "shared" (one real score) or "hamilton" (four component scores)
    score: str = "shared"

    def __post_init__(self):
        if self.mixer not in MIXERS:
            raise ConfigError(f"mixer={self.mixer!r}; expected one of {MIXERS}")
        for name in ("vocab_size", "dim", "num_layers", "num_heads", "ff_hidden", "max_seq_len",
                     "kuramoto_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.dim % self.num_heads:
            raise ConfigError(
                f"dim={self.dim} is not divisible by num_heads={self.num_heads}; "
                "pick a head count that divides the width"
            )
        if (self.dim // self.num_heads) % 2:
            raise ConfigError(
                f"head width dim/num_heads={self.dim // self.num_heads} must be even for RoPE"
            )
        for name in ("qk", "ov"):
            if getattr(self, name) not in ("factorised", "collapsed"):
                raise ConfigError(
                    f"{name}={getattr(self, name)!r}; expected 'factorised' or 'collapsed'"
                )
        for name, allowed in KURAMOTO_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.score not in ("shared", "hamilton"):
            raise ConfigError(f"score={self.score!r}; expected 'shared' or 'hamilton'")
        if self.mixer == "quaternion":
            d = self.dim // (4 * self.num_heads) if self.dim % (4 * self.num_heads) == 0 else 1
            if self.dim % (4 * self.num_heads) or d % 2:
                raise ConfigError(
                    f"quaternion mixer needs dim={self.dim} divisible by 8 * num_heads = "
                    f"{8 * self.num_heads} (whole quaternions per head, even width for RoPE)"
                )
        if self.oscillators < 0 or self.oscillators % 2:
            raise ConfigError(f"oscillators={self.oscillators} must be 0 (auto) or even")
        if self.rope_base <= 1.0:
            raise ConfigError(f"rope_base={self.rope_base} must be > 1")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def num_oscillators(self) -> int:
        return self.oscillators or self.head_dim


def upgrade_config_dict(d: dict) -> dict:
    """A saved LM config dict brought to the current version: version 1 had no Kuramoto switches
    and computed the lagged form, so it gets ``KURAMOTO_LAGGED`` (weights load unchanged)."""
    if not isinstance(d, dict) or d.get("kind") != LMConfig.kind or d.get("version") != 1:
        return d
    fields = {**KURAMOTO_LAGGED, **d.get("fields", {})}
    return {**d, "version": LMConfig.VERSION, "fields": fields}


# -- shared pieces -----------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_buffer("avg", torch.full((1, dim), 1.0 / dim), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # mean of squares as a (E -> 1) matmul: XNNPACK delegates it (a last-axis mean it
        # does not, which would split the exported graph at every norm)
        ms = F.linear(x * x, self.avg)  # (..., 1)
        return x * torch.rsqrt(ms + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def rope_angles(positions: torch.Tensor, dim: int, base: float) -> tuple[torch.Tensor, ...]:
    """cos, sin of pos * base^(-2i/dim), each (T, dim/2), for integer positions (T,)."""
    exps = torch.arange(0, dim // 2, dtype=torch.float32, device=positions.device)
    inv = base ** (-exps * 2.0 / dim)  # (dim/2,)
    ang = positions.to(torch.float32).unsqueeze(-1) * inv  # (T, dim/2)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+h}) of the last axis (..., T, 2h) by the angles (T, h)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]  # (..., T, h) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def causal_mask(t: int, device: torch.device | None = None) -> torch.Tensor:
    """Additive (T, T) mask keeping u <= t."""
    i = torch.arange(t, device=device)
    return torch.where(i.view(1, -1) <= i.view(-1, 1), 0.0, NEG)


@dataclasses.dataclass
class CacheIndex:
    """Where ``forward_cached`` writes and what it may read, for new tokens at ``positions``.

    write: (Tn, L) one-hot rows, slot j gets new token i where write[i, j] = 1;
    keep:  (L,) 1 for the slots that keep their old content;
    mask:  (Tn, L) additive mask, 0 where slot j <= position of new token i.
    """

    write: torch.Tensor
    keep: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def at(cls, positions: torch.Tensor, cache_len: int) -> CacheIndex:
        slots = torch.arange(cache_len, device=positions.device).view(1, -1)  # (1, L)
        pos = positions.view(-1, 1)  # (Tn, 1)
        write = (slots == pos).to(torch.float32)  # (Tn, L)
        keep = 1.0 - write.sum(0)  # (L,)
        mask = torch.where(slots <= pos, 0.0, NEG)  # (Tn, L)
        return cls(write, keep, mask)

    def update(self, cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """cache (B, H, L, D), new (B, H, Tn, D) -> cache with the new rows in their slots."""
        if new.shape[2] == 1:  # decode: a broadcast multiply, no matmul
            placed = self.write.view(-1, 1) * new  # (L, 1) * (B, H, 1, D) -> (B, H, L, D)
        else:
            placed = bmm4(self.write.t().expand(new.shape[0], new.shape[1], -1, -1), new)
        return cache * self.keep.view(-1, 1) + placed


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q (B, H, Tq, D) . k (B, H|1, Tk, D) -> (B, H, Tq, Tk). One key head shared by all
    query heads (the collapsed QK circuit) is computed as k @ q^T then transposed: the
    LiteRT converter folds the q @ k^T form's reshapes into a rank-4 BATCH_MATMUL it then
    rejects ("invalid output rank, expected 3 but got 4")."""
    bsz, h, m, d = q.shape
    if k.shape[1] == 1 and h > 1:
        n = k.shape[2]
        r = torch.bmm(k.reshape(bsz, n, d), q.reshape(bsz, h * m, d).transpose(1, 2))
        return r.transpose(1, 2).reshape(bsz, h, m, n)  # (B, N, H Tq) -> (B, H, Tq, N)
    return bmm4(q, k.transpose(-1, -2))  # k @ q^T here measured slower on both runtimes


def attention(q, k, v, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention q (B,H,Tq,D), k (B,H|1,Tk,D), v (B,H|1,Tk,Dv) -> (out, weights)."""
    s = _scores(q, k) * (1.0 / math.sqrt(q.shape[-1])) + mask  # (B, H, Tq, Tk)
    a = torch.softmax(s, dim=-1)
    return bmm4(a, v), a


class Mixer(nn.Module):
    """Interface of a token mixer. ``record_attention = True`` keeps the last attention
    weights (B, H, Tq, Tk) in ``last_attention`` for diagnostics."""

    record_attention: bool = False
    last_attention: torch.Tensor | None = None
    rope_dim: int = 0  # width the block computes RoPE angles for

    def forward(self, x, cos, sin):  # (B, T, E) -> (B, T, E)
        raise NotImplementedError

    def init_cache(self, batch: int, cache_len: int) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def forward_cached(self, x, cos, sin, index: CacheIndex, cache):
        raise NotImplementedError

    def init_extra(self) -> None:
        """Mixer-specific initialisation, run after the model's generic one."""

    def circuit_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters of the QK and OV circuits (for learning-rate multipliers)."""
        return {}

    def _keep(self, a: torch.Tensor) -> None:
        if self.record_attention:
            self.last_attention = a.detach()


def make_mixer(cfg: LMConfig) -> Mixer:
    from . import circuits, kuramoto, quaternion, transformer

    return {
        "transformer": transformer.TransformerMixer,
        "kuramoto": kuramoto.KuramotoMixer,
        "circuits": circuits.CircuitsMixer,
        "quaternion": quaternion.QuaternionMixer,
    }[cfg.mixer](cfg)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.norm1 = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mixer = make_mixer(cfg)
        self.norm2 = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ff = SwiGLU(cfg.dim, cfg.ff_hidden)

    def forward(self, x, cos, sin):
        x = x + self.mixer(self.norm1(x), cos, sin)
        return x + self.ff(self.norm2(x))

    def forward_cached(self, x, cos, sin, index, cache):
        y, cache = self.mixer.forward_cached(self.norm1(x), cos, sin, index, cache)
        x = x + y
        return x + self.ff(self.norm2(x)), cache


class CausalLM(nn.Module):
    """Byte-level causal LM: tokens (B, T) int64 in [0, 256) -> logits (B, T, 256)."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.rope_dim = self.blocks[0].mixer.rope_dim
        self._init_weights()

    def _init_weights(self) -> None:
        std = 0.02
        resid = std / math.sqrt(2 * self.config.num_layers)
        nn.init.normal_(self.embed.weight, std=std)
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                last = name.endswith(("w2", "ov_o", "ov_w", "out"))
                nn.init.normal_(m.weight, std=resid if last else std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for blk in self.blocks:
            blk.mixer.init_extra()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _angles(self, positions: torch.Tensor):
        return rope_angles(positions, self.rope_dim, self.config.rope_base)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.config.max_seq_len:
            raise ConfigError(
                f"sequence of {t} tokens exceeds max_seq_len={self.config.max_seq_len}; "
                "use shorter windows or a config with a larger max_seq_len"
            )
        cos, sin = self._angles(torch.arange(t, device=tokens.device))
        h = self.embed(tokens)  # (B, T, E)
        for blk in self.blocks:
            h = blk(h, cos, sin)
        return F.linear(self.norm(h), self.embed.weight)  # (B, T, V), tied

    # -- static-shape cache (prefill and decode) ---------------------------------------------
    def init_cache(self, batch: int = 1, cache_len: int | None = None) -> tuple[torch.Tensor, ...]:
        n = cache_len or self.config.max_seq_len
        return tuple(t for blk in self.blocks for t in blk.mixer.init_cache(batch, n))

    def forward_cached(self, tokens: torch.Tensor, start: torch.Tensor,
                       cache: tuple[torch.Tensor, ...]):
        """tokens (B, Tn) at positions start..start+Tn-1 (start: int64 scalar tensor) ->
        (logits (B, Tn, V), new cache). The cache has a fixed number of slots."""
        tn = tokens.shape[1]
        positions = start.view(1) + torch.arange(tn, device=tokens.device)  # (Tn,)
        cache_len = cache[0].shape[-2]
        index = CacheIndex.at(positions, cache_len)
        cos, sin = self._angles(positions)
        h = self.embed(tokens)
        per = len(cache) // len(self.blocks)
        out: list[torch.Tensor] = []
        for i, blk in enumerate(self.blocks):
            h, c = blk.forward_cached(h, cos, sin, index, tuple(cache[i * per:(i + 1) * per]))
            out.extend(c)
        return F.linear(self.norm(h), self.embed.weight), tuple(out)

    def set_record_attention(self, on: bool) -> None:
        for blk in self.blocks:
            blk.mixer.record_attention = on
            blk.mixer.last_attention = None

    def attention_maps(self) -> list[torch.Tensor]:
        return [blk.mixer.last_attention for blk in self.blocks]

    def set_record_phases(self, on: bool) -> None:
        """Kuramoto mixers keep their phases theta^0..theta^S (B, H, T, n) per layer."""
        for blk in self.blocks:
            if hasattr(blk.mixer, "record_phases"):
                blk.mixer.record_phases = on
                blk.mixer.last_phases = blk.mixer.last_local_order = None


# -- presets -------------------------------------------------------------------------------

_BASE = {
    "1m": dict(dim=128, num_layers=5, num_heads=4, ff_hidden=352),
    "5m": dict(dim=256, num_layers=6, num_heads=8, ff_hidden=704),
}


def lm_config(mixer: str, size: str = "1m", **overrides) -> LMConfig:
    """The parameter-matched preset of ``mixer`` at ``size``; overrides replace fields."""
    if size not in _BASE:
        raise ConfigError(f"size={size!r}; expected one of {SIZES}")
    if mixer not in MIXERS:
        raise ConfigError(f"mixer={mixer!r}; expected one of {MIXERS}")
    kw = dict(_BASE[size], mixer=mixer)
    if mixer == "circuits":
        # collapsed circuits cost dim^2 per head: two heads give the transformer's 4 dim^2
        kw.update(num_heads=2, qk="collapsed", ov="collapsed")
    if mixer == "quaternion":
        # quaternion projections hold 1/4 of the weights: the 3 dim^2 saved go to the SwiGLU
        kw.update(ff_hidden=kw["ff_hidden"] + kw["dim"])
    if mixer == "kuramoto" and overrides.get("kuramoto_gate") == "off" \
            and "ff_hidden" not in overrides:
        # no W_g: its dim^2 per layer go to the SwiGLU (3 dim per hidden unit), matched < 0.1%
        dim = overrides.get("dim", kw["dim"])
        kw.update(ff_hidden=kw["ff_hidden"] + round(dim / 3))
    kw.update(overrides)
    return LMConfig(**kw)
