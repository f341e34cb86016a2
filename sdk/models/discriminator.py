"""MetricGAN discriminator and the QC-GAN generator losses.

``MetricDiscriminator``: (clean, enhanced) compressed magnitude spectra, each (B, T, F) ->
predicted normalised PESQ (PESQ - 1) / 3.5 in (0, 1), shape (B,). The MetricGAN+ / CMGAN
design: the two spectra stacked as 2 channels -> 4 spectrally normalised Conv2d (kernel 4,
stride 2) with InstanceNorm + PReLU -> global max pooling -> spectrally normalised
Linear -> PReLU -> Linear -> learnable sigmoid. Real-valued (it is only used in training).
Default config: 16 base channels, 0.18M params (it never ships).

``GeneratorLosses`` (weights in the frozen ``LossConfig``; CMGAN's defaults): all spectral
terms on power-law compressed STFTs (|X|^0.3; sqrt-Hann, n_fft 400 / hop 100 at 16 kHz):

    loss_G = 0.9 * MSE(|C|, |E|)                    magnitude
           + 0.1 * MSE(C_ri, E_ri)                  complex (re, im)
           + 0.2 * L1(clean, enhanced)              time
           + 0.05 * mean((D(|C|, |E|) - 1)^2)       metric (toward D = 1, i.e. PESQ 4.5)
           + stoi_weight * (1 - dSTOI(clean, enh))  intelligibility (off by default)
           + sisdr_weight * -SI-SDR(clean, enh)/10  scale-invariant SDR in dB / 10 (off)
           + pesq_weight * (1 - (PESQ~ - 1) / 3.5)  differentiable PESQ-WB proxy (off;
                                                    qsa.models.pesq_loss)

``stoi_loss`` is a differentiable STOI (Taal et al. 2011, as pystoi computes it): band
limited to 10 kHz by FFT resampling, silent frames (40 dB under the loudest clean frame)
dropped, 15 one-third-octave band envelopes of 256-sample frames, 30-frame segments, the
degraded envelope normalised to the clean one and clipped at -15 dB SDR, the mean
correlation. It tracks pystoi within ~0.02 (tests/test_train_se.py); as a loss it adds the
intelligibility term that the PESQ-driven MetricGAN objective does not see.

The magnitude/complex split 0.9/0.1 favours magnitude (the perceptually dominant part) while
the complex term keeps the phase from drifting.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

from ..config import ModelConfig
from ..errors import ConfigError
from .registry import register_model, register_preset


@dataclasses.dataclass(frozen=True)
class DiscriminatorConfig(ModelConfig):
    kind = "metric-discriminator"
    VERSION = 1

    channels: int = 16  # base width; doubles in each of the 4 conv stages
    hidden: int = 64  # width of the hidden linear layer (x channels / 16)
    dropout: float = 0.3

    def __post_init__(self):
        if self.channels < 1 or self.hidden < 1:
            raise ConfigError(
                f"channels={self.channels}, hidden={self.hidden}: use positive widths (16, 64)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout}; expected a probability in [0, 1)")


class MetricDiscriminator(nn.Module):
    """(clean_mag, enhanced_mag) (B, T, F) -> normalised PESQ estimate (B,) in (0, 1)."""

    def __init__(self, cfg: DiscriminatorConfig | None = None):
        super().__init__()
        cfg = DiscriminatorConfig() if cfg is None else cfg
        if not isinstance(cfg, DiscriminatorConfig):
            raise ConfigError(f"expected a DiscriminatorConfig, got {type(cfg).__name__}")
        self.config = cfg
        c = cfg.channels
        widths = (2, c, 2 * c, 4 * c, 8 * c)
        layers: list[nn.Module] = []
        for i in range(4):
            layers += [
                spectral_norm(nn.Conv2d(widths[i], widths[i + 1], 4, 2, 1, bias=False)),
                nn.InstanceNorm2d(widths[i + 1], affine=True),
                nn.PReLU(widths[i + 1]),
            ]
        self.convs = nn.Sequential(*layers)
        self.fc1 = spectral_norm(nn.Linear(8 * c, cfg.hidden))
        self.drop = nn.Dropout(cfg.dropout)
        self.act = nn.PReLU(cfg.hidden)
        self.fc2 = spectral_norm(nn.Linear(cfg.hidden, 1))
        self.slope = nn.Parameter(torch.ones(1))  # learnable sigmoid, beta = 1

    def forward(self, clean_mag: torch.Tensor, enhanced_mag: torch.Tensor) -> torch.Tensor:
        if clean_mag.shape != enhanced_mag.shape or clean_mag.ndim != 3:
            raise ValueError(
                f"MetricDiscriminator expects two (B, T, F) magnitude spectra of one shape, got "
                f"{tuple(clean_mag.shape)} and {tuple(enhanced_mag.shape)}"
            )
        if min(clean_mag.shape[1:]) < 16:
            raise ValueError(
                f"spectra of {tuple(clean_mag.shape[1:])} (T, F) are too small for 4 stride-2 "
                "convs; give at least 16 frames and 16 bins"
            )
        x = torch.stack([clean_mag, enhanced_mag], dim=1)  # (B, 2, T, F)
        h = self.convs(x)  # (B, 8c, T/16, F/16)
        h = torch.amax(h, dim=(2, 3))  # (B, 8c) global max pooling
        h = self.fc2(self.act(self.drop(self.fc1(h))))  # (B, 1)
        return torch.sigmoid(self.slope * h).squeeze(-1)  # (B,)


# -- generator losses --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Weights and STFT of the generator losses (CMGAN defaults)."""

    magnitude_weight: float = 0.9
    complex_weight: float = 0.1
    time_weight: float = 0.2
    metric_weight: float = 0.05
    stoi_weight: float = 0.0
    sisdr_weight: float = 0.0
    pesq_weight: float = 0.0
    balance_weight: float = 0.0
    n_fft: int = 400
    hop: int = 100
    compress: float = 0.3
    version: int = 1

    def __post_init__(self):
        for name in ("magnitude_weight", "complex_weight", "time_weight", "metric_weight",
                     "stoi_weight", "sisdr_weight", "pesq_weight", "balance_weight"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)}; loss weights must be >= 0 "
                                  "(0 turns the term off)")
        if self.n_fft < 16 or self.hop < 1 or self.hop > self.n_fft:
            raise ConfigError(
                f"n_fft={self.n_fft}, hop={self.hop}: use n_fft >= 16 and 1 <= hop <= n_fft "
                "(400 / 100 at 16 kHz)"
            )
        if not 0.05 <= self.compress <= 1.0:
            raise ConfigError(f"compress={self.compress}; use an exponent in [0.05, 1] (0.3)")


def compressed_spec(wave: torch.Tensor, n_fft: int, hop: int, compress: float) -> torch.Tensor:
    """(B, N) -> power-law compressed complex STFT |X|^c e^{i phase}, (B, F, T)."""
    window = torch.hann_window(n_fft, device=wave.device, dtype=wave.dtype).sqrt()
    z = torch.stft(wave, n_fft, hop, window=window, center=True, return_complex=True)
    mag = z.abs().clamp_min(1e-8)
    return z * mag.pow(compress - 1.0)  # (B, F, T)


def magnitude_loss(clean_spec: torch.Tensor, enhanced_spec: torch.Tensor) -> torch.Tensor:
    """MSE between the (compressed) magnitudes of two complex spectra."""
    return F.mse_loss(enhanced_spec.abs(), clean_spec.abs())


def complex_loss(clean_spec: torch.Tensor, enhanced_spec: torch.Tensor) -> torch.Tensor:
    """MSE between the real and imaginary parts of two complex spectra."""
    return F.mse_loss(torch.view_as_real(enhanced_spec), torch.view_as_real(clean_spec))


def time_loss(clean: torch.Tensor, enhanced: torch.Tensor) -> torch.Tensor:
    """L1 between the waveforms."""
    return F.l1_loss(enhanced, clean)


def si_sdr_loss(clean: torch.Tensor, enhanced: torch.Tensor) -> torch.Tensor:
    """Negative scale-invariant SDR in dB / 10, mean over the batch ((B, N) waves)."""
    c = clean - clean.mean(-1, keepdim=True)
    e = enhanced - enhanced.mean(-1, keepdim=True)
    alpha = (e * c).sum(-1, keepdim=True) / (c.pow(2).sum(-1, keepdim=True) + 1e-8)
    target = alpha * c
    ratio = target.pow(2).sum(-1) / ((e - target).pow(2).sum(-1) + 1e-8)
    return -(10.0 * torch.log10(ratio + 1e-8)).mean() / 10.0


_STOI_FS, _STOI_FRAME, _STOI_NFFT, _STOI_BANDS, _STOI_SEG = 10000, 256, 512, 15, 30


def _third_octave_matrix(device, dtype) -> torch.Tensor:
    """(15, 257) one-third-octave band matrix of pystoi (150 Hz lowest centre, 10 kHz)."""
    f = np.linspace(0, _STOI_FS, _STOI_NFFT + 1)[: _STOI_NFFT // 2 + 1]
    k = np.arange(_STOI_BANDS, dtype=float)
    lo = 150.0 * np.power(2.0, (2 * k - 1) / 6)
    hi = 150.0 * np.power(2.0, (2 * k + 1) / 6)
    m = np.zeros((_STOI_BANDS, len(f)))
    for i in range(_STOI_BANDS):
        m[i, np.argmin((f - lo[i]) ** 2) : np.argmin((f - hi[i]) ** 2)] = 1
    return torch.tensor(m, device=device, dtype=dtype)


def _resample_fft(x: torch.Tensor, sr: int) -> torch.Tensor:
    """(B, N) at ``sr`` -> (B, M) at 10 kHz: band-limited FFT resampling (differentiable)."""
    if sr == _STOI_FS:
        return x
    n = x.shape[-1]
    m = n * _STOI_FS // sr
    spec = torch.fft.rfft(x, dim=-1)
    keep = min(spec.shape[-1], m // 2 + 1)
    return torch.fft.irfft(spec[..., :keep], n=m, dim=-1) * (m / n)


def stoi_loss(clean: torch.Tensor, enhanced: torch.Tensor, sr: int = 16000) -> torch.Tensor:
    """1 - differentiable STOI of (B, N) waves, mean over the batch (see the module header).
    An item with fewer than 30 speech frames (a silent reference among them) contributes 0
    (pystoi would refuse it)."""
    x, y = _resample_fft(clean, sr), _resample_fft(enhanced, sr)
    hop = _STOI_FRAME // 2
    win = torch.hann_window(_STOI_FRAME + 2, periodic=False, device=x.device, dtype=x.dtype)
    win = win[1:-1]
    xf = x.unfold(-1, _STOI_FRAME, hop) * win  # (B, T, 256)
    yf = y.unfold(-1, _STOI_FRAME, hop) * win
    energy = 20 * torch.log10(xf.detach().norm(dim=-1) + 1e-8)  # (B, T)
    speech = energy > energy.max(dim=-1, keepdim=True).values - 40.0
    speech &= energy > -100.0  # a digitally silent reference has no speech frames
    obm = _third_octave_matrix(x.device, x.dtype)
    clip = 1.0 + 10.0 ** (15.0 / 20.0)
    losses = []
    for b in range(x.shape[0]):
        idx = speech[b].nonzero().squeeze(-1)
        if idx.numel() < _STOI_SEG:
            losses.append(x.new_zeros(()) * y[b].sum())
            continue
        X = torch.fft.rfft(xf[b, idx], n=_STOI_NFFT).abs().pow(2)  # (T', 257)
        Y = torch.fft.rfft(yf[b, idx], n=_STOI_NFFT).abs().pow(2)
        xb = (X @ obm.T + 1e-10).sqrt().T  # (15, T') band envelopes
        yb = (Y @ obm.T + 1e-10).sqrt().T
        xs = xb.unfold(-1, _STOI_SEG, 1)  # (15, S, 30) every 30-frame segment
        ys = yb.unfold(-1, _STOI_SEG, 1)
        norm = xs.norm(dim=-1, keepdim=True) / (ys.norm(dim=-1, keepdim=True) + 1e-8)
        yn = torch.minimum(ys * norm, xs * clip)
        xc = xs - xs.mean(-1, keepdim=True)
        yc = yn - yn.mean(-1, keepdim=True)
        corr = (xc * yc).sum(-1) / (xc.norm(dim=-1) * yc.norm(dim=-1) + 1e-8)
        losses.append(1.0 - corr.mean())
    return torch.stack(losses).mean()


# band edges (Hz) of the spectral-balance loss and of tests/test_spectral_balance.py
BALANCE_EDGES = (200, 400, 800, 1600, 3200, 5000, 7000)


def band_balance_db(clean: torch.Tensor, enhanced: torch.Tensor, sr: int = 16000,
                    edges: tuple[int, ...] = BALANCE_EDGES) -> torch.Tensor:
    """Per item and band, 10 log10(enhanced band energy / clean band energy), (B, bands).

    The energy of each band over the whole crop (a long-term spectrum), so the measure sees a
    tilt or a muffled output and not the frame-by-frame suppression of noise."""
    spec_c = torch.fft.rfft(clean, dim=-1).abs().pow(2)
    spec_e = torch.fft.rfft(enhanced, dim=-1).abs().pow(2)
    f = torch.fft.rfftfreq(clean.shape[-1], 1.0 / sr).to(clean.device)
    rows = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        m = ((f >= a) & (f < b)).to(clean.dtype)
        ec = (spec_c * m).sum(-1)
        ee = (spec_e * m).sum(-1)
        floor = 1e-6 * spec_c.sum(-1) + 1e-10  # a band the clean crop lacks does not explode
        rows.append(10.0 * torch.log10((ee + floor) / (ec + floor)))
    return torch.stack(rows, dim=-1)


def balance_loss(clean: torch.Tensor, enhanced: torch.Tensor, sr: int = 16000) -> torch.Tensor:
    """Mean squared band balance in units of 10 dB: 0 for an output with the clean crop's
    long-term spectrum, 1 for a band 10 dB off. Counters the tilt that the PESQ proxy and the
    MetricGAN critic reward (docs/training.md, "Real voices")."""
    return (band_balance_db(clean, enhanced, sr) / 10.0).pow(2).mean()


def metric_loss(d_enhanced: torch.Tensor) -> torch.Tensor:
    """Least-squares metric loss pushing D(clean, enhanced) toward 1 (best PESQ)."""
    return torch.mean((d_enhanced - 1.0) ** 2)


class GeneratorLosses:
    """The loss object the trainer uses: ``spec``, ``mag``, ``generator_loss``, ``cfg``."""

    def __init__(self, cfg: LossConfig | None = None):
        self.cfg = LossConfig() if cfg is None else cfg

    def spec(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, N) -> compressed complex spectrum (B, F, T)."""
        return compressed_spec(wave, self.cfg.n_fft, self.cfg.hop, self.cfg.compress)

    @staticmethod
    def mag(spec: torch.Tensor) -> torch.Tensor:
        """Complex (B, F, T) -> magnitude (B, T, F), the discriminator's input layout."""
        return spec.abs().transpose(1, 2)

    def generator_loss(
        self,
        clean: torch.Tensor,
        enhanced: torch.Tensor,
        clean_spec: torch.Tensor | None = None,
        enhanced_spec: torch.Tensor | None = None,
        d_enhanced: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Weighted magnitude + complex + time (+ metric when ``d_enhanced`` is given) loss,
        and its parts as floats."""
        cs = self.spec(clean) if clean_spec is None else clean_spec
        es = self.spec(enhanced) if enhanced_spec is None else enhanced_spec
        c = self.cfg
        parts = {
            "magnitude": magnitude_loss(cs, es),
            "complex": complex_loss(cs, es),
            "time": time_loss(clean, enhanced),
        }
        loss = (
            c.magnitude_weight * parts["magnitude"]
            + c.complex_weight * parts["complex"]
            + c.time_weight * parts["time"]
        )
        if c.stoi_weight > 0:
            parts["stoi"] = stoi_loss(clean, enhanced)
            loss = loss + c.stoi_weight * parts["stoi"]
        if c.sisdr_weight > 0:
            parts["sisdr"] = si_sdr_loss(clean, enhanced)
            loss = loss + c.sisdr_weight * parts["sisdr"]
        if c.pesq_weight > 0:
            from .pesq_loss import pesq_loss

            parts["pesq_proxy"] = pesq_loss(clean, enhanced)
            loss = loss + c.pesq_weight * parts["pesq_proxy"]
        if c.balance_weight > 0:
            parts["balance"] = balance_loss(clean, enhanced)
            loss = loss + c.balance_weight * parts["balance"]
        if d_enhanced is not None:
            parts["metric"] = metric_loss(d_enhanced)
            loss = loss + c.metric_weight * parts["metric"]
        return loss, {k: float(v.detach()) for k, v in parts.items()}


def discriminator_loss(
    d_clean: torch.Tensor, d_enhanced: torch.Tensor, pesq_enhanced: torch.Tensor
) -> torch.Tensor:
    """MetricGAN D loss: D(clean, clean) -> 1, D(clean, enhanced) -> its normalised PESQ."""
    return torch.mean((d_clean - 1.0) ** 2) + torch.mean((d_enhanced - pesq_enhanced) ** 2)


register_model(DiscriminatorConfig, MetricDiscriminator)
register_preset("metric-discriminator", DiscriminatorConfig)
