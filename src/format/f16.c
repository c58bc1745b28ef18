/* f16.c — IEEE 754 binary16.
 *
 *   bit 15 | 14 .. 10 | 9 .. 0
 *        s |    e     |   m       bias 15, max 65504 (0x7BFF), subnormals m·2^-24, inf 0x7C00
 *
 * Encode: round to nearest even on the binary32 input; |x| >= 65520 -> ±inf; subnormals rounded on
 * the 2^-24 grid; NaN keeps its sign and the top 10 payload bits and is made quiet:
 * s | 0x7E00 | m >> 13 — torch's CPU cast (the x86 F16C vcvtps2ph rule), measured in
 * golden/formats/f16_torch.bin (4,075 NaN inputs). Decode is exact for numbers; a NaN keeps its
 * sign and payload and is made quiet (bit 22 set), as vcvtph2ps does.
 * Tested by tests/unit/test_format_golden.c against torch (1,066,068 inputs, zero mismatches) and
 * tests/unit/test_format_scalar.c (all 65,536 codes).
 */
#include <math.h>

#include "format/format.h"

float moq_f16_decode(uint16_t h) {
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FFu;
    if (e == 0x1F) /* inf; NaN quieted, payload kept: what vcvtph2ps and torch's CPU cast do */
        return moq_f32_from_bits(s | 0x7F800000u | (m ? 0x400000u : 0) | (m << 13));
    if (e == 0) {
        const float v = (float)m * 0x1p-24f;
        return s ? -v : v;
    }
    return moq_f32_from_bits(s | ((e + 112) << 23) | (m << 13));
}

uint16_t moq_f16_encode_rne(float x) {
    const uint32_t u = moq_f32_bits(x), a = u & 0x7FFFFFFFu;
    const uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u | ((a >> 13) & 0x3FFu)); /* quiet NaN */
    if (a >= 0x47800000u) return (uint16_t)(s | 0x7C00u);     /* >= 65536 (and inf) */
    if (a < 0x38800000u)                                       /* < 2^-14: subnormal grid */
        return (uint16_t)(s | (uint16_t)rintf(moq_f32_from_bits(a) * 0x1p24f));
    const uint32_t e = (a >> 23) - 112, m = a & 0x7FFFFFu;
    uint32_t h = e << 10 | m >> 13;
    const uint32_t rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;   /* carry may reach inf: correct */
    return (uint16_t)(s | h);
}

void moq_f16_encode_rne_ref(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_f16_encode_rne(in[i]);
}

void moq_f16_decode_ref(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    for (size_t i = 0; i < n; i++) out[i] = moq_f16_decode(h[i]);
}
