"""Seeded synthetic noise bank for the corpus: every noise is numpy from one integer seed.

``make_noise(kind, seed, n, sr, talker=None)`` returns ``(noise, params)``: a float64 signal of
``n`` samples at unit RMS and the parameters drawn for it (recorded in the manifest for the
reader; the seed alone reproduces the signal). Kinds:

- ``white``, ``pink`` (1/f), ``brown`` (1/f^2, high-passed at 20 Hz): spectrally shaped
  Gaussian noise;
- ``babble``: 3-7 synthetic talkers summed (``talker(rng, n)`` makes one; the corpus passes
  espeak-ng voices from the item's own split);
- ``hum``: mains hum at 50 or 60 Hz with drifting harmonics and a little hiss;
- ``fan``: band-limited noise with slow amplitude modulation and a blade-pass tone;
- ``engine``: a harmonic pulse train whose firing rate sweeps, plus filtered rumble;
- ``clicks``: Poisson clicks, knocks and short transients over a faint noise floor;
- ``music``: random chords and melody notes with harmonics and note envelopes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

NOISE_KINDS = ("white", "pink", "brown", "babble", "hum", "fan", "engine", "clicks", "music")

Talker = Callable[[np.random.Generator, int], np.ndarray]


def _unit_rms(x: np.ndarray) -> np.ndarray:
    rms = float(np.sqrt(np.mean(x * x)))
    return x / rms if rms > 0 else x


def _shaped(rng: np.random.Generator, n: int, sr: int, exponent: float, f_lo: float = 0.0):
    """Gaussian noise with power spectrum ~ 1/f^exponent (zero below f_lo)."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / sr)
    f[0] = f[1] if n > 1 else 1.0
    spec *= f ** (-exponent / 2.0)
    spec[f < f_lo] = 0.0
    spec[0] = 0.0
    return np.fft.irfft(spec, n)


def _bandpass(x: np.ndarray, sr: int, lo: float, hi: float, order: int = 4) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    hi = min(hi, 0.45 * sr)
    lo = max(lo, 10.0)
    sos = butter(order, [lo, hi], btype="bandpass", fs=sr, output="sos")
    return sosfilt(sos, x)


def _white(rng, n, sr, talker):
    return rng.standard_normal(n), {}


def _pink(rng, n, sr, talker):
    return _shaped(rng, n, sr, 1.0), {}


def _brown(rng, n, sr, talker):
    return _shaped(rng, n, sr, 2.0, f_lo=20.0), {}


def _babble(rng, n, sr, talker):
    if talker is None:
        raise ValueError("babble noise needs a talker function")
    k = int(rng.integers(3, 8))
    out = np.zeros(n)
    for _ in range(k):
        s = _unit_rms(np.asarray(talker(rng, n), dtype=np.float64)[:n])
        out += s * 10 ** (rng.uniform(-6, 0) / 20)
    return out, {"talkers": k}


def _hum(rng, n, sr, talker):
    f0 = float(rng.choice([50.0, 60.0])) * (1 + rng.uniform(-0.004, 0.004))
    t = np.arange(n) / sr
    drift = 1 + 0.002 * np.sin(2 * np.pi * rng.uniform(0.05, 0.3) * t)
    phase = 2 * np.pi * f0 * np.cumsum(drift) / sr
    n_harm = int(rng.integers(3, 12))
    odd_bias = rng.uniform(0, 1)  # buzzier hum: odd harmonics stronger
    x = np.zeros(n)
    for h in range(1, n_harm + 1):
        amp = rng.uniform(0.2, 1.0) / h ** rng.uniform(0.5, 1.5)
        if h % 2 == 1:
            amp *= 1 + odd_bias
        x += amp * np.sin(h * phase + rng.uniform(0, 2 * np.pi))
    x = _unit_rms(x) + 0.03 * rng.standard_normal(n)
    return x, {"f0": round(f0, 3), "harmonics": n_harm}


def _fan(rng, n, sr, talker):
    lo = rng.uniform(40, 300)
    hi = rng.uniform(1500, 6000)
    base = _bandpass(_shaped(rng, n, sr, rng.uniform(0.0, 1.5)), sr, lo, hi, order=2)
    t = np.arange(n) / sr
    rot = rng.uniform(2, 30)  # rotations per second
    blades = int(rng.integers(3, 8))
    am = 1 + rng.uniform(0.05, 0.4) * np.sin(2 * np.pi * rot * t + rng.uniform(0, 6.28))
    tone = 0.3 * _unit_rms(np.sin(2 * np.pi * rot * blades * t)) * rng.uniform(0, 1)
    x = _unit_rms(base) * am + tone
    return x, {"band": [round(lo, 1), round(hi, 1)], "rot_hz": round(rot, 2), "blades": blades}


def _engine(rng, n, sr, talker):
    t = np.arange(n) / sr
    f_start, f_end = rng.uniform(20, 80), rng.uniform(20, 80)
    f = f_start + (f_end - f_start) * t / max(t[-1], 1e-9)  # firing rate sweep
    phase = np.cumsum(f) / sr
    # (n,) pulse train: narrow Gaussian pulses at each firing instant
    frac = phase - np.floor(phase)
    pulses = np.exp(-0.5 * ((frac - 0.5) / rng.uniform(0.03, 0.12)) ** 2)
    pulses = _bandpass(pulses - pulses.mean(), sr, 20, rng.uniform(800, 3000), order=2)
    rumble = _bandpass(_shaped(rng, n, sr, 1.0), sr, 20, rng.uniform(200, 800), order=2)
    x = _unit_rms(pulses) + rng.uniform(0.2, 1.0) * _unit_rms(rumble)
    return x, {"firing_hz": [round(f_start, 2), round(f_end, 2)]}


def _clicks(rng, n, sr, talker):
    x = 0.02 * rng.standard_normal(n)
    rate = rng.uniform(1, 12)  # events per second
    n_events = int(rng.poisson(rate * n / sr)) + 1
    for _ in range(n_events):
        start = int(rng.integers(0, n))
        kind = int(rng.integers(3))
        if kind == 0:  # click: a few samples
            length = int(rng.integers(2, 40))
            burst = rng.standard_normal(length)
        elif kind == 1:  # knock: decaying low resonance
            length = int(sr * rng.uniform(0.03, 0.15))
            tt = np.arange(length) / sr
            freq, decay = rng.uniform(80, 400), rng.uniform(30, 90)
            burst = np.sin(2 * np.pi * freq * tt) * np.exp(-tt * decay)
        else:  # transient: decaying noise burst (keyboard, door, dish)
            length = int(sr * rng.uniform(0.01, 0.08))
            tt = np.arange(length) / sr
            burst = rng.standard_normal(length) * np.exp(-tt * rng.uniform(40, 200))
        seg = burst[: n - start] * rng.uniform(0.2, 1.0)
        x[start : start + len(seg)] += seg * 10
    return x, {"events": n_events}


def _music(rng, n, sr, talker):
    x = np.zeros(n)
    bpm = rng.uniform(60, 160)
    beat = int(sr * 60 / bpm)
    root = int(rng.integers(40, 60))  # MIDI note of the key
    scale = np.array([0, 2, 4, 5, 7, 9, 11])
    pos = 0
    n_notes = 0
    while pos < n:
        dur = beat * int(rng.choice([1, 2, 4]))
        chord = rng.random() < 0.5
        degrees = rng.choice(7, size=3 if chord else 1, replace=False)
        octave = 12 * int(rng.integers(0, 3))
        length = min(dur, n - pos)
        tt = np.arange(length) / sr
        env = np.minimum(1.0, tt / 0.01) * np.exp(-tt * rng.uniform(1, 6))  # attack, decay
        for d in degrees:
            midi = root + octave + scale[d]
            f0 = 440.0 * 2 ** ((midi - 69) / 12)
            for h in range(1, 6):
                if f0 * h < 0.45 * sr:
                    x[pos : pos + length] += env * np.sin(2 * np.pi * f0 * h * tt) / h**1.2
        pos += dur
        n_notes += 1
    return x, {"bpm": round(bpm, 1), "root_midi": root, "notes": n_notes}


_GENERATORS = {
    "white": _white, "pink": _pink, "brown": _brown, "babble": _babble, "hum": _hum,
    "fan": _fan, "engine": _engine, "clicks": _clicks, "music": _music,
}


def make_noise(
    kind: str, seed: int, n: int, sr: int = 16000, talker: Talker | None = None
) -> tuple[np.ndarray, dict]:
    """Noise of ``kind`` from ``seed``: (n,) float64 at unit RMS, and its drawn parameters."""
    if kind not in _GENERATORS:
        raise ValueError(f"unknown noise kind {kind!r}; expected one of {', '.join(NOISE_KINDS)}")
    rng = np.random.default_rng(seed)
    x, params = _GENERATORS[kind](rng, n, sr, talker)
    return _unit_rms(np.asarray(x, dtype=np.float64)), params
