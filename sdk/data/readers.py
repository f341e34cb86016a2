"""Datasets from a local folder in the published layouts, as lazily loaded noisy/clean pairs.

Every reader returns a ``PairSet``: a sequence of ``Pair(name, noisy, clean, sr)`` holding
file paths (``clean`` is None for noisy-only sets); ``Pair.load()`` reads and resamples to
``sr`` on demand. Layouts:

- ``voicebank:DIR``: VoiceBank+DEMAND (Valentini 2016/2017): ``clean_testset_wav`` /
  ``noisy_testset_wav`` and ``clean_trainset_28spk_wav`` / ``noisy_trainset_28spk_wav`` (or
  the ``56spk`` pair), 48 kHz, paired by file name; found in DIR or one level below it.
  Split "val" holds speakers p226 and p287 out of the training set.
- ``dns:DIR``: DNS-Challenge synthetic test set: a folder with ``clean/`` and ``noisy/``
  paired by the ``fileid_N`` suffix (DIR may be the challenge root, ``test_set``,
  ``synthetic`` or the ``no_reverb`` / ``with_reverb`` folder itself; ``no_reverb`` is
  preferred). A ``blind_test_set`` folder, or a DIR without ``clean/``, reads noisy-only.
- ``synth:DIR``: our synthetic corpus (``qsa data synth``): ``DIR/{split}/{clean,noisy}``,
  or ``DIR/{clean,noisy}`` (the demo set), paired by name.
- ``real:DIR``: our real-voice corpus (``qsa data real``), the same layout.
- ``DIR`` (or ``folder:DIR``): every wav/flac/ogg below DIR, noisy-only.

``CropDataset`` wraps a paired set as a torch Dataset of fixed-length, seeded random crops
for training.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qsa.errors import QsaError

AUDIO_EXTS = (".wav", ".flac", ".ogg")
DEFAULT_SR = 16000
DATA_KINDS = ("synth", "real", "voicebank", "dns", "folder")


@dataclass(frozen=True)
class Pair:
    """One utterance: a noisy file, its clean reference (or None) and the rate to load at."""

    name: str
    noisy: Path
    clean: Path | None
    sr: int = DEFAULT_SR
    # a teacher's enhanced version of ``noisy`` (scripts/make_teacher.py), for distillation;
    # None when the corpus has none for this item
    teacher: Path | None = None

    def load(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(noisy, clean or None) as mono float32 at ``sr``; a pair is cut to equal length."""
        from qsa.audio.io import read_audio

        noisy, _ = read_audio(self.noisy, self.sr)
        if self.clean is None:
            return noisy, None
        clean, _ = read_audio(self.clean, self.sr)
        n = min(len(noisy), len(clean))
        return noisy[:n], clean[:n]

    def load_teacher(self, n: int) -> np.ndarray | None:
        """The teacher's output as float32 at ``sr``, cut or zero-padded to ``n`` samples
        (None without a teacher)."""
        if self.teacher is None:
            return None
        from qsa.audio.io import read_audio

        t, _ = read_audio(self.teacher, self.sr)
        return t[:n] if len(t) >= n else np.pad(t, (0, n - len(t)))


class PairSet(Sequence[Pair]):
    """An ordered, named collection of ``Pair`` (sorted by name)."""

    def __init__(self, pairs: list[Pair], kind: str, root: Path, description: str = ""):
        self.pairs = sorted(pairs, key=lambda p: p.name)
        self.kind, self.root, self.description = kind, Path(root), description

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):  # int -> Pair, slice -> list[Pair]
        return self.pairs[i]

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)

    @property
    def paired(self) -> bool:
        """True when every item has a clean reference (intrusive metrics possible)."""
        return bool(self.pairs) and all(p.clean is not None for p in self.pairs)

    def __repr__(self) -> str:
        return f"PairSet({self.kind}, {len(self)} items, paired={self.paired}, root={self.root})"


def _audio_files(folder: Path, recursive: bool = False) -> list[Path]:
    it = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(p for p in it if p.is_file() and p.suffix.lower() in AUDIO_EXTS
                  and not p.name.startswith("."))


def _listing(folder: Path, limit: int = 8) -> str:
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    except OSError:
        return "(unreadable)"
    if not names:
        return "(empty)"
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _check_dir(root: Path, kind: str) -> Path:
    root = Path(root)
    if not root.is_dir():
        raise QsaError(f"{kind}: {root} is not a folder; check the path in --data")
    return root


def _pair_by_name(clean_dir: Path, noisy_dir: Path, sr: int, kind: str) -> list[Pair]:
    clean = {p.stem: p for p in _audio_files(clean_dir)}
    noisy = {p.stem: p for p in _audio_files(noisy_dir)}
    if not noisy:
        raise QsaError(f"{kind}: no audio files in {noisy_dir}")
    missing = sorted(set(noisy) - set(clean))
    extra = sorted(set(clean) - set(noisy))
    if missing or extra:
        raise QsaError(
            f"{kind}: {noisy_dir} and {clean_dir} must hold the same file names; "
            f"{len(missing)} noisy without clean (e.g. {missing[:3]}), "
            f"{len(extra)} clean without noisy (e.g. {extra[:3]})"
        )
    return [Pair(name, noisy[name], clean[name], sr) for name in noisy]


# --------------------------------------------------------------------------- VoiceBank


def _find_dirs(root: Path, names: Sequence[str]) -> dict[str, Path]:
    """Folders named ``names`` in root or one level below it (archives unpack nested)."""
    found = {}
    for base in [root, *sorted(p for p in root.iterdir() if p.is_dir())]:
        for n in names:
            if n not in found and (base / n).is_dir():
                found[n] = base / n
    return found


VOICEBANK_VAL_SPEAKERS = ("p226", "p287")


def read_voicebank(root: str | os.PathLike, split: str = "test", sr: int = DEFAULT_SR,
                   speakers: int | None = None,
                   val_speakers: Sequence[str] = VOICEBANK_VAL_SPEAKERS) -> PairSet:
    """VoiceBank+DEMAND ``split`` at ``sr``: "test" is the test set; "train" and "val" split
    the training set by speaker, ``val_speakers`` (p226 and p287, a common convention) held
    out for validation so the test set is never used for model selection.

    ``speakers`` picks the 28- or 56-speaker training set (default: 28 if present).
    """
    root = _check_dir(root, "voicebank")
    if split == "test":
        wanted = [("clean_testset_wav", "noisy_testset_wav")]
    elif split in ("train", "val"):
        counts = [speakers] if speakers else [28, 56]
        wanted = [(f"clean_trainset_{c}spk_wav", f"noisy_trainset_{c}spk_wav") for c in counts]
    else:
        raise QsaError(f"voicebank: unknown split {split!r}; expected train, val or test")
    found = _find_dirs(root, [n for pair in wanted for n in pair])
    for clean_name, noisy_name in wanted:
        if clean_name in found and noisy_name in found:
            pairs = _pair_by_name(found[clean_name], found[noisy_name], sr, "voicebank")
            if split != "test":
                held = [p for p in pairs if p.name.split("_")[0] in set(val_speakers)]
                pairs = held if split == "val" else [p for p in pairs if p not in held]
                if not pairs:
                    raise QsaError(
                        f"voicebank: the {split} split of {found[noisy_name]} is empty "
                        f"(validation speakers {list(val_speakers)}); pass other val_speakers")
            return PairSet(pairs, "voicebank", root, f"VoiceBank+DEMAND {noisy_name} ({split})")
    expected = " or ".join(f"{c}/ + {n}/" for c, n in wanted)
    raise QsaError(
        f"voicebank: {root} does not look like VoiceBank+DEMAND ({split} split): expected "
        f"{expected} in it or one level below; found {_listing(root)}"
    )


# --------------------------------------------------------------------------- DNS


_FILEID = re.compile(r"fileid_(\d+)")


def _dns_pairs(folder: Path, sr: int) -> list[Pair]:
    clean_dir, noisy_dir = folder / "clean", folder / "noisy"
    clean = {}
    for p in _audio_files(clean_dir):
        m = _FILEID.search(p.stem)
        if m:
            clean[m.group(1)] = p
    pairs, orphans = [], []
    for p in _audio_files(noisy_dir):
        m = _FILEID.search(p.stem)
        if not m:
            orphans.append(p.name)
            continue
        if m.group(1) not in clean:
            raise QsaError(f"dns: {p} has no clean partner (no clean/*fileid_{m.group(1)}.wav "
                           f"in {clean_dir})")
        pairs.append(Pair(f"fileid_{int(m.group(1)):05d}", p, clean[m.group(1)], sr))
    if orphans:
        raise QsaError(f"dns: noisy files without a fileid_N suffix in {noisy_dir}: "
                       f"{orphans[:3]}; DNS files are named ..._fileid_N.wav")
    if not pairs:
        raise QsaError(f"dns: no *_fileid_N audio files in {noisy_dir}")
    return pairs


def read_dns(root: str | os.PathLike, sr: int = DEFAULT_SR, subset: str = "no_reverb",
             ) -> PairSet:
    """DNS-Challenge synthetic test set (paired by fileid) or blind test set (noisy-only)."""
    root = _check_dir(root, "dns")
    candidates = [root, root / subset, root / "synthetic" / subset,
                  root / "test_set" / "synthetic" / subset,
                  root / "datasets" / "test_set" / "synthetic" / subset]
    for c in candidates:
        if (c / "clean").is_dir() and (c / "noisy").is_dir():
            return PairSet(_dns_pairs(c, sr), "dns", c, f"DNS synthetic {c.name}")
    blind = [root] if "blind" in root.name else []
    blind += [root / "blind_test_set", root / "datasets" / "blind_test_set"]
    for b in blind:
        if b.is_dir():
            files = _audio_files(b, recursive=True)
            if files:
                pairs = [Pair(str(f.relative_to(b).with_suffix("")), f, None, sr)
                         for f in files]
                return PairSet(pairs, "dns", b, "DNS blind test set (noisy only)")
    raise QsaError(
        f"dns: {root} does not look like a DNS-Challenge test set: expected clean/ and "
        f"noisy/ (files *_fileid_N.wav) in it or under synthetic/{subset}/, or a "
        f"blind_test_set/ folder; found {_listing(root)}"
    )


# --------------------------------------------------------------------------- synth, folder


def read_synth(root: str | os.PathLike, split: str = "test", sr: int = DEFAULT_SR,
               kind: str = "synth") -> PairSet:
    """Our corpus: ``root/{split}/{clean,noisy}`` (or ``root/{clean,noisy}``, the demo set);
    ``kind="real"`` reads a ``qsa data real`` corpus (same layout)."""
    root = _check_dir(root, kind)
    what = "real-voice corpus" if kind == "real" else "synthetic corpus"
    for base in (root / split, root):
        if (base / "clean").is_dir() and (base / "noisy").is_dir():
            pairs = _pair_by_name(base / "clean", base / "noisy", sr, kind)
            if (base / "teacher").is_dir():  # scripts/make_teacher.py wrote one
                pairs = [dataclasses.replace(p, teacher=base / "teacher" / p.noisy.name)
                         if (base / "teacher" / p.noisy.name).is_file() else p for p in pairs]
            return PairSet(pairs, kind, base, f"qsa {what} ({base.name})")
    raise QsaError(
        f"{kind}: {root} does not look like a qsa corpus: expected {split}/clean/ and "
        f"{split}/noisy/ (made by `qsa data {kind} {root} --hours H`) or clean/ + noisy/; "
        f"found {_listing(root)}"
    )


def read_folder(root: str | os.PathLike, sr: int = DEFAULT_SR) -> PairSet:
    """Every audio file below ``root`` as a noisy-only set (names: relative paths)."""
    root = Path(root)
    if root.is_file() and root.suffix.lower() in AUDIO_EXTS:
        return PairSet([Pair(root.stem, root, None, sr)], "folder", root.parent, str(root))
    root = _check_dir(root, "folder")
    if (root / "clean").is_dir() and (root / "noisy").is_dir():
        raise QsaError(f"{root} has clean/ and noisy/ folders; read it as a paired set with "
                       f"--data synth:{root} (same names) or --data dns:{root} (fileid_N)")
    files = _audio_files(root, recursive=True)
    if not files:
        raise QsaError(f"{root}: no audio files (wav/flac/ogg) in it or below it")
    pairs = [Pair(str(f.relative_to(root).with_suffix("")), f, None, sr) for f in files]
    return PairSet(pairs, "folder", root, f"audio files under {root}")


def _is_mixture(spec: str) -> bool:
    parts = spec.split("+")
    return len(parts) > 1 and all(p.partition(":")[0] in DATA_KINDS[:-1] and ":" in p
                                  for p in parts)


def parse_data_spec(spec: str, split: str = "test", sr: int = DEFAULT_SR) -> PairSet:
    """``--data`` value to a PairSet: "synth:DIR", "real:DIR", "voicebank:DIR", "dns:DIR" or
    "DIR"; several kinded specs joined by ``+`` ("real:data/real+synth:data/synth") give one
    set whose items alternate between the corpora (so the first N validation items hold
    each of them), each item named after its corpus."""
    if _is_mixture(spec):
        sets = [parse_data_spec(p, split, sr) for p in spec.split("+")]
        mixed: list[Pair] = []
        for i in range(max(len(s) for s in sets)):
            for s in sets:
                if i < len(s):
                    p = s[i]
                    mixed.append(dataclasses.replace(p, name=f"{s.kind}:{p.name}"))
        out = PairSet([], "mixture", sets[0].root, " + ".join(s.description or s.kind
                                                                for s in sets))
        out.pairs = mixed  # interleaved, not re-sorted by name
        return out
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in DATA_KINDS:
        kind, rest = "folder", spec
    if not rest:
        raise QsaError(f"--data {spec!r}: missing folder after '{kind}:'")
    if kind in ("synth", "real"):
        return read_synth(rest, split, sr, kind)
    if kind == "voicebank":
        return read_voicebank(rest, split, sr)
    if kind == "dns":
        return read_dns(rest, sr)
    return read_folder(rest, sr)


# --------------------------------------------------------------------------- training


class CropDataset:
    """Torch Dataset of fixed-length (noisy, clean) crops from a paired set.

    Item ``i`` of epoch ``e`` is a crop at an offset drawn from ``(seed, e, i)``, so a run is
    reproducible and resumable; ``set_epoch(e)`` changes the crops. Clips shorter than the
    crop are zero-padded at the end. Loaded audio is cached per process (``cache=True``).
    Returns float32 tensors of shape (samples,).
    """

    def __init__(self, pairs: Sequence[Pair], seconds: float = 2.0, seed: int = 0,
                 cache: bool = True, band_limit: float = 0.0, clean_share: float = 0.0,
                 teacher: bool = False):
        if not 0.0 <= band_limit <= 1.0:
            raise QsaError(f"band_limit={band_limit}; expected a probability in 0..1 (0: off)")
        if not 0.0 <= clean_share < 1.0:
            raise QsaError(f"clean_share={clean_share}; expected a probability in 0..1 "
                           "(0: off; 0.1 gives one crop in ten without noise)")
        if not pairs:
            raise QsaError("the training set is empty; check --data")
        unpaired = [p.name for p in pairs if p.clean is None]
        if unpaired:
            raise QsaError(f"training needs clean references; {len(unpaired)} item(s) have "
                           f"none (e.g. {unpaired[:3]}); use a paired --data set")
        if seconds <= 0:
            raise QsaError(f"crop length {seconds} s must be > 0")
        self.pairs = list(pairs)
        self.length = int(round(seconds * self.pairs[0].sr))
        self.seed, self.epoch, self.cache = int(seed), 0, cache
        self.band_limit = float(band_limit)
        self.clean_share = float(clean_share)
        # teacher=True: items are (noisy, clean, teacher, has_teacher); an item without a
        # teacher file gets zeros and has_teacher False (its distillation term is skipped)
        self.teacher = bool(teacher)
        if self.teacher and not any(p.teacher is not None for p in self.pairs):
            raise QsaError("distillation needs teacher outputs, and no training item has one: "
                           "write them with `python scripts/make_teacher.py CORPUS` (into "
                           "CORPUS/train/teacher/) or drop --distill-weight")
        self._cache: dict[int, tuple[np.ndarray, ...]] = {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.pairs)

    def _load(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if i in self._cache:
            return self._cache[i]
        noisy, clean = self.pairs[i].load()
        item = (noisy, clean)
        if self.teacher:
            item = (noisy, clean, self.pairs[i].load_teacher(len(noisy)))
        if self.cache:
            self._cache[i] = item
        return item

    def crop_offset(self, i: int, n: int) -> int:
        rng = np.random.default_rng([self.seed, self.epoch, i])
        return int(rng.integers(0, n - self.length + 1)) if n > self.length else 0

    def __getitem__(self, i: int):
        import torch

        loaded = self._load(i)
        noisy, clean = loaded[0], loaded[1]
        teacher = loaded[2] if self.teacher else None
        has_teacher = teacher is not None
        n, L = len(noisy), self.length
        start = self.crop_offset(i, n)
        # (noisy | clean [| teacher], samples)
        out = np.zeros((3 if self.teacher else 2, L), np.float32)
        seg = min(L, n - start)
        out[0, :seg] = noisy[start : start + seg]
        out[1, :seg] = clean[start : start + seg]
        if teacher is not None:
            out[2, :seg] = teacher[start : start + seg]
        if self.clean_share > 0 and self.is_clean_crop(i):
            out[0] = out[1]  # clean speech in, the same speech out: no noise to remove
            if self.teacher:  # the target of a noise-free crop is itself, whoever teaches
                out[2] = out[1]
                has_teacher = True
        if self.band_limit > 0:  # every row through the same capture chain
            out = self._band_limited(i, out)
        if not self.teacher:
            return torch.from_numpy(out[0]), torch.from_numpy(out[1])
        return (torch.from_numpy(out[0]), torch.from_numpy(out[1]), torch.from_numpy(out[2]),
                has_teacher)

    def is_clean_crop(self, i: int) -> bool:
        """Whether item ``i`` of this epoch is served without its noise (probability
        ``clean_share``, drawn from (seed, epoch, i)): clean input whose target is itself, so
        that the model learns to leave clean speech alone (its level and spectrum), which
        noisy-only training never asks of it (a real-voice qcgan-35k raised clean speech by
        up to 2.2 dB)."""
        rng = np.random.default_rng([self.seed, self.epoch, i, 2])
        return bool(rng.random() < self.clean_share)

    def _band_limited(self, i: int, out: np.ndarray) -> np.ndarray:
        """With probability ``band_limit`` (drawn from (seed, epoch, i)): noisy and clean
        through the same band limit a capture chain puts on them. Half the time a 16 kHz ->
        44.1 / 48 kHz -> 16 kHz soxr round trip (what ``qsa live`` does at a 48 kHz device:
        nothing above ~7.3 kHz), half the time an 8th-order low-pass at 5.5-7.8 kHz. A model
        trained only on full-band noise lost much of its suppression on such input
        (qcgan-35k on 30 test items: PESQ-WB gain +0.63 as is, +0.41 after the round trip)."""
        rng = np.random.default_rng([self.seed, self.epoch, i, 1])
        if rng.random() >= self.band_limit:
            return out
        sr = self.pairs[i].sr
        if rng.random() < 0.5:
            import soxr

            dev = int(rng.choice([44100, 48000]))
            up = soxr.resample(out.T, sr, dev, "HQ")  # (n, rows): each signal one stream
            y = soxr.resample(up, dev, sr, "HQ")[: out.shape[1]].T
        else:
            import scipy.signal as ss

            cut = float(rng.uniform(5500.0, min(7800.0, 0.49 * sr)))
            y = ss.sosfilt(ss.butter(8, cut, fs=sr, output="sos"), out, axis=1)
        res = np.zeros_like(out)
        res[:, : y.shape[1]] = y
        return res
