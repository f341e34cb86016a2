"""qcgan-35k (the shipped weights) to a full-integer TFLite-Micro artifact, run for real.

One export (LiteRT PT2E conversion + the TFLM checks), then the same .tflite in both
interpreters: TFLM (reference kernels, the microcontroller target) and LiteRT. The artifact
holds the network of the DSP / network split (qsa.export.split): every op int8, the STFT and
power-law compression on the host DSP around it.
"""

import json
import logging

import numpy as np
import pytest
import torch

from qsa.export import INT8_SQNR_FLOOR_DB, load_runtime, sqnr_db
from qsa.export.calib import verification_utterance
from qsa.export.split import SplitRuntime
from qsa.export.step import stream_torch
from qsa.export.tflm import float_ops, tflite_ops

logging.getLogger("torch.__trace").propagate = False

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model():
    import qsa

    return qsa.load("qcgan-35k").eval()


@pytest.fixture(scope="module")
def tflm_exporter(model, tmp_path_factory):
    """The exporter after a full run (what export_model does), kept for its converter output."""
    from qsa.export.exporters import EXPORTERS

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("qcgan35k-tflm-int8")
    exp = EXPORTERS["tflm"](model, "int8", out, model_name="qcgan-35k")
    exp.result = exp.run()
    return exp


@pytest.fixture(scope="module")
def tflm_int8(tflm_exporter):
    return tflm_exporter.result


@pytest.fixture(scope="module")
def reference(model):
    wave = verification_utterance()
    ref, _ = stream_torch(model.step_module(), torch.from_numpy(np.asarray(wave, np.float32)))
    return wave, ref.numpy()


def test_tflm_int8_is_integer_only_and_verified(tflm_int8):
    r = tflm_int8.report
    assert r["verified"] and r["parity"]["stream_sqnr_db_vs_torch_fp32"] >= INT8_SQNR_FLOOR_DB
    ops = tflite_ops(tflm_int8.artifact)
    assert float_ops(ops) == []
    assert "DEQUANTIZE" not in r["ops"]
    split = r["io"]["split"]
    assert split["network_input_shape"] == [1, 4, 1, 129] and split["network_outputs"] == 2
    assert r["model_config"]["kind"] == "qcgan"
    assert 0 < r["memory"]["arena_bytes"] <= 512 * 1024  # measured; fits a cortex-m7 SRAM
    names = {p.name for p in tflm_int8.files}
    assert {"model.tflite", "model_data.cc", "model_data.h"} <= names
    assert json.loads(tflm_int8.report_path.read_text())["verified"]


def test_saved_artifact_streams_in_tflm_and_litert(tflm_int8, reference):
    """load_runtime on the saved file rebuilds the host DSP from report.json; both
    interpreters stream the utterance at the int8 floor and agree with each other."""
    wave, ref = reference
    outs, vs_fp32 = {}, {}
    for kind in ("tflm", "litert"):
        rt = load_runtime(kind, tflm_int8.artifact)
        assert isinstance(rt, SplitRuntime) and rt.hop == 128
        outs[kind] = rt.run_utterance(wave)
        vs_fp32[kind] = sqnr_db(ref, outs[kind])
        assert vs_fp32[kind] >= INT8_SQNR_FLOOR_DB, kind
    # same integer graph, two kernel sets (LiteRT's optimised int8 kernels, TFLM's reference
    # ones) that round some ops differently, the layer norms' two-axis MEAN most: the two
    # outputs are no further apart than two independent int8 roundings of the graph would be
    # (each error at its SQNR from fp32: apart by at most 3 dB less), e.g. 12-03 morning
    # weights 28-30 dB from fp32 and 29.6 dB apart, 12-03 evening weights 25.1 and 24.8 dB
    apart = sqnr_db(outs["litert"], outs["tflm"])
    assert apart >= min(vs_fp32.values()) - 3.1, (apart, vs_fp32)
    raw = load_runtime("tflm", tflm_int8.artifact, host_dsp=False)
    assert not isinstance(raw, SplitRuntime)


def _run_steps(kind: str, data: bytes, steps: int = 4) -> list[np.ndarray]:
    """Outputs of ``steps`` invocations on fixed random int8 inputs."""
    rng = np.random.default_rng(0)
    outs = []
    if kind == "tflm":
        from tflite_micro.python.tflite_micro import runtime

        it = runtime.Interpreter.from_bytes(data, arena_size=512 * 1024)
        n_in = len(_graph_inputs(data))
        for _ in range(steps):
            for k in range(n_in):
                d = it.get_input_details(k)
                it.set_input(rng.integers(-90, 90, tuple(d["shape"])).astype(d["dtype"]), k)
            it.invoke()
            outs += [it.get_output(j).copy() for j in range(len(_graph_outputs(data)))]
        return outs
    from ai_edge_litert.interpreter import Interpreter

    from qsa.export.tflite_compact import for_litert

    it = Interpreter(model_content=for_litert(data))  # TFLM's own file forms, widened
    it.allocate_tensors()
    for _ in range(steps):
        for d in it.get_input_details():
            x = rng.integers(-90, 90, tuple(d["shape"])).astype(d["dtype"])
            it.set_tensor(d["index"], x)
        it.invoke()
        outs += [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
    return outs


def _graph_inputs(data: bytes):
    from ai_edge_litert import schema_py_generated as S

    return S.Model.GetRootAs(data, 0).Subgraphs(0).InputsAsNumpy()


def _graph_outputs(data: bytes):
    from ai_edge_litert import schema_py_generated as S

    return S.Model.GetRootAs(data, 0).Subgraphs(0).OutputsAsNumpy()


def test_compaction_is_lossless_and_aligned(tflm_int8):
    """The de-duplicating writer (qsa.export.tflite_compact) against a plain re-serialisation
    of the same graph: a smaller file, 16-byte aligned weights, idempotent, and bit-identical
    outputs in TFLM and LiteRT."""
    from ai_edge_litert import schema_py_generated as S
    from ai_edge_litert.tools import flatbuffer_utils as fbu

    from qsa.export.tflite_compact import compact_tflite

    data = tflm_int8.artifact.read_bytes()
    plain = bytes(fbu.convert_object_to_bytearray(fbu.read_model_from_bytearray(data)))
    again, info = compact_tflite(plain)
    assert len(again) < 0.9 * len(plain), (len(again), len(plain))
    # the artifact is already folded: nothing more to fold, the same graph
    assert info["before"]["ops"] == info["after"]["ops"] == sum(tflm_int8.report["ops"].values())
    assert info["folded"]["ops"] == info["folded"]["tensors"] == 0
    assert len(compact_tflite(again)[0]) == len(again)  # idempotent
    c = tflm_int8.report["compaction"]
    assert c["after"]["bytes"] == tflm_int8.report["bytes"] < c["before"]["bytes"]
    m = S.Model.GetRootAs(again, 0)
    # one shared empty buffer for every activation, one buffer per distinct constant
    with_data = sum(m.Buffers(i).DataLength() > 0 for i in range(m.BuffersLength()))
    assert m.BuffersLength() == with_data + 1, (m.BuffersLength(), with_data)
    base = np.frombuffer(again, np.uint8).ctypes.data
    for i in range(m.BuffersLength()):
        b = m.Buffers(i)
        if b.DataLength() >= 16:
            assert (b.DataAsNumpy().ctypes.data - base) % 16 == 0, f"buffer {i} misaligned"
    for kind in ("tflm", "litert"):
        want, got = _run_steps(kind, plain), _run_steps(kind, again)
        assert len(want) == len(got) > 0
        for w, g in zip(want, got, strict=True):
            assert np.array_equal(w, g), kind


def test_reshape_folding_is_bit_exact_and_smaller(tflm_exporter, tmp_path):
    """fold_reshapes on the converter's own output: shape inputs become options, reshapes
    into FULLY_CONNECTED are bypassed, reshapes sink through elementwise runs, dead tensors
    and buffers go; every output of TFLM and LiteRT stays bit-identical, and the file and the
    measured arena shrink."""
    from ai_edge_litert import schema_py_generated as S

    from qsa.export.tflite_compact import compact_tflite
    from qsa.export.tflm import bisect_arena

    raw = tmp_path / "raw.tflite"
    tflm_exporter.converted.export(str(raw))
    plain, _ = compact_tflite(raw.read_bytes(), fold=False)
    folded, info = compact_tflite(raw.read_bytes(), fold=True)
    f = info["folded"]
    assert f["shape_inputs"] > 0 and f["bypassed"] > 0 and f["sunk"] > 0
    assert f["unit_reshapes"] > 0  # leading-1 reshapes into matmuls and residual adds
    assert f["ops"] > f["bypassed"]  # sunk runs drop their entry (and identity exit) reshapes
    assert info["after"]["ops"] == info["before"]["ops"] - f["ops"] - f["unit_reshapes"]
    assert info["after"]["tensors"] == info["before"]["tensors"] - f["tensors"] - f["unit_reshapes"]
    assert len(folded) < len(plain)
    m = S.Model.GetRootAs(folded, 0)
    g = m.Subgraphs(0)
    for i in range(g.OperatorsLength()):  # every reshape left reads its shape from options
        op = g.Operators(i)
        if m.OperatorCodes(op.OpcodeIndex()).BuiltinCode() == S.BuiltinOperator.RESHAPE:
            assert op.InputsLength() == 1
    for kind in ("tflm", "litert"):
        want, got = _run_steps(kind, plain), _run_steps(kind, folded)
        assert len(want) == len(got) > 0
        for w, g in zip(want, got, strict=True):
            assert np.array_equal(w, g), kind
    (tmp_path / "plain.tflite").write_bytes(plain)
    (tmp_path / "folded.tflite").write_bytes(folded)
    assert (
        bisect_arena(tmp_path / "folded.tflite")["arena_bytes"]
        < bisect_arena(tmp_path / "plain.tflite")["arena_bytes"]
    )


def test_mix_as_batch_matmul_is_bit_exact_on_tflm(tflm_exporter, tflm_int8, tmp_path):
    """mix_to_batch_matmul on the converter's own output: every quaternion layer's TRANSPOSE +
    FULLY_CONNECTED(const mixing, x^T) becomes one BATCH_MATMUL(mixing, x) (and the attention's
    FULLY_CONNECTED(P, V^T) one BATCH_MATMUL(P, V)); TFLite-Micro gives
    the same bytes. The exported artifact is the rewritten one, so LiteRT (whose XNNPACK
    FULLY_CONNECTED rounds differently from its BATCH_MATMUL) is held to the int8 floor by
    test_saved_artifact_streams_in_tflm_and_litert."""
    from qsa.export.tflite_compact import compact_tflite

    raw = tmp_path / "raw.tflite"
    tflm_exporter.converted.export(str(raw))
    flags = {"fuse": True, "micro": True, "scalar_muls": True}  # what the exporter runs
    plain, p_info = compact_tflite(raw.read_bytes(), **flags)
    mixed, m_info = compact_tflite(raw.read_bytes(), mix_bmm=True, **flags)
    n = m_info["mix_bmm"]
    # the time Conformer's quaternion layers whose input is not already a shared mix (12)
    # and its attention's weights x values (1); the channels-last step's bin-major mixes and
    # the frequency attention are BATCH_MATMULs as the converter writes them
    assert n == 13
    # (the values' leading-1 reshape before the transpose then goes too)
    more = m_info["folded"]["unit_reshapes"] - p_info["folded"]["unit_reshapes"]
    assert m_info["after"]["ops"] == p_info["after"]["ops"] - n - more
    # (<=: a transpose's permutation constant goes with the last transpose that read it)
    assert m_info["after"]["tensors"] <= p_info["after"]["tensors"] - n - more
    assert len(mixed) < len(plain)
    assert mixed == tflm_int8.artifact.read_bytes()
    counts = {}
    for o in tflite_ops_bytes(mixed, tmp_path):
        counts[o["op"]] = counts.get(o["op"], 0) + 1
    assert counts["BATCH_MATMUL"] == 17 + n  # + the bin-major mixes the converter writes
    want, got = _run_steps("tflm", plain), _run_steps("tflm", mixed)
    assert len(want) == len(got) > 0
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w, g)


def test_channels_last_step_has_no_moves_around_its_convs(tflm_int8):
    """The artifact is the bin-major network step (qsa.export.channels_last): no TRANSPOSE
    writes a CONV_2D's input or reads its output (the NCHW form had one each side of all 9),
    and the 11 left are the network input and output, the band projections' two, the
    time conv module's one and the 6 upsampling interleaves."""
    from ai_edge_litert import schema_py_generated as S

    m = S.ModelT.InitFromPackedBuf(bytearray(tflm_int8.artifact.read_bytes()), 0)
    g = m.subgraphs[0]
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}

    def kind(op):
        c = m.operatorCodes[op.opcodeIndex]
        return names[max(c.builtinCode, c.deprecatedBuiltinCode)]

    writer = {int(t): op for op in g.operators for t in op.outputs}
    readers = {}
    for op in g.operators:
        for t in op.inputs:
            readers.setdefault(int(t), []).append(op)
    convs = [op for op in g.operators if kind(op) == "CONV_2D"]
    assert len(convs) == 9  # 3 encoder stages, 3 upsampling stages per decoder
    for op in convs:
        assert kind(writer[int(op.inputs[0])]) != "TRANSPOSE"
        assert all(kind(r) != "TRANSPOSE" for r in readers[int(op.outputs[0])])
    assert sum(kind(op) == "TRANSPOSE" for op in g.operators) == 11


def tflite_ops_bytes(data: bytes, tmp_path) -> list[dict]:
    path = tmp_path / "ops.tflite"
    path.write_bytes(data)
    return tflite_ops(path)


def _stream_variants(tflm_int8, tmp_path, wave, variants: dict[str, bytes]) -> dict:
    """Each variant of the artifact in its own folder (report.json with its bytes and hash),
    streamed over ``wave`` in both interpreters: {(name, kind): output}."""
    import hashlib

    outs = {}
    for name, data in variants.items():
        d = tmp_path / name
        d.mkdir()
        (d / "model.tflite").write_bytes(data)
        report = json.loads(tflm_int8.report_path.read_text())
        report.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        (d / "report.json").write_text(json.dumps(report))
        for kind in ("tflm", "litert"):
            outs[name, kind] = load_runtime(kind, d / "model.tflite").run_utterance(wave)
    return outs


def _assert_as_close_as_two_roundings(ref, outs, plain: str, changed: str) -> None:
    """``changed`` at the int8 floor from fp32 and as close to ``plain`` as two independent
    int8 roundings of the graph would be, in both interpreters."""
    for kind in ("tflm", "litert"):
        assert sqnr_db(ref, outs[changed, kind]) >= INT8_SQNR_FLOOR_DB, kind
        apart = sqnr_db(outs[plain, kind], outs[changed, kind])
        assert apart >= sqnr_db(ref, outs[plain, kind]) - 3.1, (kind, apart)


def test_prelu_fusion_keeps_the_numbers(tflm_exporter, tflm_int8, reference, tmp_path):
    """fuse_prelu on the converter's own output: each four-op PReLU becomes one PRELU op
    (three ops and tensors fewer each); both interpreters stream the utterance from the fused
    file as close to the unfused one as two int8 roundings allow, and at the int8 floor from
    fp32. The exported artifact is the fused one."""

    from qsa.export.tflite_compact import compact_tflite

    wave, ref = reference
    raw = tmp_path / "raw.tflite"
    tflm_exporter.converted.export(str(raw))
    flags = {"mix_bmm": True, "micro": True, "scalar_muls": True}  # what the exporter runs
    plain, p_info = compact_tflite(raw.read_bytes(), fuse=False, **flags)
    fused, f_info = compact_tflite(raw.read_bytes(), fuse=True, **flags)
    n = f_info["fused_prelu"]
    assert n == 7  # 3 encoder + 2 x 2 decoder PReLUs
    assert f_info["after"]["ops"] == p_info["after"]["ops"] - 3 * n
    assert f_info["after"]["tensors"] <= p_info["after"]["tensors"] - 3 * n
    assert fused == tflm_int8.artifact.read_bytes()
    outs = _stream_variants(tflm_int8, tmp_path, wave, {"plain": plain, "fused": fused})
    for name in ("plain", "fused"):
        counts = {}
        for o in tflite_ops(tmp_path / name / "model.tflite"):
            counts[o["op"]] = counts.get(o["op"], 0) + 1
        assert counts.get("PRELU", 0) == (n if name == "fused" else 0)
    _assert_as_close_as_two_roundings(ref, outs, "plain", "fused")


def test_scalar_mul_fold_keeps_the_numbers(tflm_exporter, tflm_int8, reference, tmp_path):
    """fold_scalar_muls and fold_negligible_adds on the converter's own output: the
    Conformers' 0.5 residual scales and the attention's 1/sqrt(d) (5 MULs) move into the
    scales of the weights before them, and the 12 layer norms' epsilon ADDs (below half a
    step of their output) become their MEAN's own requantisation; both interpreters stream
    the utterance from the folded file as close to the unfolded one as two int8 roundings
    allow, and at the int8 floor from fp32. The artifact is the folded file."""

    from qsa.export.tflite_compact import compact_tflite

    wave, ref = reference
    raw = tmp_path / "raw.tflite"
    tflm_exporter.converted.export(str(raw))
    flags = {"fuse": True, "mix_bmm": True, "micro": True}
    plain, p_info = compact_tflite(raw.read_bytes(), **flags)
    folded, f_info = compact_tflite(raw.read_bytes(), scalar_muls=True, **flags)
    assert f_info["scalar_muls"] == 5 and f_info["negligible_adds"] == 12
    # (a reshape a folded MUL stood behind may then be a leading-1 one the fold bypasses)
    more = f_info["folded"]["unit_reshapes"] - p_info["folded"]["unit_reshapes"]
    assert f_info["after"]["ops"] == p_info["after"]["ops"] - 5 - 12 - more
    assert len(folded) < len(plain)
    assert folded == tflm_int8.artifact.read_bytes()
    outs = _stream_variants(tflm_int8, tmp_path, wave, {"plain": plain, "folded": folded})
    _assert_as_close_as_two_roundings(ref, outs, "plain", "folded")


def test_arena_probes_never_crash(tflm_int8):
    """Too-small arenas fail cleanly: TFLM's allocator can SIGSEGV on some of them (seen at
    64 KB for this model), so each probe runs in a forked child and a crash counts as a
    failure, never taking this process down."""
    from qsa.export.tflm import arena_works

    arena = tflm_int8.report["memory"]["arena_bytes"]
    sizes = [n for n in (4096, 32768, 65536, 65536 + 4096, 98304, arena - 4096, arena - 16)
             if n < arena]
    assert len(sizes) >= 6
    assert [arena_works(tflm_int8.artifact, n) for n in sizes] == [False] * len(sizes)
    assert arena_works(tflm_int8.artifact, arena)


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_a_minute_streams_with_flat_memory_and_exact_state(tflm_int8, kind):
    """The CI-sized long run (bench/long_run.py does an hour): RSS flat after the first 10 s
    chunk, and a fresh runtime fed the same audio in 10 s chunks, state carried across,
    gives the same bytes as the uninterrupted stream."""
    from qsa.export.longrun import long_run

    r = long_run(lambda: load_runtime(kind, tflm_int8.artifact), seconds=60, chunk_s=10)
    assert r["chunks"] == 6 and r["hops"] == 6 * (160000 // 128)
    assert r["identical"], r["mismatched_chunks"]
    assert r["rss_growth_bytes"] < 5 * 2**20, r["rss_bytes"]


def test_microcontroller_arena_bound(tflm_int8):
    """The deployment issue's arena bound: TFLM runs qcgan-35k int8 in <= 128 KB."""
    assert tflm_int8.report["memory"]["arena_bytes"] <= 128 * 1024


def test_microcontroller_file_bound(tflm_int8):
    """The deployment issue's packed-size bound: the int8 TFLM file of qcgan-35k is at most
    1.25 B per parameter + 24 KB (the components stored once, and little graph around them),
    and the report says so."""
    r = tflm_int8.report
    assert r["packed_bound_bytes"] == int(1.25 * r["params"] + 24 * 1024)
    assert r["bytes"] == tflm_int8.artifact.stat().st_size <= r["packed_bound_bytes"]
