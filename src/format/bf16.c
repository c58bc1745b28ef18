/* bf16.c — bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent, 7 mantissa).
 *
 * Decode is exact (shift left 16). Encode rounds to nearest even (add 0x7FFF + lsb, truncate);
 * overflow rounds to ±inf as IEEE; NaN becomes 0x7FC0 with the input sign (the torch cast; CUDA's
 * __float2bfloat16_rn gives 0x7FFF instead: NUMERICS.md §1.4).
 * Tested by tests/unit/test_format_golden.c against torch.
 */
#include "format/format.h"

float moq_bf16_decode(uint16_t h) { return moq_f32_from_bits((uint32_t)h << 16); }

uint16_t moq_bf16_encode_rne(float x) {
    const uint32_t u = moq_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
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
