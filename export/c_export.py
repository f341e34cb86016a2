"""``qsa export --target c``: the int8 TFLite-Micro network as self-contained C99.

``generate_c(tflite_path, out_dir)`` walks subgraph 0 of a full-integer ``.tflite`` (the file
``TFLMExporter`` writes, in TFLite-Micro's own compact forms) and writes

* ``qsa_nn.h``: the kernel library (``qsa.export.c_kernels``: TFLite-Micro reference int8
  arithmetic, bit-exact);
* ``qsa_net.h`` / ``qsa_net.c``: the weights (packed int8, as the ``.tflite`` stores them) and
  every op's requantisation constants as ``const`` data, one static arena of activations
  planned here (lifetimes, first fit; RESHAPE is an alias), the streaming state as a struct
  and ``qsa_net_init(state)`` / ``qsa_net_step(state, x, out...)`` on int8 tensors.

The multipliers and shifts are computed exactly as each TFLite-Micro kernel's ``Prepare``
computes them (float32 scales, the same float / double expression order, ``QuantizeMultiplier``
with round-half-away), so the C network reproduces the interpreter's integers; the tests check
that on real frames (``tests/test_export_c.py``).

Ops: ADD, SUB, MUL, PRELU, LOGISTIC (a 256-entry table per op, filled at init by the
reference arithmetic), RSQRT, MEAN, SUM, SOFTMAX, FULLY_CONNECTED (per-channel or per-tensor,
constant or activation weights), BATCH_MATMUL, CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE, SLICE,
CONCATENATION, RESHAPE; tensors of rank <= 4.

Two builds (``generate_c(arith=...)``, ``export_c(arith=...)``, ``qsa export --target c
--c-arith exact|fast``): "exact" (the default) computes TFLite-Micro's integers; "fast" trades
that for fewer instructions per hop, its int8 outputs and state within a stated bound of
TFLite-Micro's (``C_FAST_MAX_ABS_INT8`` / ``C_FAST_MEAN_ABS_INT8`` per graph output tensor
over the verification utterance, checked by ``verify_c``; PCM against torch at the int8 floor,
PESQ-WB within 0.02 of TFLite-Micro: the tests). Where the graph allows (``_fast_candidates``),
the fast build (``#define QSA_ARITH_FAST`` in qsa_net.c) rounds once where TFLite-Micro
rounds two to five times: the ADD of a constant after a FULLY_CONNECTED / CONV_2D is folded
into the accumulator (a bias per row of the kernel's block of four quaternion components);
the consumers of a fused Hamilton expansion read B + b_off unrounded (qsa_xham: no
requantisation, exact negations; the consumer's bias and multipliers rescaled to q s_A s_B);
each layer norm (MEAN, SUB, MUL, MEAN, RSQRT, MUL) is one qsa_lnorm pass (centred values kept
exact, the variance through the graph's own RSQRT table); ADD then PRELU is one qsa_addprelu
and every other ADD / SUB one qsa_addg (both terms on a common 2^-11 grid); LOGISTIC then
MUL(x, logistic(x)) (SiLU) is one table (the MUL's reference integers: exact). The exact build
is the same code as before (the fast variants sit behind ``QSA_ARITH_FAST``).

Around the network: ``generate_dsp`` (the PCM API ``qsa_init`` / ``qsa_step``: windowed radix-2
FFT, |X|^c compression and inverses in float32 C without libm, so every IEEE target computes
the same bits), ``write_mcu_files`` / ``build_mcu`` / ``run_qemu`` (Cortex-M4F / M7 ELFs for
QEMU's mps2-an386 / mps2-an500, semihosting file I/O, SysTick under ``-icount shift=0``),
``verify_c`` and ``export_c`` (the ``--target c`` entry point), ``CRuntime`` (runtime kind
``c``).

Measured for qcgan-35k (12-07; host gcc -O2, arm-none-eabi-gcc 12.2 -O2 hard float, QEMU 7.2;
the weights shipped 12-07 07:08, post-filter gain_exponent 1.5). Exact build: network int8
identical to TFLite-Micro on all 125 steps of the verification utterance (6,498 values each) and
on every intermediate tensor; Cortex-M4 / M7 output equal to the host build. Cortex-M4
(mps2-an386): flash 65,480 B (all code, no libm: 56 B under 64 KB), RAM 44,560 B (35,576 static
+ 8,984 stack), 1.57 M instructions per 8 ms hop (M7: 1.58 M; with the weights before 1.56 M,
1.64 M before the fused Hamilton expansions, 1.92 M before the blocked kernels, 2.72 M before
the lean kernels, 4.83 M with the reference kernels only): the faster kernels of
qsa.export.c_kernels where the constants prove them exact. 25 of the 28 quaternion Hamilton
expansions (BATCH_MATMUL of the constant 16 x 4 selection) are no longer materialised: the
FULLY_CONNECTED / CONV_2D that read them take the expansion's input through ``qsa_xham`` (the
same int8 values straight into the blocked kernel's halfword block, the weights' depth reordered
(column, component) at export), planned in a second pass (``_Gen.fusable``: the input kept
alive, no arena slot for the expansion). Each of the ~65K values per hop is rounded exactly as
TFLite-Micro rounds it, and 263K real MACs run; per kernel (M4, 20 hops, SysTick around each
op): qsa_fcx 319K, qsa_convx 258K, qsa_addh 165K, qsa_gather4 137K (half of it op #0 with the
STFT analysis before it), qsa_addc 133K, qsa_mulf 88K, qsa_bmm2 78K, qsa_dwconvs 77K, qsa_reduce
66K, qsa_preluf 60K, qsa_fcxr 37K, qsa_bmm_ham 34K (the 3 expansions feeding a TRANSPOSE, a
BATCH_MATMUL, a DEPTHWISE_CONV_2D), qsa_softmax 23K, the rest of the float DSP ~65K. An ADD of a
constant fused into the exact blocked kernels as an epilogue (its own rounding kept) was tried
and measured no cheaper.

Fast build (``arith="fast"``), after five rounds of issue-31 tuning (12-07 / 12-08): 814,430
instructions per hop on the M4 (M7 817,818), flash 65,252 B (M7 65,264 B), RAM 42,868 B (33,808 +
9,060 stack), its Cortex-M output equal to its host build; after round 4 855,054 (M7 858,821),
64,992 B, 42,868 B; after round 3 895,704 (M7 895,502), 65,316 B,
40,428 B; after round 2 1,005,550 (M7 1,011,042), 64,824 B, 40,060 B. Measured with ``qsa
export qcgan-35k --target c --c-arith fast`` (the report's
``c.mcu``); the network integers are those of the build before any round (1,155,191 / 1,166,108 per
hop, flash 63,632 B), so against TFLite-Micro on the verification utterance the mask output is
within 40 int8 steps (mean 3.5), the other output within 3 (mean 0.4), the state within 18 (means
<= 1.9): inside the stated 64 / 6.0; round 1 changed the DSP's float rounding (PCM: see
docs/benchmarks.md, "C build: instructions per hop"), rounds 2 and 3 nothing (PCM bit-identical).
Round 1 (1,061,836 per hop, flash 65,016 B): ``qsa_blk4n`` two weight words per turn, one loop per
kind of weights (int8 or expanded), ``qsa_rqa`` (SMMLAR of the accumulator itself against 2 m -
2^32: one instruction less per output, the same integers); ``qsa_convx`` expanding each input row
once into a sliding buffer; ``qsa_xham`` as six distinct halfword pairs with STRDs;
``qsa_dwconvs``' constants once per call; the DSP's real FFT and its inverse as one complex FFT of
n / 2 points and a split pass. Round 2: ``qsa_blk4a`` (one unit's blocks as one assembly loop on
the DSP extension, -22.5K), ``qsa_addg_run`` / ``qsa_addprelu_col`` / ``qsa_preluf_col`` (runs and
columns with their constants in registers, SMLAD pairs for ADD, -17.6K), ``qsa_bmm_hamt`` (a
materialised Hamilton expansion writes the layout of the TRANSPOSE that reads it:
``_ham_transposed``, the TRANSPOSE absorbed and planned like a folded ADD, -11.0K and 4,480 B of
arena), ``qsa_bmm2``'s column pairs built two rows by four columns a turn (-5.0K), and the general
paths of ``qsa_convx`` / ``qsa_preluf`` compiled out where no call of the model needs them
(``QSA_CONVX_W4_ONLY`` / ``QSA_PRELUF_COLS_ONLY``, -816 B of flash). Round 3 (-109.8K, the same
integers, PCM bit-identical): ``qsa_blk4a``'s rows by LDM (-29.6K), ``qsa_gather4``'s runs chosen
per row and the 8-byte de-interleave (-21.7K), ``qsa_fcx``'s depth-4 rows (-14.5K, -460 B),
``qsa_xhamn`` (-11.7K), ``qsa_dwconvs`` (-8.7K; its folded bias filled at init, 368 B of RAM
instead of flash), ``qsa_softmax`` (-6.9K), ``qsa_lnorm`` (-5.4K), ``qsa_reduce`` (-4.9K),
``qsa_blk4n`` (-3.6K), ``qsa_bmm2`` (-2.8K). Round 4 (-40.7K, the same integers, PCM
bit-identical): ``qsa_dwconvs`` per output pixel in assembly with its filter's halfword pairs
filled into RAM at init (-16.5K, 2,472 B of RAM), the fast DSP's roundings by VCVTR + SSAT and
the network input's constant row once per hop (-11.4K, -512 B of flash), ``qsa_addprelu`` /
``qsa_preluf`` columns in assembly (-5.6K / -3.1K), ``qsa_bmm2`` by ``qsa_rqa``, ``qsa_logf``'s bits
through VMOV, ``qsa_lnorm``'s constants in registers, ``qsa_softmax``'s CLZ (-5.1K together). The
exact build on the M4: 1,566,795 per hop, 65,480 B, the same ELF text as before; on the M7 its
``qsa_dwconvs`` (the shared tap gathering ``qsa_dw_taps`` / ``qsa_dw4``) is 24 B smaller: 1,579,474
per hop (was 1,582,598), 65,580 B, its output equal to the host build. Round 5 (12-08, -40.6K,
the same integers, PCM bit-identical, the exact build's M4 / M7 text unchanged): ``qsa_reduce``'s
sums of four unrolled with a shift >= 0 as one SMMLAR (``QSA_REDUCE_C4``, -10.3K),
``qsa_bmm_hamt``'s columns in assembly (``qsa_hamt_cols``, -9.5K), ``qsa_lnorm``'s groups of
comps x 3 unrolled (``QSA_LNORM_N3``, -8.8K), ``qsa_bmm2``'s row pairs in assembly with the
requantisation (``qsa_bmm2_row``, B's columns interleaved in pairs, -8.1K; its B builder four
rows a turn, -1.4K), ``qsa_logf``'s bits by one VMOV and ``qsa_lut`` four values a turn
(-2.5K). That is still 1.21x a 50 % load of a 168 MHz M4 (672,000 per hop; 61 % of the core).
Round 2, per function (M4, one hop, QEMU ``-d exec,nochain`` counts, before the qsa_bmm2 step):
qsa_blk4a 315K + qsa_blk4n 38K (the MAC loops ~200K at 13 / 15 instructions per 16 MACs, per block
of four outputs ~56 of requantisation and bookkeeping, per unit ~35 of setup), qsa_bmm2 77K,
qsa_dwconvs 72K, qsa_xham 53K, qsa_gather4 52K, qsa_lnorm 49K, qsa_bmm_hamt 40K, the float DSP
~99K, qsa_addprelu_col 33K, qsa_addg_run 31K, qsa_reduce 22K, qsa_softmax 21K, qsa_preluf_col 19K,
qsa_mulf 17K, memcpy 16K (after round 3: see docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ExportError

# ---------------------------------------------------------------------------------------------
# TFLite's multiplier arithmetic (tensorflow/lite/kernels/internal/quantization_util.cc)


def _round_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def quantize_multiplier(m: float) -> tuple[int, int]:
    """tflite::QuantizeMultiplier (double-rounding build): (Q0.31 multiplier, shift)."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    qf = _round_away(q * (1 << 31))
    if qf == (1 << 31):
        qf //= 2
        shift += 1
    if shift < -31:
        shift, qf = 0, 0
    return int(qf), int(shift)


def _f32(x) -> np.float32:
    return np.float32(x)


def _calc_input_radius(int_bits: int, left_shift: int, total_bits: int = 31) -> int:
    v = (1.0 * ((1 << int_bits) - 1) * float(1 << (total_bits - int_bits))
         / float(1 << left_shift))
    return int(math.floor(v))


# ---------------------------------------------------------------------------------------------
# the graph


@dataclass
class Tensor:
    index: int
    dtype: str
    shape: tuple[int, ...]
    scale: np.ndarray  # float32
    zero_point: np.ndarray  # int64
    qdim: int
    data: np.ndarray | None  # constant data (typed), or None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def s(self) -> np.float32:
        return _f32(self.scale[0]) if self.scale.size else _f32(0.0)

    @property
    def zp(self) -> int:
        return int(self.zero_point[0]) if self.zero_point.size else 0


@dataclass
class Op:
    index: int
    name: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any]


@dataclass
class Graph:
    tensors: list[Tensor]
    ops: list[Op]
    inputs: list[int]
    outputs: list[int]


def read_graph(path: str | os.PathLike) -> Graph:
    from .tflm import _parsed

    model, sg, types, op_name = _parsed(path)
    tensors = []
    for i, t in enumerate(sg.tensors):
        q = t.quantization
        scale = np.asarray(q.scale if q is not None and q.scale is not None else [], np.float32)
        zp = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [],
                        np.int64)
        qdim = int(q.quantizedDimension) if q is not None else 0
        dtype = types.get(t.type, "?")
        data = None
        buf = model.buffers[t.buffer].data if 0 < t.buffer < len(model.buffers) else None
        if buf is not None and len(buf):
            data = np.frombuffer(np.asarray(buf, np.uint8).tobytes(), dtype=np.dtype(dtype))
        shape = tuple(int(v) for v in t.shape) if t.shape is not None else ()
        if data is not None and shape:
            data = data.reshape(shape)
        tensors.append(Tensor(i, dtype, shape, scale, zp, qdim, data))
    ops = []
    for k, o in enumerate(sg.operators or []):
        opt = o.builtinOptions
        options = {kk: v for kk, v in vars(opt).items()} if opt is not None else {}
        ops.append(Op(k, op_name(o), [int(i) for i in (o.inputs if o.inputs is not None else [])],
                      [int(i) for i in o.outputs], options))
    return Graph(tensors, ops, [int(i) for i in sg.inputs], [int(i) for i in sg.outputs])


# ---------------------------------------------------------------------------------------------
# code generation


def _merge(n: list[int], *strides: list[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every stride list walks contiguously, then
    pad to 4 dims (the kernels' loop nest): the same elements in the same order."""
    keep = [k for k in range(len(n)) if n[k] != 1]
    dims = [n[k] for k in keep]
    sts = [[s[k] for k in keep] for s in strides]
    k = len(dims) - 2
    while k >= 0:
        if all(st[k] == st[k + 1] * dims[k + 1] for st in sts):
            dims[k] *= dims[k + 1]
            del dims[k + 1]
            for st in sts:
                st[k] = st[k + 1]
                del st[k + 1]
        k -= 1
    if len(dims) > 4:
        raise ExportError(f"a {len(n)}-d access pattern {n} does not fold to 4 dims")
    pad = 4 - len(dims)
    return [1] * pad + dims, [[0] * pad + st for st in sts]


def _strides(shape: list[int]) -> list[int]:
    s, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        s[k] = acc
        acc *= shape[k]
    return s


def _bcast(out_shape, a_shape, b_shape) -> str:
    n4, (_, sa, sb) = _bcast_dims(out_shape, a_shape, b_shape)
    return f"{{{{{_c(n4)}}}, {{{_c(sa)}}}, {{{_c(sb)}}}}}"


def _bcast_dims(out_shape, a_shape, b_shape) -> tuple[list[int], list[list[int]]]:
    """qsa_bcast's dims and (output, a, b) strides, as _merge returns them."""
    n = list(out_shape) or [1]
    r = len(n)

    def st(shape):
        p = [1] * (r - len(shape)) + list(shape)
        if len(p) != r:
            raise ExportError(f"cannot broadcast {shape} to {out_shape}")
        s = _strides(p)
        out = []
        for k in range(r):
            if p[k] == n[k]:
                out.append(s[k] if n[k] > 1 else 0)
            elif p[k] == 1:
                out.append(0)
            else:
                raise ExportError(f"cannot broadcast {shape} to {out_shape}")
        return out

    return _merge(n, _strides(n), st(a_shape), st(b_shape))


def _c(v) -> str:
    return ", ".join(str(int(x)) for x in v)


def _act_range(fused: int) -> tuple[int, int]:
    if fused in (0, None):
        return -128, 127
    raise ExportError(f"fused activation {fused} is not supported by the C export")


def _carray(ctype: str, name: str, data: np.ndarray, per_line: int = 16) -> str:
    flat = np.asarray(data).reshape(-1)
    lines = [f"static const {ctype} {name}[{max(1, flat.size)}] = {{"]
    if flat.size == 0:
        lines.append("  0,")
    for k in range(0, flat.size, per_line):
        lines.append("  " + ", ".join(str(int(v)) for v in flat[k : k + per_line]) + ",")
    lines.append("};")
    return "\n".join(lines)


@dataclass
class CNetwork:
    """What generate_c wrote and measured."""

    files: list[Path]
    arena_bytes: int
    state_bytes: int
    weight_bytes: int
    const_bytes: int
    scratch_bytes: int
    macs: int
    n_ops: int
    inputs: list[dict]
    outputs: list[dict]
    state_pairs: list[tuple[int, int]]
    info: dict = field(default_factory=dict)


class _Gen:
    def __init__(self, g: Graph, debug: bool = False):
        self.g = g
        self.debug = debug
        self.consts: list[str] = []
        self.body: list[str] = []
        self.init: list[str] = []
        self.const_names: dict[int, str] = {}
        self.weight_bytes = 0
        self.const_bytes = 0
        self.macs = 0
        self.scratch = 0
        self.n = 0
        self.dedup: dict = {}
        self.ham: dict[int, dict] = {}  # Hamilton expansions: output tensor -> how to fuse
        self.fuse: dict[int, int] = {}  # the ones fused (see fusable), planned for
        # arith="fast" (see generate_c): the ADDs of a constant folded into the FULLY_CONNECTED /
        # CONV_2D before them ({producer op: ADD op}; bias_ok: the ones the producer's kernel
        # took in this pass, planned for in the next) and LOGISTIC + MUL as one table
        self.fast = False
        self.bias_fold: dict[int, int] = {}
        self.bias_ok: dict[int, int] = {}
        self.silu: dict[int, int] = {}  # {MUL op: LOGISTIC op}
        self.lnorm: dict[int, list[int]] = {}  # {the layer norm's last MUL: its other ops}
        self.addprelu: dict[int, int] = {}  # {PRELU op: the ADD before it}
        self.absorbed: set[int] = set()  # ops whose work another op's kernel does
        # arith fast: Hamilton expansions (qsa_bmm_hamt) that write the layout of the TRANSPOSE
        # reading them ({BATCH_MATMUL op: (TRANSPOSE op, layout)}; hamt_ok: found in this pass,
        # planned for in the next: the TRANSPOSE's output written by the BATCH_MATMUL)
        self.hamt: dict[int, tuple[int, tuple]] = {}
        self.hamt_ok: dict[int, tuple[int, tuple]] = {}
        # arith fast: the kernels' general paths some call needs (else compiled out)
        self.general: set[str] = set()
        # arith fast: the kernels' special paths some call uses (else compiled out)
        self.special: set[str] = set()

    # -- tensors --------------------------------------------------------------------------
    def T(self, i: int) -> Tensor:
        return self.g.tensors[i]

    def const(self, i: int) -> str:
        t = self.T(i)
        if i not in self.const_names:
            name = f"c{i}"
            ctype = {"int8": "int8_t", "int32": "int32_t", "int16": "int16_t"}.get(t.dtype)
            if ctype is None:
                raise ExportError(f"constant tensor {i} has dtype {t.dtype}; expected int8/int32")
            self.consts.append(_carray(ctype, name, t.data))
            self.const_names[i] = name
            nbytes = t.data.nbytes
            self.weight_bytes += nbytes
            self.const_bytes += nbytes
        return self.const_names[i]

    def params(self, ctype: str, body: str) -> str:
        """A const parameter struct (one per distinct value: layers of the same shape share)."""
        key = (ctype, body)
        if key not in self.dedup:
            self.n += 1
            name = f"p{self.n}"
            self.consts.append(f"static const {ctype} {name} = {body};")
            self.dedup[key] = name
        return self.dedup[key]

    def i32s(self, values, ctype: str = "int32_t") -> str:
        v = np.asarray(values, np.int64)
        info = np.iinfo(ctype[:-2])
        if v.size and (v.min() < info.min or v.max() > info.max):
            raise ExportError(f"constant {v.min()}..{v.max()} does not fit {ctype}")
        key = (ctype, tuple(int(x) for x in v.reshape(-1)))
        if key not in self.dedup:
            self.n += 1
            name = f"q{self.n}"
            self.consts.append(_carray(ctype, name, v))
            self.const_bytes += np.dtype(ctype[:-2]).itemsize * v.size
            self.dedup[key] = name
        return self.dedup[key]

    def _table(self, key, prefix: str, ctype: str, fill) -> str:
        """A 256-entry lookup table (int8_t or int32_t) filled by qsa_init with the C call
        ``fill(name)``, declared once per distinct ``key``; -> its name."""
        if key not in self.dedup:
            self.n += 1
            name = self.dedup[key] = f"{prefix}{self.n}"
            self.lut_decls.append(f"static {ctype} {name}[256];")
            self.init.append(f"  {fill(name)}")
            self.lut_bytes += 256 * np.dtype(ctype[:-2]).itemsize
        return self.dedup[key]

    def _ram_array(self, key, prefix: str, ctype: str, n: int, fill) -> str:
        """A RAM array of ``n`` values filled by qsa_init with the C call ``fill(name)`` (a
        constant computed once instead of stored in flash); -> its name."""
        if key not in self.dedup:
            self.n += 1
            name = self.dedup[key] = f"{prefix}{self.n}"
            self.lut_decls.append(f"static {ctype} {name}[{n}];")
            self.init.append(f"  {fill(name)}")
            self.lut_bytes += n * np.dtype(ctype[:-2]).itemsize
        return self.dedup[key]

    def wconst(self, data: np.ndarray) -> str:
        """A constant int8 weight array of the generator's own (a permuted copy)."""
        self.n += 1
        name = f"w{self.n}"
        self.consts.append(_carray("int8_t", name, data))
        self.weight_bytes += data.size
        self.const_bytes += data.size
        return name

    def _hamilton_input(self, i: int, ok: bool, depth: int, blocks: int) -> dict | None:
        """The Hamilton expansion (qsa_bmm_ham) that tensor i is (through RESHAPE), when the
        consumer can take it fused: its depth the four components of n columns, one block of
        four rows per expansion batch. The consumer's weights are then ordered (column,
        component): qsa_xham writes each column's 16 values as qsa_x4 would have expanded them
        from the materialised expansion, so the dot products add the same products."""
        hm = self.ham.get(self.alias.get(i, i)) if self.lean else None
        if hm is None or not ok or depth != 4 * hm["n"] or blocks != hm["nb"]:
            return None
        hm["fused"] += 1
        hm["p"] = self.params("qsa_ham_p", hm["pfast"] if self.fast else hm["pbody"])
        return hm

    def _fast_ham(self, hm: dict, x: Tensor, w: Tensor, o: Tensor, bias: np.ndarray | None,
                  units: int) -> tuple[float, np.ndarray, list]:
        """arith fast, a consumer of a fused Hamilton expansion: qsa_xham gives B + b_off (the
        expansion's values before their rounding, in units of q s_A s_B, no zero point), so
        the consumer's bias is rescaled to that unit and its multipliers too: (the input unit,
        kernel bias per unit, (multiplier, shift) per unit)."""
        xs = hm["xs"]
        wsc = (w.scale.astype(np.float64) if w.scale.size > 1
               else np.full(units, float(w.s)))
        b = (np.zeros(units) if bias is None
             else bias.astype(np.float64).reshape(-1) * float(x.s) * wsc)  # real bias
        kb = np.round(b / (xs * wsc)).astype(np.int64)
        return xs, kb, [quantize_multiplier(xs * float(v) / float(o.s)) for v in wsc]

    def fusable(self) -> dict[int, int]:
        """The expansions whose every consumer read them fused in this pass: {expansion
        output: its input B}. generate_c's second pass plans with them (``self.fuse``: B kept
        alive to the last consumer, no arena slot for the expansion) and drops their
        BATCH_MATMUL (kept in a debug build, which dumps every tensor)."""
        uses: dict[int, int] = {}
        for op in self.g.ops:
            if op.name != "RESHAPE":
                for i in op.inputs:
                    r = self.alias.get(i, i)
                    uses[r] = uses.get(r, 0) + 1
        out = {t: hm["b"] for t, hm in self.ham.items()
               if hm["fused"] and hm["fused"] == uses.get(t, 0)}
        if self.fuse and out != self.fuse:
            raise ExportError(f"Hamilton fusion: planned {sorted(self.fuse)}, fused "
                              f"{sorted(out)}")
        return out

    def _fold(self, op: Op, xs, w: Tensor, kb: np.ndarray, wabs: np.ndarray,
              ok: bool) -> tuple[Tensor, np.ndarray, list] | None:
        """arith fast: the ADD of a constant after FULLY_CONNECTED / CONV_2D ``op`` folded into
        its accumulator, one requantisation instead of two: (the ADD's output tensor, the
        bias per row of a block of four (4, units), per-unit (multiplier, shift)), or None.
        The constant (broadcast) must repeat over the output's (4, units) inner dims, the
        four rows of the kernel's block (the quaternion components). ``xs``: the input scale,
        ``kb``: the unfused kernel bias, ``wabs``: sum |w| per unit (the |acc| bound)."""
        k = self.fold_cand.get(op.index)
        if not self.fast or k is None or not ok:
            return None
        add = self.g.ops[k]
        o = self.T(add.outputs[0])
        b = self.T(add.inputs[1] if add.inputs[0] == op.outputs[0] else add.inputs[0])
        units = len(kb)
        if len(o.shape) < 2 or tuple(o.shape[-2:]) != (4, units) or b.scale.size > 1:
            return None
        try:
            bf = np.broadcast_to(b.data.astype(np.int64) - b.zp, o.shape).reshape(-1, 4, units)
        except ValueError:
            return None
        if not np.all(bf == bf[:1]):
            return None
        wsc = (w.scale.astype(np.float64) if w.scale.size > 1
               else np.full(units, float(w.s)))
        acc_scale = float(xs) * wsc  # the real value of one accumulator unit, per unit
        beta = np.round(float(b.s) * bf[0] / acc_scale[None, :]).astype(np.int64)  # (4, units)
        kb4 = kb.astype(np.int64)[None, :] + beta
        ms = [quantize_multiplier(float(v) / float(o.s)) for v in acc_scale]
        if (not all(_fast_shift(s_) for _, s_ in ms)
                or int((wabs * 255 + np.abs(kb4).max(0)).max()) >= _ACC_BOUND):
            return None
        self.bias_ok[op.index] = k
        return o, kb4, ms

    # -- plan -----------------------------------------------------------------------------
    def plan(self) -> None:
        g = self.g
        self.alias: dict[int, int] = {}
        for k, a in self.bias_fold.items():  # the producer writes the folded ADD's output
            self.alias[g.ops[k].outputs[0]] = g.ops[a].outputs[0]
        for k, (t, _) in self.hamt.items():  # the expansion writes the TRANSPOSE's output
            self.alias[g.ops[k].outputs[0]] = g.ops[t].outputs[0]
        for op in g.ops:
            if op.name == "RESHAPE":
                src = op.inputs[0]
                self.alias[op.outputs[0]] = self.alias.get(src, src)
        is_const = {t.index for t in g.tensors if t.data is not None}
        state_in = g.inputs[1:]
        root = lambda i: self.alias.get(i, i)  # noqa: E731
        first, last = {}, {}
        n_ops = len(g.ops)
        for i in g.inputs:
            first[root(i)] = -1
        for k, op in enumerate(g.ops):
            for i in op.inputs:
                if i >= 0 and i not in is_const:
                    last[root(i)] = max(last.get(root(i), -1), k)
            for i in op.outputs:
                first.setdefault(root(i), k)
        for i in g.outputs:
            last[root(i)] = n_ops
        for t, b in self.fuse.items():  # a fused expansion's consumers read its input
            last[root(b)] = max(last.get(root(b), -1), last.get(t, -1))
        # the fused kernels read their first op's inputs when they write the output
        reads = [(k, g.ops[ops[0]].inputs[:1]) for k, ops in self.lnorm.items()]
        reads += [(k, g.ops[a].inputs) for k, a in self.addprelu.items()]
        for k, ins in reads:
            for i in ins:
                last[root(i)] = max(last.get(root(i), -1), k)
        # the outputs of the ops another kernel does (arith fast) are never written
        dead = {root(i) for k in self.absorbed for i in g.ops[k].outputs} - {
            root(g.ops[k].outputs[0]) for k in self.bias_fold.values()} - {
            root(g.ops[t].outputs[0]) for t, _ in self.hamt.values()}
        self.state_in = set(state_in)
        bufs = [r for r in first if r not in self.state_in and r not in dead
                and (self.debug or r not in self.fuse)]
        order = sorted(bufs, key=lambda r: -self.T(r).size * _itemsize(self.T(r).dtype))
        placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
        self.offset: dict[int, int] = {}
        for r in order:
            size = (self.T(r).size * _itemsize(self.T(r).dtype) + 3) // 4 * 4
            f, la = first[r], last.get(r, first[r])
            if self.debug:  # every tensor kept: the debug build dumps them all at the end
                f, la = -1, n_ops
            off = 0
            for o, s, f2, l2 in sorted(placed):
                if l2 < f or f2 > la:
                    continue
                if off + size <= o:
                    break
                off = max(off, o + s)
            placed.append((off, size, f, la))
            self.offset[r] = off
        self.arena = max((o + s for o, s, _, _ in placed), default=4)

    def ptr(self, i: int) -> str:
        t = self.T(i)
        if t.data is not None:
            return self.const(i)
        r = self.alias.get(i, i)
        if r in self.state_in:
            return f"st->t{r}"
        ctype = "int8_t" if t.dtype == "int8" else "int32_t"
        return f"(({ctype} *)(qsa_arena + {self.offset[r]}))"

    # -- ops ------------------------------------------------------------------------------
    def emit(self, op: Op) -> None:
        fn = getattr(self, "op_" + op.name.lower(), None)
        if fn is None:
            raise ExportError(f"op {op.name} (#{op.index}) is not supported by the C export")
        for i in op.outputs:
            if self.T(i).dtype != "int8":
                raise ExportError(f"op {op.name} #{op.index} writes {self.T(i).dtype}; int8 only")
        self.body.append(f"  /* #{op.index} {op.name} */")
        if op.index in self.absorbed:
            self.body.append("  /* done by another op's kernel (arith fast) */")
            return
        fn(op)
        if op.name != "RESHAPE":
            self.body.append(f"  QSA_MARK({op.index});")

    def op_reshape(self, op):
        pass

    def op_transpose(self, op):
        x = self.T(op.inputs[0])
        perm = [int(v) for v in self.T(op.inputs[1]).data.reshape(-1)]
        s = _strides(list(x.shape))
        self._gather(op, [x.shape[p] for p in perm], [s[p] for p in perm], 0)

    def _gather(self, op, n, st, base):
        n, (st, _) = _merge(n, st, _strides(n))
        nn_ = self.i32s(n, "int16_t")
        ss = self.i32s(st, "int16_t")
        self.body.append(f"  qsa_gather4({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])} + "
                         f"{base}, {nn_}, {ss});")

    def op_slice(self, op):
        x = self.T(op.inputs[0])
        begin = [int(v) for v in self.T(op.inputs[1]).data.reshape(-1)]
        size = [int(v) for v in self.T(op.inputs[2]).data.reshape(-1)]
        size = [x.shape[k] - begin[k] if v < 0 else v for k, v in enumerate(size)]
        s = _strides(list(x.shape))
        base = sum(b * st for b, st in zip(begin, s, strict=True))
        self._gather(op, size, s, base)

    def op_concatenation(self, op):
        o = self.T(op.outputs[0])
        axis = int(op.options.get("axis", 0))
        if axis < 0:
            axis += len(o.shape)
        outer = int(np.prod(o.shape[:axis]))
        inner = int(np.prod(o.shape[axis + 1 :]))
        _act_range(op.options.get("fusedActivationFunction", 0))
        off = 0
        for i in op.inputs:
            t = self.T(i)
            if t.s != o.s or t.zp != o.zp:
                raise ExportError(f"CONCATENATION #{op.index}: inputs quantised unlike the output")
            cols = t.shape[axis] * inner
            self.body.append(f"  qsa_copy2d({self.ptr(op.outputs[0])} + {off}, "
                             f"{o.shape[axis] * inner}, {self.ptr(i)}, {cols}, {outer}, {cols});")
            off += cols

    def _addsub(self, op, sub: int):
        a, b, o = (self.T(i) for i in (*op.inputs, op.outputs[0]))
        if self.fast and _act_range(op.options.get("fusedActivationFunction", 0)) == (-128, 127):
            # arith fast: both terms on a common 2^-11 grid, one requantisation
            su = max(float(a.s), float(b.s)) / 2048
            ka, kb = round(float(a.s) / su), (-1 if sub else 1) * round(float(b.s) / su)
            m, s_ = quantize_multiplier(su / float(o.s))
            if _fast_shift(s_):
                bc = self.params("qsa_bcast", _bcast(o.shape, a.shape, b.shape))
                p = self.params("qsa_addg_p", f"{{{ka}, {kb}, {-a.zp * ka - b.zp * kb}, {m}, "
                                              f"{-s_}, {_rqc(-s_, o.zp)}}}")
                self.body.append(f"  qsa_addg({self.ptr(op.outputs[0])}, "
                                 f"{self.ptr(op.inputs[0])}, {self.ptr(op.inputs[1])}, &{bc}, "
                                 f"&{p});")
                return
        twice_max = 2 * float(max(a.s, b.s)) if not sub else None
        if sub:  # sub_common.cc: float arithmetic, then double
            tm = _f32(2) * max(a.s, b.s)
            r1 = float(_f32(a.s / tm))
            r2 = float(_f32(b.s / tm))
            ro = float(_f32(tm / (_f32(1 << 20) * o.s)))
        else:  # add_common.cc: double
            r1 = float(a.s) / twice_max
            r2 = float(b.s) / twice_max
            ro = twice_max / ((1 << 20) * float(o.s))
        m1, s1 = quantize_multiplier(r1)
        m2, s2 = quantize_multiplier(r2)
        mo, so = quantize_multiplier(ro)
        lo, hi = _act_range(op.options.get("fusedActivationFunction", 0))
        if _fast_term(s1) and _fast_term(s2) and _fast_shift(so) and (lo, hi) == (-128, 127):
            # |operand terms| <= 255 2^19 each: the sum's |acc| < 2^30 for the fast path
            half = (1 << 30, 0)
            is_const = [t.data is not None for t in (a, b)]
            ix = int(is_const[0])  # the activation's input index, when one is a constant
            if (self.lean and is_const.count(True) == 1 and (a, b)[1 - ix].size <= 256
                    and ((m1, s1), (m2, s2))[ix] == half):
                # an activation rescaled by exactly 1/2 and a constant (a bias): the
                # constant's terms once per call
                y, (my, sy) = (a, b)[1 - ix], ((m1, s1), (m2, s2))[1 - ix]
                ey, neg_x, neg_y = -sy, sub and ix == 1, sub and ix == 0
                terms = [(-1 if neg_x else 1) << 19, -(a, b)[ix].zp, int((my, sy) == half),
                         (-1 if neg_y else 1) << 19, -y.zp, my, ey, (1 << (ey - 1)) if ey else 0,
                         -1 if ey else 0, -int(neg_y)]
                bc = self.params("qsa_bcast", _bcast(o.shape, (a, b)[ix].shape, y.shape))
                p = self.params("qsa_addc_p", f"{{{_c(terms)}, {mo}, {-so}, "
                                              f"{_rqc(-so, o.zp)}, {y.size}}}")
                self.body.append(f"  qsa_addc({self.ptr(op.outputs[0])}, "
                                 f"{self.ptr(op.inputs[ix])}, {self.ptr(op.inputs[1 - ix])}, "
                                 f"&{bc}, &{p});")
                return
            if self.lean and half in ((m1, s1), (m2, s2)):
                # one operand rescaled by exactly 1/2: its term is (x + off) 2^19, no rounding
                if (m1, s1) == half:
                    ia, ib, ka, smb, mb, eb = 0, 1, 1 << 19, -sub, m2, -s2
                    bc = self.params("qsa_bcast", _bcast(o.shape, a.shape, b.shape))
                else:  # a - b = -(b) + a: b's term exact, a's term rescaled, b negated for SUB
                    ia, ib, ka, smb, mb, eb = 1, 0, (-1 if sub else 1) << 19, 0, m1, -s1
                    bc = self.params("qsa_bcast", _bcast(o.shape, b.shape, a.shape))
                ta, tb = (a, b)[ia], (a, b)[ib]
                hb, kb = (1 << (eb - 1), -1) if eb else (0, 0)
                p = self.params("qsa_addh_p", f"{{{ka}, {-ta.zp}, {-tb.zp}, {mb}, {eb}, {hb}, "
                                              f"{kb}, {smb}, {mo}, {-so}, "
                                              f"{_rqc(-so, o.zp)}}}")
                self.body.append(f"  qsa_addh({self.ptr(op.outputs[0])}, "
                                 f"{self.ptr(op.inputs[ia])}, {self.ptr(op.inputs[ib])}, &{bc}, "
                                 f"&{p});")
                return
            p = self.params("qsa_addf_p", f"{{{-a.zp}, {-b.zp}, {m1}, {-s1}, {m2}, {-s2}, {mo}, "
                                          f"{-so}, {o.zp}, {sub}}}")
            bc = self.params("qsa_bcast", _bcast(o.shape, a.shape, b.shape))
            self.body.append(f"  qsa_addf({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{self.ptr(op.inputs[1])}, &{bc}, &{p});")
            return
        p = self.params("qsa_add_p", f"{{{-a.zp}, {-b.zp}, {m1}, {s1}, {m2}, {s2}, {mo}, {so}, "
                                     f"{o.zp}, {lo}, {hi}, {sub}}}")
        bc = self.params("qsa_bcast", _bcast(o.shape, a.shape, b.shape))
        self.body.append(f"  qsa_add({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{self.ptr(op.inputs[1])}, &{bc}, &{p});")

    def op_add(self, op):
        self._addsub(op, 0)

    def op_sub(self, op):
        self._addsub(op, 1)

    def op_mul(self, op):
        a, b, o = (self.T(i) for i in (*op.inputs, op.outputs[0]))
        m, s = quantize_multiplier(float(a.s) * float(b.s) / float(o.s))
        if op.index in self.lnorm:  # arith fast: the whole layer norm in one kernel
            self._lnorm(op)
            return
        if op.index in self.silu:  # arith fast: LOGISTIC + this MUL as one table (exact)
            lg = self.g.ops[self.silu[op.index]]
            x, lo_ = self.T(lg.inputs[0]), self.T(lg.outputs[0])
            key = ("silu", *self._logistic_key(lg), -lo_.zp, m, s, o.zp)
            lut = self._table(key, "lut", "int8_t",
                              lambda t: f"qsa_silu_table({t}, {_c(key[1:])});")
            self.body.append(f"  qsa_lut({self.ptr(op.outputs[0])}, {self.ptr(lg.inputs[0])}, "
                             f"{x.size}, {lut});")
            return
        lo, hi = _act_range(op.options.get("fusedActivationFunction", 0))
        bc = self.params("qsa_bcast", _bcast(o.shape, a.shape, b.shape))
        if _fast_shift(s) and (lo, hi) == (-128, 127):  # |acc| <= 2^16
            p = self.params("qsa_mulf_p", f"{{{-a.zp}, {-b.zp}, {m}, {-s}, {o.zp}}}")
            self.body.append(f"  qsa_mulf({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{self.ptr(op.inputs[1])}, &{bc}, &{p});")
            return
        p = self.params("qsa_mul_p", f"{{{-a.zp}, {-b.zp}, {m}, {s}, {o.zp}, {lo}, {hi}}}")
        self.body.append(f"  qsa_mul({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{self.ptr(op.inputs[1])}, &{bc}, &{p});")

    def _addprelu(self, op) -> None:
        """arith fast: the ADD before PRELU ``op`` and the PRELU as qsa_addprelu (one
        requantisation; _fast_candidates checked its shifts)."""
        add = self.g.ops[self.addprelu[op.index]]
        a, b, al, o = (self.T(i) for i in (*add.inputs, op.inputs[1], op.outputs[0]))
        ka, kb, (mp, sp), (mn, sn) = _addprelu_shifts(a, b, al, o)
        bc = self.params("qsa_bcast", _bcast(o.shape, o.shape, al.shape))
        p = self.params("qsa_addprelu_p", f"{{{ka}, {kb}, {-a.zp * ka - b.zp * kb}, {-al.zp}, "
                                          f"{mp}, {-sp}, {_rqc(-sp, o.zp)}, {mn}, {-sn}, "
                                          f"{_rqc(-sn, o.zp)}}}")
        self.body.append(f"  qsa_addprelu({self.ptr(op.outputs[0])}, {self.ptr(add.inputs[0])}, "
                         f"{self.ptr(add.inputs[1])}, {self.ptr(op.inputs[1])}, &{bc}, &{p});")

    def op_prelu(self, op):
        if op.index in self.addprelu:
            self._addprelu(op)
            return
        x, al, o = (self.T(i) for i in (*op.inputs, op.outputs[0]))
        m1, s1 = quantize_multiplier(float(x.s) / float(o.s))
        m2, s2 = quantize_multiplier(float(x.s) * float(al.s) / float(o.s))
        bc = self.params("qsa_bcast", _bcast(o.shape, x.shape, al.shape))
        if self.lean and -22 <= s1 <= 13 and -22 <= s2 <= 13:
            # |x + off| <= 255, |(x + off)(alpha + off)| <= 255^2: 2^(s + 1) times that < 2^31
            n4, (_, sa, sb) = _bcast_dims(o.shape, x.shape, al.shape)
            if not (n4[0] == n4[1] == 1 and sb[2] == 0 and sa[3] == 1 and sa[2] == n4[3]):
                self.general.add("QSA_PRELUF_COLS_ONLY")
            p = self.params("qsa_preluf_p", f"{{{-x.zp}, {-al.zp}, {_c(_rqs(m1, s1, o.zp))}, "
                                            f"{_c(_rqs(m2, s2, o.zp))}}}")
            self.body.append(f"  qsa_preluf({self.ptr(op.outputs[0])}, "
                             f"{self.ptr(op.inputs[0])}, {self.ptr(op.inputs[1])}, &{bc}, &{p});")
            return
        p = self.params("qsa_prelu_p", f"{{{-x.zp}, {-al.zp}, {m1}, {s1}, {m2}, {s2}, {o.zp}}}")
        self.body.append(f"  qsa_prelu({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{self.ptr(op.inputs[1])}, &{bc}, &{p});")

    def _rsqrt_table(self, op) -> tuple[str, int, int]:
        """The 256-entry table of a RSQRT op (filled at init): (name, multiplier, shift)."""
        x, o = self.T(op.inputs[0]), self.T(op.outputs[0])
        m, s = quantize_multiplier(1.0 / float(_f32(np.sqrt(x.s) * o.s)))
        key = ("rsqrt", x.zp, m, s, o.zp)
        lut = self._table(key, "lut", "int8_t",
                          lambda t: f"qsa_rsqrt_table({t}, {x.zp}, {m}, {s}, {o.zp});")
        return lut, m, s

    def _lnorm(self, op) -> None:
        """arith fast: the layer norm ending in MUL ``op`` as qsa_lnorm (see c_kernels)."""
        m1, _, _, m2, rs = (self.g.ops[k] for k in self.lnorm[op.index])
        x, v, r, o = (self.T(i) for i in (m1.inputs[0], m2.outputs[0], rs.outputs[0],
                                          op.outputs[0]))
        comps, inner = x.shape[-2], x.shape[-1]
        n = comps * inner
        groups = x.size // n
        if n > 256 or inner * 255 >= 1 << 15:
            raise ExportError(f"layer norm at #{op.index}: {comps} x {inner} values a group, "
                              "more than qsa_lnorm's 256 (int16 centred values)")
        qmax = n * (inner * 255) ** 2
        kq = max(0, qmax.bit_length() - 31)
        # variance = sum d^2 sx^2 / (inner^2 n); its int8 is q 2^kq sx^2 / (inner^2 n sv)
        mv, sv = quantize_multiplier(float(x.s) ** 2 * 2.0**kq / (inner**2 * n * float(v.s)))
        my, sy = quantize_multiplier(float(x.s) * float(r.s) / (inner * float(o.s)))
        if sv > 0 or not _fast_shift(sy):
            raise ExportError(f"layer norm at #{op.index}: shifts {sv}, {sy} beyond qsa_lnorm's "
                              "range; build with arith='exact'")
        lut, _, _ = self._rsqrt_table(rs)
        if inner == 3:
            self.special.add("QSA_LNORM_N3")  # the groups of 3 x comps values unrolled
        p = self.params("qsa_lnorm_p", f"{{{groups}, {comps}, {inner}, {kq}, {mv}, {sv}, "
                                       f"{v.zp}, {-r.zp}, {my}, {-sy}, {_rqc(-sy, o.zp)}}}")
        self.body.append(f"  qsa_lnorm({self.ptr(op.outputs[0])}, {self.ptr(m1.inputs[0])}, "
                         f"{lut}, &{p});")

    def _logistic_key(self, op) -> tuple[int, int, int, int]:
        """(input zero point, radius, multiplier, left shift) of a LOGISTIC's table."""
        x, o = self.T(op.inputs[0]), self.T(op.outputs[0])
        if o.zp != -128:
            raise ExportError(f"LOGISTIC #{op.index}: output zero point {o.zp}, expected -128")
        q, ls = math.frexp(float(x.s) * float(1 << 27))
        mult = _round_away(q * (1 << 31))
        return x.zp, _calc_input_radius(4, ls, 31), mult, ls

    def op_logistic(self, op):
        x = self.T(op.inputs[0])
        key = ("logistic", *self._logistic_key(op))
        radius, mult, ls = key[2:]
        name = self._table(key, "lut", "int8_t",
                           lambda t: f"qsa_logistic_table({t}, {x.zp}, {radius}, {mult}, {ls});")
        self.body.append(f"  qsa_lut({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{x.size}, {name});")

    def op_rsqrt(self, op):
        x, o = self.T(op.inputs[0]), self.T(op.outputs[0])
        scale = 1.0 / float(_f32(np.sqrt(x.s) * o.s))
        m, s = quantize_multiplier(scale)
        if self.rsqrt_tables:  # int8 -> int8: a 256-entry table filled at init (RAM, exact)
            key = ("rsqrt", x.zp, m, s, o.zp)
            lut = self._table(key, "lut", "int8_t",
                              lambda t: f"qsa_rsqrt_table({t}, {x.zp}, {m}, {s}, {o.zp});")
            self.body.append(f"  qsa_lut({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{x.size}, {lut});")
            return
        self.body.append(f"  qsa_rsqrt({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{x.size}, {x.zp}, {m}, {s}, {o.zp});")

    def _reduce(self, op, mean: bool):
        x, o = self.T(op.inputs[0]), self.T(op.outputs[0])
        axes = sorted({int(a) % len(x.shape) for a in self.T(op.inputs[1]).data.reshape(-1)})
        m, s = quantize_multiplier(float(x.s) / float(o.s))
        count = int(np.prod([x.shape[a] for a in axes]))
        if mean:
            shift = 63 - (64 - int(count).bit_length())
            shift = min(shift, 32, 31 + s)
            m = (m << shift) // count
            s = s - shift
        kept = [x.shape[k] if k not in axes else 1 for k in range(len(x.shape))]
        ks = _strides(kept)
        os_ = [0 if k in axes else ks[k] for k in range(len(x.shape))]
        n_out = int(np.prod(kept))
        if n_out != o.size:
            raise ExportError(f"{op.name} #{op.index}: {n_out} outputs, tensor has {o.size}")
        n4, (_, os4) = _merge(list(x.shape), _strides(list(x.shape)), os_)
        self.scratch = max(self.scratch, n_out)
        if self.fast and n4[2] == 4 and -22 <= s <= 19:
            self.special.add("QSA_REDUCE_C4")  # sums of 4 (the quaternion components) unrolled
        self.body.append(f"  qsa_reduce({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{self.i32s(n4, 'int16_t')}, {self.i32s(os4, 'int16_t')}, {n_out}, "
                         f"{count}, {x.zp}, {m}, {s}, {o.zp}, qsa_acc);")

    def op_mean(self, op):
        self._reduce(op, True)

    def op_sum(self, op):
        self._reduce(op, False)

    def op_softmax(self, op):
        x, o = self.T(op.inputs[0]), self.T(op.outputs[0])
        if o.zp != -128 or float(o.s) != 1.0 / 256:
            raise ExportError(f"SOFTMAX #{op.index}: output must be scale 1/256, zero point -128")
        beta = float(op.options.get("beta", 1.0))
        real = min(beta * float(x.s) * float(1 << (31 - 5)), float((1 << 31) - 1))
        m, ls = quantize_multiplier(real)
        diff_min = -_calc_input_radius(5, ls, 31)
        depth = x.shape[-1]
        key = ("softmax", m, ls, diff_min)
        smx = self._table(key, "smx", "int32_t",
                          lambda t: f"qsa_softmax_table({t}, {m}, {ls}, {diff_min});")
        self.body.append(f"  qsa_softmax({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{x.size // depth}, {depth}, {smx}, {diff_min});")

    def _conv_ms(self, x, w, o, n_ch):
        # PopulateConvolutionQuantizationParams: double arithmetic, per channel or broadcast
        sc = list(w.scale) if w.scale.size > 1 else [w.scale[0]] * n_ch
        return [quantize_multiplier(float(x.s) * float(_f32(v)) / float(o.s)) for v in sc]

    def _conv_mults(self, x, w, o, n_ch):
        ms = self._conv_ms(x, w, o, n_ch)
        return self.i32s([m for m, _ in ms]), self.i32s([s for _, s in ms], "int8_t")

    def op_fully_connected(self, op):
        x, w, o = self.T(op.inputs[0]), self.T(op.inputs[1]), self.T(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        units, depth = w.shape
        rows = x.size // depth
        if rows * depth != x.size or rows * units != o.size:
            raise ExportError(f"FULLY_CONNECTED #{op.index}: {x.shape} x {w.shape} -> {o.shape}")
        per_ch = int(w.scale.size > 1)
        if per_ch:
            ms = [quantize_multiplier(float(x.s) * float(_f32(sc)) / float(o.s))
                  for sc in w.scale]
        else:
            ms = [quantize_multiplier(float(_f32(x.s * w.s)) / float(o.s))]
        lo, hi = _act_range(op.options.get("fusedActivationFunction", 0))
        bvals = self.T(bias).data.astype(np.int64) if bias is not None else None
        if w.data is not None and w.zp == 0 and (bias is None or bvals is not None):
            # constant weights: the input offset's term folded into the bias (CMSIS-NN's
            # kernel sums): sum_k (x + xo) w = sum_k x w + xo sum_k w
            kb = (-x.zp) * w.data.astype(np.int64).reshape(units, depth).sum(1)
            if bvals is not None:
                kb = kb + bvals.reshape(units)
            b, runtime = self.i32s(kb), 0
            bound = int((np.abs(w.data.astype(np.int64)).reshape(units, depth).sum(1) * 128
                         + np.abs(kb)).max())
        else:
            b, runtime = (self.ptr(bias) if bias is not None else "0"), 1
            bmax = int(np.abs(bvals).max()) if bvals is not None and bvals.size else 0
            bound = depth * 255 * 255 + bmax if bias is None or bvals is not None else 1 << 31
        self.macs += rows * units * depth
        if (self.lean and not runtime and depth % 4 == 0 and all(_fast_shift(s_) for _, s_ in ms)
                and (lo, hi) == (-128, 127) and bound < _ACC_BOUND):
            mm, ss = self.i32s([m for m, _ in ms]), self.i32s([s for _, s in ms], "int8_t")
            if depth > 256:
                self.body.append(f"  qsa_fcs({self.ptr(op.outputs[0])}, "
                                 f"{self.ptr(op.inputs[0])}, {self.ptr(op.inputs[1])}, {b}, "
                                 f"{rows}, {depth}, {units}, {mm}, {ss}, {per_ch}, {o.zp});")
                return
            hm = self._hamilton_input(op.inputs[0], rows % 4 == 0, depth, rows // 4)
            if hm is not None:  # the expansion fused: B read through qsa_xham
                wp = self.wconst(w.data.reshape(units, 4, depth // 4).transpose(0, 2, 1))
                xp, hp = self.ptr(hm["b"]), f"&{hm['p']}"
            else:
                wp, xp, hp = self.ptr(op.inputs[1]), self.ptr(op.inputs[0]), "0"
            wabs = np.abs(w.data.astype(np.int64)).reshape(units, depth).sum(1)
            xs, kbv = x.s, kb
            if hm is not None and self.fast:  # B + b_off straight from qsa_xham
                xs, kbv, ms3 = self._fast_ham(hm, x, w, o, bvals, units)
                if (all(_fast_shift(s_) for _, s_ in ms3)
                        and int((wabs * 255 + np.abs(kbv)).max()) < _ACC_BOUND):
                    b, per_ch = self.i32s(kbv), 1
                    mm, ss = self.i32s([m for m, _ in ms3]), self.i32s([s for _, s in ms3],
                                                                      "int8_t")
                else:
                    raise ExportError(f"FULLY_CONNECTED #{op.index}: the fast Hamilton input's "
                                      "requantisation is out of range; use arith='exact'")
            fold = self._fold(op, xs, w, kbv, wabs, rows % 4 == 0)
            pc, ozp = per_ch, o.zp
            if fold is not None and op.index in self.bias_fold:  # the ADD's bias folded in
                o2, kb4, ms2 = fold
                b, pc, ozp = self.i32s(kb4.reshape(-1)), 3, o2.zp
                mm, ss = self.i32s([m for m, _ in ms2]), self.i32s([s for _, s in ms2], "int8_t")
            if self.fast and rows % 4 and not (depth == 4 and hm is None and pc in (0, 1)):
                self.general.add("QSA_FCX_ROWS4_ONLY")  # a leftover row: the general loop
            self.body.append(f"  qsa_fcx({self.ptr(op.outputs[0])}, {xp}, {wp}, {b}, {rows}, "
                             f"{depth}, {units}, {mm}, {ss}, {pc}, {ozp}, {hp});")
            return
        if (self.lean and runtime and not per_ch and depth % 4 == 0 and depth <= 128
                and units <= 128 and _fast_shift(ms[0][1]) and (lo, hi) == (-128, 127)
                and bound < _ACC_BOUND and (rows // 4 + rows % 4) * (depth + 4) <= 256):
            # activation weights through qsa_blk4 (the offsets' terms as one more group)
            self.body.append(f"  qsa_fcxr({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{-x.zp}, {self.ptr(op.inputs[1])}, {-w.zp}, {b}, {rows}, "
                             f"{depth}, {units}, {ms[0][0]}, {ms[0][1]}, {o.zp});")
            return
        mm, ss = self.i32s([m for m, _ in ms]), self.i32s([s for _, s in ms], "int8_t")
        if (all(_fast_shift(s_) for _, s_ in ms) and (lo, hi) == (-128, 127)
                and bound < _ACC_BOUND and (not runtime or units <= 128) and depth <= 256):
            self.body.append(f"  qsa_fcf({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{-x.zp}, {self.ptr(op.inputs[1])}, {-w.zp}, {b}, {rows}, {depth}, "
                             f"{units}, {mm}, {ss}, {per_ch}, {o.zp}, {runtime});")
            return
        self.body.append(f"  qsa_fc({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, {-x.zp}, "
                         f"{self.ptr(op.inputs[1])}, {-w.zp}, {b}, {rows}, {depth}, {units}, "
                         f"{mm}, {ss}, {per_ch}, {o.zp}, {lo}, {hi}, {runtime});")

    def op_batch_matmul(self, op):
        a, b, o = self.T(op.inputs[0]), self.T(op.inputs[1]), self.T(op.outputs[0])
        if op.options.get("adjX") or op.options.get("adjY"):
            raise ExportError(f"BATCH_MATMUL #{op.index}: adj_x / adj_y are not supported")
        M, K = a.shape[-2:]
        K2, N = b.shape[-2:]
        if K != K2:
            raise ExportError(f"BATCH_MATMUL #{op.index}: {a.shape} x {b.shape}")
        ba, bb = int(np.prod(a.shape[:-2])), int(np.prod(b.shape[:-2]))
        nb = max(ba, bb)
        if ba not in (1, nb) or bb not in (1, nb) or nb * M * N != o.size:
            raise ExportError(f"BATCH_MATMUL #{op.index}: batch broadcast {a.shape} x {b.shape}")
        m, s = quantize_multiplier(float(_f32(a.s * b.s)) / float(o.s))
        self.macs += nb * M * N * K
        sel = _one_hot_rows(a) if ba == 1 and K <= 16 and _fast_shift(s) else None
        if sel is not None:  # the Hamilton expansion: each row picks one column of B, +-q
            rows, q = sel
            if (self.lean and rows == _HAMILTON_ROWS
                    and _negation_is_reflection(q, -b.zp, m, -s, o.zp)):
                if op.outputs[0] in self.fuse and not self.debug:
                    self.body.append("  /* fused into its consumers (qsa_xham) */")
                elif self.fast:  # one kernel, the layout of a TRANSPOSE that reads it or its own
                    tl = _ham_transposed(self.g, op, nb, N)
                    if tl is not None:
                        self.hamt_ok[op.index] = tl
                    bs, n2, s1, s2, r1, r2 = (self.hamt[op.index][1] if op.index in self.hamt
                                              else (16 * N, N, N, 1, 4 * N, N))
                    hp = self.params("qsa_hamt_p", f"{{{m}, {bs}, {s1}, {s2}, {r1}, {r2}, {nb}, "
                                                   f"{K * N if bb > 1 else 0}, {N}, {n2}, "
                                                   f"{-b.zp}, {2 * q}, {-s}, {o.zp}}}")
                    self.body.append(f"  qsa_bmm_hamt({self.ptr(op.outputs[0])}, "
                                     f"{self.ptr(op.inputs[1])}, &{hp});")
                else:
                    self.body.append(f"  qsa_bmm_ham({self.ptr(op.outputs[0])}, "
                                     f"{self.ptr(op.inputs[1])}, {-b.zp}, {nb}, "
                                     f"{K * N if bb > 1 else 0}, {N}, {2 * q}, {m}, {-s}, "
                                     f"{o.zp});")
                if bb == nb:  # consumers may read B through qsa_xham (_hamilton_input)
                    hp = f"{{{m}, {-b.zp}, {2 * q}, {-s}, {o.zp}}}"
                    # arith fast: qsa_xham writes q s_A s_B (B + b_off), unrounded
                    self.ham[op.outputs[0]] = {"b": op.inputs[1], "pbody": hp, "n": N,
                                               "xs": q * float(a.s) * float(b.s),
                                               "pfast": f"{{0, {-b.zp}, 0, 0, 0}}",
                                               "nb": nb, "fused": 0}
                return
            self.body.append(f"  qsa_bmm_sel({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[1])}, "
                             f"{-b.zp}, {nb}, {K * N if bb > 1 else 0}, {M}, {K}, {N}, "
                             f"{self.i32s(rows, 'uint8_t')}, {2 * q}, {m}, {-s}, {o.zp});")
            return
        Kp = K + K % 2
        fits = M * Kp <= 640 and Kp <= 128
        if self.fast:  # the fast qsa_bmm2: K padded to a multiple of 4, rows in pairs
            fits = (M + M % 2) * ((K + 3) & ~3) <= 640 and ((K + 3) & ~3) <= 128
        if (a.data is None and b.data is None and _fast_shift(s) and fits
                and K * 255 * 255 < _ACC_BOUND):
            fn = "qsa_bmm2" if self.lean else "qsa_bmmf"
            self.body.append(f"  {fn}({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{-a.zp}, {self.ptr(op.inputs[1])}, {-b.zp}, {nb}, "
                             f"{M * K if ba > 1 else 0}, {K * N if bb > 1 else 0}, {M}, {K}, {N}, "
                             f"{m}, {-s}, {o.zp});")
            return
        a16 = "0"
        if a.data is not None and ba == 1 and K <= 64:  # constant left operand + its offset
            a16 = self.i32s(a.data.astype(np.int64).reshape(M, K) - a.zp, "int16_t")
        self.body.append(f"  qsa_bmm({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{-a.zp}, {self.ptr(op.inputs[1])}, {-b.zp}, {nb}, "
                         f"{M * K if ba > 1 else 0}, {K * N if bb > 1 else 0}, {M}, {K}, {N}, "
                         f"{m}, {s}, {o.zp}, {a16});")

    def _conv(self, op, depthwise: bool):
        x, w, o = self.T(op.inputs[0]), self.T(op.inputs[1]), self.T(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        nb, ih, iw, ic = x.shape
        _, oh, ow, oc = o.shape
        kh, kw = w.shape[1], w.shape[2]
        sh, sw = int(op.options.get("strideH", 1)), int(op.options.get("strideW", 1))
        dh = int(op.options.get("dilationHFactor", 1))
        dw = int(op.options.get("dilationWFactor", 1))
        same = int(op.options.get("padding", 0)) == 0  # schema Padding: SAME 0, VALID 1

        def pad(stride, dil, in_size, k):
            eff = (k - 1) * dil + 1
            out = (in_size + stride - 1) // stride if same else (in_size + stride - eff) // stride
            total = max(0, (out - 1) * stride + eff - in_size)
            return total // 2

        ph, pw = pad(sh, dh, ih, kh), pad(sw, dw, iw, kw)
        if oc > (512 if depthwise else 64):
            raise ExportError(f"{op.name} #{op.index}: {oc} output channels, beyond the "
                              "kernels' stack accumulators (depthwise 512, conv 64)")
        dm = int(op.options.get("depthMultiplier", 1)) if depthwise else 1
        lo, hi = _act_range(op.options.get("fusedActivationFunction", 0))
        mm, ss = self._conv_mults(x, w, o, oc)
        p = self.params("qsa_conv_p", f"{{{nb}, {ih}, {iw}, {ic}, {oh}, {ow}, {oc}, {kh}, {kw}, "
                                      f"{sh}, {sw}, {dh}, {dw}, {ph}, {pw}, {dm}, {-x.zp}, "
                                      f"{o.zp}, {lo}, {hi}}}")
        b = self.ptr(bias) if bias is not None else "0"
        self.macs += nb * oh * ow * oc * kh * kw * (1 if depthwise else ic)
        if depthwise:
            sh = [s_ for _, s_ in self._conv_ms(x, w, o, oc)]
            wd = w.data.astype(np.int64).reshape(kh * kw, oc) if w.data is not None else None
            bd = self.T(bias).data if bias is not None else np.zeros(oc, np.int64)
            if (dm == 1 and kh * kw <= 32 and wd is not None and bd is not None
                    and all(_fast_shift(s_) for s_ in sh) and (lo, hi) == (-128, 127)
                    and int((np.abs(wd).sum(0) * 255 + np.abs(bd.astype(np.int64))).max())
                    < _ACC_BOUND):
                kb = (-x.zp) * wd.sum(0) + bd.astype(np.int64).reshape(-1)
                if (self.lean and oc % 4 == 0 and oc <= 128 and ic == oc
                        and int((np.abs(wd).sum(0) * 128 + np.abs(kb)).max()) < _ACC_BOUND):
                    # zero-point padding: the input offset over all taps folds into the bias
                    fw = self.ptr(op.inputs[1])
                    if self.fast:  # the fast kernel: the folded bias and the filter's
                        fp, bp = fw, b  # halfword pairs, computed at init (RAM)
                        fw = self._ram_array(("dwfx", fp, p), "fx", "uint32_t", kh * kw * oc // 2,
                                             lambda n_: f"/* {n_}: by qsa_dwconvs_init */")
                        b = self._ram_array(("dwkb", fp, bp, p), "kb", "int32_t", oc,
                                            lambda n_: f"qsa_dwconvs_init({n_}, {fw}, {fp}, "
                                                       f"{bp}, &{p});")
                    self.body.append(f"  qsa_dwconvs({self.ptr(op.outputs[0])}, "
                                     f"{self.ptr(op.inputs[0])}, {fw}, {b}, {mm}, {ss}, &{p});")
                    return
                self.body.append(f"  qsa_dwconvf({self.ptr(op.outputs[0])}, "
                                 f"{self.ptr(op.inputs[0])}, {self.ptr(op.inputs[1])}, {b}, "
                                 f"{mm}, {ss}, &{p});")
                return
            self.body.append(f"  qsa_dwconv({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{self.ptr(op.inputs[1])}, {b}, {mm}, {ss}, &{p});")
            return
        if w.data is None:
            raise ExportError(f"CONV_2D #{op.index}: the filter must be a constant")
        wd = w.data.astype(np.int64).reshape(oc, kh * kw, ic)
        shifts = [s_ for _, s_ in (self._conv_ms(x, w, o, oc))]
        bb = np.zeros(oc, np.int64) if bias is None else self.T(bias).data
        bound = (int((np.abs(wd).sum((1, 2)) * 255 + np.abs(bb.astype(np.int64).reshape(-1)))
                     .max()) if bb is not None else _ACC_BOUND)
        if (ic % 4 == 0 and kh * kw * ic <= 256 and all(_fast_shift(s_) for s_ in shifts)
                and (lo, hi) == (-128, 127) and bound < _ACC_BOUND):
            # zero-point padding: the input offset's term over all taps folds into the bias
            kb = self.i32s((-x.zp) * wd.sum((1, 2)) + bb.astype(np.int64).reshape(-1))
            if (self.lean and kw == 1 and sw == 1 and pw == 0 and dh == 1 and kh <= 16
                    and ow == iw):
                if not (iw % 4 == 0 and ic <= 64):
                    self.body.append(f"  qsa_convc({self.ptr(op.outputs[0])}, "
                                     f"{self.ptr(op.inputs[0])}, {self.ptr(op.inputs[1])}, "
                                     f"{kb}, {mm}, {ss}, &{p});")
                    return
                # in_w 4: the four pixels of a row are the quaternion components r, i, j, k
                hm = self._hamilton_input(op.inputs[0], nb == 1 and iw == 4 and ic % 4 == 0,
                                          ic, ih)
                if hm is not None:  # the expansion fused: B read through qsa_xham
                    wp = self.wconst(w.data.reshape(oc, kh, 4, ic // 4).transpose(0, 1, 3, 2))
                    xp, hp = self.ptr(hm["b"]), f"&{hm['p']}"
                else:
                    wp, xp, hp = self.ptr(op.inputs[1]), self.ptr(op.inputs[0]), "0"
                kbv = (-x.zp) * wd.sum((1, 2)) + bb.astype(np.int64).reshape(-1)
                xs = x.s
                if hm is not None and self.fast:  # B + b_off straight from qsa_xham
                    xs, kbv, ms3 = self._fast_ham(hm, x, w, o, bb, oc)
                    if not (all(_fast_shift(s_) for _, s_ in ms3) and int(
                            (np.abs(wd).sum((1, 2)) * 255 + np.abs(kbv)).max()) < _ACC_BOUND):
                        raise ExportError(f"CONV_2D #{op.index}: the fast Hamilton input's "
                                          "requantisation is out of range; use arith='exact'")
                    kb = self.i32s(kbv)
                    mm = self.i32s([m for m, _ in ms3])
                    ss = self.i32s([s for _, s in ms3], "int8_t")
                fold = self._fold(op, xs, w, kbv, np.abs(wd).sum((1, 2)), ow == 4)
                pc = ""
                if self.fast:  # qsa_convx's extra argument: qsa_blk4's per_channel
                    pc = ", 1"
                    if iw != 4:
                        self.general.add("QSA_CONVX_W4_ONLY")
                    if fold is not None and op.index in self.bias_fold:  # the ADD folded in
                        o2, kb4, ms2 = fold
                        kb, pc = self.i32s(kb4.reshape(-1)), ", 3"
                        mm = self.i32s([m for m, _ in ms2])
                        ss = self.i32s([s for _, s in ms2], "int8_t")
                        p = self.params("qsa_conv_p", f"{{{nb}, {ih}, {iw}, {ic}, {oh}, {ow}, "
                                        f"{oc}, {kh}, {kw}, {sh}, {sw}, {dh}, {dw}, {ph}, {pw}, "
                                        f"{dm}, {-x.zp}, {o2.zp}, {lo}, {hi}}}")
                self.body.append(f"  qsa_convx({self.ptr(op.outputs[0])}, {xp}, {wp}, {kb}, "
                                 f"{mm}, {ss}, &{p}, {hp}{pc});")
                return
            self.body.append(f"  qsa_convf({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                             f"{self.ptr(op.inputs[1])}, {kb}, {mm}, {ss}, &{p});")
            return
        fsum = self.i32s(wd.sum(-1))
        self.body.append(f"  qsa_conv({self.ptr(op.outputs[0])}, {self.ptr(op.inputs[0])}, "
                         f"{self.ptr(op.inputs[1])}, {b}, {mm}, {ss}, &{p}, {fsum});")

    def op_conv_2d(self, op):
        self._conv(op, False)

    def op_depthwise_conv_2d(self, op):
        self._conv(op, True)


# generate_c's arith: TFLite-Micro's integers, or the fast build within a tested bound
C_ARITH = ("exact", "fast")
# the fast build's stated bound against TFLite-Micro, per graph output tensor (the network's
# outputs and each state tensor) over every step of the verification utterance: the largest
# and the mean |difference| in int8 steps. A folded ADD or layer norm rounds once where
# TFLite-Micro rounds two to five times (a step either way, as often as not closer to the
# float model); the attention / convolution state carries such a step into later hops, and
# the mask's LOGISTIC multiplies a step of its input by up to s_in / (4 s_out) (~6 steps for
# qcgan-35k), so single values move further than the mean. The PCM check (SQNR against
# torch no lower than the int8 floor, PESQ-WB within 0.02 of TFLite-Micro: the tests) is
# the quality bar; this bound catches a broken kernel (tens of steps on most values).
C_FAST_MAX_ABS_INT8 = 64
C_FAST_MEAN_ABS_INT8 = 6.0

# the fast requantisation (qsa_rqf in qsa.export.c_kernels): exact for |acc| < 2^30 and a
# right shift of 1..22 bits; other ops keep the reference kernels
_ACC_BOUND = 1 << 30


def _fast_shift(shift: int) -> bool:
    return -22 <= shift <= -1


def _fast_term(shift: int) -> bool:
    return -22 <= shift <= 0


def _rqc(e: int, off: int) -> int:
    """c of qsa_rqf: 2^(e-1) + off 2^e."""
    return (1 << (e - 1)) + off * (1 << e)


def _rqs(m: int, shift: int, off: int) -> tuple[int, int, int, int, int]:
    """(m, ls, e, c, k) of qsa_rqs for a TFLite (multiplier, shift) and output offset."""
    if shift >= 0:
        return m, shift + 1, 0, off, 0
    return m, 1, -shift, _rqc(-shift, off), -1


def _requant_py(acc: int, m: int, e: int) -> int:
    """MultiplyByQuantizedMultiplier for a right shift e >= 0 (Python ints, exact)."""
    t = (acc * m + (1 << 30)) >> 31
    mask = (1 << e) - 1
    return (t >> e) + (1 if (t & mask) > (mask >> 1) + (1 if t < 0 else 0) else 0)


# the rows of a quaternion Hamilton expansion as BATCH_MATMUL writes it (qsa_bmm_ham)
_HAMILTON_ROWS = [0, 3, 5, 7, 2, 0, 6, 5, 4, 7, 0, 2, 6, 4, 3, 0]


def _negation_is_reflection(q: int, b_off: int, m: int, e: int, off: int) -> bool:
    """requant(-q (b + b_off)) + off == sat(2 off - (requant(q (b + b_off)) + off)) for every
    int8 b: the negative half of a Hamilton expansion mirrors the positive one."""
    for b in range(-128, 128):
        v = q * (b + b_off)
        plus = min(127, max(-128, _requant_py(v, m, e) + off))
        minus = min(127, max(-128, _requant_py(-v, m, e) + off))
        if minus != min(127, max(-128, 2 * off - plus)):
            return False
    return True


def _one_hot_rows(a: Tensor) -> tuple[list[int], int] | None:
    """A constant (M, K) left operand whose rows (A - zero point) each hold one non-zero of
    the same magnitude q: (sel[i] = 2 k_i + (sign < 0), q), else None."""
    if a.data is None or a.scale.size > 1:
        return None
    A = a.data.astype(np.int64).reshape(a.shape[-2], a.shape[-1]) - a.zp
    nz = A != 0
    if not np.all(nz.sum(1) == 1):
        return None
    k = nz.argmax(1)
    v = A[np.arange(len(A)), k]
    q = int(abs(v[0]))
    if not np.all(np.abs(v) == q) or q * 255 >= _ACC_BOUND:
        return None
    return [int(2 * kk + (vv < 0)) for kk, vv in zip(k, v, strict=True)], q


def _ham_transposed(g: Graph, op: Op, nb: int, n: int) -> tuple[int, tuple] | None:
    """arith fast: the TRANSPOSE that is the one reader (through RESHAPEs) of the Hamilton
    expansion ``op`` (nb batches of 16 rows x n columns) and the layout qsa_bmm_hamt writes its
    output in, (TRANSPOSE op, (bs, n2, s1, s2, r1, r2)): the output position of (b, i, j) as
    b bs + (i / 4) r1 + (i % 4) r2 + (j / n2) s1 + (j % n2) s2; None when there is none."""
    t = op.outputs[0]
    while True:
        users = [u for u in g.ops if t in u.inputs]
        if len(users) != 1 or t in g.outputs:
            return None
        if users[0].name != "RESHAPE":
            break
        t = users[0].outputs[0]
    tr = users[0]
    if tr.name != "TRANSPOSE" or tr.inputs[0] != t:
        return None
    x = g.tensors[t]
    perm = [int(v) for v in g.tensors[tr.inputs[1]].data.reshape(-1)]
    if x.size != nb * 16 * n:
        return None
    src = np.arange(x.size).reshape(x.shape).transpose(perm).reshape(-1)  # out pos -> in flat
    pos = np.empty(x.size, np.int64)
    pos[src] = np.arange(x.size)
    p3 = pos.reshape(nb, 16, n)
    bpos, rpos, cpos = p3[:, 0, 0], p3[0, :, 0], p3[0, 0, :]
    r1, r2 = int(rpos[4]), int(rpos[1])
    s2 = int(cpos[1]) if n > 1 else 1
    n2 = next((j for j in range(n) if cpos[j] != j * s2), n)
    s1 = int(cpos[n2]) if n2 < n else n2 * s2
    bs = int(bpos[1]) if nb > 1 else 16 * n
    i, j, b = np.arange(16), np.arange(n), np.arange(nb)
    want = (b[:, None, None] * bs + ((i // 4) * r1 + (i % 4) * r2)[None, :, None]
            + ((j // n2) * s1 + (j % n2) * s2)[None, None, :])
    if not np.array_equal(p3, want) or max(abs(v) for v in (bs, s1, s2, r1, r2)) >= 1 << 30:
        return None
    return tr.index, (bs, n2, s1, s2, r1, r2)


def _addprelu_shifts(a: Tensor, b: Tensor, al: Tensor, o: Tensor) -> tuple | None:
    """qsa_addprelu's constants for ADD(a, b) then PRELU(alpha al) -> o: (ka, kb, the
    positive branch's (multiplier, shift), the negative one's), None when a shift is beyond
    the fast requantisation's 1..22 bits."""
    su = max(float(a.s), float(b.s)) / 2048  # the common grid of both terms
    mp, sp = quantize_multiplier(su / float(o.s))
    mn, sn = quantize_multiplier(su * float(al.s) / float(o.s))
    if not (_fast_shift(sp) and _fast_shift(sn)):
        return None
    return round(float(a.s) / su), round(float(b.s) / su), (mp, sp), (mn, sn)


def _fast_candidates(g: Graph) -> tuple[dict, dict, dict, dict]:
    """The fusions of arith="fast", by the graph's structure alone: {FULLY_CONNECTED / CONV_2D
    op: the ADD of a constant that is its output's one consumer}, {MUL op: the LOGISTIC
    whose output it multiplies by that LOGISTIC's own input, its one consumer} (SiLU),
    {the layer norm's last MUL: its MEAN, SUB, MUL, MEAN, RSQRT ops} and {PRELU op: the ADD
    of two activations of its shape before it, whose one consumer it is}."""
    users: dict[int, list[int]] = {}
    for op in g.ops:
        for i in dict.fromkeys(op.inputs):  # MUL(d, d): one user
            users.setdefault(i, []).append(op.index)
    outs = set(g.outputs)

    def only_user(t: int) -> Op | None:
        u = users.get(t, [])
        return g.ops[u[0]] if len(u) == 1 and t not in outs else None

    def axes(op: Op) -> list[int]:
        t = g.tensors[op.inputs[0]]
        return sorted({int(a) % len(t.shape) for a in g.tensors[op.inputs[1]].data.reshape(-1)})

    bias, silu, lnorm, addprelu = {}, {}, {}, {}
    for op in g.ops:
        x = g.tensors[op.inputs[0]]
        if op.name == "ADD" and op.options.get("fusedActivationFunction", 0) == 0:
            pr = only_user(op.outputs[0])
            o = g.tensors[op.outputs[0]]
            if (pr is not None and pr.name == "PRELU" and pr.inputs[0] == op.outputs[0]
                    and g.tensors[pr.inputs[1]].data is not None
                    and all(g.tensors[i].data is None and g.tensors[i].shape == o.shape
                            for i in op.inputs)
                    and _addprelu_shifts(g.tensors[op.inputs[0]], g.tensors[op.inputs[1]],
                                         g.tensors[pr.inputs[1]], g.tensors[pr.outputs[0]])):
                addprelu[pr.index] = op.index
        if op.name == "MEAN" and len(x.shape) >= 2 and axes(op) == [len(x.shape) - 1]:
            # the layer norm: MEAN(x) -> d = SUB(x, mean) -> MEAN(d d) over the last two
            # axes -> RSQRT -> MUL(d, rsqrt), each the one consumer of the one before
            sub = only_user(op.outputs[0])
            if sub is None or sub.name != "SUB" or sub.inputs != [op.inputs[0], op.outputs[0]]:
                continue
            u = [g.ops[k] for k in users.get(sub.outputs[0], [])]
            sq = [m for m in u if m.name == "MUL" and m.inputs == [sub.outputs[0]] * 2]
            if len(u) != 2 or len(sq) != 1 or sub.outputs[0] in outs:
                continue
            m2 = only_user(sq[0].outputs[0])
            if m2 is None or m2.name != "MEAN" or axes(m2) != [len(x.shape) - 2,
                                                               len(x.shape) - 1]:
                continue
            rs = only_user(m2.outputs[0])
            y = [m for m in u if m is not sq[0]][0]
            if (rs is None or rs.name != "RSQRT" or y.name != "MUL"
                    or y.inputs != [sub.outputs[0], rs.outputs[0]]
                    or only_user(rs.outputs[0]) is not y
                    or any(k.options.get("fusedActivationFunction", 0) for k in (sub, sq[0], y))):
                continue
            lnorm[y.index] = [op.index, sub.index, sq[0].index, m2.index, rs.index]
        if op.name in ("FULLY_CONNECTED", "CONV_2D"):
            add = only_user(op.outputs[0])
            if (add is not None and add.name == "ADD" and len(add.inputs) == 2
                    and op.options.get("fusedActivationFunction", 0) == 0
                    and add.options.get("fusedActivationFunction", 0) == 0):
                other = add.inputs[1] if add.inputs[0] == op.outputs[0] else add.inputs[0]
                if other != op.outputs[0] and g.tensors[other].data is not None:
                    bias[op.index] = add.index
        elif op.name == "LOGISTIC":
            mul = only_user(op.outputs[0])
            if (mul is not None and mul.name == "MUL"
                    and sorted(mul.inputs) == sorted([op.inputs[0], op.outputs[0]])
                    and mul.options.get("fusedActivationFunction", 0) == 0):
                silu[mul.index] = op.index
    return bias, silu, lnorm, addprelu


def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def generate_c(tflite_path: str | os.PathLike, out_dir: str | os.PathLike,
               debug: bool = False, header_note: str = "",
               rsqrt_tables: bool = True, lean: bool = True,
               arith: str = "exact") -> CNetwork:
    """Write qsa_nn.h, qsa_net.h, qsa_net.c for the int8 network in ``tflite_path``.

    ``debug``: every tensor keeps its own arena slot and ``qsa_net_debug_tensors`` lists
    them (the tests compare each op's output with TFLite-Micro's). ``lean`` (default): the
    leaner kernels of qsa.export.c_kernels where their conditions hold (all exact: the same
    integers), with the Hamilton expansions their FULLY_CONNECTED / CONV_2D consumers can read
    through qsa_xham left unmaterialised (a second generation pass plans the arena for them);
    False builds with the previous kernels only (the tests check both agree).

    ``arith``: "exact" (default) computes TFLite-Micro's integers; "fast" folds work across
    ops where that saves instructions, within a bound checked at export (``verify_c``): the
    ADD of a constant after a FULLY_CONNECTED / CONV_2D folded into its accumulator (one
    rounding instead of two: the int8 output may differ from TFLite-Micro's by a few steps,
    which then propagate) and LOGISTIC + MUL(x, logistic(x)) as one table (exact)."""
    from qsa.fileio import atomic_write_text

    from .c_kernels import QSA_NN_H

    if arith not in C_ARITH:
        raise ExportError(f"arith={arith!r}: expected one of {', '.join(C_ARITH)}")
    fast = arith == "fast"
    if fast and (debug or not lean):
        raise ExportError("arith='fast' builds on the lean kernels and has no debug build "
                          "(its intermediate tensors are not TFLite-Micro's): pass "
                          "debug=False, lean=True, or arith='exact'")
    g = read_graph(tflite_path)
    fold_cand, silu, lnorm, addprelu = _fast_candidates(g) if fast else ({}, {}, {}, {})
    for i in g.inputs + g.outputs:
        if g.tensors[i].dtype != "int8":
            raise ExportError(f"graph input/output {i} is {g.tensors[i].dtype}; int8 only")

    def emit_all(fuse: dict[int, int], fold: dict[int, int], hamt: dict) -> _Gen:
        gen = _Gen(g, debug)
        gen.lut_decls, gen.lut_bytes = [], 0
        gen.rsqrt_tables = rsqrt_tables
        gen.lean = lean
        gen.fuse = fuse
        gen.fast, gen.fold_cand, gen.bias_fold, gen.silu = fast, fold_cand, fold, silu
        gen.lnorm, gen.addprelu = lnorm, addprelu
        gen.hamt = hamt
        gen.absorbed = (set(fold.values()) | set(silu.values()) | set(addprelu.values())
                        | {k for ops in lnorm.values() for k in ops}
                        | {t for t, _ in hamt.values()})
        gen.plan()
        for op in g.ops:
            gen.emit(op)
        return gen

    gen = emit_all({}, {}, {})
    fuse, fold, hamt = gen.fusable(), dict(gen.bias_ok), dict(gen.hamt_ok)
    if fuse or fold or hamt:  # again, planned with the Hamilton expansions / ADDs read fused
        gen = emit_all(fuse, fold, hamt)
        gen.fusable()
        if gen.bias_ok != fold:
            raise ExportError(f"bias folding: planned {sorted(fold)}, done {sorted(gen.bias_ok)}")
        if gen.hamt_ok != hamt:
            raise ExportError(f"transposed expansions: planned {sorted(hamt)}, done "
                              f"{sorted(gen.hamt_ok)}")
    if fast:  # the constants of the unfolded forms that nothing reads any more
        import re

        used = set(re.findall(r"\b[a-z]+\d+\b", "\n".join(gen.body + gen.init)))
        gen.consts = [d for d in gen.consts
                      if re.search(r"\b([a-z]+\d+)(\[\d*\])? =", d).group(1) in used]
    # the state: graph inputs 1.. pair with graph outputs n_out-n_state.. (same shape/quant)
    n_state = len(g.inputs) - 1
    outs = g.outputs
    n_net_out = len(outs) - n_state
    pairs = list(zip(g.inputs[1:], outs[n_net_out:], strict=True))
    for si, so in pairs:
        a, b = g.tensors[si], g.tensors[so]
        if a.shape != b.shape or a.s != b.s or a.zp != b.zp:
            raise ExportError(f"state input {si} {a.shape} and output {so} {b.shape} differ in "
                              "shape or quantisation; the C export carries state as int8")
    x = g.tensors[g.inputs[0]]
    net_outs = [g.tensors[i] for i in outs[:n_net_out]]
    state_bytes = sum(g.tensors[i].size for i in g.inputs[1:])
    scratch_bytes = 4 * max(gen.scratch, 1)

    def qdesc(t: Tensor, name: str) -> dict:
        return {"name": name, "tensor": t.index, "shape": list(t.shape), "scale": float(t.s),
                "zero_point": t.zp, "size": t.size}

    ins = [qdesc(x, "x")]
    outs_d = [qdesc(t, f"y{k}") for k, t in enumerate(net_outs)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    h = [
        "/* qsa_net.h: generated by `qsa export --target c` (qsa.export.c_export).",
        f" * {header_note}" if header_note else " *",
        f" * int8 network: {len(g.ops)} ops, {gen.macs:,} MACs per step, weights + constants "
        f"{gen.const_bytes:,} B,",
        f" * activation arena {gen.arena:,} B, state {state_bytes:,} B, tables "
        f"{gen.lut_bytes:,} B, scratch {scratch_bytes} B. */",
        "#ifndef QSA_NET_H",
        "#define QSA_NET_H",
        "#include <stdint.h>",
        "",
        f"#define QSA_NET_IN_SIZE {x.size}",
        f"#define QSA_NET_IN_SCALE {float(x.s)!r}f",
        f"#define QSA_NET_IN_ZP {x.zp}",
    ]
    for k, t in enumerate(net_outs):
        h += [f"#define QSA_NET_OUT{k}_SIZE {t.size}",
              f"#define QSA_NET_OUT{k}_SCALE {float(t.s)!r}f",
              f"#define QSA_NET_OUT{k}_ZP {t.zp}"]
    h += ["", "/* the network's streaming state (int8, as the TFLite-Micro graph carries it) */",
          "typedef struct {"]
    for si, _ in pairs:
        t = g.tensors[si]
        h.append(f"  int8_t t{si}[{t.size}]; /* {list(t.shape)} zp {t.zp} */")
    h += ["} qsa_net_state;", "",
          "void qsa_net_init(qsa_net_state *st);",
          "/* one step: x (QSA_NET_IN_SIZE int8) -> outputs; st updated in place */",
          "void qsa_net_step(qsa_net_state *st, const int8_t *x"
          + "".join(f", int8_t *y{k}" for k in range(len(net_outs))) + ");"]
    if debug:
        h += ["extern const int32_t qsa_net_debug_n;",
              "extern const int32_t qsa_net_debug_tensor[];",
              "extern const int32_t qsa_net_debug_offset[];",
              "extern const int32_t qsa_net_debug_size[];",
              "extern int8_t *qsa_net_debug_arena(void);"]
    h += ["#endif", ""]

    c = ["/* qsa_net.c: generated by `qsa export --target c` (qsa.export.c_export). */",
         '#include "qsa_net.h"',
         *(["/* arith fast: folded ADDs, SiLU tables (see the header's bound) */",
            "#define QSA_ARITH_FAST 1"] if fast else []),
         *([f"#define {d} 1 /* no call needs the kernel's general path */"
            for d in ("QSA_CONVX_W4_ONLY", "QSA_PRELUF_COLS_ONLY", "QSA_FCX_ROWS4_ONLY")
            if d not in gen.general]
           if fast else []),
         *([f"#define {d} 1 /* a call uses the kernel's special path */"
            for d in sorted(gen.special)] if fast else []),
         '#include "qsa_nn.h"', "",
         "#ifdef QSA_PROFILE /* per-op timing hook: the profiler defines qsa_mark(op) */",
         "extern void qsa_mark(int op);", "#define QSA_MARK(k) qsa_mark(k)", "#else",
         "#define QSA_MARK(k)", "#endif", "",
         f"static int32_t qsa_arena_words[{(gen.arena + 3) // 4}]; /* activations */",
         "static int8_t *const qsa_arena = (int8_t *)qsa_arena_words;",
         f"static int32_t qsa_acc[{max(gen.scratch, 1)}]; /* MEAN / SUM accumulators */", ""]
    c += gen.consts + gen.lut_decls + [""]
    c += ["QSA_INIT_CODE void qsa_net_init(qsa_net_state *st) {"]
    for si, _ in pairs:
        t = g.tensors[si]
        c.append(f"  memset(st->t{si}, {t.zp}, sizeof st->t{si});")
    c += gen.init + ["}", ""]
    c += ["/* the op sequence is straight-line calls: optimised for size (the kernels keep -O2) */",
          "#if defined(__GNUC__) && !defined(__clang__)",
          "__attribute__((optimize(\"Os\")))", "#endif",
          "void qsa_net_step(qsa_net_state *st, const int8_t *x"
          + "".join(f", int8_t *y{k}" for k in range(len(net_outs))) + ") {",
          f"  memcpy({gen.ptr(g.inputs[0])}, x, {x.size});"]
    c += gen.body
    for k, t in enumerate(net_outs):
        c.append(f"  memcpy(y{k}, {gen.ptr(t.index)}, {t.size});")
    for si, so in pairs:
        c.append(f"  memcpy(st->t{si}, {gen.ptr(so)}, {g.tensors[si].size});")
    c += ["}", ""]
    if debug:
        dbg = [t.index for t in g.tensors if t.data is None and t.index not in gen.state_in
               and gen.alias.get(t.index, t.index) in gen.offset]
        c += [f"const int32_t qsa_net_debug_n = {len(dbg)};",
              f"const int32_t qsa_net_debug_tensor[] = {{{_c(dbg)}}};",
              "const int32_t qsa_net_debug_offset[] = {"
              + _c(gen.offset[gen.alias.get(i, i)] for i in dbg) + "};",
              f"const int32_t qsa_net_debug_size[] = {{{_c(g.tensors[i].size for i in dbg)}}};",
              "int8_t *qsa_net_debug_arena(void) { return qsa_arena; }", ""]
    files = []
    for name, text in (("qsa_nn.h", QSA_NN_H), ("qsa_net.h", "\n".join(h)),
                       ("qsa_net.c", "\n".join(c))):
        p = out_dir / name
        atomic_write_text(p, text)
        files.append(p)
    return CNetwork(files, gen.arena, state_bytes, gen.weight_bytes, gen.const_bytes,
                    scratch_bytes, gen.macs, len(g.ops), ins, outs_d, pairs,
                    {"lut_bytes": gen.lut_bytes, "arith": arith,
                     **({"folded_adds": len(fold), "silu_tables": len(silu),
                         "layer_norms": len(lnorm), "add_prelus": len(addprelu)}
                        if fast else {})})


# ---------------------------------------------------------------------------------------------
# host build


HOST_HARNESS = r"""/* host harness: int8 frames in (file), network outputs + new state out (file) */
#include <stdio.h>
#include <stdlib.h>
#include "qsa_net.h"

static qsa_net_state st;

int main(int argc, char **argv) {
  FILE *fi, *fo;
  int8_t x[QSA_NET_IN_SIZE];
  int8_t y0[QSA_NET_OUT0_SIZE];
  int8_t y1[QSA_NET_OUT1_SIZE];
  if (argc < 3) { fprintf(stderr, "usage: %s frames.i8 out.i8\n", argv[0]); return 2; }
  fi = fopen(argv[1], "rb");
  fo = fopen(argv[2], "wb");
  if (!fi || !fo) { fprintf(stderr, "cannot open files\n"); return 2; }
  qsa_net_init(&st);
  while (fread(x, 1, sizeof x, fi) == sizeof x) {
    qsa_net_step(&st, x, y0, y1);
    fwrite(y0, 1, sizeof y0, fo);
    fwrite(y1, 1, sizeof y1, fo);
    fwrite(&st, 1, sizeof st, fo);
#ifdef QSA_DEBUG_DUMP
    {
      int32_t k;
      int8_t *a = qsa_net_debug_arena();
      for (k = 0; k < qsa_net_debug_n; ++k)
        fwrite(a + qsa_net_debug_offset[k], 1, (size_t)qsa_net_debug_size[k], fo);
    }
#endif
  }
  fclose(fi);
  fclose(fo);
  return 0;
}
"""


def host_cc() -> str | None:
    import shutil

    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build_host(src_dir: str | os.PathLike, harness: str = HOST_HARNESS, name: str = "qsa_host",
               extra: tuple[str, ...] = (), sources: tuple[str, ...] = ("qsa_net.c",)) -> Path:
    """Compile the generated C plus ``harness`` with the host C compiler (-std=c99 -Wall
    -Werror -O2); the executable's path."""
    cc = host_cc()
    if cc is None:
        raise ExportError("no host C compiler (cc / gcc / clang) on PATH; install gcc")
    src_dir = Path(src_dir)
    (src_dir / f"{name}_main.c").write_text(harness)
    exe = src_dir / name
    cmd = [cc, "-std=c99", "-O2", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra",
           "-Werror", "-Wno-unused-function",
           "-o", str(exe), *(str(src_dir / s) for s in sources), str(src_dir / f"{name}_main.c"),
           f"-I{src_dir}", *extra, "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ExportError(f"host C build failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
    return exe


# ---------------------------------------------------------------------------------------------
# the host DSP in C (stage b): STFT, power-law compression and their inverses around the net


def _farray(name: str, data, per_line: int = 8) -> str:
    flat = np.asarray(data, np.float32).reshape(-1)
    lines = [f"static const float {name}[{flat.size}] = {{"]
    for k in range(0, flat.size, per_line):
        lines.append("  " + ", ".join(f"{float(v)!r}f" for v in flat[k : k + per_line]) + ",")
    lines.append("};")
    return "\n".join(lines)


def _symmetric(w: np.ndarray) -> bool:
    """A periodic window stored as its first half: w[N - n] == w[n] bit for bit."""
    w = np.asarray(w, np.float32)
    return bool(np.array_equal(w[1:][::-1], w[1:]))


def _window_tables(win: np.ndarray, swin: np.ndarray) -> list[str]:
    """The analysis / synthesis windows: one RAM copy filled at init from a half table when
    both are the same symmetric window (flash), else two const tables."""
    win, swin = np.asarray(win, np.float32), np.asarray(swin, np.float32)
    n = len(win)
    if _symmetric(win) and np.array_equal(win, swin):
        return [_farray("qsa_win_half", win[: n // 2 + 1]),
                "static float qsa_win[N]; /* filled at init */",
                "#define qsa_swin qsa_win"]
    if _symmetric(win):
        win_half = _farray("qsa_win_half", win[: n // 2 + 1])
        return [win_half, "static float qsa_win[N];", _farray("qsa_swin", swin)]
    return [_farray("qsa_win", win), _farray("qsa_swin", swin)]


def generate_dsp(step, net: CNetwork, out_dir: str | os.PathLike) -> list[Path]:
    """``qsa_enhancer.h`` / ``qsa_enhancer.c``: the PCM API around the int8 network,
    ``qsa_init(state)`` and ``qsa_step(state, const int16_t in[HOP], int16_t out[HOP])``:
    the model's host DSP (``HostDSP``: windowed real FFT, |X|^c compression, quantisation of the
    network input, dequantisation of its outputs, decompression, inverse FFT, overlap-add) in
    float32 C, the network in int8. PCM is full scale at 32768."""
    from qsa.fileio import atomic_write_text

    dsp = step.host_dsp()
    n, hop, nf, c = int(dsp.n_fft), int(dsp.hop), int(dsp.n_freq), float(dsp.c)
    gexp = float(getattr(dsp, "gain_exponent", 1.0))
    if n & (n - 1) or n < 2 * hop:
        raise ExportError(f"n_fft={n}, hop={hop}: the C DSP needs a power-of-two n_fft (radix-2 "
                          "FFT) and hop <= n_fft / 2")
    if len(net.outputs) != 2 or net.inputs[0]["size"] != 4 * nf:
        raise ExportError("the C DSP expects a network x (1, 4, 1, F) -> mask (F), residual (2F)")
    if net.outputs[0]["size"] != nf or net.outputs[1]["size"] != 2 * nf:
        raise ExportError(f"network outputs {net.outputs}; expected mask ({nf}), residual "
                          f"({2 * nf})")
    bits = n.bit_length() - 1
    eps = 1e-8
    # the fast build: the real FFT (and its inverse) as one complex FFT of n / 2 points, its
    # first stage without multiplies, and a split pass (about half the DSP's instructions);
    # the exact build keeps the full-size complex FFT (its PCM and flash unchanged)
    fast = net.info.get("arith") == "fast"
    half = fast and hop % 2 == 0 and n >= 8
    q_c = ["static int8_t qsa_q(float v, float scale, int zp) {",  # the network input's int8
           "  float r = v / scale;",
           "  r = qsa_rint(r < -1000.f ? -1000.f : (r > 1000.f ? 1000.f : r)) + (float)zp;",
           "  return (int8_t)(r < -128.f ? -128 : (r > 127.f ? 127 : (int)r));",
           "}"]
    nfft = n // 2 if half else n
    h = [
        "/* qsa_enhancer.h: generated by `qsa export --target c` (qsa.export.c_export).",
        f" * PCM in, PCM out: hop {hop} samples, frame {n}, {nf} bins; DSP float32, network int8.",
        " * void qsa_init(qsa_state *s); void qsa_step(qsa_state *s, in[HOP], out[HOP]);",
        f" * output delayed by {n - hop} samples (the STFT). */",
        "#ifndef QSA_ENHANCER_H", "#define QSA_ENHANCER_H", "#include <stdint.h>",
        '#include "qsa_net.h"', "",
        f"#define QSA_HOP {hop}", f"#define QSA_NFFT {n}", f"#define QSA_NFREQ {nf}", "",
        "typedef struct {",
        f"  float in_buf[{n - hop}]; /* analysis history */",
        f"  float ola[{n - hop}];    /* overlap-add tail */",
        "  qsa_net_state net;",
        "  float atten_g; /* the input's share of the output (qsa_set_atten_lim), 0: none */",
        "} qsa_state;", "",
        "void qsa_init(qsa_state *s);",
        "void qsa_step(qsa_state *s, const int16_t *in, int16_t *out);",
        "/* strength control: the output may lie at most db below the input, out = (1 - g)",
        " * enhanced + g input (delayed to line up), g = 10^(-db / 20) (qsa.enhancement's",
        " * atten_lim_db); db < 0 or NaN: no limit (the default). Takes effect at the next hop. */",
        "void qsa_set_atten_lim(qsa_state *s, float db);",
        "unsigned long qsa_state_bytes(void); /* sizeof(qsa_state), for bindings */",
        "#endif", "",
    ]
    body = [
        "/* qsa_enhancer.c: generated by `qsa export --target c` (qsa.export.c_export). */",
        "#include <math.h>", "#include <string.h>", '#include "qsa_enhancer.h"', "",
        f"#define N {n}", f"#define HOP {hop}", f"#define NF {nf}",
        f"#define COMP {c!r}f", f"#define DECOMP {1.0 / c - 1.0!r}f", f"#define EPS {eps!r}f",
        *([f"#define GEXP1 {gexp - 1.0!r}f /* post-filter: gain_exponent - 1 */"]
          if gexp != 1.0 else []),
        "",
        *_window_tables(dsp.window, dsp.synthesis_window),
        _farray("qsa_cos_q", np.cos(2 * np.pi * np.arange(n // 4 + 1) / n)),
        "static float qsa_tw_re[N / 2], qsa_tw_im[N / 2]; /* e^{-2 pi i k / N}, from qsa_cos_q */",
        f"static {'uint8_t' if nfft <= 256 else 'uint16_t'} qsa_rev[{'N / 2' if half else 'N'}];",
        "",
        "static void qsa_dsp_tables(void) {",
        "  int k, b;",
        *(["  for (k = 0; k <= N / 2; ++k) qsa_win[k] = qsa_win_half[k];",
           "  for (k = N / 2 + 1; k < N; ++k) qsa_win[k] = qsa_win_half[N - k];"]
          if _symmetric(dsp.window) else []),
        "  for (k = 0; k < N / 2; ++k) {",
        "    qsa_tw_re[k] = k <= N / 4 ? qsa_cos_q[k] : -qsa_cos_q[N / 2 - k];",
        "    qsa_tw_im[k] = -(k <= N / 4 ? qsa_cos_q[N / 4 - k] : qsa_cos_q[k - N / 4]);",
        "  }",
        f"  for (k = 0; k < {'N / 2' if half else 'N'}; ++k) {{",
        "    int r = 0;",
        *([f"    for (b = 0; b < {bits - 1}; ++b) r |= ((k >> b) & 1) << ({bits - 2} - b);"]
          if half else
          [f"    for (b = 0; b < {bits}; ++b) r |= ((k >> b) & 1) << ({bits - 1} - b);"]),
        "    qsa_rev[k] = r;",
        "  }",
        "}",
        "",
        *(["/* in-place radix-2 DIT FFT of M = N / 2 points, Z[k] = sum z[n] e^{-2 pi i k n / M}",
           " * (twiddles W_N^(2 k)); the first stage (W = 1) without multiplies */",
           "#define M (N / 2)",
           "static void qsa_fft(float *re, float *im) {",
           "  int i, len, j, k;",
           "  for (i = 0; i < M; ++i) {",
           "    int r = qsa_rev[i];",
           "    if (r > i) { float t = re[i]; re[i] = re[r]; re[r] = t;",
           "                 t = im[i]; im[i] = im[r]; im[r] = t; }",
           "  }",
           "  for (i = 0; i < M; i += 2) {",
           "    float tr = re[i + 1], ti = im[i + 1];",
           "    re[i + 1] = re[i] - tr; im[i + 1] = im[i] - ti;",
           "    re[i] += tr; im[i] += ti;",
           "  }",
           "  for (len = 4; len <= M; len <<= 1) {"] if half else
          ["/* in-place radix-2 DIT FFT of N points, X[k] = sum x[n] e^{-2 pi i k n / N} */",
           "static void qsa_fft(float *re, float *im) {",
           "  int i, len, j, k;",
           "  for (i = 0; i < N; ++i) {",
           "    int r = qsa_rev[i];",
           "    if (r > i) { float t = re[i]; re[i] = re[r]; re[r] = t;",
           "                 t = im[i]; im[i] = im[r]; im[r] = t; }",
           "  }",
           "  for (len = 2; len <= N; len <<= 1) {"]),
        "    int half = len >> 1, step = N / len;",
        f"    for (i = 0; i < {'M' if half else 'N'}; i += len)",
        "      for (j = 0, k = 0; j < half; ++j, k += step) {",
        "        float wr = qsa_tw_re[k], wi = qsa_tw_im[k];",
        "        float xr = re[i + j + half], xi = im[i + j + half];",
        "        float tr = xr * wr - xi * wi, ti = xr * wi + xi * wr;",
        "        re[i + j + half] = re[i + j] - tr; im[i + j + half] = im[i + j] - ti;",
        "        re[i + j] += tr; im[i + j] += ti;",
        "      }",
        "  }",
        "}",
        "",
        "/* log / exp in plain float32 arithmetic (no libm): the same bits on every IEEE",
        " * target, so the host and the Cortex-M builds give equal PCM (rel. error ~1e-7) */",
        "static float qsa_logf(float x) {",
        *([  # the fast build: the bits through registers (VMOV), not the stack (a union)
            "  uint32_t u;",
            "  float m, s, s2, p;",
            "  int e;",
            "#if defined(__GNUC__) && defined(__arm__) && defined(__ARM_FP) && (__ARM_FP & 4)",
            '  __asm__("vmov %0, %1" : "=r"(u) : "t"(x)); /* GCC went through the stack */',
            "#else",
            "  memcpy(&u, &x, sizeof u);",
            "#endif",
            "  e = (int)((u >> 23) & 0xFF) - 127;",
            "  u = (u & 0x007FFFFFu) | 0x3F800000u; /* m in [1, 2) */",
            "  memcpy(&m, &u, sizeof m);"] if fast else
          ["  union { float f; uint32_t u; } v;",
           "  float m, s, s2, p;",
           "  int e;",
           "  v.f = x;",
           "  e = (int)((v.u >> 23) & 0xFF) - 127;",
           "  v.u = (v.u & 0x007FFFFFu) | 0x3F800000u; /* m in [1, 2) */",
           "  m = v.f;"]),
        "  if (m > 1.41421356f) { m *= 0.5f; ++e; }",
        "  s = (m - 1.0f) / (m + 1.0f);",
        "  s2 = s * s;",
        "  p = s2 * (0.666666667f + s2 * (0.4f + s2 * (0.285714286f + s2 * 0.222222222f)));",
        "  return (float)e * 0.693147182f + (2.0f * s + s * p);",
        "}",
        "",
        "static float qsa_expf(float x) {",
        "  union { float f; uint32_t u; } v;",
        "  float n, r, p;",
        "  if (x < -87.0f) return 0.0f;",
        "  if (x > 88.0f) x = 88.0f;",
        "  n = (float)(int)(x * 1.44269504f + (x >= 0.0f ? 0.5f : -0.5f));",
        "  r = (x - n * 0.693145752f) - n * 1.42860677e-6f;",
        "  p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666667f + r * (0.0416666667f",
        "        + r * (0.00833333333f + r * 0.00138888889f)))));",
        "  v.u = (uint32_t)((int)n + 127) << 23;",
        "  return p * v.f;",
        "}",
        "",
        "/* round half to even (as numpy.round) for |v| < 2^22: no libm rintf */",
        "static float qsa_rint(float v) {",
        "  volatile float big = 12582912.0f; /* 1.5 * 2^23 */",
        "  return (v + big) - big;",
        "}",
        "",
        *([  # the fast build on an Arm FPU: the rounding in one VCVTR (the same integers)
            "#if defined(__GNUC__) && defined(__ARM_FP) && (__ARM_FP & 4) && __ARM_FEATURE_SAT",
            "#include <arm_acle.h>",
            "/* v rounded to the nearest int32, ties to even (FPSCR's default mode, as qsa_rint),",
            " * saturated to the int32 range; then SSATs: for finite v the integers of the",
            " * clamp-round-clamp below (a value past the float clamp saturates either way) */",
            "static inline int32_t qsa_rinti(float v) {",
            "  float t;",
            "  int32_t k;",
            '  __asm__("vcvtr.s32.f32 %0, %1" : "=t"(t) : "t"(v));',
            "  memcpy(&k, &t, sizeof k);",
            "  return k;",
            "}",
            "#define QSA_PCM16(o) ((int16_t)__ssat(qsa_rinti(o), 16))",
            "static int8_t qsa_q(float v, float scale, int zp) {",
            "  return (int8_t)__ssat(__ssat(qsa_rinti(v / scale), 16) + zp, 8);",
            "}",
            "#else",
            "#define QSA_PCM16(o) qsa_pcm16(o)",
            "static int16_t qsa_pcm16(float o) {",
            "  o = qsa_rint(o < -40000.f ? -40000.f : (o > 40000.f ? 40000.f : o));",
            "  return (int16_t)(o < -32768.f ? -32768 : (o > 32767.f ? 32767 : (int)o));",
            "}",
            *q_c,
            "#endif"] if fast else q_c),
        "",
        "void qsa_init(qsa_state *s) {",
        "  qsa_dsp_tables();",
        "  memset(s->in_buf, 0, sizeof s->in_buf);",
        "  memset(s->ola, 0, sizeof s->ola);",
        "  qsa_net_init(&s->net);",
        "  s->atten_g = 0.0f;",
        "}",
        "",
        "void qsa_set_atten_lim(qsa_state *s, float db) {",
        "  s->atten_g = db >= 0.0f ? qsa_expf(db * -0.115129255f) : 0.0f; /* ln(10) / 20 */",
        "}",
        "",
        "unsigned long qsa_state_bytes(void) { return (unsigned long)sizeof(qsa_state); }",
        "",
        "void qsa_step(qsa_state *s, const int16_t *in, int16_t *out) {",
        "  float re[N], im[N], magc[NF], cs[NF], sn[NF];",
        "  int8_t x[4 * NF], mask[NF], res[2 * NF];",
        "  float dry[HOP]; /* the input N - HOP samples before this hop's outputs */",
        "  const float g = s->atten_g;",
        *(["  int i, k;",
           "  if (g != 0.0f) memcpy(dry, s->in_buf, sizeof dry);",
           "  /* the windowed frame f as z[m] = f[2 m] + i f[2 m + 1] */",
           "  for (i = 0; i < N - HOP; i += 2) {",
           "    re[i >> 1] = s->in_buf[i] * qsa_win[i];",
           "    im[i >> 1] = s->in_buf[i + 1] * qsa_win[i + 1];",
           "  }",
           "  for (i = 0; i < HOP; i += 2) {",
           "    float v0 = (float)in[i] * (1.0f / 32768.0f);",
           "    float v1 = (float)in[i + 1] * (1.0f / 32768.0f);",
           "    re[(N - HOP + i) >> 1] = v0 * qsa_win[N - HOP + i];",
           "    im[(N - HOP + i) >> 1] = v1 * qsa_win[N - HOP + i + 1];",
           "  }",
           "  memmove(s->in_buf, s->in_buf + HOP, (N - 2 * HOP) * sizeof(float));",
           "  for (i = 0; i < HOP; ++i)",
           "    s->in_buf[N - 2 * HOP + i] = (float)in[i] * (1.0f / 32768.0f);",
           "  qsa_fft(re, im);",
           "  { /* the real FFT's bins 0..M from Z: with A = Z[k], B = conj Z[M - k],",
           "     * E = (A + B) / 2, O = -i (A - B) / 2:",
           "     * X[k] = E + W^k O, X[M - k] = conj(E - W^k O) */",
           "    const float z0r = re[0], z0i = im[0];",
           "    re[0] = z0r + z0i; im[0] = 0.0f; re[M] = z0r - z0i; im[M] = 0.0f;",
           "    for (k = 1; k <= M / 2; ++k) {",
           "      const float ar = re[k], ai = im[k], br = re[M - k], bi = -im[M - k];",
           "      const float er = 0.5f * (ar + br), ei = 0.5f * (ai + bi);",
           "      const float o_r = 0.5f * (ai - bi), o_i = -0.5f * (ar - br);",
           "      const float wr = qsa_tw_re[k], wi = qsa_tw_im[k];",
           "      const float tr = o_r * wr - o_i * wi, ti = o_r * wi + o_i * wr;",
           "      re[k] = er + tr; im[k] = ei + ti;",
           "      if (k != M - k) { re[M - k] = er - tr; im[M - k] = ti - ei; }",
           "    }",
           "  }"] if half else
          ["  int i;",
           "  if (g != 0.0f) memcpy(dry, s->in_buf, sizeof dry);",
           "  for (i = 0; i < N - HOP; ++i) re[i] = s->in_buf[i] * qsa_win[i];",
           "  for (i = 0; i < HOP; ++i) {",
           "    float v = (float)in[i] * (1.0f / 32768.0f);",
           "    re[N - HOP + i] = v * qsa_win[N - HOP + i];",
           "  }",
           "  memmove(s->in_buf, s->in_buf + HOP, (N - 2 * HOP) * sizeof(float));",
           "  for (i = 0; i < HOP; ++i)",
           "    s->in_buf[N - 2 * HOP + i] = (float)in[i] * (1.0f / 32768.0f);",
           "  memset(im, 0, sizeof im);",
           "  qsa_fft(re, im);"]),
        *(["  x[0] = qsa_q(0.0f, QSA_NET_IN_SCALE, QSA_NET_IN_ZP); /* the first row: all that */",
           "  memset(x + 1, x[0], NF - 1);"] if fast else []),
        "  for (i = 0; i < NF; ++i) {",
        "    float mag = sqrtf(re[i] * re[i] + im[i] * im[i] + EPS);",
        "    float mc = qsa_expf(COMP * qsa_logf(mag));",
        "    magc[i] = mc; cs[i] = re[i] / mag; sn[i] = im[i] / mag;",
        *([] if fast else ["    x[i] = qsa_q(0.0f, QSA_NET_IN_SCALE, QSA_NET_IN_ZP);"]),
        "    x[NF + i] = qsa_q(mc, QSA_NET_IN_SCALE, QSA_NET_IN_ZP);",
        "    x[2 * NF + i] = qsa_q(mc * cs[i], QSA_NET_IN_SCALE, QSA_NET_IN_ZP);",
        "    x[3 * NF + i] = qsa_q(mc * sn[i], QSA_NET_IN_SCALE, QSA_NET_IN_ZP);",
        "  }",
        "  qsa_net_step(&s->net, x, mask, res);",
        "  for (i = 0; i < NF; ++i) {",
        "    float m = ((float)(mask[i] - QSA_NET_OUT0_ZP) * QSA_NET_OUT0_SCALE) * magc[i];",
        "    float r0 = (float)(res[i] - QSA_NET_OUT1_ZP) * QSA_NET_OUT1_SCALE;",
        "    float r1 = (float)(res[NF + i] - QSA_NET_OUT1_ZP) * QSA_NET_OUT1_SCALE;",
        "    float rc = m * cs[i] + r0, ic = m * sn[i] + r1;",
        "    float mag = sqrtf(rc * rc + ic * ic + EPS);",
        *([  # the post-filter (gain_exponent): Y_c *= min(1, |Y_c| / |X_c|)^(g - 1)
            "    if (mag < magc[i]) {",
            "      float f = qsa_expf(GEXP1 * qsa_logf(mag / magc[i]));",
            "      rc *= f; ic *= f;",
            "      mag = sqrtf(rc * rc + ic * ic + EPS);",
            "    }"] if gexp != 1.0 else []),
        "    float sc = qsa_expf(DECOMP * qsa_logf(mag));",
        *(["    re[i] = rc * sc; im[i] = ic * sc;",
           "  }",
           "  { /* the inverse: Z[k] = E + i O, E = (X[k] + conj X[M - k]) / 2, O = (X[k] - conj",
           "     * X[M - k]) / 2 W^-k, Z[M - k] = conj E + i conj O (irfft: the DC / Nyquist",
           "     * imaginary parts ignored); conj Z stored: z = conj(FFT(conj Z)) / M, x[2 m] +",
           "     * i x[2 m + 1] = z[m] */",
           "    const float x0 = re[0], xm = re[M];",
           "    re[0] = 0.5f * (x0 + xm); im[0] = -0.5f * (x0 - xm);",
           "    for (k = 1; k <= M / 2; ++k) {",
           "      const float ar = re[k], ai = im[k], br = re[M - k], bi = -im[M - k];",
           "      const float er = 0.5f * (ar + br), ei = 0.5f * (ai + bi);",
           "      const float dr = 0.5f * (ar - br), di = 0.5f * (ai - bi);",
           "      const float wr = qsa_tw_re[k], wi = -qsa_tw_im[k];",
           "      const float o_r = dr * wr - di * wi, o_i = dr * wi + di * wr;",
           "      re[k] = er - o_i; im[k] = -(ei + o_r);",
           "      if (k != M - k) { re[M - k] = er + o_i; im[M - k] = ei - o_r; }",
           "    }",
           "  }",
           "  qsa_fft(re, im);",
           "  for (i = 0; i < N; ++i) {",
           "    float v = ((i & 1) ? -im[i >> 1] : re[i >> 1]) * (1.0f / M) * qsa_swin[i];"]
          if half else
          ["    re[i] = rc * sc; im[i] = -(ic * sc); /* conjugate: the inverse by a forward FFT */",
           "  }",
           "  im[0] = 0.0f; im[N / 2] = 0.0f; /* irfft ignores the DC / Nyquist imaginary parts */",
           "  for (i = 1; i < N / 2; ++i) { re[N - i] = re[i]; im[N - i] = -im[i]; }",
           "  qsa_fft(re, im);",
           "  for (i = 0; i < N; ++i) {",
           "    float v = re[i] * (1.0f / N) * qsa_swin[i];"]),
        "    if (i < N - HOP) v += s->ola[i];",
        "    if (i < HOP) {",
        "      float o = (g != 0.0f ? (1.0f - g) * v + g * dry[i] : v) * 32768.0f;",
        *(["      out[i] = QSA_PCM16(o);"] if fast else
          ["      o = qsa_rint(o < -40000.f ? -40000.f : (o > 40000.f ? 40000.f : o));",
           "      out[i] = (int16_t)(o < -32768.f ? -32768 : (o > 32767.f ? 32767 : (int)o));"]),
        "    } else {",
        "      s->ola[i - HOP] = v;",
        "    }",
        "  }",
        "}",
        "",
    ]
    out_dir = Path(out_dir)
    files = []
    for name, text in (("qsa_enhancer.h", "\n".join(h)), ("qsa_enhancer.c", "\n".join(body))):
        p = out_dir / name
        atomic_write_text(p, text)
        files.append(p)
    return files


PCM_HARNESS = r"""/* host harness: int16 PCM in (file) -> enhanced int16 PCM out (file) */
#include <stdio.h>
#include "qsa_enhancer.h"

static qsa_state st;

int main(int argc, char **argv) {
  FILE *fi, *fo;
  int16_t in[QSA_HOP], out[QSA_HOP];
  long hops = 0;
  if (argc < 3) { fprintf(stderr, "usage: %s in.s16 out.s16\n", argv[0]); return 2; }
  fi = fopen(argv[1], "rb");
  fo = fopen(argv[2], "wb");
  if (!fi || !fo) { fprintf(stderr, "cannot open %s / %s\n", argv[1], argv[2]); return 2; }
  qsa_init(&st);
  while (fread(in, sizeof(int16_t), QSA_HOP, fi) == QSA_HOP) {
    qsa_step(&st, in, out);
    fwrite(out, sizeof(int16_t), QSA_HOP, fo);
    ++hops;
  }
  fclose(fi);
  fclose(fo);
  printf("hops %ld\n", hops);
  return 0;
}
"""


def to_pcm16(wave: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.asarray(wave, np.float64) * 32768.0), -32768, 32767).astype(
        np.int16)


def run_host_pcm(exe: str | os.PathLike, pcm: np.ndarray, work: str | os.PathLike) -> np.ndarray:
    """Stream int16 ``pcm`` through a built PCM harness; the int16 output."""
    work = Path(work)
    fin, fout = work / "pcm_in.s16", work / "pcm_out.s16"
    fin.write_bytes(np.asarray(pcm, "<i2").tobytes())
    r = subprocess.run([str(exe), str(fin), str(fout)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ExportError(f"{exe} failed ({r.returncode}): {r.stderr[-2000:]}")
    return np.frombuffer(fout.read_bytes(), "<i2").copy()


# ---------------------------------------------------------------------------------------------
# Cortex-M build and QEMU run (stage c): mps2-an386 (Cortex-M4F), mps2-an500 (Cortex-M7)

MCU_BOARDS = {
    "cortex-m4": {"machine": "mps2-an386",
                  "flags": ("-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard")},
    "cortex-m7": {"machine": "mps2-an500",
                  "flags": ("-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard")},
}

MPS2_LD = """/* mps2 (QEMU mps2-an386 / mps2-an500): code in SSRAM1 at 0, data in SSRAM2/3 */
MEMORY {
  FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M
  RAM (rwx)  : ORIGIN = 0x20000000, LENGTH = 1M
}
ENTRY(Reset_Handler)
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) KEEP(*(.init)) KEEP(*(.fini))
            . = ALIGN(4); } > FLASH
  .ARM.exidx : { *(.ARM.exidx*) } > FLASH
  _etext = .;
  .data : AT(_etext) { _sdata = .; *(.data*) . = ALIGN(4); _edata = .; } > RAM
  .bss (NOLOAD) : { _sbss = .; __bss_start__ = .; *(.bss*) *(COMMON) . = ALIGN(8);
                    _ebss = .; __bss_end__ = .; } > RAM
  end = .;
  _end = .;
  __stack_top = ORIGIN(RAM) + LENGTH(RAM);
}
"""

STARTUP_C = r"""/* minimal Cortex-M startup for the mps2 boards: vector table, .data/.bss, FPU on */
#include <stdint.h>
extern uint32_t _etext, _sdata, _edata, _sbss, _ebss, __stack_top;
extern int main(void);
extern void _exit(int) __attribute__((weak)); /* semihosting exit, when linked (QEMU) */
void Reset_Handler(void);
static void Default_Handler(void) { for (;;) {} }
__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(&__stack_top), Reset_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, 0, 0, 0, 0, Default_Handler,
    Default_Handler, 0, Default_Handler, Default_Handler};
void Reset_Handler(void) {
  uint32_t *src = &_etext, *dst = &_sdata;
  while (dst < &_edata) *dst++ = *src++;
  for (dst = &_sbss; dst < &_ebss;) *dst++ = 0;
  *(volatile uint32_t *)0xE000ED88 |= (0xFu << 20); /* CPACR: CP10, CP11 full access */
  __asm volatile("dsb\n isb");
  {
    int rc = main();
    if (_exit) _exit(rc);
  }
  for (;;) {}
}
"""

MCU_MAIN_C = r"""/* QEMU harness: pcm_in.s16 -> qsa_step -> pcm_out.s16 through semihosting;
 * SysTick counts per hop (under -icount shift=0 it advances with executed
 * instructions, calibrated against a loop of known length); stack high-water of
 * qsa_step by painting. */
#include <stdio.h>
#include <stdint.h>
#include "qsa_enhancer.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018)
#define PAINT 0xA5A5A5A5u
#define PAINT_WORDS 8192

extern void initialise_monitor_handles(void);
static qsa_state st;
static int16_t in[QSA_HOP], out[QSA_HOP];

static uint32_t ticks_since(uint32_t t0) { return (t0 - SYST_CVR) & 0xFFFFFFu; }

__attribute__((noinline)) static void known_loop(uint32_t n) {
  __asm volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(n));  /* 2 instructions per turn */
}

__attribute__((noinline)) static uint32_t stack_used(void (*fn)(void)) {
  uint32_t sp, *top, *p, used = 0;
  __asm volatile("mov %0, sp" : "=r"(sp));
  top = (uint32_t *)(uintptr_t)(sp - 64u);
  for (p = top - PAINT_WORDS; p < top; ++p) *p = PAINT;
  fn();
  for (p = top - PAINT_WORDS; p < top; ++p)
    if (*p != PAINT) { used = (uint32_t)(top - p) * 4u; break; }
  return used;
}

static void one_step(void) { qsa_step(&st, in, out); }

int main(void) {
  FILE *fi, *fo;
  uint32_t t0, ticks, cal, hops = 0, stack = 0, s;
  uint64_t total = 0;
  uint32_t worst = 0;
  initialise_monitor_handles();
  SYST_RVR = 0xFFFFFFu; SYST_CVR = 0; SYST_CSR = 5u;
  t0 = SYST_CVR; known_loop(1000000u); cal = ticks_since(t0);
  fi = fopen("pcm_in.s16", "rb");
  fo = fopen("pcm_out.s16", "wb");
  if (!fi || !fo) { printf("qsa-mcu: cannot open pcm_in.s16 / pcm_out.s16\n"); return 2; }
  setvbuf(fi, NULL, _IONBF, 0);
  setvbuf(fo, NULL, _IONBF, 0);
  qsa_init(&st);
  while (fread(in, sizeof(int16_t), QSA_HOP, fi) == QSA_HOP) {
    if (hops < 3) { s = stack_used(one_step); if (s > stack) stack = s; }
    else {
      t0 = SYST_CVR; one_step(); ticks = ticks_since(t0);
      total += ticks; if (ticks > worst) worst = ticks;
    }
    fwrite(out, sizeof(int16_t), QSA_HOP, fo);
    ++hops;
  }
  fclose(fi);
  fclose(fo);
  printf("qsa-mcu hops %lu calib_ticks_per_2M_insns %lu timed_hops %lu total_ticks %lu "
         "worst_ticks %lu stack_bytes %lu\n", (unsigned long)hops, (unsigned long)cal,
         (unsigned long)(hops > 3 ? hops - 3 : 0), (unsigned long)total, (unsigned long)worst,
         (unsigned long)stack);
  return 0;
}
"""

EXAMPLE_MAIN_C = r"""/* main_example.c: the whole firmware a board needs around the model: one 8 ms
 * hop of PCM in, one out. Replace the audio stubs with your codec driver (I2S/SAI DMA callback). */
#include <stdint.h>
#include "qsa_enhancer.h"

static qsa_state state;           /* all of the model's RAM besides the stack */
static volatile int16_t mic[QSA_HOP], spk[QSA_HOP];

static void wait_for_hop(void) { /* block until the codec DMA filled mic[] */ }

int main(void) {
  qsa_init(&state);
  for (;;) {
    int16_t in[QSA_HOP], out[QSA_HOP];
    int i;
    wait_for_hop();
    for (i = 0; i < QSA_HOP; ++i) in[i] = mic[i];
    qsa_step(&state, in, out);
    for (i = 0; i < QSA_HOP; ++i) spk[i] = out[i];
  }
}
"""

MAKEFILE = """# Build the qsa C export for a Cortex-M board (GNU Arm toolchain), or for the host.
#   make            host test binary (qsa_pcm: in.s16 -> out.s16)
#   make m4         Cortex-M4F ELF for QEMU mps2-an386 (semihosting harness)
#   make qemu-m4    run it:  qemu-system-arm -M mps2-an386 -nographic -semihosting
#                            -icount shift=0 -kernel qsa_m4.elf   (reads pcm_in.s16)
# In your own firmware: add qsa_net.c qsa_enhancer.c and include qsa_enhancer.h (C99, no heap).
CC ?= cc
ARMCC ?= arm-none-eabi-gcc
SRC = qsa_net.c qsa_enhancer.c
CFLAGS = -std=c99 -O2 -ffp-contract=off -fno-math-errno -Wall -Wextra -Wno-unused-function
M4 = -mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard -mthumb
M7 = -mcpu=cortex-m7 -mfpu=fpv5-d16 -mfloat-abi=hard -mthumb
ARMLD = --specs=rdimon.specs -nostartfiles -T mcu/mps2.ld -Wl,--gc-sections
qsa_pcm: $(SRC) qsa_pcm_main.c
\t$(CC) $(CFLAGS) -o $@ $^ -lm
m4: $(SRC) mcu/startup.c mcu/qsa_mcu_main.c
\t$(ARMCC) $(CFLAGS) $(M4) -ffunction-sections -fdata-sections -I. -o qsa_m4.elf $^ $(ARMLD) -lm
m7: $(SRC) mcu/startup.c mcu/qsa_mcu_main.c
\t$(ARMCC) $(CFLAGS) $(M7) -ffunction-sections -fdata-sections -I. -o qsa_m7.elf $^ $(ARMLD) -lm
qemu-m4: m4
\tqemu-system-arm -M mps2-an386 -nographic -semihosting -icount shift=0 -kernel qsa_m4.elf
qemu-m7: m7
\tqemu-system-arm -M mps2-an500 -nographic -semihosting -icount shift=0 -kernel qsa_m7.elf
"""


def write_mcu_files(out_dir: str | os.PathLike) -> list[Path]:
    from qsa.fileio import atomic_write_text

    out_dir = Path(out_dir)
    (out_dir / "mcu").mkdir(parents=True, exist_ok=True)
    files = []
    for rel, text in (("mcu/mps2.ld", MPS2_LD), ("mcu/startup.c", STARTUP_C),
                      ("mcu/qsa_mcu_main.c", MCU_MAIN_C), ("main_example.c", EXAMPLE_MAIN_C),
                      ("Makefile", MAKEFILE.replace("\\t", "\t")),
                      ("qsa_pcm_main.c", PCM_HARNESS)):
        p = out_dir / rel
        atomic_write_text(p, text)
        files.append(p)
    return files


def arm_toolchain() -> str | None:
    """Why the Cortex-M build cannot run here (None when arm-none-eabi-gcc and
    qemu-system-arm are both on PATH)."""
    import shutil

    missing = [t for t in ("arm-none-eabi-gcc", "arm-none-eabi-size", "qemu-system-arm")
               if shutil.which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not on PATH: install the Debian packages "
                "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm")
    return None


def _elf_sizes(elf: Path) -> dict[str, int]:
    """text / rodata / data / bss of an ELF, from its section headers (GNU size -A)."""
    r = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True,
                       check=True)
    sec = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sec[parts[0]] = int(parts[1])
    return sec


def build_mcu(out_dir: str | os.PathLike, cpu: str = "cortex-m4", opt: str = "-O2") -> dict:
    """Build the semihosting harness ELF and the footprint ELF (main_example.c: what a board
    links) for ``cpu``; their paths and the footprint's flash / static RAM."""
    why = arm_toolchain()
    if why:
        raise ExportError(why)
    board = MCU_BOARDS[cpu]
    out_dir = Path(out_dir)
    tag = cpu.replace("cortex-", "")
    common = ["arm-none-eabi-gcc", "-std=c99", opt, "-ffp-contract=off", "-fno-math-errno",
              "-Wall", "-Wextra", "-Werror",
              "-Wno-unused-function", "-mthumb", *board["flags"], "-ffunction-sections",
              "-fdata-sections", f"-I{out_dir}", "--specs=rdimon.specs", "-nostartfiles",
              "-T", str(out_dir / "mcu/mps2.ld"), "-Wl,--gc-sections"]
    src = [str(out_dir / "qsa_net.c"), str(out_dir / "qsa_enhancer.c"),
           str(out_dir / "mcu/startup.c")]
    elf = out_dir / f"qsa_{tag}.elf"
    foot = out_dir / f"qsa_{tag}_footprint.elf"
    for target, main in ((elf, "mcu/qsa_mcu_main.c"), (foot, "main_example.c")):
        cmd = [*common, "-o", str(target), *src, str(out_dir / main), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ExportError(f"Cortex-M build failed ({' '.join(cmd)}):\n{r.stderr[-4000:]}")
    sec = _elf_sizes(foot)
    text = sec.get(".text", 0) + sec.get(".ARM.exidx", 0)
    data, bss = sec.get(".data", 0), sec.get(".bss", 0)
    return {"cpu": cpu, "elf": str(elf), "footprint_elf": str(foot), "opt": opt,
            "flash_bytes": text + data, "text_rodata_bytes": text, "data_bytes": data,
            "bss_bytes": bss, "static_ram_bytes": data + bss}


def run_qemu(elf: str | os.PathLike, cpu: str, pcm: np.ndarray, work: str | os.PathLike,
             timeout: float = 600) -> dict:
    """Run the harness ELF under qemu-system-arm (semihosting, -icount shift=0) on ``pcm``;
    its int16 output, instructions per hop (SysTick, calibrated) and stack high-water."""
    import re

    work = Path(work)
    (work / "pcm_in.s16").write_bytes(np.asarray(pcm, "<i2").tobytes())
    out_path = work / "pcm_out.s16"
    if out_path.exists():
        out_path.unlink()
    cmd = ["qemu-system-arm", "-M", MCU_BOARDS[cpu]["machine"], "-nographic", "-monitor", "none",
           "-semihosting-config", "enable=on,target=native", "-icount", "shift=0",
           "-kernel", str(Path(elf).resolve())]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=timeout)
    m = re.search(r"qsa-mcu hops (\d+) calib_ticks_per_2M_insns (\d+) timed_hops (\d+) "
                  r"total_ticks (\d+) worst_ticks (\d+) stack_bytes (\d+)", r.stdout)
    if r.returncode != 0 or m is None:
        raise ExportError(f"QEMU run failed ({r.returncode}): {r.stdout[-2000:]} "
                          f"{r.stderr[-2000:]}")
    hops, cal, timed, total, worst, stack = (int(v) for v in m.groups())
    insn_per_tick = 2_000_000 / cal
    return {"out": np.frombuffer(out_path.read_bytes(), "<i2").copy(), "hops": hops,
            "insn_per_tick": insn_per_tick,
            "instructions_per_hop_mean": total / max(1, timed) * insn_per_tick,
            "instructions_per_hop_max": worst * insn_per_tick, "stack_bytes": stack,
            "machine": MCU_BOARDS[cpu]["machine"]}


# ---------------------------------------------------------------------------------------------
# verification and the `qsa export --target c` entry point


def network_frames(step, x_tensor: dict, wave: np.ndarray) -> np.ndarray:
    """The int8 network inputs (T, size) of ``wave`` streamed through the model's host DSP,
    quantised as the TFLite runtimes quantise them (round half to even, clip)."""
    dsp = step.host_dsp()
    hop = int(dsp.hop)
    state = [np.zeros((1, dsp.n_fft - hop), np.float32), np.zeros((1, dsp.n_fft - hop),
                                                                  np.float32)]
    frames = []
    scale = np.float32(x_tensor["scale"])
    for t in range(len(wave) // hop):
        fr = np.asarray(wave[t * hop : (t + 1) * hop], np.float32).reshape(1, hop)
        x, _, state = dsp.analysis(fr, *state)
        q = np.clip(np.round(x / scale) + x_tensor["zero_point"], -128, 127).astype(np.int8)
        frames.append(q.reshape(-1))
    return np.stack(frames)


def tflm_network_outputs(tflite_path, frames: np.ndarray, arena_size: int = 1 << 20,
                         n_outputs: int | None = None):
    """Stream int8 ``frames`` through the TFLite-Micro interpreter, feeding each step's state
    outputs back as inputs (int8, unchanged); per frame the concatenated int8 outputs. The
    state outputs end at output ``n_outputs`` (default: the last; a debug graph appends more)."""
    from tflite_micro.python.tflite_micro import runtime

    g = read_graph(tflite_path)
    it = runtime.Interpreter.from_file(str(tflite_path), arena_size=int(arena_size))
    st = [np.full(g.tensors[i].shape, g.tensors[i].zp, np.int8) for i in g.inputs[1:]]
    n_all = len(g.outputs)
    n_out = n_all if n_outputs is None else n_outputs
    x_shape = g.tensors[g.inputs[0]].shape
    rows = []
    for f in frames:
        it.set_input(f.reshape(x_shape), 0)
        for k, s in enumerate(st):
            it.set_input(s, k + 1)
        it.invoke()
        outs = [np.asarray(it.get_output(k)).astype(np.int8) for k in range(n_all)]
        st = [o.copy() for o in outs[n_out - len(st) : n_out]]
        rows.append(np.concatenate([o.reshape(-1) for o in outs]))
    return np.stack(rows)


def c_network_outputs(exe, frames: np.ndarray, work) -> np.ndarray:
    """The host C network (HOST_HARNESS) on the same frames, in the same layout."""
    work = Path(work)
    fin, fout = work / "net_in.i8", work / "net_out.i8"
    fin.write_bytes(np.ascontiguousarray(frames, np.int8).tobytes())
    r = subprocess.run([str(exe), str(fin), str(fout)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ExportError(f"{exe} failed ({r.returncode}): {r.stderr[-2000:]}")
    out = np.frombuffer(fout.read_bytes(), np.int8)
    return out.reshape(len(frames), -1)


def _diff_per_tensor(got: np.ndarray, want: np.ndarray, g: Graph) -> list[dict]:
    """|got - want| (int8 steps) per graph output tensor, in the harness's layout: the
    network's outputs, then the state (the graph's state outputs, in order)."""
    d = np.abs(got.astype(np.int64) - want.astype(np.int64))
    n_state = len(g.inputs) - 1
    outs = g.outputs[: len(g.outputs) - n_state] + g.outputs[len(g.outputs) - n_state :]
    rows, o = [], 0
    for k, i in enumerate(outs):
        size = g.tensors[i].size
        dd = d[:, o : o + size]
        o += size
        rows.append({"tensor": int(i), "kind": "state" if k >= len(outs) - n_state else "output",
                     "max_abs_diff": int(dd.max()) if dd.size else 0,
                     "mean_abs_diff": round(float(dd.mean()), 4) if dd.size else 0.0})
    return rows


def verify_c(out_dir, tflite_path, step, net: CNetwork, wave: np.ndarray,
             mcu: tuple[str, ...] = ("cortex-m4",), keep_build: bool = False,
             arith: str = "exact") -> dict:
    """Compile what generate_c / generate_dsp wrote with the host cc and check it:

    * network: the int8 outputs and state of every step on ``wave`` equal the TFLite-Micro
      interpreter's (``network_int8_identical``, the number of differing values); for
      ``arith="fast"`` within the stated bound instead (``C_FAST_MAX_ABS_INT8`` /
      ``C_FAST_MEAN_ABS_INT8`` per output tensor: ``within_bound``);
    * PCM: the C enhancer's int16 output against the torch step (SQNR) and against the
      TFLite-Micro runtime with the numpy host DSP;
    * for each of ``mcu`` when the Arm toolchain and QEMU are installed: the Cortex-M ELF
      under qemu-system-arm, its output equal to the host build's, flash / RAM / stack and
      instructions per hop (else the reason it was skipped)."""
    import tempfile

    import torch

    from .exporters import sqnr_db
    from .runtimes import load_runtime
    from .step import stream_torch

    out_dir = Path(out_dir)
    rep: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qsa-c-") as tmp:
        work = Path(tmp)
        for p in out_dir.glob("*.[ch]"):
            (work / p.name).write_bytes(p.read_bytes())
        if (out_dir / "mcu").is_dir():
            (work / "mcu").mkdir()
            for p in (out_dir / "mcu").iterdir():
                (work / "mcu" / p.name).write_bytes(p.read_bytes())
        # network, int8 against TFLite-Micro
        frames = network_frames(step, net.inputs[0], wave)
        exe = build_host(work, HOST_HARNESS, "qsa_net_host")
        got = c_network_outputs(exe, frames, work)
        want = tflm_network_outputs(tflite_path, frames)
        if got.shape != want.shape:
            raise ExportError(f"C network output layout {got.shape} != TFLM {want.shape}")
        diff = int(np.count_nonzero(got != want))
        per = _diff_per_tensor(got, want, read_graph(tflite_path))
        rep["network"] = {
            "arith": arith,
            "frames": int(len(frames)), "values_per_frame": int(want.shape[1]),
            "differing_values": diff, "network_int8_identical": diff == 0,
            "max_abs_diff": int(np.abs(got.astype(int) - want.astype(int)).max()),
            "per_tensor": per,
        }
        if arith == "fast":
            rep["network"]["bound"] = {"max_abs_int8": C_FAST_MAX_ABS_INT8,
                                       "mean_abs_int8": C_FAST_MEAN_ABS_INT8}
            rep["network"]["within_bound"] = all(
                r["max_abs_diff"] <= C_FAST_MAX_ABS_INT8
                and r["mean_abs_diff"] <= C_FAST_MEAN_ABS_INT8 for r in per)
        # PCM
        pcm = to_pcm16(wave)
        wq = pcm.astype(np.float32) / 32768.0
        pexe = build_host(work, PCM_HARNESS, "qsa_pcm", sources=("qsa_net.c", "qsa_enhancer.c"))
        y_c = run_host_pcm(pexe, pcm, work)
        yc = y_c.astype(np.float32) / 32768.0
        ref, _ = stream_torch(step, torch.from_numpy(wq))
        ref = ref.numpy()
        y_t = load_runtime("tflm", tflite_path).run_utterance(wq)
        n = min(len(yc), len(ref), len(y_t))
        rep["pcm"] = {
            "samples": int(n),
            "sqnr_db_vs_torch_fp32": round(float(sqnr_db(ref[:n], yc[:n])), 2),
            "sqnr_db_vs_tflm": round(float(sqnr_db(y_t[:n], yc[:n])), 2),
            "tflm_sqnr_db_vs_torch_fp32": round(float(sqnr_db(ref[:n], y_t[:n])), 2),
        }
        if keep_build:
            (out_dir / "qsa_pcm").write_bytes(pexe.read_bytes())
            (out_dir / "qsa_pcm").chmod(0o755)
        # Cortex-M under QEMU
        rep["mcu"] = {}
        why = arm_toolchain()
        for cpu in mcu:
            if why:
                rep["mcu"][cpu] = {"skipped": why}
                continue
            b = build_mcu(work, cpu)
            r = run_qemu(b["elf"], cpu, pcm, work)
            y_m = r.pop("out")
            b.pop("elf")
            b.pop("footprint_elf")
            r["equal_to_host"] = bool(len(y_m) == len(y_c) and np.array_equal(y_m, y_c))
            r["ram_bytes"] = b["static_ram_bytes"] + r["stack_bytes"]
            rep["mcu"][cpu] = {**b, **r}
    return rep


def c_header_note(model_name: str, rep: dict | None) -> str:
    """The measured line of the generated header: per Cortex-M core, flash (all code), RAM
    (static + stack high-water) and instructions per hop (QEMU -icount shift=0, SysTick)."""
    mcu = (rep or {}).get("mcu", {})
    net = (rep or {}).get("network", {})
    if net.get("arith") == "fast":
        model_name += (f" (arith fast: within {net['bound']['max_abs_int8']} int8 steps of "
                       f"TFLite-Micro, measured max {net['max_abs_diff']})")
    parts = []
    for cpu, r in mcu.items():
        if "instructions_per_hop_mean" not in r:
            continue
        parts.append(f"{cpu} (QEMU {r['machine']}, -icount shift=0, SysTick): flash "
                     f"{r['flash_bytes']:,} B, RAM {r['ram_bytes']:,} B (static "
                     f"{r['static_ram_bytes']:,} + stack {r['stack_bytes']:,}), "
                     f"{r['instructions_per_hop_mean']:,.0f} instructions per hop")
    if not parts:
        return f"{model_name}: Cortex-M figures not measured (no Arm toolchain at export)"
    return f"{model_name} measured on " + ";\n * ".join(parts)


def export_c(model, out_dir, model_name: str | None = None, force: bool = False,
             verify_wave: np.ndarray | None = None, calib=None,
             mcu: tuple[str, ...] = ("cortex-m4", "cortex-m7"), arith: str = "exact"):
    """``qsa export --target c``: the TFLite-Micro int8 export (model.tflite, its report), then
    the C99 folder generated from that file (``arith``: "exact", TFLite-Micro's integers, or
    "fast", see generate_c), compiled and verified (``verify_c``); the report.json gets a
    ``c`` section and ``target: c``. Raises ExportError when the C network differs from
    TFLite-Micro (beyond the fast build's bound) or a Cortex-M run differs from the host
    build."""
    from .exporters import EXPORTERS

    if arith not in C_ARITH:
        raise ExportError(f"arith={arith!r}: expected one of {', '.join(C_ARITH)}")
    out_dir = Path(out_dir)
    if (out_dir / "qsa_net.c").exists() and not force:
        raise ExportError(f"{out_dir / 'qsa_net.c'} already exists; pass --force to overwrite it")
    exp = EXPORTERS["tflm"](model, "int8", out_dir, calib=calib, verify_wave=verify_wave,
                            model_name=model_name, force=force)
    res = exp.run()
    if not exp.split:
        raise ExportError("the C export needs a model with a DSP / network split "
                          "(qsa.export.split), such as qcgan-35k")
    return export_c_from_tflm(res, exp.step, np.asarray(exp.verify_wave, np.float32), out_dir,
                              model_name, mcu, arith)


def export_c_from_tflm(res, step, wave: np.ndarray, out_dir, model_name: str | None = None,
                       mcu: tuple[str, ...] = ("cortex-m4", "cortex-m7"),
                       arith: str = "exact"):
    """The C half of ``export_c``: the folder generated from the TFLite-Micro export ``res``
    (an ExportResult: its model.tflite and report) for the model's ``step``, verified on
    ``wave``, with the report written (``out_dir`` may be res's folder or another)."""
    import json
    import shutil

    from qsa.fileio import atomic_write_text

    from .exporters import ExportResult

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tfl = res.artifact
    if tfl.parent.resolve() != out_dir.resolve():  # the TFLite-Micro runtime reads both
        shutil.copyfile(tfl, out_dir / tfl.name)
        shutil.copyfile(res.report_path, out_dir / "report.json")
        tfl = out_dir / tfl.name
    net = generate_c(tfl, out_dir, header_note=model_name or "", arith=arith)
    dsp_files = generate_dsp(step, net, out_dir)
    mcu_files = write_mcu_files(out_dir)
    rep = verify_c(out_dir, tfl, step, net, wave, mcu, arith=arith)
    # the measured figures go into the generated header comment
    net = generate_c(tfl, out_dir, header_note=c_header_note(model_name or "model", rep),
                     arith=arith)
    if arith == "fast":
        from .exporters import INT8_SQNR_FLOOR_DB

        net_ok = (rep["network"]["within_bound"]
                  and rep["pcm"]["sqnr_db_vs_torch_fp32"] >= INT8_SQNR_FLOOR_DB)
    else:
        net_ok = rep["network"]["network_int8_identical"]
    ok = net_ok and all(v.get("equal_to_host", True) for v in rep["mcu"].values())
    report = dict(res.report)
    report.update({
        "target": "c", "artifact": "qsa_net.c",
        "tflm_artifact": tfl.name,
        "c": {
            **rep,
            "arith": arith,
            # what was generated next to how it compared (verify_c's "network")
            "network": {"ops": net.n_ops, "macs_per_step": net.macs,
                        "const_bytes": net.const_bytes, "weight_bytes": net.weight_bytes,
                        "arena_bytes": net.arena_bytes, "state_bytes": net.state_bytes,
                        "scratch_bytes": net.scratch_bytes, **net.info, **rep["network"]},
        },
    })
    report["verified"] = bool(report.get("verified")) and bool(ok)
    atomic_write_text(out_dir / "report.json", json.dumps(report, indent=2) + "\n")
    files = list(res.files) + net.files + dsp_files + mcu_files
    if not ok:
        what = ("stay within its bound of TFLite-Micro / torch" if arith == "fast"
                else "reproduce TFLite-Micro")
        raise ExportError(f"{out_dir}: the C build ({arith}) does not {what} / the host build: "
                          f"{json.dumps(rep['network'])}, pcm {json.dumps(rep['pcm'])}, "
                          f"mcu {json.dumps(rep['mcu'])}")
    return ExportResult("c", "int8", out_dir / "qsa_net.c", out_dir / "report.json", report,
                        files)


def eval_utterances(n: int = 20) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` (clean, noisy) pairs: espeak-ng sentences in several voices at 0 / 5 / 10 dB SNR
    (synthetic speech where espeak-ng is absent); deterministic."""
    import itertools

    from .calib import SENTENCES, espeak_speech, noisy, synthetic_speech

    voices = ("en-us", "en-gb+m3", "en-us+f3", "en-gb+f2")
    out = []
    for k, (sent, voice) in enumerate(itertools.product(SENTENCES, voices)):
        if len(out) == n:
            break
        clean = espeak_speech(sent, voice=voice)
        if clean is None:
            clean = synthetic_speech(2.0, seed=k)
        out.append((clean, noisy(clean, (0.0, 5.0, 10.0)[k % 3], seed=k)))
    return out


def pesq_c_vs_tflm(pcm_exe, tflite_path, pairs, delay: int, work) -> dict:
    """PESQ-WB of the C enhancer (``pcm_exe``) and of the TFLite-Micro runtime (numpy host DSP)
    on each (clean, noisy) pair, outputs aligned by ``delay`` samples."""
    from qsa.metrics.scores import pesq_score

    from .runtimes import load_runtime

    rt = load_runtime("tflm", tflite_path)
    c_scores, t_scores = [], []
    for clean, noisy_ in pairs:
        pcm = to_pcm16(noisy_)
        y_c = run_host_pcm(pcm_exe, pcm, work).astype(np.float32) / 32768.0
        y_t = rt.run_utterance(pcm.astype(np.float32) / 32768.0)
        n = min(len(y_c), len(y_t)) - delay
        ref = np.asarray(clean[:n], np.float64)
        c_scores.append(pesq_score(ref, y_c[delay : delay + n]))
        t_scores.append(pesq_score(ref, y_t[delay : delay + n]))
    c, t = np.asarray(c_scores), np.asarray(t_scores)
    return {"utterances": len(pairs), "pesq_wb_c": float(c.mean()),
            "pesq_wb_tflm": float(t.mean()), "mean_abs_diff": float(np.abs(c - t).mean()),
            "max_abs_diff": float(np.abs(c - t).max()), "pesq_wb_c_each": c.tolist(),
            "pesq_wb_tflm_each": t.tolist()}


# ---------------------------------------------------------------------------------------------
# the C build as a qsa runtime (kind "c"), for `qsa compare` and the runtime tests


class CRuntime:
    """The generated C enhancer (PCM in, PCM out) as a streaming runtime: the folder's C is
    compiled with the host cc into a shared library and called through ctypes, one hop per
    ``step``; the state is the ``qsa_state`` struct's bytes (float32 values 0..255, so it
    round-trips the Runtime interface unchanged). Float frames map to int16 at full scale
    32768, as ``to_pcm16``. ``atten_lim_db``: the C strength control (``qsa_set_atten_lim``,
    the mix of ``qsa.enhancement``, done in float before the int16 rounding); None: none."""

    kind = "c"

    def __new__(cls, folder, atten_lim_db: float | None = None):
        from .runtimes import Runtime

        class _CRuntime(Runtime):
            kind = "c"

            def __init__(self, folder, atten_lim_db):
                import ctypes
                import re
                import tempfile

                from qsa.enhancement import check_atten_lim

                folder = Path(folder)
                self.source = str(folder / "qsa_net.c")
                cc = host_cc()
                if cc is None:
                    raise ExportError("the c runtime needs a host C compiler (cc/gcc/clang)")
                self._tmp = tempfile.TemporaryDirectory(prefix="qsa-c-rt-")
                so = Path(self._tmp.name) / "libqsa.so"
                cmd = [cc, "-std=c99", "-O2", "-ffp-contract=off", "-fno-math-errno", "-shared",
                       "-fPIC", "-o", str(so), str(folder / "qsa_net.c"),
                       str(folder / "qsa_enhancer.c"), f"-I{folder}", "-lm"]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise ExportError(f"c runtime build failed: {r.stderr[-2000:]}")
                self._lib = ctypes.CDLL(str(so))
                self._lib.qsa_state_bytes.restype = ctypes.c_ulong
                self._lib.qsa_set_atten_lim.argtypes = [ctypes.c_void_p, ctypes.c_float]
                db = check_atten_lim(atten_lim_db)
                self.atten_lim_db = -1.0 if db is None else float(db)
                self._nbytes = int(self._lib.qsa_state_bytes())
                hop = int(re.search(r"#define QSA_HOP (\d+)",
                                    (folder / "qsa_enhancer.h").read_text()).group(1))
                super().__init__(hop, [(self._nbytes,)])

            def init_state(self):
                import ctypes

                buf = (ctypes.c_uint8 * self._nbytes)()
                self._lib.qsa_init(buf)
                self._lib.qsa_set_atten_lim(buf, self.atten_lim_db)
                return [np.frombuffer(buf, np.uint8).astype(np.float32)]

            def _run(self, inputs):
                import ctypes

                frame, state = inputs
                buf = (ctypes.c_uint8 * self._nbytes).from_buffer_copy(
                    np.asarray(state, np.float32).reshape(-1).astype(np.uint8).tobytes())
                pcm = to_pcm16(np.asarray(frame, np.float32).reshape(-1))
                out = np.zeros(self.hop, np.int16)
                self._lib.qsa_step(buf, pcm.ctypes.data_as(ctypes.c_void_p),
                                   out.ctypes.data_as(ctypes.c_void_p))
                return [(out.astype(np.float32) / 32768.0).reshape(1, self.hop),
                        np.frombuffer(buf, np.uint8).astype(np.float32)]

        return _CRuntime(folder, atten_lim_db)
