"""kill -9 in the middle of `qsa enhance` and `qsa export` (real subprocesses, SIGKILL at
several moments): the output is the old file or a complete new one, never a partial file, and
what is left still loads."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

QSA = str(Path(sys.executable).with_name("qsa"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
SR = 16000

pytestmark = pytest.mark.slow


def _kill_after(cmd: list[str], seconds: float) -> int:
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=seconds)  # finished before the kill: fine, the file must be complete
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    return p.returncode


def _visible(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if not p.name.startswith(".")}


def test_kill9_during_enhance_leaves_old_or_new_output(tmp_path):
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(SR * 90)).astype(np.float32)
    src, out = tmp_path / "in.wav", tmp_path / "out.wav"
    sf.write(src, x, SR, subtype="FLOAT")
    old = 0.5 * np.ones(SR, np.float32)
    sf.write(out, old, SR, subtype="FLOAT")
    old_bytes = out.read_bytes()
    cmd = [QSA, "enhance", str(src), str(out), "--force", "--threads", "1"]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    new_bytes = out.read_bytes()
    assert new_bytes != old_bytes
    y, sr = sf.read(out, dtype="float32")
    assert sr == SR and len(y) == len(x)
    outcomes = []
    for delay in (0.5, 1.5, 3.0, 5.0):
        out.write_bytes(old_bytes)
        rc = _kill_after(cmd, delay)
        got = out.read_bytes()
        assert got in (old_bytes, new_bytes), f"partial output after kill at {delay} s"
        outcomes.append((delay, rc, "old" if got == old_bytes else "new"))
        assert _visible(tmp_path) == {"in.wav", "out.wav"}, _visible(tmp_path)
    assert any(o[1] == -signal.SIGKILL for o in outcomes), outcomes  # a kill really happened
    np.testing.assert_array_equal(sf.read(src, dtype="float32")[0], x)  # input untouched


def test_kill9_during_export_leaves_a_loadable_artifact(tmp_path):
    from qsa.export import load_runtime

    d = tmp_path / "onnx"
    cmd = [QSA, "export", "qcgan-35k", "--target", "onnx", "-o", str(d), "--force"]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    first = (d / "model.onnx").read_bytes()
    frame = np.zeros(128, np.float32)
    kills = 0
    for delay in (2.0, 6.0, 10.0):
        rc = _kill_after(cmd, delay)
        kills += rc == -signal.SIGKILL
        art = d / "model.onnx"
        assert art.is_file()  # never removed, never half-written
        data = art.read_bytes()
        if data != first:  # the new artifact landed before the kill: it must be whole
            assert len(data) == len(first)
        rt = load_runtime("onnx", art)  # checks it (and its report's sha256, if present)
        y, _ = rt.step(frame, rt.init_state())
        assert np.isfinite(y).all()
    assert kills >= 1
