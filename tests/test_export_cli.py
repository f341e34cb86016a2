"""`qsa export` run as a user runs it (subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

QSA = [str(Path(sys.executable).with_name("qsa"))]


def qsa(*args):
    return subprocess.run(
        QSA + list(args),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_export_help_lists_targets_and_profiles():
    r = qsa("export", "--help")
    assert r.returncode == 0
    for word in ("executorch", "litert", "tflm", "onnx", "--profile", "cortex-m7", "--force"):
        assert word in r.stdout


def test_export_unknown_model_is_a_clean_error(tmp_path):
    r = qsa("export", "no-such-model", "--target", "onnx", "-o", str(tmp_path))
    assert r.returncode == 2
    assert "no-such-model" in r.stderr and "Traceback" not in r.stderr


def test_export_unknown_profile_is_rejected(tmp_path):
    r = qsa("export", "x", "--target", "tflm", "-o", str(tmp_path), "--profile", "cortex-m99")
    assert r.returncode == 2 and "cortex-m99" in r.stderr


@pytest.mark.slow
def test_export_qcgan_35k_onnx_fp32(tmp_path):
    from qsa.models.registry import preset_names

    assert "qcgan-35k" in preset_names()
    r = qsa("export", "qcgan-35k", "--target", "onnx", "--precision", "fp32", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verified"] and report["parity"]["step_rms_error_max"] <= 1e-4
    assert (tmp_path / "model.onnx").stat().st_size == report["bytes"]
    # the packed (int8) bound is no target for an fp32 file: not printed, so no "over by"
    assert "packed bound" not in r.stdout and "over by" not in r.stdout
    r2 = qsa("export", "qcgan-35k", "--target", "onnx", "-o", str(tmp_path))
    assert r2.returncode == 2 and "--force" in r2.stderr
    # digital silence after speech: every bin's magnitude floor (sqrt(|X|^2 + eps)) must
    # survive export (onnxscript's optimizer once dropped the eps: log(0) = -inf, NaN state)
    import numpy as np

    from qsa.export import load_runtime
    from qsa.export.calib import verification_utterance

    rt = load_runtime("onnx", tmp_path / "model.onnx")
    x = np.concatenate([verification_utterance(), np.zeros(16000)]).astype(np.float32)
    y = rt.run_utterance(x)
    assert np.isfinite(y).all()
    assert np.abs(y[-4000:]).max() < 1e-3  # silence in, (near) silence out
