/* linear_nvfp4_avx2.c — NVFP4 W4A4 on AVX2: the integer block dot products of
 * linear_nvfp4_avx512.c with vpmaddubsw + vpmaddwd instead of vpdpbusd (NUMERICS §2.5).
 *
 * Same packed layout (nvfp4_vnni16 codes + rows16 e4m3 block scales; the VNNI row's pack hooks)
 * and the same workspace. A 64-byte line of the layout is two ymm: rows 0-7 and rows 8-15, one
 * dword per row holding k 8g..8g+3 (low nibbles) and 8g+4..8g+7 (high nibbles).
 *   vpmaddubsw(u = 2w + 12 in [0, 24], s = 2a in [-12, 12]) -> i16 pairs, |pair| <= 576
 *   four of them (the 16 k of one block) summed in i16: <= 2304, then vpmaddwd(·, 1) -> i32 per
 *   row = Σ (2w + 12)(2a) over the block; + AOF = −12·Σ 2a gives Σ (2w)(2a) exactly.
 *   y[m, n] = alpha[n] · Σ_b f32(int_b) · (D4(SFw)/256 · SFa)  (+ bias)
 * Every operation after the integer sum is the one linear_nvfp4_avx512.c does, in the same order,
 * so the two rows give the same bits (tests/kernels/test_linear.c checks it where both run).
 *
 * Tokens: M <= 2 (decode) in one pass over K with both 8-row halves per block (tile_tokens_1pass);
 * 3..6 per pass one 8-row half at a time (MT accumulators), the tile's codes (K/2 + K/16 bytes
 * per 16 rows) staying in L1/L2 between the two passes. M >= 12 (prefill): each tile's shuffled
 * code planes and scales decoded once into a per-thread buffer (tile_tokens_planes; the
 * workspace is the VNNI row's plus that buffer: moq_linear_nvfp4_maddubs_workspace), the prepared
 * tokens stored in block-interleaved groups of 6 (scatter_token). Activations: moq_act_nvfp4_avx2 (bit-exact
 * twin of moq_act_nvfp4_ref), which also gives 2·D2(code) and the block sums.
 * Threads: OpenMP, chunks of 4 tiles claimed one ahead; the first pass over a tile prefetches the
 * codes 16 KiB ahead into the thread's own next chunk (tile_prefetch.h).
 * Reference: linear_ref.c. Test: test_linear.c.
 */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/y_store_avx2.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define MT 6

/* Must match linear_nvfp4_avx512.c (shared packed layout and workspace). */
static size_t codes_bytes(const moq_weight *w) { return (moq_layout_nvfp4_vnni16_size(w->N, w->K) + 63) & ~(size_t)63; }
static size_t token_bytes(int64_t K) { return ((size_t)K + (size_t)K / 2 + 63) & ~(size_t)63; }
static size_t thread_bytes(int64_t K) { return ((size_t)K * 4 + (size_t)K + (size_t)K / 16 + 127) & ~(size_t)63; }

/* 8 e4m3 codes -> f32 / 256, exact (f16 shift; NaN codes -> f16 NaN). */
static inline __m256 e4m3x8_div256(__m128i c8) {
    const __m128i w = _mm_cvtepu8_epi16(c8);
    __m128i t = _mm_slli_epi16(w, 7);
    t = _mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000)));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7F));
    return _mm256_cvtph_ps(_mm_or_si128(t, nan));
}

/* 16 e4m3 codes (both 8-row halves of a block) -> f32 / 256, exact, as e4m3x8_div256 but the
 * integer steps once on 16 lanes: 10 vector ops for 16 scales instead of 16. */
static inline void e4m3x16_div256(__m128i c16, __m256 *lo, __m256 *hi) {
    const __m256i w = _mm256_cvtepu8_epi16(c16);
    __m256i t = _mm256_slli_epi16(w, 7);
    t = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000)));
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F));
    t = _mm256_or_si256(t, nan);
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(t));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(t, 1));
}

static void prepare_token(const moq_linear_launch *l, int64_t m, uint8_t *tok, uint8_t *tmp) {
    const int64_t K = l->w->K;
    float *xf = (float *)tmp;
    uint8_t *sf = tmp + 4 * K + K / 2;
    int8_t *a8 = (int8_t *)tok;
    int32_t *aof = (int32_t *)(tok + K);
    float *sfa = (float *)(aof + K / 16);
    moq_x_row_f32(l->x, l->x_elem, K, m, xf);
    moq_act_nvfp4_avx2(xf, (size_t)K, 1.0f / l->a_scale, l->rcpa_corr, NULL, sf, a8, aof);
    for (int64_t b = 0; b < K / 16; b++) {
        aof[b] *= -12;
        sfa[b] = moq_e4m3_decode(sf[b]) * 64.0f;
    }
}

static inline int32_t load_i32(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* One 16-k block of one token against 8 rows: the four code planes (lo0 hi0: k 0-3 / 4-7 of the
 * first 8 k, lo1 hi1 of the next 8, as u8 2w + 12) times the token's 2·D2 codes a[16] by vpmaddubsw,
 * summed to i32, plus the token's offset aof (its -12·Σa), then acc + that · (sw · sfa): the block's
 * exact integer dot product scaled once. Every token loop of this file runs exactly this. */
static inline __attribute__((always_inline)) __m256 block_fma(__m256i lo0, __m256i hi0, __m256i lo1, __m256i hi1, const int8_t *a,
                                                             int32_t aof, float sfa, __m256 sw, __m256 acc) {
    const __m256i p0 = _mm256_maddubs_epi16(lo0, _mm256_set1_epi32(load_i32(a)));
    const __m256i p1 = _mm256_maddubs_epi16(hi0, _mm256_set1_epi32(load_i32(a + 4)));
    const __m256i p2 = _mm256_maddubs_epi16(lo1, _mm256_set1_epi32(load_i32(a + 8)));
    const __m256i p3 = _mm256_maddubs_epi16(hi1, _mm256_set1_epi32(load_i32(a + 12)));
    const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
    const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), _mm256_set1_epi32(aof));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(sw, _mm256_set1_ps(sfa)), acc);
}

/* y[m, 16 t ..] = v · row_scale (+ bias) for one token, as the scalar epilogue (unfused, bf16 by
 * round-to-nearest-even with NaN -> 0xFFFF: moq_y_store), 8 lanes at a time on a full tile. */
static inline void store_row16(const moq_linear_launch *l, int64_t m, int64_t t, __m256 v0, __m256 v1) {
    const int64_t N = l->w->N, n0 = 16 * t;
    if (!moq_y_row16_fits_avx2(l, n0)) {
        float v[16];
        _mm256_storeu_ps(v, v0);
        _mm256_storeu_ps(v + 8, v1);
        for (int r = 0; r < 16 && n0 + r < N; r++) {
            float y = v[r] * l->row_scale[n0 + r];
            if (l->w->bias) y += l->w->bias[n0 + r];
            moq_y_store(l->y, l->y_elem, N, m, n0 + r, y);
        }
        return;
    }
    v0 = _mm256_mul_ps(v0, _mm256_loadu_ps(l->row_scale + n0)), v1 = _mm256_mul_ps(v1, _mm256_loadu_ps(l->row_scale + n0 + 8));
    if (l->w->bias) v0 = _mm256_add_ps(v0, _mm256_loadu_ps(l->w->bias + n0)), v1 = _mm256_add_ps(v1, _mm256_loadu_ps(l->w->bias + n0 + 8));
    moq_y_row16_avx2(l, m, n0, v0, v1);
}

/* y rows of tile t for tokens [m0, m0 + mt); mt is a constant after inlining. */
static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, const uint8_t *toks, size_t tstride,
                                                             int64_t t, int64_t m0, const int mt, const moq_pf_chunks *pc) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W0 = (const uint8_t *)l->packed, *SF0 = W0 + codes_bytes(l->w);
    const uint8_t *W = W0 + t * K * 8, *SF = SF0 + t * K;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    /* One half (8 rows) at a time over all of K: mt accumulators + 4 planes + constants fit the 16
     * ymm registers (both halves at once spill); the second pass reads the tile from L1/L2. */
    __m256 acc[MT][2];
    for (int h = 0; h < 2; h++) {
        __m256 a8[MT]; /* this half's accumulators, indexed by constants only: registers (acc[i][h]
                        * with the variable h kept all of them in memory, a store per FMA) */
#pragma GCC unroll 6
        for (int i = 0; i < mt; i++) a8[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            if (h == 0 && m0 == 0) { /* the first pass over the tile streams it from DRAM */
                moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES);
                moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES + 64);
            }
            const __m256 sw = e4m3x8_div256(_mm_loadl_epi64((const __m128i *)(SF + 16 * b + 8 * h)));
            const __m256i v0 = _mm256_load_si256((const __m256i *)(W + 128 * b + 32 * h));
            const __m256i v1 = _mm256_load_si256((const __m256i *)(W + 128 * b + 64 + 32 * h));
            const __m256i lo0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v0, low4));
            const __m256i hi0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4));
            const __m256i lo1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v1, low4));
            const __m256i hi1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4));
#pragma GCC unroll 6
            for (int i = 0; i < mt; i++) {
                const uint8_t *tok = toks + (size_t)(m0 + i) * tstride;
                const int8_t *a = (const int8_t *)tok + 16 * b;
                const int32_t *aof = (const int32_t *)(tok + K);
                const float *sfa = (const float *)(aof + nb);
                a8[i] = block_fma(lo0, hi0, lo1, hi1, a, aof[b], sfa[b], sw, a8[i]);
            }
        }
#pragma GCC unroll 6
        for (int i = 0; i < mt; i++) acc[i][h] = a8[i];
    }
    for (int i = 0; i < mt; i++) store_row16(l, m0 + i, t, acc[i][0], acc[i][1]);
}

/* Prefill (M >= PLANE_M): the tile's shuffled code planes and block scales decoded once into the
 * thread's buffer, then read by every token group, instead of re-derived by each (10 integer ops
 * for the planes and 8 for the scales per block and half, against 72 for 6 tokens' dot products).
 * Buffer per (half h, block b), 160 bytes: the planes lo0, hi0, lo1, hi1 (as tile_tokens makes
 * them), then sw f32 [8]. The same values as tile_tokens: the same bits. */
#define PLANE_M 12
#define PLANE_BYTES 160
static size_t planes_bytes(int64_t K) { return (size_t)(K / 16) * 2 * PLANE_BYTES + 64; }
/* Per thread: the planes, then one token prepared before it is scattered into its group. */
static size_t ext_bytes(int64_t K) { return planes_bytes(K) + token_bytes(K); }

size_t moq_linear_nvfp4_maddubs_workspace(const moq_weight *w, int64_t M, int n_threads) {
    return moq_linear_nvfp4_vnni_workspace(w, M, n_threads) + (size_t)n_threads * ext_bytes(w->K);
}

/* The prepared tokens at M >= PLANE_M, in groups of MT (the last one mt = M mod MT wide) at
 * toks + m0 · tstride (the same bytes as M rows): per block b, 24 · mt bytes: the mt tokens'
 * 2·D2 codes (16 each), then their aof (i32), then their sfa (f32). One pointer and one stream
 * per group instead of three per token (the 18 pointers of 6 tokens did not fit the registers). */
static void scatter_token(const uint8_t *tok, int64_t K, uint8_t *grp, int mt, int i) {
    const int64_t nb = K / 16;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = grp + (size_t)b * 24 * (size_t)mt;
        memcpy(o + 16 * i, tok + 16 * b, 16);
        memcpy(o + 16 * mt + 4 * i, tok + K + 4 * b, 4);
        memcpy(o + 20 * mt + 4 * i, tok + K + 4 * nb + 4 * b, 4);
    }
}

static void decode_planes(const moq_linear_launch *l, int64_t t, uint8_t *buf, const moq_pf_chunks *pc) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W0 = (const uint8_t *)l->packed, *SF0 = W0 + codes_bytes(l->w);
    const uint8_t *W = W0 + t * K * 8, *SF = SF0 + t * K;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES);
        moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES + 64);
        for (int h = 0; h < 2; h++) {
            uint8_t *o = buf + (size_t)(h * nb + b) * PLANE_BYTES;
            const __m256i v0 = _mm256_load_si256((const __m256i *)(W + 128 * b + 32 * h));
            const __m256i v1 = _mm256_load_si256((const __m256i *)(W + 128 * b + 64 + 32 * h));
            _mm256_store_si256((__m256i *)o, _mm256_shuffle_epi8(lut, _mm256_and_si256(v0, low4)));
            _mm256_store_si256((__m256i *)(o + 32), _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4)));
            _mm256_store_si256((__m256i *)(o + 64), _mm256_shuffle_epi8(lut, _mm256_and_si256(v1, low4)));
            _mm256_store_si256((__m256i *)(o + 96), _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4)));
            _mm256_store_ps((float *)(o + 128), e4m3x8_div256(_mm_loadl_epi64((const __m128i *)(SF + 16 * b + 8 * h))));
        }
    }
}

/* tile_tokens on the decoded planes of tile t (buf) for the token group at grp (scatter_token). */
static inline __attribute__((always_inline)) void tile_tokens_planes(const moq_linear_launch *l, const uint8_t *grp, int64_t t,
                                                                    int64_t m0, const int mt, const uint8_t *buf) {
    const int64_t K = l->w->K, nb = K / 16;
    __m256 acc[MT][2];
    for (int h = 0; h < 2; h++) {
        __m256 a8[MT];
#pragma GCC unroll 6
        for (int i = 0; i < mt; i++) a8[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *o = buf + (size_t)(h * nb + b) * PLANE_BYTES;
            const __m256i lo0 = _mm256_load_si256((const __m256i *)o), hi0 = _mm256_load_si256((const __m256i *)(o + 32));
            const __m256i lo1 = _mm256_load_si256((const __m256i *)(o + 64)), hi1 = _mm256_load_si256((const __m256i *)(o + 96));
            const __m256 sw = _mm256_load_ps((const float *)(o + 128));
            const uint8_t *g = grp + (size_t)b * 24 * (size_t)mt;
#pragma GCC unroll 6
            for (int i = 0; i < mt; i++) {
                const int8_t *a = (const int8_t *)g + 16 * i;
                int32_t aof;
                float sfa;
                memcpy(&aof, g + 16 * mt + 4 * i, 4);
                memcpy(&sfa, g + 20 * mt + 4 * i, 4);
                a8[i] = block_fma(lo0, hi0, lo1, hi1, a, aof, sfa, sw, a8[i]);
            }
        }
#pragma GCC unroll 6
        for (int i = 0; i < mt; i++) acc[i][h] = a8[i];
    }
    for (int i = 0; i < mt; i++) store_row16(l, m0 + i, t, acc[i][0], acc[i][1]);
}

/* Decode (mt <= 2): both 8-row halves of each block in one pass over K, so the weight stream
 * from DRAM overlaps the arithmetic. Two passes (tile_tokens) read the tile from DRAM in the first
 * and from L2 in the second, with DRAM idle: at M = 1 that measured 17-18 GB/s of weights per
 * thread against ~28 for either alone (compute with the tile in L2, or one core's DRAM share).
 * 2·mt accumulators + 4 planes of one half + constants fit 16 ymm for mt <= 2. Per row the same
 * integer sums and f32 steps in the same order as tile_tokens: the same bits. */
static inline __attribute__((always_inline)) void tile_tokens_1pass(const moq_linear_launch *l, const uint8_t *toks, size_t tstride,
                                                                   int64_t t, int64_t m0, const int mt, const moq_pf_chunks *pc) {
    const int64_t K = l->w->K, nb = K / 16;
    const uint8_t *W0 = (const uint8_t *)l->packed, *SF0 = W0 + codes_bytes(l->w);
    const uint8_t *W = W0 + t * K * 8, *SF = SF0 + t * K;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[2][2];
    for (int i = 0; i < mt; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (m0 == 0) { /* later token groups find the tile in L2 */
            moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES);
            moq_pf_line(W0, K * 8, pc, t * K * 8 + 128 * b + MOQ_PF_BYTES + 64);
        }
        __m256 swh[2];
        e4m3x16_div256(_mm_load_si128((const __m128i *)(SF + 16 * b)), &swh[0], &swh[1]);
        for (int h = 0; h < 2; h++) {
            const __m256i v0 = _mm256_load_si256((const __m256i *)(W + 128 * b + 32 * h));
            const __m256i v1 = _mm256_load_si256((const __m256i *)(W + 128 * b + 64 + 32 * h));
            const __m256i lo0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v0, low4));
            const __m256i hi0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4));
            const __m256i lo1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v1, low4));
            const __m256i hi1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4));
            for (int i = 0; i < mt; i++) {
                const uint8_t *tok = toks + (size_t)(m0 + i) * tstride;
                const int8_t *a = (const int8_t *)tok + 16 * b;
                const int32_t *aof = (const int32_t *)(tok + K);
                const float *sfa = (const float *)(aof + nb);
                acc[i][h] = block_fma(lo0, hi0, lo1, hi1, a, aof[b], sfa[b], swh[h], acc[i][h]);
            }
        }
    }
    for (int i = 0; i < mt; i++) store_row16(l, m0 + i, t, acc[i][0], acc[i][1]);
}

moq_status moq_linear_nvfp4_maddubs_run_avx2(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const int64_t M = l->M, K = l->w->K, tiles = (l->w->N + 15) / 16;
    const size_t tstride = token_bytes(K);
    uint8_t *toks = l->ws, *thr0 = toks + (size_t)M * tstride;
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    uint8_t *pl0 = (uint8_t *)l->ws + moq_linear_nvfp4_vnni_workspace(l->w, M, l->n_threads);
    /* Decode (M <= 4): tokens prepared before the team starts, so the join is the only sync point. */
    if (M <= 4)
        for (int64_t m = 0; m < M; m++) prepare_token(l, m, toks + (size_t)m * tstride, thr0);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *tmp = thr0 + (size_t)omp_get_thread_num() * thread_bytes(K);
        uint8_t *planes = pl0 + (size_t)omp_get_thread_num() * ext_bytes(K), *tok1 = planes + planes_bytes(K);
        if (M >= PLANE_M) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) {
                const int64_t m0 = m / MT * MT;
                prepare_token(l, m, tok1, tmp);
                scatter_token(tok1, K, toks + (size_t)m0 * tstride, (int)(M - m0 < MT ? M - m0 : MT), (int)(m - m0));
            }
        } else if (M > 4) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare_token(l, m, toks + (size_t)m * tstride, tmp);
        }
        /* Chunks of MOQ_PF_CHUNK tiles, each thread claiming its next one ahead (tile_prefetch.h). */
        moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
        moq_pf_chunks pc;
        int64_t t0;
        while (moq_pf_walk_next(&wk, &t0, &pc)) {
            for (int64_t t = t0; t < pc.t1; t++) {
                if (M >= PLANE_M) {
                    decode_planes(l, t, planes, &pc);
                    for (int64_t m0 = 0; m0 < M; m0 += MT) {
                        const uint8_t *grp = toks + (size_t)m0 * tstride;
                        switch (M - m0 < MT ? M - m0 : MT) {
                        case 1: tile_tokens_planes(l, grp, t, m0, 1, planes); break;
                        case 2: tile_tokens_planes(l, grp, t, m0, 2, planes); break;
                        case 3: tile_tokens_planes(l, grp, t, m0, 3, planes); break;
                        case 4: tile_tokens_planes(l, grp, t, m0, 4, planes); break;
                        case 5: tile_tokens_planes(l, grp, t, m0, 5, planes); break;
                        default: tile_tokens_planes(l, grp, t, m0, 6, planes); break;
                        }
                    }
                    continue;
                }
                for (int64_t m0 = 0; m0 < M; m0 += MT) {
                    switch (M - m0 < MT ? M - m0 : MT) {
                    case 1: tile_tokens_1pass(l, toks, tstride, t, m0, 1, &pc); break;
                    case 2: tile_tokens_1pass(l, toks, tstride, t, m0, 2, &pc); break;
                    case 3: tile_tokens(l, toks, tstride, t, m0, 3, &pc); break;
                    case 4: tile_tokens(l, toks, tstride, t, m0, 4, &pc); break;
                    case 5: tile_tokens(l, toks, tstride, t, m0, 5, &pc); break;
                    default: tile_tokens(l, toks, tstride, t, m0, 6, &pc); break;
                    }
                }
            }
        }
    }
    return MOQ_OK;
}
