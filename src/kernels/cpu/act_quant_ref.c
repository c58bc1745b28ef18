/* act_quant_ref.c — activation quantizers in reference form (NUMERICS §2.4, §4.3, §5.1–§5.3).
 *
 * Every arithmetic step is one f32 operation in the order the spec writes it; `volatile`-free
 * because the library is built without -ffast-math and x86-64 evaluates f32 in f32 (FLT_EVAL 0).
 * Where the peers' GPU kernels use rcp.approx (NVFP4 steps 2 and 4), moq_rcpa() takes the H200's
 * measured table so the CPU reproduces the GPU bit for bit; without it the codes differ from
 * the GPU's only by one e2m1 step at exact decision ties (tests/kernels/test_act_quant.c).
 */
#include "kernels/cpu/act_quant.h"

#include <math.h>
#include <string.h>

#include "format/format.h"

float moq_rcpa(float x, const uint8_t *corr) {
    const uint32_t u = moq_f32_bits(x), s = u & 0x80000000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return x;                                 /* NaN                         */
    if (a < 0x00800000u) return moq_f32_from_bits(s | 0x7F800000u); /* ±0 and subnormal: ftz -> inf */
    if (a == 0x7F800000u) return moq_f32_from_bits(s);             /* ±inf -> ±0                  */
    float r = 1.0f / x;
    uint32_t rb = moq_f32_bits(r);
    if ((rb & 0x7F800000u) == 0) return moq_f32_from_bits(s);      /* subnormal result: ftz       */
    if (corr) {
        const uint32_t i = a & 0x7FFFFFu, c = (corr[i >> 2] >> (2 * (i & 3))) & 3u;
        if (c == 1) rb += 1;
        else if (c == 2) rb -= 1;
    }
    return moq_f32_from_bits(rb);
}

static inline float clamp448(float v) { return v > 448.0f ? 448.0f : (v < -448.0f ? -448.0f : v); }

static float amax_of(const float *x, size_t n) {
    float a = 0.0f;
    for (size_t i = 0; i < n; i++) a = fmaxf(a, fabsf(x[i]));
    return a;
}

void moq_act_fp8_static_ref(const float *x, size_t K, float s_in, uint8_t *q) {
    const float inv = 1.0f / s_in;
    for (size_t i = 0; i < K; i++) q[i] = moq_e4m3_encode_rne_sat(clamp448(x[i] * inv));
}

void moq_act_fp8_token_ref(const float *x, size_t K, uint8_t *q, float *scale) {
    float s = amax_of(x, K) / 448.0f;
    if (!(s >= MOQ_FP8_TOKEN_MIN_SCALE)) s = fmaxf(s, MOQ_FP8_TOKEN_MIN_SCALE);
    for (size_t i = 0; i < K; i++) q[i] = moq_e4m3_encode_rne_sat(clamp448(x[i] / s));
    *scale = s;
}

void moq_act_fp8_g128_ref(const float *x, size_t K, uint8_t *q, float *scales) {
    for (size_t g = 0; g < K / 128; g++) {
        const float *xg = x + 128 * g;
        const float s = fmaxf(MOQ_FP8_G128_EPS, amax_of(xg, 128)) / 448.0f;
        for (size_t i = 0; i < 128; i++) q[128 * g + i] = moq_e4m3_encode_rne_sat(clamp448(xg[i] / s));
        scales[g] = s;
    }
}

void moq_act_nvfp4_ref(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf) {
    const float r6 = moq_rcpa(6.0f, corr), rS = moq_rcpa(S, corr);
    for (size_t b = 0; b < K / 16; b++) {
        const float *xb = x + 16 * b;
        const float amax = amax_of(xb, 16);
        const float sfv = S * (amax * r6);                                   /* step 2 */
        const uint8_t code = moq_e4m3_encode_rne_sat(sfv);                   /* step 3 */
        const float sfd = moq_e4m3_decode(code);
        const float out_scale = sfd != 0.0f ? moq_rcpa(sfd * rS, corr) : 0.0f; /* step 4, vLLM guard */
        sf[b] = code;
        for (size_t i = 0; i < 16; i += 2) {                                 /* steps 5, 6 */
            const uint8_t lo = moq_e2m1_encode_rne_sat(xb[i] * out_scale);
            const uint8_t hi = moq_e2m1_encode_rne_sat(xb[i + 1] * out_scale);
            q[8 * b + i / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

void moq_act_mxfp8_ref(const float *x, size_t K, uint8_t *q, uint8_t *sf) {
    const float r448 = 1.0f / 448.0f; /* rcpa(448) == f32(1/448) on the H200 (golden/rcp) */
    for (size_t b = 0; b < K / 32; b++) {
        const float *xb = x + 32 * b;
        const uint8_t c = moq_e8m0_encode_up_sat(amax_of(xb, 32) * r448);
        const float mult = c == 0 ? 0.0f : ldexpf(1.0f, 127 - (int)c); /* exact power of two */
        sf[b] = c;
        for (size_t i = 0; i < 32; i++) q[32 * b + i] = moq_e4m3_encode_rne_sat(clamp448(xb[i] * mult));
    }
}

void moq_act_dequant_row(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp) {
    const size_t K = (size_t)l->w->K;
    moq_x_row_f32(l->x, l->x_elem, l->w->K, m, xq);
    *row_scale = 1.0f;
    uint8_t *q = tmp, *sf = tmp + K;
    switch (l->pair) {
    case MOQ_PAIR_FP8_TENSOR: /* s_in lives in row_scale (SHARD_W_IN) */
        moq_act_fp8_static_ref(xq, K, l->a_scale, q);
        for (size_t i = 0; i < K; i++) xq[i] = moq_e4m3_decode(q[i]);
        break;
    case MOQ_PAIR_FP8_ROW:
        moq_act_fp8_token_ref(xq, K, q, row_scale);
        for (size_t i = 0; i < K; i++) xq[i] = moq_e4m3_decode(q[i]);
        break;
    case MOQ_PAIR_FP8_BLK128: {
        float s[64] = {0};
        for (size_t g0 = 0; g0 < K; g0 += 64 * 128) { /* at most 64 groups per call */
            const size_t n = K - g0 < 64 * 128 ? K - g0 : 64 * 128;
            moq_act_fp8_g128_ref(xq + g0, n, q + g0, s);
            for (size_t i = 0; i < n; i++) xq[g0 + i] = moq_e4m3_decode(q[g0 + i]) * s[i / 128];
        }
        break;
    }
    case MOQ_PAIR_NVFP4:
        moq_act_nvfp4_ref(xq, K, 1.0f / l->a_scale, l->rcpa_corr, q, sf);
        for (size_t i = 0; i < K; i++)
            xq[i] = moq_e2m1_decode((uint8_t)(q[i / 2] >> (4 * (i & 1)))) * moq_e4m3_decode(sf[i / 16]);
        break;
    case MOQ_PAIR_MXFP8:
        moq_act_mxfp8_ref(xq, K, q, sf);
        for (size_t i = 0; i < K; i++) xq[i] = moq_e4m3_decode(q[i]) * moq_e8m0_decode(sf[i / 32]);
        break;
    default: /* unquantized activations */
        break;
    }
}
