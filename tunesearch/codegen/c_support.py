"""The C every CPU kernel includes beside its loop nest: the headers, sqrt, exp2 and log2 that
vectorize, and scratch kept between calls."""
from __future__ import annotations

HEADER = "#include <math.h>\n#include <stdlib.h>\n#include <stdbool.h>\n#include <string.h>\n"

# sqrt with its NaN for a negative input made explicit: sqrtf may set errno there, so GCC keeps
# a call per element behind each one and vectorizes no loop that holds one (a layer norm's
# normalization ran one element at a time so); given no negative input it emits the vector
# instruction.
# exp2 and log2 as inline arithmetic the compiler vectorizes (libm's are calls, one element at a
# time: a softmax or a GELU then runs at a tenth of the speed of the loads around it). exp2 is
# within 1 ulp of the exact value over every float, log2 within 3, and both keep libm's special
# values (NaN, infinities, zero, subnormals). exp2: 2^x = 2^n * 2^f with n = rint(x),
# |f| <= 1/2, 2^f by its Taylor series to the 7th power (error < 6e-9), 2^n applied in two
# halves so that 2^-149..2^127 need no special case; ts_exp2_series is the series from its f^5
# term down, given the higher terms as one coefficient (shared with the sigmoid below).
# log2: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log2(m) = 2/ln2 * atanh(t)
# with t = (m-1)/(m+1), |t| < 0.172, by its series to t^11 (error < 1e-9). Always inlined: in a
# large block (a matrix product's epilogue) GCC may keep them as calls, one element at a time.
# 1 / (1 + 2^x), a sigmoid's whole work (Tensor.sigmoid and tanh are written so), by one
# function: its 2^x needs no subnormal result (1 + 2^x rounds to 1 long before) and no test for
# NaN (the clamps keep it), so it scales once and drops the series' last term (1.2e-7 relative
# at most, under the rounding of -x * log2(e) that comes before it); with 2^x clamped to
# [2^-127, 2^128], inf and -inf give 0 and 1. A SiLU costs 0.7x the general exp2's way.
VECTOR_MATH = """#ifndef TUNESEARCH_VECTOR_MATH
#define TUNESEARCH_VECTOR_MATH
static inline __attribute__((always_inline)) float ts_bits_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline __attribute__((always_inline)) int ts_float_bits(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline __attribute__((always_inline)) float ts_sqrtf(float x) { return __builtin_sqrtf(x < 0.0f ? NAN : x); }
static inline __attribute__((always_inline)) float ts_exp2_series(float f, float p) {
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  return p * f + 1.0f;
}
static inline __attribute__((always_inline)) float ts_exp2f(float x) {
  float c = x < -151.0f ? -151.0f : (x > 129.0f ? 129.0f : x);
  float n = rintf(c), f = c - n;
  float p = ts_exp2_series(f, 1.5252733804059840e-05f * f + 1.5403530393381606e-04f);
  int k = (int)n, half = k >> 1;
  float r = p * ts_bits_float((half + 127) << 23) * ts_bits_float((k - half + 127) << 23);
  return x != x ? x : r;
}
static inline __attribute__((always_inline)) float ts_recip_1_exp2f(float x) {
  float c = x < -127.0f ? -127.0f : x;
  c = c > 128.0f ? 128.0f : c;
  float n = rintf(c), f = c - n;
  float p = ts_exp2_series(f, 1.5403530393381606e-04f);
  return 1.0f / (1.0f + p * ts_bits_float(((int)n + 127) << 23));
}
static inline __attribute__((always_inline)) float ts_log2f(float x) {
  int small = x < 1.17549435e-38f;
  float y = small ? x * 8388608.0f : x;
  int bits = ts_float_bits(y);
  int e = ((bits >> 23) & 255) - 127 - (small ? 23 : 0);
  float m = ts_bits_float((bits & 0x7fffff) | 0x3f800000);
  int up = m > 1.41421356f;
  m = up ? m * 0.5f : m;
  e += up;
  float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  float p = 0.09090909090909091f;
  p = p * t2 + 0.1111111111111111f;
  p = p * t2 + 0.14285714285714285f;
  p = p * t2 + 0.2f;
  p = p * t2 + 0.3333333333333333f;
  p = p * t2 + 1.0f;
  float r = (float)e + 2.8853900817779268f * t * p;
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  r = x == INFINITY ? INFINITY : r;
  return x != x ? x : r;
}
#endif
"""

# Scratch (packed panels, partial results) is kept per calling thread between calls up to this
# size: a fresh allocation costs a page fault per 4 KiB on every call, as much as packing itself.
SCRATCH_KEEP = 64 << 20
SCRATCH = f"""#ifndef TUNESEARCH_SCRATCH
#define TUNESEARCH_SCRATCH
static _Thread_local void* scratch_kept[8];
static _Thread_local size_t scratch_size[8];
static void* scratch(int slot, size_t bytes) {{
  bytes = (bytes + 63) / 64 * 64;
  if (bytes > {SCRATCH_KEEP} || slot >= 8) return aligned_alloc(64, bytes);
  if (scratch_size[slot] < bytes) {{
    free(scratch_kept[slot]);
    scratch_kept[slot] = aligned_alloc(64, bytes);
    scratch_size[slot] = scratch_kept[slot] ? bytes : 0;
  }}
  return scratch_kept[slot];
}}
static void scratch_done(int slot, void* p, size_t bytes) {{
  if ((bytes + 63) / 64 * 64 > {SCRATCH_KEEP} || slot >= 8) free(p);
}}
#endif
"""
