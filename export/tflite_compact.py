"""Compact TFLite flatbuffers for microcontrollers: a de-duplicating writer.

What the LiteRT converter writes for a small int8 model is mostly graph structure, not
weights (qcgan-35k: 36.6 KB of weights in a 138 KB file), and on TFLite-Micro every operator
and tensor also costs arena (a 64 B ``NodeAndRegistration`` per op, a 24 B
``TfLiteEvalTensor`` per tensor). ``compact_tflite`` rewrites the file without what no
interpreter needs (the graph is unchanged: same operators, tensors, buffers and numbers):

* tensor names, the description and the signature table are dropped (``strip_strings``);
* quantisation tables without scales are dropped;
* tensors without constant data share buffer 0 (one empty table instead of one each);
* the writer stores each distinct vector (shapes, operator inputs/outputs, scales, zero
  points) and each distinct table (quantisation parameters, builtin options) once and points
  every user at it (FlatBuffers offsets may be shared; the TFLite verifier accepts it).

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


def _counts(model, nbytes: int) -> dict[str, int]:
    return {
        "bytes": nbytes,
        "ops": sum(len(sg.operators or []) for sg in model.subgraphs),
        "tensors": sum(len(sg.tensors or []) for sg in model.subgraphs),
    }


def compact_tflite(data: bytes, strip_strings: bool = True) -> tuple[bytes, dict[str, Any]]:
    """(compacted flatbuffer, {"before": ..., "after": ...} with bytes, ops and tensors).

    ``strip_strings``: also drop tensor names, the description and the signature table (what
    TFLite's own ``strip_strings`` drops; nothing the interpreters read, inputs and outputs keep
    their subgraph order), in the same parse and write."""
    S = _schema()
    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    before = _counts(model, len(data))
    if strip_strings:
        from ai_edge_litert.tools import flatbuffer_utils as fbu

        fbu.strip_strings(model)
    for sg in model.subgraphs:
        for t in sg.tensors:
            q = t.quantization
            if q is not None and _qkey(q) is None and q.min is None and q.details is None:
                t.quantization = None
    _share_empty_buffers(model)
    out = _pack_dedup(S, model)
    return out, {"before": before, "after": _counts(model, len(out))}


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
