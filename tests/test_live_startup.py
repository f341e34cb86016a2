"""`qsa live` start-up: a cached exported runtime starts without torch, and the export cache
follows the model file.

After the first run the live app's exported artifact comes from its cache, keyed on the
model file's bytes (not on the built torch model), so the warm path loads no torch at all,
fp32 and int8 (whose host DSP runs in numpy from numbers the entry records), and no `onnx`
package (the entry records the sha256 of the bytes that passed the artifact check); the
cold path exports (torch) and the next start reuses it. A different model file (new shipped
weights, a retrained file) is another key, never the old artifact. `qsa live`'s default
runtime is `auto`: LiteRT (else ONNX, else torch).
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
# what the warm path must not load (tflite_micro is the TFLM runtime itself: expected there)
HEAVY = ("torch", "torchao", "executorch", "litert_torch", "onnx")

# a fresh interpreter: load the processor, stream a signal, report what was imported
LOAD_AND_STREAM = """
import json, sys
import numpy as np
from qsa.apps.live import load_processor
p = load_processor(sys.argv[1], sys.argv[2], *sys.argv[3:])
x = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
y = p.process_offline(x)
print(json.dumps({"modules": sorted({m.split(".")[0] for m in sys.modules}),
                  "exporters": "qsa.export.exporters" in sys.modules,
                  "latency": p.algorithmic_latency_samples, "name": p.name,
                  "y": y.tolist()}))
"""


def load_in_subprocess(model: str, runtime: str, xdg, precision: str = "fp32") -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(xdg))
    r = subprocess.run([sys.executable, "-c", LOAD_AND_STREAM, model, runtime, precision],
                       capture_output=True, text=True, timeout=1800, env=env)  # fmt: skip
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
    assert "onnx" in first["modules"]  # the cold start checked the artifact with onnx
    entries = list((xdg / "qsa" / "live").iterdir())
    assert len(entries) == 1 and (entries[0] / "live.json").is_file(), entries
    warm = load_in_subprocess(REFERENCE_NAME, "onnx", xdg)
    assert warm["heavy"] == set(), warm["heavy"]  # no torch, no exporters, no onnx package
    assert "onnxruntime" in warm["modules"]
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


def test_an_entry_from_before_the_checksum_is_completed_then_starts_without_onnx(cold, tmp_path):
    """A live.json without the sha256 (written by an older qsa): the next start loads
    through every check and records it; the one after skips the onnx check."""
    xdg, first = cold
    copy = tmp_path / "xdg"
    shutil.copytree(xdg, copy)
    (entry,) = (copy / "qsa" / "live").iterdir()
    info = json.loads((entry / "live.json").read_text())
    assert isinstance(info.pop("sha256"), str) and "host_dsp" not in info  # fp32: no DSP
    (entry / "live.json").write_text(json.dumps(info))
    p = load_processor(REFERENCE_NAME, "onnx", cache_dir=copy / "qsa" / "live")
    x = np.random.default_rng(0).standard_normal(SR).astype(np.float32) * 0.1
    np.testing.assert_array_equal(p.process_offline(x), first["y"])
    from qsa.export.validate import sha256_file

    assert json.loads((entry / "live.json").read_text())["sha256"] == sha256_file(
        entry / "model.onnx"
    )
    warm = load_in_subprocess(REFERENCE_NAME, "onnx", copy)
    assert warm["heavy"] == set() and not warm["exporters"], warm["heavy"]
    np.testing.assert_array_equal(warm["y"], first["y"])


def test_verified_onnx_refuses_bytes_other_than_the_checked_ones(cold, tmp_path):
    """The warm ONNX path trusts only the exact bytes that passed the artifact check: one
    byte changed (same size: no structural check would be needed to notice) is refused."""
    from qsa.apps.live.warm import VerifiedOnnxRuntime
    from qsa.export.errors import ExportError

    xdg, _ = cold
    (entry,) = (xdg / "qsa" / "live").iterdir()
    sha = json.loads((entry / "live.json").read_text())["sha256"]
    rt = VerifiedOnnxRuntime(entry / "model.onnx", sha)
    assert rt.hop == 128 and rt.kind == "onnx"
    bad = tmp_path / "model.onnx"
    data = bytearray((entry / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(ExportError, match="sha256"):
        VerifiedOnnxRuntime(bad, sha)


# -- int8: the host DSP without torch ---------------------------------------------------------


def _network_runtime(step):
    """A stand-in for the exported network of ``step`` (its inputs' and outputs' shapes, a
    bounded mask and residual computed from the features, a state that changes): cheap, so
    the comparisons below stream many hops; only the host DSP differs between them. Its
    ``hop`` is its input's last dim (F), as the real network runtimes report it."""
    from qsa.export.runtimes import Runtime

    net = step.network()
    shapes = [tuple(s.shape) for s in net.init_state(1)]

    class Network(Runtime):
        kind = "numpy"

        def __init__(self):
            super().__init__(net.example_input(1).shape[-1], shapes)

        def _run(self, inputs):
            x, state = inputs[0], inputs[1:]  # x (1, 4, 1, F)
            mask = 1.2 / (1.0 + np.exp(-x[:, 1] - 0.1 * x[:, 2]))  # (1, 1, F)
            res = 0.05 * np.tanh(x[:, 2:4])  # (1, 2, 1, F)
            new = [(0.9 * s + 0.01 * float(x.mean())).astype(np.float32) for s in state]
            return [mask.astype(np.float32), res.astype(np.float32), *new]

    return Network()


@pytest.mark.parametrize("preset", ["qcgan-35k", "qcgan-0.89m-causal"])
def test_numpy_host_dsp_from_its_spec_streams_bit_identically(preset):
    """The spec the cache records (JSON round trip) rebuilds a host DSP that streams exactly
    as the model's own (SplitRuntime with StepModule.host_dsp()) around the same network."""
    import torch

    from qsa.apps.live.warm import HostSplitRuntime, spec_of
    from qsa.export.split import SplitRuntime
    from qsa.models.registry import build_model, preset_config

    torch.manual_seed(0)
    step = build_model(preset_config(preset)).eval().step_module()
    theirs = SplitRuntime(_network_runtime(step), step)
    spec = json.loads(json.dumps(spec_of(theirs)))
    assert spec["n_fft"] == step.model.config.n_fft and spec["hop"] == step.hop
    ours = HostSplitRuntime(_network_runtime(step), spec)
    assert ours.state_shapes == theirs.state_shapes and ours.hop == theirs.hop
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(SR)).astype(np.float32)
    x[4000:6000] = 0.0  # digital silence: the eps floor
    y = ours.run_utterance(x)
    np.testing.assert_array_equal(y, theirs.run_utterance(x))
    assert np.abs(y).max() > 1e-3


def test_spec_of_refuses_a_dsp_it_does_not_reproduce():
    """Another DSP (here: the model's with a different compression exponent than the one it
    reports) is not recorded: that entry keeps loading through torch."""
    import torch

    from qsa.apps.live.warm import spec_of
    from qsa.export.split import SplitRuntime
    from qsa.models.registry import build_model, preset_config

    torch.manual_seed(0)
    step = build_model(preset_config("qcgan-35k")).eval().step_module()
    rt = SplitRuntime(_network_runtime(step), step)
    assert spec_of(rt) is not None
    assert spec_of(_network_runtime(step)) is None  # no host DSP at all

    class Other(type(rt.host_dsp)):
        pass

    other = Other.from_model(step.model)
    other.window = other.window * np.float32(0.5)
    rt.host_dsp = other
    assert spec_of(rt) is None  # another class name: not the DSP this one reproduces
    rt.host_dsp = step.host_dsp()
    rt.host_dsp.c = rt.host_dsp.c + 1e-3  # reproducible: the spec records the number
    assert spec_of(rt)["compress"] == pytest.approx(step.model.config.compress + 1e-3)


INT8_RUNS = [("auto", "litert"), ("tflm", "tflm")]  # --runtime, what it runs


@pytest.fixture(scope="module")
def int8_cache(tmp_path_factory):
    """qcgan-35k int8 exported for LiteRT (through --runtime auto) and TFLM, in this process:
    the cache and what each cold processor streams."""
    xdg = tmp_path_factory.mktemp("xdg8")
    x = np.random.default_rng(0).standard_normal(SR).astype(np.float32) * 0.1
    out = {}
    for runtime, kind in INT8_RUNS:
        p = load_processor("qcgan-35k", runtime, "int8", cache_dir=xdg / "qsa" / "live")
        assert p.name == f"qcgan-35k ({kind} int8)"
        out[runtime] = p.process_offline(x)
    return xdg, out


@pytest.mark.slow
@pytest.mark.parametrize("runtime,kind", INT8_RUNS)
def test_int8_warm_start_imports_no_torch(int8_cache, runtime, kind):
    """`--precision int8` on a warm cache: the network artifact plus the numpy host DSP the
    entry records, no torch, and the same output as the cold start (torch's host DSP)."""
    xdg, cold_y = int8_cache
    entries = [e for e in (xdg / "qsa" / "live").iterdir() if e.name.endswith(f"{kind}-int8")]
    assert len(entries) == 1
    info = json.loads((entries[0] / "live.json").read_text())
    assert info["host_dsp"]["n_fft"] == 256 and info["host_dsp"]["hop"] == 128
    warm = load_in_subprocess("qcgan-35k", runtime, xdg, "int8")
    assert warm["heavy"] == set(), warm["heavy"]
    assert not warm["exporters"] and "qsa" in warm["modules"]
    assert warm["name"] == f"qcgan-35k ({kind} int8)" and warm["latency"] == 256
    np.testing.assert_array_equal(warm["y"], cold_y[runtime])
    assert len(list((xdg / "qsa" / "live").iterdir())) == 2  # nothing exported again


# -- the default runtime ----------------------------------------------------------------------


def test_auto_prefers_litert_then_onnx_then_torch(monkeypatch):
    from qsa.apps.live import processors

    assert processors.auto_runtimes("qcgan-35k") == ["litert", "onnx", "torch"]
    assert processors.auto_runtimes(REFERENCE_NAME) == ["torch"]  # the closed-form check
    monkeypatch.setitem(processors._RUNTIME_LIBRARY, "litert", "no_such_module_qsa")
    assert processors.auto_runtimes("qcgan-35k") == ["onnx", "torch"]
    monkeypatch.setitem(processors._RUNTIME_LIBRARY, "onnx", "no_such_module_qsa")
    assert processors.auto_runtimes("qcgan-35k") == ["torch"]
    p = load_processor(REFERENCE_NAME, "auto")  # torch: no export, no cache
    assert p.name == REFERENCE_NAME and type(p).__name__ == "TorchStepProcessor"


def test_live_defaults_to_auto():
    r = subprocess.run([sys.executable, "-m", "qsa.cli", "live", "--help"], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "{auto," in r.stdout and "auto (default)" in " ".join(r.stdout.split())
