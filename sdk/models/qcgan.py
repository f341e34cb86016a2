"""QC-GAN: Quaternion Conformer GAN generators for speech enhancement (16 kHz).

Cost, measured (trainable params; MACs with torch.utils.flop_counter.FlopCounterMode, MACs =
flops / 2: streaming step x hops/s, STFT/iSTFT basis matmuls included, elementwise ops not
counted; offline forward on 1 s for the non-causal model, torch.stft/irfft not counted; per-hop
latency: eager PyTorch fp32, torch.set_num_threads(1), 200 hops after 20 warm-up hops, on the
shared 2-core dev CPU at load average ~10: median wall time and median thread CPU time):

    preset              params   MMAC/s   algorithmic latency     step / hop (wall, cpu)
    qcgan-35k           34,662     36.9   16 ms (256 / 128 hop)   28.7 ms, 11.4 ms / 8 ms
    qcgan-0.89m-causal  894,752     596   20 ms (320 / 160 hop)   7.3 ms, 7.3 ms / 10 ms
    qcgan-0.89m         894,752     597   offline (whole utterance look-ahead), 1 s in 0.04 s
    qcgan-35k df_taps=2 34,682     37.1   16 ms (no look-ahead: past frames only)

``df_taps=K`` (deep filtering, off in the presets) adds 2K outputs to the complex decoder's
1x1 head: 10 K params (+20 at K=2) and 4 x 2K x F MACs per hop (+0.26 MMAC/s at K=2, 129
bins, counted above), plus the filter itself in the DSP, 4 x K real MACs per bin and hop
(+0.13 MMAC/s at K=2, elementwise, not counted), and a (2, K, F) history state (+516 floats).

The eager step is bound by op overhead (~4.4K aten ops per 35k step, the quaternion packed
path's recombinations and the norms), not by its 0.3 MMAC; exported graphs (qsa.export) are
the real-time path. Streaming state of qcgan-35k: 6,367 floats (25 KB). Its step converts
with litert_torch.convert to an fp32 .tflite of builtin ops only (FULLY_CONNECTED, CONV_2D,
DEPTHWISE_CONV_2D, BATCH_MATMUL, SOFTMAX, LOG/EXP/SQRT/RSQRT, LOGISTIC, slicing/reshapes)
that matches PyTorch within 1e-6. int8 exports keep the DSP (STFT, power-law compression and
their inverses: ``analysis`` / ``synthesis``) on the host and quantise only ``NetworkStep``:
every op int8 on TFLite-Micro; streamed SQNR against fp32 with the shipped weights 25 dB on
LiteRT / TFLM and 29 dB on ExecuTorch, int8 PESQ-WB within 0.005 of fp32 (qsa.export.split).

Presets: qcgan-35k: n_fft 256 / hop 128 (129 bins -> 65 -> 33 -> 17 through encoder channels
8, 8, 12), one TS block, band time Conformer 204 -> 80 features (4 heads, causal attention
over 32 frames = 256 ms, causal depthwise kernel 15), frequency Conformer over 17 bins at 12
channels. qcgan-0.89m: n_fft 320 / hop 160 (161 -> 81 -> 41 -> 21 bins through channels 16,
32, 48), two TS blocks, band time Conformers 1008 -> 256 features (4 heads, ffn x3, depthwise
kernel 15 over frames), frequency Conformers over 21 bins at 48 channels (2 heads, kernel 5),
full attention over time; -causal: causal attention over 50 frames (0.5 s).

Signal path (one set of modules for offline ``forward`` and streaming ``step``):

    wave -> STFT (sqrt-Hann, WOLA) -> per bin the pure quaternion (0, |X|^c, Re_c, Im_c) with
    power-law compression c = 0.3 (Re_c + i Im_c = |X|^c e^{i phase}: magnitude and phase ride
    in one quaternion) -> encoder (quaternion convs along frequency, stride 2 per stage)
    -> TS-Conformer blocks (a time Conformer, then a frequency Conformer; quaternion linear /
    depthwise-conv layers, shared-score QuaternionSelfAttention) -> two decoders (quaternion
    upsampling convs with encoder skips): a mask decoder (bounded learnable sigmoid, applied
    to |X|^c with the noisy phase) and a complex decoder (a residual added to Re_c, Im_c)
    -> decompress -> iSTFT (overlap-add) -> wave.

Deep filtering (``df_taps`` K > 0; DeepFilterNet's complex FIR over past frames, for the
harmonics of voiced speech at low SNR): the complex decoder also predicts K complex taps
C_k(t, f) per bin, bounded by tanh to |Re|, |Im| < 1 (so the filter cannot blow up early in
training, and an int8 graph's output range is fixed), and with X_c = |X|^c e^{i phase} the
noisy compressed spectrum (zero before the first frame)

    Y_c(t, f) = mask X_c(t, f) + res(t, f) + sum_{k=1..K} C_k(t, f) X_c(t - k, f).

Past frames only: no added latency. Head channels: 0, 1 the residual, 2k, 2k + 1 (Re, Im)
of C_k; the tap channels start at zero, so a model with taps loaded from one without
(``qsa train --init ... --set df_taps=K``) starts as exactly that model. Streaming keeps the
K past X_c frames as DSP state (with the STFT buffers; ``n_dsp_state`` = 3, see init_state).

Post-filter (``gain_exponent`` g > 1, DSP only): before decompression each bin's
Y_c is scaled by min(1, |Y_c| / |X_c|)^(g - 1), so a linear gain G < 1 becomes G^g (more of
the noise the network already attenuates is removed; on the real-voice test split qcgan-35k
at g = 1.5: PESQ-WB +0.074, STOI -0.010, docs/training.md stage 18). Two log / exp per bin and
hop; no parameters, no state. A model file records its exponent in the config (shipped:
qcgan-35k 1.5, the 0.89M models 1).

Choices:

* Time context lives only in the time Conformers; encoder/decoder kernels span frequency
  only (time kernel 1), so they need no state. The frequency Conformer attends over the bins
  of one frame (not temporal: fine for a causal model).
* ``time_path="bins"`` (CMGAN): the time Conformer runs on every frequency bin's sequence
  (shared weights). MACs = 4 x params x bins x frames/s. At 0.89M parameters that is ~15
  GMAC/s and ~14 s per training step (batch 4 x 1 s) on a 2-core CPU, so the presets do
  not use it (it stays available for GPU-trained configs).
* ``time_path="band"`` (both presets): the time Conformer runs once per frame on the
  flattened band features (C x F' -> band_dim). Its MACs are 4 x params x frames/s, which is
  what lets a 35K-parameter model stay under 40 MMAC/s (per-bin time modelling at that size
  would cost more than 1 GMAC/s) and keeps qcgan-0.89m at 0.6 GMAC/s, 25x less than a
  per-bin 0.89M model, so that it trains on a CPU.
* Causal models: causal windowed attention (a fixed cache of ``window - 1`` past frames) and
  causal depthwise convs (a cache of ``kernel - 1`` frames); zero frames of look-ahead. The
  only delay is the STFT's n_fft - hop; algorithmic latency = n_fft samples.
* The streaming STFT is matmuls against fixed DFT basis buffers (qsa.audio.stft): the step
  uses real arithmetic, cat/slice state updates and no data-dependent control flow, so it
  exports with static shapes (``StepModule``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..audio.host_dsp import HostDSP
from ..audio.stft import Stft
from ..config import ModelConfig
from ..errors import ConfigError
from ..layers import (
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionLinear,
    QuaternionSelfAttention,
)
from .qtransformer import QuaternionLayerNorm
from .registry import register_model, register_preset

__all__ = [
    "QCGAN",
    "Enhanced",
    "NetworkStep",
    "QCGANConfig",
    "StepModule",
    "count_parameters",
    "offline_macs_per_second",
    "streaming_macs_per_second",
]

_EPS = 1e-8


@dataclasses.dataclass(frozen=True)
class QCGANConfig(ModelConfig):
    """Hyperparameters of a QC-GAN generator (saved with the weights).

    ``df_taps``: deep filtering (DeepFilterNet). K > 0 adds K causal complex taps per bin,
    predicted by the complex decoder and bounded by tanh, over the noisy compressed spectra
    of the K previous frames: Y_c += sum_k C_k(t, f) X_c(t - k, f) (see the module doc). 0
    (the presets) = off, the model as before; K in [0, 16].

    ``gain_exponent``: the DSP's post-filter (PercepNet / DeepFilterNet's idea of over-
    attenuating what is already attenuated, here as a power of the gain): each
    bin's linear gain G = |Y| / |X| < 1 becomes G^gain_exponent; gains >= 1 stay. 1.0 (the
    default) = off. A DSP number, not a weight (chosen for a shipped model on the validation
    split and recorded in its file); training with it set (``qsa train --set
    gain_exponent=G``) trains the network through it."""

    kind = "qcgan"
    VERSION = 1

    sample_rate: int = 16000
    n_fft: int = 256
    hop: int = 128
    compress: float = 0.3  # power-law exponent c of |X|^c
    enc_channels: tuple[int, ...] = (8, 8, 12)  # per encoder stage (each halves the bins)
    num_blocks: int = 1  # TS-Conformer blocks (time + frequency)
    time_path: str = "band"  # "band": per-frame flattened features; "bins": per bin
    band_dim: int = 80  # width of the band time Conformer (time_path="band")
    time_heads: int = 4
    freq_heads: int = 1
    ffn_mult: int = 2
    time_kernel: int = 15  # depthwise conv kernel over frames (causal: cache of k-1)
    freq_kernel: int = 3  # depthwise conv kernel over bins
    causal: bool = True
    window: int | None = 32  # time attention span in frames (required when causal)
    mask_beta: float = 2.0  # the mask lies in (0, mask_beta)
    # deep filtering (DeepFilterNet): K complex taps per bin over the K past noisy compressed
    # frames, predicted by the complex decoder (2 + 2K channels), bounded by tanh; 0 = off
    df_taps: int = 0
    # inference post-filter in the DSP: each bin's linear gain G = |Y| / |X|, where below 1,
    # becomes G^gain_exponent (> 1 removes more of what the network already attenuates);
    # 1.0 = off
    gain_exponent: float = 1.0

    def __post_init__(self):
        if self.sample_rate <= 0:
            raise ConfigError(f"sample_rate={self.sample_rate}; expected a positive rate in Hz")
        if self.n_fft < 8 or self.n_fft % 4 or self.hop < 1 or self.n_fft % self.hop:
            raise ConfigError(
                f"n_fft={self.n_fft}, hop={self.hop}: n_fft must be a multiple of 4 and of hop "
                "(e.g. n_fft=256, hop=128)"
            )
        if not 0.05 <= self.compress <= 1.0:
            raise ConfigError(f"compress={self.compress}; use an exponent in [0.05, 1] (0.3)")
        if not self.enc_channels or any(c <= 0 or c % 4 for c in self.enc_channels):
            raise ConfigError(
                f"enc_channels={self.enc_channels}: give one or more positive multiples of 4 "
                "(quaternion channels), e.g. (8, 8, 16)"
            )
        f = self.n_fft // 2 + 1
        for _ in self.enc_channels:
            if f < 3 or f % 2 == 0:
                raise ConfigError(
                    f"n_fft={self.n_fft} gives {self.n_fft // 2 + 1} bins, which cannot be halved "
                    f"{len(self.enc_channels)} times through odd sizes; use fewer encoder stages "
                    "or n_fft = 2^k or 2^k * 10 (256, 320, 512)"
                )
            f = (f + 1) // 2
        if self.num_blocks < 1 or self.ffn_mult < 1:
            raise ConfigError(f"num_blocks={self.num_blocks}, ffn_mult={self.ffn_mult}: use >= 1")
        if self.time_path not in ("band", "bins"):
            raise ConfigError(f"time_path={self.time_path!r}; expected 'band' or 'bins'")
        width = self.band_dim if self.time_path == "band" else self.enc_channels[-1]
        if width % (4 * self.time_heads):
            raise ConfigError(
                f"time width {width} must be divisible by 4 * time_heads = {4 * self.time_heads}"
            )
        if self.enc_channels[-1] % (4 * self.freq_heads):
            raise ConfigError(
                f"enc_channels[-1]={self.enc_channels[-1]} must be divisible by 4 * freq_heads "
                f"= {4 * self.freq_heads}"
            )
        for name in ("time_kernel", "freq_kernel"):
            k = getattr(self, name)
            if k < 1 or k % 2 == 0:
                raise ConfigError(f"{name}={k}; use an odd kernel size >= 1 (e.g. 3)")
        if self.causal and (self.window is None or self.window < 2):
            raise ConfigError(
                f"causal=True needs a bounded attention window >= 2 frames (got {self.window}); "
                "the streaming step keeps window - 1 past frames, e.g. window=32"
            )
        if self.window is not None and self.window < 1:
            raise ConfigError(f"window={self.window}; expected None or >= 1 frames")
        if self.mask_beta <= 0:
            raise ConfigError(f"mask_beta={self.mask_beta}; expected > 0 (CMGAN uses 2.0)")
        if isinstance(self.df_taps, bool) or not isinstance(self.df_taps, int) or not (
            0 <= self.df_taps <= 16
        ):
            raise ConfigError(
                f"df_taps={self.df_taps!r}; expected an integer number of past frames in "
                "[0, 16] for the deep filter (0 = off, e.g. 2)"
            )
        g = self.gain_exponent
        if isinstance(g, bool) or not isinstance(g, int | float) or not 1.0 <= g <= 4.0:
            raise ConfigError(
                f"gain_exponent={g!r}; expected a number in [1, 4] for the post-filter "
                "(1 = off, e.g. 1.3)"
            )

    @property
    def n_freq(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def inner_freq(self) -> int:
        """Bins after the encoder (each stage maps F -> (F + 1) // 2)."""
        f = self.n_freq
        for _ in self.enc_channels:
            f = (f + 1) // 2
        return f


class Enhanced(NamedTuple):
    """Offline output for training: waveform and spectra (complex, (B, F, T))."""

    wave: torch.Tensor  # (B, N)
    spec: torch.Tensor  # (B, F, T) enhanced STFT
    spec_compressed: torch.Tensor  # (B, F, T) enhanced |Y|^c e^{i phase}


# -- building blocks ---------------------------------------------------------------------------
class QuaternionFeedForward(nn.Module):
    """LN -> QLinear(C, mC) -> SiLU -> QLinear(mC, C)."""

    norm_feeds = (("norm", ("up",)),)  # qsa.export.rewrite.fold_norm_gains

    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.norm = QuaternionLayerNorm(dim)
        self.up = QuaternionLinear(dim, mult * dim)
        self.down = QuaternionLinear(mult * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(self.norm(x))))


class QuaternionConvModule(nn.Module):
    """Conformer conv module: LN -> QLinear -> SiLU -> depthwise QConv1d -> LN -> SiLU ->
    QLinear, over the sequence axis (causal: left context only, cache of kernel - 1)."""

    norm_feeds = (("norm", ("pw1",)),)  # qsa.export.rewrite.fold_norm_gains

    def __init__(self, dim: int, kernel: int, causal: bool):
        super().__init__()
        self.dim, self.kernel, self.causal = dim, kernel, causal
        self.norm = QuaternionLayerNorm(dim)
        self.pw1 = QuaternionLinear(dim, dim)
        # non-causal, odd kernel: the conv pads symmetrically itself, so an exported graph has
        # no separate pad op (XNNPACK leaves a quantised pad outside its delegate)
        self._conv_pads = not causal and kernel % 2 == 1
        pad = (kernel - 1) // 2 if self._conv_pads else 0
        self.dw = QuaternionConv1d(dim, dim, kernel, groups=dim // 4, padding=pad)
        self.norm2 = QuaternionLayerNorm(dim)
        self.pw2 = QuaternionLinear(dim, dim)

    def _pre(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.pw1(self.norm(x))).transpose(1, 2)  # (N, C, L)

    def _post(self, z: torch.Tensor) -> torch.Tensor:
        return self.pw2(F.silu(self.norm2(z.transpose(1, 2))))  # (N, L, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self._pre(x)  # (N, C, L)
        if not self._conv_pads:
            k = self.kernel - 1
            z = F.pad(z, (k, 0) if self.causal else (k // 2, k // 2))
        return self._post(self.dw(z))

    def init_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.dim, self.kernel - 1)  # (N, C, k-1)

    def step(self, x: torch.Tensor, cache: torch.Tensor):
        z = torch.cat([cache, self._pre(x)], dim=-1)  # (N, C, k)
        return self._post(self.dw(z)), z[..., 1:]


class QuaternionConformer(nn.Module):
    """Macaron Conformer on (N, L, C): x + FFN/2, + MHSA, + conv, + FFN/2, LN."""

    # the attention norm feeds only the q, k, v projections (qsa.export.rewrite.fold_norm_gains)
    norm_feeds = (("attn_norm", ("attn.q_proj", "attn.k_proj", "attn.v_proj")),)

    def __init__(
        self, dim: int, heads: int, ffn_mult: int, kernel: int, causal: bool, window: int | None
    ):
        super().__init__()
        self.ff1 = QuaternionFeedForward(dim, ffn_mult)
        self.attn_norm = QuaternionLayerNorm(dim)
        self.attn = QuaternionSelfAttention(dim, heads, "shared", causal, window)
        self.conv = QuaternionConvModule(dim, kernel, causal)
        self.ff2 = QuaternionFeedForward(dim, ffn_mult)
        self.norm = QuaternionLayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(self.attn_norm(x))
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))

    def init_state(self, n: int) -> tuple[torch.Tensor, ...]:
        """(keys, values, valid) attention cache + conv cache."""
        return (*self.attn.init_state(n), self.conv.init_state(n))

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]):
        """x (N, 1, C) -> (N, 1, C), new state of the same shapes."""
        k_cache, v_cache, valid, conv_cache = state
        x = x + 0.5 * self.ff1(x)
        a, (k_cache, v_cache, valid) = self.attn.step(self.attn_norm(x), (k_cache, v_cache, valid))
        x = x + a
        c, conv_cache = self.conv.step(x, conv_cache)
        x = x + c
        return self.norm(x + 0.5 * self.ff2(x)), (k_cache, v_cache, valid, conv_cache)


class TSBlock(nn.Module):
    """Time Conformer (per bin or on the flattened band) then frequency Conformer."""

    def __init__(self, cfg: QCGANConfig):
        super().__init__()
        c, fi = cfg.enc_channels[-1], cfg.inner_freq
        self.band = cfg.time_path == "band"
        self.channels, self.inner_freq = c, fi
        width = cfg.band_dim if self.band else c
        if self.band:
            self.band_in = QuaternionLinear(c * fi, width)
            self.band_out = QuaternionLinear(width, c * fi)
        self.time = QuaternionConformer(
            width, cfg.time_heads, cfg.ffn_mult, cfg.time_kernel, cfg.causal, cfg.window
        )
        self.freq = QuaternionConformer(
            c, cfg.freq_heads, cfg.ffn_mult, cfg.freq_kernel, False, None
        )

    # (B, C, T, F') <-> time sequences
    def _to_time(self, h: torch.Tensor) -> torch.Tensor:
        b, c, t, f = h.shape
        if self.band:  # keep the [r|i|j|k] blocks: unit (c', f) of component a -> block a
            z = h.reshape(b, 4, c // 4, t, f).permute(0, 3, 1, 2, 4)  # (B, T, 4, C/4, F')
            return self.band_in(z.reshape(b, t, c * f))  # (B, T, D)
        return h.permute(0, 3, 2, 1).reshape(b * f, t, c)  # (B F', T, C)

    def _from_time(self, z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        b, c, t, f = like.shape
        if self.band:
            z = self.band_out(z).reshape(b, t, 4, c // 4, f)  # (B, T, 4, C/4, F')
            return like + z.permute(0, 2, 3, 1, 4).reshape(b, c, t, f)  # (B, C, T, F')
        return z.reshape(b, f, t, c).permute(0, 3, 2, 1)  # (B, C, T, F')

    def _freq(self, h: torch.Tensor) -> torch.Tensor:
        b, c, t, f = h.shape
        z = self.freq(h.permute(0, 2, 3, 1).reshape(b * t, f, c))  # (B T, F', C)
        return z.reshape(b, t, f, c).permute(0, 3, 1, 2)  # (B, C, T, F')

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self._freq(self._from_time(self.time(self._to_time(h)), h))

    def time_batch(self, batch: int) -> int:
        return batch if self.band else batch * self.inner_freq

    def init_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        return self.time.init_state(self.time_batch(batch))

    def step(self, h: torch.Tensor, state):
        """h (B, C, 1, F') -> (B, C, 1, F'), new time-Conformer state."""
        z, state = self.time.step(self._to_time(h), state)
        return self._freq(self._from_time(z, h)), state


class LearnableSigmoid(nn.Module):
    """beta * sigmoid(slope_f * x), one slope per frequency bin (CMGAN)."""

    def __init__(self, n_freq: int, beta: float):
        super().__init__()
        self.beta = beta
        self.slope = nn.Parameter(torch.ones(n_freq))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.beta * torch.sigmoid(self.slope * x)


class QuaternionUpsample(nn.Module):
    """Frequency upsampling F -> 2F - 1 of (B, C_in, T, F): the stride-2, kernel-3 transposed
    conv in polyphase form (even bins: 1 tap, odd bins: 2 taps), so the same MACs and weights
    but only ordinary convs (a transposed conv lowered wrongly in LiteRT)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.even = QuaternionConv2d(in_channels, out_channels, (1, 1))
        self.odd = QuaternionConv2d(in_channels, out_channels, (1, 2))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        even = self.even(h)  # (B, C, T, F): output bins 0, 2, .., 2F - 2
        odd = self.odd(h)  # (B, C, T, F - 1): bins 1, 3, ..
        # + one filler bin, dropped below: a concat, not a pad (XNNPACK delegates concats but
        # leaves a quantised pad outside; TFLite: CONCATENATION instead of PAD, same count)
        odd = torch.cat([odd, odd[..., :1]], dim=-1)
        b, c, t, f = even.shape
        y = torch.stack([even, odd], dim=-1).reshape(b, c, t, 2 * f)  # (B, C, T, 2F)
        return y[..., : 2 * f - 1]  # (B, C, T, 2F - 1)


class Decoder(nn.Module):
    """Quaternion frequency upsampling with additive encoder skips -> one quaternion per bin
    -> ``out`` real channels (1x1 real conv)."""

    def __init__(self, cfg: QCGANConfig, out: int):
        super().__init__()
        chans = (4, *cfg.enc_channels)  # decoder stage i maps chans[i+1] -> chans[i]
        self.ups = nn.ModuleList(
            QuaternionUpsample(chans[i + 1], chans[i]) for i in reversed(range(len(chans) - 1))
        )
        self.acts = nn.ModuleList(nn.PReLU(chans[i]) for i in reversed(range(1, len(chans) - 1)))
        self.head = nn.Conv2d(4, out, 1)
        with torch.no_grad():  # start near identity: mask ~ 1, complex residual ~ 0
            self.head.weight.mul_(0.1)
            self.head.bias.zero_()

    def forward(self, h: torch.Tensor, skips: list[torch.Tensor]) -> torch.Tensor:
        """h (B, C, T, F'), skips from the encoder (finest first) -> (B, out, T, F)."""
        for i, up in enumerate(self.ups):
            h = up(h) + skips[-1 - i]  # (B, C_i, T, F_i)
            if i < len(self.acts):
                h = self.acts[i](h)
        return self.head(h)


# -- the generator -----------------------------------------------------------------------------
class QCGAN(nn.Module):
    """wave (B, N) -> enhanced wave (B, N); ``step`` streams it one hop at a time."""

    def __init__(self, cfg: QCGANConfig):
        super().__init__()
        if not isinstance(cfg, QCGANConfig):
            raise ConfigError(f"QCGAN takes a QCGANConfig, got {type(cfg).__name__}")
        self.config = cfg
        self.hop = cfg.hop
        self.sample_rate = cfg.sample_rate
        self.stft = Stft(cfg.n_fft, cfg.hop, "sqrt_hann")
        chans = (4, *cfg.enc_channels)
        self.enc = nn.ModuleList(
            QuaternionConv2d(chans[i], chans[i + 1], (1, 3), (1, 2), (0, 1))
            for i in range(len(cfg.enc_channels))
        )
        self.enc_acts = nn.ModuleList(nn.PReLU(c) for c in cfg.enc_channels)
        self.blocks = nn.ModuleList(TSBlock(cfg) for _ in range(cfg.num_blocks))
        self.mask_decoder = Decoder(cfg, 1)
        self.mask_act = LearnableSigmoid(cfg.n_freq, cfg.mask_beta)
        self.df_taps = cfg.df_taps
        self.complex_decoder = Decoder(cfg, 2 + 2 * cfg.df_taps)
        if cfg.df_taps:
            with torch.no_grad():  # taps start at 0: the model starts as the one without taps
                self.complex_decoder.head.weight[2:].zero_()
                self.complex_decoder.head.bias[2:].zero_()

    # -- latency / context ------------------------------------------------------------------
    @property
    def algorithmic_latency_samples(self) -> int:
        """Buffering one hop + the STFT delay (n_fft - hop) = n_fft (causal models)."""
        return self.config.n_fft

    @property
    def delay_samples(self) -> int:
        """Streaming output lags the input by this many samples."""
        return self.stft.delay

    @property
    def lookahead_samples(self) -> int:
        """Future input the offline output at sample n depends on (causal: n_fft - hop)."""
        return self.stft.delay if self.config.causal else 0

    @property
    def receptive_field_samples(self) -> int | None:
        """Past input that can affect an output sample (None: unbounded, non-causal)."""
        cfg = self.config
        if not cfg.causal:
            return None
        frames = cfg.num_blocks * ((cfg.window - 1) + (cfg.time_kernel - 1))
        frames = max(frames, cfg.df_taps)  # the deep filter reads X_c(t - K) directly
        return (frames + 1) * cfg.hop + cfg.n_fft

    # -- shared per-frame network -----------------------------------------------------------
    def _features(self, re: torch.Tensor, im: torch.Tensor):
        """(re, im) (B, T, F) -> quaternion input (B, 4, T, F), |X|^c, cos, sin."""
        mag = torch.sqrt(re * re + im * im + _EPS)
        mag_c = torch.exp(self.config.compress * torch.log(mag))  # |X|^c (no POW op: TFLM)
        cos, sin = re / mag, im / mag
        x = torch.stack([torch.zeros_like(mag), mag_c, mag_c * cos, mag_c * sin], 1)
        return x, mag_c, cos, sin  # x: (B, 4, T, F)

    def _encode(self, x: torch.Tensor):
        skips = [x]
        h = x
        for conv, act in zip(self.enc, self.enc_acts, strict=True):
            h = act(conv(h))  # (B, C_i, T, F_i)
            skips.append(h)
        return h, skips[:-1]

    def _heads(self, h, skips):
        """-> bounded magnitude mask (B, T, F) and the complex decoder's (B, 2 + 2K, T, F):
        compressed complex residual (channels 0, 1), then with deep filtering (K = df_taps)
        the tanh-bounded taps (Re C_k, Im C_k) in channels 2k, 2k + 1, k = 1..K."""
        mask = self.mask_act(self.mask_decoder(h, skips)[:, 0])  # (B, T, F)
        res = self.complex_decoder(h, skips)  # (B, 2 + 2K, T, F)
        if self.df_taps:
            res = torch.cat([res[:, :2], torch.tanh(res[:, 2:])], dim=1)  # (B, 2 + 2K, T, F)
        return mask, res

    @staticmethod
    def _apply_heads(mask, res, mag_c, cos, sin, past=None):
        """mask, residual and deep-filter taps on the noisy compressed spectrum X_c -> (re_c,
        im_c), each (B, T, F): Y_c = mask X_c + res + sum_k C_k X_c(t - k). ``past``: the
        frames X_c(t - k) as (re, im) pairs, k = 1..K, each (B, T, F) (none when K = 0)."""
        m = mask * mag_c
        re_c, im_c = m * cos + res[:, 0], m * sin + res[:, 1]
        for k, (xr, xi) in enumerate(past or (), start=1):
            cr, ci = res[:, 2 * k], res[:, 2 * k + 1]  # (B, T, F) each
            re_c = re_c + cr * xr - ci * xi
            im_c = im_c + cr * xi + ci * xr
        return re_c, im_c

    def _post_filter(self, re_c, im_c, mag_c):
        """The post-filter (``QCGANConfig.gain_exponent`` g): a bin's linear gain G = |Y| / |X|
        below 1 becomes G^g. |Y_c| / |X_c| = G^c, so Y_c is scaled by
        min(1, |Y_c| / |X_c|)^(g - 1) (each (B, T, F))."""
        g = float(self.config.gain_exponent)
        if g == 1.0:
            return re_c, im_c
        ratio = torch.sqrt(re_c * re_c + im_c * im_c + _EPS) / mag_c  # G^c, (B, T, F)
        f = torch.exp((g - 1.0) * torch.log(torch.clamp(ratio, max=1.0)))
        return re_c * f, im_c * f

    def _past_frames(self, mag_c, cos, sin):
        """Offline: X_c(t - k), k = 1..K, as (re, im) pairs of (B, T, F), zeros before t = 0."""
        xr, xi = mag_c * cos, mag_c * sin  # (B, T, F)
        t = xr.shape[1]
        return [
            (F.pad(xr, (0, 0, k, 0))[:, :t], F.pad(xi, (0, 0, k, 0))[:, :t])  # (B, T, F)
            for k in range(1, self.df_taps + 1)
        ]

    def _decode(self, h, skips, mag_c, cos, sin):
        """-> compressed enhanced (re_c, im_c), each (B, T, F)."""
        past = self._past_frames(mag_c, cos, sin) if self.df_taps else None
        re_c, im_c = self._apply_heads(*self._heads(h, skips), mag_c, cos, sin, past)
        return self._post_filter(re_c, im_c, mag_c)

    def _decompress(self, re_c: torch.Tensor, im_c: torch.Tensor):
        mag_c = torch.sqrt(re_c * re_c + im_c * im_c + _EPS)
        scale = torch.exp((1.0 / self.config.compress - 1.0) * torch.log(mag_c))
        return re_c * scale, im_c * scale

    # -- offline ----------------------------------------------------------------------------
    def enhance_spec(self, wave: torch.Tensor) -> Enhanced:
        """wave (B, N) -> waveform and enhanced spectra (for training losses)."""
        if wave.ndim != 2:
            raise ValueError(f"QCGAN expects a (B, N) waveform, got shape {tuple(wave.shape)}")
        re, im = self.stft.stft(wave)  # (B, T, F)
        x, mag_c, cos, sin = self._features(re, im)
        h, skips = self._encode(x)
        for blk in self.blocks:
            h = blk(h)
        re_c, im_c = self._decode(h, skips, mag_c, cos, sin)
        re_e, im_e = self._decompress(re_c, im_c)
        y = self.stft.istft(re_e, im_e, wave.shape[-1])
        return Enhanced(
            y,
            torch.complex(re_e, im_e).transpose(1, 2),  # (B, F, T)
            torch.complex(re_c, im_c).transpose(1, 2),
        )

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.enhance_spec(wave).wave

    # -- streaming --------------------------------------------------------------------------
    @property
    def n_dsp_state(self) -> int:
        """How many leading step-state tensors the DSP owns: the STFT analysis buffer and the
        overlap-add buffer, + with deep filtering the history of the K past X_c frames."""
        return 3 if self.df_taps else 2

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        """Flat tuple: STFT analysis buffer (B, N - hop), overlap-add buffer (B, N - hop),
        [df_taps > 0: X_c history (B, 2, K, F): (re, im) x frames t-K .. t-1, oldest first],
        then 4 tensors per block."""
        if not self.config.causal:
            raise ConfigError(
                "this QC-GAN is non-causal (offline look-ahead); streaming needs a causal "
                "preset such as qcgan-35k or qcgan-0.89m-causal"
            )
        state = list(self.stft.init_state(batch))
        if self.df_taps:
            state.append(torch.zeros(batch, 2, self.df_taps, self.config.n_freq))  # (B,2,K,F)
        for blk in self.blocks:
            state.extend(blk.init_state(batch))
        return tuple(state)

    def step(self, frame: torch.Tensor, state: tuple[torch.Tensor, ...]):
        """One hop (B, hop) -> (enhanced hop (B, hop) delayed by n_fft - hop, new state).

        = ``analysis`` (DSP) -> ``network_step`` (the neural network) -> ``synthesis`` (DSP):
        the split an int8 export uses (the network in the int8 graph, the DSP on the host)."""
        k = self.n_dsp_state
        x, aux, in_buf, hist = self.analysis(frame, state[0], *state[2:k])
        mask, res, net_state = self.network_step(x, state[k:])
        out, ola = self.synthesis(mask, res, aux, state[1])
        return out, (in_buf, ola, *hist, *net_state)

    def analysis(self, frame: torch.Tensor, in_buf: torch.Tensor, *history: torch.Tensor):
        """DSP front end of one hop: frame (B, hop) -> quaternion features x (B, 4, 1, F),
        aux = (|X|^c, cos, sin) each (B, 1, F) for the synthesis [+ the X_c history
        (B, 2, K, F) before this frame, with deep filtering], new analysis buffer, new history
        as a tuple (empty without deep filtering; else the history shifted by this frame)."""
        re, im, in_buf = self.stft.analysis_step(frame, in_buf)  # (B, 1, F)
        x, mag_c, cos, sin = self._features(re, im)
        if not self.df_taps:
            return x, (mag_c, cos, sin), in_buf, ()
        (hist,) = history  # (B, 2, K, F)
        cur = torch.stack([mag_c * cos, mag_c * sin], dim=1)  # (B, 2, 1, F)
        new_hist = torch.cat([hist[:, :, 1:], cur], dim=2)  # (B, 2, K, F)
        return x, (mag_c, cos, sin, hist), in_buf, (new_hist,)

    def network_step(self, x: torch.Tensor, state: tuple[torch.Tensor, ...]):
        """The network on one frame: x (B, 4, 1, F) and the blocks' state -> mask (B, 1, F),
        residual (B, 2, 1, F), the blocks' new state (4 tensors per block)."""
        h, skips = self._encode(x)
        new_state = []
        for i, blk in enumerate(self.blocks):
            h, st = blk.step(h, tuple(state[4 * i : 4 * i + 4]))
            new_state.extend(st)
        mask, res = self._heads(h, skips)
        return mask, res, tuple(new_state)

    def synthesis(self, mask, res, aux, ola: torch.Tensor):
        """DSP back end: mask + residual (+ deep filter over the history in ``aux``) on the
        noisy compressed spectrum, decompression, inverse DFT and overlap-add -> (output hop
        (B, hop), new overlap-add buffer)."""
        past = None
        if self.df_taps:
            hist, kk = aux[3], self.df_taps  # (B, 2, K, F), oldest first: X_c(t-k) at K - k
            past = [(hist[:, 0, kk - k : kk - k + 1], hist[:, 1, kk - k : kk - k + 1])
                    for k in range(1, kk + 1)]  # fmt: skip  # (B, 1, F) each
        re_c, im_c = self._apply_heads(mask, res, *aux[:3], past)
        re_c, im_c = self._post_filter(re_c, im_c, aux[0])
        re_e, im_e = self._decompress(re_c, im_c)
        return self.stft.synthesis_step(re_e, im_e, ola)

    def step_module(self) -> StepModule:
        return StepModule(self)


class NetworkStep(nn.Module):
    """The int8 exporters' graph: forward(x (B, 4, 1, F), *block_state) -> (mask (B, 1, F),
    residual (B, 2, 1, F), *new_block_state). STFT, compression and their inverses stay on
    the host DSP (``StepModule.analysis`` / ``synthesis``), as CMSIS-DSP would run them on a
    microcontroller: their 66K-value DFT bases and log/exp/sqrt/div do not belong in an int8
    graph."""

    n_outputs = 2

    def __init__(self, model: QCGAN):
        super().__init__()
        self.model = model

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return self.model.init_state(batch)[self.model.n_dsp_state :]

    def example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.zeros(batch, 4, 1, self.model.config.n_freq)  # (B, 4, 1, F)

    def forward(self, x: torch.Tensor, *state: torch.Tensor):
        mask, res, new_state = self.model.network_step(x, state)
        return (mask, res, *new_state)


class StepModule(nn.Module):
    """Exporter form: forward(frame (B, hop), *state) -> (out (B, hop), *new_state)."""

    def __init__(self, model: QCGAN):
        super().__init__()
        self.model = model
        self.hop = model.hop
        self.sample_rate = model.sample_rate
        self.algorithmic_latency_samples = model.algorithmic_latency_samples

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return self.model.init_state(batch)

    def forward(self, frame: torch.Tensor, *state: torch.Tensor):
        out, new_state = self.model.step(frame, state)
        return (out, *new_state)

    # -- the DSP / network split (qsa.export.split) ------------------------------------------
    @property
    def n_dsp_state(self) -> int:
        """The STFT analysis buffer and the overlap-add buffer (+ the X_c history with deep
        filtering) lead the state."""
        return self.model.n_dsp_state

    def network(self) -> NetworkStep:
        return NetworkStep(self.model)

    def analysis(self, frame: torch.Tensor, *dsp_state: torch.Tensor):
        """-> (network input x, aux for the synthesis, new DSP state tuple)."""
        x, aux, in_buf, hist = self.model.analysis(frame, dsp_state[0], *dsp_state[2:])
        return x, aux, (in_buf, dsp_state[1], *hist)

    def synthesis(self, net_out, aux, dsp_state):
        """(mask, residual), aux, DSP state -> (output hop, new DSP state tuple)."""
        out, ola = self.model.synthesis(net_out[0], net_out[1], aux, dsp_state[1])
        return out, (dsp_state[0], ola, *dsp_state[2:])

    def host_dsp(self) -> HostDSP:
        """The same analysis / synthesis in numpy (what a host runs per hop around an
        exported network: ~40 us instead of ~1 ms of eager torch ops)."""
        return HostDSP.from_model(self.model)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def streaming_macs_per_second(model: QCGAN) -> float:
    """MACs of one streaming step (FlopCounterMode flops / 2) x hops per second."""
    from torch.utils.flop_counter import FlopCounterMode

    state = model.init_state(1)
    frame = torch.zeros(1, model.hop)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model.step(frame, state)
    return fc.get_total_flops() / 2 * model.config.sample_rate / model.hop


def offline_macs_per_second(model: QCGAN, seconds: float = 1.0) -> float:
    """MACs of the offline forward on ``seconds`` of audio (FFT/STFT ops uncounted), per s."""
    from torch.utils.flop_counter import FlopCounterMode

    n = int(seconds * model.config.sample_rate)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.zeros(1, n))
    return fc.get_total_flops() / 2 / seconds


# -- presets -----------------------------------------------------------------------------------
def qcgan_35k() -> QCGANConfig:
    return QCGANConfig()


def qcgan_089m(causal: bool = False) -> QCGANConfig:
    return QCGANConfig(
        n_fft=320,
        hop=160,
        enc_channels=(16, 32, 48),
        num_blocks=2,
        time_path="band",
        band_dim=256,
        time_heads=4,
        freq_heads=2,
        ffn_mult=3,
        time_kernel=15,
        freq_kernel=5,
        causal=causal,
        window=50 if causal else None,
    )


register_model(QCGANConfig, QCGAN)
register_preset("qcgan-35k", qcgan_35k)
register_preset("qcgan-0.89m", qcgan_089m)
register_preset("qcgan-0.89m-causal", lambda: qcgan_089m(causal=True))
