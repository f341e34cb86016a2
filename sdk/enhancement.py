"""Speech enhancement of arrays and files: ``qsa.enhance(audio, sr)`` and ``qsa enhance``.

Files of any length stream through in blocks (bounded memory): read -> mix to mono ->
resample to the model rate (soxr, streaming) -> enhance in chunks with left (and, for
look-ahead models, right) context -> resample back to the original rate -> written to a
temporary file that is renamed over the output only when complete.

Strength control (``atten_lim_db``, ``qsa enhance --atten-lim DB``): the output is mixed with
the input, ``out = (1 - g) * enhanced + g * input`` with ``g = 10 ** (-atten_lim_db / 20)``,
DeepFilterNet's ``atten_lim`` mix. The STFT is linear, so this time-domain mix is the same as
mixing the two spectra bin by bin (``(1 - g) Y + g X``) up to the STFT round trip of the
input; doing it on the waveform needs no access to the model's spectra (it works for every
model and runtime, adds no latency) and makes ``atten_lim_db=0`` the input itself, exactly.
A bin the model removes completely comes out at ``g |X|``: ``atten_lim_db`` below its input.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import AudioError, ConfigError, QsaError
from .fileio import atomic_path

if TYPE_CHECKING:  # torch loads when a model runs: the CLI checks its arguments before that
    from torch import nn

MODEL_SR = 16000
AUDIO_EXTS = (".wav", ".flac", ".ogg")
# read in folder mode too (libsndfile decodes them); their outputs are written as WAV
READ_ONLY_EXTS = (".mp3",)
# the highest rate each output format holds: libvorbis crashes (SIGSEGV) above ~200 kHz,
# libFLAC refuses more than 655350 Hz
MAX_WRITE_RATE = {".ogg": 192_000, ".flac": 655_350}
# float audio is full scale at 1.0; a peak this far above it (+60 dB) is not a level but a
# unit mistake (PCM integers stored as floats, a wrong gain), and enhancing it gives noise
MAX_FLOAT_PEAK = 1000.0


def check_atten_lim(value, what: str = "atten_lim_db") -> float | None:
    """The attenuation limit in dB (a finite number >= 0) or None for no limit ("none"
    too); a :class:`ConfigError` naming the value and the fix for anything else."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    fix = ("expected the most dB the model may remove, a number >= 0 (e.g. 12; 0 = no "
           "enhancement, the input as it is) or 'none' for no limit")
    if isinstance(value, bool) or not isinstance(value, str | int | float | np.integer
                                                 | np.floating):
        raise ConfigError(f"{what} {value!r}: not a number; {fix}")
    try:
        db = float(value)
    except ValueError:
        raise ConfigError(f"{what} {value!r}: not a number; {fix}") from None
    if math.isnan(db):
        raise ConfigError(f"{what} {value!r}: NaN is not a limit; {fix}")
    if math.isinf(db):
        raise ConfigError(f"{what} {value!r}: infinite; {fix} (pass 'none' rather than inf)")
    if db < 0:
        raise ConfigError(
            f"{what} {value!r}: negative; {fix} (a limit of {-db:g} dB is written "
            f"{-db:g}, without the sign)"
        )
    return db


def atten_lim_gain(atten_lim_db: float | None) -> float:
    """The share ``g`` of the input in the output, ``10 ** (-atten_lim_db / 20)``: 1 at 0 dB
    (bypass), 0 without a limit (the model's output as it is)."""
    return 0.0 if atten_lim_db is None else float(10.0 ** (-atten_lim_db / 20.0))


def limit_attenuation(enhanced: np.ndarray, noisy: np.ndarray, atten_lim_db) -> np.ndarray:
    """``(1 - g) * enhanced + g * noisy`` for time-aligned arrays of the same length."""
    g = atten_lim_gain(check_atten_lim(atten_lim_db))
    if g == 0.0:
        return enhanced
    mixed = (1.0 - g) * enhanced.astype(np.float64) + g * noisy.astype(np.float64)
    return mixed.astype(np.float32)


def check_rate(sr) -> int:
    """A sample rate as a positive int, or an :class:`AudioError` naming the value."""
    ok = isinstance(sr, int | np.integer) or (isinstance(sr, float | np.floating) and sr == int(sr))
    if isinstance(sr, bool) or not ok or not 1000 <= int(sr) <= 768_000:
        raise AudioError(
            f"sample rate {sr!r}: expected a whole number of Hz between 1000 and 768000 "
            "(e.g. 16000 or 48000)"
        )
    return int(sr)


def check_output_rate(dst: Path, sr: int) -> None:
    """An :class:`AudioError` before any work when ``dst``'s format cannot hold ``sr``."""
    limit = MAX_WRITE_RATE.get(dst.suffix.lower())
    if limit is not None and sr > limit:
        fmt = "OGG Vorbis" if dst.suffix.lower() == ".ogg" else "FLAC"
        raise AudioError(
            f"output {dst}: {fmt} holds at most {limit} Hz, the input is {sr} Hz; write a .wav "
            "(any rate) or resample the input first"
        )


def check_enhancer(model: nn.Module) -> nn.Module:
    """``model`` if it maps a waveform to a waveform; a :class:`ConfigError` naming its kind
    otherwise (a qsa model whose config declares no ``sample_rate``: a sequence model)."""
    from .config import ModelConfig
    from .errors import ConfigError

    cfg = getattr(model, "config", None)
    if isinstance(cfg, ModelConfig) and not hasattr(cfg, "sample_rate"):
        raise ConfigError(
            f"the model is a {type(cfg).kind!r} model, not a speech-enhancement model (it "
            "takes no audio); use a qcgan model: qcgan-35k, qcgan-0.89m or a packed qcgan "
            "file (see `qsa info`)"
        )
    return model


def as_float_audio(audio, what: str = "audio") -> np.ndarray:
    """``audio`` as float32 (N,) or (N, C): integer PCM scaled to [-1, 1), everything else
    that is not real, finite, sample-major audio at a sane level an :class:`AudioError`."""
    x = np.asarray(audio)
    if x.dtype == np.uint8:  # 8-bit PCM is offset binary
        x = (x.astype(np.float32) - 128.0) / 128.0
    elif x.dtype in (np.int16, np.int32):
        x = x.astype(np.float64) / float(np.iinfo(x.dtype).max + 1)
    elif x.dtype.kind == "c":
        raise AudioError(f"{what} is complex ({x.dtype}); expected real samples (pass .real "
                         "or the signal before its FFT)")
    elif x.dtype.kind != "f":
        raise AudioError(f"{what} has dtype {x.dtype}; expected float samples in [-1, 1] or "
                         "integer PCM (int16, int32, uint8)")
    if x.ndim not in (1, 2) or x.size == 0:
        raise AudioError(f"{what} of shape {np.shape(audio)}: expected (N,) or (N, C), N > 0")
    if x.ndim == 2 and x.shape[1] > x.shape[0]:
        raise AudioError(
            f"{what} of shape {x.shape}: more channels than samples, so it looks channel-first "
            "(C, N); pass it transposed (audio.T): expected (N,) or (N, C)"
        )
    bad = ~np.isfinite(x)
    if bad.any():
        first = int(np.argwhere(bad)[0, 0])
        raise AudioError(f"{what} contains {int(bad.sum())} NaN or Inf sample(s) (first at "
                         f"sample {first}); expected finite samples: clean or re-export it")
    check_level(x, what)
    return x.astype(np.float32, copy=False)


def check_level(x: np.ndarray, what: str) -> None:
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak > MAX_FLOAT_PEAK:
        raise AudioError(
            f"{what} peaks at {peak:.3g}, {20 * np.log10(peak):.0f} dB above full scale; float "
            "audio is expected in [-1, 1] (integer PCM stored as float: divide by 32768 for "
            "16-bit)"
        )


def _model_rate(model: nn.Module) -> int:
    return int(getattr(getattr(model, "config", None), "sample_rate", MODEL_SR))


def _context(model: nn.Module) -> tuple[int, int]:
    """(left, right) context in samples that makes chunked processing match offline.

    Causal models declare their receptive field and STFT look-ahead: chunks then reproduce
    the offline output exactly. Look-ahead models get 2 s of context on both sides.
    """
    cfg = getattr(model, "config", None)
    sr = _model_rate(model)
    causal = bool(getattr(cfg, "causal", False))
    left = getattr(model, "receptive_field_samples", None) if causal else None
    right = getattr(model, "lookahead_samples", None) if causal else None
    return int(left if left is not None else 2 * sr), int(right if right is not None else 2 * sr)


def _run(model: nn.Module, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        y = model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None])
    return y[0].numpy()


def enhance_chunks(
    model: nn.Module, blocks: Iterator[np.ndarray], chunk: int, left: int, right: int
) -> Iterator[np.ndarray]:
    """Enhance a stream of mono blocks at the model rate, yielding output blocks in order.

    Each chunk of ``chunk`` samples is processed with ``left`` samples of history and
    ``right`` samples of future; only its own part of the output is kept.
    """
    buf = np.zeros(0, np.float32)
    hist = np.zeros(0, np.float32)
    for b in blocks:
        buf = np.concatenate([buf, b.astype(np.float32, copy=False)])
        while len(buf) >= chunk + right:
            seg = np.concatenate([hist, buf[: chunk + right]])
            y = _run(model, seg)
            yield y[len(hist) : len(hist) + chunk]
            hist = np.concatenate([hist, buf[:chunk]])[-left:] if left else hist[:0]
            buf = buf[chunk:]
    if len(buf):
        seg = np.concatenate([hist, buf])
        y = _run(model, seg)
        yield y[len(hist) :]


def enhance(
    audio, sr: int, model: nn.Module | str = "qcgan-35k", atten_lim_db: float | None = None
) -> np.ndarray:
    """Enhance a mono (N,) or multichannel (N, C) array at rate ``sr``: float samples in
    [-1, 1] or integer PCM (scaled to it); returns mono float32 at ``sr``, as long as the
    input. ``atten_lim_db``: the most the output may lie below the input (see the module
    docstring; 0 returns the mono input, None is no limit); the mix is done at ``sr``, so
    the band above the model's Nyquist is kept at ``atten_lim_db`` below the input too."""
    import soxr

    from .hub import load

    sr = check_rate(sr)
    atten_lim_db = check_atten_lim(atten_lim_db)
    x = as_float_audio(audio)
    model = load(model, allow_untrained=False) if isinstance(model, str | os.PathLike) else model
    check_enhancer(model)
    if x.ndim == 2:
        x = x.mean(axis=1)
    msr = _model_rate(model)
    x16 = soxr.resample(x, sr, msr) if sr != msr else x
    left, right = _context(model)
    y = np.concatenate(list(enhance_chunks(model, iter([x16]), 10 * msr, left, right)))
    y = soxr.resample(y, msr, sr) if sr != msr else y
    y = y[: len(x)] if len(y) >= len(x) else np.pad(y, (0, len(x) - len(y)))
    return limit_attenuation(y, x, atten_lim_db)


class _InputDelay:
    """The mono input at the file's rate, held until the output it mixes with is written
    (bounded: the enhancement pipeline's delay, a chunk plus its context)."""

    def __init__(self):
        self.blocks: list[np.ndarray] = []
        self.held = 0

    def push(self, x: np.ndarray) -> None:
        self.blocks.append(np.asarray(x, np.float32))
        self.held += len(x)

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` input samples (zeros past the end of the input)."""
        buf = np.concatenate(self.blocks) if len(self.blocks) > 1 else (
            self.blocks[0] if self.blocks else np.zeros(0, np.float32))
        out = buf[:n] if len(buf) >= n else np.pad(buf, (0, n - len(buf)))
        rest = buf[n:]
        self.blocks = [rest] if len(rest) else []
        self.held = len(rest)
        return out


def enhance_file(
    model: nn.Module, src: Path, dst: Path, force: bool = False, block_s: float = 10.0,
    notice=print, progress=None, atten_lim_db: float | None = None,
) -> dict:
    """Enhance one file into ``dst`` (mono, original rate, same format family).
    ``progress(done, total, sr)`` is called as output samples are written.
    ``atten_lim_db``: as in :func:`enhance` (the mix at the file's rate)."""
    import soundfile as sf
    import soxr

    check_enhancer(model)
    g = atten_lim_gain(check_atten_lim(atten_lim_db))
    held = _InputDelay() if g > 0 else None
    if src.resolve() == dst.resolve():
        raise QsaError(f"output {dst} is the input file; choose another output path")
    if dst.exists() and not force:
        raise QsaError(f"{dst} already exists; pass --force to overwrite it")
    if dst.suffix and dst.suffix.lower() not in AUDIO_EXTS:
        raise AudioError(
            f"output {dst}: unknown audio extension {dst.suffix!r}; use one of "
            f"{', '.join(AUDIO_EXTS)}"
        )
    try:
        f = sf.SoundFile(str(src))
    except FileNotFoundError:
        raise AudioError(f"{src}: no such file") from None
    except (sf.LibsndfileError, RuntimeError) as e:
        why = getattr(e, "error_string", str(e)).rstrip(".")  # without the repeated path
        raise AudioError(
            f"{src}: not a readable audio file ({why}); expected WAV, FLAC or OGG"
        ) from None
    with f:
        sr, ch, n = f.samplerate, f.channels, f.frames
        if n == 0:
            raise AudioError(f"{src}: the file holds no samples")
        try:
            check_rate(sr)
        except AudioError as e:
            raise AudioError(
                f"{src}: {e}; the file's header gives {sr} Hz, which no recording uses: "
                "fix the header or resample the file (e.g. sox IN -r 16000 OUT)"
            ) from None
        check_output_rate(dst, sr)
        short = _short_data(f)
        if short:
            notice(f"{src}: {short}")
        msr = _model_rate(model)
        if ch > 1:
            notice(f"{src}: {ch} channels mixed to mono")
        if sr != msr:
            notice(f"{src}: {sr} Hz resampled to {msr} Hz for the model and back")
        rs_in = soxr.ResampleStream(sr, msr, 1, dtype="float32") if sr != msr else None
        rs_out = soxr.ResampleStream(msr, sr, 1, dtype="float32") if sr != msr else None
        block = max(1, int(block_s * sr))

        def blocks():
            for i, b in enumerate(f.blocks(blocksize=block, dtype="float32", always_2d=True)):
                if not np.all(np.isfinite(b)):
                    raise AudioError(f"{src}: NaN or Inf samples near {i * block_s:.0f} s")
                check_level(b, f"{src} (near {i * block_s:.0f} s)")
                m = b.mean(axis=1)
                if held is not None:
                    held.push(m)
                last = f.tell() >= n
                yield rs_in.resample_chunk(m, last=last) if rs_in else m

        left, right = _context(model)
        subtype = "PCM_16" if dst.suffix.lower() != ".ogg" else "VORBIS"
        fmt = dst.suffix.lstrip(".").upper() or "WAV"
        if fmt == "WAV" and 2 * n > 0xFFFFFFFF - (1 << 20):
            fmt = "RF64"  # a RIFF WAV holds at most 4 GiB (~37 h mono PCM_16 at 16 kHz)
        written = 0

        def mix(z: np.ndarray) -> np.ndarray:  # the output with the input it lines up with
            return z if held is None else limit_attenuation(z, held.take(len(z)), atten_lim_db)

        with atomic_path(dst, force=True) as tmp:
            with sf.SoundFile(str(tmp), "w", samplerate=sr, channels=1, subtype=subtype,
                              format=fmt) as out:
                for y in enhance_chunks(model, blocks(), 10 * msr, left, right):
                    z = rs_out.resample_chunk(y, last=False) if rs_out else y
                    z = mix(z[: max(0, n - written)])
                    out.write(np.clip(z, -1.0, 1.0))
                    written += len(z)
                    if progress is not None:
                        progress(written, n, sr)
                if rs_out is not None:
                    z = rs_out.resample_chunk(np.zeros(0, np.float32), last=True)[: n - written]
                    out.write(np.clip(mix(z), -1.0, 1.0))
                    written += len(z)
                if written < n:  # resampler group delay: pad the tail to the input length
                    out.write(np.clip(mix(np.zeros(n - written, np.float32)), -1.0, 1.0))
                    written = n
                if progress is not None:
                    progress(written, n, sr)
    return {"input": str(src), "output": str(dst), "samplerate": sr, "channels_in": ch,
            "seconds": n / sr}


def _short_data(f) -> str | None:
    """What libsndfile noticed about a WAV whose data chunk is shorter than its header says
    (a truncated copy or download), or None."""
    import re

    try:
        info = f.extra_info
    except Exception:  # noqa: BLE001 - informational only
        return None
    m = re.search(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", info, re.M)
    if not m or int(m.group(2)) >= int(m.group(1)):
        return None
    width = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4,
             "DOUBLE": 8, "ULAW": 1, "ALAW": 1}.get(f.subtype, 2)
    said, has = int(m.group(1)) // (width * max(1, f.channels)), f.frames
    return (f"the header says {said} samples but the file holds {has} (truncated?): "
            f"enhancing the {has} samples present ({has / f.samplerate:.2f} s)")


def folder_inputs(src: Path, notice=print) -> list[Path]:
    """The audio files under ``src`` (sorted); a notice for the other files skipped."""
    files, skipped = [], []
    for p in sorted(src.rglob("*")):
        if not p.is_file() or p.name.startswith("."):
            continue
        (files if p.suffix.lower() in AUDIO_EXTS + READ_ONLY_EXTS else skipped).append(p)
    if skipped:
        exts = sorted({p.suffix.lower() or "(no extension)" for p in skipped})
        notice(f"{src}: skipped {len(skipped)} file(s) that are not audio it reads "
               f"({', '.join(exts)}); reads {', '.join(AUDIO_EXTS + READ_ONLY_EXTS)}")
    return files


def folder_output(src: Path, dst: Path, p: Path) -> Path:
    out = dst / p.relative_to(src)
    return out.with_suffix(".wav") if p.suffix.lower() in READ_ONLY_EXTS else out


def enhance_path(model: nn.Module, src: Path, dst: Path, force: bool = False, notice=print,
                 atten_lim_db: float | None = None):
    """A file or a folder of audio files (mirrored into ``dst``; .mp3 inputs give .wav)."""
    check_enhancer(model)
    atten_lim_db = check_atten_lim(atten_lim_db)
    if src.is_dir():
        files = folder_inputs(src, notice)
        if not files:
            raise AudioError(f"{src}: folder holds no {'/'.join(AUDIO_EXTS)} files")
        if dst.exists() and not dst.is_dir():
            raise QsaError(f"{dst} exists and is not a folder; the input is a folder")
        return [enhance_file(model, p, folder_output(src, dst, p), force, notice=notice,
                             atten_lim_db=atten_lim_db) for p in files]
    if not src.exists():
        raise AudioError(f"{src}: no such file or folder")
    if dst.is_dir():
        dst = dst / src.name
    return [enhance_file(model, src, dst, force, notice=notice, atten_lim_db=atten_lim_db)]
