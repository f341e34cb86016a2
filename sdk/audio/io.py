"""Reading and writing audio files: any rate, any channel count, in, 16 kHz mono float32 out.

``read_audio`` decodes WAV/FLAC/OGG (and whatever else libsndfile reads) with soundfile,
mixes channels to mono (mean) and resamples with soxr, so every model sees the same input.
What was done, and what looks odd about the input (clipping, DC offset, very quiet or very
loud), is reported in ``AudioInfo.notices`` for the CLI to print; such audio is still
processed. Unusable input raises ``qsa.errors.AudioError`` naming the file and the problem:
missing, not audio, empty, or containing NaN/Inf.

``write_audio`` writes atomically (temp file + rename) and refuses to overwrite an existing
file unless ``force=True``. Float input is written as 16-bit PCM by default with the same
scale soundfile reads back (``int16 / 32768``), so a value already on that grid round-trips
exactly; int16 input is written as is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qsa.errors import AudioError, QsaError
from qsa.fileio import atomic_path

DEFAULT_SR = 16000

# File extension -> (libsndfile format, default subtype)
_FORMATS = {
    ".wav": ("WAV", "PCM_16"),
    ".flac": ("FLAC", "PCM_16"),
    ".ogg": ("OGG", "VORBIS"),
}

_CLIP_LEVEL = 0.999
_QUIET_DBFS = -50.0
_DC_LEVEL = 0.05


@dataclass(frozen=True)
class AudioInfo:
    """What ``read_audio`` found in a file and what it did to it."""

    path: str
    sr_in: int  # the file's sample rate
    sr: int  # the rate of the returned array
    channels: int  # channels in the file (the returned array is mono)
    frames_in: int  # samples per channel in the file
    format: str
    subtype: str
    mixed_to_mono: bool
    resampled: bool
    peak: float  # of the returned array
    rms_dbfs: float
    notices: list[str] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.frames_in / self.sr_in


def _dbfs(x: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0
    return float(20.0 * np.log10(rms)) if rms > 0 else float("-inf")


def read_audio(path: str | os.PathLike, target_sr: int | None = DEFAULT_SR) -> tuple[
    np.ndarray, AudioInfo
]:
    """Read ``path`` as mono float32 at ``target_sr`` Hz (None keeps the file's rate)."""
    import soundfile as sf

    from .resample import resample

    p = Path(path)
    if not p.exists():
        raise AudioError(f"{p}: no such file; check the path")
    if p.is_dir():
        raise AudioError(f"{p} is a folder, expected an audio file (wav/flac/ogg)")
    try:
        with sf.SoundFile(str(p)) as f:
            sr_in, channels, fmt, subtype = f.samplerate, f.channels, f.format, f.subtype
            data = f.read(dtype="float32", always_2d=True)  # (frames, channels)
    except sf.LibsndfileError as e:
        why = getattr(e, "error_string", str(e)).rstrip(".")  # libsndfile's reason, no path
        raise AudioError(
            f"{p}: not a readable audio file ({why}); expected WAV, FLAC or OGG"
        ) from e
    except (RuntimeError, OSError) as e:
        raise AudioError(f"{p}: cannot read audio ({e}); expected WAV, FLAC or OGG") from e
    frames = data.shape[0]
    if frames == 0:
        raise AudioError(f"{p}: the file has 0 samples; nothing to process")
    bad = ~np.isfinite(data)
    if bad.any():
        n_bad = int(bad.sum())
        first = int(np.argwhere(bad)[0, 0])
        raise AudioError(
            f"{p}: {n_bad} sample(s) are NaN or Inf (first at sample {first}, "
            f"{first / sr_in:.3f} s); re-export the file from its source"
        )
    notices: list[str] = []
    clipped = float(np.mean(np.abs(data) >= _CLIP_LEVEL))
    if clipped > 1e-3:
        notices.append(f"{100 * clipped:.2f}% of samples at full scale: the input is clipped")
    mono = data[:, 0] if channels == 1 else data.mean(axis=1, dtype=np.float32)  # (frames,)
    if channels > 1:
        notices.append(f"mixed {channels} channels to mono")
    dc = float(np.mean(mono, dtype=np.float64))
    if abs(dc) > _DC_LEVEL:
        notices.append(f"DC offset {dc:+.3f} in the input")
    sr = sr_in if target_sr is None else int(target_sr)
    resampled = sr != sr_in
    if resampled:
        mono = resample(mono, sr_in, sr)
        notices.append(f"resampled {sr_in} Hz -> {sr} Hz")
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    level = _dbfs(mono)
    if level < _QUIET_DBFS:
        notices.append(f"very quiet input ({level:.1f} dBFS RMS)")
    if peak > 1.0:
        notices.append(f"peak {peak:.2f} above full scale (float file)")
    info = AudioInfo(
        path=str(p), sr_in=sr_in, sr=sr, channels=channels, frames_in=frames, format=fmt,
        subtype=subtype, mixed_to_mono=channels > 1, resampled=resampled, peak=peak,
        rms_dbfs=level, notices=notices,
    )
    return mono, info


def to_int16(x: np.ndarray) -> np.ndarray:
    """Float in [-1, 1) to int16 with soundfile's read scale (x * 32768), clipping outside."""
    x = np.asarray(x, dtype=np.float64)
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


def quantize_int16(x: np.ndarray) -> np.ndarray:
    """Float32 values exactly as a 16-bit file written by ``write_audio`` reads back."""
    return (to_int16(x).astype(np.float32) / np.float32(32768.0)).astype(np.float32)


def write_audio(
    path: str | os.PathLike,
    x: np.ndarray,
    sr: int,
    force: bool = False,
    subtype: str | None = None,
) -> Path:
    """Write mono (samples,) or (samples, channels) audio to ``path`` atomically.

    The format comes from the extension (.wav, .flac, .ogg). ``subtype`` defaults to PCM_16
    (VORBIS for .ogg); float data is clipped to [-1, 1) for integer subtypes. An existing
    ``path`` is an error unless ``force``.
    """
    import soundfile as sf

    p = Path(path)
    ext = p.suffix.lower()
    if ext not in _FORMATS:
        raise AudioError(
            f"{p}: unknown audio extension {ext!r}; use one of {', '.join(sorted(_FORMATS))}"
        )
    fmt, default_subtype = _FORMATS[ext]
    subtype = subtype or default_subtype
    if not sf.check_format(fmt, subtype):
        raise AudioError(f"{p}: subtype {subtype!r} is not valid for {fmt}")
    x = np.asarray(x)
    if x.ndim not in (1, 2) or x.shape[0] == 0:
        raise AudioError(f"{p}: expected a non-empty (samples,) or (samples, channels) array, "
                         f"got shape {x.shape}")
    if x.dtype != np.int16:
        x = np.asarray(x, dtype=np.float32)
        if not np.isfinite(x).all():
            raise AudioError(f"{p}: refusing to write NaN/Inf samples")
        if subtype == "PCM_16":
            x = to_int16(x)
    try:
        with atomic_path(p, force=force) as tmp:
            # The temp name ends in .tmp, so the format is given explicitly.
            sf.write(str(tmp), x, int(sr), format=fmt, subtype=subtype)
    except QsaError as e:
        if isinstance(e, AudioError):
            raise
        raise AudioError(f"{p} already exists; pass force=True (--force) to overwrite it") from e
    return p
