"""The int8 kernel library of the C export (``qsa export --target c``), as C99 source text.

Every kernel follows TFLite-Micro's reference int8 arithmetic (``tensorflow/lite/kernels/
internal/reference``, gemmlowp's fixed-point helpers) so that a generated network computes the
very integers the TFLite-Micro interpreter computes for the same ``.tflite`` file: the
double-rounding ``MultiplyByQuantizedMultiplier`` (TFLite's default build), ADD/SUB with the
20-bit left shift and three multipliers, MUL/PRELU/MEAN/SUM with one (or two) requantisation
multipliers, per-channel conv / depthwise / fully connected, the gemmlowp ``exp`` / ``1/(1+x)`` /
logistic for SOFTMAX and LOGISTIC, the Newton-Raphson ``1/sqrt`` of RSQRT. The multipliers and
shifts are computed in Python (``qsa.export.c_export``) exactly as each kernel's ``Prepare``
does, and written next to the weights as ``const`` arrays. No heap, no float, no libc beyond
``string.h``; the int64 divisions of the reference are written as shifts (Cortex-M has no
64-bit divide instruction).

The exporter calls the faster kernels (``qsa_addf``, ``qsa_mulf``, ``qsa_fcf``, ``qsa_convf``,
``qsa_dwconvf``, ``qsa_bmmf``, ``qsa_bmm_sel``, RSQRT as a table) where it can prove from the
constants that they compute the same integers: the requantisation in SMMLAR form
(``qsa_rqf``: exact for |acc| < 2^30 and a right shift of 1..22 bits, bounded at export from
the weights), SMLAD / SXTB16 dot products on cores with the DSP extension (portable C on the
host, the same integers), the quaternion Hamilton expansion (a constant BATCH_MATMUL whose
rows each pick one component, +-q) as a selection of 2K requantised values per column,
convolutions through a zero-point-padded im2col column. Elsewhere the reference kernels run.

The lean kernels (``generate_c(lean=True)``, the default; every one exact, the same integers
as the kernels above, which ``lean=False`` keeps): ``qsa_addh`` / ``qsa_addc`` (ADD / SUB where
one operand's rescale is TFLite's exact 1/2, (2^30, shift 0): its term is a shift, no rounding;
with a constant operand, a bias, that operand's terms once per call), ``qsa_preluf`` (both
branches in SMMLAR form, left shifts included), ``qsa_fcs`` (constant-weight FULLY_CONNECTED,
unit by unit, four rows per pass), ``qsa_convc`` (one-column-wide CONV_2D as an im2col block
of pixels fed to ``qsa_fcs``), ``qsa_dwconvs`` (depthwise, four channels per word, the input
offset folded through zero-point padding), ``qsa_bmm_ham`` (the Hamilton expansion's one row
pattern: 4 requantisations per column, the negative components as 2 off - the positive ones,
saturated, which the exporter checks on all 256 inputs of each op), ``qsa_bmm2`` (activation
x activation BATCH_MATMUL, 2 x 2 outputs per pass). Init-only code (the
LOGISTIC / SOFTMAX / RSQRT tables) is optimised for size.

The blocked kernels (lean, 12-07; all exact): ``qsa_blk4`` multiplies a block of four rows,
sign-extended once into halfword pairs (``qsa_x4``), with every unit (eight SMLADs per weight
word, LDRD / STRD with writeback where the DSP extension has them: a hop is counted in
instructions); ``qsa_fcx`` (constant-weight FULLY_CONNECTED; small weights expanded once per
call; a leftover row as four copies of itself), ``qsa_fcxr`` (activation weights: the
offsets' terms as one more group of the dot product, (x + x_off) . w + w_off sum (x + x_off))
and ``qsa_convx`` (one-column CONV_2D, four neighbouring pixels of a row per block, expanded
straight from the input, the filter once per call) feed it; ``qsa_xham`` (12-07) writes the
block of a Hamilton expansion's four rows straight from the expansion's input (4
requantisations and 3 saturated negations per column, qsa_bmm_ham's integers, as halfword
pairs in the consumer's (column, component) depth order), so ``qsa_fcx`` / ``qsa_convx`` read
the expansion without it being materialised (h != 0). ADD / SUB / MUL keep twice the
terms (no doubling per value) and a contiguous inner loop; MEAN / SUM requantise in SMMLAR
form where the shift allows; TRANSPOSE / SLICE move runs of 2 or 4 bytes as one halfword /
word and strided runs four bytes to a word.

The fast build (``generate_c(arith="fast")``: qsa_net.c defines ``QSA_ARITH_FAST`` before
including this file; not TFLite-Micro's integers, within the bound ``qsa.export.c_export``
states and checks): ``qsa_blk4`` takes a bias per row of its block (per_channel bit 1: a
folded ADD of a constant), ``qsa_xham`` writes the Hamilton expansion's exact values B +
b_off, ``qsa_lnorm`` (a layer norm in one pass), ``qsa_addprelu`` (ADD then PRELU) and
``qsa_addg`` (ADD / SUB) requantise once, ``qsa_silu_table`` fills one table for LOGISTIC then
MUL(x, logistic(x)). Tuned for instructions per hop (12-07, the same integers as before):
``qsa_blk4n`` two weight words per turn, one loop per kind of weights, ``qsa_rqa`` (the
requantisation from acc itself, SMMLAR against 2 m - 2^32); ``qsa_convx`` expands each input
row once into a sliding buffer of rows (block stride SH rows); ``qsa_xham`` writes six pairs
with STRDs; ``qsa_dwconvs`` hoists each channel's constants. Round 2 (12-07, the same integers
again): ``qsa_blk4a``, on the DSP extension one unit's blocks of ``qsa_blk4n`` as one assembly
loop (the unit's constants in a ``qsa_blk4c`` struct: GCC spilled them per block; the portable C
loop elsewhere); ``qsa_addg_run`` (a run of ADD values, four a turn as (x, y) halfword pairs
against (ka, kb): one SMLAD, then ``qsa_rqa``), ``qsa_addprelu_col`` / ``qsa_preluf_col`` (alpha
constant along a column: one index for every stream, alpha in a register); ``qsa_bmm_hamt``
(the materialised Hamilton expansion writing any layout of the form b bs + (i / 4) r1 + (i % 4)
r2 + (j / n2) s1 + (j % n2) s2: its own, or that of the TRANSPOSE reading it, which then does
not run); ``qsa_bmm2`` building B's (k, k + 1) column pairs two rows by four columns a turn. The
exporter compiles out general paths no call needs (``QSA_CONVX_W4_ONLY``,
``QSA_PRELUF_COLS_ONLY``). Round 3 (12-07, the same integers once more): ``qsa_blk4a`` loads
two rows' pairs per LDM (11 / 13 instructions per 16 MACs for expanded / int8 weights, were
13 / 15); ``qsa_blk4n`` walks the units with pointers; ``qsa_xhamn`` expands a convolution
block's input rows in one call (``qsa_xham`` its one-row form); ``qsa_fcx`` computes depth-4
rows (the mask heads) row by row, its leftover-row loop compiled out where no call needs it
(``QSA_FCX_ROWS4_ONLY``); ``qsa_bmm2`` pads K to a multiple of 4 and keeps A's rows in
interleaved pairs (4 LDRD + 8 SMLAD per 16 MACs, in assembly); ``qsa_gather4`` chooses the kind
of run once per row (and de-interleaves 8 bytes for 4-byte runs at stride 2); ``qsa_lnorm``
takes the variance from per-component sums (sum (N x - S)^2 = N^2 sum x^2 - N S^2) and
requantises x (N r) - S r, no buffer; ``qsa_reduce`` sums over dim 2 straight from x;
``qsa_softmax`` rounds its divisions as adds and shifts (every value >= 0) and its
doubling-high-multiply as one SMMLAR; ``qsa_dwconvs`` takes its folded bias from
``qsa_dwconvs_bias`` at init (RAM, not flash) and requantises in a pass of its own. Round 4
(12-07, the same integers): ``qsa_dwconvs`` takes the folded bias and the filter as halfword
pairs per four channels and tap from ``qsa_dwconvs_init`` (RAM), one assembly loop per output
pixel (``qsa_dwpix``: 11 instructions per tap and four channels, the requantisation inside);
``qsa_addprelu`` / ``qsa_preluf`` run their columns in assembly (``qsa_addprelu_cola``,
``qsa_preluf_cola``); ``qsa_bmm2`` requantises as ``qsa_rqa``; ``qsa_softmax`` counts leading
zeros with CLZ. Both builds share ``qsa_dw_taps`` (an output pixel's tap rows) and the exact
build's ``qsa_dwconvs`` its four-channel dot product ``qsa_dw4``. Round 5 (12-08, the same
integers): ``qsa_bmm2`` keeps B's columns in interleaved pairs like A's rows and runs a row
pair's passes with their requantisations in assembly (``qsa_bmm2_row``), building B's pairs
four rows a turn; ``qsa_bmm_hamt`` one
batch's columns in assembly (``qsa_hamt_cols``); special paths the exporter switches on where a
call uses them (``QSA_REDUCE_C4``: sums of four unrolled, a shift >= 0 as one SMMLAR;
``QSA_LNORM_N3``: layer norms of comps x 3 unrolled); ``qsa_lut`` four values a turn. Without
``QSA_ARITH_FAST`` none of the fast kernels is compiled.
"""

QSA_NN_H = r"""/* qsa_nn.h: int8 kernels of a `qsa export --target c` network (generated; see
 * qsa.export.c_kernels). TFLite-Micro reference arithmetic, bit-exact. C99, no heap. */
#ifndef QSA_NN_H
#define QSA_NN_H
#include <stdint.h>
#include <string.h>

#define QSA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QSA_MAX(a, b) ((a) > (b) ? (a) : (b))

/* code that runs once, at init (the tables of LOGISTIC, SOFTMAX, RSQRT): optimised for size */
#if defined(__GNUC__) && !defined(__clang__)
#define QSA_INIT_CODE __attribute__((optimize("Os")))
#else
#define QSA_INIT_CODE
#endif

static inline int8_t qsa_sat8(int32_t v) {
  return (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
}

/* gemmlowp SaturatingRoundingDoublingHighMul. Its nudged quotient truncated towards zero,
 * (ab + (ab >= 0 ? 2^30 : 1 - 2^30)) / 2^31, equals floor((ab + 2^30) / 2^31) for either
 * sign of ab (for ab < 0: trunc(v / 2^31) = floor((v + 2^31 - 1) / 2^31)): one shift. */
static inline int32_t qsa_srdhm(int32_t a, int32_t b) {
  if (a == b && a == INT32_MIN) return INT32_MAX;
  return (int32_t)(((int64_t)a * (int64_t)b + (1 << 30)) >> 31);
}

/* the same for a requantisation multiplier (m in [0, 2^31): the saturating case cannot occur) */
static inline int32_t qsa_srdhm_m(int32_t a, int32_t m) {
  return (int32_t)(((int64_t)a * (int64_t)m + (1 << 30)) >> 31);
}

/* gemmlowp RoundingDivideByPOT, e in [0, 31] */
static inline int32_t qsa_rdbpot(int32_t x, int e) {
  int32_t mask = (int32_t)((1u << e) - 1u);
  int32_t rem = x & mask;
  int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> e) + (rem > thr ? 1 : 0);
}

static inline int32_t qsa_shl(int32_t x, int e) { return (int32_t)((uint32_t)x << e); }

/* tflite::MultiplyByQuantizedMultiplier (double rounding) */
static inline int32_t qsa_mbqm(int32_t x, int32_t m, int shift) {
  int ls = shift > 0 ? shift : 0, rs = shift > 0 ? 0 : -shift;
  return qsa_rdbpot(qsa_srdhm_m(qsa_shl(x, ls), m), rs);
}

/* the same for shift <= 0 (rs = -shift), the usual case */
static inline int32_t qsa_rq(int32_t x, int32_t m, int rs) {
  return qsa_rdbpot(qsa_srdhm_m(x, m), rs);
}

/* gemmlowp SaturatingRoundingMultiplyByPOT<e> */
static inline int32_t qsa_srmpot(int32_t x, int e) {
  if (e > 0) {
    int32_t thr = (int32_t)((1u << (31 - e)) - 1);
    if (x > thr) return INT32_MAX;
    if (x < -thr) return INT32_MIN;
    return qsa_shl(x, e);
  }
  if (e < 0) return qsa_rdbpot(x, -e);
  return x;
}

/* gemmlowp exp_on_interval_between_negative_one_quarter_and_0_excl (Q0.31) */
QSA_INIT_CODE
static int32_t qsa_exp_quarter(int32_t a) {
  const int32_t ct = 1895147668, c13 = 715827883;
  int32_t x = a + (1 << 28), x2, x3, x4, x4q, t;
  x2 = qsa_srdhm(x, x);
  x3 = qsa_srdhm(x2, x);
  x4 = qsa_srdhm(x2, x2);
  x4q = qsa_srmpot(x4, -2);
  t = qsa_srmpot(qsa_srdhm(x4q + x3, c13) + x2, -1);
  return ct + qsa_srdhm(ct, x + t);
}

/* gemmlowp exp_on_negative_values for a Q(ib).(31-ib) input -> Q0.31 */
QSA_INIT_CODE
static int32_t qsa_exp_neg(int32_t a, int ib) {
  static const int32_t mul[7] = {1672461947, 1302514674, 790015084, 290630308,
                                 39332535, 720401, 242};
  const int fb = 31 - ib;
  const int32_t quarter = (int32_t)1 << (fb - 2);
  int32_t amod = (a & (quarter - 1)) - quarter;
  int32_t result = qsa_exp_quarter(qsa_srmpot(amod, ib));
  int32_t rem = amod - a;
  int e;
  for (e = -2; e <= 4; ++e)
    if (ib > e && (rem & ((int32_t)1 << (fb + e)))) result = qsa_srdhm(result, mul[e + 2]);
  if (ib > 5 && a < -((int32_t)1 << (36 - ib))) result = 0;
  if (a == 0) result = INT32_MAX;
  return result;
}

/* gemmlowp one_over_one_plus_x_for_x_in_0_1 (Q0.31 -> Q0.31) */
static int32_t qsa_one_over_one_plus_x(int32_t a) {
  int64_t s = (int64_t)a + INT32_MAX;
  int32_t half_den = (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
  int32_t x = 1515870810 + qsa_srdhm(half_den, -1010580540);
  int i;
  for (i = 0; i < 3; ++i) {
    int32_t hdx = qsa_srdhm(half_den, x);
    int32_t omh = (1 << 29) - hdx;
    x = x + qsa_srmpot(qsa_srdhm(x, omh), 2);
  }
  return qsa_srmpot(x, 1);
}

static inline int qsa_clz32(uint32_t x) {
  int n = 0;
  if (x == 0) return 32;
  while (!(x & 0x80000000u)) { x <<= 1; ++n; }
  return n;
}

/* ---- data movement -------------------------------------------------------------------- */

/* out (contiguous, dims n[4]) <- in read with element strides s[4] (transpose, slice) */
#ifdef QSA_ARITH_FAST
/* the fast build: the kind of run chosen once per (a, b) row, not per run, the runs walked
 * with a pointer (the decoder's TRANSPOSEs move 2-byte runs, ~27 instructions each before,
 * and 4 bytes at stride 2: a word from bytes 0, 2, 4, 6). Same bytes. */
static void qsa_gather4(int8_t *restrict out, const int8_t *in, const int16_t n[4],
                        const int16_t s[4]) {
  int32_t a, b, c, d;
  const int32_t n2 = n[2], s2 = s[2], n3 = n[3], s3 = s[3];
  for (a = 0; a < n[0]; ++a)
    for (b = 0; b < n[1]; ++b) {
      const int8_t *p = in + a * s[0] + b * s[1];
      if (s3 == 1 && n3 >= 16)
        for (c = 0; c < n2; ++c, p += s2, out += n3) memcpy(out, p, (size_t)n3);
      else if (s3 == 1 && n3 == 2) /* one halfword */
        for (c = 0; c < n2; ++c, p += s2, out += 2) memcpy(out, p, 2);
      else if (s3 == 1 && n3 == 4) /* one word */
        for (c = 0; c < n2; ++c, p += s2, out += 4) memcpy(out, p, 4);
      else if (s3 == 2 && n3 == 4 && s2 == 1 && n2 == 2) { /* 8 bytes b0..b7 de-interleaved:
                                                          * b0 b2 b4 b6, b1 b3 b5 b7 */
        uint32_t x0, x1, v;
        memcpy(&x0, p, 4);
        memcpy(&x1, p + 4, 4);
        v = (x0 & 0xFFu) | (x0 >> 8 & 0xFF00u) | (x1 & 0xFFu) << 16 | (x1 << 8 & 0xFF000000u);
        memcpy(out, &v, 4);
        v = (x0 >> 8 & 0xFFu) | (x0 >> 16 & 0xFF00u) | (x1 & 0xFF00u) << 8
            | (x1 & 0xFF000000u);
        memcpy(out + 4, &v, 4);
        out += 8;
      } else
        for (c = 0; c < n2; ++c, p += s2) {
          const int8_t *q = p;
          for (d = 0; d + 4 <= n3; d += 4, q += 4 * s3, out += 4) { /* four bytes, one word */
            const uint32_t v = (uint32_t)(uint8_t)q[0] | (uint32_t)(uint8_t)q[s3] << 8
                               | (uint32_t)(uint8_t)q[2 * s3] << 16
                               | (uint32_t)(uint8_t)q[3 * s3] << 24;
            memcpy(out, &v, 4);
          }
          for (; d < n3; ++d, q += s3) *out++ = *q; /* short runs: no call */
        }
    }
}
#else
static void qsa_gather4(int8_t *restrict out, const int8_t *in, const int16_t n[4],
                        const int16_t s[4]) {
  int32_t a, b, c, d;
  const int32_t n3 = n[3], s3 = s[3];
  for (a = 0; a < n[0]; ++a)
    for (b = 0; b < n[1]; ++b)
      for (c = 0; c < n[2]; ++c) {
        const int8_t *p = in + a * s[0] + b * s[1] + c * s[2];
        if (s3 == 1 && n3 >= 16) { memcpy(out, p, (size_t)n3); out += n3; }
        else if (s3 == 1 && n3 == 2) { memcpy(out, p, 2); out += 2; } /* one halfword */
        else if (s3 == 1 && n3 == 4) { memcpy(out, p, 4); out += 4; } /* one word */
        else {
          for (d = 0; d + 4 <= n3; d += 4, p += 4 * s3, out += 4) { /* four bytes, one word */
            const uint32_t v = (uint32_t)(uint8_t)p[0] | (uint32_t)(uint8_t)p[s3] << 8
                               | (uint32_t)(uint8_t)p[2 * s3] << 16
                               | (uint32_t)(uint8_t)p[3 * s3] << 24;
            memcpy(out, &v, 4);
          }
          for (; d < n3; ++d, p += s3) *out++ = *p; /* short runs: no call */
        }
      }
}
#endif

/* rows x cols block copy with row strides (concatenation) */
static void qsa_copy2d(int8_t *restrict out, int32_t out_stride, const int8_t *in,
                       int32_t in_stride,
                       int32_t rows, int32_t cols) {
  int32_t r;
  for (r = 0; r < rows; ++r) memcpy(out + r * out_stride, in + r * in_stride, (size_t)cols);
}

/* ---- elementwise, broadcast over 4 dims (strides 0 on broadcast dims) ----------------- */

typedef struct { int16_t n[4], sa[4], sb[4]; } qsa_bcast;

typedef struct {
  int32_t off1, off2, m1, s1, m2, s2, mo, so, out_off, lo, hi, sub;
} qsa_add_p;

static void qsa_add(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                    const qsa_add_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int32_t m1 = p->m1, m2 = p->m2, mo = p->mo, o1 = p->off1, o2 = p->off2;
  const int r1s = -p->s1, r2s = -p->s2, ros = -p->so;
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *py = y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        for (d = 0; d < n3; ++d, px += sa3, py += sb3) {
          int32_t r1 = qsa_rq(qsa_shl(o1 + *px, 20), m1, r1s);
          int32_t r2 = qsa_rq(qsa_shl(o2 + *py, 20), m2, r2s);
          int32_t raw = p->sub ? r1 - r2 : r1 + r2;
          int32_t o = qsa_rq(raw, mo, ros) + p->out_off;
          *out++ = (int8_t)QSA_MIN(QSA_MAX(o, p->lo), p->hi);
        }
      }
}

typedef struct { int32_t off1, off2, m, s, out_off, lo, hi; } qsa_mul_p;

static void qsa_mul(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                    const qsa_mul_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int fast = p->s <= 0;
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *py = y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        for (d = 0; d < n3; ++d, px += sa3, py += sb3) {
          int32_t v = (p->off1 + *px) * (p->off2 + *py);
          int32_t o = (fast ? qsa_rq(v, p->m, -p->s) : qsa_mbqm(v, p->m, p->s)) + p->out_off;
          *out++ = (int8_t)QSA_MIN(QSA_MAX(o, p->lo), p->hi);
        }
      }
}

typedef struct { int32_t in_off, alpha_off, m1, s1, m2, s2, out_off; } qsa_prelu_p;

static void qsa_prelu(int8_t *restrict out, const int8_t *x, const int8_t *alpha,
                      const qsa_bcast *bc,
                      const qsa_prelu_p *p) {
  int32_t a, b, c, d;
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *pa = alpha + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        for (d = 0; d < bc->n[3]; ++d) {
          int32_t v = p->in_off + px[d * bc->sa[3]], o;
          if (v >= 0) o = qsa_mbqm(v, p->m1, p->s1);
          else o = qsa_mbqm(v * (p->alpha_off + pa[d * bc->sb[3]]), p->m2, p->s2);
          *out++ = qsa_sat8(o + p->out_off);
        }
      }
}

/* int8 -> int8 through a 256-entry table indexed by (uint8_t)x (LOGISTIC) */
static void qsa_lut(int8_t *restrict out, const int8_t *x, int32_t n, const int8_t lut[256]) {
  int32_t i;
#ifdef QSA_ARITH_FAST
  for (; n >= 4; n -= 4, x += 4, out += 4) { /* four a turn (12-08 round 5) */
    out[0] = lut[(uint8_t)x[0]];
    out[1] = lut[(uint8_t)x[1]];
    out[2] = lut[(uint8_t)x[2]];
    out[3] = lut[(uint8_t)x[3]];
  }
#endif
  for (i = 0; i < n; ++i) out[i] = lut[(uint8_t)x[i]];
}

/* reference_integer_ops::Logistic for one value (fills the LOGISTIC tables at init) */
QSA_INIT_CODE
static int8_t qsa_logistic1(int8_t x, int32_t in_zp, int32_t radius, int32_t mult, int32_t ls) {
  int32_t in = (int32_t)x - in_zp, q4, q0, pos;
  if (in <= -radius) return -128;
  if (in >= radius) return 127;
  q4 = qsa_mbqm(in, mult, ls);
  if (q4 == 0) q0 = 1 << 30;
  else {
    pos = qsa_one_over_one_plus_x(qsa_exp_neg(q4 > 0 ? -q4 : q4, 4));
    q0 = q4 > 0 ? pos : INT32_MAX - pos;
  }
  return qsa_sat8(qsa_rdbpot(q0, 31 - 8) - 128);
}

QSA_INIT_CODE
static void qsa_logistic_table(int8_t lut[256], int32_t in_zp, int32_t radius, int32_t mult,
                               int32_t ls) {
  int v;
  for (v = -128; v < 128; ++v) lut[(uint8_t)v] = qsa_logistic1((int8_t)v, in_zp, radius, mult, ls);
}

#ifdef QSA_ARITH_FAST
/* LOGISTIC then MUL(x, logistic(x)) (SiLU) as one table: both are functions of the one int8
 * x, so the table holds the MUL's reference integers for every x (the fast build, exact) */
QSA_INIT_CODE
static void qsa_silu_table(int8_t lut[256], int32_t in_zp, int32_t radius, int32_t mult,
                           int32_t ls, int32_t l_off, int32_t m, int32_t s, int32_t out_off) {
  int v;
  qsa_logistic_table(lut, in_zp, radius, mult, ls);
  for (v = -128; v < 128; ++v)
    lut[(uint8_t)v] = qsa_sat8(qsa_mbqm((v - in_zp) * (lut[(uint8_t)v] + l_off), m, s) + out_off);
}
#endif

/* TFLM elementwise RSQRT, int8 (GetInvSqrtQuantizedMultiplierExp, reverse shift -1) */
QSA_INIT_CODE
static void qsa_rsqrt(int8_t *restrict out, const int8_t *x, int32_t n, int32_t in_off, int32_t m,
                      int32_t s, int32_t out_off) {
  int32_t i;
  for (i = 0; i < n; ++i) {
    int32_t value = x[i] - in_off, inv, data, o;
    int shift;
    if (value == 0) { out[i] = 127; continue; }
    if (value <= 1) { inv = INT32_MAX; shift = 0; }
    else {
      int32_t input = value, half_in, xx;
      unsigned pairs;
      int k;
      shift = 11;
      while (input >= (1 << 29)) { input /= 4; ++shift; }
      pairs = (unsigned)(qsa_clz32((uint32_t)input) - 1) / 2 - 1;
      shift -= (int)pairs;
      input <<= 2 * pairs;
      half_in = qsa_srmpot(input >> 1, -1);
      xx = 1 << 28; /* F3 one */
      for (k = 0; k < 5; ++k) {
        int32_t x3 = qsa_srmpot(qsa_srdhm(qsa_srdhm(xx, xx), xx), 6);
        xx = qsa_srmpot(qsa_srdhm((1 << 28) + (1 << 27), xx) - qsa_srdhm(half_in, x3), 3);
      }
      inv = qsa_srdhm(xx, 1518500250);
      if (shift < 0) { inv = qsa_shl(inv, -shift); shift = 0; }
      shift = -shift;
    }
    data = qsa_mbqm(1, inv, shift + 20);
    o = qsa_mbqm(data, m, s - 20) + out_off;
    out[i] = qsa_sat8(o);
  }
}

/* ---- SOFTMAX int8 -> int8 (scale 1/256, zero point -128) over the last dim ---------------
 * exp of (x - max) depends on the difference only (0..255): tables filled at init by the
 * reference arithmetic (qsa_softmax_table), 0 where the difference is below diff_min */
QSA_INIT_CODE
static void qsa_softmax_table(int32_t e[256], int32_t in_mult, int32_t in_ls, int32_t diff_min) {
  int32_t d;
  for (d = 0; d < 256; ++d)
    e[d] = -d >= diff_min ? qsa_exp_neg(qsa_srdhm(qsa_shl(-d, in_ls), in_mult), 5) : 0;
}

#ifndef QSA_ARITH_FAST /* the fast build's qsa_softmax: after qsa_rqa */
static void qsa_softmax(int8_t *restrict out, const int8_t *x, int32_t outer, int32_t depth,
                        const int32_t e[256], int32_t diff_min) {
  int32_t i, c;
  for (i = 0; i < outer; ++i, x += depth, out += depth) {
    int32_t mx = -128, sum = 0, scale, hp1, expo;
    for (c = 0; c < depth; ++c) mx = QSA_MAX(mx, x[c]);
    for (c = 0; c < depth; ++c)
      if (x[c] - mx >= diff_min) sum += qsa_rdbpot(e[mx - x[c]], 12);
    hp1 = qsa_clz32((uint32_t)sum);
    scale = qsa_one_over_one_plus_x((int32_t)(((uint32_t)sum << hp1) - (1u << 31)));
    expo = (12 - hp1) + 31 - 8;
    for (c = 0; c < depth; ++c)
      out[c] = x[c] - mx >= diff_min
                   ? qsa_sat8(qsa_rdbpot(qsa_srdhm(scale, e[mx - x[c]]), expo) - 128) : -128;
  }
}
#endif

/* ---- matrix products ------------------------------------------------------------------ */

/* sum_k x[k] * w[k] over int8 vectors (exact: the order of an integer sum is free); on
 * cores with the DSP extension two 16-bit MACs per SMLAD */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
static inline int32_t qsa_dot8(const int8_t *x, const int8_t *w, int32_t n) {
  int32_t acc = 0, k = 0;
  for (; k + 4 <= n; k += 4) {
    uint32_t xv, wv;
    memcpy(&xv, x + k, 4);
    memcpy(&wv, w + k, 4);
    acc = __smlad(__sxtb16(xv), __sxtb16(wv), acc);
    acc = __smlad(__sxtb16((xv >> 8) | (xv << 24)), __sxtb16((wv >> 8) | (wv << 24)), acc);
  }
  for (; k < n; ++k) acc += x[k] * w[k];
  return acc;
}
#else
static inline int32_t qsa_dot8(const int8_t *x, const int8_t *w, int32_t n) {
  int32_t acc = 0, k;
  for (k = 0; k < n; ++k) acc += x[k] * w[k];
  return acc;
}
#endif

static inline int32_t qsa_req(int32_t acc, int32_t m, int32_t shift) {
  return qsa_mbqm(acc, m, shift);
}

static inline int32_t qsa_sum8(const int8_t *x, int32_t n) {
  int32_t s = 0, k;
  for (k = 0; k < n; ++k) s += x[k];
  return s;
}

/* FULLY_CONNECTED: out[r][u] = requant_u(sum_k (x[r][k] + x_off) (w[u][k] + w_off) + bias[u]).
 * kbias[u]: the bias, with x_off sum_k w[u][k] folded in at export for constant weights of
 * zero point 0 (runtime_sums 0); else (activation weights) the offset terms are summed here. */
static void qsa_fc(int8_t *restrict out, const int8_t *x, int32_t x_off, const int8_t *w,
                   int32_t w_off,
                   const int32_t *kbias, int32_t rows, int32_t depth, int32_t units,
                   const int32_t *mult, const int8_t *shift, int32_t per_channel,
                   int32_t out_off, int32_t lo, int32_t hi, int32_t runtime_sums) {
  int32_t r, u;
  for (r = 0; r < rows; ++r, x += depth) {
    int32_t sx = runtime_sums && w_off ? qsa_sum8(x, depth) : 0;
    for (u = 0; u < units; ++u) {
      const int8_t *pw = w + u * depth;
      int32_t ch = per_channel ? u : 0;
      int32_t acc = qsa_dot8(x, pw, depth);
      if (kbias) acc += kbias[u];
      if (runtime_sums) acc += x_off * qsa_sum8(pw, depth) + w_off * sx + depth * x_off * w_off;
      acc = qsa_req(acc, mult[ch], shift[ch]) + out_off;
      *out++ = (int8_t)QSA_MIN(QSA_MAX(acc, lo), hi);
    }
  }
}

/* BATCH_MATMUL: out[b] (M x N) = requant(sum_k (A[b][i][k] + ao) (B[b][k][j] + bo)).
 * A16: A + ao as int16 (a constant left operand, folded at export), or NULL. */
static void qsa_bmm(int8_t *restrict out, const int8_t *A, int32_t a_off, const int8_t *B,
                    int32_t b_off,
                    int32_t nb, int32_t a_bs, int32_t b_bs, int32_t M, int32_t K, int32_t N,
                    int32_t mult, int32_t shift, int32_t out_off, const int16_t *A16) {
  int32_t b, i, j, k;
  int32_t col[64];
  for (b = 0; b < nb; ++b) {
    const int8_t *pa = A + b * a_bs, *pb = B + b * b_bs;
    int8_t *po = out + b * M * N;
    if (A16 && K <= 64) {
      for (j = 0; j < N; ++j) {
        for (k = 0; k < K; ++k) col[k] = pb[k * N + j] + b_off;
        if (K == 4) {
          const int16_t *a = A16;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
          const uint32_t c01 = (uint32_t)(uint16_t)col[0] | ((uint32_t)(uint16_t)col[1] << 16);
          const uint32_t c23 = (uint32_t)(uint16_t)col[2] | ((uint32_t)(uint16_t)col[3] << 16);
          for (i = 0; i < M; ++i, a += 4) {
            uint32_t a01, a23;
            int32_t acc;
            memcpy(&a01, a, 4);
            memcpy(&a23, a + 2, 4);
            acc = __smlad(a01, c01, __smlad(a23, c23, 0));
            po[i * N + j] = qsa_sat8(qsa_req(acc, mult, shift) + out_off);
          }
#else
          const int32_t c0 = col[0], c1 = col[1], c2 = col[2], c3 = col[3];
          for (i = 0; i < M; ++i, a += 4) {
            int32_t acc = a[0] * c0 + a[1] * c1 + a[2] * c2 + a[3] * c3;
            po[i * N + j] = qsa_sat8(qsa_req(acc, mult, shift) + out_off);
          }
#endif
        } else {
          for (i = 0; i < M; ++i) {
            int32_t acc = 0;
            for (k = 0; k < K; ++k) acc += A16[i * K + k] * col[k];
            po[i * N + j] = qsa_sat8(qsa_req(acc, mult, shift) + out_off);
          }
        }
      }
      continue;
    }
    for (i = 0; i < M; ++i)
      for (j = 0; j < N; ++j) {
        int32_t acc = 0;
        for (k = 0; k < K; ++k) acc += (pa[i * K + k] + a_off) * (pb[k * N + j] + b_off);
        po[i * N + j] = qsa_sat8(qsa_req(acc, mult, shift) + out_off);
      }
  }
}

typedef struct {
  int32_t batches, in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w;
  int32_t stride_h, stride_w, dil_h, dil_w, pad_h, pad_w, depth_mult;
  int32_t in_off, out_off, lo, hi;
} qsa_conv_p;

/* CONV_2D (NHWC, filter [out_c][k_h][k_w][in_c]), per-channel requantisation:
 * sum over valid taps of f (x + in_off) = sum f x + in_off * fsum[oc][tap] (fsum: the filter
 * row sums, folded at export); taps in the padding are skipped, as the reference does. */
static void qsa_conv(int8_t *restrict out, const int8_t *x, const int8_t *f, const int32_t *bias,
                     const int32_t *mult, const int8_t *shift, const qsa_conv_p *p,
                     const int32_t *fsum) {
  int32_t n, oy, ox, oc, ky, kx;
  int32_t acc[64];
  const int32_t C = p->in_c, T = p->k_h * p->k_w, OC = p->out_c;
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox) {
        for (oc = 0; oc < OC; ++oc) acc[oc] = bias ? bias[oc] : 0;
        for (ky = 0; ky < p->k_h; ++ky) {
          int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
          if (iy < 0 || iy >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w, tap;
            const int8_t *px;
            if (ix < 0 || ix >= p->in_w) continue;
            tap = ky * p->k_w + kx;
            px = x + ((n * p->in_h + iy) * p->in_w + ix) * C;
            for (oc = 0; oc < OC; ++oc) {
              const int8_t *pf = f + (oc * T + tap) * C;
              acc[oc] += qsa_dot8(px, pf, C) + p->in_off * fsum[oc * T + tap];
            }
          }
        }
        for (oc = 0; oc < OC; ++oc) {
          int32_t v = qsa_req(acc[oc], mult[oc], shift[oc]) + p->out_off;
          *out++ = (int8_t)QSA_MIN(QSA_MAX(v, p->lo), p->hi);
        }
      }
}

/* DEPTHWISE_CONV_2D (NHWC, filter [1][k_h][k_w][out_c]), per-channel requantisation; the
 * channels accumulate side by side (contiguous rows), out_c <= 512 */
static void qsa_dwconv(int8_t *restrict out, const int8_t *x, const int8_t *f, const int32_t *bias,
                       const int32_t *mult, const int8_t *shift, const qsa_conv_p *p) {
  int32_t n, oy, ox, ic, m, ky, kx, oc;
  int32_t acc[512];
  const int32_t dm = p->depth_mult, C = p->out_c;
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox) {
        for (oc = 0; oc < C; ++oc) acc[oc] = bias ? bias[oc] : 0;
        for (ky = 0; ky < p->k_h; ++ky) {
          int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
          if (iy < 0 || iy >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
            const int8_t *px, *pf;
            if (ix < 0 || ix >= p->in_w) continue;
            px = x + ((n * p->in_h + iy) * p->in_w + ix) * p->in_c;
            pf = f + (ky * p->k_w + kx) * C;
            if (dm == 1)
              for (ic = 0; ic < C; ++ic) acc[ic] += pf[ic] * (px[ic] + p->in_off);
            else
              for (ic = 0; ic < p->in_c; ++ic)
                for (m = 0; m < dm; ++m)
                  acc[ic * dm + m] += pf[ic * dm + m] * (px[ic] + p->in_off);
          }
        }
        for (oc = 0; oc < C; ++oc) {
          int32_t v = qsa_req(acc[oc], mult[oc], shift[oc]) + p->out_off;
          *out++ = (int8_t)QSA_MIN(QSA_MAX(v, p->lo), p->hi);
        }
      }
}

/* ---- fast exact requantisation ------------------------------------------------------------
 * For |acc| < 2^30 (checked at export from the weights), a multiplier m in [0, 2^31) and a
 * right shift e in [1, 22] (else the exporter calls the kernels above):
 *   qsa_rq(acc, m, e) + off == (SMMLAR(2 acc, m, c + [acc < 0])) >> e, c = 2^(e-1) + off 2^e,
 * because SMMLAR(2a, m, c) = c + floor((a m + 2^30) / 2^31) = c + srdhm(a, m), and the
 * round-half-away division by 2^e of t = srdhm(a, m) is floor((t + 2^(e-1) - [t < 0]) / 2^e)
 * where [t < 0] may be replaced by [a < 0] (they differ only for t = 0, where both give 0);
 * off 2^e commutes with the floor. Three instructions and a saturation on the DSP extension,
 * the same integers in portable C. */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
static inline int32_t qsa_smmlar(int32_t a, int32_t b, int32_t c) {
  int32_t r;
  __asm("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
static inline int8_t qsa_ssat8(int32_t v) { return (int8_t)__ssat(v, 8); }
/* bytes 1 and 3 sign-extended to halfwords (one SXTB16 with its rotation) */
static inline uint32_t qsa_sxtb16_ror8(uint32_t x) {
  uint32_t r;
  __asm("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}
#else
static inline int32_t qsa_smmlar(int32_t a, int32_t b, int32_t c) {
  return (int32_t)(((int64_t)a * b + (int64_t)c * 4294967296LL + 2147483648LL) >> 32);
}
static inline int8_t qsa_ssat8(int32_t v) { return qsa_sat8(v); }
#endif

/* c of the fast requantisation for right shift e >= 1 and output offset off */
static inline int32_t qsa_rqc(int32_t e, int32_t off) {
  return ((int32_t)1 << (e - 1)) + off * ((int32_t)1 << e);
}

/* requant(acc) + off, saturated to int8, from acc2 = 2 acc */
static inline int8_t qsa_rqf(int32_t acc2, int32_t m, int32_t e, int32_t c) {
  return qsa_ssat8(qsa_smmlar(acc2, m, c + (acc2 >> 31)) >> e);
}

#ifdef QSA_ARITH_FAST
/* qsa_rqf(2 acc, m, e, c) from acc itself: with m2 = 2 m - 2^32 (as int32; m in [2^30, 2^31)),
 * acc m2 = 2 acc m - acc 2^32, so SMMLAR(acc, m2, c + acc + [acc < 0]) = SMMLAR(2 acc, m,
 * c + [acc < 0]): one instruction less per output, the same integers (|acc| < 2^30) */
static inline int8_t qsa_rqa(int32_t acc, int32_t m2, int32_t e, int32_t c) {
  return qsa_ssat8(qsa_smmlar(acc, m2, c + acc + (acc >> 31)) >> e);
}
/* SOFTMAX as qsa_softmax (the same integers), every value of the table e[] and of the
 * products being >= 0: RoundingDivideByPOT as (v + 2^(k-1)) >> k (unsigned), and
 * SaturatingRoundingDoublingHighMul(scale, v) for scale in [2^30, 2^31) (1 / (1 + x)) as one
 * SMMLAR(v, 2 scale - 2^32, v) = (2 scale v + 2^31) >> 32 (the qsa_rqa identity); the
 * general form where scale is smaller */
static void qsa_softmax(int8_t *restrict out, const int8_t *x, int32_t outer, int32_t depth,
                        const int32_t e[256], int32_t diff_min) {
  int32_t i, c;
  for (i = 0; i < outer; ++i, x += depth) {
    int32_t mx = -128, scale, hp1, expo;
    uint32_t sum = 0, half;
    for (c = 0; c < depth; ++c) mx = QSA_MAX(mx, x[c]);
    for (c = 0; c < depth; ++c)
      if (x[c] - mx >= diff_min) sum += ((uint32_t)e[mx - x[c]] + 2048u) >> 12;
#if defined(__GNUC__)
    hp1 = sum ? __builtin_clz(sum) : 32; /* CLZ (qsa_clz32 loops over the bits) */
#else
    hp1 = qsa_clz32(sum);
#endif
    scale = qsa_one_over_one_plus_x((int32_t)((sum << hp1) - (1u << 31)));
    expo = (12 - hp1) + 31 - 8;
    half = 1u << (expo - 1);
    if (scale >= (1 << 30)) {
      const int32_t m2 = (int32_t)((uint32_t)scale << 1);
      for (c = 0; c < depth; ++c) {
        const int32_t v = e[mx - x[c]];
        *out++ = x[c] - mx >= diff_min
                     ? qsa_sat8((int32_t)(((uint32_t)qsa_smmlar(v, m2, v) + half) >> expo) - 128)
                     : -128;
      }
    } else {
      for (c = 0; c < depth; ++c)
        *out++ = x[c] - mx >= diff_min
                     ? qsa_sat8(qsa_rdbpot(qsa_srdhm(scale, e[mx - x[c]]), expo) - 128) : -128;
    }
  }
}
/* the same, kept as int32 (no sign extension of the int8) */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define qsa_rqai(acc, m2, e, c) \
  __ssat(qsa_smmlar((acc), (m2), (c) + (acc) + ((acc) >> 31)) >> (e), 8)
#else
#define qsa_rqai(acc, m2, e, c) ((int32_t)qsa_rqa((acc), (m2), (e), (c)))
#endif
#endif

/* the unsaturated rescale of one ADD operand, e in [0, 22] (k = e ? -1 : 0, h = 2^(e-1) or 0) */
static inline int32_t qsa_rqterm(int32_t acc2, int32_t m, int32_t e, int32_t h, int32_t k) {
  return qsa_smmlar(acc2, m, h + ((acc2 >> 31) & k)) >> e;
}

typedef struct { int32_t off1, off2, m1, e1, m2, e2, mo, eo, out_off, sub; } qsa_addf_p;

/* ADD / SUB with the fast requantisation (same integers as qsa_add) */
static void qsa_addf(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                     const qsa_addf_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int32_t m1 = p->m1, m2 = p->m2, mo = p->mo, o1 = p->off1, o2 = p->off2;
  const int32_t e1 = p->e1, e2 = p->e2, eo = p->eo, co = qsa_rqc(p->eo, p->out_off);
  const int32_t h1 = e1 ? (int32_t)1 << (e1 - 1) : 0, k1 = e1 ? -1 : 0;
  const int32_t h2 = e2 ? (int32_t)1 << (e2 - 1) : 0, k2 = e2 ? -1 : 0;
  const int32_t sm = p->sub ? -1 : 0;
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *py = y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        for (d = 0; d < n3; ++d, px += sa3, py += sb3) {
          int32_t r1 = qsa_rqterm((o1 + *px) * (1 << 21), m1, e1, h1, k1);
          int32_t r2 = qsa_rqterm((o2 + *py) * (1 << 21), m2, e2, h2, k2);
          *out++ = qsa_rqf((r1 + ((r2 ^ sm) - sm)) * 2, mo, eo, co);
        }
      }
}

typedef struct { int32_t off1, off2, m, e, out_off; } qsa_mulf_p;

/* MUL with the fast requantisation (same integers as qsa_mul) */
static void qsa_mulf(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                     const qsa_mulf_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int32_t o1 = p->off1, o2x2 = 2 * p->off2, m = p->m, e = p->e;
  const int32_t co = qsa_rqc(p->e, p->out_off);
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *py = y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        if (sa3 == 1 && sb3 == 1) /* contiguous: post-incremented loads */
          for (d = 0; d < n3; ++d) *out++ = qsa_rqf((o1 + px[d]) * (o2x2 + 2 * py[d]), m, e, co);
        else
          for (d = 0; d < n3; ++d, px += sa3, py += sb3)
            *out++ = qsa_rqf((o1 + *px) * (o2x2 + 2 * *py), m, e, co);
      }
}

/* BATCH_MATMUL whose constant left operand (A + a_off) has one non-zero per row, +-q: the
 * quaternion Hamilton expansion, out[i][j] = requant(+-q (B[k_i][j] + b_off)). The 2K
 * distinct values of a column are requantised once and scattered to the M rows;
 * sel[i] = 2 k_i + (sign_i < 0), q2 = 2 q. K <= 16. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3"))) /* unrolled: 1.6x fewer instructions, +0.2 KB */
#endif
static void qsa_bmm_sel(int8_t *restrict out, const int8_t *B, int32_t b_off, int32_t nb,
                        int32_t b_bs, int32_t M, int32_t K, int32_t N, const uint8_t *sel,
                        int32_t q2, int32_t m, int32_t e, int32_t off) {
  int32_t b, i, j, k;
  int8_t y[32];
  const int32_t c = qsa_rqc(e, off);
  for (b = 0; b < nb; ++b) {
    const int8_t *pb = B + b * b_bs;
    int8_t *po = out + b * M * N;
    for (j = 0; j < N; ++j, ++po) {
      for (k = 0; k < K; ++k) {
        int32_t v = (pb[k * N + j] + b_off) * q2;
        y[2 * k] = qsa_rqf(v, m, e, c);
        y[2 * k + 1] = qsa_rqf(-v, m, e, c);
      }
      for (i = 0; i < M; ++i) po[i * N] = y[sel[i]];
    }
  }
}

/* sum_k x[k] w[k] for n a multiple of 4 (no tail) */
static inline int32_t qsa_dot8x4(const int8_t *x, const int8_t *w, int32_t n) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
  int32_t acc = 0, k;
  for (k = 0; k < n; k += 4) {
    uint32_t xv, wv;
    memcpy(&xv, x + k, 4);
    memcpy(&wv, w + k, 4);
    acc = __smlad(__sxtb16(xv), __sxtb16(wv), acc);
    acc = __smlad(qsa_sxtb16_ror8(xv), qsa_sxtb16_ror8(wv), acc);
  }
  return acc;
#else
  return qsa_dot8(x, w, n);
#endif
}

/* one row x (n a multiple of 4) as halfword pairs in SMLAD order, (x0, x2), (x1, x3), ... */
static inline void qsa_expand16(uint32_t *restrict xe, const int8_t *x, int32_t n) {
  int32_t k;
  for (k = 0; k < n; k += 4, xe += 2) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    uint32_t xv;
    memcpy(&xv, x + k, 4);
    xe[0] = __sxtb16(xv);
    xe[1] = qsa_sxtb16_ror8(xv);
#else
    xe[0] = (uint32_t)(uint16_t)x[k] | ((uint32_t)(uint16_t)x[k + 2] << 16);
    xe[1] = (uint32_t)(uint16_t)x[k + 1] | ((uint32_t)(uint16_t)x[k + 3] << 16);
#endif
  }
}

/* two dot products of an expanded row with two int8 weight rows (n a multiple of 4) */
static inline void qsa_dot2(const uint32_t *xe, const int8_t *w0, const int8_t *w1, int32_t n,
                            int32_t *a0, int32_t *a1) {
  int32_t s0 = 0, s1 = 0, k;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
  for (k = 0; k < n; k += 4, xe += 2) {
    uint32_t v0, v1;
    memcpy(&v0, w0 + k, 4);
    memcpy(&v1, w1 + k, 4);
    s0 = __smlad(xe[0], __sxtb16(v0), s0);
    s1 = __smlad(xe[0], __sxtb16(v1), s1);
    s0 = __smlad(xe[1], qsa_sxtb16_ror8(v0), s0);
    s1 = __smlad(xe[1], qsa_sxtb16_ror8(v1), s1);
  }
#else
  for (k = 0; k < n; k += 4, xe += 2) {
    int32_t p0 = (int16_t)(xe[0] & 0xFFFF), p2 = (int16_t)(xe[0] >> 16);
    int32_t p1 = (int16_t)(xe[1] & 0xFFFF), p3 = (int16_t)(xe[1] >> 16);
    s0 += p0 * w0[k] + p1 * w0[k + 1] + p2 * w0[k + 2] + p3 * w0[k + 3];
    s1 += p0 * w1[k] + p1 * w1[k + 1] + p2 * w1[k + 2] + p3 * w1[k + 3];
  }
#endif
  *a0 = s0;
  *a1 = s1;
}

/* FULLY_CONNECTED with the fast requantisation (per-channel shifts all in [-22, -1]); kbias as
 * in qsa_fc. Activation weights (runtime_sums): the weight-row sums once per unit, not per row
 * (units <= 128). Same integers as qsa_fc. */
static void qsa_fcf(int8_t *restrict out, const int8_t *x, int32_t x_off, const int8_t *w,
                    int32_t w_off, const int32_t *kbias, int32_t rows, int32_t depth,
                    int32_t units, const int32_t *mult, const int8_t *shift, int32_t per_channel,
                    int32_t out_off, int32_t runtime_sums) {
  int32_t r, u, wsum[128];
  uint32_t xe[128];
  const int32_t d4 = depth & ~3;
  if (runtime_sums)
    for (u = 0; u < units; ++u)
      wsum[u] = x_off * qsa_sum8(w + u * depth, depth) + depth * x_off * w_off
                + (kbias ? kbias[u] : 0);
  for (r = 0; r < rows; ++r, x += depth) {
    int32_t sx = runtime_sums && w_off ? w_off * qsa_sum8(x, depth) : 0;
    int32_t dots[2];
    qsa_expand16(xe, x, d4);
    for (u = 0; u < units; ++u) {
      const int8_t *pw = w + u * depth;
      const int32_t ch = per_channel ? u : 0, e = -shift[ch];
      int32_t acc, k;
      if (!(u & 1)) {
        if (u + 1 < units) qsa_dot2(xe, pw, pw + depth, d4, &dots[0], &dots[1]);
        else dots[0] = qsa_dot8x4(x, pw, d4);
      }
      acc = dots[u & 1];
      for (k = d4; k < depth; ++k) acc += x[k] * pw[k];
      acc += runtime_sums ? wsum[u] + sx : (kbias ? kbias[u] : 0);
      *out++ = qsa_rqf(acc * 2, mult[ch], e, qsa_rqc(e, out_off));
    }
  }
}

/* CONV_2D with in_c a multiple of 4 and the fast requantisation (same integers as qsa_conv).
 * Per output pixel the taps are gathered into one contiguous column (im2col, T C <= 256
 * bytes), taps in the padding filled with the input zero point (x + in_off = 0 there, as the
 * reference skips them), so each channel is one straight dot product over the filter row
 * [k_h][k_w][in_c]; kbias[oc] = bias + in_off * (the filter's sum), folded at export. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* word copies, no memcpy call */
#endif
static void qsa_convf(int8_t *restrict out, const int8_t *x, const int8_t *f, const int32_t *kbias,
                      const int32_t *mult, const int8_t *shift, const qsa_conv_p *p) {
  int32_t n, oy, ox, oc, ky, kx, k;
  uint32_t colw[64];
  int8_t *col = (int8_t *)colw;
  const int32_t C = p->in_c, TC = p->k_h * p->k_w * C, OC = p->out_c;
  const uint32_t zp4 = 0x01010101u * (uint8_t)(int8_t)(-p->in_off);
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox) {
        uint32_t *pc = colw;
        for (ky = 0; ky < p->k_h; ++ky) {
          int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
          for (kx = 0; kx < p->k_w; ++kx) {
            int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
            if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
              for (k = 0; k < C; k += 4) *pc++ = zp4;
            } else {
              const int8_t *px = x + ((n * p->in_h + iy) * p->in_w + ix) * C;
              for (k = 0; k < C; k += 4) {
                uint32_t v;
                memcpy(&v, px + k, 4);
                *pc++ = v;
              }
            }
          }
        }
        for (oc = 0; oc < OC; ++oc) {
          const int32_t e = -shift[oc];
          int32_t acc = qsa_dot8x4(col, f + oc * TC, TC) + kbias[oc];
          *out++ = qsa_rqf(acc * 2, mult[oc], e, qsa_rqc(e, p->out_off));
        }
      }
}

/* BATCH_MATMUL of two activations with the fast requantisation (same integers as qsa_bmm):
 * A + a_off as int16 rows (K padded to even) once per batch, each column of B + b_off as
 * int16 once, then two MACs per SMLAD. M Kp <= 640, Kp <= 128. */
static void qsa_bmmf(int8_t *restrict out, const int8_t *A, int32_t a_off, const int8_t *B,
                     int32_t b_off, int32_t nb, int32_t a_bs, int32_t b_bs, int32_t M, int32_t K,
                     int32_t N, int32_t mult, int32_t e, int32_t out_off) {
  int32_t b, i, j, k;
  int16_t a16[640], col[128];
  const int32_t Kp = (K + 1) & ~1, c = qsa_rqc(e, out_off);
  for (b = 0; b < nb; ++b) {
    const int8_t *pa = A + b * a_bs, *pb = B + b * b_bs;
    int8_t *po = out + b * M * N;
    if (b == 0 || a_bs)
      for (i = 0; i < M; ++i) {
        for (k = 0; k < K; ++k) a16[i * Kp + k] = (int16_t)(pa[i * K + k] + a_off);
        if (Kp != K) a16[i * Kp + K] = 0;
      }
    for (j = 0; j < N; ++j) {
      for (k = 0; k < K; ++k) col[k] = (int16_t)(pb[k * N + j] + b_off);
      if (Kp != K) col[K] = 0;
      for (i = 0; i < M; ++i) {
        const int16_t *pr = a16 + i * Kp;
        int32_t acc = 0;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
        for (k = 0; k < Kp; k += 2) {
          uint32_t av, cv;
          memcpy(&av, pr + k, 4);
          memcpy(&cv, col + k, 4);
          acc = __smlad(av, cv, acc);
        }
#else
        for (k = 0; k < Kp; ++k) acc += pr[k] * col[k];
#endif
        po[i * N + j] = qsa_rqf(acc * 2, mult, e, c);
      }
    }
  }
}

/* DEPTHWISE_CONV_2D, depth multiplier 1, the fast requantisation (same integers as
 * qsa_dwconv): per output pixel the valid taps are listed once (T <= 32), then each channel
 * accumulates in a register over them */
static void qsa_dwconvf(int8_t *restrict out, const int8_t *x, const int8_t *f,
                        const int32_t *bias, const int32_t *mult, const int8_t *shift,
                        const qsa_conv_p *p) {
  int32_t n, oy, ox, ky, kx, ic, t, nt;
  const int8_t *tx[32], *tf[32];
  const int32_t C = p->out_c, in_off = p->in_off;
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox) {
        nt = 0;
        for (ky = 0; ky < p->k_h; ++ky) {
          int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
          if (iy < 0 || iy >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
            if (ix < 0 || ix >= p->in_w) continue;
            tx[nt] = x + ((n * p->in_h + iy) * p->in_w + ix) * C;
            tf[nt++] = f + (ky * p->k_w + kx) * C;
          }
        }
        for (ic = 0; ic < C; ++ic) {
          const int32_t e = -shift[ic];
          int32_t acc = bias ? bias[ic] : 0;
          for (t = 0; t < nt; ++t) acc += tf[t][ic] * (tx[t][ic] + in_off);
          *out++ = qsa_rqf(acc * 2, mult[ic], e, qsa_rqc(e, p->out_off));
        }
      }
}

/* 256-entry int8 table of an int8 -> int8 op (RSQRT), filled at init by the reference kernel */
QSA_INIT_CODE
static void qsa_rsqrt_table(int8_t lut[256], int32_t in_off, int32_t m, int32_t s,
                            int32_t out_off) {
  int8_t v[256], o[256];
  int32_t k;
  for (k = 0; k < 256; ++k) v[k] = (int8_t)(k - 128);
  qsa_rsqrt(o, v, 256, in_off, m, s, out_off);
  for (k = 0; k < 256; ++k) lut[(uint8_t)(k - 128)] = o[k];
}


/* ---- leaner exact kernels (same integers as the ones above; chosen at export) ------------ */

/* requant(x) + off, saturated, for a multiplier m in [0, 2^31) and any shift s in [-22, 13]:
 * s >= 0: srdhm(x 2^s, m) = SMMLAR(x 2^(s+1), m, off) - off (ls = s + 1, e = 0, k = 0);
 * s < 0: qsa_rqf (ls = 1, e = -s, c = qsa_rqc(e, off), k = -1). |x 2^ls| < 2^31 (export). */
static inline int8_t qsa_rqs(int32_t x, int32_t m, int32_t ls, int32_t e, int32_t c, int32_t k) {
  return qsa_ssat8(qsa_smmlar(x * (1 << ls), m, c + ((x >> 31) & k)) >> e);
}

typedef struct { int32_t ka, offa, offb, mb, eb, hb, kb, smb, mo, eo, co; } qsa_addh_p;

/* ADD / SUB where operand a's rescale is exactly 1/2 (the operand of the larger scale: TFLite's
 * multiplier (2^30, shift 0)), so its term is (a + offa) 2^19, ka = +-2^19; b's term as in
 * qsa_addf, negated when smb = -1. Same integers as qsa_add, a third of the work. */
static void qsa_addh(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                     const qsa_addh_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int32_t ka2 = 2 * p->ka, oka2 = p->offa * 2 * p->ka, ob = p->offb, mb = p->mb;
  const int32_t eb = p->eb, hb = p->hb;
  const int32_t kb = p->kb, smb = p->smb, mo = p->mo, eo = p->eo, co = p->co;
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *py = y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        if (sa3 == 1 && sb3 == 1) /* contiguous: post-incremented loads */
          for (d = 0; d < n3; ++d) {
            int32_t tb = qsa_rqterm((ob + py[d]) * (1 << 21), mb, eb, hb, kb);
            *out++ = qsa_rqf(px[d] * ka2 + oka2 + 2 * ((tb ^ smb) - smb), mo, eo, co);
          }
        else
          for (d = 0; d < n3; ++d, px += sa3, py += sb3) {
            int32_t tb = qsa_rqterm((ob + *py) * (1 << 21), mb, eb, hb, kb);
            *out++ = qsa_rqf(*px * ka2 + oka2 + 2 * ((tb ^ smb) - smb), mo, eo, co);
          }
      }
}

typedef struct { int32_t in_off, alpha_off, m1, l1, e1, c1, k1, m2, l2, e2, c2, k2; } qsa_preluf_p;

#ifdef QSA_ARITH_FAST
/* one column of qsa_preluf (alpha the one value al + ao along it): n values at stride st */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_preluf_col(int8_t *restrict out, const int8_t *x, int32_t n, int32_t st,
                           int32_t al, const qsa_preluf_p *p) {
  const int32_t io = p->in_off, m1 = p->m1, l1 = p->l1, e1 = p->e1, c1 = p->c1, k1 = p->k1;
  const int32_t end = n * st;
  int32_t i;
  for (i = 0; i < end; i += st) { /* one index for both streams */
    const int32_t v = io + x[i];
    out[i] = v >= 0 ? qsa_rqs(v, m1, l1, e1, c1, k1)
                    : qsa_rqs(v * al, p->m2, p->l2, p->e2, p->c2, p->k2);
  }
}
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* a column of qsa_preluf_col on the DSP extension in assembly (GCC: 15 / 21 instructions a
 * value for v >= 0 / < 0, constants spilled), 11 / 17: v = in_off + x sets the flags, the
 * branch's qsa_rqs (k1 drops out for v >= 0; the negative branch's constants loaded there),
 * the output addressed from x's pointer. 12-07 round 4. The same integers. */
typedef struct {
  int32_t io, m1, l1, e1, c1;     /* 0: v >= 0: qsa_rqs(v, m1, l1, e1, c1, k1) */
  int32_t m2, l2, e2, c2, k2, al; /* 20: v < 0: qsa_rqs(v al, m2, l2, e2, c2, k2) */
  int32_t dout, st, n;            /* 44: out - x (bytes), the stride, n > 0 values */
  const int8_t *x;                /* 56 */
} qsa_plc;
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_preluf_cola(const qsa_plc *s) {
  uint32_t io, m1, l1, e1, c1, dout, st, n, pp, v, t, r;
  __asm volatile(
      "ldrd %[io], %[m1], [%[s]]\n\tldrd %[l1], %[e1], [%[s], #8]\n\t"
      "ldr %[c1], [%[s], #16]\n\tldrd %[dout], %[st], [%[s], #44]\n\t"
      "ldrd %[n], %[pp], [%[s], #52]\n"
      "1:\n\t"
      "ldrsb %[v], [%[pp]]\n\tadds %[v], %[v], %[io]\n\tbmi 3f\n\t"
      "lsl %[t], %[v], %[l1]\n\tsmmlar %[r], %[t], %[m1], %[c1]\n\t"
      "asr %[r], %[r], %[e1]\n\tssat %[r], #8, %[r]\n\tstrb %[r], [%[pp], %[dout]]\n\t"
      "add %[pp], %[pp], %[st]\n\tsubs %[n], %[n], #1\n\tbne 1b\n\tb 4f\n"
      "3:\n\t"
      "ldr %[t], [%[s], #40]\n\tmul %[v], %[v], %[t]\n\tldr %[t], [%[s], #36]\n\t"
      "and %[t], %[t], %[v], asr #31\n\tldr %[r], [%[s], #32]\n\tadd %[t], %[t], %[r]\n\t"
      "ldr %[r], [%[s], #24]\n\tlsl %[v], %[v], %[r]\n\tldr %[r], [%[s], #20]\n\t"
      "smmlar %[r], %[v], %[r], %[t]\n\tldr %[t], [%[s], #28]\n\tasr %[r], %[r], %[t]\n\t"
      "ssat %[r], #8, %[r]\n\tstrb %[r], [%[pp], %[dout]]\n\t"
      "add %[pp], %[pp], %[st]\n\tsubs %[n], %[n], #1\n\tbne 1b\n"
      "4:\n\t"
      : [io] "=&r"(io), [m1] "=&r"(m1), [l1] "=&r"(l1), [e1] "=&r"(e1), [c1] "=&r"(c1),
        [dout] "=&r"(dout), [st] "=&r"(st), [n] "=&r"(n), [pp] "=&r"(pp), [v] "=&r"(v),
        [t] "=&r"(t), [r] "=&r"(r)
      : [s] "r"(s)
      : "cc", "memory");
}
#endif
#endif

/* PRELU with qsa_rqs on both branches (same integers as qsa_prelu); the fast build runs
 * alpha's columns (alpha constant down dim 2) one by one */
static void qsa_preluf(int8_t *restrict out, const int8_t *x, const int8_t *alpha,
                       const qsa_bcast *bc, const qsa_preluf_p *p) {
  int32_t a, b, c, d;
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3], io = p->in_off;
  const int32_t ao = p->alpha_off;
#ifdef QSA_ARITH_FAST
#ifndef QSA_PRELUF_COLS_ONLY /* the exporter's promise: every call takes this path */
  if (bc->n[0] == 1 && bc->n[1] == 1 && bc->sb[2] == 0 && sa3 == 1 && bc->sa[2] == n3)
#endif
  {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    qsa_plc s;
    s.io = io;
    s.m1 = p->m1;
    s.l1 = p->l1;
    s.e1 = p->e1;
    s.c1 = p->c1;
    s.m2 = p->m2;
    s.l2 = p->l2;
    s.e2 = p->e2;
    s.c2 = p->c2;
    s.k2 = p->k2;
    s.st = n3;
    s.n = bc->n[2];
    if (s.n > 0)
      for (d = 0; d < n3; ++d) { /* x contiguous, alpha per column */
        s.al = ao + alpha[d * sb3];
        s.x = x + d;
        s.dout = (int32_t)((uintptr_t)(out + d) - (uintptr_t)(x + d));
        qsa_preluf_cola(&s);
      }
#else
    for (d = 0; d < n3; ++d) /* x contiguous, alpha per column */
      qsa_preluf_col(out + d, x + d, bc->n[2], n3, ao + alpha[d * sb3], p);
#endif
    return;
  }
#endif
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int8_t *pa = alpha + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        for (d = 0; d < n3; ++d, px += sa3, pa += sb3) {
          int32_t v = io + *px;
          *out++ = v >= 0 ? qsa_rqs(v, p->m1, p->l1, p->e1, p->c1, p->k1)
                          : qsa_rqs(v * (ao + *pa), p->m2, p->l2, p->e2, p->c2, p->k2);
        }
      }
}

/* the quaternion Hamilton expansion (qsa_bmm_sel) for its one row pattern, K = 4, M = 16:
 * rows r, -i, -j, -k, i, r, k, -j, j, -k, r, i, k, j, -i, r of the 4 components, where the
 * negative values are 2 off - the positive ones, saturated (checked at export for all 256
 * inputs): 4 requantisations and 3 subtractions per column. Same integers as qsa_bmm_sel. */
static void qsa_bmm_ham(int8_t *restrict out, const int8_t *B, int32_t b_off, int32_t nb,
                        int32_t b_bs, int32_t N, int32_t q2, int32_t m, int32_t e, int32_t off) {
  int32_t b, j;
  const int32_t c = qsa_rqc(e, off), zz = 2 * off;
  for (b = 0; b < nb; ++b) {
    const int8_t *pb = B + b * b_bs;
    int8_t *po = out + b * 16 * N;
    for (j = 0; j < N; ++j) {
      int8_t *q = po + j;
      int32_t v0 = (pb[j] + b_off) * q2, v1 = (pb[N + j] + b_off) * q2;
      int32_t v2 = (pb[2 * N + j] + b_off) * q2, v3 = (pb[3 * N + j] + b_off) * q2;
      int8_t r = qsa_rqf(v0, m, e, c), i = qsa_rqf(v1, m, e, c);
      int8_t jj = qsa_rqf(v2, m, e, c), k = qsa_rqf(v3, m, e, c);
      int8_t ni = qsa_ssat8(zz - i), nj = qsa_ssat8(zz - jj), nk = qsa_ssat8(zz - k);
#define QSA_PUT(v) do { *q = (v); q += N; } while (0)
      QSA_PUT(r); QSA_PUT(ni); QSA_PUT(nj); QSA_PUT(nk);
      QSA_PUT(i); QSA_PUT(r); QSA_PUT(k); QSA_PUT(nj);
      QSA_PUT(jj); QSA_PUT(nk); QSA_PUT(r); QSA_PUT(i);
      QSA_PUT(k); QSA_PUT(jj); QSA_PUT(ni); *q = r;
#undef QSA_PUT
    }
  }
}

#ifdef QSA_ARITH_FAST
typedef struct {
  int32_t m, bs, s1, s2, r1, r2;
  int16_t nb, b_bs, n, n2, b_off, q2;
  int8_t e, off;
} qsa_hamt_p;

/* qsa_bmm_ham with its output laid out for the TRANSPOSE that reads it (the fast build; its
 * other expansions with qsa_bmm_ham's own layout, so one kernel): the value of batch b, row i,
 * column j = j1 n2 + j2 to out + b bs + (i / 4) r1 + (i % 4) r2 + j1 s1 + j2 s2 (qsa_bmm_ham's
 * layout: bs 16 n, r1 4 n, r2 n, n2 n, s2 1). Same integers as qsa_bmm_ham. */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
/* On the DSP extension one batch's columns are one assembly loop (12-08 round 5; GCC spilled
 * the pointers and constants: ~95 instructions a column, now ~70): per column the four
 * components (B + b_off) q2 as one MLA each, four qsa_rqf, three saturated negations, the
 * 16 stores (row r at col + (r / 4) r1 + (r % 4) r2). The same integers as the C below. */
typedef struct {
  const int8_t *b;        /* 0: B, column j (advanced) */
  int32_t n;              /* 4: N (B's component stride) */
  int32_t q2, bq;         /* 8: 2 q, b_off 2 q */
  int32_t m, c;           /* 16: qsa_rqf's m, c */
  int32_t e, zz;          /* 24: its shift, 2 off */
  int32_t r1, r2;         /* 32: out's strides of r / 4, r % 4 */
  int8_t *col;            /* 40: column j's first output */
  int8_t *grp;            /* 44: its group's */
  int32_t s1, s2;         /* 48: next group, next column in the group */
  int32_t n2;             /* 56: columns a group */
  const int8_t *bend;     /* 60: B after the last column */
} qsa_hmc;
#define QSA_RQF1(v)                                                                     \
  "add %[x], %[n], " v ", asr #31\n\tsmmlar " v ", " v ", %[t], %[x]\n\t"              \
  "asr " v ", " v ", %[b]\n\tssat " v ", #8, " v "\n\t"
#define QSA_ST4(a, b_, c_, d)                                                           \
  "strb " a ", [%[b]]\n\tstrb " b_ ", [%[b], %[n]]\n\tstrb " c_ ", [%[b], %[n], lsl #1]\n\t" \
  "add %[x], %[b], %[n], lsl #1\n\tstrb " d ", [%[x], %[n]]\n\t"
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_hamt_cols(qsa_hmc *s) {
  uint32_t b, n, t, x, v0, v1, v2, v3, n1, n2, n3, g, k2;
  __asm volatile(
      "ldr %[g], [%[s], #40]\n\tmovs %[k2], #0\n"
      "1:\n\t"
      "ldrd %[b], %[n], [%[s]]\n\tldrsb %[v1], [%[b], %[n]]\n\t"
      "add %[t], %[b], %[n], lsl #1\n\tldrsb %[v2], [%[t]]\n\tldrsb %[v3], [%[t], %[n]]\n\t"
      "ldrsb %[v0], [%[b]], #1\n\tstr %[b], [%[s]]\n\t"
      "ldrd %[t], %[n], [%[s], #8]\n\t"
      "mla %[v0], %[v0], %[t], %[n]\n\tmla %[v1], %[v1], %[t], %[n]\n\t"
      "mla %[v2], %[v2], %[t], %[n]\n\tmla %[v3], %[v3], %[t], %[n]\n\t"
      "ldrd %[t], %[n], [%[s], #16]\n\tldr %[b], [%[s], #24]\n\t"
      QSA_RQF1("%[v0]") QSA_RQF1("%[v1]") QSA_RQF1("%[v2]") QSA_RQF1("%[v3]")
      "ldr %[t], [%[s], #28]\n\t"
      "sub %[n1], %[t], %[v1]\n\tssat %[n1], #8, %[n1]\n\t"
      "sub %[n2], %[t], %[v2]\n\tssat %[n2], #8, %[n2]\n\t"
      "sub %[n3], %[t], %[v3]\n\tssat %[n3], #8, %[n3]\n\t"
      "ldrd %[t], %[n], [%[s], #32]\n\tmov %[b], %[g]\n\t"
      QSA_ST4("%[v0]", "%[n1]", "%[n2]", "%[n3]") "add %[b], %[b], %[t]\n\t"
      QSA_ST4("%[v1]", "%[v0]", "%[v3]", "%[n2]") "add %[b], %[b], %[t]\n\t"
      QSA_ST4("%[v2]", "%[n3]", "%[v0]", "%[v1]") "add %[b], %[b], %[t]\n\t"
      QSA_ST4("%[v3]", "%[v2]", "%[n1]", "%[v0]")
      "ldr %[t], [%[s], #56]\n\tadds %[k2], %[k2], #1\n\tcmp %[k2], %[t]\n\tbeq 5f\n\t"
      "ldr %[x], [%[s], #52]\n\tadd %[g], %[g], %[x]\n\tb 6f\n"
      "5:\n\t"
      "movs %[k2], #0\n\tldrd %[t], %[x], [%[s], #44]\n\tadd %[g], %[t], %[x]\n\t"
      "str %[g], [%[s], #44]\n"
      "6:\n\t"
      "ldr %[t], [%[s], #60]\n\tldr %[b], [%[s]]\n\tcmp %[b], %[t]\n\tbne 1b\n\t"
      : [b] "=&r"(b), [n] "=&r"(n), [t] "=&r"(t), [x] "=&r"(x), [v0] "=&r"(v0),
        [v1] "=&r"(v1), [v2] "=&r"(v2), [v3] "=&r"(v3), [n1] "=&r"(n1), [n2] "=&r"(n2),
        [n3] "=&r"(n3), [g] "=&r"(g), [k2] "=&r"(k2)
      : [s] "r"(s)
      : "cc", "memory");
}
#undef QSA_RQF1
#undef QSA_ST4

static void qsa_bmm_hamt(int8_t *restrict out, const int8_t *B, const qsa_hamt_p *p) {
  int32_t b;
  qsa_hmc s;
  s.n = p->n;
  s.q2 = p->q2;
  s.bq = p->b_off * p->q2;
  s.m = p->m;
  s.e = p->e;
  s.c = qsa_rqc(s.e, p->off);
  s.zz = 2 * p->off;
  s.r1 = p->r1;
  s.r2 = p->r2;
  s.s1 = p->s1;
  s.s2 = p->s2;
  s.n2 = p->n2;
  if (s.n > 0)
    for (b = 0; b < p->nb; ++b, B += p->b_bs, out += p->bs) {
      s.b = B;
      s.bend = B + s.n;
      s.col = s.grp = out;
      qsa_hamt_cols(&s);
    }
}
#else
static void qsa_bmm_hamt(int8_t *restrict out, const int8_t *B, const qsa_hamt_p *p) {
  int32_t b, j, j2;
  const int32_t N = p->n, n2 = p->n2, s1 = p->s1, s2 = p->s2, r1 = p->r1, r2 = p->r2;
  const int32_t r22 = 2 * r2, r23 = 3 * r2, q2 = p->q2, bo = p->b_off, m = p->m, e = p->e;
  const int32_t c = qsa_rqc(e, p->off), zz = 2 * p->off;
  for (b = 0; b < p->nb; ++b, B += p->b_bs, out += p->bs) {
    int8_t *col = out, *grp = out;
    for (j = 0, j2 = 0; j < N; ++j) {
      int8_t *g = col;
      const int32_t v0 = (B[j] + bo) * q2, v1 = (B[N + j] + bo) * q2;
      const int32_t v2 = (B[2 * N + j] + bo) * q2, v3 = (B[3 * N + j] + bo) * q2;
      const int8_t r = qsa_rqf(v0, m, e, c), i = qsa_rqf(v1, m, e, c);
      const int8_t jj = qsa_rqf(v2, m, e, c), k = qsa_rqf(v3, m, e, c);
      const int8_t ni = qsa_ssat8(zz - i), nj = qsa_ssat8(zz - jj), nk = qsa_ssat8(zz - k);
      g[0] = r;  g[r2] = ni; g[r22] = nj; g[r23] = nk; g += r1; /* r, -i, -j, -k */
      g[0] = i;  g[r2] = r;  g[r22] = k;  g[r23] = nj; g += r1; /* i,  r,  k, -j */
      g[0] = jj; g[r2] = nk; g[r22] = r;  g[r23] = i;  g += r1; /* j, -k,  r,  i */
      g[0] = k;  g[r2] = jj; g[r22] = ni; g[r23] = r;           /* k,  j, -i,  r */
      if (++j2 == n2) {
        j2 = 0;
        grp += s1;
        col = grp;
      } else {
        col += s2;
      }
    }
  }
}
#endif
#endif

/* FULLY_CONNECTED with constant weights (zero point 0, depth a multiple of 4), the fast
 * requantisation: unit by unit, its constants hoisted, four rows per pass so each weight word
 * is sign-extended once for all four (kbias as in qsa_fc). Same integers as qsa_fc. */
static void qsa_fcs(int8_t *restrict out, const int8_t *x, const int8_t *w, const int32_t *kbias,
                    int32_t rows, int32_t depth, int32_t units, const int32_t *mult,
                    const int8_t *shift, int32_t per_channel, int32_t out_off) {
  int32_t r, u, k;
  for (u = 0; u < units; ++u) {
    const int32_t ch = per_channel ? u : 0, m = mult[ch], e = -shift[ch];
    const int32_t c = qsa_rqc(e, out_off), kb = kbias[u];
    const int8_t *pw = w + u * depth, *px = x;
    int8_t *po = out + u;
    for (r = 0; r + 3 < rows; r += 4, px += 4 * depth, po += 4 * units) {
      int32_t a0 = kb, a1 = kb, a2 = kb, a3 = kb;
      const int8_t *x1 = px + depth, *x2 = x1 + depth, *x3 = x2 + depth;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
      for (k = 0; k < depth; k += 4) {
        uint32_t wv, xv, w0, w1;
        memcpy(&wv, pw + k, 4);
        w0 = __sxtb16(wv);
        w1 = qsa_sxtb16_ror8(wv);
        memcpy(&xv, px + k, 4);
        a0 = __smlad(w1, qsa_sxtb16_ror8(xv), __smlad(w0, __sxtb16(xv), a0));
        memcpy(&xv, x1 + k, 4);
        a1 = __smlad(w1, qsa_sxtb16_ror8(xv), __smlad(w0, __sxtb16(xv), a1));
        memcpy(&xv, x2 + k, 4);
        a2 = __smlad(w1, qsa_sxtb16_ror8(xv), __smlad(w0, __sxtb16(xv), a2));
        memcpy(&xv, x3 + k, 4);
        a3 = __smlad(w1, qsa_sxtb16_ror8(xv), __smlad(w0, __sxtb16(xv), a3));
      }
#else
      for (k = 0; k < depth; ++k) {
        a0 += pw[k] * px[k];
        a1 += pw[k] * x1[k];
        a2 += pw[k] * x2[k];
        a3 += pw[k] * x3[k];
      }
#endif
      po[0] = qsa_rqf(a0 * 2, m, e, c);
      po[units] = qsa_rqf(a1 * 2, m, e, c);
      po[2 * units] = qsa_rqf(a2 * 2, m, e, c);
      po[3 * units] = qsa_rqf(a3 * 2, m, e, c);
    }
    for (; r < rows; ++r, px += depth, po += units)
      *po = qsa_rqf((kb + qsa_dot8x4(px, pw, depth)) * 2, m, e, c);
  }
}

/* CONV_2D as qsa_convf for a filter one column wide (k_w = 1, stride_w 1, no width padding,
 * no dilation; in_c a multiple of 4, k_h in_c <= 256): the columns of up to 512 / (k_h in_c)
 * output pixels gathered at once (im2col, word copies; a tap in the padding reads a row of
 * the input zero point), then the pixels as the rows of qsa_fcs. Same integers as qsa_conv. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* word copies, no memcpy call */
#endif
static void qsa_convc(int8_t *restrict out, const int8_t *x, const int8_t *f, const int32_t *kbias,
                      const int32_t *mult, const int8_t *shift, const qsa_conv_p *p) {
  int32_t n, oy, ox, ky, k, np = 0;
  uint32_t colw[128], zrow[64];
  uint32_t *pc = colw;
  const int32_t C = p->in_c, C4 = C / 4, KH = p->k_h, TC = KH * C, OC = p->out_c;
  const int32_t chunk = 512 / TC >= 4 ? 512 / TC & ~3 : 512 / TC; /* qsa_fcs: 4 rows a pass */
  const int32_t IH = p->in_h, W = p->in_w, OH = p->out_h;
  const int32_t SH = p->stride_h, PH = p->pad_h, row = W * C;
  const uint32_t zp4 = 0x01010101u * (uint8_t)(int8_t)(-p->in_off);
  for (k = 0; k < C4; ++k) zrow[k] = zp4;
  for (n = 0; n < p->batches; ++n, x += IH * row)
    for (oy = 0; oy < OH; ++oy) {
      const int8_t *tap[16];
      int32_t inc[16];
      for (ky = 0; ky < KH; ++ky) {
        const int32_t iy = oy * SH - PH + ky;
        const int valid = iy >= 0 && iy < IH;
        tap[ky] = valid ? x + iy * row : (const int8_t *)zrow;
        inc[ky] = valid ? C : 0;
      }
      for (ox = 0; ox < W; ++ox) {
        for (ky = 0; ky < KH; ++ky) {
          const int8_t *src = tap[ky];
          tap[ky] += inc[ky];
          for (k = 0; k < C4; ++k, src += 4) memcpy(pc++, src, 4);
        }
        if (++np == chunk) {
          qsa_fcs(out, (const int8_t *)colw, f, kbias, np, TC, OC, mult, shift, 1, p->out_off);
          out += np * OC;
          np = 0;
          pc = colw;
        }
      }
    }
  if (np) qsa_fcs(out, (const int8_t *)colw, f, kbias, np, TC, OC, mult, shift, 1, p->out_off);
}

/* DEPTHWISE_CONV_2D, depth multiplier 1, channels a multiple of 4 (<= 128), k_h k_w <= 32,
 * the fast requantisation: taps in the padding read a row of the input zero point, so the
 * input offset folds into the bias (bias + in_off sum over all taps, once a call); four channels
 * per pass, one word of input and of filter per tap (SMLABB / SMLATT on the DSP extension).
 * Same integers as qsa_dwconv. */
/* the taps of output pixel (n, oy, ox), KH x KW of them: each its input row, or zrow (a row of
 * the input zero point) where it falls in the padding; returns their number */
static inline int32_t qsa_dw_taps(const int8_t **tx, const int8_t *x, const uint32_t *zrow,
                                  const qsa_conv_p *p, int32_t n, int32_t oy, int32_t ox,
                                  int32_t KH, int32_t KW, int32_t IH, int32_t IW, int32_t C) {
  int32_t ky, kx, T = 0;
  for (ky = 0; ky < KH; ++ky) {
    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
    for (kx = 0; kx < KW; ++kx) {
      const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
      tx[T++] = iy < 0 || iy >= IH || ix < 0 || ix >= IW
                    ? (const int8_t *)zrow : x + ((n * IH + iy) * IW + ix) * C;
    }
  }
  return T;
}
/* channels c .. c + 3 over the T taps: *ak += sum_t tx[t][c + k] pf[t C + k] */
static inline void qsa_dw4(int32_t *a0p, int32_t *a1p, int32_t *a2p, int32_t *a3p,
                           const int8_t *const *tx, const int8_t *pf, int32_t T, int32_t C,
                           int32_t c) {
  int32_t t, a0 = *a0p, a1 = *a1p, a2 = *a2p, a3 = *a3p;
  for (t = 0; t < T; ++t, pf += C) {
    const int8_t *px = tx[t] + c; /* zrow + c: still the zero point */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    uint32_t xv, fv, x02, f02, x13, f13;
    memcpy(&xv, px, 4);
    memcpy(&fv, pf, 4);
    x02 = __sxtb16(xv);
    f02 = __sxtb16(fv);
    x13 = qsa_sxtb16_ror8(xv);
    f13 = qsa_sxtb16_ror8(fv);
    a0 = __smlabb(x02, f02, a0);
    a2 = __smlatt(x02, f02, a2);
    a1 = __smlabb(x13, f13, a1);
    a3 = __smlatt(x13, f13, a3);
#else
    a0 += px[0] * pf[0];
    a1 += px[1] * pf[1];
    a2 += px[2] * pf[2];
    a3 += px[3] * pf[3];
#endif
  }
  *a0p = a0;
  *a1p = a1;
  *a2p = a2;
  *a3p = a3;
}
#ifdef QSA_ARITH_FAST
/* the fast build's qsa_dwconvs: bias is the folded bias (bias + in_off sum over the taps,
 * the zero-point padding as above) and the filter its halfword pairs per four channels and tap
 * (both filled at init into RAM by qsa_dwconvs_init); each channel's requantisation constants
 * once per call. Per output pixel, on the DSP extension, one assembly loop (qsa_dwpix): per
 * four channels the biases (2 LDRD), per tap 11 instructions (the tap's row, its word, the
 * filter pairs as one LDRD, 2 SXTB16, 4 SMLAxy), then the four requantisations as qsa_rqa
 * (12-07 round 4; were 14 per tap, the accumulators stored and requantised in a second pass
 * with 13 a value). Same integers as qsa_dwconvs. */
typedef struct { int32_t m2, e, c; } qsa_rq3;
/* at init (RAM, not flash): kb[c] = bias[c] + in_off sum_t f[t][c]; fx[(c / 4) T + t] the
 * pairs (f[t][c], f[t][c + 2]), (f[t][c + 1], f[t][c + 3]) as int16 halves (T taps) */
QSA_INIT_CODE static void qsa_dwconvs_init(int32_t *kb, uint32_t *fx, const int8_t *f,
                                           const int32_t *bias, const qsa_conv_p *p) {
  const int32_t C = p->out_c, T = p->k_h * p->k_w;
  int32_t c, t;
  for (c = 0; c < C; ++c) {
    int32_t fs = 0;
    for (t = 0; t < T; ++t) fs += f[t * C + c];
    kb[c] = (bias ? bias[c] : 0) + p->in_off * fs;
  }
  for (c = 0; c < C; c += 4)
    for (t = 0; t < T; ++t, fx += 2) {
      const int8_t *q = f + t * C + c;
      fx[0] = (uint32_t)(uint16_t)(int16_t)q[0] | (uint32_t)(uint16_t)(int16_t)q[2] << 16;
      fx[1] = (uint32_t)(uint16_t)(int16_t)q[1] | (uint32_t)(uint16_t)(int16_t)q[3] << 16;
    }
}
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
typedef struct {
  const int8_t *const *tx; /* 0: the pixel's taps (rows) */
  const int8_t *const *te; /* 4: tx + T */
  const int32_t *kb;       /* 8: folded biases */
  const qsa_rq3 *rq;       /* 12: requantisation constants */
  int8_t *out;             /* 16: the pixel's C outputs */
  int32_t C;               /* 20 */
  const uint32_t *fx;      /* 24: the filter pairs */
} qsa_dwpc;
#define QSA_DWRQ(a, k)                                                                  \
  "ldrd %[f0], %[f1], [%[pt]], #12\n\tldr %[xv], [%[pt], #-4]\n\t"                      \
  "add %[xv], %[xv], " a "\n\tadd %[xv], %[xv], " a ", asr #31\n\t"                     \
  "smmlar " a ", " a ", %[f0], %[xv]\n\tasr " a ", " a ", %[f1]\n\t"                    \
  "ssat " a ", #8, " a "\n\tstrb " a ", [%[px], #" k "]\n\t"
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_dwpix(const qsa_dwpc *s) {
  uint32_t a0, a1, a2, a3, pt, te, pf, j, px, xv, f0, f1;
  __asm volatile(
      "movs %[j], #0\n\tldr %[pf], [%[s], #24]\n"
      "1:\n\t"
      "ldr %[px], [%[s], #8]\n\tadd %[px], %[px], %[j], lsl #2\n\t"
      "ldrd %[a0], %[a1], [%[px]]\n\tldrd %[a2], %[a3], [%[px], #8]\n\t"
      "ldrd %[pt], %[te], [%[s]]\n"
      "2:\n\t"
      "ldr %[px], [%[pt]], #4\n\tldr %[xv], [%[px], %[j]]\n\t"
      "ldrd %[f0], %[f1], [%[pf]], #8\n\t"
      "sxtb16 %[px], %[xv]\n\tsxtb16 %[xv], %[xv], ror #8\n\t"
      "smlabb %[a0], %[px], %[f0], %[a0]\n\tsmlatt %[a2], %[px], %[f0], %[a2]\n\t"
      "smlabb %[a1], %[xv], %[f1], %[a1]\n\tsmlatt %[a3], %[xv], %[f1], %[a3]\n\t"
      "cmp %[pt], %[te]\n\tbne 2b\n\t"
      "ldr %[pt], [%[s], #12]\n\tadd %[pt], %[pt], %[j], lsl #3\n\t"
      "add %[pt], %[pt], %[j], lsl #2\n\t"
      "ldr %[px], [%[s], #16]\n\tadd %[px], %[px], %[j]\n\t"
      QSA_DWRQ("%[a0]", "0") QSA_DWRQ("%[a1]", "1") QSA_DWRQ("%[a2]", "2")
      QSA_DWRQ("%[a3]", "3")
      "adds %[j], %[j], #4\n\tldr %[te], [%[s], #20]\n\tcmp %[j], %[te]\n\tbne 1b\n\t"
      : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [pt] "=&r"(pt),
        [te] "=&r"(te), [pf] "=&r"(pf), [j] "=&r"(j), [px] "=&r"(px), [xv] "=&r"(xv),
        [f0] "=&r"(f0), [f1] "=&r"(f1)
      : [s] "r"(s)
      : "cc", "memory");
}
#undef QSA_DWRQ
#endif
static void qsa_dwconvs(int8_t *restrict out, const int8_t *x, const uint32_t *fx,
                        const int32_t *kbias, const int32_t *mult, const int8_t *shift,
                        const qsa_conv_p *p) {
  int32_t n, oy, ox, c, T;
  uint32_t zrow[32];
  qsa_rq3 rq[128];
  const int8_t *tx[32];
  const int32_t C = p->out_c, IH = p->in_h, IW = p->in_w, KH = p->k_h, KW = p->k_w;
  const uint32_t zp4 = 0x01010101u * (uint8_t)(int8_t)(-p->in_off);
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
  qsa_dwpc s;
  s.tx = tx;
  s.kb = kbias;
  s.rq = rq;
  s.C = C;
  s.fx = fx;
#endif
  for (c = 0; c < C / 4; ++c) zrow[c] = zp4;
  for (c = 0; c < C; ++c) {
    rq[c].m2 = (int32_t)((uint32_t)mult[c] << 1);
    rq[c].e = -shift[c];
    rq[c].c = qsa_rqc(-shift[c], p->out_off);
  }
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox, out += C) {
        T = qsa_dw_taps(tx, x, zrow, p, n, oy, ox, KH, KW, IH, IW, C);
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
        s.te = tx + T;
        s.out = out;
        qsa_dwpix(&s);
#else
        for (c = 0; c < C; c += 4) { /* channels c .. c + 3 */
          int32_t a0 = kbias[c], a1 = kbias[c + 1], a2 = kbias[c + 2], a3 = kbias[c + 3], t;
          const uint32_t *pf = fx + c / 2 * T;
          for (t = 0; t < T; ++t, pf += 2) {
            const int8_t *px = tx[t] + c; /* zrow + c: still the zero point */
            a0 += px[0] * (int16_t)(pf[0] & 0xFFFFu);
            a2 += px[2] * (int16_t)(pf[0] >> 16);
            a1 += px[1] * (int16_t)(pf[1] & 0xFFFFu);
            a3 += px[3] * (int16_t)(pf[1] >> 16);
          }
          out[c] = qsa_rqa(a0, rq[c].m2, rq[c].e, rq[c].c);
          out[c + 1] = qsa_rqa(a1, rq[c + 1].m2, rq[c + 1].e, rq[c + 1].c);
          out[c + 2] = qsa_rqa(a2, rq[c + 2].m2, rq[c + 2].e, rq[c + 2].c);
          out[c + 3] = qsa_rqa(a3, rq[c + 3].m2, rq[c + 3].e, rq[c + 3].c);
        }
#endif
      }
}
#else
static void qsa_dwconvs(int8_t *restrict out, const int8_t *x, const int8_t *f,
                        const int32_t *bias, const int32_t *mult, const int8_t *shift,
                        const qsa_conv_p *p) {
  int32_t n, oy, ox, c, t, T = 0;
  uint32_t zrow[32];
  int32_t kbias[128];
  const int8_t *tx[32];
  const int32_t C = p->out_c, IH = p->in_h, IW = p->in_w, KH = p->k_h, KW = p->k_w;
  const int32_t off = p->out_off;
  const uint32_t zp4 = 0x01010101u * (uint8_t)(int8_t)(-p->in_off);
  for (c = 0; c < C / 4; ++c) zrow[c] = zp4;
  for (c = 0; c < C; ++c) {
    int32_t fs = 0;
    for (t = 0; t < KH * KW; ++t) fs += f[t * C + c];
    kbias[c] = (bias ? bias[c] : 0) + p->in_off * fs;
  }
  for (n = 0; n < p->batches; ++n)
    for (oy = 0; oy < p->out_h; ++oy)
      for (ox = 0; ox < p->out_w; ++ox) {
        T = qsa_dw_taps(tx, x, zrow, p, n, oy, ox, KH, KW, IH, IW, C);
        for (c = 0; c < C; c += 4, out += 4) {
          int32_t a0 = kbias[c], a1 = kbias[c + 1], a2 = kbias[c + 2], a3 = kbias[c + 3];
          qsa_dw4(&a0, &a1, &a2, &a3, tx, f + c, T, C, c);
          {
            const int32_t acc[4] = {a0, a1, a2, a3};
            for (t = 0; t < 4; ++t)
              out[t] = qsa_rqf(acc[t] * 2, mult[c + t], -shift[c + t],
                               qsa_rqc(-shift[c + t], off));
          }
        }
      }
}
#endif

typedef struct { int32_t kx, ox, y_half, ky, oy, my, ey, hy, kky, smy, mo, eo, co, ny; } qsa_addc_p;

/* ADD / SUB of an activation x whose rescale is exactly 1/2 (the larger scale: its term is
 * (x + ox) kx, kx = +-2^19) and a constant y (ny <= 256 values, a bias): y's terms (exact half,
 * or qsa_rqterm, +-1) plus ox kx once per call into a table, then per value one multiply, a
 * sum and the output requantisation. Same integers as qsa_add. */
static void qsa_addc(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                     const qsa_addc_p *p) {
  int32_t a, b, c, d, ty[256];
  const int32_t n3 = bc->n[3], sa3 = bc->sa[3], sb3 = bc->sb[3];
  const int32_t mo = p->mo, eo = p->eo, co = p->co, kx = p->kx, kx2 = 2 * p->kx;
  for (d = 0; d < p->ny; ++d) {
    const int32_t v = p->oy + y[d];
    int32_t t = p->y_half ? v * p->ky : qsa_rqterm(v * (1 << 21), p->my, p->ey, p->hy, p->kky);
    if (!p->y_half) t = (t ^ p->smy) - p->smy;
    ty[d] = 2 * (t + p->ox * kx); /* twice the terms: the requantisation takes 2 acc */
  }
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c) {
        const int8_t *px = x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2];
        const int32_t *pt = ty + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2];
        if (sa3 == 1 && sb3 == 1) /* contiguous: post-incremented loads */
          for (d = 0; d < n3; ++d) *out++ = qsa_rqf(px[d] * kx2 + pt[d], mo, eo, co);
        else
          for (d = 0; d < n3; ++d, px += sa3, pt += sb3)
            *out++ = qsa_rqf(*px * kx2 + *pt, mo, eo, co);
      }
}

/* the DSP extension's halfword-pair helpers (SXTB16, SMLAD, SADD16, LDRD / STRD) and the
 * same integers in portable C */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define qsa_x16(v) __sxtb16(v)
#define qsa_x16r8(v) qsa_sxtb16_ror8(v)
#define qsa_mlad(a, b, c) __smlad((a), (b), (c))
#define qsa_add16(a, b) __sadd16((a), (b))
/* two words from p, p += 2 (one LDRD with writeback: the instruction count is what a hop
 * costs) */
#define QSA_LD2(a, b, p) __asm volatile("ldrd %0, %1, [%2], #8" : "=r"(a), "=r"(b), "+r"(p) \
                                        : : "memory")
/* p[0] = a, p[1] = b, p += 2 (one STRD with writeback) */
#define QSA_ST2(a, b, p) __asm volatile("strd %1, %2, [%0], #8" : "+r"(p) : "r"(a), "r"(b) \
                                        : "memory")
#else
#define QSA_LD2(a, b, p) do { (a) = (p)[0]; (b) = (p)[1]; (p) += 2; } while (0)
#define QSA_ST2(a, b, p) do { (p)[0] = (a); (p)[1] = (b); (p) += 2; } while (0)
static inline uint32_t qsa_x16(uint32_t v) {
  return (uint32_t)(uint16_t)(int16_t)(int8_t)(v & 0xFFu)
         | ((uint32_t)(uint16_t)(int16_t)(int8_t)((v >> 16) & 0xFFu) << 16);
}
static inline uint32_t qsa_x16r8(uint32_t v) { return qsa_x16(v >> 8); }
static inline uint32_t qsa_add16(uint32_t a, uint32_t b) {
  return ((a + b) & 0xFFFFu) | (((a >> 16) + (b >> 16)) << 16);
}
static inline int32_t qsa_mlad(uint32_t a, uint32_t b, int32_t c) {
  return c + (int32_t)(int16_t)(a & 0xFFFFu) * (int16_t)(b & 0xFFFFu)
         + (int32_t)(int16_t)(a >> 16) * (int16_t)(b >> 16);
}
#endif

/* (lo, hi) as a halfword pair (PKHBT on the DSP extension); qsa_sat8i: saturated to int8,
 * kept as int32 */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
static inline uint32_t qsa_pk16(int32_t lo, int32_t hi) {
  uint32_t r;
  __asm("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
  return r;
}
/* (the top halfword of lo, the top halfword of hi) (PKHTB) */
static inline uint32_t qsa_pkt16(uint32_t lo, uint32_t hi) {
  uint32_t r;
  __asm("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(hi), "r"(lo));
  return r;
}
#define qsa_sat8i(v) __ssat((v), 8)
#define qsa_neg16(x) __ssub16(0u, (x)) /* both halfwords negated */
#else
static inline uint32_t qsa_neg16(uint32_t x) {
  return (uint32_t)(uint16_t)(-(int32_t)(int16_t)(x & 0xFFFFu))
         | (uint32_t)(-(int32_t)(int16_t)(x >> 16)) << 16;
}
static inline uint32_t qsa_pk16(int32_t lo, int32_t hi) {
  return (uint32_t)(uint16_t)lo | (uint32_t)hi << 16;
}
static inline uint32_t qsa_pkt16(uint32_t lo, uint32_t hi) {
  return lo >> 16 | (hi & 0xFFFF0000u);
}
#define qsa_sat8i(v) ((int32_t)qsa_sat8(v))
#endif

#ifdef QSA_ARITH_FAST
/* the fast build's qsa_bmm2 (the same integers): K padded with zeros to Kp, a multiple of 4
 * ((M + M % 2) Kp <= 640, Kp <= 128); A + a_off as int16 in pairs of rows, four k of row i
 * then the same four of row i + 1 (an odd M: a zero row last), so one pointer walks both;
 * B + b_off as int16 columns in pairs the same way (column j's four k, then column j + 1's;
 * blocks of 256 halfwords); then 2 x 2 outputs per pass, per four k 4 LDRD + 8 SMLAD on the
 * DSP extension (14 instructions per 16 MACs, were 20). 12-08 round 5: a row pair's passes
 * over the column pairs and their requantisations (qsa_rqa) one assembly loop
 * (qsa_bmm2_row; GCC spilled the pass's constants), an odd column count's last column in C. */
/* two words a, b to the bytes at (char *)p + off (one STRD on the DSP extension) */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
#define QSA_STD8(p, off, a, b) \
  __asm volatile("strd %1, %2, [%0, %3]" : : "r"(p), "r"(a), "r"(b), "i"(off) : "memory")
#else
#define QSA_STD8(p, off, a, b)                                                         \
  do {                                                                                 \
    const uint32_t a_ = (a), b_ = (b);                                                 \
    memcpy((char *)(p) + (off), &a_, 4);                                               \
    memcpy((char *)(p) + (off) + 4, &b_, 4);                                           \
  } while (0)
#endif
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
typedef struct {
  const int16_t *ra;      /* 0: rows i, i + 1 (interleaved) */
  int32_t kb;             /* 4: their bytes (4 Kp) */
  int32_t m2, e, c;       /* 8: qsa_rqa's constants */
  int8_t *o;              /* 20: the pass's first output */
  int32_t n;              /* 24: N, the output row stride */
  int32_t two;            /* 28: row i + 1 exists */
  int8_t *oend;           /* 32: o after the last column pair */
  const int16_t *q;       /* 36: the first column pair */
} qsa_bm2c;
#define QSA_RQA1(a)                                                                     \
  "add %[x1], %[z0], " a "\n\tadd %[x1], %[x1], " a ", asr #31\n\t"                     \
  "smmlar " a ", " a ", %[y0], %[x1]\n\tasr " a ", " a ", %[y1]\n\tssat " a ", #8, " a "\n\t"
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_bmm2_row(qsa_bm2c *s) {
  uint32_t s00, s01, s10, s11, pr, pe, q, x0, x1, y0, y1, z0, z1;
  __asm volatile(
      "ldrd %[pe], %[x0], [%[s]]\n\tadd %[pe], %[pe], %[x0]\n\tldr %[q], [%[s], #36]\n"
      "1:\n\t"
      "ldr %[x0], [%[s], #4]\n\tsub %[pr], %[pe], %[x0]\n\t"
      "movs %[s00], #0\n\tmovs %[s01], #0\n\tmovs %[s10], #0\n\tmovs %[s11], #0\n"
      "2:\n\t"
      "ldrd %[y0], %[y1], [%[q]], #8\n\tldrd %[z0], %[z1], [%[q]], #8\n\t"
      "ldrd %[x0], %[x1], [%[pr]], #8\n\t"
      "smlad %[s00], %[x0], %[y0], %[s00]\n\tsmlad %[s00], %[x1], %[y1], %[s00]\n\t"
      "smlad %[s01], %[x0], %[z0], %[s01]\n\tsmlad %[s01], %[x1], %[z1], %[s01]\n\t"
      "ldrd %[x0], %[x1], [%[pr]], #8\n\t"
      "smlad %[s10], %[x0], %[y0], %[s10]\n\tsmlad %[s10], %[x1], %[y1], %[s10]\n\t"
      "smlad %[s11], %[x0], %[z0], %[s11]\n\tsmlad %[s11], %[x1], %[z1], %[s11]\n\t"
      "cmp %[pr], %[pe]\n\tbne 2b\n\t"
      "ldrd %[y0], %[y1], [%[s], #8]\n\tldr %[z0], [%[s], #16]\n\t"
      QSA_RQA1("%[s00]") QSA_RQA1("%[s01]") QSA_RQA1("%[s10]") QSA_RQA1("%[s11]")
      "ldrd %[x0], %[pr], [%[s], #20]\n\t"
      "strb %[s00], [%[x0]]\n\tstrb %[s01], [%[x0], #1]\n\t"
      "ldr %[z1], [%[s], #28]\n\tcmp %[z1], #0\n\tbeq 3f\n\t"
      "add %[x1], %[x0], %[pr]\n\tstrb %[s10], [%[x0], %[pr]]\n\tstrb %[s11], [%[x1], #1]\n"
      "3:\n\t"
      "adds %[x0], %[x0], #2\n\tstr %[x0], [%[s], #20]\n\t"
      "ldr %[x1], [%[s], #32]\n\tcmp %[x0], %[x1]\n\tbne 1b\n\t"
      : [s00] "=&r"(s00), [s01] "=&r"(s01), [s10] "=&r"(s10), [s11] "=&r"(s11),
        [pr] "=&r"(pr), [pe] "=&r"(pe), [q] "=&r"(q), [x0] "=&r"(x0), [x1] "=&r"(x1),
        [y0] "=&r"(y0), [y1] "=&r"(y1), [z0] "=&r"(z0), [z1] "=&r"(z1)
      : [s] "r"(s)
      : "cc", "memory");
}
#undef QSA_RQA1
#endif
static void qsa_bmm2(int8_t *restrict out, const int8_t *A, int32_t a_off, const int8_t *B,
                     int32_t b_off, int32_t nb, int32_t a_bs, int32_t b_bs, int32_t M, int32_t K,
                     int32_t N, int32_t mult, int32_t e, int32_t out_off) {
  int32_t b, i, j, j0, k;
  int16_t a16[640], c16[256];
  const int32_t Kp = (K + 3) & ~3, c = qsa_rqc(e, out_off);
  const int32_t NC = (256 / Kp) & ~1, m2 = (int32_t)((uint32_t)mult << 1);
  const uint32_t bo2 = (uint32_t)(uint16_t)b_off * 0x10001u;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
  qsa_bm2c s;
  s.kb = 4 * Kp;
  s.m2 = m2;
  s.e = e;
  s.c = c;
  s.n = N;
#endif
  for (b = 0; b < nb; ++b) {
    const int8_t *pa = A + b * a_bs, *pb = B + b * b_bs;
    int8_t *po = out + b * M * N;
    if (b == 0 || a_bs) { /* a16[(i / 2) 2 Kp + (k / 4) 8 + (i % 2) 4 + k % 4] = A[i][k] + a_off */
      for (i = 0; i < M; ++i, pa += K) {
        int16_t *d = a16 + (i >> 1) * 2 * Kp + (i & 1) * 4;
        for (k = 0; k < K; k += 4, d += 8) {
          d[0] = (int16_t)(pa[k] + a_off);
          d[1] = (int16_t)(k + 1 < K ? pa[k + 1] + a_off : 0);
          d[2] = (int16_t)(k + 2 < K ? pa[k + 2] + a_off : 0);
          d[3] = (int16_t)(k + 3 < K ? pa[k + 3] + a_off : 0);
        }
      }
      if (M & 1) /* the zero row beside the last */
        for (k = 0; k < Kp; k += 4) memset(a16 + (M - 1) * Kp + 2 * k + 4, 0, 8);
    }
    for (j0 = 0; j0 < N; j0 += NC) {
      const int32_t nc = QSA_MIN(NC, N - j0);
      /* c16[(j / 2) 2 Kp + (k / 4) 8 + (j % 2) 4 + k % 4] = B[k][j0 + j] + b_off: four rows of
       * B by four columns a turn (12-08 round 5): 4 words in, a column's four k as two words
       * stored by one STRD (SXTB16, PKHBT / PKHTB, SADD16); the rows of the last, partial
       * quad of k and the padding value by value */
      const int32_t kf = nc % 4 == 0 ? K & ~3 : 0;
      for (k = 0; k < kf; k += 4) {
        const int8_t *p0 = pb + k * N + j0;
        int16_t *q = c16 + (k >> 2) * 8;
        for (j = 0; j < nc; j += 4, p0 += 4, q += 4 * Kp) {
          int16_t *q2 = q + 2 * Kp;
          uint32_t v0, v1, v2, v3, a0, a1, a2, a3;
          memcpy(&v0, p0, 4);
          memcpy(&v1, p0 + N, 4);
          memcpy(&v2, p0 + 2 * N, 4);
          memcpy(&v3, p0 + 3 * N, 4);
          a0 = qsa_x16(v0); /* columns j (low halves), j + 2 (high) */
          a1 = qsa_x16(v1);
          a2 = qsa_x16(v2);
          a3 = qsa_x16(v3);
          QSA_STD8(q, 0, qsa_add16(qsa_pk16((int32_t)a0, (int32_t)a1), bo2),
                   qsa_add16(qsa_pk16((int32_t)a2, (int32_t)a3), bo2));
          QSA_STD8(q2, 0, qsa_add16(qsa_pkt16(a0, a1), bo2), qsa_add16(qsa_pkt16(a2, a3), bo2));
          a0 = qsa_x16r8(v0); /* columns j + 1, j + 3 */
          a1 = qsa_x16r8(v1);
          a2 = qsa_x16r8(v2);
          a3 = qsa_x16r8(v3);
          QSA_STD8(q, 8, qsa_add16(qsa_pk16((int32_t)a0, (int32_t)a1), bo2),
                   qsa_add16(qsa_pk16((int32_t)a2, (int32_t)a3), bo2));
          QSA_STD8(q2, 8, qsa_add16(qsa_pkt16(a0, a1), bo2), qsa_add16(qsa_pkt16(a2, a3), bo2));
        }
      }
      for (j = 0; j < nc; ++j)
        for (k = kf; k < Kp; ++k)
          c16[(j >> 1) * 2 * Kp + (k >> 2) * 8 + (j & 1) * 4 + (k & 3)] =
              (int16_t)(k < K ? pb[k * N + j0 + j] + b_off : 0);
      for (i = 0; i < M; i += 2) {
        const int16_t *ra = a16 + i * Kp; /* rows i and i + 1, interleaved by four k */
        const int32_t two = i + 1 < M;
        int8_t *o = po + i * N + j0;
        j = 0;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
        if (nc >= 2) {
          s.ra = ra;
          s.o = o;
          s.two = two;
          s.oend = o + (nc & ~1);
          s.q = c16;
          qsa_bmm2_row(&s);
          j = nc & ~1;
          o += j;
        }
#endif
        for (; j < nc; j += 2, o += 2) {
          const int32_t j1 = j + 1 < nc;
          const int16_t *q0 = c16 + j * Kp; /* columns j and j + 1, interleaved by four k */
          int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
          for (k = 0; k < Kp; ++k) {
            const int32_t at = (k >> 2) * 8 + (k & 3);
            const int32_t x0 = ra[at], x1 = ra[at + 4];
            s00 += x0 * q0[at];
            s10 += x1 * q0[at];
            if (j1) {
              s01 += x0 * q0[at + 4];
              s11 += x1 * q0[at + 4];
            }
          }
          o[0] = qsa_rqa(s00, m2, e, c); /* qsa_rqf(2 s, mult, e, c): |s| < 2^30 */
          if (j1) o[1] = qsa_rqa(s01, m2, e, c);
          if (two) {
            o[N] = qsa_rqa(s10, m2, e, c);
            if (j1) o[N + 1] = qsa_rqa(s11, m2, e, c);
          }
        }
      }
    }
  }
}
#else
/* BATCH_MATMUL of two activations, as qsa_bmmf (same integers as qsa_bmm): A + a_off as int16
 * rows once per batch (M Kp <= 640, K padded to even Kp <= 128), blocks of columns of B + b_off
 * as int16 (256 halfwords), then 2 x 2 outputs per pass: two rows and two columns share each
 * loaded pair, four SMLADs per four loads. */
static void qsa_bmm2(int8_t *restrict out, const int8_t *A, int32_t a_off, const int8_t *B,
                     int32_t b_off, int32_t nb, int32_t a_bs, int32_t b_bs, int32_t M, int32_t K,
                     int32_t N, int32_t mult, int32_t e, int32_t out_off) {
  int32_t b, i, j, j0, k;
  int16_t a16[640], c16[256];
  const int32_t Kp = (K + 1) & ~1, c = qsa_rqc(e, out_off);
  const int32_t NC = (256 / Kp) & ~1;
  for (b = 0; b < nb; ++b) {
    const int8_t *pa = A + b * a_bs, *pb = B + b * b_bs;
    int8_t *po = out + b * M * N;
    if (b == 0 || a_bs)
      for (i = 0; i < M; ++i) {
        for (k = 0; k < K; ++k) a16[i * Kp + k] = (int16_t)(pa[i * K + k] + a_off);
        if (Kp != K) a16[i * Kp + K] = 0;
      }
    for (j0 = 0; j0 < N; j0 += NC) {
      const int32_t nc = QSA_MIN(NC, N - j0);
      for (j = 0; j < nc; ++j) {
        for (k = 0; k < K; ++k) c16[j * Kp + k] = (int16_t)(pb[k * N + j0 + j] + b_off);
        if (Kp != K) c16[j * Kp + K] = 0;
      }
      for (i = 0; i < M; i += 2) {
        const int32_t i1 = i + 1 < M ? i + 1 : i;
        const int16_t *r0 = a16 + i * Kp, *r1 = a16 + i1 * Kp;
        for (j = 0; j < nc; j += 2) {
          const int32_t j1 = j + 1 < nc ? j + 1 : j;
          const int16_t *q0 = c16 + j * Kp, *q1 = c16 + j1 * Kp;
          int32_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
          int8_t *o = po + i * N + j0 + j;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
          for (k = 0; k < Kp; k += 2) {
            uint32_t x0, x1, y0, y1;
            memcpy(&x0, r0 + k, 4);
            memcpy(&x1, r1 + k, 4);
            memcpy(&y0, q0 + k, 4);
            memcpy(&y1, q1 + k, 4);
            s00 = __smlad(x0, y0, s00);
            s01 = __smlad(x0, y1, s01);
            s10 = __smlad(x1, y0, s10);
            s11 = __smlad(x1, y1, s11);
          }
#else
          for (k = 0; k < Kp; ++k) {
            s00 += r0[k] * q0[k];
            s01 += r0[k] * q1[k];
            s10 += r1[k] * q0[k];
            s11 += r1[k] * q1[k];
          }
#endif
          o[0] = qsa_rqf(s00 * 2, mult, e, c);
          if (j1 != j) o[1] = qsa_rqf(s01 * 2, mult, e, c);
          if (i1 != i) {
            o[N] = qsa_rqf(s10 * 2, mult, e, c);
            if (j1 != j) o[N + 1] = qsa_rqf(s11 * 2, mult, e, c);
          }
        }
      }
    }
  }
}
#endif

/* ---- blocked dot products (the "x" kernels): int8 rows sign-extended once ----------------
 * qsa_x16 / qsa_x16r8 / qsa_mlad: SXTB16, SXTB16 ROR #8 and SMLAD on the DSP extension, the
 * same integers in portable C. A block of four rows is expanded once into halfword pairs,
 * interleaved per group of four bytes (row 0 (b0,b2) (b1,b3), row 1 ..., row 3), so one
 * weight word, sign-extended once, meets the four rows with eight SMLADs. */
/* (qsa_x16, qsa_x16r8, qsa_mlad, QSA_LD2 / QSA_ST2: defined before qsa_bmm2) */

/* four rows of n bytes (n a multiple of 4), row k at x + k stride, expanded into xe */
static inline void qsa_x4(uint32_t *restrict xe, const int8_t *x, int32_t stride, int32_t n) {
  const int8_t *x1 = x + stride, *x2 = x1 + stride, *x3 = x2 + stride, *end = x + n;
  for (; x < end; x += 4, x1 += 4, x2 += 4, x3 += 4) {
    uint32_t v0, v1, v2, v3;
    memcpy(&v0, x, 4);
    memcpy(&v1, x1, 4);
    memcpy(&v2, x2, 4);
    memcpy(&v3, x3, 4);
    QSA_ST2(qsa_x16(v0), qsa_x16r8(v0), xe);
    QSA_ST2(qsa_x16(v1), qsa_x16r8(v1), xe);
    QSA_ST2(qsa_x16(v2), qsa_x16r8(v2), xe);
    QSA_ST2(qsa_x16(v3), qsa_x16r8(v3), xe);
  }
}

/* one block of four expanded rows (xe) against all units; weights int8 (w, sign-extended
 * per word) or, when we != 0, already expanded (we: per unit, depth / 2 words); row i of the
 * block to out + i os (os 0: four copies of one row, one output row) */
/* one weight pair (w0, w1) against the four rows' pairs at p */
#define QSA_MLAD4()                                                                    \
  do {                                                                                 \
    uint32_t x0, x1;                                                                   \
    QSA_LD2(x0, x1, p); a0 = qsa_mlad(w1, x1, qsa_mlad(w0, x0, a0));                   \
    QSA_LD2(x0, x1, p); a1 = qsa_mlad(w1, x1, qsa_mlad(w0, x0, a1));                   \
    QSA_LD2(x0, x1, p); a2 = qsa_mlad(w1, x1, qsa_mlad(w0, x0, a2));                   \
    QSA_LD2(x0, x1, p); a3 = qsa_mlad(w1, x1, qsa_mlad(w0, x0, a3));                   \
  } while (0)
/* unit u's weights (int8 w, or expanded we) against the four rows at p .. xend: a0-a3 */
#define QSA_BLK4_DOT()                                                                 \
  do {                                                                                 \
    if (we) {                                                                          \
      const uint32_t *pw = we + u * (depth >> 1);                                      \
      while (p < xend) {                                                               \
        uint32_t w0, w1;                                                               \
        QSA_LD2(w0, w1, pw);                                                           \
        QSA_MLAD4();                                                                   \
      }                                                                                \
    } else {                                                                           \
      const int8_t *pw = w + u * depth;                                                \
      for (; p < xend; pw += 4) {                                                      \
        uint32_t wv, w0, w1;                                                           \
        memcpy(&wv, pw, 4);                                                            \
        w0 = qsa_x16(wv);                                                              \
        w1 = qsa_x16r8(wv);                                                            \
        QSA_MLAD4();                                                                   \
      }                                                                                \
    }                                                                                  \
  } while (0)
#ifdef QSA_ARITH_FAST
/* the fast build's qsa_blk4: nblk blocks of four rows per call (block b at xe + b xs words,
 * xs 0: 2 depth, the blocks back to back; its outputs at out + b bso), a unit's constants
 * loaded once for all of them; per_channel bit 1: a bias per row of the block (a folded ADD).
 * Two weight words per turn of the dot product; the requantisation as qsa_rqa. The same
 * integers per block. */
#define qsa_blk4(out, xe, w, we, kb, d, u, os, m, s, pc, oo) \
  qsa_blk4n((out), (xe), (w), (we), (kb), (d), (u), (os), (m), (s), (pc), (oo), 1, 0, 0)
/* one int8 weight word (pw, advanced) against the four rows' pairs at p (advanced) */
#define QSA_W8()                                                                       \
  do {                                                                                 \
    uint32_t wv, w0, w1;                                                               \
    memcpy(&wv, pw, 4);                                                                \
    pw += 4;                                                                           \
    w0 = qsa_x16(wv);                                                                  \
    w1 = qsa_x16r8(wv);                                                                \
    QSA_MLAD4();                                                                       \
  } while (0)
/* one expanded weight pair (pw, advanced) against the four rows' pairs at p (advanced) */
#define QSA_W16()                                                                      \
  do {                                                                                 \
    uint32_t w0, w1;                                                                   \
    QSA_LD2(w0, w1, pw);                                                               \
    QSA_MLAD4();                                                                       \
  } while (0)
/* qsa_blk4n's loops for one kind of weights (WT: int8_t, STEP QSA_W8, PW0 w + u depth; or
 * uint32_t expanded, QSA_W16, we + u depth / 2): no test of the kind per block */
#define QSA_BLK4N_BODY(WT, STEP, PW0)                                                  \
  for (u = 0; u < units; ++u, ++out) {                                                 \
    const int32_t ch = per_channel & 1 ? u : 0, m2 = (int32_t)((uint32_t)mult[ch] << 1); \
    const int32_t e = -shift[ch], c = qsa_rqc(e, out_off);                             \
    const uint32_t *xb = xe;                                                           \
    const WT *pw0 = PW0;                                                               \
    int8_t *o = out;                                                                   \
    int32_t b4[4]; /* the block's biases: two LDRDs per block */                       \
    b4[0] = kbias[u];                                                                  \
    b4[1] = kbias[u + kbs];                                                            \
    b4[2] = kbias[u + 2 * kbs];                                                        \
    b4[3] = kbias[u + 3 * kbs];                                                        \
    for (b = 0; b < nblk; ++b, o += bso, xb += xs) {                                   \
      const uint32_t *p = xb;                                                          \
      const WT *pw = pw0;                                                              \
      int32_t a0 = b4[0], a1 = b4[1], a2 = b4[2], a3 = b4[3];                          \
      if (nw & 1) STEP();                                                              \
      for (k = nw >> 1; k > 0; --k) {                                                  \
        STEP();                                                                        \
        STEP();                                                                        \
      }                                                                                \
      o[os3] = qsa_rqa(a3, m2, e, c);                                                  \
      o[2 * os] = qsa_rqa(a2, m2, e, c);                                               \
      o[os] = qsa_rqa(a1, m2, e, c);                                                   \
      o[0] = qsa_rqa(a0, m2, e, c);                                                    \
    }                                                                                  \
  }
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__thumb2__)
/* On the DSP extension one unit's blocks are one assembly loop (GCC spills the block loop's
 * constants: ~25 instructions per block more). The unit's constants sit in qsa_blk4c (one LDRD
 * per pair when they are needed); per block: the four biases, the dot products (a weight
 * word: one LDRD of the expanded pair, or LDR + 2 SXTB16, then 2 LDMs of two rows' pairs
 * each (12-07 round 3; were 4 LDRDs) + 8 SMLADs), the four requantisations as qsa_rqa (ADD,
 * ADD ASR, SMMLAR, ASR, SSAT) stored last row first. The same integers as the C below. */
typedef struct {
  int32_t b[4];           /* 0: the block rows' biases */
  const uint32_t *xb;     /* 16: the block's expanded rows */
  const void *pw0;        /* 20: the unit's weights */
  int32_t m2, e, c;       /* 24: qsa_rqa's constants */
  int8_t *o;              /* 36: the block's first output */
  int32_t os;             /* 40: output row stride */
  int32_t dxb;            /* 44: next block's rows - this block's end (bytes) */
  int32_t bso;            /* 48: next block's outputs - this block's (> 0) */
  int8_t *oend;           /* 52: o after the last block */
  int32_t nbytes;         /* 56: a block's expanded rows (bytes) */
  int32_t odd;            /* 60: an odd number of weight words */
} qsa_blk4c;

#define QSA_BLK4A_MLAD4                                                                 \
  "ldmia %[p]!, {%[x0], %[x1], %[x2], %[x3]}\n\t"                                       \
  "smlad %[a0], %[w0], %[x0], %[a0]\n\tsmlad %[a0], %[w1], %[x1], %[a0]\n\t"            \
  "smlad %[a1], %[w0], %[x2], %[a1]\n\tsmlad %[a1], %[w1], %[x3], %[a1]\n\t"            \
  "ldmia %[p]!, {%[x0], %[x1], %[x2], %[x3]}\n\t"                                       \
  "smlad %[a2], %[w0], %[x0], %[a2]\n\tsmlad %[a2], %[w1], %[x1], %[a2]\n\t"            \
  "smlad %[a3], %[w0], %[x2], %[a3]\n\tsmlad %[a3], %[w1], %[x3], %[a3]\n\t"
#define QSA_BLK4A_W16 "ldrd %[w0], %[w1], [%[pw]], #8\n\t" QSA_BLK4A_MLAD4
#define QSA_BLK4A_W8                                                                    \
  "ldr %[w1], [%[pw]], #4\n\tsxtb16 %[w0], %[w1]\n\tsxtb16 %[w1], %[w1], ror #8\n\t"    \
  QSA_BLK4A_MLAD4
#define QSA_RQA4(a)                                                                     \
  "add %[x1], %[x0], " a "\n\tadd %[x1], %[x1], " a ", asr #31\n\t"                     \
  "smmlar " a ", " a ", %[w0], %[x1]\n\tasr " a ", " a ", %[w1]\n\tssat " a ", #8, " a "\n\t"
#define QSA_BLK4A(STEP)                                                                 \
  __asm volatile(                                                                       \
      "1:\n\t"                                                                          \
      "ldrd %[a0], %[a1], [%[s]]\n\tldrd %[a2], %[a3], [%[s], #8]\n\t"                  \
      "ldrd %[p], %[pw], [%[s], #16]\n\tldrd %[pe], %[x0], [%[s], #56]\n\t"             \
      "add %[pe], %[pe], %[p]\n\tcmp %[x0], #0\n\tbne 3f\n"                             \
      "2:\n\t" STEP "3:\n\t" STEP                                                       \
      "cmp %[p], %[pe]\n\tblo 2b\n\t"                                                   \
      "ldrd %[w0], %[w1], [%[s], #24]\n\tldr %[x0], [%[s], #32]\n\t"                    \
      QSA_RQA4("%[a0]") QSA_RQA4("%[a1]") QSA_RQA4("%[a2]") QSA_RQA4("%[a3]")           \
      "ldrd %[p], %[pw], [%[s], #36]\n\t"                                               \
      "add %[x1], %[pw], %[pw], lsl #1\n\tstrb %[a3], [%[p], %[x1]]\n\t"                \
      "strb %[a2], [%[p], %[pw], lsl #1]\n\tstrb %[a1], [%[p], %[pw]]\n\t"              \
      "strb %[a0], [%[p]]\n\t"                                                          \
      "ldrd %[x0], %[x1], [%[s], #44]\n\t"                                              \
      "add %[pe], %[pe], %[x0]\n\tadd %[p], %[p], %[x1]\n\t"                            \
      "str %[pe], [%[s], #16]\n\tstr %[p], [%[s], #36]\n\t"                             \
      "ldr %[x0], [%[s], #52]\n\tcmp %[p], %[x0]\n\tbne 1b\n\t"                         \
      : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [p] "=&r"(p),   \
        [pw] "=&r"(pw), [pe] "=&r"(pe), [w0] "=&r"(w0), [w1] "=&r"(w1), [x0] "=&r"(x0), \
        [x1] "=&r"(x1), [x2] "=&r"(x2), [x3] "=&r"(x3)                                  \
      : [s] "r"(s)                                                                      \
      : "cc", "memory")

#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_blk4a(qsa_blk4c *s, int32_t expanded) {
  uint32_t a0, a1, a2, a3, p, pw, pe, w0, w1;
  /* two rows' pairs per LDM: its registers must ascend in the order of the words */
  register uint32_t x0 __asm__("r8"), x1 __asm__("r9"), x2 __asm__("r10"), x3 __asm__("r11");
  if (expanded)
    QSA_BLK4A(QSA_BLK4A_W16);
  else
    QSA_BLK4A(QSA_BLK4A_W8);
}
#undef QSA_BLK4A
#undef QSA_RQA4
#undef QSA_BLK4A_W8
#undef QSA_BLK4A_W16
#undef QSA_BLK4A_MLAD4

static void qsa_blk4n(int8_t *out, const uint32_t *xe, const int8_t *w,
                      const uint32_t *we, const int32_t *kbias, int32_t depth, int32_t units,
                      int32_t os, const int32_t *mult, const int8_t *shift, int32_t per_channel,
                      int32_t out_off, int32_t nblk, int32_t bso, int32_t xs) {
  qsa_blk4c s;
  const int32_t kbs = per_channel & 2 ? units : 0, expanded = we != 0;
  const int32_t wstep = expanded ? 2 * depth : depth; /* bytes of one unit's weights */
  const int8_t *pw = expanded ? (const int8_t *)we : w;
  int8_t *const oend = out + units;
  s.os = os;
  s.nbytes = 8 * depth;
  s.odd = (depth >> 2) & 1;
  s.dxb = 4 * (xs ? xs : 2 * depth) - 8 * depth;
  s.bso = bso ? bso : 1; /* one block: any step ends it */
  nblk *= s.bso;         /* the span of a unit's outputs */
  s.m2 = (int32_t)((uint32_t)mult[0] << 1);
  s.e = -shift[0];
  s.c = qsa_rqc(s.e, out_off);
  /* per unit only what changes: pointers walk the units' weights, biases and constants */
  for (; out < oend; ++out, ++kbias, pw += wstep) {
    if (per_channel & 1) {
      s.m2 = (int32_t)((uint32_t)*mult++ << 1);
      s.e = -*shift++;
      s.c = qsa_rqc(s.e, out_off);
    }
    s.b[0] = s.b[1] = s.b[2] = s.b[3] = kbias[0];
    if (kbs) {
      s.b[1] = kbias[kbs];
      s.b[2] = kbias[2 * kbs];
      s.b[3] = kbias[3 * kbs];
    }
    s.xb = xe;
    s.pw0 = pw;
    s.o = out;
    s.oend = out + nblk;
    qsa_blk4a(&s, expanded);
  }
}
#else
static void qsa_blk4n(int8_t *out, const uint32_t *xe, const int8_t *w,
                      const uint32_t *we, const int32_t *kbias, int32_t depth, int32_t units,
                      int32_t os, const int32_t *mult, const int8_t *shift, int32_t per_channel,
                      int32_t out_off, int32_t nblk, int32_t bso, int32_t xs) {
  int32_t u, b, k;
  const int32_t kbs = per_channel & 2 ? units : 0, nw = depth >> 2, os3 = 3 * os;
  if (!xs) xs = 2 * depth;
  if (we)
    QSA_BLK4N_BODY(uint32_t, QSA_W16, we + u * (depth >> 1))
  else
    QSA_BLK4N_BODY(int8_t, QSA_W8, w + u * depth)
}
#endif
#undef QSA_BLK4N_BODY
#undef QSA_W8
#undef QSA_W16
#else
static void qsa_blk4(int8_t *out, const uint32_t *xe, const int8_t *w,
                     const uint32_t *we, const int32_t *kbias, int32_t depth, int32_t units,
                     int32_t os, const int32_t *mult, const int8_t *shift, int32_t per_channel,
                     int32_t out_off) {
  int32_t u;
  const uint32_t *xend = xe + 2 * depth;
  for (u = 0; u < units; ++u, ++out) {
    const int32_t ch = per_channel ? u : 0, m = mult[ch], e = -shift[ch];
    const int32_t c = qsa_rqc(e, out_off);
    int32_t a0 = kbias[u], a1 = a0, a2 = a0, a3 = a0;
    const uint32_t *p = xe;
    QSA_BLK4_DOT();
    out[3 * os] = qsa_rqf(a3 * 2, m, e, c);
    out[2 * os] = qsa_rqf(a2 * 2, m, e, c);
    out[os] = qsa_rqf(a1 * 2, m, e, c);
    out[0] = qsa_rqf(a0 * 2, m, e, c);
  }
}
#endif
#undef QSA_BLK4_DOT
#undef QSA_MLAD4

/* the Hamilton expansion (qsa_bmm_ham) fused into its consumer's expanded block: its input
 * offset b_off, 2 q, the requantisation m, e and the output offset off */
typedef struct { int32_t m; int16_t b_off, q2; int8_t e, off; } qsa_ham_p;

#define QSA_RQI(acc2) qsa_sat8i(qsa_smmlar((acc2), m, c + ((acc2) >> 31)) >> e)

/* the block qsa_x4 would expand from the four rows (r, i, j, k of the Hamilton product) of the
 * materialised expansion, with the consumer's depth ordered (column, component): per column n
 * of the components B[0..3][n] (row stride n_cols), the expansion's 16 values of that column
 * (4 requantisations, 3 saturated negations, as qsa_bmm_ham) as the rows' halfword pairs
 * (d0, d2) (d1, d3); B = 0: every value the zero point (a padding row). Same integers. */
#ifdef QSA_ARITH_FAST
/* the fast build: nrows such inputs back to back (B: nrows x 4 n_cols values, the blocks
 * back to back in xe: one call for the rows of a convolution's block, ~18 instructions of
 * call and setup each), the expansion's exact values B + b_off and their negations */
#if defined(__GNUC__)
__attribute__((noinline)) /* one copy for qsa_fcx and qsa_convx (flash) */
#endif
static void qsa_xhamn(uint32_t *restrict xe, const int8_t *B, int32_t n_cols, int32_t nrows,
                      const qsa_ham_p *h) {
  const int32_t bo = h->b_off;
  if (!B) {
    memset(xe, 0, 32 * (size_t)(n_cols * nrows));
    return;
  }
  for (; nrows > 0; --nrows, B += 3 * n_cols) {
    const int8_t *end = B + n_cols;
    for (; B < end; ++B) { /* six distinct pairs, two of them negated as pairs; STRDs */
      const int32_t r = B[0] + bo, i = B[n_cols] + bo, jj = B[2 * n_cols] + bo;
      const int32_t k = B[3 * n_cols] + bo;
      const uint32_t ik = qsa_pk16(i, k), rnj = qsa_pk16(r, -jj), jr = qsa_pk16(jj, r);
      const uint32_t nki = qsa_pk16(-k, i);
      const uint32_t nik = qsa_neg16(ik), kni = qsa_neg16(nki);
      QSA_ST2(rnj, nik, xe); /* row r:  r, -i, -j, -k */
      QSA_ST2(ik, rnj, xe);  /* row i:  i,  r,  k, -j */
      QSA_ST2(jr, nki, xe);  /* row j:  j, -k,  r,  i */
      QSA_ST2(kni, jr, xe);  /* row k:  k,  j, -i,  r */
    }
  }
}
#define qsa_xham(xe, B, n_cols, h) qsa_xhamn((xe), (B), (n_cols), 1, (h))
#else
#if defined(__GNUC__)
__attribute__((noinline)) /* one copy for qsa_fcx and qsa_convx (flash) */
#endif
static void qsa_xham(uint32_t *restrict xe, const int8_t *B, int32_t n_cols,
                     const qsa_ham_p *h) {
  const int32_t q2 = h->q2, boq2 = h->b_off * h->q2, m = h->m, e = h->e;
  const int32_t c = qsa_rqc(e, h->off), zz = 2 * h->off;
  const int8_t *end = B + n_cols;
  int32_t t;
  if (!B) {
    for (t = 0; t < 8 * n_cols; ++t) xe[t] = (uint32_t)(uint16_t)h->off * 0x10001u;
    return;
  }
  for (; B < end; ++B, xe += 8) {
    const int32_t v0 = B[0] * q2 + boq2, v1 = B[n_cols] * q2 + boq2;
    const int32_t v2 = B[2 * n_cols] * q2 + boq2, v3 = B[3 * n_cols] * q2 + boq2;
    const int32_t r = QSA_RQI(v0), i = QSA_RQI(v1), jj = QSA_RQI(v2), k = QSA_RQI(v3);
    const int32_t ni = qsa_sat8i(zz - i), nj = qsa_sat8i(zz - jj), nk = qsa_sat8i(zz - k);
    const uint32_t w0 = qsa_pk16(r, nj), w4 = qsa_pk16(jj, r);
    xe[0] = w0;                    /* row r:  r, -i, -j, -k */
    xe[1] = qsa_pk16(ni, nk);
    xe[2] = qsa_pk16(i, k);        /* row i:  i,  r,  k, -j */
    xe[3] = w0;
    xe[4] = w4;                    /* row j:  j, -k,  r,  i */
    xe[5] = qsa_pk16(nk, i);
    xe[6] = qsa_pk16(k, ni);       /* row k:  k,  j, -i,  r */
    xe[7] = w4;
  }
}
#endif
#undef QSA_RQI

/* rows of x (depth a multiple of 4, <= 256) against constant int8 weights of zero point 0,
 * the fast requantisation (kbias as in qsa_fc): four rows at a time expanded once (qsa_x4 /
 * qsa_blk4); small weights (units depth <= 512) expanded once per call too; leftover rows
 * one by one. Same integers as qsa_fc. */
static void qsa_fcx(int8_t *restrict out, const int8_t *x, const int8_t *w, const int32_t *kbias,
                    int32_t rows, int32_t depth, int32_t units, const int32_t *mult,
                    const int8_t *shift, int32_t per_channel, int32_t out_off,
                    const qsa_ham_p *h) {
  uint32_t xe[512], we[256];
  const uint32_t *pwe = 0;
  int32_t r, n;
#ifdef QSA_ARITH_FAST
  if (depth == 4 && !h && !(per_channel & 2)) {
    /* four values per row (the mask heads: 129 rows x 4 -> 1 or 2): row by row, each unit
     * two SMLADs against its weight word expanded once, then qsa_rqa; a block of four rows
     * would spend ~60 instructions of bookkeeping on 16 MACs. Same integers. */
    int32_t u;
    for (u = 0; u < units; ++u) { /* x: (rows, 4) -> out: (rows, units), column u */
      const int32_t ch = per_channel & 1 ? u : 0, m2 = (int32_t)((uint32_t)mult[ch] << 1);
      const int32_t e = -shift[ch], c = qsa_rqc(e, out_off), kb = kbias[u];
      const int8_t *px = x, *xend = x + 4 * rows;
      int8_t *o = out + u;
      uint32_t wv, w02, w13;
      memcpy(&wv, w + 4 * u, 4);
      w02 = qsa_x16(wv);
      w13 = qsa_x16r8(wv);
      for (; px < xend; px += 4, o += units) {
        uint32_t xv;
        memcpy(&xv, px, 4);
        *o = qsa_rqa(qsa_mlad(w13, qsa_x16r8(xv), qsa_mlad(w02, qsa_x16(xv), kb)), m2, e, c);
      }
    }
    return;
  }
#endif
  if (units * depth <= 512 && rows >= 8) {
    qsa_expand16(we, w, units * depth);
    pwe = we;
  }
#ifdef QSA_ARITH_FAST
  if (rows % 4 == 0) { /* as many blocks per qsa_blk4n call as xe holds */
    for (r = 0; r < rows; r += 4 * n, out += 4 * n * units) {
      int32_t b;
      n = QSA_MIN(256 / depth, (rows - r) >> 2);
      if (h) { /* the n blocks' inputs are back to back: one expansion */
        qsa_xhamn(xe, x, depth >> 2, n, h);
        x += n * depth;
      } else {
        for (b = 0; b < n; ++b, x += 4 * depth) qsa_x4(xe + 2 * depth * b, x, depth, depth);
      }
      qsa_blk4n(out, xe, w, pwe, kbias, depth, units, units, mult, shift, per_channel, out_off,
                n, 4 * units, 0);
    }
    return;
  }
#endif
#ifndef QSA_FCX_ROWS4_ONLY /* the exporter's promise: no call has a leftover row */
  for (r = 0; r < rows; r += n, x += h ? depth : n * depth, out += n * units) {
    n = rows - r >= 4 ? 4 : 1; /* a leftover row: four copies of it, one output row */
    if (h) /* the Hamilton expansion of x's four components (rows a multiple of 4) */
      qsa_xham(xe, x, depth >> 2, h);
    else
      qsa_x4(xe, x, n == 4 ? depth : 0, depth);
    qsa_blk4(out, xe, w, pwe, kbias, depth, units, n == 4 ? units : 0, mult, shift,
             per_channel, out_off);
  }
#endif
}

/* FULLY_CONNECTED of two activations (weights w with an offset, no per-channel scales;
 * depth a multiple of 4, <= 128; units <= 128) through qsa_blk4: the rows of x + x_off
 * expanded once with one more group (sum_k (x + x_off), 0, 0, 0), the weight rows (as int16,
 * w_off not added) with (w_off, 0, 0, 0), so each dot product is sum_k (x + x_off) w +
 * w_off sum_k (x + x_off) = sum_k (x + x_off)(w + w_off); units in chunks of 512 / (depth + 4)
 * expanded weight rows, leftover rows as four copies of themselves. (rows / 4 + rows % 4)
 * (depth + 4) <= 256. Same integers as qsa_fc. */
static void qsa_fcxr(int8_t *restrict out, const int8_t *x, int32_t x_off, const int8_t *w,
                     int32_t w_off, const int32_t *bias, int32_t rows, int32_t depth,
                     int32_t units, int32_t mult, int32_t shift, int32_t out_off) {
  uint32_t xe[512], we[256];
  int32_t kb[128], r, n, k, i, u0;
  const int32_t dp = depth + 4, cu = 512 / dp;
  const int8_t sh = (int8_t)shift;
  const uint32_t xo2 = (uint32_t)(uint16_t)x_off * 0x10001u;
  uint32_t *pe = xe;
  for (k = 0; k < units; ++k) kb[k] = bias ? bias[k] : 0;
  for (r = 0; r < rows; r += n) {
    n = rows - r >= 4 ? 4 : 1;
    for (k = 0; k <= depth; k += 4)
      for (i = 0; i < 4; ++i, pe += 2) {
        const int8_t *px = x + (r + (n == 4 ? i : 0)) * depth;
        if (k < depth) {
          uint32_t v;
          memcpy(&v, px + k, 4);
          pe[0] = qsa_add16(qsa_x16(v), xo2);
          pe[1] = qsa_add16(qsa_x16r8(v), xo2);
        } else {
          int32_t j, sum = depth * x_off;
          for (j = 0; j < depth; ++j) sum += px[j];
          pe[0] = (uint16_t)sum;
          pe[1] = 0;
        }
      }
  }
  for (u0 = 0; u0 < units; u0 += cu) {
    const int32_t nu = QSA_MIN(cu, units - u0);
    for (k = 0; k < nu; ++k) {
      qsa_expand16(we + k * (dp >> 1), w + (u0 + k) * depth, depth);
      we[k * (dp >> 1) + (depth >> 1)] = (uint16_t)w_off;
      we[k * (dp >> 1) + (depth >> 1) + 1] = 0;
    }
    for (r = 0, pe = xe; r < rows; r += n, pe += 2 * dp) {
      n = rows - r >= 4 ? 4 : 1;
      qsa_blk4(out + r * units + u0, pe, 0, we, kb + u0, dp, nu, n == 4 ? units : 0, &mult,
               &sh, 0, out_off);
    }
  }
}

/* CONV_2D one column wide (the conditions of qsa_convc) with in_w a multiple of 4 and
 * in_c <= 64, through qsa_blk4: four neighbouring output pixels of a row form a block, their
 * columns expanded straight from the input (k_h taps of 4 in_c contiguous bytes; a tap in the
 * padding reads a row of the input zero point), the filter (out_c k_h in_c <= 512) expanded
 * once per call. Same integers as qsa_conv. */
static void qsa_convx(int8_t *restrict out, const int8_t *x, const int8_t *f, const int32_t *kbias,
                      const int32_t *mult, const int8_t *shift, const qsa_conv_p *p,
                      const qsa_ham_p *h
#ifdef QSA_ARITH_FAST
                      , int32_t pc /* qsa_blk4's per_channel: 3 with a bias per row */
#endif
                      ) {
  int32_t n, oy, ox, ky, k;
  uint32_t xe[512], we[256], zrow[64];
  const uint32_t *pwe = 0;
  const int32_t C = p->in_c, KH = p->k_h, TC = KH * C, OC = p->out_c, off = p->out_off;
  const int32_t IH = p->in_h, W = p->in_w, OH = p->out_h;
  const int32_t SH = p->stride_h, PH = p->pad_h, row = h ? C : W * C;
  const uint32_t zp4 = 0x01010101u * (uint8_t)(int8_t)(-p->in_off);
  for (k = 0; k < C; ++k) zrow[k] = zp4;
  if (OC * TC <= 512) {
    qsa_expand16(we, f, OC * TC);
    pwe = we;
  }
#ifdef QSA_ARITH_FAST
#ifndef QSA_CONVX_W4_ONLY /* the exporter's promise: every call takes this path */
  if (W == 4)
#endif
  { /* one block per output row, the input rows expanded once each (2 C words,
                 * a row in the padding: the zero point) and back to back, so the block of
                 * output row oy is the k_h rows from its first tap on: stride SH 2 C words;
                 * as many output rows per qsa_blk4n call as xe holds */
    const int32_t rw = 2 * C, nbmax = (512 / rw - KH) / SH + 1;
    for (n = 0; n < p->batches; ++n, x += IH * row)
      for (oy = 0; oy < OH; oy += ox, out += 4 * OC * ox) {
        const int32_t nr = ((ox = QSA_MIN(nbmax, OH - oy)) - 1) * SH + KH; /* ox blocks */
        const int32_t iy0 = oy * SH - PH;
        if (h) { /* rows [k0, k1) inside the input (back to back there: one expansion),
                  * the others in the padding */
          const int32_t k0 = QSA_MIN(nr, QSA_MAX(0, -iy0));
          const int32_t k1 = QSA_MAX(k0, QSA_MIN(nr, IH - iy0));
          if (k0 > 0) qsa_xhamn(xe, 0, C >> 2, k0, h);
          if (k1 > k0) qsa_xhamn(xe + k0 * rw, x + (iy0 + k0) * row, C >> 2, k1 - k0, h);
          if (nr > k1) qsa_xhamn(xe + k1 * rw, 0, C >> 2, nr - k1, h);
        } else {
          for (ky = 0; ky < nr; ++ky) {
            const int32_t iy = iy0 + ky;
            qsa_x4(xe + ky * rw, iy >= 0 && iy < IH ? x + iy * row : (const int8_t *)zrow, C, C);
          }
        }
        qsa_blk4n(out, xe, f, pwe, kbias, TC, OC, OC, mult, shift, pc, off, ox, 4 * OC,
                  SH * rw);
      }
    return;
  }
#endif
  for (n = 0; n < p->batches; ++n, x += IH * row)
    for (oy = 0; oy < OH; ++oy)
      for (ox = 0; ox < W; ox += 4, out += 4 * OC) {
        for (ky = 0; ky < KH; ++ky) {
          const int32_t iy = oy * SH - PH + ky;
          if (h && oy > 0 && ky + SH < KH) /* this row's block: the tap ky + SH of the last */
            memcpy(xe + 2 * ky * C, xe + 2 * (ky + SH) * C, 8 * (size_t)C);
          else if (h)
            qsa_xham(xe + 2 * ky * C, iy >= 0 && iy < IH ? x + iy * row : 0, C >> 2, h);
          else
            qsa_x4(xe + 2 * ky * C, iy >= 0 && iy < IH ? x + iy * row + ox * C
                                                     : (const int8_t *)zrow, C, C);
        }
#ifdef QSA_ARITH_FAST
        qsa_blk4(out, xe, f, pwe, kbias, TC, OC, OC, mult, shift, pc, off);
#else
        qsa_blk4(out, xe, f, pwe, kbias, TC, OC, OC, mult, shift, 1, off);
#endif
      }
}

#ifdef QSA_ARITH_FAST
/* the layer norm of the graph (MEAN, SUB, MUL, MEAN, RSQRT, MUL) as one pass per group of
 * comps x inner values (arith fast; <= 256): d = inner x - sum over the component's inner
 * values (the centred value, exact, inner times), q = sum d^2 over the group, the variance
 * requantised to the graph's int8 MEAN and through its RSQRT table (r), then d r requantised
 * once. TFLite-Micro rounds d and d^2 to int8 as well: a bounded difference. */
typedef struct { int16_t groups, comps, inner, kq; int32_t mv, sv, v_off, r_off, my, ey, cy; }
    qsa_lnorm_p;

static void qsa_lnorm(int8_t *restrict out, const int8_t *x, const int8_t lut[256],
                      const qsa_lnorm_p *p) {
  /* per component sums S = sum x and Q = sum x^2 in one pass, q = sum_c (N^2 Q - N S^2)
   * (= sum (N x - S)^2, the same uint32), then per value (N x - S) r as x (N r) - S r: one
   * multiply-accumulate, no buffer of d (the same integers as d r) */
  int32_t sr[256]; /* each component's S */
  const int32_t C = p->comps, N = p->inner, n = C * N;
  const int32_t my = p->my, ey = p->ey, cy = p->cy; /* held in registers (round 4) */
  int32_t g, c, i;
  for (g = 0; g < p->groups; ++g, x += n) {
    const int8_t *px = x;
    uint32_t q = 0;
    int32_t r;
#ifdef QSA_LNORM_N3
    if (N == 3) /* groups of comps x 3 (12-08 round 5): the inner loops unrolled */
      for (c = 0; c < C; ++c, px += 3) {
        const int32_t a = px[0], b = px[1], d = px[2], sum = a + b + d;
        sr[c] = sum;
        q += 9u * (uint32_t)(a * a + b * b + d * d) - 3u * (uint32_t)(sum * sum);
      }
    else
#endif
    for (c = 0; c < C; ++c) {
      int32_t sum = 0, sq = 0;
      for (i = 0; i < N; ++i, ++px) {
        sum += *px;
        sq += *px * *px;
      }
      sr[c] = sum;
      q += (uint32_t)(N * N) * (uint32_t)sq - (uint32_t)N * (uint32_t)(sum * sum);
    }
    r = 2 * (lut[(uint8_t)qsa_sat8(qsa_mbqm((int32_t)(q >> p->kq), p->mv, p->sv) + p->v_off)]
             + p->r_off);
#ifdef QSA_LNORM_N3
    if (N == 3) {
      const int32_t nr = 3 * r;
      for (c = 0, px = x; c < C; ++c, px += 3, out += 3) {
        const int32_t snr = -sr[c] * r;
        out[0] = qsa_rqf(px[0] * nr + snr, my, ey, cy);
        out[1] = qsa_rqf(px[1] * nr + snr, my, ey, cy);
        out[2] = qsa_rqf(px[2] * nr + snr, my, ey, cy);
      }
      continue;
    }
#endif
    for (c = 0, px = x; c < C; ++c) {
      const int32_t nr = N * r, snr = -sr[c] * r;
      const int8_t *end = px + N;
      for (; px < end; ++px) *out++ = qsa_rqf(*px * nr + snr, my, ey, cy);
    }
  }
}
#endif

#ifdef QSA_ARITH_FAST
/* ADD of two activations of the output's shape, then PRELU (alpha broadcast as bc's b
 * operand), with one requantisation (arith fast): v = x ka + y kb + k0, both scales on a
 * common 2^-11 grid, PRELU on the sign of v, then v (or v (alpha + ao)) requantised. */
typedef struct { int32_t ka, kb, k0, ao, mp, ep, cp, mn, en, cn; } qsa_addprelu_p;

/* one column of qsa_addprelu (alpha the one value al + ao along it): n values at stride st */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_addprelu_col(int8_t *restrict out, const int8_t *x, const int8_t *y, int32_t n,
                             int32_t st, int32_t al, const qsa_addprelu_p *p) {
  const int32_t ka = p->ka, kb = p->kb, k0 = p->k0, mp = (int32_t)((uint32_t)p->mp << 1);
  const int32_t ep = p->ep, cp = p->cp, mn = (int32_t)((uint32_t)p->mn << 1), en = p->en;
  const int32_t cn = p->cn;
  const int32_t end = n * st;
  int32_t i;
  for (i = 0; i < end; i += st) { /* one index for the three streams */
    const int32_t v = x[i] * ka + y[i] * kb + k0;
    out[i] = (int8_t)(v >= 0 ? qsa_rqai(v, mp, ep, cp) : qsa_rqai(v * al, mn, en, cn));
  }
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* a column of qsa_addprelu_col on the DSP extension in assembly (GCC spilled its constants:
 * 19 / 22 instructions a value for v >= 0 / < 0), 14 / 20: x and y as a halfword pair (PKHBT)
 * against (ka, kb) (|ka|, |kb| <= 2048: the larger scale is 2048 on the common grid), one
 * SMLAD with k0, the branch's qsa_rqa (the negative branch's constants loaded there); y and
 * out addressed from x's pointer. 12-07 round 4. The same integers. */
typedef struct {
  uint32_t kk;                /* 0: (ka, kb) as halfwords */
  int32_t k0, mp2, ep, cp;    /* 4: v >= 0: qsa_rqa(v, mp2, ep, cp) */
  int32_t mn2, en, cn, al;    /* 20: v < 0: qsa_rqa(v al, mn2, en, cn) */
  int32_t dy, dout, st, n;    /* 36: y - x, out - x (bytes), the stride, n > 0 values */
  const int8_t *x;            /* 52 */
} qsa_apc;
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_addprelu_cola(const qsa_apc *s) {
  uint32_t pp, dy, dout, st, n, kk, k0, mp, ep, cp, v, t, r;
  __asm volatile(
      "ldrd %[kk], %[k0], [%[s]]\n\tldrd %[mp], %[ep], [%[s], #8]\n\t"
      "ldr %[cp], [%[s], #16]\n\tldrd %[dy], %[dout], [%[s], #36]\n\t"
      "ldrd %[st], %[n], [%[s], #44]\n\tldr %[pp], [%[s], #52]\n"
      "1:\n\t"
      "ldrsb %[v], [%[pp]]\n\tldrsb %[t], [%[pp], %[dy]]\n\t"
      "pkhbt %[v], %[v], %[t], lsl #16\n\tsmlad %[v], %[v], %[kk], %[k0]\n\t"
      "cmp %[v], #0\n\tblt 3f\n\t"
      "add %[t], %[cp], %[v]\n\tsmmlar %[r], %[v], %[mp], %[t]\n\t"
      "asr %[r], %[r], %[ep]\n\tssat %[r], #8, %[r]\n\tstrb %[r], [%[pp], %[dout]]\n\t"
      "add %[pp], %[pp], %[st]\n\tsubs %[n], %[n], #1\n\tbne 1b\n\tb 4f\n"
      "3:\n\t"
      "ldr %[r], [%[s], #32]\n\tmul %[v], %[v], %[r]\n\tldr %[t], [%[s], #28]\n\t"
      "add %[t], %[t], %[v]\n\tadd %[t], %[t], %[v], asr #31\n\tldr %[r], [%[s], #20]\n\t"
      "smmlar %[r], %[v], %[r], %[t]\n\tldr %[t], [%[s], #24]\n\tasr %[r], %[r], %[t]\n\t"
      "ssat %[r], #8, %[r]\n\tstrb %[r], [%[pp], %[dout]]\n\t"
      "add %[pp], %[pp], %[st]\n\tsubs %[n], %[n], #1\n\tbne 1b\n"
      "4:\n\t"
      : [pp] "=&r"(pp), [dy] "=&r"(dy), [dout] "=&r"(dout), [st] "=&r"(st), [n] "=&r"(n),
        [kk] "=&r"(kk), [k0] "=&r"(k0), [mp] "=&r"(mp), [ep] "=&r"(ep), [cp] "=&r"(cp),
        [v] "=&r"(v), [t] "=&r"(t), [r] "=&r"(r)
      : [s] "r"(s)
      : "cc", "memory");
}
#endif

static void qsa_addprelu(int8_t *restrict out, const int8_t *x, const int8_t *y,
                         const int8_t *alpha, const qsa_bcast *bc, const qsa_addprelu_p *p) {
  int32_t a, b, c, d;
  const int32_t n2 = bc->n[2], n3 = bc->n[3], sb3 = bc->sb[3], ao = p->ao;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
  qsa_apc s;
  s.kk = qsa_pk16(p->ka, p->kb);
  s.k0 = p->k0;
  s.mp2 = (int32_t)((uint32_t)p->mp << 1);
  s.ep = p->ep;
  s.cp = p->cp;
  s.mn2 = (int32_t)((uint32_t)p->mn << 1);
  s.en = p->en;
  s.cn = p->cn;
  s.st = n3;
  s.n = n2;
#endif
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b) {
      const int8_t *pa = alpha + a * bc->sb[0] + b * bc->sb[1];
      if (bc->sb[2] == 0) /* alpha constant down dim 2 (per channel): column by column */
        for (d = 0; d < n3; ++d) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
          if (n2 > 0) {
            s.al = pa[d * sb3] + ao;
            s.x = x + d;
            s.dy = (int32_t)((uintptr_t)(y + d) - (uintptr_t)(x + d));
            s.dout = (int32_t)((uintptr_t)(out + d) - (uintptr_t)(x + d));
            qsa_addprelu_cola(&s);
          }
#else
          qsa_addprelu_col(out + d, x + d, y + d, n2, n3, pa[d * sb3] + ao, p);
#endif
        }
      else
        for (c = 0; c < n2; ++c)
          for (d = 0; d < n3; ++d)
            qsa_addprelu_col(out + c * n3 + d, x + c * n3 + d, y + c * n3 + d, 1, 1,
                             pa[c * bc->sb[2] + d * sb3] + ao, p);
      x += n2 * n3;
      y += n2 * n3;
      out += n2 * n3;
    }
}
#endif

#ifdef QSA_ARITH_FAST
/* ADD with one requantisation (arith fast): both operands on a common 2^-11 grid, v = x ka +
 * y kb + k0 (broadcast as qsa_addh), then v requantised once. */
typedef struct { int32_t ka, kb, k0, m, e, c; } qsa_addg_p;

/* one run of qsa_addg: n values, x and y at strides sa and sb; contiguous runs four values a
 * turn, (x, y) as halfword pairs against (ka, kb) (SMLAD: x ka + y kb + k0 exactly) and the
 * requantisation from the sum itself (qsa_rqa). The same integers. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qsa_addg_run(int8_t *restrict out, const int8_t *px, const int8_t *py, int32_t n,
                         int32_t sa, int32_t sb, const qsa_addg_p *p) {
  const int32_t k0 = p->k0, m2 = (int32_t)((uint32_t)p->m << 1), e = p->e, cc = p->c;
  if (sa == 1 && sb == 1) {
    const uint32_t kk = qsa_pk16(p->ka, p->kb);
    for (; n >= 4; n -= 4, out += 4) {
      uint32_t xv, yv, x02, y02, x13, y13;
      memcpy(&xv, px, 4);
      memcpy(&yv, py, 4);
      px += 4;
      py += 4;
      x02 = qsa_x16(xv);
      y02 = qsa_x16(yv);
      x13 = qsa_x16r8(xv);
      y13 = qsa_x16r8(yv);
      out[0] = qsa_rqa(qsa_mlad(qsa_pk16(x02, y02), kk, k0), m2, e, cc);
      out[1] = qsa_rqa(qsa_mlad(qsa_pk16(x13, y13), kk, k0), m2, e, cc);
      out[2] = qsa_rqa(qsa_mlad(qsa_pkt16(x02, y02), kk, k0), m2, e, cc);
      out[3] = qsa_rqa(qsa_mlad(qsa_pkt16(x13, y13), kk, k0), m2, e, cc);
    }
  }
  {
    const int32_t ka = p->ka, kb = p->kb;
    for (; n > 0; --n, px += sa, py += sb) *out++ = qsa_rqa(*px * ka + *py * kb + k0, m2, e, cc);
  }
}

static void qsa_addg(int8_t *restrict out, const int8_t *x, const int8_t *y, const qsa_bcast *bc,
                     const qsa_addg_p *p) {
  int32_t a, b, c;
  const int32_t n3 = bc->n[3];
  for (a = 0; a < bc->n[0]; ++a)
    for (b = 0; b < bc->n[1]; ++b)
      for (c = 0; c < bc->n[2]; ++c, out += n3)
        qsa_addg_run(out, x + a * bc->sa[0] + b * bc->sa[1] + c * bc->sa[2],
                     y + a * bc->sb[0] + b * bc->sb[1] + c * bc->sb[2], n3, bc->sa[3],
                     bc->sb[3], p);
}
#endif

/* ---- reductions (MEAN / SUM): n[4] input dims, os[4] output strides (0: reduced) ------- */
static void qsa_reduce(int8_t *restrict out, const int8_t *x, const int16_t n[4],
                       const int16_t os[4],
                       int32_t n_out, int32_t count, int32_t in_zp, int32_t m, int32_t s,
                       int32_t out_zp, int32_t *acc) {
  int32_t a, b, c, d, i;
#ifdef QSA_ARITH_FAST
  if (os[2] == 0 && os[3] == 1 && os[1] == (n[1] > 1 ? n[3] : os[1])
      && os[0] == (n[0] > 1 ? n[1] * n[3] : os[0])) {
    /* the sum over dim 2 with the outputs in order (the quaternion components' partial sums):
     * each output's n[2] values summed straight from x (stride n[3]) and requantised, no
     * accumulator pass. The same integers. */
    const int32_t n2 = n[2], n3 = n[3], fast = s <= -1 && s >= -22;
    const int32_t c0 = fast ? qsa_rqc(-s, out_zp) : 0, zc = in_zp * count;
    (void)n_out;
#ifdef QSA_REDUCE_C4
    if (n2 == 4 && s <= 19 && s >= -22) {
      /* the quaternion components' sums (12-08 round 5): unrolled, and for a shift s >= 0
       * (|sum| <= 2^10) srdhm(sum 2^s, m) + off as SMMLAR(sum 2^(s + 1), m, off) (gemmlowp's
       * nudge rounds the halves up, as SMMLAR does), else qsa_rqf */
      const int32_t ls = s >= 0 ? s + 1 : 1, k = s >= 0 ? 0 : -1, e2 = s >= 0 ? 0 : -s;
      const int32_t cz = s >= 0 ? out_zp : c0;
      for (a = 0; a < n[0] * n[1]; ++a, x += 3 * n3)
        for (d = 0; d < n3; ++d, ++x) {
          const int32_t v = (x[0] + x[n3] + x[2 * n3] + x[3 * n3] - zc) * ((int32_t)1 << ls);
          *out++ = qsa_ssat8(qsa_smmlar(v, m, cz + ((v >> 31) & k)) >> e2);
        }
      return;
    }
#endif
    for (a = 0; a < n[0] * n[1]; ++a, x += n2 * n3)
      for (d = 0; d < n3; ++d) {
        const int8_t *px = x + d;
        int32_t sum = -zc;
        for (c = 0; c < n2; ++c, px += n3) sum += *px;
        *out++ = fast ? qsa_rqf(sum * 2, m, -s, c0) : qsa_sat8(qsa_mbqm(sum, m, s) + out_zp);
      }
    return;
  }
#endif
  for (i = 0; i < n_out; ++i) acc[i] = 0;
  for (a = 0; a < n[0]; ++a)
    for (b = 0; b < n[1]; ++b)
      for (c = 0; c < n[2]; ++c) {
        int32_t *pa = acc + a * os[0] + b * os[1] + c * os[2];
        for (d = 0; d < n[3]; ++d) pa[d * os[3]] += *x++;
      }
  if (s <= -1 && s >= -22) { /* |acc| < 2^30: the fast requantisation, the same integers */
    const int32_t c = qsa_rqc(-s, out_zp), zc = in_zp * count;
    for (i = 0; i < n_out; ++i) out[i] = qsa_rqf((acc[i] - zc) * 2, m, -s, c);
    return;
  }
  for (i = 0; i < n_out; ++i)
    out[i] = qsa_sat8(qsa_mbqm(acc[i] - in_zp * count, m, s) + out_zp);
}

#endif /* QSA_NN_H */
"""
