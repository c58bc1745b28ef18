/* bf16.c — bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa).
 *
 *   bit 15 | 14 .. 7 | 6 .. 0
 *        s |    e    |   m        bias 127, inf 0x7F80, NaN e = 0xFF, m != 0
 *
 * Decode is exact (shift left 16). Encode rounds to nearest even (add 0x7FFF + lsb, truncate);
 * overflow rounds to ±inf as IEEE. Every NaN (either sign, any payload) becomes 0xFFFF: that is
 * what torch's CPU tensor cast (f32 tensor .to(bfloat16), its vectorized path) writes, measured in
 * golden/formats/bf16_torch.bin (4,075 NaN inputs, all 0xFFFF). Other references differ only on
 * NaN: torch's c10 scalar conversion gives 0x7FC0, CUDA __float2bfloat16_rn 0x7FFF (NUMERICS §1.4).
 * Tested by tests/unit/test_format_golden.c against torch (1,066,068 inputs, zero mismatches) and
 * tests/unit/test_format_scalar.c (all 65,536 codes decoded and re-encoded).
 */
#include "format/format.h"

float moq_bf16_decode(uint16_t h) { return moq_f32_from_bits((uint32_t)h << 16); }

uint16_t moq_bf16_encode_rne(float x) {
    const uint32_t u = moq_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFu; /* NaN, as torch's CPU cast */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

void moq_bf16_encode_rne_ref(const float *in, void *out, size_t n) {
    uint16_t *o = out;
    for (size_t i = 0; i < n; i++) o[i] = moq_bf16_encode_rne(in[i]);
}

void moq_bf16_decode_ref(const void *in, float *out, size_t n) {
    const uint16_t *h = in;
    for (size_t i = 0; i < n; i++) out[i] = moq_bf16_decode(h[i]);
}

void moq_f32_copy_ref(const float *in, void *out, size_t n) { memcpy(out, in, n * sizeof(float)); }
void moq_f32_decode_ref(const void *in, float *out, size_t n) { memcpy(out, in, n * sizeof(float)); }
