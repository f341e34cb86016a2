"""Compact TFLite flatbuffers for microcontrollers: a de-duplicating writer.

What the LiteRT converter writes for a small int8 model is mostly graph structure, not
weights (qcgan-35k: 36.6 KB of weights in a 138 KB file), and on TFLite-Micro every operator
and tensor also costs arena (a 64 B ``NodeAndRegistration`` per op, a 24 B
``TfLiteEvalTensor`` per tensor). ``compact_tflite`` rewrites the file without what no
interpreter needs (the same operators, tensors, buffers and numbers):

* tensor names, the description and the signature table are dropped (``strip_strings``);
* quantisation tables without scales are dropped;
* tensors without constant data share buffer 0 (one empty table instead of one each);
* the writer stores each distinct vector (shapes, operator inputs/outputs, scales, zero
  points) and each distinct table (quantisation parameters, builtin options) once and points
  every user at it (FlatBuffers offsets may be shared; the TFLite verifier accepts it).

``fold_reshapes`` (on by default) then removes what RESHAPE costs without changing a number
(qcgan-35k int8: 149 RESHAPEs, 57 constant shape tensors):

* a RESHAPE with a constant shape input takes its shape from ``ReshapeOptions.new_shape``
  instead (both interpreters accept one input), so the shape tensors and buffers go;
* a RESHAPE that only feeds FULLY_CONNECTED inputs with a (rows, units) output (with
  ``keep_num_dims`` off, set where needed, the kernel reads its input as rows of the weights'
  depth whatever the input's shape) or another RESHAPE is bypassed,
  and a RESHAPE nobody reads is removed; a graph input or output is never touched, nor a
  reshape whose two sides are quantised differently.

* a RESHAPE into a run of elementwise ops (ADD, SUB, MUL with same-shaped or one-element
  operands, LOGISTIC, RELU, RSQRT, QUANTIZE, ...) whose results only go on into RESHAPEs or
  FULLY_CONNECTED inputs is *sunk*: the run's tensors take the reshape's input shape (an
  elementwise op computes the same numbers in any shape of the same elements), the entry
  reshapes go and an exit reshape that now maps a shape onto itself goes too (qcgan-35k's
  SiLU and residual runs between linear layers). A run also grows backwards into the
  elementwise op that wrote an operand (a scaled branch added to the residual stream), so a
  Conformer's whole residual stream sinks at once (qcgan-35k: 9 reshapes);
* options tables that only repeat the schema's defaults (ADD, SUB, MUL, FULLY_CONNECTED,
  BATCH_MATMUL) are dropped (``drop_default_options``): both interpreters read an absent
  table as the defaults, and each operator saves its union type and offset.

``mix_to_batch_matmul`` (off by default, the TFLite-Micro exporter turns it on) rewrites the
converter's TRANSPOSE + FULLY_CONNECTED(const, x^T) form of a constant-left matmul (the
quaternion layers' +-1 component mixing) as one BATCH_MATMUL: bit-identical on TFLite-Micro's
reference kernels, one op and tensor fewer per quaternion layer (qcgan-35k: 20); LiteRT's
XNNPACK runs the FULLY_CONNECTED form faster, so its exporter keeps it.

Unreferenced tensors and buffers are dropped and indices renumbered; a file that carries an
offline memory plan (which indexes tensors) is left unfolded.

``fuse_prelu`` (off by default, the exporters turn it on for int8) is the one rewrite that
changes numbers: the four int8 ops a converter leaves for PReLU, relu(x) - alpha * relu(-x)
(RELU, MUL by -1 with a fused RELU, MUL by alpha, SUB), become one PRELU op with the same
alpha tensor and output quantisation, i.e. two requantisations fewer (qcgan-35k: 7 PReLUs,
21 ops and tensors fewer); the exporters' verify stage checks the result against PyTorch.

``micro`` (the TFLite-Micro exporter) writes the forms only TFLite-Micro reads, each checked
against its kernel source: a per-channel constant's all-zero zero points once
(``single_weight_zero_points``), RESHAPE without options (``drop_reshape_shapes``: the kernel
takes the output tensor's dims), RESHAPEs into a FULLY_CONNECTED's input bypassed
(``bypass_fc_input_reshapes``: the kernel reads rows of the weights' depth), all-zero conv
biases dropped (``drop_zero_biases``: two inputs mean no bias) and the converter's metadata
dropped. ``for_litert`` writes all of it back for LiteRT, so the host can check the same
file in both interpreters. ``scalar_muls`` also folds ADDs of a constant below half an
output step (``fold_negligible_adds``: the layer norms' epsilon) into their producer's
requantisation. Opcodes are ordered by use and constant buffers by the padding they need.

Weights keep their 16-byte alignment. Callers verify the result in the real runtime (the
exporters' verify stage runs the compacted file), and ``tests/test_tflite_compact.py`` checks
bit-identical outputs in both LiteRT and TFLite-Micro.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _schema():
    from ai_edge_litert import schema_py_generated as S

    return S


def _qkey(q) -> Any:
    if q is None or q.scale is None:
        return None

    def f(a):
        return None if a is None else np.asarray(a).tobytes()

    return (f(q.scale), f(q.zeroPoint), q.quantizedDimension)


def _pack_dedup(S, model) -> bytes:
    """Serialise ``model`` storing each distinct vector and quantisation/options table once."""
    import flatbuffers

    class _Builder(flatbuffers.Builder):
        __slots__ = ("vectors", "tables")

        def __init__(self, size):
            super().__init__(size)
            self.vectors: dict = {}
            self.tables: dict = {}

        def CreateNumpyVector(self, x):  # noqa: N802 - the FlatBuffers API name
            x = np.asarray(x)
            key = (x.dtype.str, x.shape, x.tobytes())
            off = self.vectors.get(key)
            if off is None:
                if x.dtype == np.uint8 and x.size >= 16:  # buffer data: 16-byte aligned
                    self.StartVector(1, x.size, 16)
                    self.head = self.head - x.size
                    self.Bytes[self.head : self.head + x.size] = x.tobytes()
                    self.vectorNumElems = x.size
                    off = self.EndVector()
                else:
                    off = super().CreateNumpyVector(x)
                self.vectors[key] = off
            return off

    def table_key(obj):
        def v(x):
            if isinstance(x, np.ndarray):
                return (x.dtype.str, x.shape, x.tobytes())
            if isinstance(x, list):
                return tuple(v(i) for i in x)
            if hasattr(x, "__dict__"):
                return (type(x).__name__, tuple(sorted((k, v(i)) for k, i in vars(x).items())))
            return x

        return v(obj)

    classes = [S.QuantizationParametersT] + [
        getattr(S, n) for n in dir(S) if n.endswith("OptionsT") or n.endswith("Options2T")
    ]
    originals = {c: c.Pack for c in classes}

    def cached(cls):
        orig = originals[cls]

        def pack(self, builder):
            if not isinstance(builder, _Builder):
                return orig(self, builder)
            key = (cls.__name__, table_key(self))
            off = builder.tables.get(key)
            if off is None:
                off = builder.tables[key] = orig(self, builder)
            return off

        return pack

    # Python lists in the object API (shapes, operator I/O) -> numpy so they de-duplicate.
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.shape is not None:
                t.shape = np.asarray(t.shape, np.int32)
            if t.shapeSignature is not None:
                t.shapeSignature = np.asarray(t.shapeSignature, np.int32)
        for op in sg.operators or []:
            op.inputs = np.asarray(op.inputs, np.int32)
            op.outputs = np.asarray(op.outputs, np.int32)
    try:
        for c in classes:
            c.Pack = cached(c)
        b = _Builder(1 << 16)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())
    finally:
        for c, p in originals.items():
            c.Pack = p


def _buffer_order(sizes: dict[int, int], start: int) -> list[int]:
    """Buffer indices in the order that wastes the least alignment padding when the writer
    lays them out one after another from ``start`` bytes (mod 16): each data vector of 16 B
    or more starts on a 16-byte boundary, behind its 4-byte length and before its 8-byte
    table. Greedy: the next buffer is the one needing the least padding, larger first."""
    order, r, left = [], start % 16, set(sizes)
    while left:
        best = None
        for i in sorted(left):
            n = sizes[i]
            pad = (-(r + n)) % (16 if n >= 16 else 4)
            key = (pad, -n, i)
            if best is None or key < best[0]:
                best = (key, i, (r + pad + n + 12) % 16)
        order.append(best[1])
        r = best[2]
        left.remove(best[1])
    return order


def _pack_ordered(S, model) -> bytes:
    """``_pack_dedup`` with the constant buffers in the order that pads least (tried from
    each of the 16 possible starting offsets; the tensors' buffer indices follow). The same
    tensors, data and 16-byte alignment; qcgan-35k int8: ~0.1 KB of padding fewer."""
    bufs = model.buffers or []
    if len(bufs) < 3 or any(getattr(b, "offset", 0) for b in bufs):
        return _pack_dedup(S, model)
    sizes = {i: 0 if bufs[i].data is None else len(bufs[i].data) for i in range(1, len(bufs))}
    tensors = [t for sg in model.subgraphs for t in sg.tensors or []]
    metas = list(model.metadata or [])
    old = [t.buffer for t in tensors], [m.buffer for m in metas]
    best = _pack_dedup(S, model)
    for start in range(16):
        order = _buffer_order(sizes, start)
        new = {0: 0, **{o: i + 1 for i, o in enumerate(order)}}
        model.buffers = [bufs[0], *[bufs[o] for o in order]]
        for t, b in zip(tensors, old[0], strict=True):
            t.buffer = new.get(b, b)
        for m, b in zip(metas, old[1], strict=True):
            m.buffer = new.get(b, b)
        out = _pack_dedup(S, model)
        if len(out) < len(best):
            best = out
    model.buffers = bufs
    for t, b in zip(tensors, old[0], strict=True):
        t.buffer = b
    for m, b in zip(metas, old[1], strict=True):
        m.buffer = b
    return best


def _counts(model, nbytes: int) -> dict[str, int]:
    return {
        "bytes": nbytes,
        "ops": sum(len(sg.operators or []) for sg in model.subgraphs),
        "tensors": sum(len(sg.tensors or []) for sg in model.subgraphs),
    }


def compact_tflite(
    data: bytes,
    strip_strings: bool = True,
    fold: bool = True,
    fuse: bool = False,
    mix_bmm: bool = False,
    micro: bool = False,
    scalar_muls: bool = False,
) -> tuple[bytes, dict[str, Any]]:
    """(compacted flatbuffer, {"before": ..., "after": ...} with bytes, ops and tensors, and
    "folded": what ``fold_reshapes`` removed).

    ``strip_strings``: also drop tensor names, the description and the signature table (what
    TFLite's own ``strip_strings`` drops; nothing the interpreters read, inputs and outputs keep
    their subgraph order), in the same parse and write. ``fold``: run ``fold_reshapes`` and
    ``drop_default_options``. ``fuse``: run ``fuse_prelu`` first (not bit-identical: verify
    the result). ``mix_bmm``: run ``mix_to_batch_matmul`` (bit-identical on TFLite-Micro's
    reference kernels; LiteRT's XNNPACK rounds its FULLY_CONNECTED differently). ``micro``:
    ``single_weight_zero_points``, ``drop_reshape_shapes``, ``drop_metadata`` and, with
    ``fold``, ``bypass_fc_input_reshapes`` and ``drop_zero_biases`` (a file for TFLite-Micro
    only: LiteRT loads it through ``for_litert``). Unused operator codes always go.
    ``scalar_muls``: run ``fold_scalar_muls`` and ``fold_negligible_adds`` (not
    bit-identical: verify the result)."""
    S = _schema()
    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    before = _counts(model, len(data))
    metadata = drop_metadata(model) if micro else 0  # (its buffers go with fold's sweep)
    fused = fuse_prelu(model) if fuse else 0
    muls = fold_scalar_muls(model) if scalar_muls else 0
    adds = fold_negligible_adds(model) if scalar_muls else 0
    # (their buffers go with fold's sweep)
    zero_biases = drop_zero_biases(model) if micro and fold else 0
    folded = fold_reshapes(model) if fold else {}
    bmm = mix_to_batch_matmul(model) if mix_bmm else 0  # after fold: rank-2 operands
    if fold:
        folded["options"] = drop_default_options(model)
        folded["unit_reshapes"] = bypass_unit_reshapes(model)
        folded["rank"] = drop_implied_rank(model)
    zps = single_weight_zero_points(model) if micro else 0
    fc_in = bypass_fc_input_reshapes(model) if micro and fold else 0
    bare = drop_reshape_shapes(model) if micro else 0
    opcodes = drop_unused_opcodes(model)
    absent = drop_absent_fc_bias(model)
    if strip_strings:
        from ai_edge_litert.tools import flatbuffer_utils as fbu

        fbu.strip_strings(model)
    for sg in model.subgraphs:
        for t in sg.tensors:
            q = t.quantization
            if q is not None and _qkey(q) is None and q.min is None and q.details is None:
                t.quantization = None
    _share_empty_buffers(model)
    out = _pack_ordered(S, model)
    info = {"before": before, "after": _counts(model, len(out))}
    if fold:
        info["folded"] = folded
    if fuse:
        info["fused_prelu"] = fused
    if mix_bmm:
        info["mix_bmm"] = bmm
    if micro:
        info["single_zero_points"] = zps
        info["bare_reshapes"] = bare
        info["fc_input_reshapes"] = fc_in
        info["zero_biases"] = zero_biases
        info["metadata"] = metadata
    info["unused_opcodes"] = opcodes
    info["absent_fc_biases"] = absent
    if scalar_muls:
        info["scalar_muls"] = muls
        info["negligible_adds"] = adds
    return out, info


def _opcode(model, name: str) -> int:
    """The operator-code index of builtin ``name`` in ``model``, added if missing."""
    S = _schema()
    code = getattr(S.BuiltinOperator, name)
    for i, oc in enumerate(model.operatorCodes):
        if max(oc.builtinCode, oc.deprecatedBuiltinCode) == code:
            return i
    oc = S.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
    model.operatorCodes.append(oc)
    return len(model.operatorCodes) - 1


def mix_to_batch_matmul(model) -> int:
    """TRANSPOSE(x) -> FULLY_CONNECTED(A, filter=x^T) -> BATCH_MATMUL(A, x), in place; how
    many were rewritten.

    The LiteRT converter lowers ``A @ x`` with a constant left side (the quaternion layers'
    +-1 component mixing, qsa.export.rewrite ``mix="matmul"``) to a transpose of x and a
    FULLY_CONNECTED that reads the constant as its input and x^T as its weights. BATCH_MATMUL
    computes the same sums from x directly: one op and one tensor fewer per layer (qcgan-35k:
    20). The same holds for an activation A, the attention's weights times the values
    (``P @ V``, which the converter writes the same way: qcgan-35k's time and frequency
    attention, with A (1, rows, k) broadcast against x (k, n)). Both kernels accumulate in
    int32 with the same offsets and requantise with the same scales, so TFLite-Micro's
    reference kernels give identical bytes. Only a rank-2 x, no bias, and only transposes
    that nothing else reads."""
    S = _schema()
    n = 0
    for sg in model.subgraphs:
        g = _Graph(model, sg)
        tensors, keep, prod, readers, kind = g.tensors, g.keep, g.prod, g.readers, g.kind
        dead: set[int] = set()
        for op in sg.operators or []:
            ins = [int(i) for i in op.inputs]
            if kind(op) != "FULLY_CONNECTED" or len(ins) < 2:
                continue
            if len(ins) > 2 and ins[2] >= 0:
                continue
            o = op.builtinOptions
            if o is not None and o.fusedActivationFunction:
                continue  # (keep_num_dims: rank-2 sides, the output is (m, n) either way)
            a, ft = ins[0], ins[1]
            if _is_const(model, tensors[ft]):
                continue
            tr = prod.get(ft)
            if tr is None or kind(tr) != "TRANSPOSE" or ft in keep or len(readers[ft]) != 1:
                continue
            x = int(tr.inputs[0])
            sa, sx, out = (_shape(tensors[t]) for t in (a, x, int(op.outputs[0])))
            if sa is None or sx is None or out is None or len(sx) != 2 or not 2 <= len(sa) <= 5:
                continue
            (k2, nn) = sx
            if sa[-1] != k2 or out != sa[:-1] + (nn,):
                continue
            if any(_qkey(tensors[t].quantization) is None or len(tensors[t].quantization.scale) != 1
                   for t in (a, x)):
                continue  # BATCH_MATMUL quantises each side per tensor
            opts = S.BatchMatMulOptionsT()
            opts.adjX = opts.adjY = False
            op.opcodeIndex = _opcode(model, "BATCH_MATMUL")
            op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.BatchMatMulOptions, opts
            op.inputs = [a, x]
            dead.add(id(tr))
            n += 1
        _remove_ops(model, sg, dead)
    return n


# operators whose options table, when it holds nothing but the schema's defaults, both
# interpreters read as absent (their parsers zero-fill the params and these fields are zero
# there too; ADD/SUB's pot_scale_int16 only matters for int16 operands, which keep theirs)
_DEFAULT_OPTIONS_DROPPABLE = {"ADD", "SUB", "MUL", "FULLY_CONNECTED", "BATCH_MATMUL"}


def drop_default_options(model) -> int:
    """Drop builtin options tables that only repeat the schema's defaults, in place; how many.
    The table is shared already (the writer stores it once), but each operator still carries
    its union type and offset (qcgan-35k int8: ~1.4 KB for ~180 operators)."""
    S = _schema()
    kind = _op_kind(model)
    n = 0
    for sg in model.subgraphs:
        for op in sg.operators or []:
            o = op.builtinOptions
            if o is None or kind(op) not in _DEFAULT_OPTIONS_DROPPABLE:
                continue
            if kind(op) in ("ADD", "SUB") and any(
                int(i) >= 0 and sg.tensors[int(i)].type == S.TensorType.INT16
                for i in list(op.inputs) + list(op.outputs)
            ):
                continue
            default = type(o)()
            if any(getattr(o, f) != getattr(default, f) for f in vars(default)):
                continue
            op.builtinOptionsType, op.builtinOptions = 0, None
            n += 1
    return n


def _lead_ones_stripped(shape) -> tuple[int, ...]:
    s = [int(v) for v in shape]
    while s and s[0] == 1:
        s = s[1:]
    return tuple(s)


def _bypassable_reshapes(g, sg):
    """(op, input, output, readers) of each RESHAPE a bypass may take: its output is no
    graph input or output, has readers, both sides have shapes and one quantisation."""
    for r in sg.operators or []:
        if g.kind(r) != "RESHAPE" or len(r.inputs) < 1:
            continue
        a, b = int(r.inputs[0]), int(r.outputs[0])
        users = g.readers.get(b, [])
        if (b in g.keep or not users or _shape(g.tensors[a]) is None
                or _shape(g.tensors[b]) is None or not _same_quant(g.tensors[a], g.tensors[b])):
            continue
        yield r, a, b, users


def bypass_unit_reshapes(model) -> int:
    """RESHAPEs that only add or drop leading 1s, bypassed where the reader broadcasts, in
    place; how many went (the data are the same bytes, so bit-identical):

    - into a BATCH_MATMUL's right operand whose output only FULLY_CONNECTEDs (they flatten
      it to rows) and RESHAPEs read: the matmul takes the unreshaped operand, its output
      gains the leading 1s ((1, 17, 16, 3) instead of (17, 16, 3): the same rows);
    - into an ADD/SUB/MUL whose other operand already has the output's shape, when the
      reshape only adds leading 1s: broadcasting adds them.

    qcgan-35k: the frequency Conformer's norm outputs into their mixing and its residual
    adds (7 ops)."""
    n = 0
    for sg in model.subgraphs:
        g = _Graph(model, sg)
        tensors, keep, readers, kind = g.tensors, g.keep, g.readers, g.kind
        dead: set[int] = set()
        for r, a, b, users in _bypassable_reshapes(g, sg):
            sa, sb = _shape(tensors[a]), _shape(tensors[b])
            if sa == sb or _lead_ones_stripped(sa) != _lead_ones_stripped(sb):
                continue
            plan = []
            for u in users:
                k, ins = kind(u), [int(i) for i in u.inputs]
                if (k == "BATCH_MATMUL" and ins.count(b) == 1 and ins[1] == b
                        and len(sa) <= 5 and len(sa) >= len(sb)):
                    o = int(u.outputs[0])
                    out, lhs = _shape(tensors[o]), _shape(tensors[ins[0]])
                    if out is None or lhs is None or o in keep or not readers.get(o):
                        break
                    if len(sa) <= len(lhs):  # the left side already has the batch rank
                        plan.append((u, None))
                        continue
                    if not all(
                        int(f.inputs[0]) == o and (
                            (kind(f) == "FULLY_CONNECTED" and _rows_out(tensors, f))
                            or (kind(f) == "RESHAPE" and o not in [int(i) for i in f.inputs[1:]]))
                        for f in readers[o]
                    ):
                        break
                    plan.append((u, (1,) * (len(sa) - len(sb)) + out))
                elif (k in ("ADD", "SUB", "MUL") and len(ins) == 2 and ins.count(b) == 1
                      and len(sa) <= len(sb)):
                    other, out = ins[1 - ins.index(b)], _shape(tensors[int(u.outputs[0])])
                    if _shape(tensors[other]) != out or out != sb:
                        break
                    plan.append((u, None))
                else:
                    break
            else:
                for u, new_out in plan:
                    u.inputs = [a if int(i) == b else int(i) for i in u.inputs]
                    if new_out is not None:
                        tensors[int(u.outputs[0])].shape = np.asarray(new_out, np.int32)
                dead.add(id(r))
                n += 1
        _remove_ops(model, sg, dead)
    return n


def drop_implied_rank(model) -> int:
    """Clear ``has_rank`` on tensors whose shape is written out, in place; how many. The flag
    only tells a scalar (rank 0, empty shape) from an unranked tensor, and neither interpreter
    reads it for a tensor with dimensions; scalars keep it. The bool costs ~4 B per tensor
    table with its padding (qcgan-35k int8: 2.2 KB for 535 tensors)."""
    n = 0
    for sg in model.subgraphs:
        for t in sg.tensors or []:
            if t.hasRank and t.shape is not None and len(t.shape) > 0:
                t.hasRank = False
                n += 1
    return n


def single_weight_zero_points(model) -> int:
    """TFLite-Micro only: the zero-point vector of a per-channel quantised constant (weights,
    biases: symmetric, all zeros) as one value, in place; how many tensors. TFLite-Micro's
    allocator reads a one-element vector as that zero point for every channel (its documented
    space-saving form for weights); LiteRT requires one zero point per scale and rejects such
    a file, so only the microcontroller artifact uses it (qcgan-35k int8: 1.8 KB)."""
    n = 0
    for sg in model.subgraphs:
        for t in sg.tensors or []:
            q = t.quantization
            if q is None or q.scale is None or q.zeroPoint is None or not _is_const(model, t):
                continue
            zp = np.asarray(q.zeroPoint)
            if len(q.scale) > 1 and zp.size == len(q.scale) and not zp.any():
                q.zeroPoint = np.zeros(1, np.int64)
                n += 1
    return n


def drop_reshape_shapes(model) -> int:
    """TFLite-Micro only: RESHAPE ops without their ``new_shape`` options, in place; how many.
    TFLite-Micro's RESHAPE takes the output tensor's dimensions (the options are never read;
    tensorflow/lite/micro/kernels/reshape_common.cc); LiteRT computes the output shape from
    the options, so ``for_litert`` writes them back from the output tensors (qcgan-35k int8:
    ~0.9 KB for ~50 reshapes). Only static output shapes (no -1, no dynamic signature)."""
    kind = _op_kind(model)
    n = 0
    for sg in model.subgraphs:
        for op in sg.operators or []:
            if kind(op) != "RESHAPE" or len(op.inputs) != 1 or op.builtinOptions is None:
                continue
            out = sg.tensors[int(op.outputs[0])]
            sig = out.shapeSignature
            if (out.shape is None or len(out.shape) == 0 or any(int(v) < 0 for v in out.shape)
                    or (sig is not None and any(int(v) < 0 for v in sig))):
                continue
            op.builtinOptionsType, op.builtinOptions = 0, None
            n += 1
    return n


_BIASED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")  # bias: input 2


def drop_zero_biases(model) -> int:
    """TFLite-Micro only: bias inputs whose constant data are all zeros dropped from CONV_2D,
    DEPTHWISE_CONV_2D (the input list ends at the weights) and FULLY_CONNECTED (-1, the
    schema's optional operand), in place; how many. TFLite-Micro's kernels run without a bias
    (conv.cc: ``NumInputs(node) == 3 ? bias : nullptr``); LiteRT's int8 convs require one, so
    ``for_litert`` writes the zeros back. The converter writes a zero int32 bias, with its own
    per-channel scale vector, for a conv that has none (qcgan-35k int8, whose quaternion
    biases are per (component, unit) and added after the conv: 11 of them, ~1.4 KB). The
    same numbers: adding zero changes nothing."""
    kind = _op_kind(model)
    n = 0
    for sg in model.subgraphs:
        keep = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
        for op in sg.operators or []:
            k = kind(op)
            if k not in _BIASED or op.inputs is None or len(op.inputs) != 3:
                continue
            b = int(op.inputs[2])
            if b < 0 or b in keep or not _is_const(model, sg.tensors[b]):
                continue
            data = model.buffers[sg.tensors[b].buffer].data
            if data is None or len(data) == 0 or np.any(np.asarray(data)):
                continue
            ins = [int(i) for i in op.inputs]
            op.inputs = ins[:2] + [-1] if k == "FULLY_CONNECTED" else ins[:2]
            n += 1
        _drop_unused_tensors(model, sg)
    return n


def bypass_fc_input_reshapes(model) -> int:
    """TFLite-Micro only: RESHAPEs whose every reader is a FULLY_CONNECTED's input (not its
    weights) bypassed, in place; how many. TFLite-Micro's FULLY_CONNECTED reads its input as
    rows of the weights' depth and takes the rows and units from its output tensor's shape
    (the input's shape is never read, nor ``keep_num_dims``), so (1, 17, 16, 3) reads as the
    same 68 rows of 12 as (1, 17, 4, 12). LiteRT checks the input's last dimension under
    ``keep_num_dims``, so ``for_litert`` puts the reshapes back (qcgan-35k int8: the
    frequency Conformer's 12 quaternion linears, ~0.9 KB)."""
    n = 0
    for sg in model.subgraphs:
        g = _Graph(model, sg)
        tensors, kind = g.tensors, g.kind
        dead: set[int] = set()
        for r, a, b, users in _bypassable_reshapes(g, sg):
            size = int(np.prod(_shape(tensors[a])))
            ok = True
            for u in users:
                ins = [int(i) for i in u.inputs]
                w = tensors[ins[1]] if len(ins) > 1 and ins[1] >= 0 else None
                out = _shape(tensors[int(u.outputs[0])])
                if (kind(u) != "FULLY_CONNECTED" or ins[0] != b or b in ins[1:] or w is None
                        or _shape(w) is None or len(_shape(w)) != 2 or out is None
                        or size % _shape(w)[1]
                        or int(np.prod(out[:-1])) != size // _shape(w)[1]):
                    ok = False
                    break
            if not ok:
                continue
            for u in users:
                u.inputs = [a, *[int(i) for i in u.inputs[1:]]]
            dead.add(id(r))
            n += 1
        _remove_ops(model, sg, dead)
    return n


def drop_absent_fc_bias(model) -> int:
    """A FULLY_CONNECTED's trailing absent bias (-1) left off its input list, in place; how
    many. Both interpreters take two inputs as no bias (the list entry costs 4 B)."""
    kind = _op_kind(model)
    n = 0
    for sg in model.subgraphs:
        for op in sg.operators or []:
            if (kind(op) == "FULLY_CONNECTED" and op.inputs is not None and len(op.inputs) == 3
                    and int(op.inputs[2]) < 0):
                op.inputs = [int(op.inputs[0]), int(op.inputs[1])]
                n += 1
    return n


def drop_metadata(model) -> int:
    """TFLite-Micro only: the model's metadata entries (the converter's min_runtime_version
    and keep_stablehlo_constant) and their buffers, in place; how many entries. TFLite-Micro
    reads one metadata entry, an offline memory plan, which is kept."""
    md = model.metadata or []
    keep = [m for m in md if m.name in (b"OfflineMemoryAllocation", "OfflineMemoryAllocation")]
    model.metadata = keep or None
    return len(md) - len(keep)


def drop_unused_opcodes(model) -> int:
    """Operator codes no operator uses (a fused PReLU's RELU) dropped and the rest ordered by
    use, most used first (an operator whose ``opcode_index`` is 0, the default, does not
    store it), in place; how many were dropped."""
    codes = model.operatorCodes or []
    uses: dict[int, int] = {}
    for sg in model.subgraphs:
        for op in sg.operators or []:
            uses[int(op.opcodeIndex)] = uses.get(int(op.opcodeIndex), 0) + 1
    if any(not 0 <= i < len(codes) for i in uses):
        return 0
    used = sorted(uses, key=lambda i: (-uses[i], i))
    new = {old: i for i, old in enumerate(used)}
    model.operatorCodes = [codes[i] for i in used]
    for sg in model.subgraphs:
        for op in sg.operators or []:
            op.opcodeIndex = new[int(op.opcodeIndex)]
    return len(codes) - len(used)


def _narrow_zero_points(sg) -> bool:
    """Whether a subgraph (flatbuffer reader) has a per-channel tensor with one zero point."""
    for j in range(sg.TensorsLength()):
        q = sg.Tensors(j).Quantization()
        if q is not None and q.ScaleLength() > 1 and q.ZeroPointLength() == 1:
            return True
    return False


def _micro_ops(g, sg) -> bool:
    """Whether a subgraph (flatbuffer reader) has an op in a form only TFLite-Micro runs: a
    RESHAPE without options, a FULLY_CONNECTED whose input is not rows of its weights' depth,
    a conv without a bias (see for_litert)."""
    B = _schema().BuiltinOperator
    codes = [max(g.OperatorCodes(i).BuiltinCode(), g.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(g.OperatorCodesLength())]

    def last_dim(t: int) -> int | None:
        if not 0 <= t < sg.TensorsLength():
            return None
        ten = sg.Tensors(t)
        return int(ten.Shape(ten.ShapeLength() - 1)) if ten.ShapeLength() else None

    for j in range(sg.OperatorsLength()):
        op = sg.Operators(j)
        code = codes[op.OpcodeIndex()] if op.OpcodeIndex() < len(codes) else None
        if ((code == B.RESHAPE and op.InputsLength() == 1 and op.BuiltinOptionsType() == 0)
                or (code == B.FULLY_CONNECTED and op.InputsLength() >= 2
                    and last_dim(op.Inputs(0)) != last_dim(op.Inputs(1)))
                or (code in (B.CONV_2D, B.DEPTHWISE_CONV_2D) and op.InputsLength() == 2)):
            return True
    return False


def _widen(model) -> None:
    """Each one-element zero-point vector of a per-channel tensor repeated per channel."""
    for sg in model.subgraphs:
        for t in sg.tensors or []:
            q = t.quantization
            if (q is not None and q.scale is not None and q.zeroPoint is not None
                    and len(q.scale) > 1 and len(q.zeroPoint) == 1):
                q.zeroPoint = np.full(len(q.scale), q.zeroPoint[0], np.int64)


def for_litert(data: bytes) -> bytes:
    """A TFLite-Micro artifact in the form LiteRT loads, for checking it on the host: each
    one-element zero-point vector of a per-channel tensor repeated per channel (the inverse
    of ``single_weight_zero_points``), each RESHAPE without options given its output
    tensor's shape as ``new_shape`` (of ``drop_reshape_shapes``), a RESHAPE to (rows, depth)
    put back before each FULLY_CONNECTED whose input's last dimension is not its weights'
    depth (of ``bypass_fc_input_reshapes``) and a zero bias given to each conv without one
    (of ``drop_zero_biases``). ``data`` itself when it needs none of these; the same numbers
    otherwise."""
    S = _schema()
    g = S.Model.GetRootAs(data, 0)
    subgraphs = [g.Subgraphs(i) for i in range(min(g.SubgraphsLength(), len(data) // 4))]
    if not any(_narrow_zero_points(sg) or _micro_ops(g, sg) for sg in subgraphs):
        return data
    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    _widen(model)
    kind = _op_kind(model)

    def reshape_options(shape):
        opts = S.ReshapeOptionsT()
        opts.newShape = np.asarray([int(v) for v in shape], np.int32)
        return S.BuiltinOptions.ReshapeOptions, opts

    for sg in model.subgraphs:
        ops = []
        for op in sg.operators or []:
            k = kind(op)
            if k == "RESHAPE" and len(op.inputs) == 1 and op.builtinOptions is None:
                op.builtinOptionsType, op.builtinOptions = reshape_options(
                    sg.tensors[int(op.outputs[0])].shape)
            elif k in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(op.inputs) == 2:
                op.inputs = [*[int(i) for i in op.inputs], _zero_bias(model, sg, op, k)]
            elif k == "FULLY_CONNECTED" and len(op.inputs) >= 2:
                x, w = sg.tensors[int(op.inputs[0])], sg.tensors[int(op.inputs[1])]
                out = sg.tensors[int(op.outputs[0])].shape
                if (x.shape is None or w.shape is None or len(w.shape) != 2
                        or not len(x.shape) or int(x.shape[-1]) == int(w.shape[1])):
                    ops.append(op)
                    continue
                # the rows as LiteRT wants them: the output's leading dims x the depth
                depth = int(w.shape[1])
                if out is None or len(out) == 2:
                    rows = [int(np.prod(x.shape)) // depth, depth]
                else:
                    rows = [int(v) for v in out[:-1]] + [depth]
                t = S.TensorT()
                t.shape, t.type, t.buffer = np.asarray(rows, np.int32), x.type, 0
                t.quantization = x.quantization
                sg.tensors.append(t)
                r = S.OperatorT()
                r.opcodeIndex = _opcode(model, "RESHAPE")
                r.inputs, r.outputs = [int(op.inputs[0])], [len(sg.tensors) - 1]
                r.builtinOptionsType, r.builtinOptions = reshape_options(rows)
                op.inputs = [len(sg.tensors) - 1, *[int(i) for i in op.inputs[1:]]]
                ops.append(r)
            ops.append(op)
        sg.operators = ops
    return _pack_dedup(S, model)


def _zero_bias(model, sg, op, k: str) -> int:
    """A new all-zero int32 bias tensor for conv ``op`` (the inverse of drop_zero_biases):
    one per output channel, scale input scale x weight scale per channel; its index."""
    S = _schema()
    x, w = sg.tensors[int(op.inputs[0])], sg.tensors[int(op.inputs[1])]
    n = int(w.shape[-1] if k == "DEPTHWISE_CONV_2D" else w.shape[0])
    t = S.TensorT()
    t.shape, t.type = np.asarray([n], np.int32), S.TensorType.INT32
    if x.quantization is not None and w.quantization is not None:
        q = S.QuantizationParametersT()
        ws = np.asarray(w.quantization.scale, np.float32)
        q.scale = (np.float32(x.quantization.scale[0]) * np.broadcast_to(ws, (n,))).astype(
            np.float32)
        q.zeroPoint = np.zeros(n, np.int64)
        t.quantization = q
    b = S.BufferT()
    b.data = np.zeros(4 * n, np.uint8)
    model.buffers.append(b)
    t.buffer = len(model.buffers) - 1
    sg.tensors.append(t)
    return len(sg.tensors) - 1


def widen_zero_points(data: bytes) -> bytes:
    """``data`` with every one-element zero-point vector of a per-channel tensor repeated per
    channel (the inverse of ``single_weight_zero_points``), ``data`` itself when there is
    none. ``for_litert`` undoes every TFLite-Micro-only form."""
    S = _schema()
    g = S.Model.GetRootAs(data, 0)
    if not any(_narrow_zero_points(g.Subgraphs(i))
               for i in range(min(g.SubgraphsLength(), len(data) // 4))):
        return data
    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    _widen(model)
    return _pack_dedup(S, model)


def _is_const(model, t) -> bool:
    b = model.buffers[t.buffer] if 0 <= t.buffer < len(model.buffers or []) else None
    return b is not None and b.data is not None and len(b.data) > 0


def _same_quant(a, b) -> bool:
    return a.type == b.type and _qkey(a.quantization) == _qkey(b.quantization)


def _rows_out(tensors, fc) -> bool:
    """An FC whose output is (rows, units): with ``keep_num_dims`` off it computes the same
    from an input of any shape with the same elements (rows of the weights' depth)."""
    shape = tensors[int(fc.outputs[0])].shape
    return shape is not None and len(shape) == 2


def _op_kind(model):
    """op -> its builtin operator name ("RESHAPE", ...) in ``model``."""
    S = _schema()
    names = {getattr(S.BuiltinOperator, n): n for n in dir(S.BuiltinOperator) if n.isupper()}

    def kind(op) -> str:
        oc = model.operatorCodes[op.opcodeIndex]
        return names.get(max(oc.builtinCode, oc.deprecatedBuiltinCode), "")

    return kind


def _graph_index(ops) -> tuple[dict[int, Any], dict[int, list]]:
    """({tensor: the op writing it}, {tensor: the ops reading it}) over ``ops``."""
    prod = {int(o): op for op in ops for o in op.outputs}
    readers: dict[int, list] = {}
    for op in ops:
        for i in op.inputs:
            if int(i) >= 0:
                readers.setdefault(int(i), []).append(op)
    return prod, readers


class _Graph:
    """One subgraph's producer / reader index for the int8 rewrites below."""

    def __init__(self, model, sg):
        self.S, self.model, self.sg, self.kind = _schema(), model, sg, _op_kind(model)
        self.tensors = sg.tensors
        self.keep = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
        self.prod, self.readers = _graph_index(sg.operators or [])

    def private(self, t: int) -> bool:
        return t not in self.keep and len(self.readers.get(t, [])) == 1

    def const(self, t: int) -> bool:
        return _is_const(self.model, self.tensors[t])

    def per_tensor_int8(self, t: int) -> bool:
        tt = self.tensors[t]
        q = tt.quantization
        return (
            tt.type == self.S.TensorType.INT8
            and _qkey(q) is not None
            and len(q.scale) == 1
            and len(q.zeroPoint) == 1
        )

    def values(self, t: int) -> np.ndarray | None:
        """The real values of a constant int8 tensor (per-tensor or per-channel), else None."""
        tt = self.tensors[t]
        q = tt.quantization
        if tt.type != self.S.TensorType.INT8 or not self.const(t) or _qkey(q) is None:
            return None
        raw = np.frombuffer(bytes(self.model.buffers[tt.buffer].data), np.int8).astype(np.float64)
        return (raw - np.asarray(q.zeroPoint, np.float64)) * np.asarray(q.scale, np.float64)

    def scalar(self, t: int) -> float | None:
        """The value of a constant one-element per-tensor int8 tensor, else None."""
        v = self.values(t) if self.per_tensor_int8(t) else None
        return float(v[0]) if v is not None and v.size == 1 else None

    def cone(self, t: int, depth: int = 0) -> list[int] | None:
        """The tensors whose scales, multiplied by c, make ``t`` mean c * t with the same
        codes (``t`` first), or None when its producers do not allow it."""
        tt = self.tensors[t]
        if depth > 32 or not self.private(t) or _qkey(tt.quantization) is None:
            return None
        if self.const(t):
            return [t]
        p = self.prod.get(t)
        if tt.type != self.S.TensorType.INT8 or p is None:
            return None
        k, ins = self.kind(p), [int(i) for i in p.inputs]
        subs: list[list[int] | None]
        if k == "RESHAPE":
            subs = [self.cone(ins[0], depth + 1)]
        elif k in ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"):
            w, b = ins[1], (ins[2] if len(ins) > 2 else -1)
            if not (self.const(w) or (k == "FULLY_CONNECTED" and b < 0)):
                return None
            subs = [self.cone(w, depth + 1)] + ([self.cone(b, depth + 1)] if b >= 0 else [])
        elif k == "BATCH_MATMUL":  # one operand, a constant one first
            for i in sorted(ins, key=lambda i: not self.const(i)):
                sub = self.cone(i, depth + 1)
                if sub is not None:
                    return [t, *sub]
            return None
        elif k in ("ADD", "SUB") and len(ins) == 2 and ins[0] != ins[1]:
            subs = [self.cone(i, depth + 1) for i in ins]
        else:
            return None
        if any(sub is None for sub in subs):
            return None
        return [t, *(i for sub in subs for i in sub)]



def _fused_activation(op) -> int:
    o = op.builtinOptions
    return 0 if o is None else int(getattr(o, "fusedActivationFunction", 0))


def fold_reshapes(model) -> dict[str, int]:
    """Fold RESHAPEs in place (see the module header); counts of what went."""
    S = _schema()
    done = {"shape_inputs": 0, "bypassed": 0, "sunk": 0, "ops": 0, "tensors": 0, "buffers": 0}
    if any(md.name in (b"OfflineMemoryAllocation", "OfflineMemoryAllocation")
           for md in model.metadata or []):
        return done
    kind = _op_kind(model)

    for sg in model.subgraphs:
        ops, tensors = sg.operators or [], sg.tensors or []
        keep = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
        reshapes = [op for op in ops if kind(op) == "RESHAPE"]
        for op in reshapes:
            out = tensors[op.outputs[0]]
            shape = list(out.shape) if out.shape is not None else None
            sig = out.shapeSignature
            static = shape is not None and (sig is None or all(int(v) >= 0 for v in sig))
            if (len(op.inputs) == 2 and static and int(op.inputs[1]) >= 0
                    and _is_const(model, tensors[op.inputs[1]])):
                opts = S.ReshapeOptionsT()
                # numpy, so the writer de-duplicates it like every other int32 vector
                opts.newShape = np.asarray([int(v) for v in shape], np.int32)
                op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.ReshapeOptions, opts
                op.inputs = [int(op.inputs[0])]
                done["shape_inputs"] += 1
        readers: dict[int, list] = {}
        for op in ops:
            for i in op.inputs:
                readers.setdefault(int(i), []).append(op)
        for op in reshapes:  # in graph order: a chain of reshapes collapses onto its source
            src, dst = int(op.inputs[0]), int(op.outputs[0])
            if dst in keep or not _same_quant(tensors[src], tensors[dst]):
                continue
            users = readers.get(dst, [])
            ok = all(
                (kind(u) == "FULLY_CONNECTED" and int(u.inputs[0]) == dst
                 and dst not in [int(i) for i in u.inputs[1:]] and _rows_out(tensors, u))
                or (kind(u) == "RESHAPE" and [int(i) for i in u.inputs] == [dst])
                for u in users
            )
            if not users or not ok:
                continue
            for u in users:
                if kind(u) == "FULLY_CONNECTED" and u.builtinOptions is not None:
                    u.builtinOptions.keepNumDims = False  # rank-2 output: the same shape
                u.inputs = [src, *[int(i) for i in u.inputs[1:]]]
                readers.setdefault(src, []).append(u)
            readers[dst] = []
            done["bypassed"] += 1
        done["sunk"] += _sink_reshapes(sg, kind, keep)
        live = sg.operators
        while True:  # drop reshapes nobody reads (a dead chain goes link by link)
            read = {int(i) for op in live for i in op.inputs}
            left = [op for op in live if not (
                kind(op) == "RESHAPE" and int(op.outputs[0]) not in keep
                and int(op.outputs[0]) not in read)]
            if len(left) == len(live):
                break
            live = left
        done["ops"] += len(ops) - len(live)
        sg.operators = live
        n_tensors = len(tensors)
        _drop_unused_tensors(model, sg)
        done["tensors"] += n_tensors - len(sg.tensors)
    bufs = model.buffers or []
    if bufs:
        ref = {0} | {md.buffer for md in model.metadata or []}
        ref |= {t.buffer for sg in model.subgraphs for t in sg.tensors}
        order = [i for i in range(len(bufs)) if i in ref]
        new = {old: n for n, old in enumerate(order)}
        done["buffers"] = len(bufs) - len(order)
        model.buffers = [bufs[i] for i in order]
        for sg in model.subgraphs:
            for t in sg.tensors:
                t.buffer = new[t.buffer]
        for md in model.metadata or []:
            md.buffer = new[md.buffer]
    return done


_UNARY = {"LOGISTIC", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "RSQRT", "QUANTIZE", "ABS", "NEG"}
_BINARY = {"ADD", "SUB", "MUL"}


def _shape(t) -> tuple[int, ...] | None:
    return None if t.shape is None else tuple(int(v) for v in t.shape)


def _sink_reshapes(sg, kind, keep: set[int]) -> int:
    """Sink RESHAPEs through elementwise runs (see the module header), in place; how many
    runs were relabelled. Each pass takes one reshape whose run qualifies, relabels the run's
    tensors with the reshape's input shape and points the run at the reshape's source (and at
    the sources of the run's other entry reshapes); a RESHAPE left mapping a shape onto itself
    is bypassed. Repeats until nothing changes."""
    tensors = sg.tensors
    done = 0

    def region_of(s: int, d: int, prod, readers):
        """(tensors to relabel, {entry tensor: its reshape's source}) or None.

        The region grows both ways from the reshape's output: forward into every reader, and
        backward into the elementwise op that wrote a tensor the run reads (a residual add's
        other branch: SCALE * RESHAPE(y) + RESHAPE(x)), until each tensor in it is written by
        an entry reshape (from the same source shape) or by an elementwise op of the run, and
        read only by elementwise ops of the run, by reshapes or by FULLY_CONNECTED inputs."""
        src_shape, dshape = _shape(tensors[s]), _shape(tensors[d])
        roots, region, members, todo = {d: s}, set(), [], [d]

        def entry_source(i: int):
            p = prod.get(i)
            if (p is not None and kind(p) == "RESHAPE" and i not in keep
                    and _shape(tensors[int(p.inputs[0])]) == src_shape
                    and _same_quant(tensors[int(p.inputs[0])], tensors[i])):
                return int(p.inputs[0])
            return None

        def join(u) -> bool:
            """Take elementwise op ``u`` into the run; False if it cannot be."""
            if any(u is m for m in members):
                return True
            if getattr(u, "intermediates", None) is not None and len(u.intermediates):
                return False
            outs = [int(o) for o in u.outputs]
            if any(_shape(tensors[o]) != dshape for o in outs):
                return False  # a broadcast: the op's shape is not the run's
            for i in (int(i) for i in u.inputs):
                if i < 0 or i in region or i in todo:
                    continue
                sh = _shape(tensors[i])
                if sh is not None and int(np.prod(sh)) == 1 and len(sh) <= len(src_shape):
                    continue  # a one-element operand broadcasts in any shape
                if sh != dshape:
                    return False
                src = entry_source(i)
                if src is not None:
                    roots[i] = src  # another entry of the same shape
                elif prod.get(i) is None or kind(prod[i]) not in _UNARY | _BINARY:
                    return False  # a constant, a graph input or another op's result
                todo.append(i)
            members.append(u)
            todo.extend(outs)
            return True

        while todo:
            t = todo.pop()
            if t in region:
                continue
            if t in keep:
                return None
            region.add(t)
            p = prod.get(t)
            if t not in roots and (p is None or kind(p) not in _UNARY | _BINARY or not join(p)):
                return None
            for u in readers.get(t, []):
                k = kind(u)
                if k in _UNARY or k in _BINARY:
                    if not join(u):
                        return None
                elif k == "RESHAPE" and int(u.inputs[0]) == t:
                    continue  # an exit: a reshape takes any input shape
                elif (k == "FULLY_CONNECTED" and int(u.inputs[0]) == t
                      and t not in [int(i) for i in u.inputs[1:]] and _rows_out(tensors, u)):
                    continue  # an exit: rows of the weights' depth, whatever the shape
                else:
                    return None
        return region, roots

    changed = True
    while changed:
        changed = False
        ops = sg.operators
        prod, readers = _graph_index(ops)
        for r in ops:
            if kind(r) != "RESHAPE":
                continue
            s, d = int(r.inputs[0]), int(r.outputs[0])
            src_shape, dshape = _shape(tensors[s]), _shape(tensors[d])
            if (d in keep or not readers.get(d) or src_shape is None or dshape is None
                    or src_shape == dshape or not _same_quant(tensors[s], tensors[d])):
                continue
            found = region_of(s, d, prod, readers)
            if found is None:
                continue
            region, roots = found
            for t in region - set(roots):
                tensors[t].shape = np.asarray(src_shape, np.int32)
                if tensors[t].shapeSignature is not None:
                    tensors[t].shapeSignature = np.asarray(src_shape, np.int32)
            for t, src in roots.items():
                for u in readers.get(t, []):
                    u.inputs = [src if int(i) == t else int(i) for i in u.inputs]
            relabelled = region | set(roots.values())  # what FC exits now read
            for u in ops:
                if (kind(u) == "FULLY_CONNECTED" and int(u.inputs[0]) in relabelled
                        and u.builtinOptions is not None):
                    u.builtinOptions.keepNumDims = False
            done += 1
            changed = True
            break
        if changed:
            continue
        for r in ops:  # reshapes that now map a shape onto itself
            s, d = int(r.inputs[0]), int(r.outputs[0])
            if (kind(r) == "RESHAPE" and d not in keep and readers.get(d)
                    and _shape(tensors[s]) == _shape(tensors[d])
                    and _same_quant(tensors[s], tensors[d])):
                for u in readers[d]:
                    u.inputs = [s if int(i) == d else int(i) for i in u.inputs]
                changed = True
                break
    return done


def fuse_prelu(model) -> int:
    """RELU(x), MUL(x, -1; fused RELU), MUL(., alpha), SUB -> PRELU(x, alpha), in place (int8
    graphs; see the module header); how many were fused. The intermediate results must have
    no other reader. Not bit-identical (two requantisations fewer): verify the result."""
    S = _schema()
    fused = _fused_activation
    n = 0
    for sg in model.subgraphs:
        g = _Graph(model, sg)
        tensors, prod, kind, value, private = g.tensors, g.prod, g.kind, g.values, g.private
        ops = sg.operators or []
        dead: set[int] = set()
        for sub in [op for op in ops if kind(op) == "SUB" and not fused(op)]:
            if tensors[int(sub.outputs[0])].type != S.TensorType.INT8:
                continue
            pos, neg = int(sub.inputs[0]), int(sub.inputs[1])
            relu, scaled = prod.get(pos), prod.get(neg)
            if relu is None or scaled is None or kind(relu) != "RELU":
                continue
            if kind(scaled) != "MUL" or fused(scaled):
                continue
            x = int(relu.inputs[0])
            ins = [int(i) for i in scaled.inputs]
            flips = [i for i in ins if prod.get(i) is not None and kind(prod[i]) == "MUL"]
            if len(flips) != 1 or len(set(ins)) != 2:
                continue
            flip = prod[flips[0]]
            alpha = next(i for i in ins if i != flips[0])
            if value(alpha) is None or fused(flip) != S.ActivationFunctionType.RELU:
                continue
            fin = [int(i) for i in flip.inputs]
            others = [i for i in fin if i != x]
            if x not in fin or len(others) != 1:
                continue
            minus = value(others[0])
            if minus is None or minus.size != 1 or abs(float(minus.item()) + 1.0) > 1e-2:
                continue
            if not (private(pos) and private(flips[0]) and private(neg)):
                continue
            sub.opcodeIndex = _opcode(model, "PRELU")
            sub.inputs = [x, alpha]
            sub.builtinOptionsType, sub.builtinOptions = 0, None
            dead |= {id(relu), id(flip), id(scaled)}
            n += 1
        _remove_ops(model, sg, dead)
    return n


# int8 kernels that read an input of any quantisation parameters (their own requantisation
# takes it in): a reader of a folded MUL may read its input instead. Layout ops (RESHAPE,
# CONCATENATION, ...) need one set of parameters in and out.
_READS_ANY = {
    "ADD",
    "SUB",
    "MUL",
    "FULLY_CONNECTED",
    "BATCH_MATMUL",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "MEAN",
    "RSQRT",
    "LOGISTIC",
    "SOFTMAX",
    "PRELU",
    "TANH",
}


def fold_scalar_muls(model) -> int:
    """MUL(x, c) by a constant scalar c > 0 removed, in place (int8 graphs); how many. Every
    scale in the cone that computes x (its tensors, and the scales of the constant weights,
    biases and addends at its leaves) is multiplied by c: each kernel's requantisation
    multiplier (input scale x weight scale / output scale) is unchanged, so the codes are the
    same and x now means c * x, and the MUL's readers (ops that take any input parameters)
    read x. The cone may pass RESHAPE, FULLY_CONNECTED / CONV_2D / DEPTHWISE_CONV_2D (through
    a constant weight, or FULLY_CONNECTED's activation weight operand), BATCH_MATMUL (one
    operand) and ADD/SUB (both operands); each of its tensors must have no other reader. One
    requantisation fewer, not bit-identical: verify the result. qcgan-35k: the Conformers'
    0.5 residual scales and the attention's 1/sqrt(d) (5 ops, 464 B, SQNR unchanged; dropping
    the layer norms' epsilon ADDs too was measured at -0.5 dB in TFLM and is not done)."""
    n = 0
    for sg in model.subgraphs:
        while True:  # one fold at a time: each changes the readers the next one sees
            g = _Graph(model, sg)
            op = next((o for o in sg.operators or [] if _fold_mul(g, o)), None)
            if op is None:
                break
            sg.operators = [o for o in sg.operators if o is not op]
            n += 1
        _drop_unused_tensors(model, sg)
    return n


_REQUANTIZES = {"MEAN", "SUM", "FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D",
                 "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL"}


def fold_negligible_adds(model) -> int:
    """ADD(x, c) of a constant scalar c below half a step of the ADD's output quantisation
    removed, in place (int8 graphs); how many. In int8 such an add is only a requantisation:
    x's producer (an op that requantises its result anyway: MEAN, SUM, a matmul or conv, an
    elementwise op) writes x in the ADD's output quantisation instead and the ADD's readers
    read x. x must have no other reader. One rounding fewer, not bit-identical: verify the
    result. qcgan-35k: the layer norms' epsilon (1e-5 / 4 against a variance step of ~1e-4
    and up; a zero variance still reads as RSQRT's largest output, with or without it)."""
    n = 0
    for sg in model.subgraphs:
        g = _Graph(model, sg)
        dead: set[int] = set()
        for op in sg.operators or []:
            if g.kind(op) != "ADD" or len(op.inputs) != 2 or _fused_activation(op):
                continue
            ins = [int(i) for i in op.inputs]
            consts = [g.scalar(i) for i in ins]
            if sum(c is not None for c in consts) != 1:
                continue
            c = next(v for v in consts if v is not None)
            x = next(i for i, v in zip(ins, consts, strict=True) if v is None)
            y = int(op.outputs[0])
            p = g.prod.get(x)
            if (y in g.keep or x in g.keep or p is None or g.kind(p) not in _REQUANTIZES
                    or len(g.readers.get(x, [])) != 1 or not g.per_tensor_int8(x)
                    or not g.per_tensor_int8(y) or _shape(g.tensors[x]) != _shape(g.tensors[y])):
                continue
            if abs(c) > 0.5 * float(g.tensors[y].quantization.scale[0]):
                continue
            g.tensors[x].quantization = g.tensors[y].quantization
            for r in g.readers.get(y, []):
                r.inputs = [x if int(i) == y else int(i) for i in r.inputs]
            dead.add(id(op))
            n += 1
        _remove_ops(model, sg, dead)
    return n


def _fold_mul(g: _Graph, op) -> bool:
    """Fold ``op`` if it is a foldable scalar MUL (see fold_scalar_muls); whether it was."""
    if g.kind(op) != "MUL" or len(op.inputs) != 2:
        return False
    if _fused_activation(op):
        return False
    ins = [int(i) for i in op.inputs]
    consts = [g.scalar(i) for i in ins]
    if sum(c is not None for c in consts) != 1:
        return False
    c = next(v for v in consts if v is not None)
    x = next(i for i, v in zip(ins, consts, strict=True) if v is None)
    y = int(op.outputs[0])
    readers = g.readers.get(y, [])
    if y in g.keep or not readers or not g.per_tensor_int8(x) or not c > 0:
        return False
    if any(g.kind(r) not in _READS_ANY for r in readers):
        return False
    leaves = g.cone(x)
    if leaves is None or len(set(leaves)) != len(leaves):
        return False
    for t in leaves:
        q = g.tensors[t].quantization
        nq = g.S.QuantizationParametersT()
        nq.scale = (np.asarray(q.scale, np.float64) * c).astype(np.float32)
        nq.zeroPoint = np.asarray(q.zeroPoint, np.int64).copy()
        nq.quantizedDimension = q.quantizedDimension
        g.tensors[t].quantization = nq
    for r in readers:
        r.inputs = [x if int(i) == y else int(i) for i in r.inputs]
    return True


def _remove_ops(model, sg, dead: set[int]) -> None:
    """Drop the operators whose id() is in ``dead``, then the tensors nothing uses."""
    if dead:
        sg.operators = [op for op in sg.operators if id(op) not in dead]
        _drop_unused_tensors(model, sg)


def _drop_unused_tensors(model, sg) -> None:
    """Drop the tensors no op, input or output of ``sg`` references (indices renumbered)."""
    tensors = sg.tensors
    used = {int(i) for i in sg.inputs} | {int(i) for i in sg.outputs}
    for op in sg.operators:
        used |= {int(i) for i in op.inputs if int(i) >= 0}
        used |= {int(i) for i in op.outputs if int(i) >= 0}
        used |= {int(i) for i in (op.intermediates if op.intermediates is not None else [])}
    order = [i for i in range(len(tensors)) if i in used]
    new = {old: n for n, old in enumerate(order)}
    sg.tensors = [tensors[i] for i in order]

    def remap(v):
        return [new[int(i)] if int(i) >= 0 else int(i) for i in v]

    for op in sg.operators:
        op.inputs, op.outputs = remap(op.inputs), remap(op.outputs)
        if op.intermediates is not None:
            op.intermediates = remap(op.intermediates)
    sg.inputs, sg.outputs = remap(sg.inputs), remap(sg.outputs)
    si = model.subgraphs.index(sg)
    for sd in model.signatureDefs or []:
        if sd.subgraphIndex == si:
            for tm in (sd.inputs or []) + (sd.outputs or []):
                tm.tensorIndex = new[int(tm.tensorIndex)]


def _share_empty_buffers(model) -> None:
    """Point every tensor without constant data at buffer 0 (TFLite's empty sentinel) and
    drop the other empty buffers: converters write one empty Buffer table per activation
    (qcgan-35k int8: 745 buffers, 193 with data, ~7 KB of empty tables)."""
    bufs = model.buffers or []
    if not bufs:
        return

    def empty(b) -> bool:
        return (b.data is None or len(b.data) == 0) and not getattr(b, "offset", 0)

    if not empty(bufs[0]):
        return  # not the usual layout: leave it alone
    new, index = [bufs[0]], {}

    def remap(i: int) -> int:
        if not 0 <= i < len(bufs):
            return i  # an invalid index stays invalid: the runtime's verifier reports it
        if empty(bufs[i]):
            return 0
        if i not in index:
            index[i] = len(new)
            new.append(bufs[i])
        return index[i]

    for sg in model.subgraphs:
        for t in sg.tensors:
            t.buffer = remap(t.buffer)
    for md in model.metadata or []:
        md.buffer = remap(md.buffer)
    model.buffers = new
