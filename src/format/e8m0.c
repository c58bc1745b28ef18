/* e8m0.c — float8_e8m0fnu element encoding (OCP MX v1.0 scale type).
 *
 *   bit  7 6 5 4 3 2 1 0
 *        e e e e e e e e          value 2^(e-127); 0xFF = NaN; no sign, no zero, no inf
 *
 * 0x00 is 2^-127, a binary32 subnormal (FTZ environments read it as 0: NUMERICS.md §1.2).
 *
 * Encoders:
 *   rne     the torch cast (c10 Float8_e8m0fnu): sign ignored, nearest power of two with ties
 *           (mantissa exactly 1.5) going up, 0 -> 0x00, subnormals: > 2^-127 -> 0x01 else 0x00,
 *           2^127·1.5 and above, ±inf, NaN -> 0xFF. ml_dtypes agrees on every positive input and
 *           NaN; it maps zero and negatives to NaN (0xFF). Checked against both golden files.
 *   up_sat  CUDA cvt.rp.satfinite.ue8m0x2 / flashinfer float_to_ue8m0: ceil of |x| to a power of
 *           two: exponent + (mantissa != 0), capped at 0xFE; (2^-127, 2^-126) -> 0x01; below or
 *           at 2^-127 and 0 -> 0x00; ±inf -> 0xFE; NaN -> 0xFF. The MX scale rule.
 * Tested by tests/unit/test_format_golden.c (rne vs torch and ml_dtypes) and
 * tests/unit/test_format_scalar.c (up_sat vs an exact rule written in the test).
 */
#include "format/format.h"

float moq_e8m0_decode(uint8_t c) {
    if (c == 0xFF) return moq_f32_from_bits(0x7FC00000u);
    if (c == 0) return moq_f32_from_bits(0x00400000u); /* 2^-127, subnormal */
    return moq_f32_from_bits((uint32_t)c << 23);
}

uint8_t moq_e8m0_encode_rne(float x) {
    const uint32_t a = moq_f32_bits(x) & 0x7FFFFFFFu, e = a >> 23, m = a & 0x7FFFFFu;
    if (e == 0xFF) return 0xFF;
    if (e == 0) return m > 0x400000u ? 1 : 0;
    const uint32_t r = e + (m >= 0x400000u);
    return r > 254 ? 0xFF : (uint8_t)r;
}

uint8_t moq_e8m0_encode_up_sat(float x) {
    const uint32_t a = moq_f32_bits(x) & 0x7FFFFFFFu, e = a >> 23, m = a & 0x7FFFFFu;
    if (a > 0x7F800000u) return 0xFF;
    if (e == 0xFF) return 0xFE;
    if (e == 0) return m > 0x400000u ? 1 : 0;
    const uint32_t r = e + (m != 0);
    return r > 254 ? 0xFE : (uint8_t)r;
}

void moq_e8m0_encode_rne_ref(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_e8m0_encode_rne(in[i]);
}

void moq_e8m0_encode_up_sat_ref(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_e8m0_encode_up_sat(in[i]);
}

void moq_e8m0_decode_ref(const void *in, float *out, size_t n) {
    const uint8_t *c = in;
    for (size_t i = 0; i < n; i++) out[i] = moq_e8m0_decode(c[i]);
}
