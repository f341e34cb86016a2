"""qsa.export.tflite_compact on small hand-built graphs (the qcgan-35k artifact tests are in
test_export_qcgan_int8.py): what drop_default_options keeps and drops, run in both
interpreters."""

import numpy as np
import pytest

from qsa.export.tflite_compact import _pack_dedup, _schema, compact_tflite, drop_default_options


def _add_model(dtype: str, options) -> bytes:
    """One ADD of two (1, 4) inputs, written with the schema's object API."""
    S = _schema()
    ttype = {"float32": S.TensorType.FLOAT32, "int16": S.TensorType.INT16}[dtype]
    m = S.ModelT()
    m.version = 3
    oc = S.OperatorCodeT()
    oc.builtinCode = oc.deprecatedBuiltinCode = S.BuiltinOperator.ADD
    oc.version = 1
    m.operatorCodes = [oc]
    m.buffers = [S.BufferT()]
    sg = S.SubGraphT()
    sg.tensors = []
    for _ in range(3):
        t = S.TensorT()
        t.shape = np.array([1, 4], np.int32)
        t.type = ttype
        t.buffer = 0
        if dtype == "int16":
            q = S.QuantizationParametersT()
            q.scale = np.array([0.01], np.float32)
            q.zeroPoint = np.array([0], np.int64)
            t.quantization = q
        sg.tensors.append(t)
    op = S.OperatorT()
    op.opcodeIndex = 0
    op.inputs = np.array([0, 1], np.int32)
    op.outputs = np.array([2], np.int32)
    op.builtinOptionsType = S.BuiltinOptions.AddOptions
    op.builtinOptions = options
    sg.operators = [op]
    sg.inputs = np.array([0, 1], np.int32)
    sg.outputs = np.array([2], np.int32)
    m.subgraphs = [sg]
    return _pack_dedup(S, m)


def _run(kind: str, data: bytes, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if kind == "tflm":
        from tflite_micro.python.tflite_micro import runtime

        it = runtime.Interpreter.from_bytes(data, arena_size=16 * 1024)
        it.set_input(a, 0)
        it.set_input(b, 1)
        it.invoke()
        return it.get_output(0).copy()
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data)
    it.allocate_tensors()
    ins = it.get_input_details()
    it.set_tensor(ins[0]["index"], a)
    it.set_tensor(ins[1]["index"], b)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def _options(S, relu: bool = False):
    o = S.AddOptionsT()
    if relu:
        o.fusedActivationFunction = S.ActivationFunctionType.RELU
    return o


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_default_options_are_dropped_with_the_same_numbers(kind):
    S = _schema()
    data = _add_model("float32", _options(S))
    small, info = compact_tflite(data)
    assert info["folded"]["options"] == 1  # (one op: its new vtable costs what it saves)
    op = S.Model.GetRootAs(small, 0).Subgraphs(0).Operators(0)
    assert op.BuiltinOptionsType() == S.BuiltinOptions.NONE
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1, 4)).astype(np.float32) for _ in range(2))
    assert np.array_equal(_run(kind, small, a, b), _run(kind, data, a, b))
    assert np.allclose(_run(kind, small, a, b), a + b)


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_options_that_say_something_stay(kind):
    """A fused RELU is not the default: the table stays and the interpreters apply it."""
    S = _schema()
    data = _add_model("float32", _options(S, relu=True))
    small, info = compact_tflite(data)
    assert info["folded"]["options"] == 0
    a = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    b = np.zeros((1, 4), np.float32)
    assert np.array_equal(_run(kind, small, a, b), np.maximum(a, 0))


def test_int16_add_keeps_its_options():
    """pot_scale_int16 defaults to true in the schema but an absent table reads as false in
    TFLite's parser, which changes the int16 ADD kernel: int16 ADD/SUB keep their options."""
    S = _schema()
    m = S.ModelT.InitFromPackedBuf(bytearray(_add_model("int16", _options(S))), 0)
    assert drop_default_options(m) == 0
    assert m.subgraphs[0].operators[0].builtinOptions is not None
