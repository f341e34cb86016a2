"""Real-voice corpus (no downloads): human speech and recorded noise from Debian packages.

``qsa data real OUT --hours H`` builds ``OUT/{train,val,test}/{clean,noisy}/NAME.wav`` (the
layout of ``qsa data synth``; read it with ``--data real:OUT``), ``OUT/manifest.jsonl`` (one
JSON object per item: every source file, speaker, licence and parameter) and
``OUT/corpus.json``. Every item comes from ``(seed, split, index)`` alone, so a corpus is
reproducible and any item can be rebuilt bit-exactly from its manifest line
(``rebuild_item``).

Speech (``SPEAKERS``; the packages of shared/DATA.md):

- asterisk-core-sounds-{en,es,fr,it}-g722: studio prompts, G.722 at 16 kHz (decoded with
  the ``G722`` wheel). Allison (en and es: one woman), June (fr-CA, F), Carlo (it, M).
- fillets-ng-data-{cs,nl}: voice-acted dialogue, ogg at 22.05 / 44.1 kHz. The file name's
  second field names the role: ``m`` (the small fish, higher voice) and ``v`` (the big fish,
  lower voice) are one actor each per language; the other roles are pooled as ``minor``.
- klettres-data: KDE's letter-learning game, letters and syllables spoken by a native speaker
  per language (20 languages, ~51 minutes, ogg at 44.1 kHz; the Danish letters whose headers
  claim 128 kHz are left out). Short, isolated items, but 20 more real voices for training:
  each language folder is one speaker ``klettres-<lang>`` (training split only).
- ktuberling-data: KDE's stamp-drawing toy, the names of its stamps (words such as "ear",
  "camel", "reindeer") spoken by one native speaker per language; 12 of the languages with
  at least 40 wideband recordings (~29 minutes, ogg / opus / wav at 22.05-48 kHz; narrowband
  8 kHz files are left out, and Galician, whose files carry a steady tone) are 12 more
  training voices ``ktuberling-<lang>`` (corpus version 3).
- A share of the train / val items (``synth_share``) uses espeak-ng speech of that split's
  synthetic voices (``qsa.data.synth``), so the corpus also covers what the models knew.

Splits are by speaker (``SPEAKER_SPLITS``): the test speakers (June, Carlo) and the
validation speaker (the Dutch ``m`` actor) never occur in training, not even in babble.

Noise (``NOISE_CATEGORIES``), split by file: each recording is assigned to one split by a
hash of its name (``noise_split``: 70 / 10 / 20 % train / val / test), so test noise files
are never heard in training or validation.

- ``field``: openttd-opensfx, 69 freesound field recordings (traffic, aircraft, trains,
  applause, wind, machines, animals) read from its ``opensfx.cat`` container;
- ``samples``: sonic-pi-samples, 165 CC0 recordings (vinyl hiss, industrial loops, drones,
  doors, drums, instruments); short ones are repeated with random gaps;
- ``babble``: 3-6 real talkers of the item's own split (not the item's speaker) summed;
- ``generated``: the seeded numpy noise bank of ``qsa.data.noise`` (all kinds but babble).

Noise augmentation (training items only, corpus version 4; ``NOISE_AUG_PROB`` of the field and
samples items): the recording is played 0.8-1.25x as fast (pitch and tempo together, a soxr
rate change), shaped by two peaking filters of +-9 dB at 100 Hz-6 kHz, and in half of them
summed with a second recording of the split's pools at -9..0 dB. 48 training recordings of
field noise and 115 of samples become many more noises; the test noise files stay unheard.

Mixing: speech clips of one speaker (with 0.1-0.4 s gaps) until 2-8 s, reverberated in
a third of the items (a seeded shoebox room; the target is the direct path + 50 ms, as in
``qsa.data.synth``), noise at an SNR uniform in [-5, 25] dB (train) or one of 0 / 5 / 10 dB
(val, test) over the whole clip. Then a capture chain acts on the noisy mixture and the
clean target alike: a microphone high-pass (60-200 Hz), a band limit (a 44.1 / 48 kHz
soxr round trip or an 8th-order low-pass at 5.5-7.8 kHz), slow gain changes of up to
+-6 dB (an AGC), and the level (RMS -42 to -12 dBFS); mild clipping (1-6 dB of drive) acts
on the noisy input only, so the target stays the unclipped speech. Stored as 16-bit PCM
at 16 kHz.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import subprocess
import time
from pathlib import Path

import numpy as np

from qsa.errors import QsaError

SR = 16000
CORPUS_VERSION = 4  # 2: KLettres voices, 3: KTuberling voices, 4: noise augmentation; all in
# training only (the validation and test items are those of version 1)
SPLITS = ("train", "val", "test")
SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
SPLIT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}
TRAIN_SNR_DB = (-5.0, 25.0)
EVAL_SNRS_DB = (0.0, 5.0, 10.0)
LEVEL_RANGE_DBFS = (-42.0, -12.0)
SPEECH_S = (2.0, 8.0)
REVERB_PROB = 1 / 3
HIGHPASS_PROB, BAND_PROB, AGC_PROB, CLIP_PROB = 0.5, 0.4, 0.3, 0.1
SYNTH_SHARE = 0.2
NOISE_AUG_PROB = 0.7  # share of training field / samples items whose noise is augmented
NOISE_SPEED = (0.8, 1.25)
NOISE_EQ_DB, NOISE_EQ_HZ = 9.0, (100.0, 6000.0)

ASTERISK_ROOT = Path("/usr/share/asterisk/sounds")
FILLETS_ROOT = Path("/usr/share/games/fillets-ng/sound")
OPENSFX_CAT = Path("/usr/share/games/openttd/baseset/opensfx/opensfx.cat")
SONIC_PI_ROOT = Path("/usr/share/sonic-pi/samples")
KLETTRES_ROOT = Path("/usr/share/klettres")
KLETTRES_LANGS = ("ar", "cs", "da", "de", "en", "en_GB", "es", "fr", "he", "hu", "it", "lt",
                  "ml", "nb", "nds", "nl", "pt_BR", "ru", "tn", "uk")
KTUBERLING_ROOT = Path("/usr/share/ktuberling/sounds")
# (gl is left out: a steady tone ~20 dB below the speech runs through every file)
KTUBERLING_LANGS = ("ca", "da", "de", "el", "en", "fr", "lt", "nn", "ru", "sl", "uk", "wa")
MIN_SPEECH_RATE = 16000  # recordings below this rate (narrowband) are left out

# speaker -> where its recordings are, the Debian package(s) and the licence
SPEAKERS: dict[str, dict] = {
    "allison": {"source": "asterisk", "dirs": ["en_US_f_Allison", "es_MX_f_Allison"],
                "packages": ["asterisk-core-sounds-en-g722", "asterisk-core-sounds-es-g722"],
                "licence": "CC-BY-SA-3.0", "sex": "F"},
    "june": {"source": "asterisk", "dirs": ["fr_CA_f_June"],
             "packages": ["asterisk-core-sounds-fr-g722"], "licence": "CC-BY-SA-3.0",
             "sex": "F"},
    "carlo": {"source": "asterisk", "dirs": ["it_IT_m_Carlo"],
              "packages": ["asterisk-core-sounds-it-g722"], "licence": "CC-BY-SA-3.0",
              "sex": "M"},
}
for _lang in ("cs", "nl"):
    for _role in ("m", "v", "minor"):
        SPEAKERS[f"fillets-{_lang}-{_role}"] = {
            "source": "fillets", "lang": _lang, "role": _role,
            "packages": [f"fillets-ng-data-{_lang}"], "licence": "GPL-2.0-or-later",
            "sex": {"m": "M", "v": "M", "minor": "mixed"}[_role]}

for _lang in KLETTRES_LANGS:
    SPEAKERS[f"klettres-{_lang}"] = {"source": "klettres", "lang": _lang,
                                     "packages": ["klettres-data"],
                                     "licence": "GPL-2.0-or-later", "sex": "unknown"}
for _lang in KTUBERLING_LANGS:
    SPEAKERS[f"ktuberling-{_lang}"] = {"source": "ktuberling", "lang": _lang,
                                       "packages": ["ktuberling-data"],
                                       "licence": "GPL-2.0-or-later", "sex": "unknown"}

SPEAKER_SPLITS = {
    "train": ["allison", "fillets-cs-m", "fillets-cs-v", "fillets-nl-v", "fillets-cs-minor",
              "fillets-nl-minor", *(f"klettres-{lang}" for lang in KLETTRES_LANGS),
              *(f"ktuberling-{lang}" for lang in KTUBERLING_LANGS)],
    "val": ["fillets-nl-m"],
    "test": ["june", "carlo"],
}

# how often a split's item picks each speaker (others 1.0): Allison speaks two languages,
# the pooled minor roles are many short parts; the 20 KLettres voices (isolated letters and
# syllables) and the 12 KTuberling voices (words) are drawn at 0.15 each: about a quarter
# and a sixth of the real training speech
SPEAKER_WEIGHTS = {"allison": 2.0, "fillets-cs-minor": 0.5, "fillets-nl-minor": 0.5,
                   **{f"klettres-{lang}": 0.15 for lang in KLETTRES_LANGS},
                   **{f"ktuberling-{lang}": 0.15 for lang in KTUBERLING_LANGS}}

NOISE_CATEGORIES = ("field", "samples", "babble", "generated")
NOISE_SOURCES = {
    "field": {"package": "openttd-opensfx", "licence": "CC-BY-SA-3.0 (clips CC-BY-3.0 / CC0)"},
    "samples": {"package": "sonic-pi-samples", "licence": "CC0-1.0"},
}
GENERATED_KINDS = ("white", "pink", "brown", "hum", "fan", "engine", "clicks", "music")
NOISE_SPLIT_PERCENT = {"train": (0, 70), "val": (70, 80), "test": (80, 100)}
PACKAGES = sorted({p for s in SPEAKERS.values() for p in s["packages"]}
                  | {v["package"] for v in NOISE_SOURCES.values()})
LICENCES = {
    "asterisk-core-sounds-*-g722": "CC-BY-SA-3.0 (Allison, June, Carlo; Digium / Sangoma)",
    "fillets-ng-data-cs/-nl": "GPL-2.0-or-later (Fish Fillets NG voice acting)",
    "openttd-opensfx": "CC-BY-SA-3.0 as a collection (clips CC-BY-3.0 / CC-BY-SA-3.0 / CC0)",
    "sonic-pi-samples": "CC0-1.0",
    "klettres-data": "GPL-2.0-or-later (KLettres letter and syllable recordings; KDE)",
    "ktuberling-data": "GPL-2.0-or-later (KTuberling spoken stamp names; KDE)",
    "espeak-ng": "GPL-3.0-or-later (synthetic speech, generated)",
}


# --------------------------------------------------------------------------- sources


def missing_packages() -> list[str]:
    """The Debian packages of ``PACKAGES`` whose files are not on this machine."""
    present = {
        "openttd-opensfx": OPENSFX_CAT.is_file(),
        "sonic-pi-samples": SONIC_PI_ROOT.is_dir() and any(SONIC_PI_ROOT.glob("*.flac")),
    }
    for lang in ("cs", "nl"):
        present[f"fillets-ng-data-{lang}"] = any(FILLETS_ROOT.glob(f"*/{lang}/*.ogg"))
    present["klettres-data"] = all(any((KLETTRES_ROOT / lang).rglob("*.ogg"))
                                   for lang in KLETTRES_LANGS)
    present["ktuberling-data"] = all((KTUBERLING_ROOT / lang).is_dir()
                                     and any((KTUBERLING_ROOT / lang).iterdir())
                                     for lang in KTUBERLING_LANGS)
    for s in SPEAKERS.values():
        if s["source"] == "asterisk":
            for d, pkg in zip(s["dirs"], s["packages"], strict=True):
                present[pkg] = any((ASTERISK_ROOT / d).rglob("*.g722"))
    return [p for p in PACKAGES if not present.get(p, False)]


def check_packages() -> None:
    """Fail naming the exact install command when a source package is missing."""
    missing = missing_packages()
    if missing:
        raise QsaError(
            f"the real-voice corpus needs the Debian packages {', '.join(missing)} (speech and "
            "noise recordings, no download at run time); install them with\n"
            f"  sudo apt-get install -y {' '.join(PACKAGES)}\n"
            "(`make setup` does this when run as root)")


@functools.lru_cache(maxsize=1)
def speech_files() -> dict[str, list[str]]:
    """speaker -> sorted recording paths (strings, so the table pickles cheaply)."""
    out: dict[str, list[str]] = {k: [] for k in SPEAKERS}
    for name, s in SPEAKERS.items():
        if s["source"] == "asterisk":
            for d in s["dirs"]:
                out[name] += [str(p) for p in (ASTERISK_ROOT / d).rglob("*.g722")
                              if "silence" not in p.relative_to(ASTERISK_ROOT / d).parts]
    for f in FILLETS_ROOT.glob("*/*/*.ogg"):
        lang = f.parent.name
        if lang not in ("cs", "nl"):
            continue
        parts = f.stem.split("-")
        role = parts[1] if len(parts) >= 3 and parts[1] in ("m", "v") else "minor"
        out[f"fillets-{lang}-{role}"].append(str(f))
    import soundfile as sf

    for lang in KLETTRES_LANGS:
        out[f"klettres-{lang}"] = [str(f) for f in (KLETTRES_ROOT / lang).rglob("*.ogg")
                                   if sf.info(str(f)).samplerate <= 48000]
    for lang in KTUBERLING_LANGS:
        out[f"ktuberling-{lang}"] = [
            str(f) for f in (KTUBERLING_ROOT / lang).iterdir()
            if f.suffix in (".ogg", ".opus", ".wav")
            and MIN_SPEECH_RATE <= sf.info(str(f)).samplerate <= 48000]
    return {k: sorted(v) for k, v in out.items()}


def opensfx_entries(cat: Path = OPENSFX_CAT) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each non-empty WAV in openttd's ``opensfx.cat``.

    The file starts with (offset, size) little-endian uint32 pairs, offsets masked with
    0x7FFFFFFF, entry count = first offset / 8; an entry is a 1-byte name length, the name,
    then a whole WAV file.
    """
    data = cat.read_bytes()
    if len(data) < 8:
        raise QsaError(f"{cat}: {len(data)} bytes, too short for an opensfx container; "
                       "reinstall openttd-opensfx")
    count = (struct.unpack_from("<I", data, 0)[0] & 0x7FFFFFFF) // 8
    out = []
    for k in range(count):
        off, size = struct.unpack_from("<II", data, 8 * k)
        off &= 0x7FFFFFFF
        if size <= 1 or off + size > len(data):
            continue
        n = data[off]
        name = data[off + 1 : off + 1 + n].split(b"\0")[0].decode("latin-1").strip()
        wav_off = off + 1 + n
        if size - 1 - n < 44 or data[wav_off : wav_off + 4] != b"RIFF":
            continue
        out.append((name or f"entry{k:02d}", wav_off, size - 1 - n))
    return out


def noise_split(category: str, name: str) -> str:
    """The split a noise recording belongs to: a stable hash of its category and name."""
    h = int(hashlib.sha1(f"{category}:{name}".encode()).hexdigest(), 16) % 100
    for split, (lo, hi) in NOISE_SPLIT_PERCENT.items():
        if lo <= h < hi:
            return split
    raise AssertionError(h)


@functools.lru_cache(maxsize=1)
def noise_files() -> dict[str, dict[str, list[str]]]:
    """category -> split -> sorted noise ids (``opensfx:NAME`` or a sonic-pi file path)."""
    table = {c: {s: [] for s in SPLITS} for c in ("field", "samples")}
    seen: set[str] = set()
    for name, _, _ in opensfx_entries():
        key = name if name not in seen else f"{name}#{len(seen)}"
        seen.add(key)
        table["field"][noise_split("field", key)].append(f"opensfx:{key}")
    for f in SONIC_PI_ROOT.glob("*.flac"):
        table["samples"][noise_split("samples", f.name)].append(str(f))
    for c in table:
        for s in SPLITS:
            table[c][s].sort()
            if not table[c][s]:
                raise QsaError(f"no {c} noise files fell into the {s} split; the "
                               f"{NOISE_SOURCES[c]['package']} package looks incomplete")
    return table


@functools.lru_cache(maxsize=4096)
def load_speech(path: str) -> np.ndarray:
    """A speech recording as float32 at 16 kHz, mono (G.722 decoded, ogg resampled)."""
    if path.endswith(".g722"):
        try:
            import G722
        except ImportError as e:
            raise QsaError("decoding the asterisk prompts needs the `G722` wheel: "
                           "pip install g722 (in qsa's `audio` extra)") from e
        pcm = np.asarray(G722.G722(SR, 64000).decode(Path(path).read_bytes()), np.int16)
        return pcm.astype(np.float32) / 32768.0
    import soundfile as sf

    from qsa.audio.io import read_audio

    if sf.info(path).frames == 0:
        return np.zeros(0, np.float32)  # a few fillets clips are empty: never drawn
    x, _ = read_audio(path, SR)
    return x


@functools.lru_cache(maxsize=512)
def load_noise(noise_id: str) -> np.ndarray:
    """A noise recording (``opensfx:NAME`` or a file path) as float32 at 16 kHz, mono."""
    import io

    import soundfile as sf

    from qsa.audio.resample import resample

    if noise_id.startswith("opensfx:"):
        key = noise_id.split(":", 1)[1]
        seen: set[str] = set()
        for name, off, size in opensfx_entries():
            k = name if name not in seen else f"{name}#{len(seen)}"
            seen.add(k)
            if k == key:
                with OPENSFX_CAT.open("rb") as f:
                    f.seek(off)
                    raw = f.read(size)
                x, sr = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
                break
        else:
            raise QsaError(f"{noise_id}: no such entry in {OPENSFX_CAT}")
    else:
        x, sr = sf.read(noise_id, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    x = x - float(np.mean(x))
    return resample(x, sr, SR).astype(np.float32) if sr != SR else x.astype(np.float32)


# --------------------------------------------------------------------------- items


def _check_split(split: str) -> None:
    if split not in SPLIT_IDS:
        raise QsaError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def _draw_clips(rng: np.random.Generator, files: list[str], lo_s: float, hi_s: float) -> dict:
    """Clips of one speaker with gaps until the speech lasts lo_s..hi_s; a window of it."""
    clips, gaps, total = [], [], 0.0
    target = rng.uniform(lo_s, hi_s)
    for _ in range(200):
        if total >= target:
            break
        f = files[int(rng.integers(len(files)))]
        n = len(load_speech(f)) / SR
        if n == 0:
            continue
        clips.append(f)
        gap = round(float(rng.uniform(0.1, 0.4)), 3)
        gaps.append(gap)
        total += n + gap
    length = min(total, hi_s)
    start = round(float(rng.uniform(0, max(0.0, total - length))), 3)
    return {"clips": clips, "gaps_s": gaps, "start_s": start, "length_s": round(length, 3)}


def _render_clips(spec: dict) -> np.ndarray:
    parts = []
    for f, gap in zip(spec["clips"], spec["gaps_s"], strict=True):
        parts += [load_speech(f).astype(np.float64), np.zeros(round(gap * SR))]
    x = np.concatenate(parts)
    a = round(spec["start_s"] * SR)
    return x[a : a + round(spec["length_s"] * SR)]


def sample_item(seed: int, split: str, index: int, synth_share: float = SYNTH_SHARE) -> dict:
    """Draw every parameter of item ``index`` of ``split`` (the manifest line, less results)."""
    from .synth import _sample_room

    _check_split(split)
    if not 0 <= index < 1 << 24:
        raise QsaError(f"item index {index} out of range (0..{(1 << 24) - 1})")
    rng = np.random.default_rng([int(seed), SPLIT_IDS[split], int(index), 7])
    files = speech_files()
    speakers = SPEAKER_SPLITS[split]
    share = synth_share if split != "test" else 0.0
    p: dict = {"version": CORPUS_VERSION, "split": split, "index": int(index),
               "seed": int(seed)}
    if rng.random() < share:
        p["speaker"] = "espeak"
        p["speech"] = {"synth_seed": int(seed), "synth_index": int(index)}
        p["speech_licence"] = LICENCES["espeak-ng"]
    else:
        w = np.array([SPEAKER_WEIGHTS.get(k, 1.0) for k in speakers])
        spk = speakers[int(rng.choice(len(speakers), p=w / w.sum()))]
        p["speaker"] = spk
        p["speech"] = _draw_clips(rng, files[spk], *SPEECH_S)
        p["speech_licence"] = SPEAKERS[spk]["licence"]
    p["lead_s"] = round(float(rng.uniform(0.1, 0.4)), 3)
    p["tail_s"] = round(float(rng.uniform(0.1, 0.4)), 3)
    cat = NOISE_CATEGORIES[int(rng.integers(len(NOISE_CATEGORIES)))]
    nz: dict = {"category": cat, "seed": int(rng.integers(1 << 31))}
    if cat in ("field", "samples"):
        pool = noise_files()[cat][split]
        nz["file"] = pool[int(rng.integers(len(pool)))]
        nz["licence"] = NOISE_SOURCES[cat]["licence"]
        if split == "train" and rng.random() < NOISE_AUG_PROB:
            nz["aug"] = _draw_noise_aug(rng, split)
    elif cat == "babble":
        others = [s for s in speakers if s != p["speaker"]] or speakers
        nz["talkers"] = []
        for _ in range(int(rng.integers(3, 7))):
            t = others[int(rng.integers(len(others)))]
            nz["talkers"].append({"speaker": t, "gain_db": round(float(rng.uniform(-6, 6)), 2),
                                  **_draw_clips(rng, files[t], 9.0, 12.0)})
        nz["licence"] = "as the talkers' speech"
    else:
        nz["kind"] = GENERATED_KINDS[int(rng.integers(len(GENERATED_KINDS)))]
        nz["licence"] = "generated (qsa.data.noise)"
    p["noise"] = nz
    if split == "train":
        p["snr_db"] = round(float(rng.uniform(*TRAIN_SNR_DB)), 2)
    else:
        p["snr_db"] = float(EVAL_SNRS_DB[int(rng.integers(len(EVAL_SNRS_DB)))])
    p["reverb"] = _sample_room(rng) if rng.random() < REVERB_PROB else None
    chain: dict = {"highpass_hz": None, "band": None, "agc_db": None, "clip_drive_db": None}
    if rng.random() < HIGHPASS_PROB:
        chain["highpass_hz"] = round(float(rng.uniform(60, 200)), 1)
    if rng.random() < BAND_PROB:
        if rng.random() < 0.5:
            chain["band"] = {"round_trip_hz": int(rng.choice([44100, 48000]))}
        else:
            chain["band"] = {"lowpass_hz": round(float(rng.uniform(5500, 7800)), 1)}
    if rng.random() < AGC_PROB:
        chain["agc_db"] = [round(float(g), 2) for g in rng.uniform(-6, 6, size=4)]
    if rng.random() < CLIP_PROB:
        chain["clip_drive_db"] = round(float(rng.uniform(1, 6)), 2)
    p["chain"] = chain
    p["level_dbfs"] = round(float(rng.uniform(*LEVEL_RANGE_DBFS)), 2)
    p["name"] = f"{p['speaker'].replace('-', '')}_{cat}_{index:05d}"
    return p


def _draw_noise_aug(rng: np.random.Generator, split: str) -> dict:
    """Speed, two peaking filters and maybe a second recording for a file noise."""
    lo, hi = np.log(NOISE_EQ_HZ)
    aug: dict = {
        "speed": round(float(np.exp(rng.uniform(*np.log(NOISE_SPEED)))), 4),
        "eq": [{"hz": round(float(np.exp(rng.uniform(lo, hi))), 1),
                "gain_db": round(float(rng.uniform(-NOISE_EQ_DB, NOISE_EQ_DB)), 2),
                "q": round(float(rng.uniform(0.5, 2.0)), 2)} for _ in range(2)],
    }
    if rng.random() < 0.5:
        cat2 = ("field", "samples")[int(rng.integers(2))]
        pool = noise_files()[cat2][split]
        aug["second"] = {"file": pool[int(rng.integers(len(pool)))],
                         "gain_db": round(float(rng.uniform(-9.0, 0.0)), 2),
                         "licence": NOISE_SOURCES[cat2]["licence"]}
    return aug


def _peaking_sos(hz: float, gain_db: float, q: float) -> np.ndarray:
    """One peaking-EQ biquad (the Audio EQ Cookbook's) as a second-order section."""
    a = 10 ** (gain_db / 40)
    w = 2 * np.pi * hz / SR
    alpha = np.sin(w) / (2 * q)
    b = np.array([1 + alpha * a, -2 * np.cos(w), 1 - alpha * a])
    den = np.array([1 + alpha / a, -2 * np.cos(w), 1 - alpha / a])
    return np.concatenate([b / den[0], den / den[0]])[None]


def _augment_noise(x: np.ndarray, aug: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    """A file noise ``x`` (n samples) after ``aug``'s filters and second recording."""
    import scipy.signal as ss

    for eq in aug["eq"]:
        x = ss.sosfilt(_peaking_sos(eq["hz"], eq["gain_db"], eq["q"]), x)
    if "second" in aug:
        y = _fit(_sped(load_noise(aug["second"]["file"]), aug["speed"]), n, rng)
        x = x / max(_rms(x), 1e-12) + y / max(_rms(y), 1e-12) * 10 ** (
            aug["second"]["gain_db"] / 20)
    return x


def _sped(x: np.ndarray, speed: float) -> np.ndarray:
    """``x`` played ``speed`` times as fast (pitch and tempo together)."""
    from qsa.audio.resample import resample

    return x if speed == 1.0 else resample(x, round(SR * speed), SR)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def _fit(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of a noise recording: a random window, or repeats with random gaps."""
    if len(x) >= n:
        a = int(rng.integers(0, len(x) - n + 1))
        return x[a : a + n].astype(np.float64)
    out, pos = np.zeros(n), int(rng.integers(0, max(1, len(x))))
    pos = -pos  # start part-way into the first repeat
    while pos < n:
        a, b = max(pos, 0), min(pos + len(x), n)
        out[a:b] += x[a - pos : b - pos]
        pos += len(x) + int(rng.uniform(0.0, 1.0) * SR * (len(x) < SR))
    return out


def _noise(params: dict, n: int) -> np.ndarray:
    from .noise import make_noise

    nz = params["noise"]
    rng = np.random.default_rng(nz["seed"])
    aug = nz.get("aug")
    if "file" in nz:
        src = load_noise(nz["file"])
        src = _sped(src, aug["speed"]) if aug else src
        x = _fit(src, n, rng)
    elif "talkers" in nz:
        x = np.zeros(n)
        for t in nz["talkers"]:
            s = _render_clips(t)
            s = s / max(_rms(s), 1e-12) * 10 ** (t["gain_db"] / 20)
            x += _fit(s, n, rng)
    else:
        x, _ = make_noise(nz["kind"], nz["seed"], n, SR)
    for _ in range(16):  # a silent window of a sparse recording: draw another one
        if _rms(x) >= 1e-5 or "file" not in nz:
            break
        x = _fit(src, n, rng)
    if aug:
        x = _augment_noise(x, aug, n, rng)
    return x / max(_rms(x), 1e-12)


def _chain(chain: dict, x: np.ndarray) -> np.ndarray:
    """The linear part of the capture chain on (2, n) = (noisy, clean), both alike."""
    import scipy.signal as ss

    if chain.get("highpass_hz"):
        x = ss.sosfilt(ss.butter(2, chain["highpass_hz"], "highpass", fs=SR, output="sos"), x,
                       axis=1)
    band = chain.get("band") or {}
    if "round_trip_hz" in band:
        import soxr

        dev = band["round_trip_hz"]
        up = soxr.resample(np.ascontiguousarray(x.T), SR, dev, "HQ")  # (n', 2)
        y = soxr.resample(up, dev, SR, "HQ").T[:, : x.shape[1]]
        x = np.pad(y, ((0, 0), (0, x.shape[1] - y.shape[1])))
    elif "lowpass_hz" in band:
        x = ss.sosfilt(ss.butter(8, band["lowpass_hz"], fs=SR, output="sos"), x, axis=1)
    if chain.get("agc_db"):
        g = np.asarray(chain["agc_db"], np.float64)
        env = np.interp(np.linspace(0, len(g) - 1, x.shape[1]), np.arange(len(g)), g)
        x = x * 10 ** (env / 20)
    return x


def render_item(params: dict) -> tuple[np.ndarray, np.ndarray, dict]:
    """(clean int16, noisy int16, info) of a manifest line's parameters."""
    from qsa.audio.io import to_int16

    from .synth import reverberate
    from .synth import sample_item as synth_item

    if params.get("version") != CORPUS_VERSION:
        raise QsaError(f"manifest line of real-corpus version {params.get('version')!r}; this "
                       f"qsa builds version {CORPUS_VERSION}; rebuild the corpus")
    sp = params["speech"]
    if "synth_index" in sp:
        _, speech = synth_item(sp["synth_seed"], params["split"], sp["synth_index"],
                               reverb=False)
        speech = speech.astype(np.float64)
    else:
        speech = _render_clips(sp)
    dry = np.concatenate([np.zeros(round(params["lead_s"] * SR)), speech,
                          np.zeros(round(params["tail_s"] * SR))])
    target, wet = reverberate(dry, params.get("reverb"))
    k = 0.05 / max(_rms(target), 1e-12)
    target, wet = target * k, wet * k
    noise = _noise(params, len(wet)) * _rms(wet) / 10 ** (params["snr_db"] / 20)
    both = _chain(params["chain"], np.stack([wet + noise, target]))  # (2, n)
    noisy, target = both[0], both[1]
    gain = 10 ** (params["level_dbfs"] / 20) / max(_rms(noisy), 1e-12)
    drive = params["chain"].get("clip_drive_db")
    clipped = 0.0
    if drive:
        # the noisy peak driven `drive` dB past full scale, then hard-clipped
        gain = 10 ** (drive / 20) / max(float(np.max(np.abs(noisy))), 1e-12)
        clipped = float(np.mean(np.abs(noisy * gain) > 0.99))
        noisy = np.clip(noisy * gain, -0.99, 0.99) / gain
    peak = max(float(np.max(np.abs(noisy))), float(np.max(np.abs(target)))) * gain
    if peak > 0.99:
        gain *= 0.99 / peak
    info = {"gain": float(gain), "duration": len(dry) / SR, "clipped_share": clipped}
    return to_int16(target * gain), to_int16(noisy * gain), info


def rebuild_item(line: str | dict) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild an item from its manifest line: (clean, noisy) float32 as read from the files."""
    params = json.loads(line) if isinstance(line, str) else line
    clean, noisy, _ = render_item(params)
    scale = np.float32(32768.0)
    return clean.astype(np.float32) / scale, noisy.astype(np.float32) / scale


def build_item(job: tuple[int, str, int, float]) -> tuple[dict, np.ndarray, np.ndarray]:
    """Worker entry point: (manifest record, clean int16, noisy int16) of one item."""
    seed, split, index, synth_share = job
    params = sample_item(seed, split, index, synth_share)
    clean, noisy, info = render_item(params)
    name = params["name"]
    record = dict(params)
    record.update(info, clean=f"{split}/clean/{name}.wav", noisy=f"{split}/noisy/{name}.wav")
    return record, clean, noisy


# --------------------------------------------------------------------------- corpus


def _package_versions() -> dict[str, str]:
    try:
        res = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *PACKAGES],
                             capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)


def make_real_corpus(
    out: str | Path,
    hours: float,
    seed: int = 0,
    synth_share: float = SYNTH_SHARE,
    workers: int = 2,
    force: bool = False,
    progress: bool = True,
) -> dict:
    """Build a real-voice corpus of about ``hours`` of audio under ``out``; returns the
    summary (also written to ``out/corpus.json``). Items are made by ``workers`` spawned
    processes (0: in this process) and written in index order; each split stops at the
    first item that reaches its share of ``hours``."""
    from qsa.fileio import atomic_write_text

    from .synth import _prepare_out, build_splits

    if not hours > 0:
        raise QsaError(f"--hours {hours} must be > 0 (e.g. 0.05 for a test corpus)")
    if seed < 0:
        raise QsaError(f"--seed {seed} must be >= 0")
    if not 0.0 <= synth_share <= 1.0:
        raise QsaError(f"--synth-share {synth_share}: expected a share in 0..1 (0: real "
                       "speech only)")
    check_packages()
    if synth_share > 0:
        from .synth import check_voices

        check_voices()
    out = Path(out)
    _prepare_out(out, force)
    atomic_write_text(out / "corpus.json", json.dumps({"status": "incomplete"}) + "\n")
    t0 = time.perf_counter()
    records, totals = build_splits(out, hours, lambda split, i: (seed, split, i, synth_share),
                                   build_item, workers, progress, "real")
    atomic_write_text(out / "manifest.jsonl",
                      "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    summary = {
        "status": "complete", "kind": "real", "version": CORPUS_VERSION, "seed": seed,
        "hours_requested": hours, "synth_share": synth_share, "sample_rate": SR,
        "splits": totals, "speaker_splits": SPEAKER_SPLITS,
        "noise_categories": list(NOISE_CATEGORIES),
        "noise_split_percent": NOISE_SPLIT_PERCENT, "train_snr_db": TRAIN_SNR_DB,
        "eval_snrs_db": EVAL_SNRS_DB, "level_range_dbfs": LEVEL_RANGE_DBFS,
        "licences": LICENCES, "packages": _package_versions(), "workers": workers,
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_text(out / "corpus.json", json.dumps(summary, indent=2) + "\n")
    return summary
