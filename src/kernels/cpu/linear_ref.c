/* linear_ref.c — the `_ref` linear kernel of every pair: plain C, activation quantized by the
 * reference quantizers (act_quant_ref.c), both operands dequantized to double, double
 * accumulation, then the pair's epilogue scale and the bias:
 *
 *   y[m, n] = row_scale[n] · Σ_k xd[m, k] · wd[n, k]  (+ bias[n]),   rounded once to f32 (bf16: RNE of that f32)
 *
 *   xd  double [M, K]   activation after quantize+dequantize with its per-token and per-group scales
 *                       (the static input scale of FP8 / NVFP4 lives in row_scale instead)
 *   wd  double [K]      weight row n with its per-group scales (blk128 f32, NVFP4 e4m3, MXFP8 e8m0)
 *
 * Kept readable and never optimized: every fast row is tested against it (tests/kernels/test_linear.c)
 * and it is tested against an fp64 oracle written in tests/kernels/test_linear_ref.c.
 */
#include "kernels/cpu/linear_cpu.h"

#include <string.h>

#include "kernels/cpu/act_quant.h"

/* Weight row n of w dequantized to double, without the pair's row_scale. */
static void weight_row(const moq_weight *w, moq_pair_id p, int64_t n, double *out) {
    const int64_t K = w->K;
    const uint8_t *q8 = w->q;
    for (int64_t k = 0; k < K; k++) {
        double v = 0;
        switch (p) {
        case MOQ_PAIR_F32: v = ((const float *)w->q)[n * K + k]; break;
        case MOQ_PAIR_BF16: v = moq_bf16_decode(((const uint16_t *)w->q)[n * K + k]); break;
        case MOQ_PAIR_F16: v = moq_f16_decode(((const uint16_t *)w->q)[n * K + k]); break;
        case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW: v = moq_e4m3_decode(q8[n * K + k]); break;
        case MOQ_PAIR_FP8_BLK128:
            v = (double)moq_e4m3_decode(q8[n * K + k]) * ((const float *)w->scale)[(n / 128) * (K / 128) + k / 128];
            break;
        case MOQ_PAIR_NVFP4: case MOQ_PAIR_NVFP4_W4A16:
            v = (double)moq_e2m1_decode((uint8_t)(q8[n * (K / 2) + k / 2] >> (4 * (k & 1)))) *
                moq_e4m3_decode(((const uint8_t *)w->scale)[n * (K / 16) + k / 16]);
            break;
        case MOQ_PAIR_MXFP8:
            v = (double)moq_e4m3_decode(q8[n * K + k]) * moq_e8m0_decode(((const uint8_t *)w->scale)[n * (K / 32) + k / 32]);
            break;
        case MOQ_PAIR_COUNT: break;
        }
        out[k] = v;
    }
}

void moq_weight_dequant_row(const moq_weight *w, int64_t n, double *out) {
    const moq_pair_id p = moq_pair_of(w);
    weight_row(w, p, n, out);
    double f = 1;
    const int s = moq_weight_shard_of(w, n);
    if (moq_pairs[p].row_scale == MOQ_ROWSCALE_SHARD_W || moq_pairs[p].row_scale == MOQ_ROWSCALE_SHARD_W_IN) f = w->shard_scale[s];
    if (moq_pairs[p].row_scale == MOQ_ROWSCALE_ROW) f = ((const float *)w->scale)[n];
    for (int64_t k = 0; k < w->K; k++) out[k] *= f * (w->pre_scale ? (double)w->pre_scale[k] : 1.0); /* AWQ: W · diag(s) */
}

size_t moq_linear_ref_workspace(const moq_weight *w, int64_t M, int n_threads) {
    (void)n_threads;
    const size_t K = (size_t)w->K;
    return (size_t)M * K * sizeof(double) + K * sizeof(double) + K * sizeof(float) + 2 * K + 64;
}

moq_status moq_linear_ref_run(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, N = w->N, K = w->K;
    double *xd = l->ws, *wd = xd + M * K;
    float *xf = (float *)(wd + K);
    uint8_t *tmp = (uint8_t *)(xf + K);
    for (int64_t m = 0; m < M; m++) {
        /* moq_act_dequant_row folds group scales in f32; the reference wants them in double, so
         * it re-quantizes with the reference quantizers here and scales in double. */
        moq_x_row_f32(l->x, l->x_elem, K, m, xf);
        double *o = xd + m * K;
        uint8_t *q = tmp, *sf = tmp + K;
        switch (l->pair) {
        case MOQ_PAIR_FP8_TENSOR:
            moq_act_fp8_static_ref(xf, (size_t)K, l->a_scale, q);
            for (int64_t k = 0; k < K; k++) o[k] = moq_e4m3_decode(q[k]);
            break;
        case MOQ_PAIR_FP8_ROW: {
            float s;
            moq_act_fp8_token_ref(xf, (size_t)K, q, &s);
            for (int64_t k = 0; k < K; k++) o[k] = (double)moq_e4m3_decode(q[k]) * s;
            break;
        }
        case MOQ_PAIR_FP8_BLK128:
            for (int64_t g = 0; g < K / 128; g++) {
                float s;
                moq_act_fp8_g128_ref(xf + 128 * g, 128, q, &s);
                for (int64_t i = 0; i < 128; i++) o[128 * g + i] = (double)moq_e4m3_decode(q[i]) * s;
            }
            break;
        case MOQ_PAIR_NVFP4:
            moq_act_nvfp4_ref(xf, (size_t)K, 1.0f / l->a_scale, l->rcpa_corr, q, sf);
            for (int64_t k = 0; k < K; k++)
                o[k] = (double)moq_e2m1_decode((uint8_t)(q[k / 2] >> (4 * (k & 1)))) * moq_e4m3_decode(sf[k / 16]);
            break;
        case MOQ_PAIR_MXFP8:
            moq_act_mxfp8_ref(xf, (size_t)K, q, sf);
            for (int64_t k = 0; k < K; k++) o[k] = (double)moq_e4m3_decode(q[k]) * moq_e8m0_decode(sf[k / 32]);
            break;
        default:
            for (int64_t k = 0; k < K; k++) o[k] = xf[k];
            break;
        }
    }
    for (int64_t n = 0; n < N; n++) {
        weight_row(w, l->pair, n, wd);
        for (int64_t m = 0; m < M; m++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += xd[m * K + k] * wd[k];
            double v = (double)l->row_scale[n] * acc;
            if (w->bias) v += w->bias[n];
            moq_y_store(l->y, l->y_elem, N, m, n, (float)v);
        }
    }
    return MOQ_OK;
}
