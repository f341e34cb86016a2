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
"""

QSA_NN_H = r"""/* qsa_nn.h: int8 kernels of a `qsa export --target c` network (generated; see
 * qsa.export.c_kernels). TFLite-Micro reference arithmetic, bit-exact. C99, no heap. */
#ifndef QSA_NN_H
#define QSA_NN_H
#include <stdint.h>
#include <string.h>

#define QSA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QSA_MAX(a, b) ((a) > (b) ? (a) : (b))

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
static void qsa_gather4(int8_t *restrict out, const int8_t *in, const int16_t n[4],
                        const int16_t s[4]) {
  int32_t a, b, c, d;
  for (a = 0; a < n[0]; ++a)
    for (b = 0; b < n[1]; ++b)
      for (c = 0; c < n[2]; ++c) {
        const int8_t *p = in + a * s[0] + b * s[1] + c * s[2];
        if (s[3] == 1) { memcpy(out, p, (size_t)n[3]); out += n[3]; }
        else for (d = 0; d < n[3]; ++d) *out++ = p[d * s[3]];
      }
}

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
  for (i = 0; i < n; ++i) out[i] = lut[(uint8_t)x[i]];
}

/* reference_integer_ops::Logistic for one value (fills the LOGISTIC tables at init) */
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

static void qsa_logistic_table(int8_t lut[256], int32_t in_zp, int32_t radius, int32_t mult,
                               int32_t ls) {
  int v;
  for (v = -128; v < 128; ++v) lut[(uint8_t)v] = qsa_logistic1((int8_t)v, in_zp, radius, mult, ls);
}

/* TFLM elementwise RSQRT, int8 (GetInvSqrtQuantizedMultiplierExp, reverse shift -1) */
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

/* ---- reductions (MEAN / SUM): n[4] input dims, os[4] output strides (0: reduced) ------- */
static void qsa_reduce(int8_t *restrict out, const int8_t *x, const int16_t n[4],
                       const int16_t os[4],
                       int32_t n_out, int32_t count, int32_t in_zp, int32_t m, int32_t s,
                       int32_t out_zp, int32_t *acc) {
  int32_t a, b, c, d, i;
  for (i = 0; i < n_out; ++i) acc[i] = 0;
  for (a = 0; a < n[0]; ++a)
    for (b = 0; b < n[1]; ++b)
      for (c = 0; c < n[2]; ++c) {
        int32_t *pa = acc + a * os[0] + b * os[1] + c * os[2];
        for (d = 0; d < n[3]; ++d) pa[d * os[3]] += *x++;
      }
  for (i = 0; i < n_out; ++i)
    out[i] = qsa_sat8(qsa_mbqm(acc[i] - in_zp * count, m, s) + out_zp);
}

/* ---- SOFTMAX int8 -> int8 (scale 1/256, zero point -128) over the last dim ---------------
 * exp of (x - max) depends on the difference only (0..255): tables filled at init by the
 * reference arithmetic (qsa_softmax_table), 0 where the difference is below diff_min */
static void qsa_softmax_table(int32_t e[256], int32_t in_mult, int32_t in_ls, int32_t diff_min) {
  int32_t d;
  for (d = 0; d < 256; ++d)
    e[d] = -d >= diff_min ? qsa_exp_neg(qsa_srdhm(qsa_shl(-d, in_ls), in_mult), 5) : 0;
}

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

#endif /* QSA_NN_H */
"""
