"""The utterances the bench scores, and a small espeak-ng fallback set.

``load_pairs(spec)`` reads pairs through ``qsa.data``'s readers (``synth:DIR``,
``voicebank:DIR``, ``dns:DIR``; a bare DIR is read as our synthetic layout, or as VoiceBank+DEMAND
when it holds ``clean_testset_wav``) and adds each item's SNR and noise type from the corpus
``manifest.jsonl`` (``qsa data synth`` writes ``OUT/manifest.jsonl``; the fallback set here
writes ``OUT/test/manifest.jsonl``). Items without a manifest row get None for both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .base import resample

SR = 16000


@dataclass
class Utterance:
    id: str
    clean: np.ndarray  # float32 (N,) at SR
    noisy: np.ndarray  # float32 (N,) at SR
    snr_db: float | None = None
    noise_type: str | None = None


def _read(path: Path) -> np.ndarray:
    import soundfile as sf

    x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return resample(x.mean(axis=1), sr, SR)


def _manifest(split_dir: Path, split: str = "test") -> dict[str, dict]:
    """Manifest rows keyed by item name, from ``split_dir`` or its parent (rows of other
    splits are skipped)."""
    for m in (split_dir / "manifest.jsonl", split_dir.parent / "manifest.jsonl"):
        if not m.is_file():
            continue
        rows: dict[str, dict] = {}
        for line in m.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("split", split) != split:
                continue
            key = _first(row, "name", "id")
            if isinstance(key, str):
                rows[Path(key).stem] = row
        if rows:
            return rows
    return {}


def _first(row: dict, *keys):
    for k in keys:
        if row.get(k) is not None:
            return row[k]
    return None


def pair_set(spec: str | Path):
    """A ``qsa.data`` PairSet for ``spec`` (see the module doc)."""
    from qsa.data.readers import DATA_KINDS, parse_data_spec

    s = str(spec)
    kind, sep, _ = s.partition(":")
    if not (sep and kind in DATA_KINDS):
        root = Path(s)
        vb = root.is_dir() and any(
            p.name == "clean_testset_wav" for p in [root, *root.iterdir(), *root.glob("*/*")]
        )
        s = f"voicebank:{root}" if vb else f"synth:{root}"
    return parse_data_spec(s, split="test", sr=SR)


def load_pairs(spec: str | Path, limit: int | None = None) -> list[Utterance]:
    """Clean/noisy pairs of ``spec`` at 16 kHz, sorted by name; ``limit`` takes that many
    evenly spaced items (so every condition stays represented)."""
    ps = pair_set(spec)
    if not ps.paired:
        raise ValueError(f"{spec}: noisy-only set; the bench needs clean references")
    pairs = list(ps)
    if limit is not None and 0 < limit < len(pairs):
        pairs = [pairs[i] for i in np.linspace(0, len(pairs) - 1, limit).round().astype(int)]
    meta = _manifest(Path(ps.root))
    items = []
    for p in pairs:
        noisy, clean = p.load()
        row = meta.get(p.name, {})
        snr = _first(row, "snr_db", "snr")
        noise = _first(row, "noise_type", "noise")
        if isinstance(noise, dict):  # the real corpus groups by category (field, babble, ...)
            noise = _first(noise, "category", "kind", "type", "name")
        items.append(
            Utterance(
                p.name,
                np.asarray(clean, np.float32),
                np.asarray(noisy, np.float32),
                None if snr is None else float(snr),
                None if noise is None else str(noise),
            )
        )
    return items


def make_test_split(out: str | Path, n: int = 120, seed: int = 0, workers: int = 2) -> Path:
    """The first ``n`` items of the synthetic corpus's test split (``qsa.data.synth``, same
    seed: the items ``qsa data synth OUT --seed SEED`` puts in OUT/test), written as
    ``out/test/{clean,noisy}/NAME.wav`` + ``out/manifest.jsonl``, without building the train
    and val splits. Returns ``out/test``."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from qsa.audio.io import write_audio
    from qsa.data.synth import SR as SYNTH_SR
    from qsa.data.synth import build_item
    from qsa.fileio import atomic_write_text

    out = Path(out)
    jobs = [(seed, "test", i, True) for i in range(n)]
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(build_item, jobs))
    else:
        results = [build_item(j) for j in jobs]
    for record, clean, noisy in results:
        write_audio(out / record["clean"], clean, SYNTH_SR, force=True)
        write_audio(out / record["noisy"], noisy, SYNTH_SR, force=True)
    atomic_write_text(
        out / "manifest.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r, _, _ in results)
    )
    return out / "test"


# -- the small fallback set: espeak-ng speech + synthetic noises ---------------------------

SENTENCES = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
)
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb+m3", "en-us+f2", "en-gb-scotland")
NOISE_TYPES = ("white", "pink", "babble", "hum", "fan")
SNRS = (-5.0, 0.0, 5.0, 10.0, 15.0)


def espeak(text: str, voice: str = "en-us", rate: int = 160) -> np.ndarray | None:
    """espeak-ng rendering at 16 kHz, peak 0.5 (None when espeak-ng is missing)."""
    import shutil
    import subprocess
    import tempfile

    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "s.wav"
        r = subprocess.run(
            [exe, "-v", voice, "-s", str(rate), "-w", str(wav), text],
            capture_output=True,
            timeout=60,
        )
        if r.returncode != 0 or not wav.is_file():
            return None
        x = _read(wav)
    return (0.5 * x / (np.abs(x).max() + 1e-9)).astype(np.float32)


def synth_noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of one of NOISE_TYPES at 16 kHz (unit RMS)."""
    from scipy.signal import butter, lfilter

    t = np.arange(n) / SR
    if kind == "white":
        x = rng.standard_normal(n)
    elif kind == "pink":  # 1/f via spectral shaping
        spec = np.fft.rfft(rng.standard_normal(n))
        f = np.maximum(np.fft.rfftfreq(n, 1 / SR), 20.0)
        x = np.fft.irfft(spec / np.sqrt(f), n)
    elif kind == "babble":  # four other talkers at once
        x = np.zeros(n)
        for k in range(4):
            s = espeak(
                SENTENCES[int(rng.integers(len(SENTENCES)))],
                VOICES[int(rng.integers(len(VOICES)))],
                rate=int(rng.integers(140, 200)),
            )
            if s is None:
                s = rng.standard_normal(n) * 0.1
            s = np.tile(s, n // len(s) + 1)
            start = int(rng.integers(len(s) - n + 1))
            x += s[start : start + n] * (0.6 + 0.4 * k / 4)
    elif kind == "hum":  # mains hum with harmonics and a little hiss
        f0 = 50.0 if rng.random() < 0.5 else 60.0
        x = sum(np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 6.3)) / h for h in range(1, 9))
        x = x + 0.1 * rng.standard_normal(n)
    elif kind == "fan":  # band-limited noise with a slow swell
        b, a = butter(2, [100 / (SR / 2), 2500 / (SR / 2)], btype="band")
        x = lfilter(b, a, rng.standard_normal(n)) * (1 + 0.3 * np.sin(2 * np.pi * 0.7 * t))
    else:
        raise ValueError(f"noise type {kind!r}; expected one of {NOISE_TYPES}")
    x = np.asarray(x, np.float64)
    return (x / (np.sqrt(np.mean(x**2)) + 1e-12)).astype(np.float32)


def mix(clean: np.ndarray, noise: np.ndarray, snr_db: float) -> tuple[np.ndarray, np.ndarray]:
    """(clean, noisy) at ``snr_db``, both scaled by the same factor when the mix would clip."""
    gain = np.sqrt(np.mean(clean.astype(np.float64) ** 2) / 10 ** (snr_db / 10))
    noisy = clean + gain * noise[: len(clean)]
    peak = float(np.abs(noisy).max())
    scale = 0.9 / peak if peak > 0.99 else 1.0
    return (clean * scale).astype(np.float32), (noisy * scale).astype(np.float32)


def make_small_synth(out: str | Path, n: int = 50, seed: int = 0) -> Path:
    """Write ``n`` espeak-ng + noise pairs as ``out/test/{clean,noisy}/*.wav`` with
    ``out/test/manifest.jsonl`` (snr, noise_type); every SNR x noise type combination is
    covered once per 25 items. Returns the test folder."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    test = Path(out) / "test"
    (test / "clean").mkdir(parents=True, exist_ok=True)
    (test / "noisy").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        sentence = SENTENCES[i % len(SENTENCES)]
        voice = VOICES[(i // len(SENTENCES)) % len(VOICES)]
        clean = espeak(sentence, voice, rate=int(rng.integers(140, 190)))
        if clean is None:
            raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
        clean = np.pad(clean, (SR // 4, SR // 4))  # a little silence either side
        kind = NOISE_TYPES[i % len(NOISE_TYPES)]
        snr = SNRS[(i // len(NOISE_TYPES)) % len(SNRS)]
        clean, noisy = mix(clean, synth_noise(kind, len(clean), rng), snr)
        name = f"synth_{i:04d}"
        sf.write(test / "clean" / f"{name}.wav", clean, SR, subtype="FLOAT")
        sf.write(test / "noisy" / f"{name}.wav", noisy, SR, subtype="FLOAT")
        rows.append(
            {
                "name": name,
                "split": "test",
                "snr_db": snr,
                "noise_type": kind,
                "voice": voice,
                "text": sentence,
                "seconds": round(len(clean) / SR, 3),
            }
        )
    (test / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return test


def snr_bucket(snr: float | None) -> str:
    """Bucket label of an SNR in dB: '<0', '0-5', '5-10', '10-15', '>=15' (or 'unknown')."""
    if snr is None or not math.isfinite(snr):
        return "unknown"
    for lo, hi, label in ((-math.inf, 0, "<0"), (0, 5, "0-5"), (5, 10, "5-10"), (10, 15, "10-15")):
        if lo <= snr < hi:
            return label
    return ">=15"
