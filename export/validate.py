"""Check an exported artifact before a native runtime sees its bytes.

``check_artifact(path, kind, expected_sha256=None)`` raises ``ExportError`` (naming the file,
what is wrong, what was expected and the fix) unless the file

* exists, is non-empty and no larger than its format allows;
* matches ``expected_sha256`` (``report_sha256(path)`` reads it from the exporter's
  report.json next to the artifact, when there is one): any altered byte is refused;
* has its format's identifier: TFLite ``TFL3`` / ExecuTorch ``ET12`` at bytes 4..8;
* passes a structural check in Python:

  - ``.tflite``: the whole flatbuffer is walked with bounds and alignment checks on every
    offset, table, vector and string the interpreters read (the TFLite schema's tables,
    operator options included), then the indices that point between tables (tensor ->
    buffer, operator -> opcode / tensors, signatures -> tensors), shapes, quantisation
    parameters (scales > 0, one zero point per scale, in the type's range), that each
    constant's bytes match its shape and type and are finite, that no op writes a constant,
    a graph input or a tensor another op writes, and the shapes / index tensors of the ops
    qsa exports (conv, depthwise conv, fully connected, reshape, transpose, slice, pad,
    concatenation, elementwise ...): TFLite-Micro verifies none of this itself;
  - ``.pte``: extended header (magic, program size, segment base and size within the file),
    the program flatbuffer walked against the ``program.fbs`` executorch ships (names UTF-8:
    the runtime prints them), its value / operator / delegate / instruction indices and
    planned memory, and the XNNPACK delegate payload (header, its flatbuffer walked against
    the XNNPACK schema, value ids defined before use, dims, kernel vs filter, reshape /
    transpose / slice shapes, constant names present in the program); the ExecuTorch runtime
    verifies the program's flatbuffer bounds again itself (InternalConsistency);
  - ``.onnx``: parsed with protobuf and ``onnx.checker.check_model``; float initializers
    finite.

These checks were grown from crashes found by fuzzing (tests/test_fuzz_artifacts.py,
bench/fuzz_artifacts.py): they make altered files errors, they do not prove an arbitrary
file safe. Only the sha256 from the report does that, for the exact bytes exported.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from pathlib import Path

from .errors import ExportError

KINDS = ("onnx", "executorch", "litert", "tflm")
SUFFIXES = {"onnx": ".onnx", "executorch": ".pte", "litert": ".tflite", "tflm": ".tflite"}
_TARGET = {"onnx": "onnx", "executorch": "executorch", "litert": "litert", "tflm": "tflm"}
MAX_BYTES = (1 << 31) - 1  # flatbuffers use 32-bit offsets; protobuf messages are < 2 GiB
TFLITE_SCHEMA_VERSION = 3
_MAX_ELEMENTS = 1 << 31


class _Bad(Exception):
    """A structural problem; check_artifact turns it into an ExportError with the fix."""


def _fix(path: Path, kind: str) -> str:
    return (
        f"re-export it with `qsa export --target {_TARGET.get(kind, kind)} ...` (or "
        "qsa.export.export_model) and copy the whole export folder again"
    )


def _error(path: Path, kind: str, what: str, expected: str) -> ExportError:
    return ExportError(
        f"{path}: not a valid {kind} artifact: {what}; expected {expected}. The file is "
        f"truncated, altered or not what its name says: {_fix(path, kind)}"
    )


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def report_sha256(path: str | os.PathLike) -> str | None:
    """The sha256 the exporter's report.json (next to ``path``) records for this artifact, or
    None (no report, a report of another file, or a report without a sha256)."""
    report = Path(path).with_name("report.json")
    if not report.is_file():
        return None
    try:
        r = json.loads(report.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(
            f"{report}: unreadable export report ({e}); it should be the report.json the "
            f"exporter wrote next to {Path(path).name}: re-export, or delete it to load the "
            "artifact without the checksum check"
        ) from None
    if not isinstance(r, dict) or r.get("artifact") != Path(path).name:
        return None
    sha = r.get("sha256")
    if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
        raise ExportError(
            f"{report}: sha256 {sha!r} is not a 64-digit hex digest; re-export {path}"
        )
    return sha


def check_artifact(
    path: str | os.PathLike, kind: str, expected_sha256: str | None = None
) -> bytes:
    """Raise ExportError unless ``path`` is a sound ``kind`` artifact (see module doc);
    returns its bytes. ``kind``: one of KINDS (``litert``/``tflm`` both mean .tflite)."""
    if kind not in KINDS:
        raise ExportError(f"check_artifact: kind={kind!r}; expected one of {KINDS}")
    path = Path(path)
    if not path.is_file():
        raise ExportError(
            f"{path}: no such {kind} artifact ({'a folder' if path.is_dir() else 'missing'}); "
            f"expected the {SUFFIXES[kind]} file an export wrote: check the path, or "
            f"{_fix(path, kind)}"
        )
    size = path.stat().st_size
    if size == 0:
        raise _error(path, kind, "the file is empty (0 bytes)", "a non-empty model file")
    if size > MAX_BYTES:
        raise _error(path, kind, f"{size:,} bytes", f"at most {MAX_BYTES:,} bytes")
    data = path.read_bytes()
    if expected_sha256 is not None:
        got = hashlib.sha256(data).hexdigest()
        if got != expected_sha256.lower():
            raise ExportError(
                f"{path}: sha256 {got} does not match {expected_sha256} recorded in "
                f"{path.with_name('report.json')} at export time; the file was altered or "
                f"truncated after export: {_fix(path, kind)}"
            )
    try:
        if kind == "onnx":
            _check_onnx(data)
        elif kind == "executorch":
            _check_pte(data)
        else:
            _check_tflite(data)
    except _Bad as e:
        raise _error(path, kind, str(e), _EXPECTED[kind]) from None
    return data


_EXPECTED = {
    "onnx": "an ONNX ModelProto that passes onnx.checker",
    "executorch": "an ExecuTorch program (flatbuffer identifier 'ET12', extended header "
    "'eh00', segments inside the file)",
    "litert": "a TFLite flatbuffer as the exporter writes it (identifier 'TFL3', schema "
    "version 3, every offset inside the file, every index in range, quantization parameters "
    "and constant data consistent with the tensors)",
}
_EXPECTED["tflm"] = _EXPECTED["litert"]


# -- flatbuffers ---------------------------------------------------------------------------


class _Table:
    __slots__ = ("fb", "pos", "vt", "vt_len", "obj_len", "what")

    def __init__(self, fb: _FlatBuffer, pos: int, what: str):
        self.fb, self.pos, self.what = fb, pos, what
        fb.need(pos, 4, 4, what)
        self.vt = pos - fb.scalar("i", pos, what)
        fb.need(self.vt, 4, 2, f"{what} vtable")
        self.vt_len = fb.scalar("H", self.vt, f"{what} vtable")
        self.obj_len = fb.scalar("H", self.vt + 2, f"{what} vtable")
        if self.vt_len < 4 or self.vt_len % 2 or self.obj_len < 4:
            raise _Bad(f"{what}: malformed vtable (length {self.vt_len}, object {self.obj_len})")
        fb.need(self.vt, self.vt_len, 2, f"{what} vtable")
        fb.need(pos, self.obj_len, 1, what)

    def field(self, i: int, size: int) -> int | None:
        slot = 4 + 2 * i
        if slot + 2 > self.vt_len:
            return None
        off = self.fb.scalar("H", self.vt + slot, self.what)
        if off == 0:
            return None
        if off + size > self.obj_len:
            raise _Bad(f"{self.what}: field {i} lies outside its table")
        self.fb.need(self.pos + off, size, size, f"{self.what} field {i}")
        return self.pos + off

    def scalar(self, i: int, fmt: str, default=0):
        p = self.field(i, struct.calcsize(fmt))
        return default if p is None else self.fb.scalar(fmt, p, f"{self.what} field {i}")

    def _ref(self, i: int) -> int | None:
        p = self.field(i, 4)
        return None if p is None else self.fb.deref(p, f"{self.what} field {i}")

    def table(self, i: int, what: str) -> _Table | None:
        p = self._ref(i)
        return None if p is None else _Table(self.fb, p, what)

    def vector(self, i: int, elem: int) -> tuple[int, int]:
        """(start of the elements, count) of vector field ``i``; (0, 0) when absent."""
        p = self._ref(i)
        return (0, 0) if p is None else self.fb.vector(p, elem, f"{self.what} field {i}")

    def ints(self, i: int, fmt: str = "i") -> list[int]:
        start, n = self.vector(i, struct.calcsize(fmt))
        return list(struct.unpack_from(f"<{n}{fmt}", self.fb.b, start)) if n else []

    def tables(self, i: int, what: str) -> list[_Table]:
        start, n = self.vector(i, 4)
        return [
            _Table(self.fb, self.fb.deref(start + 4 * k, what), f"{what}[{k}]") for k in range(n)
        ]

    def string(self, i: int) -> str | None:
        """String field ``i`` (None when absent); must be NUL-terminated UTF-8 (runtimes
        print names from the file in their error messages)."""
        p = self._ref(i)
        if p is None:
            return None
        start, n = self.fb.vector(p, 1, f"{self.what} string {i}")
        self.fb.need(start + n, 1, 1, f"{self.what} string {i}")
        if self.fb.b[start + n] != 0:
            raise _Bad(f"{self.what}: string field {i} is not NUL-terminated")
        try:
            return bytes(self.fb.b[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{self.what}: string field {i} is not UTF-8") from None


class _FlatBuffer:
    def __init__(self, b: bytes):
        self.b, self.n = b, len(b)

    def need(self, pos: int, size: int, align: int, what: str) -> None:
        if pos < 0 or size < 0 or pos + size > self.n:
            raise _Bad(f"{what} at byte {pos} (+{size}) lies outside the {self.n}-byte file")
        if align > 1 and pos % align:
            raise _Bad(f"{what} at byte {pos} is not {align}-byte aligned")

    def scalar(self, fmt: str, pos: int, what: str):
        size = struct.calcsize(fmt)
        self.need(pos, size, min(size, 8), what)
        return struct.unpack_from("<" + fmt, self.b, pos)[0]

    def deref(self, pos: int, what: str) -> int:
        off = self.scalar("I", pos, what)
        if off == 0:
            raise _Bad(f"{what}: null offset at byte {pos}")
        self.need(pos + off, 4, 4, what)
        return pos + off

    def vector(self, p: int, elem: int, what: str) -> tuple[int, int]:
        n = self.scalar("I", p, f"{what} length")
        self.need(p + 4, n * elem, min(elem, 8), what)
        return p + 4, n

    def root(self, what: str) -> _Table:
        return _Table(self, self.deref(0, f"{what} root offset"), what)


# -- TFLite --------------------------------------------------------------------------------

# Operator option tables (BuiltinOptions / BuiltinOptions2 / QuantizationDetails union
# members) that hold vectors or strings: {union type: [(field id, element bytes | "s")]}.
# Taken from the TFLite schema; every other member holds scalars only.
_OPTIONS = {
    3: [(1, 4), (2, 4)],  # ConcatEmbeddingsOptions
    8: [(5, 1)],  # FullyConnectedOptions
    17: [(0, 4)],  # ReshapeOptions.new_shape
    30: [(0, 4)],  # SqueezeOptions.squeeze_dims
    111: [(0, "s"), (1, "s")],  # VarHandleOptions
    115: [(0, 4)],  # BucketizeOptions
}
_OPTIONS_2 = {
    2: [(0, 8)],
    3: [(0, 8), (1, 8), (2, 8)],
    4: [(0, 8), (1, 8), (2, 8), (3, 8), (4, 1), (7, 8), (10, 8), (13, 8), (16, 4)],
    5: [(0, "s"), (2, "s"), (4, 4), (5, 1)],
    6: [(0, 8)],
    7: [(1, 8), (2, 8), (3, 8)],
    9: [(0, 8)],
    10: [(0, 8), (1, 8), (2, 8)],
    12: [(0, 8), (1, 8), (2, 8), (3, 8), (4, 4)],
    13: [(0, 8), (1, 8), (2, 8), (3, 8), (4, 8)],
    16: [(0, 8), (1, 8), (2, 8), (4, 8)],
    17: [(0, 8)],
    21: [(0, "s"), (2, 1)],
    23: [(0, 4)],
}
_QUANT_DETAILS = {1: [(0, 1)], 2: [(3, 4)], 3: [(3, 4)]}
# TensorType -> bytes per element (types whose size is not fixed are left out).
_ITEMSIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8,
             15: 4, 16: 2, 18: 2}
_MAX_TENSOR_TYPE = 22  # FLOAT8_E5M2, the last TensorType of schema version 3
_ZP_RANGE = {9: (-128, 127), 3: (0, 255), 7: (-32768, 32767), 17: (-8, 7)}


def _union(t: _Table, type_field: int, field: int, members: dict, what: str) -> None:
    utype = t.scalar(type_field, "B")
    sub = t.table(field, f"{what} (type {utype})")
    if sub is None:
        return
    for fid, elem in members.get(utype, ()):
        if elem == "s":
            sub.string(fid)
        else:
            sub.vector(fid, elem)


def _check_tflite(b: bytes) -> None:
    if len(b) < 8 or b[4:8] != b"TFL3":
        raise _Bad(f"file identifier {b[4:8]!r} at bytes 4..8 (not a TFLite flatbuffer)")
    fb = _FlatBuffer(b)
    model = fb.root("Model")
    version = model.scalar(0, "I")
    if version != TFLITE_SCHEMA_VERSION:
        raise _Bad(f"schema version {version}, this runtime reads {TFLITE_SCHEMA_VERSION}")
    opcodes = model.tables(1, "OperatorCode")
    for oc in opcodes:
        oc.string(1)
    buffers = model.tables(4, "Buffer")
    buf_bytes = []
    for k, buf in enumerate(buffers):
        start, n = buf.vector(0, 1)
        off, size = buf.scalar(1, "Q"), buf.scalar(2, "Q")
        if off > 1:  # data stored after the flatbuffer (large models)
            if off + size > len(b):
                raise _Bad(f"Buffer[{k}] data at byte {off} (+{size}) lies outside the file")
            start, n = off, size
        buf_bytes.append((start, n))
    if model.field(8, 4) is not None or model.field(9, 4) is not None:
        raise _Bad("external buffers (weights in another file), which qsa never writes")
    model.string(3)
    for i in model.ints(5):
        if not 0 <= i < len(buffers):
            raise _Bad(f"metadata_buffer {i} out of range (buffers: {len(buffers)})")
    for k, md in enumerate(model.tables(6, "Metadata")):
        md.string(0)
        if not md.scalar(1, "I") < len(buffers):
            raise _Bad(f"Metadata[{k}] names buffer {md.scalar(1, 'I')} of {len(buffers)}")
    subgraphs = model.tables(2, "SubGraph")
    if not subgraphs:
        raise _Bad("no subgraph")
    codes = [max(oc.scalar(0, "b"), oc.scalar(3, "i")) for oc in opcodes]
    n_tensors = [_check_subgraph(b, sg, codes, buf_bytes) for sg in subgraphs]
    for k, sd in enumerate(model.tables(7, "SignatureDef")):
        sd.string(2)
        g = sd.scalar(4, "I")
        if not g < len(subgraphs):
            raise _Bad(f"SignatureDef[{k}] names subgraph {g} of {len(subgraphs)}")
        for fid in (0, 1):
            for tm in sd.tables(fid, f"SignatureDef[{k}] TensorMap"):
                tm.string(0)
                if not tm.scalar(1, "I") < n_tensors[g]:
                    raise _Bad(f"SignatureDef[{k}] names tensor {tm.scalar(1, 'I')} of "
                               f"{n_tensors[g]}")


def _check_subgraph(b: bytes, sg: _Table, codes: list[int], buf_bytes: list) -> int:
    import numpy as np

    what = sg.what
    tensors = sg.tables(0, f"{what} Tensor")
    n = len(tensors)
    for t in tensors:
        shape = t.ints(0)
        if any(d < 0 for d in shape):
            raise _Bad(f"{t.what}: negative dimension in shape {shape}")
        if any(d < -1 for d in t.ints(7)):
            raise _Bad(f"{t.what}: shape_signature {t.ints(7)}")
        count = math.prod(shape)
        if count > _MAX_ELEMENTS:
            raise _Bad(f"{t.what}: shape {shape} has {count:,} elements")
        ttype = t.scalar(1, "b")
        if not 0 <= ttype <= _MAX_TENSOR_TYPE:
            raise _Bad(f"{t.what}: tensor type {ttype}")
        bi = t.scalar(2, "I")
        if not bi < len(buf_bytes):
            raise _Bad(f"{t.what}: buffer index {bi} of {len(buf_bytes)}")
        t.string(3)
        start, nbytes = buf_bytes[bi]
        if nbytes and ttype in _ITEMSIZE and nbytes != count * _ITEMSIZE[ttype]:
            raise _Bad(
                f"{t.what}: {nbytes} bytes of constant data for shape {shape} x "
                f"{_ITEMSIZE[ttype]} bytes = {count * _ITEMSIZE[ttype]}"
            )
        if nbytes and ttype == 0 and not np.isfinite(
            np.frombuffer(b, "<f4", count, start)
        ).all():
            raise _Bad(f"{t.what}: NaN/Inf in its float32 constant data")
        q = t.table(4, f"{t.what} quantization")
        if q is not None:
            for fid, elem in ((0, 4), (1, 4), (2, 4), (3, 8)):
                q.vector(fid, elem)
            scales = q.vector(2, 4)[1]
            zps = q.vector(3, 8)[1]
            qdim = q.scalar(6, "i")
            sv = np.frombuffer(b, "<f4", scales, q.vector(2, 4)[0]) if scales else ()
            if not all(math.isfinite(v) and v > 0 for v in sv):
                raise _Bad(f"{t.what}: quantization scales must be finite and > 0")
            lo, hi = _ZP_RANGE.get(ttype, (-(1 << 31), (1 << 31) - 1))
            if any(not lo <= z <= hi for z in q.ints(3, "q")):
                raise _Bad(f"{t.what}: zero point outside [{lo}, {hi}] for tensor type {ttype}")
            if scales > 1 and not (0 <= qdim < len(shape) and shape[qdim] == scales):
                raise _Bad(
                    f"{t.what}: {scales} per-channel scales on dimension {qdim} of shape "
                    f"{shape}"
                )
            # TFLM reads zero_point[i] for every scale[i], or zero_point[0] for all of them
            # when there is one (its space-saving form for weights; LiteRT gets it widened)
            if zps != scales and not (zps == 1 and scales > 1):
                raise _Bad(f"{t.what}: {zps} zero points for {scales} scales")
            _union(q, 4, 5, _QUANT_DETAILS, f"{t.what} quantization details")
        sp = t.table(6, f"{t.what} sparsity")
        if sp is not None:
            raise _Bad(f"{t.what}: sparse tensor, which qsa never writes")
        for vt in t.tables(9, f"{t.what} variant"):
            vt.ints(0)
    for fid, name in ((1, "inputs"), (2, "outputs")):
        idx = sg.ints(fid)
        if not idx:
            raise _Bad(f"{what} has no {name}")
        if any(not 0 <= i < n for i in idx):
            raise _Bad(f"{what} {name} {idx}: tensor index out of range (tensors: {n})")
    # a tensor an op writes: not a constant, not a graph input, written by one op only
    written = {i: "a graph input" for i in sg.ints(1)}
    for k, t in enumerate(tensors):
        if buf_bytes[t.scalar(2, "I")][1]:
            written[k] = "a constant"
    variables = {k for k, t in enumerate(tensors) if t.scalar(5, "B")}
    for op in sg.tables(3, f"{what} Operator"):
        for i in op.ints(2):
            if i >= 0 and i not in variables:
                if i in written:
                    raise _Bad(f"{op.what} writes tensor {i}, {written[i]}")
                written[i] = "another op's output"
    for op in sg.tables(3, f"{what} Operator"):
        oi = op.scalar(0, "I")
        if not oi < len(codes):
            raise _Bad(f"{op.what}: opcode index {oi} of {len(codes)}")
        for fid in (1, 2, 8):
            idx = op.ints(fid)
            if any(not -1 <= i < n for i in idx):
                raise _Bad(f"{op.what}: tensor index out of range in {idx} (tensors: {n})")
        op.vector(5, 1)
        op.vector(7, 1)
        if op.scalar(9, "Q") or op.scalar(10, "Q"):
            off, size = op.scalar(9, "Q"), op.scalar(10, "Q")
            if off + size > len(b):
                raise _Bad(f"{op.what}: custom options at {off} (+{size}) outside the file")
        _union(op, 3, 4, _OPTIONS, f"{op.what} options")
        _union(op, 11, 12, _OPTIONS_2, f"{op.what} options2")
    sg.string(4)
    shapes = [tuple(t.ints(0)) for t in tensors]
    consts = {}
    for k, t in enumerate(tensors):
        start, nbytes = buf_bytes[t.scalar(2, "I")]
        ttype = t.scalar(1, "b")
        if nbytes and ttype in (2, 4):  # int32 / int64 constants: shapes, indices, axes
            consts[k] = [int(v) for v in np.frombuffer(b, "<i4" if ttype == 2 else "<i8",
                                                       nbytes // _ITEMSIZE[ttype], start)]
    for op in sg.tables(3, f"{what} Operator"):
        _check_op_shapes(op, codes[op.scalar(0, "I")], shapes, consts)
    return n


# -- TFLite op shape checks: TFLite-Micro kernels trust the shapes and index tensors in the
# file, so a mutated one reads or writes out of bounds. Checked for the ops qsa exports use.
_BINARY = {0, 41, 18, 42, 55, 57, 99, 78, 156, 54}  # ADD SUB MUL DIV MAX MIN SQDIFF POW ATAN2 PRELU
_UNARY = {19, 20, 21, 28, 14, 6, 114, 47, 59, 73, 75, 76, 101, 117, 66, 108}
_SAME_COUNT = {22, 43, 70}  # RESHAPE SQUEEZE EXPAND_DIMS
_INDEXED = {2, 3, 4, 9, 34, 36, 39, 40, 45, 60, 65, 74, 126}  # the other ops checked below
_NO_INPUTS = {129, 142}  # CALL_ONCE, VAR_HANDLE: the builtin ops that read no tensor


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    out = []
    for x, y in zip(((1,) * len(b) + a)[-max(len(a), len(b)):],
                    ((1,) * len(a) + b)[-max(len(a), len(b)):], strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(out)


def _conv_out(size: int, k: int, stride: int, dilation: int, padding: int) -> int:
    if padding == 0:  # SAME
        return (size + stride - 1) // stride
    return (size - ((k - 1) * dilation + 1) + stride) // stride


def _check_op_shapes(op: _Table, code: int, shapes: list, consts: dict) -> None:
    ins, outs = op.ints(1), op.ints(2)

    def shape(i):
        return shapes[i] if i >= 0 else None

    def bad(msg):
        raise _Bad(f"{op.what} (builtin op {code}): {msg}")

    checked = code in _BINARY or code in _UNARY or code in _SAME_COUNT or code in _INDEXED
    # every kernel reads its first input and output unchecked (a lost list segfaulted LiteRT)
    if (not outs or (not ins and code not in _NO_INPUTS)
            or (checked and (ins[0] < 0 or outs[0] < 0))):
        bad(f"inputs {ins} / outputs {outs}")
    opts = op.table(4, f"{op.what} options")

    def opt(i, fmt, default=0):
        return default if opts is None else opts.scalar(i, fmt, default)

    if code in _BINARY:
        if len(ins) < 2 or ins[1] < 0:
            bad(f"inputs {ins}")
        want = _broadcast(shape(ins[0]), shape(ins[1]))
        if want is None or want != shape(outs[0]):
            bad(f"inputs {shape(ins[0])}, {shape(ins[1])} -> output {shape(outs[0])}")
    elif code in _UNARY:
        if shape(ins[0]) != shape(outs[0]):
            bad(f"input {shape(ins[0])} -> output {shape(outs[0])}")
    elif code in _SAME_COUNT:
        if math.prod(shape(ins[0])) != math.prod(shape(outs[0])):
            bad(f"input {shape(ins[0])} -> output {shape(outs[0])}")
    elif code == 39:  # TRANSPOSE
        perm = consts.get(ins[1]) if len(ins) > 1 else None
        x = shape(ins[0])
        if perm is None or sorted(perm) != list(range(len(x))) or shape(outs[0]) != tuple(
            x[p] for p in perm
        ):
            bad(f"perm {perm} of input {x} -> output {shape(outs[0])}")
    elif code == 65:  # SLICE
        x = shape(ins[0])
        begin = consts.get(ins[1]) if len(ins) > 2 else None
        size = consts.get(ins[2]) if len(ins) > 2 else None
        if begin is None or size is None or not len(begin) == len(size) == len(x):
            bad(f"begin {begin} / size {size} for input {x}")
        size = [d - b if s == -1 else s for b, s, d in zip(begin, size, x, strict=True)]
        if any(b < 0 or s < 0 or b + s > d for b, s, d in zip(begin, size, x, strict=True)):
            bad(f"begin {begin} / size {size} outside input {x}")
        if tuple(size) != shape(outs[0]):
            bad(f"slice {size} -> output {shape(outs[0])}")
    elif code == 2:  # CONCATENATION
        xs = [shape(i) for i in ins if i >= 0]
        y = shape(outs[0])
        axis = opt(0, "i")
        axis = axis + len(y) if axis < 0 else axis
        if not 0 <= axis < len(y) or any(len(x) != len(y) for x in xs) or any(
            x[:axis] + x[axis + 1 :] != y[:axis] + y[axis + 1 :] for x in xs
        ) or sum(x[axis] for x in xs) != y[axis]:
            bad(f"inputs {xs} on axis {axis} -> output {y}")
    elif code == 9:  # FULLY_CONNECTED
        if len(ins) < 2 or ins[1] < 0:
            bad(f"inputs {ins}")
        x, w, y = shape(ins[0]), shape(ins[1]), shape(outs[0])
        if len(w) != 2 or w[1] <= 0 or math.prod(x) % w[1] or math.prod(y) != math.prod(
            x
        ) // w[1] * w[0] or (len(ins) > 2 and ins[2] >= 0 and math.prod(shape(ins[2])) != w[0]):
            bad(f"input {x}, weights {w} -> output {y}")
    elif code in (3, 4):  # CONV_2D, DEPTHWISE_CONV_2D
        if len(ins) < 2 or ins[1] < 0:
            bad(f"inputs {ins}")
        x, w, y = shape(ins[0]), shape(ins[1]), shape(outs[0])
        sw, sh = opt(1, "i"), opt(2, "i")
        dw, dh = (opt(4, "i", 1), opt(5, "i", 1)) if code == 3 else (opt(5, "i", 1),
                                                                     opt(6, "i", 1))
        if len(x) != 4 or len(w) != 4 or len(y) != 4 or min(sw, sh, dw, dh) < 1:
            bad(f"input {x}, filter {w}, output {y}, strides {sw, sh}, dilations {dw, dh}")
        ch_ok = (x[3] % w[3] == 0 and w[3] > 0 and w[0] == y[3]) if code == 3 else (
            w[0] == 1 and x[3] > 0 and w[3] == y[3] and y[3] == x[3] * opt(3, "i"))
        pad = opt(0, "b")
        oh = _conv_out(x[1], w[1], sh, dh, pad)
        ow = _conv_out(x[2], w[2], sw, dw, pad)
        if not ch_ok or y[0] != x[0] or (y[1], y[2]) != (oh, ow) or (
            len(ins) > 2 and ins[2] >= 0 and math.prod(shape(ins[2])) != y[3]
        ):
            bad(f"input {x}, filter {w} (strides {sw, sh}) -> output {y}")
    elif code == 126:  # BATCH_MATMUL (options: adj_x, adj_y)
        if len(ins) < 2 or ins[1] < 0:
            bad(f"inputs {ins}")
        x, w, y = shape(ins[0]), shape(ins[1]), shape(outs[0])
        if not (2 <= len(x) <= 5 and 2 <= len(w) <= 5):
            bad(f"inputs {x}, {w}: ranks 2 to 5")
        m, k = (x[-1], x[-2]) if opt(0, "b") else (x[-2], x[-1])
        k2, n = (w[-1], w[-2]) if opt(1, "b") else (w[-2], w[-1])
        batch = _broadcast(x[:-2], w[:-2])
        if k != k2 or batch is None or y != batch + (m, n):
            bad(f"inputs {x} @ {w} -> output {y}")
    elif code in (34, 60):  # PAD, PADV2
        x, y = shape(ins[0]), shape(outs[0])
        pads = consts.get(ins[1]) if len(ins) > 1 else None
        if pads is None or len(pads) != 2 * len(x) or min(pads, default=0) < 0 or y != tuple(
            d + pads[2 * k] + pads[2 * k + 1] for k, d in enumerate(x)
        ):
            bad(f"paddings {pads} of input {x} -> output {y}")
    elif code == 45:  # STRIDED_SLICE
        strides = consts.get(ins[3]) if len(ins) > 3 else None
        if strides is None or 0 in strides or math.prod(shape(outs[0])) > math.prod(
            shape(ins[0])
        ):
            bad(f"strides {strides}, input {shape(ins[0])} -> output {shape(outs[0])}")
    elif code in (40, 74):  # MEAN, SUM
        axes = consts.get(ins[1]) if len(ins) > 1 else None
        r = len(shape(ins[0]))
        if axes is None or any(not -r <= a < r for a in axes):
            bad(f"axes {axes} for a rank-{r} input")
    elif code == 36:  # GATHER
        axis = opt(0, "i")
        x = shape(ins[0])
        axis = axis + len(x) if axis < 0 else axis
        idx = consts.get(ins[1]) if len(ins) > 1 else None
        if not 0 <= axis < len(x) or (idx is not None and any(
            not 0 <= i < x[axis] for i in idx
        )):
            bad(f"indices {idx} on axis {axis} of input {x}")


# -- ExecuTorch .pte ------------------------------------------------------------------------


def _check_pte(b: bytes) -> None:
    if len(b) < 8 or b[4:8] != b"ET12":
        raise _Bad(f"file identifier {b[4:8]!r} at bytes 4..8 (not an ExecuTorch program)")
    if len(b) < 40 or b[8:12] != b"eh00":
        raise _Bad(f"extended header magic {b[8:12]!r} at bytes 8..12 (expected b'eh00')")
    length, program_size, base = struct.unpack_from("<IQQ", b, 12)
    if length < 24:
        raise _Bad(f"extended header length {length}")
    seg_size = struct.unpack_from("<Q", b, 32)[0] if length >= 32 else 0
    if not 40 <= program_size <= len(b):
        raise _Bad(f"program size {program_size} for a {len(b)}-byte file")
    if base and not (program_size <= base <= len(b) and base + seg_size <= len(b)):
        raise _Bad(f"segments at byte {base} (+{seg_size}) for a {len(b)}-byte file")
    fb = _FlatBuffer(b[:program_size])
    program = fb.root("Program")
    segments = []
    for k, seg in enumerate(program.tables(4, "DataSegment")):
        off, size = seg.scalar(0, "Q"), seg.scalar(1, "Q")
        if not base or base + off + size > len(b) or (seg_size and off + size > seg_size):
            raise _Bad(f"DataSegment[{k}] at {base}+{off} (+{size}) outside the file")
        segments.append(size)
    cs = program.table(5, "constant_segment")
    subs = [cs] if cs is not None else []
    subs += program.tables(6, "mutable_data_segments")
    for s in subs:
        i = s.scalar(0, "I")
        offsets = s.ints(1, "Q")
        if offsets and not (i < len(segments) and max(offsets) <= segments[i]):
            raise _Bad(f"{s.what}: offsets into segment {i} outside it")
    keys = set()
    for nd in program.tables(7, "NamedData"):
        keys.add(nd.string(0))
        if not nd.scalar(1, "I") < len(segments):
            raise _Bad(f"{nd.what}: segment {nd.scalar(1, 'I')} of {len(segments)}")
    program.tables(2, "Buffer")
    inline = program.tables(3, "BackendDelegateInlineData")
    plans = program.tables(1, "ExecutionPlan")
    if "forward" not in [p.string(0) for p in plans]:
        raise _Bad("no 'forward' method in the program")
    n_args = {}  # (plan, delegate) -> the arguments its delegate call must pass
    for p_i, plan in enumerate(plans):
        for op in plan.tables(6, f"{plan.what} Operator"):
            op.string(0)  # kernel names: the runtime prints an unknown one
            op.string(1)
        for d_i, d in enumerate(plan.tables(7, f"{plan.what} BackendDelegate")):
            backend = d.string(0)
            ref = d.table(1, f"{d.what} processed")
            if ref is None:
                raise _Bad(f"{d.what}: no processed data")
            loc, idx = ref.scalar(0, "B"), ref.scalar(1, "I")
            if loc == 0:  # inline
                if not idx < len(inline):
                    raise _Bad(f"{d.what}: inline data {idx} of {len(inline)}")
                start, n = inline[idx].vector(0, 1)
            elif loc == 1 and idx < len(segments):
                segs = program.tables(4, "DataSegment")
                start, n = base + segs[idx].scalar(0, "Q"), segments[idx]
            else:
                raise _Bad(f"{d.what}: data location {loc}, index {idx}")
            if backend == "XnnpackBackend":
                n_args[p_i, d_i] = _check_xnnpack(b[start : start + n], keys, d.what)
    schema = _program_schema()
    if schema is not None:
        _check_plans(schema.walk(program, "Program"), n_args)


_ET_ITEMSIZE = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4,
                15: 2, 22: 2, 23: 1, 24: 1, 25: 1, 26: 1, 27: 2, 28: 4, 29: 8}


def _check_plans(prog: dict, n_args: dict) -> None:
    """The indices an ExecuTorch method follows at load and run time (the runtime's own
    flatbuffer verification checks bounds, not these)."""
    n_const = max(len(prog.get("constant_buffer") or []),
                  len((prog.get("constant_segment") or {}).get("offsets") or []))
    for p, plan in enumerate(prog.get("execution_plan") or []):
        what = f"ExecutionPlan[{p}]"
        values = plan.get("values") or []
        nv, nops = len(values), len(plan.get("operators") or [])
        ndel = len(plan.get("delegates") or [])
        mem = plan.get("non_const_buffer_sizes") or []

        def idx(v, n, name, where):
            if not isinstance(v, int) or not 0 <= v < n:
                raise _Bad(f"{where}: {name} {v} of {n}")

        for name in ("inputs", "outputs"):
            for v in plan.get(name) or []:
                idx(v, nv, "value", f"{what} {name}")
                if ((values[v] or {}).get("val") or {}).get("__type__") != "Tensor":
                    raise _Bad(f"{what} {name}: value {v} is not a tensor")
        for k, ev in enumerate(values):
            val = (ev or {}).get("val") or {}
            kind = val.get("__type__")
            if kind in ("TensorList", "OptionalTensorList"):
                for v in val.get("items") or []:
                    if not (kind == "OptionalTensorList" and v == -1):
                        idx(v, nv, "item", f"{what} value {k}")
            if kind != "Tensor":
                continue
            sizes = val.get("sizes") or []
            if any(d < 0 for d in sizes) or math.prod(sizes) > _MAX_ELEMENTS:
                raise _Bad(f"{what} value {k}: tensor sizes {sizes}")
            order = val.get("dim_order")
            if order is not None and order != len(sizes):
                raise _Bad(f"{what} value {k}: {order} dim_order entries for sizes {sizes}")
            if val.get("data_buffer_idx", 0) and val["data_buffer_idx"] >= n_const:
                raise _Bad(f"{what} value {k}: constant buffer {val['data_buffer_idx']} of "
                           f"{n_const}")
            alloc = val.get("allocation_info")
            if not (val.get("data_buffer_idx") or alloc or val.get("extra_tensor_info")):
                raise _Bad(f"{what} value {k}: a tensor with no storage (no constant data, no "
                           "planned memory)")
            if alloc:
                m = alloc.get("memory_id", 0)
                off = alloc.get("memory_offset_low", 0) + (alloc.get("memory_offset_high", 0)
                                                           << 32)
                size = math.prod(sizes) * _ET_ITEMSIZE.get(val.get("scalar_type", 6), 1)
                if not 0 < m < len(mem) or off + size > mem[m]:
                    raise _Bad(f"{what} value {k}: planned at memory {m} offset {off} "
                               f"(+{size}), buffers {mem}")
        for c, chain in enumerate(plan.get("chains") or []):
            where = f"{what} chain {c}"
            for name in ("inputs", "outputs"):
                for v in chain.get(name) or []:
                    idx(v, nv, "value", f"{where} {name}")
            instrs = chain.get("instructions") or []
            for i, ins in enumerate(instrs):
                a = (ins or {}).get("instr_args") or {}
                kind = a.get("__type__")
                w = f"{where} instruction {i} ({kind})"
                if kind is None:
                    raise _Bad(f"{w}: no arguments")
                if kind == "KernelCall":
                    idx(a.get("op_index", 0), nops, "operator", w)
                    op = plan["operators"][a["op_index"]] or {}
                    for v in a.get("args") or []:
                        idx(v, nv, "argument", w)
                    _check_kernel_args(op, a.get("args") or [], values, w)
                if kind == "DelegateCall":
                    d = a.get("delegate_index", 0)
                    idx(d, ndel, "delegate", w)
                    want = n_args.get((p, d))
                    if want is not None and len(a.get("args") or []) != want:
                        raise _Bad(f"{w}: {len(a.get('args') or [])} arguments for a delegate "
                                   f"graph with {want} inputs and outputs")
                for v in a.get("args") or []:
                    idx(v, nv, "argument", w)
                for f in ("move_from", "move_to", "cond_value_index", "value_index"):
                    if f in a:
                        idx(a[f], nv, f, w)
                if "destination_instruction" in a:
                    idx(a["destination_instruction"], len(instrs), "destination", w)


# torch schema type -> the EValue kinds a kernel accepts for it (the runtime asserts, i.e.
# aborts, on another kind)
_ARG_KINDS = {
    "Tensor": {"Tensor"}, "int": {"Int"}, "SymInt": {"Int"}, "float": {"Double"},
    "bool": {"Bool"}, "str": {"String"}, "List[int]": {"IntList"}, "List[SymInt]": {"IntList"},
    "List[float]": {"DoubleList"}, "List[bool]": {"BoolList"}, "List[Tensor]": {"TensorList"},
    "List[Optional[Tensor]]": {"OptionalTensorList"}, "Scalar": {"Int", "Double", "Bool"},
    "number": {"Int", "Double", "Bool"}, "ScalarType": {"Int"}, "Layout": {"Int"},
    "MemoryFormat": {"Int"}, "Device": {"Int"},
}


def _check_kernel_args(op: dict, args: list, values: list, where: str) -> None:
    """A kernel call's arguments against the operator's torch schema (arguments, then the
    returns), where torch knows the operator; unknown operators are left to the runtime."""
    name = op.get("name") or ""
    try:
        import torch

        ns, _, base = name.partition("::")
        packet = getattr(getattr(torch.ops, ns), base)
        schema = getattr(packet, op.get("overload") or "default")._schema
    except Exception:  # not a torch operator (or torch absent): the runtime checks it
        return
    types = [str(x.type) for x in schema.arguments] + [str(x.type) for x in schema.returns]
    if len(args) != len(types):
        raise _Bad(f"{where}: {len(args)} arguments for {name}.{op.get('overload')}, which "
                   f"takes {len(types)}")
    for k, (v, t) in enumerate(zip(args, types, strict=True)):
        optional = t.startswith("Optional[")
        allowed = _ARG_KINDS.get(t[9:-1] if optional else t)
        if allowed is None:
            continue
        got = ((values[v] or {}).get("val") or {}).get("__type__", "Null")
        if got not in allowed and not (optional and got == "Null"):
            raise _Bad(f"{where}: argument {k} of {name} is a {got} value, expected {t}")


_PROGRAM_SCHEMA: list = []


def _program_schema() -> _Schema | None:
    """program.fbs (+ scalar_type.fbs) from the installed executorch, or None."""
    if not _PROGRAM_SCHEMA:
        import importlib.util

        spec = importlib.util.find_spec("executorch")
        found = None
        for root in list(spec.submodule_search_locations or []) if spec else []:
            d = Path(root) / "schema"
            if (d / "program.fbs").is_file() and (d / "scalar_type.fbs").is_file():
                found = _Schema((d / "program.fbs").read_text() + (d / "scalar_type.fbs")
                                .read_text())
                break
        _PROGRAM_SCHEMA.append(found)
    return _PROGRAM_SCHEMA[0]


def _check_xnnpack(blob: bytes, keys: set, what: str) -> int:
    """The XNNPACK delegate payload: header, the whole XNNGraph flatbuffer walked against the
    schema executorch ships, then what the XNNPACK compiler indexes with: value ids, dims,
    constant buffers and names (it trusts them; a bad one crashes it). Returns the number of
    external values (the delegate call's arguments)."""
    if len(blob) < 30 or blob[4:8] != b"XH00":
        raise _Bad(f"{what}: XNNPACK header magic {blob[4:8]!r} (expected b'XH00')")
    hlen, fb_off, fb_size, c_off, c_size = struct.unpack_from("<HIIIQ", blob, 8)
    if hlen < 30 or fb_off < hlen or fb_off + fb_size > len(blob) or c_off + c_size > len(blob):
        raise _Bad(f"{what}: XNNPACK header sizes outside the {len(blob)}-byte payload")
    g = blob[fb_off : fb_off + fb_size]
    schema = _xnnpack_schema(bytes(g[4:8]))
    if schema is None:
        raise _Bad(f"{what}: XNNPACK flatbuffer identifier {g[4:8]!r} (expected b'XN01')")
    graph = schema.walk(_FlatBuffer(g).root(f"{what} XNNGraph"), "XNNGraph")
    values = graph.get("xvalues") or []
    tensors = []
    for v in values:
        u = (v or {}).get("xvalue_union") or {}
        t = u.get("tensor_value", u)
        if not t:
            raise _Bad(f"{what}: an XValue without a tensor")
        tensors.append((t, u.get("quant_params")))
    ids = {t.get("id_out", 0) for t, _ in tensors}
    if len(ids) != len(tensors) or any(i >= len(tensors) for i in ids):
        raise _Bad(f"{what}: value ids {sorted(ids)[:8]}... are not 0..{len(tensors) - 1}")
    n_consts = max(len(graph.get("constant_buffer") or []), len(graph.get("constant_data") or []))
    externs = graph.get("num_externs", 0)
    for t, q in tensors:
        dims = t.get("dims") or []
        if t.get("num_dims", 0) != len(dims) or math.prod(dims) > _MAX_ELEMENTS:
            raise _Bad(f"{what}: tensor {t.get('id_out')} dims {dims[:8]} (num_dims "
                       f"{t.get('num_dims', 0)})")
        if t.get("constant_buffer_idx", 0) >= max(n_consts, 1):
            raise _Bad(f"{what}: tensor {t.get('id_out')} constant buffer "
                       f"{t.get('constant_buffer_idx')} of {n_consts}")
        ext = t.get("external_id", _NO_ID)
        if ext != _NO_ID and ext >= externs:
            raise _Bad(f"{what}: tensor {t.get('id_out')} external id {ext} of {externs}")
        if q:
            scales = q.get("scale")
            if isinstance(scales, int | float):  # per-tensor quantisation: one scalar scale
                scales = [scales]
            n_sc = q.get("num_scales", len(scales) if scales is not None else 0)
            if q.get("channel_dim", 0) >= max(len(dims), 1) or (
                scales and len(scales) != n_sc and n_sc  # empty: scales in scale_buffer_idx
            ) or q.get("scale_buffer_idx", 0) >= max(n_consts, 1):
                raise _Bad(f"{what}: tensor {t.get('id_out')} quantization {q}")
    dims_of = {t.get("id_out", 0): tuple(t.get("dims") or ()) for t, _ in tensors}
    quant_of = {t.get("id_out", 0): q for t, q in tensors if q}
    for name in ("input_ids", "output_ids"):
        if any(i not in ids for i in graph.get(name) or []):
            raise _Bad(f"{what}: {name} {graph.get(name)} are not value ids")
    # values a node may read: graph inputs, constants, outputs of earlier nodes
    ready = {t.get("id_out", 0) for t, _ in tensors
             if t.get("flags", 0) & 1 or t.get("constant_buffer_idx", 0)}
    for k, node in enumerate(graph.get("xnodes") or []):
        body = (node or {}).get("xnode_union") or {}
        if not body:
            raise _Bad(f"{what}: XNode[{k}] without an operation")
        refs = [(f, v) for f, v in body.items()
                if f.endswith("_id") and isinstance(v, int) and v != _NO_ID]
        for f, v in refs:
            if v not in ids:
                raise _Bad(f"{what}: XNode[{k}] {f} {v} is not a value id")
            if not f.startswith("output") and v not in ready:
                raise _Bad(f"{what}: XNode[{k}] reads value {v} ({f}) before any node "
                           "writes it")
        for f, v in refs:
            if f.startswith("output"):
                if v in ready:
                    raise _Bad(f"{what}: XNode[{k}] writes value {v}, already an input, a "
                               "constant or another node's output")
                ready.add(v)
        try:
            _check_xnode(body, dims_of)
            if body["__type__"] == "XNNStaticReshape":
                _check_reshape_quant(quant_of.get(body.get("input_id")),
                                     quant_of.get(body.get("output_id")))
        except _Bad as e:
            raise _Bad(f"{what}: XNode[{k}] {body['__type__']}: {e}") from None
    for k, cd in enumerate(graph.get("constant_data") or []):
        key = (cd or {}).get("named_key")
        if key and key not in keys:
            raise _Bad(f"{what}: constant {k} {key!r} is not in the program's named data")
        if not key and cd and cd.get("offset", 0) + cd.get("size", 0) > c_size:
            raise _Bad(f"{what}: constant {k} data outside the payload")
    n_io = len(graph.get("input_ids") or []) + len(graph.get("output_ids") or [])
    if externs != n_io:
        raise _Bad(f"{what}: {externs} external values for {n_io} graph inputs and outputs")
    return externs


_NO_ID = 0xFFFFFFFF
_XNN_ELEMENTWISE = {"XNNAdd", "XNNDiv", "XNNMinimum", "XNNMaximum", "XNNMultiply",
                    "XNNSubtract"}


def _check_reshape_quant(qi: dict | None, qo: dict | None) -> None:
    """XNNPACK builds an int8 reshape only when its input and output carry one (scale, zero
    point) (xnn_define_static_reshape: xnn_status_invalid_parameter, the delegate fails at
    load on every CPU). Such a graph once depended on two observers agreeing to the last bit,
    which they did on some exporting CPUs and not on others."""
    if not qi or not qo:
        return
    a = (qi.get("scale"), qi.get("zero_point"))
    b = (qo.get("scale"), qo.get("zero_point"))
    if a != b:
        raise _Bad(f"int8 input (scale, zero point) {a} and output {b} differ, which XNNPACK "
                   "refuses when the delegate is built")


def _check_xnode(n: dict, dims_of: dict) -> None:
    """Shapes of one XNNPACK node against its values' dims (what the compiler trusts)."""
    kind = n["__type__"]

    def dims(field):
        return dims_of.get(n.get(field, _NO_ID), ())

    x, y = dims("input_id") or dims("input1_id"), dims("output_id")
    if "kernel_width" in n:  # convolutions
        w = dims("filter_id")
        kh, kw = n.get("kernel_height", 0), n.get("kernel_width", 0)
        g, gi, go = n.get("groups", 0), n.get("group_input_channels", 0), n.get(
            "group_output_channels", 0)
        if len(w) != 4 or (w[1], w[2]) != (kh, kw) or math.prod(w) != g * gi * go * kh * kw or min(
            n.get("subsampling_height", 0), n.get("subsampling_width", 0),
            n.get("dilation_height", 0), n.get("dilation_width", 0), g) < 1:
            raise _Bad(f"filter {w}, kernel {kh}x{kw}, groups {g} x {gi} -> {go}")
        b = dims("bias_id")
        if n.get("bias_id", _NO_ID) != _NO_ID and math.prod(b) != g * go:
            raise _Bad(f"bias {b} for {g} x {go} outputs")
        if x and (len(x) != 4 or x[3] != g * gi) or y and (len(y) != 4 or y[3] != g * go):
            raise _Bad(f"input {x} / output {y} for groups {g} x {gi} -> {go}")
    elif kind == "XNNStaticReshape":
        shape = n.get("new_shape") or []
        if n.get("num_dims", 0) != len(shape) or (
            x and 0 not in shape and math.prod(shape) != math.prod(x)):
            raise _Bad(f"new shape {shape} for input {x}")
    elif kind == "XNNStaticTranspose":
        perm = n.get("perm") or []
        if n.get("num_dims", 0) != len(perm) or sorted(perm) != list(range(len(perm))) or (
            x and (len(x) != len(perm) or y and y != tuple(x[p] for p in perm))):
            raise _Bad(f"perm {perm} (num_dims {n.get('num_dims', 0)}) of input {x} -> "
                       f"output {y}")
    elif kind == "XNNStaticSlice":
        off, size = n.get("offsets") or [], n.get("sizes") or []
        if not len(off) == len(size) == n.get("num_dims", 0) or x and (len(x) != len(off) or any(
            o + sz > d for o, sz, d in zip(off, size, x, strict=True))):
            raise _Bad(f"offsets {off} sizes {size} of input {x}")
    elif kind == "XNNStaticConstantPad":
        pre, post = n.get("pre_paddings") or [], n.get("post_paddings") or []
        if len(pre) != len(post) or x and len(x) != len(pre):
            raise _Bad(f"paddings {pre} / {post} for input {x}")
    elif kind in _XNN_ELEMENTWISE:
        want = _broadcast(dims("input1_id"), dims("input2_id"))
        if want is None or (y and want != y):
            raise _Bad(f"inputs {dims('input1_id')}, {dims('input2_id')} -> output {y}")
    elif kind == "XNNFullyConnected":
        w, b = dims("filter_id"), dims("bias_id")
        if len(w) != 2 or x and x[-1] not in w or y and y[-1] not in w or (
            n.get("bias_id", _NO_ID) != _NO_ID and b and y and math.prod(b) != y[-1]):
            raise _Bad(f"input {x}, filter {w}, bias {b} -> output {y}")
    elif kind == "XNNBatchMatrixMultiply":
        a, b = dims("input1_id"), dims("input2_id")
        if a and b and (len(a) < 2 or len(b) < 2 or a[-1] not in b[-2:]):
            raise _Bad(f"inputs {a} x {b}")
    elif "output_id" in n and "input_id" in n and kind != "XNNGlobalAvgPooling2d" and (
        "Pooling" not in kind and kind != "XNNStaticResizeBilinear2D"
    ):  # unary elementwise
        if x and y and math.prod(x) != math.prod(y):
            raise _Bad(f"input {x} -> output {y}")
    for f in ("axis",):
        if f in n and y and n[f] >= len(y):
            raise _Bad(f"axis {n[f]} of a rank-{len(y)} output")


# -- a flatbuffers schema (.fbs) walker, for the XNNPACK graph schema executorch ships ------

_SCALARS = {
    "bool": "B", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "int": "i",
    "uint": "I", "long": "q", "ulong": "Q", "float": "f", "double": "d", "int8": "b",
    "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q",
    "uint64": "Q", "float32": "f", "float64": "d",
}


class _Schema:
    """Tables, unions and enums of a .fbs file (no structs, no vectors of unions); ``walk``
    verifies a table and everything below it, returning ``{field: value}`` (vectors of
    scalars as lists, except byte vectors: their length)."""

    def __init__(self, text: str):
        import re

        text = re.sub(r"//[^\n]*", "", text)
        self.identifier = (re.findall(r'file_identifier\s+"(....)"', text) or [""])[0]
        self.enums = {n: t for n, t in re.findall(r"enum\s+(\w+)\s*:\s*(\w+)", text)}
        self.unions: dict[str, list[str]] = {}
        for name, body in re.findall(r"union\s+(\w+)\s*\{([^}]*)\}", text):
            members = [m.strip() for m in body.split(",") if m.strip()]
            self.unions[name] = members  # type value k+1 -> members[k] ("Alias: Table")
        self.tables: dict[str, list[tuple[str, str]]] = {}
        for name, body in re.findall(r"table\s+(\w+)\s*\{([^}]*)\}", text):
            fields = []
            for decl in body.split(";"):
                m = re.match(r"\s*(\w+)\s*:\s*(\[?\s*\w+\s*\]?)", decl)
                if m:
                    fields.append((m.group(1), m.group(2).replace(" ", "")))
            self.tables[name] = fields
        if re.search(r"\bstruct\s+\w+", text):
            raise ValueError("structs are not supported")

    def _scalar(self, t: str) -> str | None:
        t = self.enums.get(t, t)
        return _SCALARS.get(t)

    def walk(self, table: _Table, name: str, depth: int = 0) -> dict:
        if depth > 16:
            raise _Bad(f"{table.what}: tables nested too deep")
        out: dict = {}
        slot = 0
        for field, ftype in self.tables[name]:
            if ftype in self.unions:
                utype = table.scalar(slot, "B")
                members = self.unions[ftype]
                if utype:
                    if utype > len(members):
                        raise _Bad(f"{table.what}: {field} type {utype} of {len(members)}")
                    alias, _, tname = members[utype - 1].partition(":")
                    sub = table.table(slot + 1, f"{table.what}.{field}")
                    if sub is not None:
                        out[field] = self.walk(sub, (tname or alias).strip(), depth + 1)
                        out[field]["__type__"] = alias.strip()
                slot += 2
                continue
            fmt = self._scalar(ftype)
            if fmt:
                out[field] = table.scalar(slot, fmt)
            elif ftype == "string":
                out[field] = table.string(slot)
            elif ftype.startswith("["):
                inner = ftype[1:-1]
                efmt = self._scalar(inner)
                if efmt in ("b", "B"):
                    out[field] = table.vector(slot, 1)[1]
                elif efmt:
                    out[field] = table.ints(slot, efmt) if table.field(slot, 4) else None
                elif inner == "string":
                    start, n = table.vector(slot, 4)
                    out[field] = n
                elif inner in self.tables:
                    out[field] = [self.walk(t, inner, depth + 1)
                                  for t in table.tables(slot, f"{table.what}.{field}")]
                else:
                    raise _Bad(f"schema: vector of {inner}")
            elif ftype in self.tables:
                sub = table.table(slot, f"{table.what}.{field}")
                out[field] = None if sub is None else self.walk(sub, ftype, depth + 1)
            else:
                raise _Bad(f"schema: type {ftype}")
            slot += 1
        return out


_XNN_SCHEMAS: dict = {}


def _xnnpack_schema(identifier: bytes) -> _Schema | None:
    """The XNNPACK graph schema with this file identifier, from the installed executorch."""
    if not _XNN_SCHEMAS:
        import importlib.util

        spec = importlib.util.find_spec("executorch")
        roots = list(spec.submodule_search_locations or []) if spec else []
        for root in roots:
            for f in ("schema.fbs", "runtime_schema.fbs"):
                p = Path(root) / "backends" / "xnnpack" / "serialization" / f
                if p.is_file():
                    sch = _Schema(p.read_text())
                    _XNN_SCHEMAS.setdefault(sch.identifier.encode(), sch)
    return _XNN_SCHEMAS.get(identifier)


# -- ONNX ----------------------------------------------------------------------------------


def _check_onnx(b: bytes) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load_model_from_string(b)
    except Exception as e:  # protobuf DecodeError and friends
        raise _Bad(f"protobuf parse failed ({type(e).__name__}: {e})") from None
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx.checker.ValidationError, and C++ errors it wraps
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _Bad(f"onnx.checker: {msg}") from None
    if not model.graph.node or not model.graph.input or not model.graph.output:
        raise _Bad("an empty graph (no nodes, inputs or outputs)")
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            raise _Bad(f"initializer {init.name!r} stored in an external file")
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            try:
                arr = numpy_helper.to_array(init)
            except Exception as e:
                raise _Bad(f"initializer {init.name!r}: {e}") from None
            if not np.isfinite(arr).all():
                raise _Bad(f"initializer {init.name!r} holds NaN/Inf")
