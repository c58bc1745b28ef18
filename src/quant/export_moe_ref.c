/* export_moe_ref.c — see export_moe_ref.h. Each step is one binary32 operation in ModelOpt's order.
 * Tested through tests/moe/test_moe.c, whose reference decodes the written bytes independently,
 * and by tests/moe/test_moe_export.c (the spec's rules restated in the test). */
#include "quant/export_moe_ref.h"

#include <math.h>

#include "format/format.h"
#include "quant/export_ref.h"

void moq_export_fp8_block_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale) {
    const size_t bn = (N + 127) / 128, bk = (K + 127) / 128;
    for (size_t i = 0; i < bn; i++)
        for (size_t j = 0; j < bk; j++) {
            float a = 0.0f;
            for (size_t n = i * 128; n < N && n < i * 128 + 128; n++)
                for (size_t k = j * 128; k < K && k < j * 128 + 128; k++) a = fmaxf(a, fabsf(W[n * K + k]));
            const float s = a == 0.0f ? 1.0f : a / 448.0f;
            scale[i * bk + j] = s;
            for (size_t n = i * 128; n < N && n < i * 128 + 128; n++)
                for (size_t k = j * 128; k < K && k < j * 128 + 128; k++) q[n * K + k] = moq_e4m3_encode_rne(W[n * K + k] / s);
        }
}

void moq_export_mxfp8_weight(const float *W, size_t N, size_t K, uint8_t *q, uint8_t *sf) {
    for (size_t n = 0; n < N; n++)
        for (size_t b = 0; b < K / 32; b++) {
            const float *blk = W + n * K + b * 32;
            const float y = moq_amax_f32(blk, 32) / 448.0f;
            int e = -127;
            if (y > 0.0f) { /* ceil(log2 y) by exact frexp: y = f·2^x, f in [0.5, 1) */
                int x;
                const float f = frexpf(y, &x);
                e = f == 0.5f ? x - 1 : x;
                if (e < -127) e = -127;
                if (e > 127) e = 127;
            }
            const uint8_t c = (uint8_t)(e + 127);
            sf[n * (K / 32) + b] = c;
            const float mult = ldexpf(1.0f, 127 - c);
            for (size_t j = 0; j < 32; j++) {
                float v = blk[j] * mult;
                v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
                q[n * K + b * 32 + j] = moq_e4m3_encode_rne(v);
            }
        }
}
