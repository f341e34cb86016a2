"""`qsa enhance` on bad input, run as a user runs it (subprocess): every case is a clean
error (exit 2, a message naming the file and the problem, no traceback), never a crash or a
silently written output; odd but valid audio (shorter than one frame, silence) is processed.

One `qsa enhance` call per case: a folder input would stop at its first bad file.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

QSA = [str(Path(sys.executable).with_name("qsa"))]
SR = 16000


def enhance(*args):
    return subprocess.run(
        QSA + ["enhance", *map(str, args), "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def _clean_error(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def _wav(path: Path, x: np.ndarray, subtype: str = "PCM_16") -> Path:
    sf.write(str(path), x, SR, subtype=subtype)
    return path


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    text = tmp / "notes.wav"
    text.write_text("this is not audio\n" * 50)
    empty = _wav(tmp / "empty.wav", np.zeros(0, np.float32))
    zero = tmp / "zero.wav"
    zero.write_bytes(b"")
    x = (0.1 * np.sin(np.arange(SR) * 0.05)).astype(np.float32)
    x[1000] = np.nan
    nan = _wav(tmp / "nan.wav", x, "FLOAT")
    loud = _wav(tmp / "loud.wav", (3e4 * np.sin(np.arange(SR) * 0.05)).astype(np.float32),
                "FLOAT")  # 16-bit PCM values stored in a float WAV
    truncated = tmp / "cut.wav"
    _wav(truncated, np.zeros(SR, np.float32))
    truncated.write_bytes(truncated.read_bytes()[:30])
    return {
        "non-audio file": (text, ("notes.wav", "not a readable audio file")),
        "0 samples": (empty, ("empty.wav", "no samples")),
        "0-byte file": (zero, ("zero.wav",)),
        "NaN sample": (nan, ("nan.wav", "NaN")),
        "truncated header": (truncated, ("cut.wav",)),
        "PCM values in a float file": (loud, ("loud.wav", "above full scale", "divide by 32768")),
        "missing file": (tmp / "nope.wav", ("nope.wav", "no such file")),
    }


CASES = ["non-audio file", "0 samples", "0-byte file", "NaN sample", "truncated header",
         "missing file", "PCM values in a float file"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_a_clean_error(tmp_path, case):
    src, words = _bad_inputs(tmp_path)[case]
    out = tmp_path / "out.wav"
    r = enhance(src, out)
    _clean_error(r, *words)
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def _mpl_data(rel: str) -> Path:
    import matplotlib  # an `audio` dependency; its data folder ships these files

    return Path(matplotlib.get_data_path()) / rel


# real files of other kinds that installed packages ship, read where they are installed
MEDIA = {
    "png": "images/matplotlib.png",
    "jpg": "sample_data/grace_hopper.jpg",
    "pdf": "images/hand.pdf",
    "svg": "images/home.svg",
    "ttf": "fonts/ttf/DejaVuSans.ttf",
    "npz": "sample_data/goog.npz",
}


def _non_audio_error(r, src: Path, out: Path):
    _clean_error(r, str(src), "not a readable audio file", "expected WAV, FLAC or OGG")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # one message, nothing else
    assert not out.exists() and not list(out.parent.glob(".*.tmp"))


@pytest.mark.parametrize("kind", list(MEDIA))
def test_real_non_audio_media_is_a_clean_error(tmp_path, kind):
    src = _mpl_data(MEDIA[kind])
    assert src.is_file(), f"{src}: matplotlib no longer ships it; pick another of its files"
    out = tmp_path / "out.wav"
    _non_audio_error(enhance(src, out), src, out)


def test_png_named_wav_is_a_clean_error(tmp_path):
    src = tmp_path / "speech.wav"
    src.write_bytes(_mpl_data(MEDIA["png"]).read_bytes())
    out = tmp_path / "out.wav"
    _non_audio_error(enhance(src, out), src, out)


def test_mp4_video_with_a_sound_track_is_a_clean_error(tmp_path):
    """A real MP4 (MPEG-4 video and a 1 s AAC tone) made by FFmpeg through PyAV: it has a
    sound track, but libsndfile does not read MP4, so it is refused, not half-read."""
    av = pytest.importorskip("av")  # installed with the bench extra (pyrnnoise -> audiolab)
    src = tmp_path / "talk.mp4"
    with av.open(str(src), "w") as c:
        v = c.add_stream("mpeg4", rate=10)
        v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
        a = c.add_stream("aac", rate=SR, layout="mono")
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 20 * i, np.uint8),
                                               format="rgb24")
            c.mux(v.encode(frame))
        tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(SR) / SR)).astype(np.float32)
        sound = av.AudioFrame.from_ndarray(tone[None], format="flt", layout="mono")
        sound.sample_rate = SR
        c.mux(a.encode(sound))
        c.mux(a.encode())
        c.mux(v.encode())
    with av.open(str(src)) as c:  # a valid video with sound
        assert sorted(s.type for s in c.streams) == ["audio", "video"]
        assert sum(f.samples for f in c.decode(audio=0)) >= SR
    out = tmp_path / "out.wav"
    _non_audio_error(enhance(src, out), src, out)


def test_existing_output_needs_force_and_short_input_is_processed(tmp_path):
    src = _wav(tmp_path / "short.wav", (0.1 * np.random.default_rng(0).standard_normal(100))
               .astype(np.float32))  # 100 samples: shorter than one STFT frame
    out = tmp_path / "out.wav"
    out.write_bytes(b"keep me")
    _clean_error(enhance(src, out), "already exists", "--force")
    assert out.read_bytes() == b"keep me"
    _clean_error(enhance(src, src), "is the input file")
    _clean_error(enhance(src, tmp_path / "out.mp4"), "unknown audio extension '.mp4'")
    assert not (tmp_path / "out.mp4").exists()
    r = enhance(src, out, "--force")
    assert r.returncode == 0, r.stderr
    y, sr = sf.read(str(out), dtype="float32")
    assert sr == SR and len(y) == 100 and np.isfinite(y).all()
