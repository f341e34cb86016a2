"""A differentiable proxy of wide-band PESQ (ITU-T P.862 / P.862.2) for generator training.

MetricGAN learns PESQ with a critic that lags the generator; this proxy instead follows the
structure of the standard itself, so its gradient is available from the first step and says
*where* (which band, which frame) the enhanced signal disturbs the clean one:

1. level alignment: both waves (B, N) at 16 kHz, 100 Hz high-passed, scaled to the clean
   wave's active level, which is placed at 79 dB SPL (P.862's listening level);
2. 32 ms Hann frames, hop 16 ms, power spectra summed into ``N_BANDS`` bands of equal width
   on the Bark scale between 100 Hz and 8 kHz ("pitch power densities"), in units where a
   band's power is its share of the frame's mean square;
3. the reference's per-band level equalised toward the degraded one (+-20 dB, P.862's
   frequency compensation) and the degraded frames' gain equalised
   toward the reference (0.0003..5, first-order smoothing): like PESQ the proxy forgives
   linear filtering and slow gain changes. The degraded wave's level and frame gains keep
   their gradient, so a change of level is invisible to the gradient as it is to the value
   (with them detached, a fine-tune drove its output to -100 dB in 266 steps: quieter always
   looked better where noise had been added);
4. Zwicker loudness per band, L = S (P0 / 0.5)^g ((0.5 + 0.5 P / P0)^g - 1), g = 0.23, P0 the
   band's absolute hearing threshold (Terhardt's formula);
5. the loudness difference with P.862's dead zone of 0.25 x the smaller loudness (masking),
   and its asymmetric version weighted by ((P_deg + c) / (P_ref + c))^1.2 (0 below 3, capped
   at 12: added noise is worse than removed energy);
6. per frame an L2 (symmetric) and an L1 (asymmetric) norm over bands, capped at 45; over time
   an L6 norm inside 20-frame (320 ms) windows at 50% overlap, then an L2 norm over windows;
7. raw = 4.5 - 0.1 d_sym - 0.0309 d_asym and P.862.2's mapping
   MOS = 0.999 + 4 / (1 + exp(-1.3669 raw + 3.8224)).

The loudness scale ``S`` is fitted once so that the proxy's MOS matches real PESQ-WB on the
synthetic corpus' validation split (noisy inputs and enhanced outputs); the tests check the
proxy ranks real PESQ-WB and that its gradient is finite. Not part of it: P.862's time
alignment (training pairs are aligned), its IRS / silence-weighting details and its
bad-interval re-alignment. A silent reference scores the maximum (no gradient; the real
metric refuses such a pair and the trainer's PESQ pool masks it). ``pesq_loss`` = 1 - (MOS -
1) / 3.5, the normalised PESQ the MetricGAN critic predicts.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

SR, N_FFT, HOP, N_BANDS = 16000, 512, 256, 42
LEVEL_DB = 79.0  # the reference's active speech level, dB SPL
GAMMA = 0.23  # Zwicker's loudness exponent
LOUDNESS_SCALE = 448.0  # S, fitted (module header)
WINDOW_FRAMES = 20  # P.862's split-second interval
MIN_SAMPLES = N_FFT + HOP * (WINDOW_FRAMES - 1)  # one window of frames: 5376 (0.34 s)


def _bark(f: np.ndarray) -> np.ndarray:
    return 13.0 * np.arctan(0.00076 * f) + 3.5 * np.arctan((f / 7500.0) ** 2)


@functools.lru_cache(maxsize=1)
def _band_tables() -> tuple[np.ndarray, np.ndarray]:
    """(N_BANDS, N_FFT/2+1) band matrix and each band's hearing threshold power (relative to
    the frame mean square that LEVEL_DB stands for); built once."""
    f = np.arange(N_FFT // 2 + 1) * SR / N_FFT
    z = _bark(f)
    edges = np.linspace(_bark(np.array(100.0)), _bark(np.array(8000.0)), N_BANDS + 1)
    m = np.zeros((N_BANDS, len(f)))
    for b in range(N_BANDS):
        m[b, (z >= edges[b]) & (z < edges[b + 1])] = 1.0
    m[-1, f >= 8000.0 - 1e-6] = 1.0
    assert (m.sum(1) > 0).all(), "every band holds an FFT bin at N_FFT 512, 42 bands"
    fc = np.clip((m @ f) / m.sum(1) / 1000.0, 0.05, 8.0)  # kHz
    thr_db = 3.64 * fc ** -0.8 - 6.5 * np.exp(-0.6 * (fc - 3.3) ** 2) + 1e-3 * fc ** 4
    return m, 10.0 ** ((thr_db - LEVEL_DB) / 10.0)


def _bands(device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    m, p0 = _band_tables()
    return (torch.as_tensor(m, device=device, dtype=dtype),
            torch.as_tensor(p0, device=device, dtype=dtype))


def _band_power(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """(B, N) -> (B, T, N_BANDS) band powers; bands sum to each frame's mean square."""
    win = torch.hann_window(N_FFT, device=x.device, dtype=x.dtype)
    spec = torch.stft(x, N_FFT, HOP, window=win, center=False, return_complex=True)
    power = spec.real.square() + spec.imag.square()  # (B, F, T)
    power = power * (2.0 / (N_FFT * win.square().sum()))
    return torch.einsum("bft,kf->btk", power, m)


def _highpass(x: torch.Tensor) -> torch.Tensor:
    spec = torch.fft.rfft(x, dim=-1)
    keep = torch.fft.rfftfreq(x.shape[-1], 1.0 / SR, device=x.device) >= 100.0
    return torch.fft.irfft(spec * keep, n=x.shape[-1], dim=-1)


def _smooth(g: torch.Tensor, a: float = 0.8, taps: int = 32) -> torch.Tensor:
    """First-order smoothing y_t = a y_{t-1} + (1 - a) g_t along the last axis (truncated
    impulse response, exact to 0.8^32 = 8e-4; no Python loop over frames)."""
    k = (1 - a) * a ** torch.arange(taps, device=g.device, dtype=g.dtype)
    k = k / k.sum()
    lead = g[..., :1].expand(*g.shape[:-1], taps - 1)  # start from the first frame's gain
    x = torch.cat([lead, g], dim=-1).reshape(-1, 1, g.shape[-1] + taps - 1)
    return F.conv1d(x, k.flip(0).view(1, 1, -1)).reshape(g.shape)


def pesq_proxy(clean: torch.Tensor, degraded: torch.Tensor) -> torch.Tensor:
    """Proxy wide-band PESQ MOS of each (clean, degraded) pair of (B, N) 16 kHz waves, (B,)."""
    if clean.shape != degraded.shape or clean.dim() != 2:
        raise ValueError(f"clean {tuple(clean.shape)} and degraded {tuple(degraded.shape)}: "
                         "expected two (batch, samples) waves of the same shape")
    if clean.shape[-1] < MIN_SAMPLES:
        raise ValueError(f"{clean.shape[-1]} samples: the PESQ proxy needs at least "
                         f"{MIN_SAMPLES} ({MIN_SAMPLES / SR:.2f} s at 16 kHz)")
    m, p0 = _bands(clean.device, clean.dtype)
    x, y = _highpass(clean), _highpass(degraded)
    # level alignment: both to the clean wave's level over its loudest half of frames
    px, py = _band_power(x, m), _band_power(y, m)  # (B, T, K)
    ex, ey = px.sum(-1), py.sum(-1)  # (B, T) frame mean squares
    med = ex.detach().median(dim=-1, keepdim=True).values
    active = (ex.detach() >= med).to(x.dtype)
    level_x = (ex.detach() * active).sum(-1, keepdim=True) / active.sum(-1, keepdim=True)
    # the degraded level keeps its gradient: the proxy is then scale-invariant in its
    # gradient too (a detached level would make "quieter" look better wherever noise was added)
    level_y = (ey * active).sum(-1, keepdim=True) / active.sum(-1, keepdim=True)
    px = px / (level_x.unsqueeze(-1) + 1e-12)
    py = py / (level_x.unsqueeze(-1) + 1e-12) * (level_x / (level_y + 1e-12)).unsqueeze(-1)
    # frequency compensation of the reference (speech frames: the louder half), +-20 dB
    w = active.unsqueeze(-1)
    ratio = ((py * w).sum(1) + 1e3 * p0) / ((px * w).sum(1) + 1e3 * p0)  # (B, K)
    px = px * ratio.clamp(0.01, 100.0).unsqueeze(1)
    # gain compensation of the degraded frames (audible power ratio), smoothed
    audible_x = torch.where(px > 1e2 * p0, px, torch.zeros_like(px)).sum(-1)
    audible_y = torch.where(py.detach() > 1e2 * p0, py, torch.zeros_like(py)).sum(-1)
    g = ((audible_x + 5e3 * p0.min()) / (audible_y + 5e3 * p0.min())).clamp(3e-4, 5.0)
    py = py * _smooth(g).unsqueeze(-1)
    # loudness, disturbance with the dead zone, asymmetry
    def loudness(p):
        return (LOUDNESS_SCALE * (p0 / 0.5) ** GAMMA
                * ((0.5 + 0.5 * p / p0).pow(GAMMA) - 1.0)).clamp_min(0.0)

    lx, ly = loudness(px), loudness(py)
    d = ly - lx
    dead = 0.25 * torch.minimum(lx, ly)
    d = torch.sign(d) * (d.abs() - dead).clamp_min(0.0)
    c = 50.0 * p0.min()
    h = ((py + c) / (px + c)).pow(1.2)
    h = torch.where(h < 3.0, torch.zeros_like(h), h.clamp_max(12.0))
    da = d * h
    frame_sym = (d.square().mean(-1) + 1e-12).sqrt().clamp_max(45.0)  # (B, T)
    frame_asym = da.abs().mean(-1).clamp_max(45.0)

    def over_time(fd):
        win = fd.unfold(-1, WINDOW_FRAMES, WINDOW_FRAMES // 2)  # (B, W, 20)
        l6 = (win.pow(6).mean(-1) + 1e-30).pow(1.0 / 6.0)
        return (l6.square().mean(-1) + 1e-12).sqrt()

    raw = 4.5 - 0.1 * over_time(frame_sym) - 0.0309 * over_time(frame_asym)
    return 0.999 + 4.0 / (1.0 + torch.exp(-1.3669 * raw + 3.8224))


def pesq_loss(clean: torch.Tensor, enhanced: torch.Tensor) -> torch.Tensor:
    """1 - normalised proxy PESQ-WB, (MOS - 1) / 3.5, mean over the batch."""
    mos = pesq_proxy(clean, enhanced)
    return (1.0 - (mos - 1.0) / 3.5).mean()


__all__ = ["pesq_proxy", "pesq_loss", "LOUDNESS_SCALE", "MIN_SAMPLES"]
