"""Speech-like audio for calibration and verification (no downloads).

``espeak_speech`` renders English sentences with espeak-ng (a Debian package) and resamples
them to 16 kHz; ``synthetic_speech`` is a deterministic fallback: a glottal pulse train with a
wandering f0 through moving formant resonators, syllable envelopes and pauses. Both are mixed
with noise (``noisy``) since the models are denoisers.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SR = 16000
SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A quaternion network keeps four components of every weight and shares them.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "She can scoop these things into three red bags, and we will go meet her Wednesday.",
)


def synthetic_speech(seconds: float = 2.0, seed: int = 0, sr: int = SR) -> np.ndarray:
    """Deterministic speech-like signal in [-1, 1] (float32)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    t = np.arange(n) / sr
    f0 = 110 + 80 * rng.random() + 25 * np.sin(2 * np.pi * (0.5 + rng.random()) * t)
    phase = np.cumsum(f0 / sr)
    pulses = np.diff(np.floor(phase), prepend=0.0)  # one impulse per glottal period
    src = lfilter([1.0], [1.0, -0.97], pulses) + 0.05 * rng.standard_normal(n)
    out = np.zeros(n)
    seg = int(0.12 * sr)
    for start in range(0, n, seg):  # formants move per syllable-sized segment
        sl = slice(start, min(n, start + seg))
        x = src[sl]
        y = np.zeros_like(x)
        for fc, bw in (
            (300 + 500 * rng.random(), 90),
            (900 + 1400 * rng.random(), 120),
            (2300 + 900 * rng.random(), 160),
        ):
            r = np.exp(-np.pi * bw / sr)
            a = [1.0, -2 * r * np.cos(2 * np.pi * fc / sr), r * r]
            y += lfilter([1 - r], a, x)
        out[sl] = y
    syll = 0.5 - 0.5 * np.cos(2 * np.pi * np.clip(3.5 * t % 1.0, 0, 1))
    gate = (rng.random(int(seconds * 4) + 1) > 0.2).repeat(sr // 4 + 1)[:n]
    out = out * syll * gate
    return (0.5 * out / (np.abs(out).max() + 1e-9)).astype(np.float32)


def espeak_speech(text: str, voice: str = "en-us", rate: int = 160, sr: int = SR):
    """espeak-ng rendering of ``text`` at ``sr`` (None when espeak-ng is not installed)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    import soundfile as sf
    from scipy.signal import resample_poly

    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "s.wav"
        r = subprocess.run(
            [exe, "-v", voice, "-s", str(rate), "-w", str(wav), text],
            capture_output=True,
            timeout=60,
        )
        if r.returncode != 0 or not wav.is_file():
            return None
        x, file_sr = sf.read(wav, dtype="float32")
    if x.ndim > 1:
        x = x.mean(axis=1)
    if file_sr != sr:
        g = np.gcd(int(file_sr), sr)
        x = resample_poly(x, sr // g, int(file_sr) // g).astype(np.float32)
    return (0.5 * x / (np.abs(x).max() + 1e-9)).astype(np.float32)


def noisy(clean: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 7919)
    noise = rng.standard_normal(clean.shape).astype(np.float32)
    noise = np.convolve(noise, [0.6, 0.3, 0.1], mode="same").astype(np.float32)  # coloured
    p_s = float(np.mean(clean**2)) + 1e-12
    p_n = float(np.mean(noise**2)) + 1e-12
    return (clean + noise * np.sqrt(p_s / p_n / 10 ** (snr_db / 10))).astype(np.float32)


def calibration_set(n: int = 4, seconds: float = 1.5, seed: int = 0) -> list[np.ndarray]:
    """``n`` noisy speech utterances of ``seconds``: espeak-ng sentences where available,
    otherwise synthetic speech; SNRs cycle through 0, 5, 10, 20 dB."""
    out = []
    for k in range(n):
        voice = ("en-us", "en-gb", "en-us+f3")[k % 3]
        x = espeak_speech(SENTENCES[k % len(SENTENCES)], voice=voice)
        if x is None:
            x = synthetic_speech(seconds, seed=seed + k)
        want = int(seconds * SR)
        x = np.pad(x, (0, max(0, want - len(x))))[:want]
        out.append(noisy(x, (0, 5, 10, 20)[k % 4], seed=seed + k))
    return out


def verification_utterance(seconds: float = 1.0, seed: int = 123) -> np.ndarray:
    """A held-out noisy utterance (not in the calibration set)."""
    x = espeak_speech(SENTENCES[-1], voice="en-gb+m3", rate=150)
    if x is None:
        x = synthetic_speech(seconds, seed=seed)
    want = int(seconds * SR)
    x = np.pad(x, (0, max(0, want - len(x))))[:want]
    return noisy(x, 5.0, seed=seed)
