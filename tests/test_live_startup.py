"""`qsa live` start-up: a cached exported runtime starts without torch, and the export cache
follows the model file.

After the first run the live app's exported artifact comes from its cache, keyed on the
model file's bytes (not on the built torch model), so the warm path loads no torch at all;
the cold path exports (torch) and the next start reuses it. A different model file (new
shipped weights, a retrained file) is another key, never the old artifact.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.signal as ss
import soundfile as sf

from qsa.apps.live import REFERENCE_NAME, load_processor
from qsa.apps.live.processors import _file_key, _model_file
from qsa.hub import shipped_weights

SR = 16000
# what the warm path must not load (the onnx package is expected: the artifact check reads
# the model with it before onnxruntime runs it)
HEAVY = ("torch", "torchao", "executorch", "litert_torch", "tflite_micro")

# a fresh interpreter: load the processor, stream a signal, report what was imported
LOAD_AND_STREAM = """
import json, sys
import numpy as np
from qsa.apps.live import load_processor
p = load_processor(sys.argv[1], sys.argv[2])
x = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
y = p.process_offline(x)
print(json.dumps({"modules": sorted({m.split(".")[0] for m in sys.modules}),
                  "exporters": "qsa.export.exporters" in sys.modules,
                  "latency": p.algorithmic_latency_samples, "name": p.name,
                  "y": y.tolist()}))
"""


def load_in_subprocess(model: str, runtime: str, xdg) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg))
    r = subprocess.run([sys.executable, "-c", LOAD_AND_STREAM, model, runtime],
                       capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["heavy"] = set(out["modules"]) & set(HEAVY)
    return out


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """The first start on an empty cache (reference model, ONNX): exports, so loads torch."""
    xdg = tmp_path_factory.mktemp("xdg")
    return xdg, load_in_subprocess(REFERENCE_NAME, "onnx", xdg)


def test_warm_cache_loads_no_torch_and_streams_the_same(cold):
    xdg, first = cold
    assert "torch" in first["heavy"] and first["exporters"], first["heavy"]
    entries = list((xdg / "qsa" / "live").iterdir())
    assert len(entries) == 1 and (entries[0] / "live.json").is_file(), entries
    warm = load_in_subprocess(REFERENCE_NAME, "onnx", xdg)
    assert warm["heavy"] == set(), warm["heavy"]  # no torch, no exporters
    assert not warm["exporters"]
    assert list((xdg / "qsa" / "live").iterdir()) == entries  # nothing exported again
    assert warm["latency"] == first["latency"] == 128 + 31  # from the cache, as built
    assert warm["name"] == first["name"] == f"{REFERENCE_NAME} (onnx fp32)"
    np.testing.assert_array_equal(warm["y"], first["y"])
    # and it is the reference filter: the closed form, within float32 rounding
    x = np.random.default_rng(0).standard_normal(SR).astype(np.float32) * 0.1
    from qsa.apps.live import lowpass_taps

    ref = ss.lfilter(lowpass_taps(), 1.0, x)
    np.testing.assert_allclose(warm["y"], ref[: len(warm["y"])], atol=1e-5)


def test_a_damaged_cache_entry_is_exported_again(cold, tmp_path):
    xdg, first = cold
    copy = tmp_path / "xdg"
    shutil.copytree(xdg, copy)
    (entry,) = (copy / "qsa" / "live").iterdir()
    onnx = entry / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[: onnx.stat().st_size // 2])  # truncated on disk
    p = load_processor(REFERENCE_NAME, "onnx", cache_dir=copy / "qsa" / "live")
    x = np.random.default_rng(0).standard_normal(SR).astype(np.float32) * 0.1
    np.testing.assert_allclose(p.process_offline(x), first["y"], atol=1e-6)
    assert onnx.stat().st_size > 0 and (entry / "live.json").is_file()


def test_cache_key_follows_the_model_file(tmp_path):
    """Different weights -> a different key (so a new shipped file or a retrained one is
    exported again); the same bytes -> the same key; runtime and precision are part of it."""
    import torch

    from qsa.quantize import load_packed, save_packed

    shipped = shipped_weights("qcgan-35k")
    assert _model_file("qcgan-35k") == shipped
    assert _model_file(REFERENCE_NAME).name == "reference.py"
    assert _model_file("no-such-model") is None
    a, same, b = tmp_path / "a.qsa", tmp_path / "same.qsa", tmp_path / "b.qsa"
    shutil.copy(shipped, a)
    shutil.copy(shipped, same)
    m = load_packed(a, dequantize=True)
    with torch.no_grad():
        next(p for p in m.parameters() if p.ndim == 1).add_(1e-3)  # slightly retrained
    save_packed(m, b, precision="fp32")

    def key(path, runtime="onnx", precision="fp32", model="m.qsa"):
        return _file_key(model, path, runtime, precision)

    assert key(a) == key(same)
    assert key(a) != key(b)
    assert key(a) != key(a, runtime="litert") and key(a) != key(a, precision="int8")
    assert _file_key("qcgan-35k", shipped, "onnx", "fp32").startswith("qcgan-35k-")


@pytest.mark.realtime
def test_virtual_mic_warm_start_imports_no_torch_and_reports_its_time(cold, tmp_path):
    """The whole `qsa live --virtual-mic --input-file` path on a warm cache, on a private
    PulseAudio server: no torch, and the start-up figures in --json-stats."""
    from syspkgs import require

    require([t for t in ("pulseaudio", "pactl") if shutil.which(t) is None], "qsa live")
    from qsa.apps.live.pulse import PrivatePulse

    xdg, _ = cold
    wav = tmp_path / "in.wav"
    sf.write(wav, 0.1 * np.random.default_rng(1).standard_normal(SR).astype(np.float32), SR)
    code = ("import json, sys\nfrom qsa.cli import main\nrc = main(sys.argv[1:])\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), "
            "file=sys.stderr)\nsys.exit(rc)")  # fmt: skip
    with PrivatePulse({"room": SR}) as pa:
        env = dict(pa.env, XDG_CACHE_HOME=str(xdg), PULSE_SOURCE="room.monitor")
        r = subprocess.run(
            [sys.executable, "-c", code, "live", "--virtual-mic", "--model", REFERENCE_NAME,
             "--runtime", "onnx", "--input-file", str(wav), "--json-stats"],
            capture_output=True, text=True, timeout=900, env=env,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    heavy = set(json.loads(r.stderr.strip().splitlines()[-1])) & set(HEAVY)
    assert heavy == set(), heavy
    final = [json.loads(s) for s in r.stdout.splitlines() if s.startswith("{")][-1]
    st = final["startup_s"]
    assert 0 < st["model_ready"] <= st["stream_started"] <= st["first_output"], st
    assert st["first_output_cpu"] > 0, st
