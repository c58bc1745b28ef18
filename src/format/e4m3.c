/* e4m3.c — float8_e4m3fn element encoding (OCP 8-bit floating point, "FN": finite + NaN only).
 *
 *   bit  7 | 6 5 4 3 | 2 1 0
 *        s |    e    |   m        bias 7, no inf, NaN = s.1111.111 (0x7F, 0xFF), max ±448 (0x7E)
 *
 *   e = 0:      (-1)^s · m · 2^-9            (subnormal; 0x00 = +0, 0x80 = -0)
 *   e = 1..15:  (-1)^s · (1 + m/8) · 2^(e-7)
 *
 * Encoders (NUMERICS.md §1.1), both round to nearest even on the exact binary32 input:
 *   rne      torch/ml_dtypes cast: |x| >= 480 (past the 464 tie) and ±inf -> NaN 0x7F|s.
 *   rne_sat  clamp to ±448 first (cvt.rn.satfinite, every quantizer): ±inf -> ±448.
 * NaN -> 0x7F with the input sign (torch CPU; the H200's cvt drops the sign, see golden/rcp).
 * Tested bit-exact by tests/unit/test_format_golden.c (1,066,068 inputs; rne vs torch CPU, torch
 * CUDA and ml_dtypes, rne_sat vs torch clamp+cast: zero mismatches) and
 * tests/unit/test_format_scalar.c (all codes, every midpoint). Vector twins: format_avx2.c/avx512.c.
 */
#include <math.h>

#include "format/format.h"

float moq_e4m3_decode(uint8_t c) {
    const uint32_t e = (c >> 3) & 0xF, m = c & 7;
    const float sign = (c & 0x80) ? -1.0f : 1.0f;
    if (e == 0xF && m == 7) return moq_f32_from_bits((c & 0x80u) << 24 | 0x7FC00000u);
    if (e == 0) return sign * (float)m * 0x1p-9f;
    return moq_f32_from_bits((c & 0x80u) << 24 | (e + 120) << 23 | m << 20); /* 2^(e-7)·(1+m/8): same value as sign·ldexpf, no libm call */
}

/* |x| given as bits a (sign cleared), finite and < 480: RNE code without sign. */
static inline uint8_t e4m3_mag(uint32_t a) {
    if (a < 0x3C800000u) /* < 2^-6: subnormal grid 2^-9; rint is RNE; 8 lands on the min normal */
        return (uint8_t)rintf(moq_f32_from_bits(a) * 512.0f);
    /* Rebias exponent 127 -> 7 and round the 20 dropped mantissa bits to nearest even. */
    const uint32_t odd = (a >> 20) & 1;
    a += ((uint32_t)(7 - 127) << 23) + 0x7FFFFu + odd;
    return (uint8_t)(a >> 20);
}

uint8_t moq_e4m3_encode_rne(float x) {
    const uint32_t u = moq_f32_bits(x), s = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a >= 0x43F00000u) return (uint8_t)(s | 0x7F); /* >= 480, inf, NaN */
    return (uint8_t)(s | e4m3_mag(a));
}

uint8_t moq_e4m3_encode_rne_sat(float x) {
    const uint32_t u = moq_f32_bits(x), s = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(s | 0x7F);  /* NaN */
    if (a >= 0x43E00000u) return (uint8_t)(s | 0x7E); /* >= 448, inf */
    return (uint8_t)(s | e4m3_mag(a));
}

void moq_e4m3_encode_rne_ref(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_e4m3_encode_rne(in[i]);
}

void moq_e4m3_encode_rne_sat_ref(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_e4m3_encode_rne_sat(in[i]);
}

void moq_e4m3_decode_ref(const void *in, float *out, size_t n) {
    const uint8_t *c = in;
    for (size_t i = 0; i < n; i++) out[i] = moq_e4m3_decode(c[i]);
}
