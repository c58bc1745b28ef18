/* kref.h — what the kernel tests share and moq does not: a seeded generator and independent
 * code books (e4m3 by search over its 127 values with ties to the even code, e2m1 by its interval
 * table), written from NUMERICS.md §1. Header-only, included by tests/kernels/test_*.c. */
#ifndef MOQ_TESTS_KREF_H
#define MOQ_TESTS_KREF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_seed;
static uint64_t g_rng;
static inline uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}
static inline float urand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f; }
static inline float bf16_round(float v) { /* activations are often bf16: make some inputs bf16-exact */
    uint32_t u; memcpy(&u, &v, 4); u &= 0xFFFF0000u; memcpy(&v, &u, 4); return v;
}

/* ---- independent code books ---- */
static inline double e4m3_val(int c) { /* §1.1 formula, c in 0..126 positive */
    const int e = (c >> 3) & 15, m = c & 7;
    return e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
}
/* E4s: saturating RNE by search: nearest value, ties to the even code. */
static inline uint8_t t_e4s(float x) {
    if (isnan(x)) return 0x7F;
    const double a = fabs((double)x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= 126; c++) {
        const double d = fabs(e4m3_val(c) - a);
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1))) bd = d, best = c;
    }
    if (a >= 448) best = 126;
    return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}
static const double e2m1_vals[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
static inline uint8_t t_e2(float x) { /* §1.3 interval table; sign bit = sign of x (ModelOpt/GPU: -tiny -> 0x8) */
    const double a = fabs((double)x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 8; c++) {
        const double d = fabs(e2m1_vals[c] - a);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    if (a > 6) best = 7;
    return (uint8_t)(best | (signbit(x) ? 8 : 0));
}
static inline float clampf(float v, float lim) { return v > lim ? lim : (v < -lim ? -lim : v); }

static inline void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        float v = urand(-scale, scale);
        if (rnd() % 4 == 0) v = bf16_round(v);
        if (rnd() % 50 == 0) v = 0.0f;
        x[i] = v;
    }
}


/* §2.4 with IEEE reciprocals, written from the spec text. */
static inline void t_nvfp4(const float *x, int K, float S, uint8_t *q, uint8_t *sf) {
    const float r6 = 1.0f / 6.0f, rS = 1.0f / S;
    for (int b = 0; b < K / 16; b++) {
        float amax = 0;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[16 * b + i]));
        const float sfv = S * (amax * r6);
        sf[b] = t_e4s(sfv);
        const float sfd = (float)e4m3_val(sf[b] & 0x7F);
        const float os = sfd != 0 ? 1.0f / (sfd * rS) : 0.0f;
        for (int i = 0; i < 16; i += 2)
            q[8 * b + i / 2] = (uint8_t)(t_e2(x[16 * b + i] * os) | t_e2(x[16 * b + i + 1] * os) << 4);
    }
}


/* ---- fp64 oracle for y = x · Wᵀ: activation quantized by the definitions above, both operands
 * dequantized in double, then the per-row factor and the bias (NUMERICS §2.5, §4, §5). ---- */
#include "scheme/quant_key.h"

typedef enum { TP_F32, TP_BF16, TP_F16, TP_FP8_TENSOR, TP_FP8_ROW, TP_FP8_BLK128, TP_NVFP4, TP_NVFP4_W4A16, TP_MXFP8, TP_COUNT } tpair;
static const char *const tpair_name[TP_COUNT] = {"f32", "bf16", "f16", "fp8_tensor", "fp8_row", "fp8_blk128", "nvfp4_w4a4", "nvfp4_w4a16", "mxfp8"};

typedef struct tw {
    moq_weight w;
    tpair      p;
    void      *q, *scale;
    float     *bias;
} tw;

static inline double t_f16(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? m * ldexp(1.0, -24) : (1024 + m) * ldexp(1.0, e - 25);
    return (h & 0x8000) ? -v : v;
}
static inline double t_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* When set, e4m3 weight codes are drawn from magnitudes 0..15 only (subnormals and the first
 * binade), so a decoder's subnormal handling dominates the result instead of vanishing in it. */
static int g_small_e4m3;
static int g_mx_scale_lo = 118; /* MXFP8 weight scale codes drawn from [lo, lo + 12) */
static inline uint8_t t_rand_e4m3(void) {
    uint8_t c;
    do c = (uint8_t)rnd(); while ((c & 0x7F) == 0x7F);
    return g_small_e4m3 ? (uint8_t)(c & 0x8F) : c;
}

/* Random canonical weight of pair p with n_shards shards of different static scales. */
static inline tw tw_make(tpair p, int64_t N, int64_t K, int n_shards, int with_bias) {
    tw t;
    memset(&t, 0, sizeof t);
    t.p = p;
    static const moq_quant_key *const wk[TP_COUNT] = {&MOQ_KEY_W_F32, &MOQ_KEY_W_BF16, &MOQ_KEY_W_F16, &MOQ_KEY_W_FP8_TENSOR, &MOQ_KEY_W_FP8_ROW, &MOQ_KEY_W_FP8_BLK128, &MOQ_KEY_W_NVFP4, &MOQ_KEY_W_NVFP4, &MOQ_KEY_W_MXFP8};
    static const moq_quant_key *const ak[TP_COUNT] = {&MOQ_KEY_A_NONE, &MOQ_KEY_A_NONE, &MOQ_KEY_A_NONE, &MOQ_KEY_A_FP8_TENSOR_STATIC, &MOQ_KEY_A_FP8_TOKEN_DYN, &MOQ_KEY_A_FP8_G128_DYN, &MOQ_KEY_A_NVFP4_DYN, &MOQ_KEY_A_NONE, &MOQ_KEY_A_MXFP8_DYN};
    t.w.w = *wk[p];
    t.w.a = *ak[p];
    t.w.N = N;
    t.w.K = K;
    const size_t nk = (size_t)(N * K);
    switch (p) {
    case TP_F32: { float *q = malloc(nk * 4); for (size_t i = 0; i < nk; i++) q[i] = urand(-1, 1); t.q = q; break; }
    case TP_BF16: case TP_F16: {
        uint16_t *q = malloc(nk * 2);
        for (size_t i = 0; i < nk; i++) q[i] = p == TP_BF16 ? (uint16_t)(0x3C00 + (rnd() & 0x7FF) + ((rnd() & 1) << 15)) : (uint16_t)((rnd() & 0x3FFF) | ((rnd() & 1) << 15));
        t.q = q;
        break;
    }
    case TP_NVFP4: case TP_NVFP4_W4A16: {
        uint8_t *q = malloc(nk / 2), *sf = malloc(nk / 16);
        for (size_t i = 0; i < nk / 2; i++) q[i] = (uint8_t)rnd();
        for (size_t i = 0; i < nk / 16; i++) sf[i] = (uint8_t)(0x20 + rnd() % 0x5E); /* positive, finite */
        t.q = q, t.scale = sf;
        break;
    }
    default: { /* e4m3 weights */
        uint8_t *q = malloc(nk);
        for (size_t i = 0; i < nk; i++) q[i] = t_rand_e4m3();
        t.q = q;
        if (p == TP_FP8_ROW) { float *s = malloc((size_t)N * 4); for (int64_t i = 0; i < N; i++) s[i] = urand(1e-3f, 2e-2f); t.scale = s; }
        if (p == TP_FP8_BLK128) {
            const size_t n = (size_t)((N + 127) / 128 * (K / 128));
            float *s = malloc(n * 4);
            for (size_t i = 0; i < n; i++) s[i] = urand(1e-3f, 2e-2f);
            t.scale = s;
        }
        if (p == TP_MXFP8) { uint8_t *s = malloc(nk / 32); for (size_t i = 0; i < nk / 32; i++) s[i] = (uint8_t)(g_mx_scale_lo + rnd() % 12); t.scale = s; }
        break;
    }
    }
    t.w.q = t.q;
    t.w.scale = t.scale;
    t.w.n_shards = n_shards;
    for (int s = 0; s <= n_shards; s++) t.w.row0[s] = N * s / n_shards;
    for (int s = 0; s < n_shards; s++) {
        t.w.shard_scale[s] = urand(1e-4f, 4e-3f);
        t.w.shard_in_scale[s] = urand(1e-3f, 5e-3f);
    }
    if (with_bias) {
        t.bias = malloc((size_t)N * 4);
        for (int64_t i = 0; i < N; i++) t.bias[i] = urand(-0.5f, 0.5f);
        t.w.bias = t.bias;
    }
    return t;
}
static inline void tw_free(tw *t) { free(t->q); free(t->scale); free(t->bias); }

static inline double tw_weight(const tw *t, int64_t n, int64_t k) {
    const moq_weight *w = &t->w;
    const int64_t K = w->K;
    const uint8_t *q8 = w->q, *s8 = w->scale;
    switch (t->p) {
    case TP_F32: return ((const float *)w->q)[n * K + k];
    case TP_BF16: return t_bf16(((const uint16_t *)w->q)[n * K + k]);
    case TP_F16: return t_f16(((const uint16_t *)w->q)[n * K + k]);
    case TP_NVFP4: case TP_NVFP4_W4A16: {
        const int c = (q8[n * K / 2 + k / 2] >> (4 * (k & 1))) & 15;
        return (c & 8 ? -1 : 1) * e2m1_vals[c & 7] * e4m3_val(s8[n * (K / 16) + k / 16] & 0x7F);
    }
    default: break;
    }
    const int c8 = q8[n * K + k];
    const double v = (c8 & 0x80 ? -1 : 1) * e4m3_val(c8 & 0x7F);
    if (t->p == TP_FP8_BLK128) return v * ((const float *)w->scale)[(n / 128) * (K / 128) + k / 128];
    if (t->p == TP_MXFP8) return v * ldexp(1.0, s8[n * (K / 32) + k / 32] - 127);
    return v;
}

static inline int tw_shard(const tw *t, int64_t n) { int s = 0; while (s + 1 < t->w.n_shards && n >= t->w.row0[s + 1]) s++; return s; }

/* y [M, N] in double; x f32 [M, K] (bf16 inputs already widened). */
static inline void tw_oracle(const tw *t, const float *x, int64_t M, double *y) {
    const int64_t N = t->w.N, K = t->w.K;
    double *xd = malloc((size_t)(M * K) * sizeof(double));
    uint8_t *q = malloc((size_t)K), *sf = malloc((size_t)K);
    float is = 0;
    for (int s = 0; s < t->w.n_shards; s++) is = fmaxf(is, t->w.shard_in_scale[s]);
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        double *o = xd + m * K;
        float amax = 0;
        for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(xr[k]));
        switch (t->p) {
        case TP_FP8_TENSOR: {
            const float inv = 1.0f / is;
            for (int64_t k = 0; k < K; k++) { const uint8_t c = t_e4s(clampf(xr[k] * inv, 448)); o[k] = (c & 0x80 ? -1 : 1) * e4m3_val(c & 0x7F) * is; }
            break;
        }
        case TP_FP8_ROW: {
            float s = amax / 448.0f;
            if (s < 1.0f / (448.0f * 512.0f)) s = 1.0f / (448.0f * 512.0f);
            for (int64_t k = 0; k < K; k++) { const uint8_t c = t_e4s(clampf(xr[k] / s, 448)); o[k] = (c & 0x80 ? -1 : 1) * e4m3_val(c & 0x7F) * s; }
            break;
        }
        case TP_FP8_BLK128:
            for (int64_t g = 0; g < K / 128; g++) {
                float a = 1e-10f;
                for (int i = 0; i < 128; i++) a = fmaxf(a, fabsf(xr[128 * g + i]));
                const float s = a / 448.0f;
                for (int i = 0; i < 128; i++) { const uint8_t c = t_e4s(clampf(xr[128 * g + i] / s, 448)); o[128 * g + i] = (c & 0x80 ? -1 : 1) * e4m3_val(c & 0x7F) * s; }
            }
            break;
        case TP_NVFP4:
            t_nvfp4(xr, (int)K, 1.0f / is, q, sf);
            for (int64_t k = 0; k < K; k++) {
                const int c = (q[k / 2] >> (4 * (k & 1))) & 15;
                o[k] = (c & 8 ? -1 : 1) * e2m1_vals[c & 7] * e4m3_val(sf[k / 16]) * is;
            }
            break;
        case TP_MXFP8:
            for (int64_t b = 0; b < K / 32; b++) {
                float a = 0;
                for (int i = 0; i < 32; i++) a = fmaxf(a, fabsf(xr[32 * b + i]));
                const float yv = a * (1.0f / 448.0f);
                int c = 0;
                while (c < 254 && ldexp(1.0, c - 127) < (double)yv) c++;
                for (int i = 0; i < 32; i++) {
                    const uint8_t e = t_e4s(clampf(c ? xr[32 * b + i] * (float)ldexp(1.0, 127 - c) : 0.0f, 448));
                    o[32 * b + i] = (e & 0x80 ? -1 : 1) * e4m3_val(e & 0x7F) * ldexp(1.0, c - 127);
                }
            }
            break;
        default:
            for (int64_t k = 0; k < K; k++) o[k] = xr[k];
            break;
        }
    }
    for (int64_t n = 0; n < N; n++) {
        const int s = tw_shard(t, n);
        double f = 1;
        if (t->p == TP_FP8_TENSOR) f = t->w.shard_scale[s];                 /* s_in is in xd */
        if (t->p == TP_NVFP4) f = (double)(float)(is * t->w.shard_scale[s]) / is; /* alpha f32; is is in xd */
        if (t->p == TP_NVFP4_W4A16) f = t->w.shard_scale[s];
        if (t->p == TP_FP8_ROW) f = ((const float *)t->w.scale)[n];
        for (int64_t m = 0; m < M; m++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += xd[m * K + k] * tw_weight(t, n, k);
            y[m * N + n] = f * acc + (t->bias ? t->bias[n] : 0.0);
        }
    }
    free(xd), free(q), free(sf);
}

#endif
