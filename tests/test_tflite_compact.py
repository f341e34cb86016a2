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


# -- an int8 FULLY_CONNECTED (per-channel weights, bias) -> MUL by 0.5 -> ADD graph ----------


def _q(S, scale, zp, dim=0):
    q = S.QuantizationParametersT()
    q.scale = np.asarray(scale, np.float32).reshape(-1)
    q.zeroPoint = np.asarray(zp, np.int64).reshape(-1)
    q.quantizedDimension = dim
    return q


def _model(S, codes, version: int = 1):
    """An empty version-3 model with one operator code per builtin in ``codes``."""
    m = S.ModelT()
    m.version = 3
    m.operatorCodes = []
    for code in codes:
        oc = S.OperatorCodeT()
        oc.builtinCode = oc.deprecatedBuiltinCode = code
        oc.version = version
        m.operatorCodes.append(oc)
    return m


def _buf(S, a):
    b = S.BufferT()
    b.data = np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)
    return b


def _fc_mul_model(mul: float = 0.5) -> bytes:
    """x (1, 4) -> FULLY_CONNECTED(W (3, 4) per-channel int8, bias int32) -> MUL(., mul)
    -> ADD(., y (1, 3)) -> out; every activation int8."""
    S = _schema()
    m = S.ModelT()
    m.version = 3
    m.operatorCodes = []
    for code in (S.BuiltinOperator.FULLY_CONNECTED, S.BuiltinOperator.MUL, S.BuiltinOperator.ADD):
        oc = S.OperatorCodeT()
        oc.builtinCode = oc.deprecatedBuiltinCode = code
        oc.version = 1 if code == S.BuiltinOperator.MUL else 4
        m.operatorCodes.append(oc)
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (3, 4)).astype(np.int8)
    w_scale = np.array([0.01, 0.02, 0.015])
    bias = rng.integers(-2000, 2000, 3).astype(np.int32)
    x_scale = 0.05

    def buf(a):
        b = S.BufferT()
        b.data = np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)
        return b

    m.buffers = [S.BufferT(), buf(w), buf(bias), buf(np.array([127], np.int8))]
    specs = [  # shape, type, buffer, quantisation
        ((1, 4), S.TensorType.INT8, 0, _q(S, x_scale, 3)),  # 0 x
        ((3, 4), S.TensorType.INT8, 1, _q(S, w_scale, [0, 0, 0])),  # 1 W
        ((3,), S.TensorType.INT32, 2, _q(S, x_scale * w_scale, [0, 0, 0])),  # 2 bias
        ((1, 3), S.TensorType.INT8, 0, _q(S, 0.04, -5)),  # 3 fc out
        ((), S.TensorType.INT8, 3, _q(S, mul / 127, 0)),  # 4 the scalar
        ((1, 3), S.TensorType.INT8, 0, _q(S, 0.02 * mul / 0.5, -4)),  # 5 mul out
        ((1, 3), S.TensorType.INT8, 0, _q(S, 0.03, 2)),  # 6 y
        ((1, 3), S.TensorType.INT8, 0, _q(S, 0.05, 0)),  # 7 out
    ]
    sg = S.SubGraphT()
    sg.tensors = []
    for shape, ttype, b, q in specs:
        t = S.TensorT()
        t.shape = np.array(shape, np.int32)
        t.type, t.buffer, t.quantization, t.hasRank = ttype, b, q, True
        sg.tensors.append(t)
    sg.operators = []
    for code, ins, out in ((0, [0, 1, 2], 3), (1, [3, 4], 5), (2, [5, 6], 7)):
        op = S.OperatorT()
        op.opcodeIndex = code
        op.inputs, op.outputs = np.array(ins, np.int32), np.array([out], np.int32)
        sg.operators.append(op)
    sg.inputs, sg.outputs = np.array([0, 6], np.int32), np.array([7], np.int32)
    m.subgraphs = [sg]
    return _pack_dedup(S, m)


def _codes(n: int = 64):
    rng = np.random.default_rng(2)
    return [
        tuple(rng.integers(-100, 100, (1, k)).astype(np.int8) for k in (4, 3)) for _ in range(n)
    ]


def _run_all(kind: str, data: bytes) -> np.ndarray:
    from qsa.export.tflite_compact import widen_zero_points

    if kind == "litert":
        data = widen_zero_points(data)
    return np.stack([_run(kind, data, a, b) for a, b in _codes()])


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_scalar_mul_folds_into_the_weight_scales(kind):
    """fold_scalar_muls: the MUL by 0.5 goes, the FC's weight, bias and output scales halve
    (codes unchanged), the ADD reads the FC's output; every output within one step of the
    unfolded graph (one requantisation fewer) and of the float computation."""
    from qsa.export.tflite_compact import fold_scalar_muls

    S = _schema()
    data = _fc_mul_model(0.5)
    small, info = compact_tflite(data, scalar_muls=True)
    assert info["scalar_muls"] == 1 and info["after"]["ops"] == 2
    g = S.ModelT.InitFromPackedBuf(bytearray(small), 0).subgraphs[0]
    w = next(t for t in g.tensors if t.type == S.TensorType.INT8 and list(t.shape) == [3, 4])
    assert np.allclose(w.quantization.scale, [0.005, 0.01, 0.0075])
    want, got = _run_all(kind, data), _run_all(kind, small)
    assert np.abs(want.astype(int) - got.astype(int)).max() <= 1
    # a MUL whose input has another reader, or a negative factor, stays
    m = S.ModelT.InitFromPackedBuf(bytearray(_fc_mul_model(-0.5)), 0)
    assert fold_scalar_muls(m) == 0
    m = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    m.subgraphs[0].outputs = np.array([7, 3], np.int32)  # the FC's output is a graph output
    assert fold_scalar_muls(m) == 0


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_implied_rank_is_dropped_with_the_same_numbers(kind):
    """has_rank goes from every tensor with a shape (a scalar keeps it): same bytes out."""
    S = _schema()
    data = _fc_mul_model()
    small, info = compact_tflite(data)
    assert info["folded"]["rank"] == 7
    tensors = S.ModelT.InitFromPackedBuf(bytearray(small), 0).subgraphs[0].tensors
    ranked = [t.hasRank for t in tensors]
    assert ranked.count(True) == 1  # the scalar
    assert len(small) < len(data)
    assert np.array_equal(_run_all(kind, small), _run_all(kind, data))


def test_single_zero_points_for_tflm_and_widened_for_litert(tmp_path):
    """micro=True stores a per-channel constant's all-zero zero points once: TFLite-Micro
    reads it (same bytes out), LiteRT rejects the raw file, widen_zero_points restores the
    per-channel form (same bytes out), and the artifact check accepts one zero point for
    many scales but not two for three."""
    from ai_edge_litert.interpreter import Interpreter

    from qsa.export.errors import ExportError
    from qsa.export.tflite_compact import widen_zero_points
    from qsa.export.validate import check_artifact

    S = _schema()
    data, _ = compact_tflite(_fc_mul_model())
    micro, info = compact_tflite(data, micro=True)
    assert info["single_zero_points"] == 2  # the weights and the bias
    assert len(micro) < len(data)
    tensors = S.ModelT.InitFromPackedBuf(bytearray(micro), 0).subgraphs[0].tensors
    zps = [len(t.quantization.zeroPoint) for t in tensors]
    assert zps.count(1) == len(zps)
    assert np.array_equal(_run_all("tflm", micro), _run_all("tflm", data))
    with pytest.raises(ValueError, match="zero_point"):
        Interpreter(model_content=micro).allocate_tensors()
    assert widen_zero_points(data) == data
    assert np.array_equal(_run_all("litert", micro), _run_all("litert", data))
    path = tmp_path / "model.tflite"
    path.write_bytes(micro)
    check_artifact(path, "tflm")
    m = S.ModelT.InitFromPackedBuf(bytearray(micro), 0)
    w = next(t for t in m.subgraphs[0].tensors if list(t.shape) == [3, 4])
    w.quantization.zeroPoint = np.zeros(2, np.int64)
    path.write_bytes(_pack_dedup(S, m))
    with pytest.raises(ExportError, match="2 zero points for 3 scales"):
        check_artifact(path, "tflm")


def _bmm_model(out_shape=(16, 3), inputs=(0, 1)) -> bytes:
    """x (16, 4) @ y (4, 3) as one float BATCH_MATMUL."""
    S = _schema()
    m = S.ModelT()
    m.version = 3
    oc = S.OperatorCodeT()
    oc.builtinCode = oc.deprecatedBuiltinCode = S.BuiltinOperator.BATCH_MATMUL  # 126 < 127
    oc.version = 1
    m.operatorCodes = [oc]
    m.buffers = [S.BufferT()]
    sg = S.SubGraphT()
    sg.tensors = []
    for shape in ((16, 4), (4, 3), out_shape):
        t = S.TensorT()
        t.shape, t.type, t.buffer = np.array(shape, np.int32), S.TensorType.FLOAT32, 0
        sg.tensors.append(t)
    op = S.OperatorT()
    op.opcodeIndex = 0
    op.inputs, op.outputs = np.array(inputs, np.int32), np.array([2], np.int32)
    sg.operators = [op]
    sg.inputs, sg.outputs = np.array([0, 1], np.int32), np.array([2], np.int32)
    m.subgraphs = [sg]
    return _pack_dedup(S, m)


def test_artifact_check_knows_batch_matmul_and_empty_operand_lists(tmp_path):
    """check_artifact validates BATCH_MATMUL shapes (the mixing and attention products) and
    refuses any op that reads no tensor (a flipped length once segfaulted LiteRT's kernel)."""
    from qsa.export.errors import ExportError
    from qsa.export.validate import check_artifact

    path = tmp_path / "model.tflite"
    path.write_bytes(_bmm_model())
    check_artifact(path, "litert")
    a = np.arange(64, dtype=np.float32).reshape(16, 4)
    b = np.ones((4, 3), np.float32)
    assert np.allclose(_run("litert", path.read_bytes(), a, b), a @ b)
    path.write_bytes(_bmm_model(out_shape=(16, 4)))
    with pytest.raises(ExportError, match=r"@ \(4, 3\) -> output \(16, 4\)"):
        check_artifact(path, "litert")
    path.write_bytes(_bmm_model(inputs=()))
    with pytest.raises(ExportError, match=r"inputs \[\] / outputs \[2\]"):
        check_artifact(path, "tflm")


def _reshape_fc_model() -> bytes:
    """x (1, 2, 8) -> RESHAPE (1, 4, 4) -> FULLY_CONNECTED(W (3, 4), keep_num_dims) (1, 4, 3)
    -> ADD(., y (4, 3)) -> RESHAPE (1, 12) -> out; int8, with the converter's metadata and an
    operator code nothing uses (RELU)."""
    S = _schema()
    m = _model(S, (S.BuiltinOperator.RESHAPE, S.BuiltinOperator.FULLY_CONNECTED,
                   S.BuiltinOperator.ADD, S.BuiltinOperator.RELU))
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (3, 4)).astype(np.int8)

    def buf(a):
        return _buf(S, a)

    m.buffers = [S.BufferT(), buf(w), buf(np.frombuffer(b"1.14.0\0", np.uint8))]
    md = S.MetadataT()
    md.name, md.buffer = "min_runtime_version", 2
    m.metadata = [md]
    specs = [  # shape, buffer, quantisation
        ((1, 2, 8), 0, _q(S, 0.05, 3)),  # 0 x
        ((1, 4, 4), 0, _q(S, 0.05, 3)),  # 1 x as rows of 4
        ((3, 4), 1, _q(S, [0.01, 0.02, 0.015], [0, 0, 0])),  # 2 W
        ((1, 4, 3), 0, _q(S, 0.04, -5)),  # 3 fc out
        ((4, 3), 0, _q(S, 0.03, 2)),  # 4 y
        ((1, 4, 3), 0, _q(S, 0.06, 1)),  # 5 add out
        ((1, 12), 0, _q(S, 0.06, 1)),  # 6 out
    ]
    sg = S.SubGraphT()
    sg.tensors = []
    for shape, b, q in specs:
        t = S.TensorT()
        t.shape = np.array(shape, np.int32)
        t.type, t.buffer, t.quantization = S.TensorType.INT8, b, q
        sg.tensors.append(t)

    def reshape_opts(shape):
        o = S.ReshapeOptionsT()
        o.newShape = np.array(shape, np.int32)
        return o

    fc = S.FullyConnectedOptionsT()
    fc.keepNumDims = True
    sg.operators = []
    for code, ins, out, opts in ((0, [0], 1, reshape_opts([1, 4, 4])), (1, [0 + 1, 2, -1], 3, fc),
                                 (2, [3, 4], 5, None), (0, [5], 6, reshape_opts([1, 12]))):
        op = S.OperatorT()
        op.opcodeIndex = code
        op.inputs, op.outputs = np.array(ins, np.int32), np.array([out], np.int32)
        if opts is not None:
            op.builtinOptionsType = {0: S.BuiltinOptions.ReshapeOptions,
                                     1: S.BuiltinOptions.FullyConnectedOptions}[code]
            op.builtinOptions = opts
        sg.operators.append(op)
    sg.inputs, sg.outputs = np.array([0, 4], np.int32), np.array([6], np.int32)
    m.subgraphs = [sg]
    return _pack_dedup(S, m)


def _run_xy(kind: str, data: bytes) -> np.ndarray:
    rng = np.random.default_rng(4)
    outs = []
    for _ in range(16):
        x = rng.integers(-100, 100, (1, 2, 8)).astype(np.int8)
        y = rng.integers(-100, 100, (4, 3)).astype(np.int8)
        outs.append(_run(kind, data, x, y))
    return np.stack(outs)


def test_tflm_file_forms_run_the_same_and_litert_gets_them_back(tmp_path):
    """micro=True: the RESHAPE into the FULLY_CONNECTED is bypassed (TFLM reads the input as
    rows of the weights' depth), the RESHAPE left loses its options (TFLM reads the output
    tensor's shape), the metadata and the unused RELU code go. TFLite-Micro gives the same
    bytes; LiteRT cannot load the raw file, and for_litert gives it back in LiteRT's form with
    the same outputs; the artifact check accepts it."""
    from ai_edge_litert import schema_py_generated as S
    from ai_edge_litert.interpreter import Interpreter

    from qsa.export.tflite_compact import for_litert
    from qsa.export.validate import check_artifact

    data = _reshape_fc_model()
    plain, p_info = compact_tflite(data)
    assert p_info["after"]["ops"] == 4 and p_info["unused_opcodes"] == 1
    micro, info = compact_tflite(data, micro=True)
    assert info["fc_input_reshapes"] == 1 and info["bare_reshapes"] == 1
    assert info["metadata"] == 1 and info["after"]["ops"] == 3
    assert len(micro) < len(plain)
    m = S.ModelT.InitFromPackedBuf(bytearray(micro), 0)
    assert m.metadata is None and len(m.operatorCodes) == 3 and len(m.buffers) == 2
    assert np.array_equal(_run_xy("tflm", micro), _run_xy("tflm", plain))
    with pytest.raises((RuntimeError, ValueError)):
        it = Interpreter(model_content=micro)
        it.allocate_tensors()
        it.invoke()
    assert for_litert(plain) == plain  # nothing to put back
    back = for_litert(micro)
    assert S.ModelT.InitFromPackedBuf(bytearray(back), 0).subgraphs[0].operators[0].inputs[0] == 0
    assert np.array_equal(_run_xy("litert", back), _run_xy("litert", plain))
    path = tmp_path / "model.tflite"
    path.write_bytes(micro)
    check_artifact(path, "tflm")


def _mean_add_rsqrt_model(c: float) -> bytes:
    """x (1, 8) int8 -> MEAN(axis 1, keep dims) -> ADD(., c) -> RSQRT -> out (1, 1)."""
    S = _schema()
    m = _model(S, (S.BuiltinOperator.MEAN, S.BuiltinOperator.ADD, S.BuiltinOperator.RSQRT), 2)

    def buf(a):
        return _buf(S, a)

    c_scale = max(abs(c), 1e-12) / 127
    m.buffers = [S.BufferT(), buf(np.array([1], np.int32)), buf(np.array([127], np.int8))]
    specs = [  # shape, type, buffer, quantisation
        ((1, 8), S.TensorType.INT8, 0, _q(S, 0.02, -128)),  # 0 x >= 0 (a variance-like input)
        ((1,), S.TensorType.INT32, 1, None),  # 1 axis
        ((1, 1), S.TensorType.INT8, 0, _q(S, 0.01, -128)),  # 2 mean
        ((1, 1), S.TensorType.INT8, 2, _q(S, c_scale, 0)),  # 3 c
        ((1, 1), S.TensorType.INT8, 0, _q(S, 0.01 if c < 0.01 else 0.01 + c / 255, -128)),  # 4
        ((1, 1), S.TensorType.INT8, 0, _q(S, 0.1, -128)),  # 5 out
    ]
    sg = S.SubGraphT()
    sg.tensors = []
    for shape, ttype, b, q in specs:
        t = S.TensorT()
        t.shape = np.array(shape, np.int32)
        t.type, t.buffer, t.quantization = ttype, b, q
        sg.tensors.append(t)
    red = S.ReducerOptionsT()
    red.keepDims = True
    sg.operators = []
    for code, ins, out, opts in ((0, [0, 1], 2, red), (1, [2, 3], 4, None), (2, [4], 5, None)):
        op = S.OperatorT()
        op.opcodeIndex = code
        op.inputs, op.outputs = np.array(ins, np.int32), np.array([out], np.int32)
        if opts is not None:
            op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.ReducerOptions, opts
        sg.operators.append(op)
    sg.inputs, sg.outputs = np.array([0], np.int32), np.array([5], np.int32)
    m.subgraphs = [sg]
    return _pack_dedup(S, m)


def _run_one(kind: str, data: bytes, xs) -> np.ndarray:
    outs = []
    for x in xs:
        if kind == "tflm":
            from tflite_micro.python.tflite_micro import runtime

            it = runtime.Interpreter.from_bytes(data, arena_size=16 * 1024)
            it.set_input(x, 0)
            it.invoke()
            outs.append(it.get_output(0).copy())
        else:
            from ai_edge_litert.interpreter import Interpreter

            it = Interpreter(model_content=data)
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
    return np.stack(outs).astype(np.int32)


@pytest.mark.parametrize("kind", ["tflm", "litert"])
def test_negligible_add_becomes_the_means_requantisation(kind):
    """fold_negligible_adds: an epsilon below half a step of the ADD's output goes (the MEAN
    writes in the ADD's quantisation, RSQRT reads it): every output within one step of the
    unfolded graph, a zero mean still RSQRT's largest output; an ADD of 0.5 stays."""
    rng = np.random.default_rng(5)
    xs = [rng.integers(-128, 127, (1, 8)).astype(np.int8) for _ in range(32)]
    xs.append(np.full((1, 8), -128, np.int8))  # all zero: a zero mean
    data = _mean_add_rsqrt_model(2.5e-6)
    plain, p_info = compact_tflite(data)
    folded, info = compact_tflite(data, scalar_muls=True)
    assert info["negligible_adds"] == 1 and info["after"]["ops"] == p_info["after"]["ops"] - 1
    want, got = _run_one(kind, plain, xs), _run_one(kind, folded, xs)
    assert np.abs(want - got).max() <= 1
    assert got[-1].item() == 127 == want[-1].item()
    big, b_info = compact_tflite(_mean_add_rsqrt_model(0.5), scalar_muls=True)
    assert b_info["negligible_adds"] == 0 and b_info["after"]["ops"] == 3
