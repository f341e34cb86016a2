"""A long file through `qsa enhance`, run as a user runs it (subprocess): a defined outcome.

A 10-minute file (longer ones: ``bench/long_enhance.py --hours 8``) must come out whole: exit 0,
the input's length, equal to offline processing within one PCM_16 step, no output file while
the run is in progress (temp file + rename) and no temp file after it. Memory must not depend on
the length: the child's peak RSS may exceed that of a 30 s file by at most half of what one
float32 copy of the long file takes, so any regression that holds the whole file (decoded,
resampled or enhanced) in memory fails.

Both files are written and read in blocks: the test never holds the long file either.
"""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from qsa.data.synth import long_signal

QSA = str(Path(sys.executable).with_name("qsa"))
# glibc's dynamic mmap threshold keeps the ~100 MB of transients that each 10 s chunk frees in
# the heap, so peak RSS varies by +-25 MB between identical runs; with a fixed threshold large
# buffers are returned at once and peak RSS follows live memory within 2-3 MB
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
       "MALLOC_MMAP_THRESHOLD_": "262144"}
SR = 16000
LONG = 600 * SR + 12345  # 10 min and a partial last chunk (not a multiple of the hop)
SHORT = 30 * SR  # the baseline: three full 10 s chunks
PCM16_STEP = 1.0 / 32768

pytestmark = pytest.mark.slow


def _block(start: int, n: int) -> np.ndarray:
    """Samples [start, start + n) of the test signal (qsa.data.synth.long_signal): noise of a
    level changing every 10 s, a gliding tone, and 10 s of digital silence at 5 min."""
    return long_signal(start, n, SR, silence_s=(300, 310))


def _write(path: Path, frames: int, block: int = 7 * SR + 333) -> Path:
    with sf.SoundFile(str(path), "w", samplerate=SR, channels=1, subtype="PCM_16") as f:
        for s in range(0, frames, block):
            f.write(_block(s, min(block, frames - s)))
    return path


def _enhance_measured(src: Path, out: Path) -> tuple[subprocess.CompletedProcess, int, set]:
    """Run `qsa enhance` and return (result, the child's peak RSS in bytes, the sizes ``out``
    had whenever it was visible while the child ran)."""
    err = out.with_name(out.name + ".stderr")
    cmd = [QSA, "enhance", str(src), str(out), "--threads", "1"]
    with open(err, "w") as ferr:
        p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=ferr)
    seen = set()
    deadline = time.monotonic() + 600
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)  # this child's own rusage
        if pid:
            break
        with contextlib.suppress(FileNotFoundError):
            seen.add(out.stat().st_size)
        if time.monotonic() > deadline:
            p.kill()
            p.wait()
            pytest.fail("qsa enhance ran past 600 s")
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    stderr = err.read_text()
    err.unlink()
    return subprocess.CompletedProcess(cmd, p.returncode, "", stderr), usage.ru_maxrss * 1024, seen


def _reference_windows(model, src: Path, frames: int, win: int, left: int, right: int):
    """Offline output, window by window: the model run once over [s - left, s + win + right)
    of the file, keeping [s, s + win). Windows start at 0 (a true offline start) and the
    last one reaches the end of the file (a true offline end); their boundaries differ from
    the 10 s chunks of `qsa enhance` and the context exceeds the receptive field."""
    for s in range(0, frames, win):
        a, b = max(0, s - left), min(frames, s + win + right)
        x, _ = sf.read(str(src), start=a, stop=b, dtype="float32")
        with torch.no_grad():
            y = model(torch.from_numpy(x)[None])[0].numpy()
        yield s, y[s - a : s - a + min(win, frames - s)]


def test_long_file_is_whole_equal_to_offline_and_memory_is_flat(tmp_path):
    import qsa

    short, long_ = _write(tmp_path / "short.wav", SHORT), _write(tmp_path / "long.wav", LONG)
    r, base_rss, _ = _enhance_measured(short, tmp_path / "short_out.wav")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "long_out.wav"
    r, peak_rss, seen = _enhance_measured(long_, out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    # visible only once complete (the rename comes a moment before the process exits)
    assert seen <= {out.stat().st_size}, f"partial output seen: {seen}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "long.wav", "long_out.wav", "short.wav", "short_out.wav"]  # no temp file left

    one_copy = LONG * 4  # the long file decoded as float32 once (38 MB)
    assert peak_rss < base_rss + one_copy // 2, (
        f"peak RSS {peak_rss / 2**20:.1f} MB for {LONG / SR:.0f} s vs "
        f"{base_rss / 2**20:.1f} MB for {SHORT / SR:.0f} s: memory grows with the file length"
    )

    info = sf.info(str(out))
    assert (info.frames, info.samplerate, info.channels) == (LONG, SR, 1)
    model = qsa.load("qcgan-35k")
    hop, rf = model.hop, model.receptive_field_samples
    left, right = rf + SR, SR  # more context than the model needs: offline-equal
    assert left % hop == 0
    worst = 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two OpenMP threads on a busy 2-core machine: 10x slower
    try:
        with sf.SoundFile(str(out)) as f:
            for s, ref in _reference_windows(model, long_, LONG, 7 * SR, left, right):
                f.seek(s)
                got = f.read(len(ref), dtype="float32")
                assert len(got) == len(ref)
                err = float(np.max(np.abs(got - np.clip(ref, -1, 1))))
                worst = max(worst, err)
                # PCM_16 output: one quantisation step, plus the 1e-5 of
                # tests/test_qcgan.py::test_receptive_field_bounds_the_past
                assert err <= PCM16_STEP + 1e-5, f"window at {s / SR:.1f} s differs by {err:.2e}"
    finally:
        torch.set_num_threads(threads)
    print(f"peak RSS {peak_rss / 2**20:.1f} MB ({LONG / SR:.0f} s), {base_rss / 2**20:.1f} MB "
          f"({SHORT / SR:.0f} s); worst difference to offline {worst:.2e}")


@pytest.mark.parametrize("sr,channels", [(44100, 2), (48000, 3)])
def test_resampled_multichannel_file_equals_offline(tmp_path, sr, channels):
    """Past several 10 s chunks, a 44.1/48 kHz multichannel file comes out at its own rate and
    length, equal to the whole file mixed to mono, resampled once, enhanced offline in one
    call and resampled back (the streaming resamplers and the chunking change nothing)."""
    import soxr

    import qsa

    n = 35 * sr + 777  # 3.5 chunks and a ragged tail
    t = np.arange(n) / sr
    rng = np.random.default_rng(sr)
    mono = 0.3 * np.sin(2 * np.pi * 220 * t * (1 + 0.2 * np.sin(t)))
    mono = mono + 0.05 * rng.standard_normal(n)
    x = np.stack([mono * (0.5 + 0.25 * c) for c in range(channels)], axis=1).astype(np.float32)
    src, out = tmp_path / "in.wav", tmp_path / "out.wav"
    sf.write(str(src), x, sr, subtype="PCM_16")
    r = subprocess.run([QSA, "enhance", str(src), str(out), "--threads", "1"], env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"{channels} channels mixed to mono" in r.stdout + r.stderr
    assert f"{sr} Hz resampled to 16000 Hz" in r.stdout + r.stderr
    got, got_sr = sf.read(str(out), dtype="float32")
    assert got_sr == sr and got.shape == (n,)

    xin, _ = sf.read(str(src), dtype="float32", always_2d=True)
    x16 = soxr.resample(xin.mean(axis=1), sr, SR)
    model = qsa.load("qcgan-35k")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            y16 = model(torch.from_numpy(np.ascontiguousarray(x16))[None])[0].numpy()
    finally:
        torch.set_num_threads(threads)
    ref = np.clip(soxr.resample(y16, SR, sr), -1, 1)
    m = min(len(ref), n)
    err = np.abs(got[:m] - ref[:m])
    # away from the file's last 20 ms (the resamplers' flush): one PCM_16 step plus float
    # rounding of two resampler paths
    body = err[: m - sr // 50]
    assert float(body.max()) <= 2 * PCM16_STEP, f"max difference {body.max():.2e}"
    assert float(err.max()) <= 0.01
