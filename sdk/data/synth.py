"""Deterministic synthetic noisy-speech corpus (no downloads): espeak-ng speech + numpy noise.

Every item comes from ``(seed, split, index)`` alone, so a corpus is reproducible and any item
can be rebuilt bit-exactly from its manifest line (``rebuild_item``).

Speech: espeak-ng (``--stdout``, 22.05 kHz) resampled to 16 kHz with soxr, from seeded
sentences (``qsa.data.sentences``), English voice x variant (``-v VOICE+VARIANT``), rate
``-s`` 130-190 wpm, pitch ``-p`` 25-75; silence trimmed, 0.1-0.5 s of silence padded at each
end; about 2-6 s per utterance.

Speakers are disjoint between splits: both the accent voice and the timbre variant of a test
item never occur in train or val (``VOICE_SPLITS``). Noise seeds are disjoint too:
``noise_seed = ((seed * 3 + split_id) << 24) + index``. Babble uses talkers from the item's
own split.

Mixing: noise at an SNR uniform in [-5, 20] dB relative to the speech in the mixture (the
reverberant speech when reverb is on), whole-clip power; the mixture is then scaled to an RMS
level uniform in [-35, -15] dBFS (less if a peak would pass 0.99), the same gain applied to
the clean target. Both are stored as 16-bit PCM.

Reverb (``reverb=True``: half of the items): a seeded shoebox room (3-10 x 3-8 x 2.5-4 m,
RT60 0.2-0.8 s, image-source order <= 20) from pyroomacoustics. The noisy input contains the
full reverberant speech; the clean TARGET is the speech convolved with the early part of the
same RIR (direct path + 50 ms, 5 ms taper), time-aligned with the dry speech. Models thus
learn denoising + late-reverb suppression without being asked to undo the direct path's
colouration. Noise is added dry (treated as diffuse / already in the room).

Layout written: ``OUT/{train,val,test}/{clean,noisy}/NAME.wav`` (same names in clean and
noisy, VoiceBank-like), ``OUT/manifest.jsonl`` (one JSON object per item with every
parameter) and ``OUT/corpus.json`` (settings, voice table, totals, build time). Splits are
80/10/10 by duration.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from qsa.errors import QsaError
from qsa.fileio import ensure_dir

from .noise import NOISE_KINDS, make_noise
from .sentences import make_sentence

SR = 16000
ESPEAK_SR = 22050
CORPUS_VERSION = 1
SPLITS = ("train", "val", "test")
SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
SPLIT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}
SNR_RANGE_DB = (-5.0, 20.0)
LEVEL_RANGE_DBFS = (-35.0, -15.0)
REVERB_PROB = 0.5
EARLY_MS = 50.0
MAX_ISM_ORDER = 20
DEMO_SNRS_DB = (0.0, 5.0, 10.0, 15.0, 2.5, 7.5, 12.5, 17.5)

# Disjoint speakers: accent voices (espeak-ng gmw/* English voices) and timbre variants
# (espeak-ng-data/voices/!v) are each assigned to one split only.
VOICE_SPLITS = {
    "train": {
        "voices": ["en-gb", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-029"],
        "variants": (
            "m1 m2 m3 m4 m5 f1 f2 f3 Alex Alicia Andy Annie Denis Gene Henrique Hugo Jacky Lee "
            "Marco Mario Michael Nguyen adam anika antonio aunty belinda boris caleb david ed "
            "grandpa gustave iven john linda marcelo max michel norbert pablo paul quincy rob "
            "sandro steph travis zac klatt klatt3"
        ).split(),
    },
    "val": {
        "voices": ["en-gb-x-gbclan"],
        "variants": "m6 m7 f4 Andrea Diogo edward miguel shelby klatt2".split(),
    },
    "test": {
        "voices": ["en-us-nyc", "en-gb-x-gbcwmd"],
        "variants": "m8 f5 Mike benjamin grandma iven2 pedro robert victor".split(),
    },
}


# --------------------------------------------------------------------------- speech


def long_signal(
    start: int, n: int, sr: int = 16000, silence_s: tuple[float, float] = (3540, 3600)
) -> np.ndarray:
    """Samples [start, start + n) of an arbitrarily long deterministic test signal: noise whose
    level changes every 10 s, a tone gliding between 200 Hz and 2 kHz, and digital silence over
    ``silence_s`` of every hour. A function of the sample index alone, so a file of any length
    can be written (and checked) block by block, with any block size giving the same samples."""
    t = np.arange(start, start + n, dtype=np.float64)
    seg = (t // (10 * sr)).astype(np.int64)
    level = 0.02 + 0.18 * ((seg * 7919) % 13) / 12
    rng = np.random.default_rng(start)
    glide = 2 * np.pi * t / (40 * sr)  # frequency 1100 + 900 sin(glide) Hz
    x = level * rng.standard_normal(n) + 0.1 * np.sin(
        2 * np.pi * 1100 * t / sr - 900 * 40 * np.cos(glide)
    )
    in_hour = t % (3600 * sr)
    x[(in_hour >= silence_s[0] * sr) & (in_hour < silence_s[1] * sr)] = 0.0
    return np.clip(x, -1, 1).astype(np.float32)


def espeak(text: str, voice: str, variant: str, rate: int, pitch: int) -> np.ndarray:
    """espeak-ng speech for ``text`` as float32 at 16 kHz (silence at the ends trimmed)."""
    from qsa.audio.resample import resample

    cmd = ["espeak-ng", "-v", f"{voice}+{variant}", "-s", str(int(rate)), "-p", str(int(pitch)),
           "--stdout", text]
    try:
        out = subprocess.run(cmd, capture_output=True, check=True, timeout=60).stdout
    except FileNotFoundError as e:
        raise QsaError("espeak-ng is not installed; install it with `apt-get install espeak-ng`"
                       " (needed by the synthetic corpus)") from e
    except subprocess.CalledProcessError as e:
        raise QsaError(f"espeak-ng failed for voice {voice}+{variant}: "
                       f"{e.stderr.decode(errors='replace').strip()}") from e
    pos = out.find(b"data")
    if pos < 0:
        raise QsaError(f"espeak-ng gave no WAV data for voice {voice}+{variant}")
    pcm = np.frombuffer(out[pos + 8 :], dtype="<i2")
    x = resample(pcm.astype(np.float32) / 32768.0, ESPEAK_SR, SR)
    return _trim(x)


def espeak_data_dir() -> Path:
    """espeak-ng's data folder (from ``espeak-ng --version``)."""
    try:
        out = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    except FileNotFoundError as e:
        raise QsaError("espeak-ng is not installed; install it with `apt-get install espeak-ng`"
                       " (needed by the synthetic corpus)") from e
    marker = "Data at:"
    if marker not in out:
        raise QsaError(f"cannot find espeak-ng's data folder in `espeak-ng --version`: {out!r}")
    return Path(out.split(marker, 1)[1].strip())


def check_voices() -> None:
    """Fail clearly if a voice or variant of ``VOICE_SPLITS`` is missing from espeak-ng.

    (espeak-ng silently falls back to its default timbre for an unknown ``+variant``.)
    """
    listing = subprocess.run(["espeak-ng", "--voices=en"], capture_output=True, text=True,
                             timeout=30).stdout
    known = {line.split()[1] for line in listing.splitlines()[1:] if len(line.split()) > 1}
    variants_dir = espeak_data_dir() / "voices" / "!v"
    for split, table in VOICE_SPLITS.items():
        missing = [v for v in table["voices"] if v not in known]
        missing += [f"+{v}" for v in table["variants"] if not (variants_dir / v).is_file()]
        if missing:
            raise QsaError(f"espeak-ng lacks the {split} voices/variants {missing}; install the "
                           "Debian package espeak-ng (>= 1.51) with its data")


def _trim(x: np.ndarray, rel: float = 0.01, margin: int = 160) -> np.ndarray:
    if x.size == 0:
        return x
    on = np.flatnonzero(np.abs(x) > rel * float(np.max(np.abs(x))))
    if on.size == 0:
        return x[:0]
    return x[max(0, on[0] - margin) : on[-1] + margin + 1]


def _talker(split: str) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Babble talker drawing voices of ``split``: speech of at least n samples, random start."""
    table = VOICE_SPLITS[split]

    def talk(rng: np.random.Generator, n: int) -> np.ndarray:
        voice = table["voices"][int(rng.integers(len(table["voices"])))]
        variant = table["variants"][int(rng.integers(len(table["variants"])))]
        rate, pitch = int(rng.integers(130, 191)), int(rng.integers(25, 76))
        parts, total = [], 0
        while total < n + SR:
            s = espeak(make_sentence(rng, int(rng.integers(6, 16))), voice, variant, rate, pitch)
            s = np.concatenate([s, np.zeros(int(rng.integers(0, SR // 4)), np.float32)])
            parts.append(s)
            total += len(s)
        x = np.concatenate(parts)
        start = int(rng.integers(0, len(x) - n + 1))
        return x[start : start + n]

    return talk


# --------------------------------------------------------------------------- items


def noise_seed(seed: int, split: str, index: int) -> int:
    """Noise seed of an item; disjoint between splits for any corpus seed."""
    if not 0 <= index < 1 << 24:
        raise QsaError(f"item index {index} out of range (0..{(1 << 24) - 1})")
    return ((int(seed) * 3 + SPLIT_IDS[split]) << 24) + int(index)


def _check_split(split: str) -> None:
    if split not in SPLIT_IDS:
        raise QsaError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def sample_item(
    seed: int, split: str, index: int, reverb: bool = True
) -> tuple[dict, np.ndarray]:
    """Draw the parameters of item ``index`` of ``split``; returns (params, dry speech)."""
    _check_split(split)
    rng = np.random.default_rng([int(seed), SPLIT_IDS[split], int(index)])
    table = VOICE_SPLITS[split]
    voice = table["voices"][int(rng.integers(len(table["voices"])))]
    variant = table["variants"][int(rng.integers(len(table["variants"])))]
    rate, pitch = int(rng.integers(130, 191)), int(rng.integers(25, 76))
    best = None
    for _ in range(8):  # draw sentences until the speech lasts 1.6..5.2 s
        target_s = rng.uniform(1.8, 5.0)
        text = make_sentence(rng, max(3, round(target_s * rate / 60)))
        speech = espeak(text, voice, variant, rate, pitch)
        d = len(speech) / SR
        miss = max(0.0, 1.6 - d, d - 5.2)
        if best is None or miss < best[0]:
            best = (miss, text, speech)
        if miss == 0.0:
            break
    _, text, speech = best
    params = {
        "version": CORPUS_VERSION,
        "name": f"{voice.replace('-', '')}_{variant}_{index:05d}",
        "split": split, "index": int(index), "seed": int(seed),
        "voice": voice, "variant": variant, "rate": rate, "pitch": pitch, "text": text,
        "lead_s": round(float(rng.uniform(0.1, 0.5)), 3),
        "tail_s": round(float(rng.uniform(0.1, 0.5)), 3),
        "noise": {"kind": NOISE_KINDS[int(rng.integers(len(NOISE_KINDS)))],
                  "seed": noise_seed(seed, split, index)},
        "snr_db": round(float(rng.uniform(*SNR_RANGE_DB)), 2),
        "level_dbfs": round(float(rng.uniform(*LEVEL_RANGE_DBFS)), 2),
        "reverb": None,
    }
    rrng = np.random.default_rng([int(seed), SPLIT_IDS[split], int(index), 2])
    if reverb and rrng.random() < REVERB_PROB:
        params["reverb"] = _sample_room(rrng)
    return params, speech


def _sample_room(rng: np.random.Generator) -> dict:
    room = [rng.uniform(3, 10), rng.uniform(3, 8), rng.uniform(2.5, 4)]
    rt60 = rng.uniform(0.2, 0.8)

    def point():
        return [rng.uniform(0.5, room[0] - 0.5), rng.uniform(0.5, room[1] - 0.5),
                rng.uniform(1.0, min(2.0, room[2] - 0.3))]

    mic = point()
    src = point()
    for _ in range(50):  # source 0.5..3 m from the microphone
        if 0.5 <= float(np.linalg.norm(np.subtract(src, mic))) <= 3.0:
            break
        src = point()
    r = lambda v: [round(float(a), 3) for a in v]
    return {"room_m": r(room), "rt60_s": round(float(rt60), 3), "source_m": r(src),
            "mic_m": r(mic), "early_ms": EARLY_MS}


def room_rir(rev: dict) -> np.ndarray:
    """The room impulse response (float64, 16 kHz) of a manifest ``reverb`` entry."""
    import pyroomacoustics as pra

    e_abs, order = pra.inverse_sabine(rev["rt60_s"], rev["room_m"])
    room = pra.ShoeBox(rev["room_m"], fs=SR, materials=pra.Material(e_abs),
                       max_order=min(int(order), MAX_ISM_ORDER))
    room.add_source(rev["source_m"])
    room.add_microphone(rev["mic_m"])
    room.compute_rir()
    return np.asarray(room.rir[0][0], dtype=np.float64)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def reverberate(dry: np.ndarray, rev: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """(target, wet) of dry speech in the room of a manifest ``reverb`` entry (None: dry):
    the target keeps the direct path + ``early_ms`` (5 ms taper), the wet input the whole
    RIR; both aligned with the dry speech's direct path."""
    from scipy.signal import fftconvolve

    if not rev:
        return dry, dry
    rir = room_rir(rev)
    d = int(np.argmax(np.abs(rir)))  # direct path
    end = min(d + int(rev["early_ms"] * SR / 1000), len(rir))
    taper = int(0.005 * SR)
    early = rir[:end].copy()
    early[end - taper :] *= np.hanning(2 * taper)[taper:]  # (taper,) fade-out
    target = fftconvolve(dry, early)[d : d + len(dry)]
    wet = fftconvolve(dry, rir)[d : d + len(dry)]
    return target, wet


def render_item(params: dict, speech: np.ndarray | None = None) -> tuple[
    np.ndarray, np.ndarray, dict
]:
    """(clean int16, noisy int16, info) for ``params``; ``speech`` skips re-synthesis."""
    from qsa.audio.io import to_int16

    if speech is None:
        speech = espeak(params["text"], params["voice"], params["variant"], params["rate"],
                        params["pitch"])
    dry = np.concatenate([np.zeros(round(params["lead_s"] * SR)), speech.astype(np.float64),
                          np.zeros(round(params["tail_s"] * SR))])
    target, wet = reverberate(dry, params.get("reverb"))
    k = 0.05 / max(_rms(target), 1e-12)
    target, wet = target * k, wet * k
    nz = params["noise"]
    noise, noise_info = make_noise(nz["kind"], nz["seed"], len(wet), SR,
                                   talker=_talker(params["split"]))
    noise *= _rms(wet) / 10 ** (params["snr_db"] / 20)
    noisy = wet + noise
    gain = 10 ** (params["level_dbfs"] / 20) / max(_rms(noisy), 1e-12)
    peak = max(float(np.max(np.abs(noisy))), float(np.max(np.abs(target)))) * gain
    if peak > 0.99:
        gain *= 0.99 / peak
    info = {"gain": float(gain), "noise_params": noise_info, "duration": len(dry) / SR}
    return to_int16(target * gain), to_int16(noisy * gain), info


def rebuild_item(line: str | dict) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild an item from its manifest line: (clean, noisy) float32 as read from the files."""
    params = json.loads(line) if isinstance(line, str) else line
    if params.get("version") != CORPUS_VERSION:
        raise QsaError(f"manifest line of corpus version {params.get('version')!r}; this qsa "
                       f"builds version {CORPUS_VERSION}; regenerate the corpus")
    clean, noisy, _ = render_item(params)
    scale = np.float32(32768.0)
    return clean.astype(np.float32) / scale, noisy.astype(np.float32) / scale


def build_item(job: tuple[int, str, int, bool]) -> tuple[dict, np.ndarray, np.ndarray]:
    """Worker entry point: (manifest record, clean int16, noisy int16) of one item."""
    seed, split, index, reverb = job
    params, speech = sample_item(seed, split, index, reverb)
    clean, noisy, info = render_item(params, speech)
    name = params["name"]
    record = dict(params)
    record["noise"] = {**params["noise"], **info["noise_params"]}
    record.update(gain=info["gain"], duration=info["duration"],
                  clean=f"{split}/clean/{name}.wav", noisy=f"{split}/noisy/{name}.wav")
    return record, clean, noisy


# --------------------------------------------------------------------------- corpus


def _prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise QsaError(f"{out} is a file; the corpus needs a folder")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise QsaError(f"{out} is not empty; pick an empty folder or pass --force to "
                           "replace the corpus in it")
        ours = (out / "manifest.jsonl").exists() or (out / "corpus.json").exists()
        if not ours:
            raise QsaError(f"{out} is not empty and holds no qsa corpus (no manifest.jsonl); "
                           "refusing to delete anything there; pick another folder")
        for sub in (*SPLITS, "clean", "noisy"):
            if (out / sub).is_dir():
                shutil.rmtree(out / sub)
        for f in ("manifest.jsonl", "corpus.json"):
            (out / f).unlink(missing_ok=True)
    ensure_dir(out, "corpus folder")


def _write_item(out: Path, record: dict, clean: np.ndarray, noisy: np.ndarray) -> None:
    from qsa.audio.io import write_audio

    write_audio(out / record["clean"], clean, SR, force=True)
    write_audio(out / record["noisy"], noisy, SR, force=True)


def build_splits(out: Path, hours: float, job: Callable[[str, int], tuple],
                 build: Callable, workers: int, progress: bool, desc: str,
                 ) -> tuple[list[dict], dict]:
    """Make and write the items of every split in index order until each reaches its share
    of ``hours`` (a deterministic stop); ``build(job(split, index))`` gives (record, clean
    int16, noisy int16) and runs in ``workers`` spawned processes (0: here). Returns the
    manifest records and the per-split totals. Shared by ``qsa data synth`` and ``real``."""
    from tqdm import tqdm

    from qsa.workers import spawn_pool

    ex = spawn_pool(workers) if workers > 0 else None
    records: list[dict] = []
    totals = {}
    bar = tqdm(total=round(hours * 3600), unit="s", desc=desc, disable=not progress)
    try:
        for split in SPLITS:
            target = hours * 3600 * SPLIT_FRACTIONS[split]
            total, index, batch = 0.0, 0, max(4, 4 * workers)
            while total < target:
                jobs = [job(split, i) for i in range(index, index + batch)]
                results = ex.map(build, jobs) if ex else map(build, jobs)
                for record, clean, noisy in results:
                    if total >= target:
                        break  # deterministic stop: items in index order until the target
                    _write_item(out, record, clean, noisy)
                    records.append(record)
                    total += record["duration"]
                    bar.update(round(record["duration"]))
                index += batch
            totals[split] = {"items": sum(r["split"] == split for r in records),
                             "hours": round(total / 3600, 4)}
    finally:
        bar.close()
        if ex:
            ex.shutdown(cancel_futures=True)
    return records, totals


def make_corpus(
    out: str | Path,
    hours: float,
    seed: int = 0,
    reverb: bool = True,
    workers: int = 2,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Build a corpus of about ``hours`` of audio under ``out``; returns the summary.

    Items are made by ``workers`` spawned processes (0: in this process; a script using
    workers needs the ``if __name__ == "__main__":`` guard) and written in index order; each
    split stops at the first item that reaches its share of ``hours``.
    """
    from qsa.fileio import atomic_write_text

    if not hours > 0:
        raise QsaError(f"--hours {hours} must be > 0 (e.g. 0.02 for a test corpus)")
    if seed < 0:
        raise QsaError(f"--seed {seed} must be >= 0")
    out = Path(out)
    check_voices()
    _prepare_out(out, force)
    # marker first, so an interrupted build can be replaced with --force
    atomic_write_text(out / "corpus.json", json.dumps({"status": "incomplete"}) + "\n")
    t0 = time.perf_counter()
    records, totals = build_splits(out, hours, lambda split, i: (seed, split, i, reverb),
                                   build_item, workers, progress, "synth")
    elapsed = time.perf_counter() - t0
    atomic_write_text(out / "manifest.jsonl",
                      "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    summary = {
        "status": "complete", "version": CORPUS_VERSION, "seed": seed,
        "hours_requested": hours, "reverb": reverb,
        "sample_rate": SR, "splits": totals, "voice_splits": VOICE_SPLITS,
        "noise_kinds": list(NOISE_KINDS), "snr_range_db": SNR_RANGE_DB,
        "level_range_dbfs": LEVEL_RANGE_DBFS, "workers": workers,
        "build_seconds": round(elapsed, 1),
    }
    atomic_write_text(out / "corpus.json", json.dumps(summary, indent=2) + "\n")
    return summary


def make_demo_set(out_dir: str | Path, n: int = 8, seed: int = 20260, force: bool = False,
                  ) -> list[dict]:
    """A tiny fixed set from test-split voices: ``out_dir/{clean,noisy}/NAME.wav``.

    Noise kinds cycle through every kind and SNRs through ``DEMO_SNRS_DB``, no reverb, so
    the demo shows each condition once. Item i is the same whatever ``n`` (a smaller set is
    a prefix of a larger one). Deterministic; returns the manifest records.
    """
    from qsa.fileio import atomic_write_text

    if n < 1:
        raise QsaError(f"n={n}: the demo set needs at least one item")
    out = Path(out_dir)
    _prepare_out(out, force)
    records = []
    for i in range(n):
        params, speech = sample_item(seed, "test", i, reverb=False)
        kind = NOISE_KINDS[i % len(NOISE_KINDS)]
        params["noise"]["kind"] = kind
        params["snr_db"] = DEMO_SNRS_DB[i % len(DEMO_SNRS_DB)]
        params["level_dbfs"] = -25.0
        params["name"] = f"demo{i:02d}_{kind}_{params['snr_db']:g}dB"
        clean, noisy, info = render_item(params, speech)
        record = {**params, "gain": info["gain"], "duration": info["duration"],
                  "clean": f"clean/{params['name']}.wav", "noisy": f"noisy/{params['name']}.wav"}
        _write_item(out, record, clean, noisy)
        records.append(record)
    atomic_write_text(out / "manifest.jsonl",
                      "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return records
