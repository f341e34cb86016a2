"""Export stage chains ending in run-and-compare on the real runtime, per target/precision.

The model is the small streaming quaternion toy (qsa.export.toy); qcgan exports run in
bench/export_qcgan.py. fp32 artifacts must match the PyTorch step within 1e-4 RMS on every
step output; int8 artifacts must stream a held-out noisy utterance at >= INT8_SQNR_FLOOR_DB
SQNR against PyTorch fp32 (the exporter itself raises otherwise).
"""

import json
import logging
import re

import numpy as np
import pytest
import torch

from qsa.export import (
    FP32_STEP_RMS_TOL,
    INT8_SQNR_FLOOR_DB,
    ExportError,
    check_budget,
    export_model,
    load_runtime,
)
from qsa.export.calib import synthetic_speech
from qsa.export.tflm import arena_works, float_ops, tflite_ops
from qsa.export.toy import ToyStep, ToyStreamingQNet

# torch's structured trace logs (whole graphs, at DEBUG) are serialised whenever a handler
# would see them; pytest's log capture is one, and it makes every export ~10x slower.
logging.getLogger("torch.__trace").propagate = False

CALIB = [synthetic_speech(0.6, seed=k) for k in range(2)]
VERIFY = synthetic_speech(0.5, seed=99)


def toy_step():
    torch.manual_seed(0)
    return ToyStep(ToyStreamingQNet().eval())


_CACHE: dict = {}


def exported(tmp_path_factory, target, precision):
    key = (target, precision)
    if key not in _CACHE:
        out = tmp_path_factory.mktemp(f"{target}-{precision}")
        _CACHE[key] = export_model(
            toy_step(),
            target,
            precision,
            out,
            calib=CALIB,
            verify_wave=VERIFY,
            model_name="toy",
        )
    return _CACHE[key]


FAST = [("onnx", "fp32"), ("litert", "fp32"), ("executorch", "fp32"), ("onnx", "int8")]
SLOW = [("litert", "int8"), ("tflm", "int8"), ("tflm", "fp32"), ("executorch", "int8")]


def _check(result, target, precision):
    r = result.report
    assert result.artifact.is_file() and r["verified"]
    assert json.loads(result.report_path.read_text()) == r
    for key in (
        "model",
        "target",
        "precision",
        "bytes",
        "params",
        "ops",
        "memory",
        "mac_per_s",
        "latency_per_hop",
        "parity",
    ):
        assert key in r
    assert r["bytes"] == result.artifact.stat().st_size
    # an independent re-run in the real runtime, compared with PyTorch here
    rt = load_runtime(
        target,
        result.artifact,
        **({"arena_size": r["memory"]["arena_bytes"]} if target == "tflm" else {}),
    )
    step = toy_step()
    frames = torch.from_numpy(VERIFY[: 10 * step.hop]).reshape(10, 1, step.hop)
    state = tuple(step.init_state(1))
    errs = []
    with torch.no_grad():
        for f in frames:
            want = step(f, *state)
            got, got_state = rt.step(f.numpy(), [s.numpy() for s in state])
            errs += [
                float(np.sqrt(np.mean((w.numpy() - g) ** 2)))
                for w, g in zip(want, [got, *got_state], strict=True)
            ]
            state = tuple(want[1:])
    if precision == "fp32":
        assert max(errs) <= FP32_STEP_RMS_TOL
    else:
        assert r["parity"]["stream_sqnr_db_vs_torch_fp32"] >= INT8_SQNR_FLOOR_DB


@pytest.mark.parametrize("target, precision", FAST)
def test_export_and_compare(tmp_path_factory, target, precision):
    _check(exported(tmp_path_factory, target, precision), target, precision)


@pytest.mark.slow
@pytest.mark.parametrize("target, precision", SLOW)
def test_export_and_compare_slow(tmp_path_factory, target, precision):
    _check(exported(tmp_path_factory, target, precision), target, precision)


def test_streaming_runtime_matches_offline(tmp_path_factory):
    """The exported step, streamed over a whole utterance, equals the offline forward."""
    result = exported(tmp_path_factory, "onnx", "fp32")
    model = toy_step().model
    with torch.no_grad():
        offline = model(torch.from_numpy(VERIFY).reshape(1, -1)).numpy().reshape(-1)
    streamed = load_runtime("onnx", result.artifact).run_utterance(VERIFY)
    assert streamed.shape == offline.shape
    assert np.sqrt(np.mean((streamed - offline) ** 2)) <= FP32_STEP_RMS_TOL


@pytest.mark.slow
def test_tflm_int8_is_integer_only_and_arena_is_minimal(tmp_path_factory):
    result = exported(tmp_path_factory, "tflm", "int8")
    ops = tflite_ops(result.artifact)
    assert not float_ops(ops), float_ops(ops)
    assert {o["op"] for o in ops} >= {"FULLY_CONNECTED", "CONV_2D"}
    arena = result.report["memory"]["arena_bytes"]
    assert arena_works(result.artifact, arena)
    assert not arena_works(result.artifact, arena - 1024)
    # where the arena goes, from TFLM's recording allocator: one node per op, one eval tensor
    # per tensor of the file, and the parts add up to the measured arena
    b = result.report["memory"]["breakdown"]
    from ai_edge_litert import schema_py_generated as schema

    sg = schema.ModelT.InitFromPackedBuf(result.artifact.read_bytes(), 0).subgraphs[0]
    assert b["nodes"]["count"] == len(sg.operators) == len(ops)
    assert b["eval_tensors"]["count"] == len(sg.tensors)
    assert b["head_bytes"] + b["tail_bytes"] == b["recorded_bytes"]
    assert b["recorded_bytes"] + b["init_planning_bytes"] == arena
    assert b["tail_bytes"] >= sum(b[k]["bytes"] for k in ("nodes", "eval_tensors", "op_data"))
    # the packed quaternion weights survive: int8 file well under the dense int8 size
    params = result.report["params"]
    assert result.report["bytes"] <= 1.25 * params + 24 * 1024
    # firmware files: 16-byte aligned C array of exactly the model bytes, op resolver
    cc = (result.artifact.parent / "model_data.cc").read_text()
    assert "alignas(16) const unsigned char g_model_data[]" in cc
    n = len(re.findall(r"0x[0-9a-f]{2}", cc))
    assert n == result.artifact.stat().st_size
    h = (result.artifact.parent / "model_data.h").read_text()
    assert f"kTensorArenaSize = {arena}" in h
    ops_h = (result.artifact.parent / "model_ops.h").read_text()
    for name in ("AddFullyConnected", "AddConv2D", "AddReshape"):
        assert f"resolver.{name}()" in ops_h


def test_budget_check_fails_clearly():
    report = {
        "bytes": 3 << 20,
        "precision": "int8",
        "mac_per_s": 10**9,
        "memory": {"arena_bytes": 300 << 10},
        "io": {"state_shapes": [[1, 32, 2]]},
    }
    v = check_budget(report, "cortex-m4")
    assert not v["fits"]
    text = " ".join(v["violations"])
    assert "flash" in text and "RAM" in text and "load" in text
    assert check_budget(
        {**report, "bytes": 10_000, "mac_per_s": 10**6, "memory": {"arena_bytes": 20_000}},
        "cortex-m7",
    )["fits"]
    with pytest.raises(ExportError, match="unknown profile"):
        check_budget(report, "cortex-m99")


def test_export_profile_overrun_raises(tmp_path, monkeypatch):
    """A real export against a (test-sized) profile it cannot fit fails, naming the budget."""
    from qsa.export import profiles

    tiny = profiles.TargetProfile("tiny-mcu", "test", 1024, 1024, 1e6, {"fp32": 1.0, "int8": 1.0})
    monkeypatch.setitem(profiles.PROFILES, "tiny-mcu", tiny)
    with pytest.raises(ExportError, match="does not fit profile 'tiny-mcu'.*flash"):
        export_model(
            toy_step(),
            "onnx",
            "fp32",
            tmp_path,
            calib=CALIB,
            verify_wave=VERIFY,
            profile="tiny-mcu",
            model_name="toy",
        )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["profile"]["fits"] is False and report["verified"] is True


def test_existing_artifact_needs_force(tmp_path_factory):
    result = exported(tmp_path_factory, "onnx", "fp32")
    with pytest.raises(ExportError, match="--force"):
        export_model(
            toy_step(), "onnx", "fp32", result.artifact.parent, calib=CALIB, verify_wave=VERIFY
        )


def test_reexport_never_leaves_a_stale_report(tmp_path):
    """--force into a folder with a verified export: the old report.json (and its sha256) goes
    before anything else, so an export stopped part-way leaves no report at all, and a
    complete one leaves a report whose sha256 is the new artifact's."""
    from qsa.export.validate import sha256_file

    def run(seed, stages=None):
        torch.manual_seed(seed)
        step = ToyStep(ToyStreamingQNet().eval())
        return export_model(step, "onnx", "fp32", tmp_path, calib=CALIB, verify_wave=VERIFY,
                            model_name="toy", force=True, stages=stages)  # fmt: skip

    first = run(0)
    old_sha = json.loads(first.report_path.read_text())["sha256"]
    assert old_sha == sha256_file(first.artifact)
    run(1, stages=("prepare", "export", "quantize", "lower", "serialize"))  # no verify/measure
    assert not (tmp_path / "report.json").exists()
    assert sha256_file(first.artifact) != old_sha  # the new weights were written
    done = run(1)
    new_sha = json.loads(done.report_path.read_text())["sha256"]
    assert new_sha == sha256_file(done.artifact) != old_sha


def test_onnx_int8_fused_kernels_equal_the_qdq_graph(tmp_path_factory):
    """onnxruntime fuses QuantizeLinear/DequantizeLinear pairs into int8 Conv/Gemm kernels
    at session creation; on x86 without VNNI those saturate 16-bit pair sums unless the
    weights are 7-bit (reduce_range). The fused session must compute what the QDQ graph
    says, which the unoptimised session evaluates literally."""
    import onnxruntime as ort

    result = exported(tmp_path_factory, "onnx", "int8")
    step = toy_step()
    state = [s.numpy() for s in step.init_state(1)]
    frame = VERIFY[: step.hop].reshape(1, step.hop).astype(np.float32)
    outs = {}
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sess = ort.InferenceSession(str(result.artifact), so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        outs[level] = sess.run(None, dict(zip(names, [frame, *state], strict=True)))
    for ref, fused in zip(outs["ORT_DISABLE_ALL"], outs["ORT_ENABLE_ALL"], strict=True):
        scale = float(np.abs(ref).max()) or 1.0
        # a saturating kernel was 20-400 % of the output scale off
        assert float(np.abs(fused - ref).max()) <= 1e-2 * scale


def test_xnnpack_int8_layout_ops_keep_their_input_scale():
    """Every layout op of the int8 ExecuTorch graph (view/unsqueeze/transpose/...) is
    observed by its producer's observer, so its int8 input and output carry one scale.

    XNNPACK refuses a quantised reshape whose input and output scales differ ("Failed to
    create squeeze node ... xnn_status_invalid_parameter": the .pte does not load). With the
    stock quantizer the toy's ``add -> unsqueeze -> cat`` had two observers that saw nearly
    the same values: equal to the last bit on some CPUs, not on AVX-512 EPYC, so the same
    export loaded on one host and not on another. Checked structurally (observer identity),
    which does not depend on the CPU's float rounding."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qsa.export.quantizers import XNNPACK_LAYOUT_OPS, xnnpack_quantizer

    step = toy_step()
    example = (torch.zeros(1, step.hop), *step.init_state(1))
    pm = prepare_pt2e(torch.export.export(step, example).module(), xnnpack_quantizer())

    def observer(n):
        return pm.get_submodule(n.target) if n.op == "call_module" else None

    checked = []
    for n in pm.graph.nodes:
        if n.op != "call_function" or n.target not in XNNPACK_LAYOUT_OPS:
            continue
        obs_in = observer(n.args[0])
        outs = [o for o in map(observer, n.users) if o is not None]
        if obs_in is None or not outs:
            continue
        assert all(o is obs_in for o in outs), f"{n.name} ({n.target}) requantises"
        checked.append(n.target)
    assert torch.ops.aten.unsqueeze.default in checked, checked


def test_validator_refuses_an_int8_reshape_that_requantises():
    """The artifact check names the form XNNPACK refuses (before any runtime sees it, on
    every CPU): the toy's pre-fix .pte gave (0.00811285711824894, 21) -> (0.008112858049571514,
    21) at its unsqueeze."""
    from qsa.export.validate import _Bad, _check_reshape_quant

    same = {"__type__": "PerTensorQuant", "scale": 0.0081128571, "zero_point": 21}
    _check_reshape_quant(same, dict(same))
    _check_reshape_quant(None, same)  # a float reshape
    with pytest.raises(_Bad, match="XNNPACK refuses"):
        _check_reshape_quant(same, {**same, "scale": 0.0081128580})
    with pytest.raises(_Bad, match="XNNPACK refuses"):
        _check_reshape_quant(same, {**same, "zero_point": 20})
