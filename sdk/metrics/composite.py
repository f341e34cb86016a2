"""Composite speech-quality measures CSIG, CBAK, COVL (Hu & Loizou 2008) in numpy.

Y. Hu and P. C. Loizou, "Evaluation of objective quality measures for speech enhancement",
IEEE TASLP 16(1), 2008. Implemented from the published definitions (as in Loizou's
``composite.m``): 30 ms Hann frames with a 7.5 ms hop;

- LLR: log-likelihood ratio of LPC models (order 10 below 10 kHz, else 16), frames limited
  to [0, 2] (as in the paper and Loizou's ``comp_llr.m``), mean of the best 95%;
- WSS: weighted spectral slope over 25 critical bands (Klatt 1982, Kmax=20, Klocmax=1),
  mean of the best 95%;
- segSNR: per-frame SNR clipped to [-10, 35] dB, mean over frames;

then the regressions
``Csig = 3.093 - 1.029 LLR + 0.603 PESQ - 0.009 WSS``,
``Cbak = 1.634 + 0.478 PESQ - 0.007 WSS + 0.063 segSNR``,
``Covl = 1.594 + 0.805 PESQ - 0.512 LLR - 0.007 WSS``, each clipped to [1, 5].
The PESQ term is passed in; ``qsa.metrics`` uses wide-band PESQ, as recent speech
enhancement papers do for VoiceBank+DEMAND (the 2008 paper used narrow-band P.862).
"""

from __future__ import annotations

import numpy as np

ALPHA = 0.95  # fraction of frames kept for LLR and WSS

_CENT_FREQ = np.array([
    50.0, 120.0, 190.0, 260.0, 330.0, 400.0, 470.0, 540.0, 617.372, 703.378, 798.717,
    904.128, 1020.38, 1148.30, 1288.72, 1442.54, 1610.70, 1794.16, 1993.93, 2211.08,
    2446.71, 2701.97, 2978.04, 3276.17, 3597.63,
])
_BANDWIDTH = np.array([
    70.0, 70.0, 70.0, 70.0, 70.0, 70.0, 70.0, 77.3724, 86.0056, 95.3398, 105.411, 116.256,
    127.914, 140.423, 153.823, 168.154, 183.457, 199.776, 217.153, 235.631, 255.255,
    276.072, 298.126, 321.465, 346.136,
])


def _frames(x: np.ndarray, sr: int) -> np.ndarray:
    """(n_frames, win) Hann-windowed 30 ms frames with a quarter-window hop."""
    win = round(30 * sr / 1000)
    hop = win // 4
    n = int((len(x) - win) / hop) if len(x) >= win else 0
    idx = np.arange(win)[None, :] + hop * np.arange(n)[:, None]  # (n_frames, win)
    window = 0.5 * (1 - np.cos(2 * np.pi * np.arange(1, win + 1) / (win + 1)))
    return x[idx] * window


def _check(ref: np.ndarray, deg: np.ndarray, sr: int) -> tuple[np.ndarray, np.ndarray]:
    ref = np.asarray(ref, dtype=np.float64)
    deg = np.asarray(deg, dtype=np.float64)
    if ref.shape != deg.shape or ref.ndim != 1:
        raise ValueError(f"reference {ref.shape} and degraded {deg.shape} must be equal 1-D")
    if len(ref) < round(30 * sr / 1000):
        raise ValueError(f"signal of {len(ref)} samples is shorter than one 30 ms frame")
    return ref, deg


def seg_snr(ref: np.ndarray, deg: np.ndarray, sr: int = 16000) -> float:
    """Segmental SNR in dB (frames clipped to [-10, 35] dB)."""
    ref, deg = _check(ref, deg, sr)
    fr, fd = _frames(ref, sr), _frames(deg, sr)
    eps = np.finfo(np.float64).eps
    signal = np.sum(fr**2, axis=1)
    noise = np.sum((fr - fd) ** 2, axis=1)
    seg = 10 * np.log10(signal / (noise + eps) + eps)
    return float(np.mean(np.clip(seg, -10.0, 35.0)))


def _lpc(frames: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Autocorrelation (n, order+1) and LPC polynomials [1, -a1..-ap] (n, order+1)."""
    n, win = frames.shape
    r = np.stack([np.sum(frames[:, : win - k] * frames[:, k:], axis=1) for k in range(order + 1)],
                 axis=1)  # (n, order+1)
    a = np.zeros((n, order))
    err = r[:, 0].copy()
    tiny = np.finfo(np.float64).tiny
    for i in range(order):
        acc = r[:, i + 1] - np.sum(a[:, :i] * r[:, i:0:-1], axis=1)
        k = acc / np.maximum(err, tiny)
        prev = a[:, :i].copy()
        a[:, i] = k
        if i > 0:
            a[:, :i] = prev - k[:, None] * prev[:, ::-1]
        err = (1 - k * k) * err
    return r, np.concatenate([np.ones((n, 1)), -a], axis=1)


def _toeplitz_quad(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per row: a @ toeplitz(r) @ a, as r0*c0 + 2*sum_k r_k*c_k with c the autocorr. of a."""
    p1 = a.shape[1]
    c = np.stack([np.sum(a[:, : p1 - k] * a[:, k:], axis=1) for k in range(p1)], axis=1)
    return r[:, 0] * c[:, 0] + 2 * np.sum(r[:, 1:] * c[:, 1:], axis=1)


def llr(ref: np.ndarray, deg: np.ndarray, sr: int = 16000) -> float:
    """Log-likelihood ratio (lower is better), mean of the best 95% of frames.

    Frames are limited to [0, 2] (Hu & Loizou 2008); frames where the reference is digital
    silence (0/0) are left out, as MATLAB's sort leaves its NaNs at the end.
    """
    ref, deg = _check(ref, deg, sr)
    order = 10 if sr < 10000 else 16
    r_ref, a_ref = _lpc(_frames(ref, sr), order)
    _, a_deg = _lpc(_frames(deg, sr), order)
    num, den = _toeplitz_quad(a_deg, r_ref), _toeplitz_quad(a_ref, r_ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = num / den
    frac = frac[np.isfinite(frac)]
    if frac.size == 0:
        raise ValueError("the reference is digital silence in every frame")
    dist = np.clip(np.log(np.where(frac <= 0, 1000.0, frac)), 0.0, 2.0)
    keep = max(1, round(len(dist) * ALPHA))
    return float(np.mean(np.sort(dist)[:keep]))


def _crit_filters(sr: int, n_half: int) -> np.ndarray:
    """(25, n_half) Gaussian-shaped critical-band filters on the FFT bins."""
    max_freq = sr / 2
    min_factor = np.exp(-30.0 / (2.0 * 2.303))  # -30 dB point of the filter
    j = np.arange(n_half)
    filters = np.zeros((len(_CENT_FREQ), n_half))
    for i, (fc, bw_hz) in enumerate(zip(_CENT_FREQ, _BANDWIDTH, strict=True)):
        f0 = fc / max_freq * n_half
        bw = bw_hz / max_freq * n_half
        norm = np.log(_BANDWIDTH[0]) - np.log(bw_hz)
        filters[i] = np.exp(-11 * ((j - np.floor(f0)) / bw) ** 2 + norm)
        filters[i] *= filters[i] > min_factor
    return filters


def _loc_peaks(energy: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """(n_frames, 24) energy of the nearest spectral peak of each band (Klatt's local maxima).

    Where the slope rises the peak is the band before the next non-rising slope; where it
    falls, the band after the previous rising one. The index arithmetic follows Loizou's
    reference ``comp_wss.m`` exactly (0-based here).
    """
    n_frames, n_slopes = slope.shape
    idx = np.broadcast_to(np.arange(n_slopes), slope.shape)
    rising = slope > 0
    # first n >= i with slope[n] <= 0 (n_slopes if none): reverse running minimum
    nxt = np.where(rising, n_slopes, idx)
    nxt = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]
    # last n <= i with slope[n] > 0 (-1 if none): running maximum
    prv = np.maximum.accumulate(np.where(rising, idx, -1), axis=1)
    pick = np.where(rising, nxt - 1, prv + 1)  # (n_frames, 24)
    return np.take_along_axis(energy, pick, axis=1)


def wss(ref: np.ndarray, deg: np.ndarray, sr: int = 16000) -> float:
    """Weighted spectral slope distance (lower is better), mean of the best 95% of frames."""
    ref, deg = _check(ref, deg, sr)
    win = round(30 * sr / 1000)
    n_fft = 1 << int(np.ceil(np.log2(2 * win)))
    n_half = n_fft // 2
    filters = _crit_filters(sr, n_half)
    k_max, k_locmax = 20.0, 1.0

    def band_db(x):
        spec = np.abs(np.fft.fft(_frames(x, sr), n_fft, axis=1)[:, :n_half]) ** 2
        return 10 * np.log10(np.maximum(spec @ filters.T, 1e-10))  # (n_frames, 25)

    e_ref, e_deg = band_db(ref), band_db(deg)  # (n_frames, 25)
    s_ref = e_ref[:, 1:] - e_ref[:, :-1]  # (n_frames, 24) spectral slopes
    s_deg = e_deg[:, 1:] - e_deg[:, :-1]

    def weights(e, s):
        w_max = k_max / (k_max + e.max(axis=1, keepdims=True) - e[:, :-1])
        w_loc = k_locmax / (k_locmax + _loc_peaks(e, s) - e[:, :-1])
        return w_max * w_loc

    w = (weights(e_ref, s_ref) + weights(e_deg, s_deg)) / 2
    dist = np.sum(w * (s_ref - s_deg) ** 2, axis=1) / np.sum(w, axis=1)
    if dist.size == 0:
        raise ValueError("signal shorter than one WSS frame")
    keep = max(1, round(len(dist) * ALPHA))
    return float(np.mean(np.sort(dist)[:keep]))


def composite_from_terms(llr_value: float, wss_value: float, segsnr_value: float,
                         pesq_score: float) -> dict:
    """{"csig", "cbak", "covl"} from the three distance terms and PESQ (clipped to [1, 5])."""
    csig = 3.093 - 1.029 * llr_value + 0.603 * pesq_score - 0.009 * wss_value
    cbak = 1.634 + 0.478 * pesq_score - 0.007 * wss_value + 0.063 * segsnr_value
    covl = 1.594 + 0.805 * pesq_score - 0.512 * llr_value - 0.007 * wss_value
    clip = lambda v: float(np.clip(v, 1.0, 5.0))
    return {"csig": clip(csig), "cbak": clip(cbak), "covl": clip(covl)}


def composite(ref: np.ndarray, deg: np.ndarray, pesq_score: float, sr: int = 16000) -> dict:
    """{"csig", "cbak", "covl", "llr", "wss", "segsnr"} given the PESQ of the same pair."""
    l, w, s = llr(ref, deg, sr), wss(ref, deg, sr), seg_snr(ref, deg, sr)
    return {**composite_from_terms(l, w, s, pesq_score), "llr": l, "wss": w, "segsnr": s}
