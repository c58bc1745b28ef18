/* e2m1.c — FP4 E2M1 element encoding (OCP Microscaling Formats (MX) v1.0).
 *
 *   bit  3 | 2 1 | 0
 *        s |  e  | m        bias 1, no inf, no nan, max ±6.0
 *
 *   code: 0    1    2    3    4    5    6    7     (8..15 = same, negative)
 *   value 0   0.5  1.0  1.5  2.0  3.0  4.0  6.0
 *
 * Packing used everywhere in moq (and by ModelOpt): element 2i in the low nibble of byte i,
 * element 2i+1 in the high nibble. An odd count leaves the last high nibble 0.
 *
 * Encoder rne_sat: round to nearest, ties to the even mantissa (0.25->0, 0.75->1, 1.25->1,
 * 1.75->2, 2.5->2, 3.5->4, 5->4), saturate beyond 5 to 6. The sign bit is the input's sign bit
 * (so -0.0 and small negatives give 0x8). NaN gives a zero with the sign bit inverted: +NaN -> 0x8,
 * -NaN -> 0x0. Both as ml_dtypes' float4_e2m1fn cast, measured in golden/formats/e2m1fn_mldtypes.bin
 * (2,047 +NaN -> 0x8, 2,028 -NaN -> 0x0). ModelOpt's torch path maps NaN to 0x7 and -0.0 to 0x0;
 * CUDA documents NaN -> +6 (0x7); numerically all zero codes are equal.
 * Tested by tests/unit/test_format_golden.c against ml_dtypes (1,066,068 inputs, zero mismatches)
 * and tests/unit/test_format_scalar.c (ties, saturation, all 16 codes).
 */
#include "format/format.h"

float moq_e2m1_decode(uint8_t c) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = mag[c & 7];
    return (c & 8) ? -v : v;
}

uint8_t moq_e2m1_encode_rne_sat(float x) {
    const uint32_t u = moq_f32_bits(x), s = (u >> 28) & 8;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint8_t)(s ^ 8); /* NaN: -0 for +NaN, +0 for -NaN, as ml_dtypes */
    const float a = x < 0 ? -x : x;
    uint8_t m;
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return (uint8_t)(s | m);
}

void moq_e2m1_encode_rne_sat_ref(const float *in, void *out, size_t n) {
    uint8_t *o = out;
    size_t i = 0;
    for (; i + 1 < n; i += 2)
        o[i / 2] = (uint8_t)(moq_e2m1_encode_rne_sat(in[i]) | moq_e2m1_encode_rne_sat(in[i + 1]) << 4);
    if (i < n) o[i / 2] = moq_e2m1_encode_rne_sat(in[i]);
}

void moq_e2m1_decode_ref(const void *in, float *out, size_t n) {
    const uint8_t *c = in;
    for (size_t i = 0; i < n; i++) out[i] = moq_e2m1_decode((uint8_t)(c[i / 2] >> (4 * (i & 1))));
}
