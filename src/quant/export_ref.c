/* export_ref.c — see export_ref.h. Every step is one binary32 operation, in ModelOpt's order.
 * Rows (or 128-row blocks) are independent, so large weights are split over OpenMP threads
 * (OMP_NUM_THREADS or omp_set_num_threads): the bytes do not depend on the thread count.
 * Tested by tests/unit/test_export_ref.c against NUMERICS.md's worked examples. */
#include "quant/export_ref.h"

#include <math.h>
#include <stdint.h>

#include "format/format.h"

/* Split loops over threads only when there is enough work (a parallel region costs microseconds). */
#define PAR_MIN (1u << 16)

float moq_amax_f32(const float *x, size_t n) {
    float m = 0.0f;
#pragma omp parallel for reduction(max : m) schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

/* ModelOpt's _cast_fp4 takes the sign bit from (q < 0): -0.0 (a -0.0 weight) is code 0, not 8. */
static uint8_t e2m1_modelopt(float q) { return moq_e2m1_encode_rne_sat(q == 0.0f ? 0.0f : q); }

void moq_export_nvfp4_weight(const float *W, size_t N, size_t K, float amax, uint8_t *packed,
                             uint8_t *sf, float *ws2_out) {
    if (amax < 0) amax = moq_amax_f32(W, N * K);
    const float ws2 = amax * MOQ_RCP2688; /* 2688 = 6 · 448; reciprocal product, see export_ref.h */
    const float den = 6.0f * ws2;       /* step 3: f32(6 ⊗ ws2)                             */
    *ws2_out = ws2;
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
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
                const uint8_t lo = e2m1_modelopt(blk[j] / d);
                const uint8_t hi = e2m1_modelopt(blk[j + 1] / d);
                packed[n * (K / 2) + b * 8 + j / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

/* x rounded to the model dtype (bf16, f16; f32 unchanged). */
static float to_model_dtype(float x, moq_dtype d) {
    if (d == MOQ_DT_BF16) return moq_bf16_decode(moq_bf16_encode_rne(x));
    if (d == MOQ_DT_F16) return moq_f16_decode(moq_f16_encode_rne(x));
    return x;
}

void moq_export_fp8_tensor_weight(const float *W, size_t N, size_t K, float amax, moq_dtype model_dtype,
                                  uint8_t *q, float *scale) {
    if (amax < 0) amax = moq_amax_f32(W, N * K);
    if (amax == 0.0f) amax = 448.0f;    /* export_amax fix-up: scale 1.0 */
    const float s = amax / 448.0f;
    const float sm = to_model_dtype(s, model_dtype);
    *scale = s;
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
    for (size_t i = 0; i < N * K; i++) q[i] = moq_e4m3_encode_rne(to_model_dtype(W[i] / sm, model_dtype));
}

void moq_export_fp8_row_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale) {
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        float a = moq_amax_f32(W + n * K, K);
        if (a == 0.0f) a = 448.0f; /* export_amax: zero row -> scale 1.0 */
        const float s = a * MOQ_RCP448;
        scale[n] = s;
        for (size_t k = 0; k < K; k++) q[n * K + k] = moq_e4m3_encode_rne(W[n * K + k] / s);
    }
}

void moq_export_fp8_block_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale) {
    const size_t nb = (N + 127) / 128, kb = K / 128;
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
    for (size_t bn = 0; bn < nb; bn++)
        for (size_t bk = 0; bk < kb; bk++) {
            const size_t n1 = bn * 128 + 128 < N ? bn * 128 + 128 : N;
            float a = 0.0f;
            for (size_t n = bn * 128; n < n1; n++) {
                const float r = moq_amax_f32(W + n * K + bk * 128, 128);
                if (r > a) a = r;
            }
            if (a == 0.0f) a = 448.0f;
            const float s = a * MOQ_RCP448;
            scale[bn * kb + bk] = s;
            for (size_t n = bn * 128; n < n1; n++)
                for (size_t k = bk * 128; k < bk * 128 + 128; k++) q[n * K + k] = moq_e4m3_encode_rne(W[n * K + k] / s);
        }
}

void moq_export_fp8_block_weight_amax(const float *W, size_t N, size_t K, float amax, uint8_t *q, float *scale) {
    if (amax == 0.0f) amax = 448.0f;
    const float s = amax * MOQ_RCP448;
    *scale = s;
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
    for (size_t i = 0; i < N * K; i++) q[i] = moq_e4m3_encode_rne(W[i] / s);
}

/* ceil(log2(x)) for a positive finite f32, exactly (frexp: x = m * 2^e, m in [0.5, 1)). */
static int ceil_log2_f32(float x) {
    int e;
    const float m = frexpf(x, &e);
    return m == 0.5f ? e - 1 : e;
}

void moq_export_mxfp8_weight(const float *W, size_t N, size_t K, uint8_t *q, uint8_t *scale) {
#pragma omp parallel for schedule(static) if (N * K >= PAR_MIN)
    for (size_t n = 0; n < N; n++)
        for (size_t b = 0; b < K / 32; b++) {
            const float *blk = W + n * K + b * 32;
            const float a = moq_amax_f32(blk, 32);
            int e = a > 0.0f ? ceil_log2_f32(a * MOQ_RCP448) : -127;
            if (e < -127) e = -127;
            if (e > 127) e = 127;
            const int code = e + 127;
            scale[n * (K / 32) + b] = (uint8_t)code;
            const float mult = ldexpf(1.0f, 127 - code);
            for (size_t j = 0; j < 32; j++) {
                float v = blk[j] * mult;
                if (v > 448.0f) v = 448.0f;
                if (v < -448.0f) v = -448.0f;
                q[n * K + b * 32 + j] = moq_e4m3_encode_rne(v);
            }
        }
}
