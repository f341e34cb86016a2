"""qsa.audio.io and qsa.audio.resample: formats, rates, channels, defined errors, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from qsa.audio.io import quantize_int16, read_audio, write_audio
from qsa.audio.resample import StreamResampler, resample
from qsa.errors import AudioError


def sine(sr: int, seconds: float = 1.0, f: float = 1000.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * f * t)).astype(np.float32)


def peak_freq(x: np.ndarray, sr: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[np.argmax(spec)])


@pytest.mark.parametrize(
    "ext,fmt,subtype,tol",
    [
        (".wav", "WAV", "PCM_16", 1e-4),
        (".wav", "WAV", "PCM_24", 1e-6),
        (".wav", "WAV", "PCM_32", 1e-6),
        (".wav", "WAV", "PCM_U8", 1e-2),
        (".wav", "WAV", "FLOAT", 1e-7),
        (".flac", "FLAC", "PCM_16", 1e-4),
        (".flac", "FLAC", "PCM_24", 1e-6),
        (".ogg", "OGG", "VORBIS", None),
    ],
)
def test_formats_read_back(tmp_path, ext, fmt, subtype, tol):
    x = sine(16000)
    path = tmp_path / f"a{ext}"
    sf.write(str(path), x, 16000, format=fmt, subtype=subtype)
    y, info = read_audio(path)
    assert y.dtype == np.float32 and y.ndim == 1
    assert info.sr == 16000 and info.sr_in == 16000 and not info.resampled
    assert info.subtype == subtype
    if tol is None:  # lossy: same tone, similar level
        assert abs(peak_freq(y, 16000) - 1000) < 5
        assert abs(np.sqrt(np.mean(y**2)) - 0.5 / np.sqrt(2)) < 0.05
    else:
        np.testing.assert_allclose(y[: len(x)], x, atol=tol)


@pytest.mark.parametrize("sr_in", [8000, 22050, 44100, 48000])
def test_any_rate_resampled(tmp_path, sr_in):
    path = tmp_path / "r.wav"
    sf.write(str(path), sine(sr_in), sr_in, subtype="PCM_16")
    y, info = read_audio(path, 16000)
    assert info.resampled and info.sr == 16000 and info.sr_in == sr_in
    assert abs(len(y) - 16000) <= 1
    assert abs(peak_freq(y, 16000) - 1000) < 5
    mid = y[2000:-2000]
    assert abs(np.max(np.abs(mid)) - 0.5) < 0.01  # pass-band gain ~ 1
    assert any("resampled" in n for n in info.notices)


def test_target_sr_none_keeps_rate(tmp_path):
    path = tmp_path / "k.wav"
    sf.write(str(path), sine(44100), 44100)
    y, info = read_audio(path, None)
    assert info.sr == 44100 and len(y) == 44100 and not info.resampled


@pytest.mark.parametrize("channels", [2, 6])
def test_multichannel_mixed_to_mono(tmp_path, channels):
    x = np.stack([sine(16000, amp=0.1 * (c + 1)) for c in range(channels)], axis=1)
    path = tmp_path / "mc.wav"
    sf.write(str(path), x, 16000, subtype="FLOAT")
    y, info = read_audio(path)
    assert info.channels == channels and info.mixed_to_mono
    assert any(f"mixed {channels} channels" in n for n in info.notices)
    np.testing.assert_allclose(y, x.mean(axis=1), atol=1e-6)


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match="nope.wav: no such file"):
        read_audio(tmp_path / "nope.wav")


def test_folder_is_not_audio(tmp_path):
    with pytest.raises(AudioError, match="is a folder"):
        read_audio(tmp_path)


def test_non_audio_file(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 20)
    with pytest.raises(AudioError, match="notes.wav: not a readable audio file") as e:
        read_audio(path)
    assert str(e.value).count("notes.wav") == 1  # the path once, then libsndfile's reason


def test_truncated_header(tmp_path):
    path = tmp_path / "cut.wav"
    sf.write(str(path), sine(16000), 16000)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(AudioError, match="cut.wav"):
        read_audio(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.wav"
    sf.write(str(path), np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioError, match="empty.wav: the file has 0 samples"):
        read_audio(path)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_samples(tmp_path, bad):
    x = sine(16000)
    x[1234] = bad
    path = tmp_path / "nan.wav"
    sf.write(str(path), x, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"nan.wav: 1 sample\(s\) are NaN or Inf .*sample 1234"):
        read_audio(path)


def test_odd_but_valid_input_is_processed(tmp_path):
    cases = {
        "clipped": np.clip(sine(16000, amp=3.0), -1, 1),
        "dc": sine(16000, amp=0.2) + 0.3,
        "quiet": sine(16000, amp=1e-4),
        "loud_float": sine(16000, amp=4.0),
        "silence": np.zeros(16000, np.float32),
    }
    expect = {"clipped": "clipped", "dc": "DC offset", "quiet": "very quiet",
              "loud_float": "above full scale", "silence": "very quiet"}
    for name, x in cases.items():
        path = tmp_path / f"{name}.wav"
        sf.write(str(path), x, 16000, subtype="FLOAT" if name == "loud_float" else "PCM_16")
        y, info = read_audio(path)
        assert len(y) == 16000
        assert any(expect[name] in n for n in info.notices), (name, info.notices)


def test_write_roundtrip_exact_and_atomic(tmp_path):
    rng = np.random.default_rng(0)
    x = quantize_int16(rng.uniform(-0.9, 0.9, 8000))
    path = tmp_path / "out" / "y.wav"
    write_audio(path, x, 16000)
    y, info = read_audio(path)
    assert info.subtype == "PCM_16"
    np.testing.assert_array_equal(y, x)
    assert sorted(p.name for p in path.parent.iterdir()) == ["y.wav"]  # no temp left


def test_write_refuses_overwrite(tmp_path):
    path = tmp_path / "y.wav"
    write_audio(path, sine(16000), 16000)
    before = path.read_bytes()
    with pytest.raises(AudioError, match="already exists; pass force=True"):
        write_audio(path, sine(16000, amp=0.1), 16000)
    assert path.read_bytes() == before
    write_audio(path, sine(16000, amp=0.1), 16000, force=True)
    assert path.read_bytes() != before


@pytest.mark.parametrize("ext,fmt", [(".wav", "WAV"), (".flac", "FLAC"), (".ogg", "OGG")])
def test_write_format_from_extension(tmp_path, ext, fmt):
    path = tmp_path / f"z{ext}"
    write_audio(path, sine(16000), 16000)
    assert sf.info(str(path)).format == fmt


def test_write_int16_and_clipping(tmp_path):
    ints = np.array([-32768, -1, 0, 1, 32767], np.int16)
    write_audio(tmp_path / "i.wav", ints, 16000)
    np.testing.assert_array_equal(sf.read(str(tmp_path / "i.wav"), dtype="int16")[0], ints)
    write_audio(tmp_path / "c.wav", np.array([2.0, -2.0, 0.5], np.float32), 16000)
    np.testing.assert_array_equal(sf.read(str(tmp_path / "c.wav"), dtype="int16")[0],
                                  [32767, -32768, 16384])


def test_write_errors(tmp_path):
    with pytest.raises(AudioError, match="unknown audio extension '.mp4'"):
        write_audio(tmp_path / "a.mp4", sine(16000), 16000)
    with pytest.raises(AudioError, match="NaN/Inf"):
        write_audio(tmp_path / "a.wav", np.array([0.0, np.nan]), 16000)
    with pytest.raises(AudioError, match="non-empty"):
        write_audio(tmp_path / "a.wav", np.zeros(0), 16000)
    assert not (tmp_path / "a.wav").exists()


def test_resample_and_stream_match_offline():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(30000).astype(np.float32)
    for sr_in, sr_out, block in [(48000, 16000, 480), (22050, 16000, 777), (16000, 48000, 160)]:
        y = resample(x, sr_in, sr_out)
        assert abs(len(y) - len(x) * sr_out / sr_in) <= 1
        s = StreamResampler(sr_in, sr_out)
        parts = [s.process(x[i : i + block]) for i in range(0, len(x), block)]
        parts.append(s.flush())
        np.testing.assert_allclose(np.concatenate(parts), y, atol=1e-6)
    assert resample(x, 16000, 16000) is not None and len(resample(x, 16000, 16000)) == len(x)


def test_stream_resampler_misuse():
    s = StreamResampler(48000, 16000)
    s.flush()
    with pytest.raises(AudioError, match="after flush"):
        s.process(np.zeros(10, np.float32))
    with pytest.raises(AudioError, match="flush called twice"):
        s.flush()
    with pytest.raises(AudioError, match="sr_in=0"):
        resample(np.zeros(10), 0, 16000)
