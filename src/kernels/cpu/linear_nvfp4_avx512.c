/* linear_nvfp4_avx512.c — NVFP4 W4A4 on AVX-512 VNNI: integer dot products of e2m1 codes per
 * 16-block, then both block scales in f32 (NUMERICS §2.5).
 *
 * Twice an e2m1 value is an integer in [-12, 12], so a block's dot product is exact in int32:
 *   Σ_k (2·a_k)(2·w_k) = Σ_k (2·w_k + 12)·(2·a_k) − 12·Σ_k 2·a_k
 * vpdpbusd multiplies unsigned × signed bytes: the weight is the unsigned side (2w + 12 in
 * [0, 24], from a 16-entry shuffle of the nibble), the activation the signed side; the
 * correction −12·Σ 2a depends only on the token and block, so it seeds the accumulator.
 * Worst |int| per block 16·24·12 = 4608: no saturation (vpdpbusd wraps; it cannot reach 2^31).
 *
 *   W     u8   [N/16, K/8, 16, 4]   layout/rows16.c nvfp4_vnni16: one 64-byte line = k 8g..8g+7
 *                                   of 16 rows, low nibbles k 8g..+3, high nibbles k 8g+4..+7
 *   SFw   e4m3 [N/16, K/16, 16]     rows16 of weight_scale
 *   A8    s8   [M, K]               2·D2(activation code), from moq_act_nvfp4_avx512 (bit-exact
 *                                   twin of moq_act_nvfp4_ref)
 *   AOF   i32  [M, K/16]            −12 · Σ_block A8
 *   SFa   f32  [M, K/16]            D4(activation block scale) · 64  (= ·256 for the weight-scale
 *                                   decode's 2^-8, ·1/4 for the two doublings)
 *   y[m, n] = alpha[n] · Σ_b f32(int_b) · (D4(SFw)/256 · SFa)  (+ bias), alpha = f32(is · ws2[shard])
 *
 * Threads: OpenMP over chunks of 4 tiles claimed one ahead, the first token group prefetching the
 * codes 16 KiB ahead into the thread's own next chunk (tile_prefetch.h); pairs of tiles for
 * M = PMIN..MP (whole pairs per chunk, both tiles prefetched); tokens in groups of MT, so one tile's weights (K·9 bytes, L1/L2-resident) are
 * decoded once per group. Reference: linear_ref.c. Test: test_linear.c.
 */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define MT 12 /* tokens per pass over a tile: 12 f32 accumulators + 4 weight planes + scales */

static size_t codes_bytes(const moq_weight *w) { return (moq_layout_nvfp4_vnni16_size(w->N, w->K) + 63) & ~(size_t)63; }

size_t moq_linear_nvfp4_vnni_packed_size(const moq_weight *w) {
    return codes_bytes(w) + moq_layout_rows16_size(w->N, w->K / 16, 1);
}

void moq_linear_nvfp4_vnni_pack(const moq_weight *w, void *dst) {
    moq_layout_nvfp4_vnni16_pack(w->q, w->N, w->K, dst);
    moq_layout_rows16_pack(w->scale, w->N, w->K / 16, 1, (uint8_t *)dst + codes_bytes(w));
}

/* Per token: A8 K bytes, AOF and SFa 4·K/16 bytes each; per thread: x row f32 + codes + scales. */
static size_t token_bytes(int64_t K) { return ((size_t)K + (size_t)K / 2 + 63) & ~(size_t)63; }
static size_t thread_bytes(int64_t K) { return ((size_t)K * 4 + (size_t)K + (size_t)K / 16 + 127) & ~(size_t)63; }

size_t moq_linear_nvfp4_vnni_workspace(const moq_weight *w, int64_t M, int n_threads) {
    return (size_t)M * token_bytes(w->K) + (size_t)n_threads * thread_bytes(w->K);
}

/* e4m3 -> f32 / 256 as in linear_dequant_panel_avx512.c (NaN codes -> f16 0xFFFF, a NaN). */
static inline __m512 e4m3x16_div256(__m128i c) {
    const __m256i w = _mm256_cvtepu8_epi16(c);
    __m256i t = _mm256_slli_epi16(w, 7);
    t = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000)));
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F));
    return _mm512_cvtph_ps(_mm256_or_si256(t, nan));
}

static void prepare_token(const moq_linear_launch *l, int64_t m, uint8_t *tok, uint8_t *tmp) {
    const int64_t K = l->w->K;
    float *xf = (float *)tmp;
    uint8_t *q = tmp + 4 * K, *sf = q + K / 2;
    int8_t *a8 = (int8_t *)tok;
    int32_t *aof = (int32_t *)(tok + K);
    float *sfa = (float *)(aof + K / 16);
    moq_x_row_f32(l->x, l->x_elem, K, m, xf);
    moq_act_nvfp4_avx512(xf, (size_t)K, 1.0f / l->a_scale, l->rcpa_corr, q, sf, a8, aof);
    for (int64_t b = 0; b < K / 16; b++) {
        aof[b] *= -12;
        sfa[b] = moq_e4m3_decode(sf[b]) * 64.0f;
    }
}

static inline int32_t load_i32(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* y rows of tile t for tokens [m0, m0 + mt); mt is a constant after inlining. */
static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, const uint8_t *toks, size_t tstride,
                                                             int64_t t, int64_t m0, const int mt, const moq_pf_chunks *pc) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W0 = (const uint8_t *)l->packed;
    const uint8_t *W = (const uint8_t *)l->packed + t * (K / 8) * 64;
    const uint8_t *SF = (const uint8_t *)l->packed + codes_bytes(l->w) + t * nb * 16;
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512 acc[MT];
    for (int i = 0; i < mt; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (pc && m0 == 0) { /* the first token group streams the tile from DRAM */
            moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES);
            moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES + 64);
        }
        const __m512i w0 = _mm512_load_si512(W + 128 * b), w1 = _mm512_load_si512(W + 128 * b + 64);
        const __m512i lo0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(w0, low4));
        const __m512i hi0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(w0, 4), low4));
        const __m512i lo1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(w1, low4));
        const __m512i hi1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(w1, 4), low4));
        const __m512 sw = e4m3x16_div256(_mm_load_si128((const __m128i *)(SF + 16 * b)));
        for (int i = 0; i < mt; i++) {
            const uint8_t *tok = toks + (size_t)(m0 + i) * tstride;
            const int8_t *a = (const int8_t *)tok + 16 * b;
            const int32_t *aof = (const int32_t *)(tok + K);
            const float *sfa = (const float *)(aof + nb);
            /* one chain of four: the tokens (and, at M = 1, the blocks) give the parallelism */
            __m512i s = _mm512_dpbusd_epi32(_mm512_set1_epi32(aof[b]), lo0, _mm512_set1_epi32(load_i32(a)));
            s = _mm512_dpbusd_epi32(s, hi0, _mm512_set1_epi32(load_i32(a + 4)));
            s = _mm512_dpbusd_epi32(s, lo1, _mm512_set1_epi32(load_i32(a + 8)));
            s = _mm512_dpbusd_epi32(s, hi1, _mm512_set1_epi32(load_i32(a + 12)));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sw, _mm512_set1_ps(sfa[b])), acc[i]);
        }
    }
    const int64_t N = l->w->N;
    for (int i = 0; i < mt; i++) {
        float v[16];
        _mm512_storeu_ps(v, acc[i]);
        for (int r = 0; r < 16 && 16 * t + r < N; r++) {
            const int64_t n = 16 * t + r;
            float y = v[r] * l->row_scale[n];
            if (l->w->bias) y += l->w->bias[n];
            moq_y_store(l->y, l->y_elem, N, m0 + i, n, y);
        }
    }
}

/* Small M (PMIN..MP tokens, issue 15): tiles t and t + 1 in one pass, so each activation broadcast
 * (4 code dwords, the AOF seed, the scale) feeds two vpdpbusd chains instead of one; a last odd
 * tile keeps tile_tokens. Per row the integer sums and the f32 steps are those of tile_tokens, in
 * the same order: the same bits. M < PMIN keeps tile_tokens: measured (docs/PERFORMANCE.md) the
 * pairs won at M = 2..4 for K = 14336 but lost at the serve model's K = 2048 (B = 2, 4 steps +15 %
 * CPU), while M = 6..8 won at every shape tried. */
#define PMIN 6
#define MP 8
_Static_assert(MOQ_PF_CHUNK % 2 == 0, "a chunk of tiles must hold whole tile pairs");
static inline __attribute__((always_inline)) void tile_pair_tokens(const moq_linear_launch *l, const uint8_t *toks, size_t tstride,
                                                                  int64_t t, int64_t m0, const int mt, const moq_pf_chunks *pc) {
    const int64_t K = l->w->K, nb = K / 16, unit = K * 8;
    const uint8_t *W0 = (const uint8_t *)l->packed;
    const uint8_t *WA = (const uint8_t *)l->packed + t * (K / 8) * 64, *WB = WA + (K / 8) * 64;
    const uint8_t *SFA = (const uint8_t *)l->packed + codes_bytes(l->w) + t * nb * 16, *SFB = SFA + nb * 16;
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512 accA[MP], accB[MP];
    for (int i = 0; i < mt; i++) accA[i] = accB[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* Both tiles MOQ_PF_BYTES ahead of their loads; past the pair's end into the next pair
         * (t + 2, t + 3: chunks hold whole pairs), which moq_pf_line maps into the next chunk. */
        for (int64_t j = 0; j < 128; j += 64) {
            const int64_t p = 128 * b + MOQ_PF_BYTES + j, offA = p < unit ? t * unit + p : (t + 2) * unit + p - unit;
            moq_pf_line(W0, unit, pc, offA);
            moq_pf_line(W0, unit, pc, offA + unit);
        }
        const __m512i a0 = _mm512_load_si512(WA + 128 * b), a1 = _mm512_load_si512(WA + 128 * b + 64);
        const __m512i b0 = _mm512_load_si512(WB + 128 * b), b1 = _mm512_load_si512(WB + 128 * b + 64);
        const __m512i alo0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(a0, low4));
        const __m512i ahi0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(a0, 4), low4));
        const __m512i alo1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(a1, low4));
        const __m512i ahi1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(a1, 4), low4));
        const __m512i blo0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(b0, low4));
        const __m512i bhi0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b0, 4), low4));
        const __m512i blo1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(b1, low4));
        const __m512i bhi1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b1, 4), low4));
        const __m512 swA = e4m3x16_div256(_mm_load_si128((const __m128i *)(SFA + 16 * b)));
        const __m512 swB = e4m3x16_div256(_mm_load_si128((const __m128i *)(SFB + 16 * b)));
        for (int i = 0; i < mt; i++) {
            const uint8_t *tok = toks + (size_t)(m0 + i) * tstride;
            const int8_t *a = (const int8_t *)tok + 16 * b;
            const int32_t *aof = (const int32_t *)(tok + K);
            const float *sfa = (const float *)(aof + nb);
            const __m512i x0 = _mm512_set1_epi32(load_i32(a)), x1 = _mm512_set1_epi32(load_i32(a + 4));
            const __m512i x2 = _mm512_set1_epi32(load_i32(a + 8)), x3 = _mm512_set1_epi32(load_i32(a + 12));
            const __m512i seed = _mm512_set1_epi32(aof[b]);
            const __m512 sa = _mm512_set1_ps(sfa[b]);
            __m512i sA = _mm512_dpbusd_epi32(seed, alo0, x0), sB = _mm512_dpbusd_epi32(seed, blo0, x0);
            sA = _mm512_dpbusd_epi32(sA, ahi0, x1), sB = _mm512_dpbusd_epi32(sB, bhi0, x1);
            sA = _mm512_dpbusd_epi32(sA, alo1, x2), sB = _mm512_dpbusd_epi32(sB, blo1, x2);
            sA = _mm512_dpbusd_epi32(sA, ahi1, x3), sB = _mm512_dpbusd_epi32(sB, bhi1, x3);
            accA[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sA), _mm512_mul_ps(swA, sa), accA[i]);
            accB[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sB), _mm512_mul_ps(swB, sa), accB[i]);
        }
    }
    float v[2][MP][16];
    for (int i = 0; i < mt; i++) _mm512_storeu_ps(v[0][i], accA[i]), _mm512_storeu_ps(v[1][i], accB[i]);
    const int64_t N = l->w->N;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < mt; i++)
            for (int r = 0; r < 16 && 16 * (t + p) + r < N; r++) {
                const int64_t n = 16 * (t + p) + r;
                float y = v[p][i][r] * l->row_scale[n];
                if (l->w->bias) y += l->w->bias[n];
                moq_y_store(l->y, l->y_elem, N, m0 + i, n, y);
            }
}

static void tile_pair_any(const moq_linear_launch *l, const uint8_t *toks, size_t tstride, int64_t t, int64_t m0, int mt,
                          const moq_pf_chunks *pc) {
    switch (mt) {
#define CASE(n) case n: tile_pair_tokens(l, toks, tstride, t, m0, n, pc); break;
        CASE(6) CASE(7) CASE(8)
#undef CASE
    default: break;
    }
}

moq_status moq_linear_nvfp4_vnni_run_avx512(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const int64_t M = l->M, K = l->w->K, tiles = (l->w->N + 15) / 16;
    const size_t tstride = token_bytes(K);
    uint8_t *toks = l->ws, *thr0 = toks + (size_t)M * tstride;
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    /* Decode (M <= 4): tokens prepared before the team starts, so the join is the only sync point. */
    if (M <= 4)
        for (int64_t m = 0; m < M; m++) prepare_token(l, m, toks + (size_t)m * tstride, thr0);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *tmp = thr0 + (size_t)omp_get_thread_num() * thread_bytes(K);
        if (M > 4) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare_token(l, m, toks + (size_t)m * tstride, tmp);
        }
        if (M >= PMIN && M <= MP) {
            /* Chunks as below (MOQ_PF_CHUNK is even: a chunk holds whole pairs; the odd last tile alone). */
            moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
            moq_pf_chunks pc;
            int64_t t0;
            while (moq_pf_walk_next(&wk, &t0, &pc)) {
                for (int64_t t = t0; t < pc.t1; t += 2) {
                    if (t + 1 < pc.t1) tile_pair_any(l, toks, tstride, t, 0, (int)M, &pc);
                    else
                        switch (M) {
#define CASE(n) case n: tile_tokens(l, toks, tstride, t, 0, n, &pc); break;
                            CASE(6) CASE(7) CASE(8)
#undef CASE
                        default: break;
                        }
                }
            }
        } else {
            /* Chunks of MOQ_PF_CHUNK tiles, each thread claiming its next one ahead (tile_prefetch.h). */
            moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
            moq_pf_chunks pc;
            int64_t t0;
            while (moq_pf_walk_next(&wk, &t0, &pc)) {
                for (int64_t t = t0; t < pc.t1; t++)
                    for (int64_t m0 = 0; m0 < M; m0 += MT) {
                        switch (M - m0 < MT ? M - m0 : MT) {
#define CASE(n) case n: tile_tokens(l, toks, tstride, t, m0, n, &pc); break;
                            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
                        default: break;
                        }
                    }
            }
        }
    }
    return MOQ_OK;
}
