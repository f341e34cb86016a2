"""DNSMOS P.835 (SIG / BAK / OVRL) and P.808 MOS: no-reference speech quality, offline.

DNSMOS (Reddy et al., ICASSP 2021/2022) is the DNS Challenge's non-intrusive metric: neural
nets trained on P.835 / P.808 listening tests predict, from the degraded audio alone, the
speech quality (SIG), the background-noise quality (BAK), the overall quality (OVRL) and the
P.808 overall MOS, each on a 1-5 scale. This is qsa's own implementation of Microsoft's
``DNSMOS/dnsmos_local.py`` (the non-personalised models) with numpy only; the ONNX models
come from the installed ``speechmos`` wheel, which ships them inside it (nothing is
downloaded; its own Python code, which needs librosa, is never imported).

Procedure (identical to the reference): the 16 kHz signal is repeated until it is at least
9.01 s long; windows of 9.01 s at a hop of 1 s are scored; per window the raw P.835
network outputs go through the challenge's polynomial fits, and the P.808 net sees a
120-band mel spectrogram (n_fft 321, hop 160, Slaney mel scale and area normalisation as
librosa's default, power to dB relative to the window's maximum with an 80 dB floor,
``(dB + 40) / 40``) of the window less its last 160 samples; the file score is the mean
over windows. The reference computes each window's end in floating point and skips the
windows that come out one sample short (hops 7-23, 119-122, ...); that is reproduced, so
the scores match it (measured: within 1e-6 MOS of ``speechmos.dnsmos.run`` on real speech).
Cost: ~0.5 s of one CPU core per window, one window per second of audio beyond the first
8 s; a clip under 9.01 s is doubled until it is not (4.2 s -> 16.8 s: 7 windows; 4.7 s: 1).

P.808 hears the 7.6-8 kHz band: full-band 16 kHz speech scores up to ~0.08 higher on P.808
than the same speech through a 48 kHz round trip (soxr keeps 95% of the band); SIG / BAK /
OVRL move by < 0.03. Compare systems at the same rate and band.

    >>> from qsa.metrics.dnsmos import dnsmos
    >>> dnsmos(audio, sr=48000)   # mono float, any rate
    {'sig': 3.4, 'bak': 3.9, 'ovrl': 3.0, 'p808': 3.5}
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from qsa.errors import AudioError, QsaError

SR = 16000
INPUT_LENGTH = 9.01  # seconds per window, as in dnsmos_local.py
WINDOW = int(INPUT_LENGTH * SR)  # 144160 samples
HOP = SR  # 1 s
N_FFT, MEL_HOP, N_MELS = 321, 160, 120  # the P.808 model's input features
KEYS = ("sig", "bak", "ovrl", "p808")
METRIC_KEYS = tuple(f"dnsmos_{k}" for k in KEYS)  # names in qsa eval's results
SILENT_PEAK = 1e-5  # -100 dBFS: below this there is nothing to score

# non-personalised P.835 polynomial fits of dnsmos_local.py (highest power first)
P_SIG = (-0.08397278, 1.22083953, 0.0052439)
P_BAK = (-0.13166888, 1.60915514, -0.39604546)
P_OVR = (-0.06766283, 1.11546468, 0.04602535)

INSTALL_HINT = ("install it with `pip install speechmos` (or the qsa extra that lists it); "
                "its wheel carries the DNSMOS ONNX models, nothing is downloaded")

_sessions: dict[tuple[str, int], object] = {}
_lock = threading.Lock()


# --------------------------------------------------------------------------- models


def model_dir() -> Path:
    """The ``dnsmos_models`` folder inside the installed ``speechmos`` package."""
    import importlib.util

    spec = importlib.util.find_spec("speechmos")  # locates it without running its code
    if spec is None or not spec.submodule_search_locations:
        raise QsaError(f"DNSMOS needs the speechmos package, which is not installed; "
                       f"{INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "dnsmos_models"
        if (d / "sig_bak_ovr.onnx").is_file() and (d / "model_v8.onnx").is_file():
            return d
    raise QsaError(f"speechmos at {list(spec.submodule_search_locations)} has no "
                   f"dnsmos_models/sig_bak_ovr.onnx + model_v8.onnx; reinstall it: "
                   f"`pip install --force-reinstall speechmos`")


def _session(name: str, threads: int):
    """One onnxruntime session per (model, threads) per process."""
    key = (name, int(threads))
    with _lock:
        sess = _sessions.get(key)
        if sess is None:
            try:
                import onnxruntime as ort
            except ImportError as e:
                raise QsaError(f"DNSMOS needs onnxruntime ({e}); install it with "
                               f"`pip install onnxruntime`") from None
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = max(1, int(threads))
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            path = model_dir() / name
            sess = ort.InferenceSession(str(path), sess_options=opts,
                                        providers=["CPUExecutionProvider"])
            _sessions[key] = sess
        return sess


# --------------------------------------------------------------------------- features


def hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default, htk=False): linear to 1 kHz, then log."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    mel = f / f_sp
    hi = f >= min_log_hz
    return np.where(hi, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep,
                    mel)


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    """Inverse of ``hz_to_mel``."""
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)),
                    f_sp * m)


def mel_filterbank(sr: int = SR, n_fft: int = N_FFT, n_mels: int = N_MELS, fmin: float = 0.0,
                   fmax: float | None = None) -> np.ndarray:
    """(n_mels, 1 + n_fft // 2) triangular filters, Slaney-normalised (each of area ~1/2 Hz
    weight: 2 / bandwidth), as ``librosa.filters.mel(sr, n_fft, n_mels)``; float32."""
    fmax = sr / 2 if fmax is None else fmax
    fft_f = np.fft.rfftfreq(n_fft, 1.0 / sr)  # (bins,)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # (n_mels+2,)
    fdiff = np.diff(mel_f)  # (n_mels+1,)
    ramps = mel_f[:, None] - fft_f[None, :]  # (n_mels+2, bins)
    lower = -ramps[:-2] / fdiff[:-1, None]  # (n_mels, bins) rising edge
    upper = ramps[2:] / fdiff[1:, None]  # (n_mels, bins) falling edge
    w = np.maximum(0.0, np.minimum(lower, upper))
    w *= (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]  # Slaney area normalisation
    return w.astype(np.float32)


_MEL = None
_WIN = None


def p808_features(seg: np.ndarray) -> np.ndarray:
    """(frames, 120) float32 input of the P.808 net for one window (center-padded STFT)."""
    global _MEL, _WIN
    if _MEL is None:
        _MEL = mel_filterbank()
        n = np.arange(N_FFT)
        _WIN = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # periodic Hann (fftbins=True)
    pad = N_FFT // 2
    y = np.pad(np.asarray(seg, dtype=np.float32), pad)  # librosa center=True, zero padding
    n_frames = 1 + (len(y) - N_FFT) // MEL_HOP
    idx = np.arange(N_FFT)[None, :] + MEL_HOP * np.arange(n_frames)[:, None]  # (frames, n_fft)
    spec = np.fft.rfft(y[idx] * _WIN, axis=1)  # (frames, bins)
    power = spec.real ** 2 + spec.imag ** 2
    mel = power.astype(np.float32) @ _MEL.T  # (frames, n_mels)
    db = 10.0 * np.log10(np.maximum(mel, 1e-10))
    db -= 10.0 * np.log10(max(float(mel.max()), 1e-10))  # ref=np.max
    db = np.maximum(db, db.max() - 80.0)  # top_db=80
    return ((db + 40.0) / 40.0).astype(np.float32)


# --------------------------------------------------------------------------- scoring


def check_audio(audio, sr: int, name: str = "audio") -> np.ndarray:
    """Mono float audio at ``sr`` Hz -> validated 16 kHz float32; AudioError naming the
    problem (not mono, empty, NaN / Inf, silent, integer PCM, a bad rate)."""
    from qsa.audio.resample import resample

    if not isinstance(sr, int | np.integer) or sr <= 0:
        raise AudioError(f"{name}: sr={sr!r} is not a sample rate; expected a positive "
                         f"integer (Hz), e.g. 16000 or 48000")
    x = np.asarray(audio)
    if x.ndim == 2 and 1 in x.shape:
        x = x.reshape(-1)
    if x.ndim != 1:
        raise AudioError(f"{name}: DNSMOS scores mono audio; got an array of shape {x.shape}. "
                         f"Pass one channel (x[:, c]) or the mean over channels")
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise AudioError(f"{name}: expected real float samples, got dtype {x.dtype}")
    if x.size == 0:
        raise AudioError(f"{name}: the audio is empty (0 samples); nothing to score")
    x = x.astype(np.float64, copy=False)
    bad = ~np.isfinite(x)
    if bad.any():
        first = int(np.argmax(bad))
        raise AudioError(f"{name}: {int(bad.sum())} sample(s) are NaN or Inf (first at sample "
                         f"{first}, {first / sr:.3f} s); fix the signal before scoring it")
    peak = float(np.max(np.abs(x)))
    if peak < SILENT_PEAK:
        level = f"{20 * np.log10(peak):.0f} dBFS" if peak > 0 else "all zeros"
        raise AudioError(f"{name}: the audio is silent (peak {peak:.3g}, {level}); DNSMOS "
                         f"needs a recording with speech in it")
    if np.issubdtype(np.asarray(audio).dtype, np.integer) or peak > 64.0:
        raise AudioError(f"{name}: peak {peak:.4g} looks like integer PCM; DNSMOS expects "
                         f"float samples in [-1, 1]: divide int16 samples by 32768")
    return resample(x.astype(np.float32), sr, SR)


def window_starts(n: int) -> list[int]:
    """Start samples of the scored windows of an ``n``-sample (>= WINDOW) 16 kHz signal.

    As dnsmos_local.py: hops ``0 .. floor(n / SR) - 9.01``, and a window whose float end
    ``int((i + 9.01) * SR)`` rounds one sample short (i = 7..23, 119..122, ...) is skipped,
    like the reference does; kept so that scores match the published DNSMOS numbers.
    """
    n_hops = int(np.floor(n / SR) - INPUT_LENGTH) + 1
    return [i * HOP for i in range(n_hops) if int((i + INPUT_LENGTH) * HOP) - i * HOP >= WINDOW]


def dnsmos(audio, sr: int = SR, threads: int = 1, name: str = "audio") -> dict[str, float]:
    """DNSMOS of one mono recording at ``sr`` Hz: {sig, bak, ovrl, p808} (1-5, higher better).

    Resamples to 16 kHz (soxr), repeats clips shorter than 9.01 s, averages the 9.01 s
    windows at a 1 s hop; ``threads`` is onnxruntime's intra-op thread count.
    """
    x = check_audio(audio, sr, name)
    while len(x) < WINDOW:  # repeat-pad short clips, as the reference does
        x = np.concatenate([x, x])
    segs = np.stack([x[i: i + WINDOW] for i in window_starts(len(x))])  # (n_win, WINDOW)
    n_win = len(segs)
    primary, p808 = _session("sig_bak_ovr.onnx", threads), _session("model_v8.onnx", threads)
    raw, mos = [], []
    for s in range(0, n_win, 8):  # small batches bound the memory of long files
        chunk = segs[s: s + 8]  # (b, WINDOW)
        raw.append(primary.run(None, {"input_1": chunk.astype(np.float32)})[0])  # (b, 3)
        feats = np.stack([p808_features(seg[:-MEL_HOP]) for seg in chunk])  # (b, 900, 120)
        mos.append(p808.run(None, {"input_1": feats})[0][:, 0])  # (b,)
    r = np.concatenate(raw).astype(np.float64)  # (n_win, 3): raw sig, bak, ovr
    return {
        "sig": float(np.mean(np.polyval(P_SIG, r[:, 0]))),
        "bak": float(np.mean(np.polyval(P_BAK, r[:, 1]))),
        "ovrl": float(np.mean(np.polyval(P_OVR, r[:, 2]))),
        "p808": float(np.mean(np.concatenate(mos).astype(np.float64))),
    }


def dnsmos_item(name: str, audio, sr: int = SR, threads: int = 1,
                label: str | None = None) -> dict:
    """``{"name", "dnsmos_sig", ..., "dnsmos_p808"}`` for qsa eval; a recording that cannot
    be scored gets NaN and the reason (naming ``label``, default ``name``) in ``"errors"``;
    a missing speechmos / onnxruntime still raises."""
    try:
        s = dnsmos(audio, sr, threads, label or name)
    except AudioError as e:
        nan = float("nan")
        return {"name": name, **{k: nan for k in METRIC_KEYS},
                "errors": {k: str(e) for k in METRIC_KEYS}}
    return {"name": name, **{f"dnsmos_{k}": v for k, v in s.items()}}
