/* export_ref.c — see export_ref.h. Every step is one binary32 operation, in ModelOpt's order.
 * Tested by tests/unit/test_export_ref.c against NUMERICS.md's worked examples. */
#include "quant/export_ref.h"

#include <math.h>

#include "format/format.h"

float moq_amax_f32(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

void moq_export_nvfp4_weight(const float *W, size_t N, size_t K, float amax, uint8_t *packed,
                             uint8_t *sf, float *ws2_out) {
    if (amax < 0) amax = moq_amax_f32(W, N * K);
    const float ws2 = amax / 2688.0f;   /* 2688 = 6 · 448                                   */
    const float den = 6.0f * ws2;       /* step 3: f32(6 ⊗ ws2)                             */
    *ws2_out = ws2;
    for (size_t n = 0; n < N; n++) {
        for (size_t b = 0; b < K / 16; b++) {
            const float *blk = W + n * K + b * 16;
            float pbs = moq_amax_f32(blk, 16) / den;
            if (pbs == 0.0f) pbs = 1.0f;                /* all-zero block (or ws2 = 0)        */
            if (!(pbs >= 0x1p-9f)) pbs = 0x1p-9f;       /* clamp to [2^-9, 448]; NaN -> 2^-9  */
            if (pbs > 448.0f) pbs = 448.0f;
            const uint8_t code = moq_e4m3_encode_rne(pbs);
            sf[n * (K / 16) + b] = code;
            const float d = moq_e4m3_decode(code) * ws2; /* step 5 */
            for (size_t j = 0; j < 16; j += 2) {
                const uint8_t lo = moq_e2m1_encode_rne_sat(blk[j] / d);
                const uint8_t hi = moq_e2m1_encode_rne_sat(blk[j + 1] / d);
                packed[n * (K / 2) + b * 8 + j / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

void moq_export_fp8_tensor_weight(const float *W, size_t N, size_t K, float amax, int model_bf16,
                                  uint8_t *q, float *scale) {
    if (amax < 0) amax = moq_amax_f32(W, N * K);
    if (amax == 0.0f) amax = 448.0f;    /* export_amax fix-up: scale 1.0 */
    const float s = amax / 448.0f;
    *scale = s;
    for (size_t i = 0; i < N * K; i++) {
        const float quo = W[i] / s;
        const float r = model_bf16 ? moq_bf16_decode(moq_bf16_encode_rne(quo)) : moq_f16_decode(moq_f16_encode_rne(quo));
        q[i] = moq_e4m3_encode_rne(r);
    }
}
