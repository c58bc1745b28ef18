/* linear_fp8_avx512.c — the AVX-512 form of linear_fp8_avx2.c (every e4m3 pair; block-scaled ones
 * with per-block sums, 6 tokens per pass): same rows16k4 layout, NaN-row flags, pack and workspace
 * (the AVX2 file's hooks), same exact decode, on 16-row zmm vectors: one
 * 64-byte line of the layout is k 4g..4g+3 of all 16 rows of a tile, and vpshufb (per 128-bit
 * lane: rows 4L..4L+3) puts column j of every row in a dword's top byte. Three integer ops per 16
 * weights, one FMA per token; block factors as linear_cpu.h (split where they leave the f32 range;
 * not run on hardware yet: the development machine has no AVX-512). MT = 8 tokens share each
 * decoded vector; M = 1 and 2 keep four / two accumulators so FMA latency does not bound them.
 * Activations: the AVX-512 quantizers (moq_act_dequant_row_avx512, bit-identical to the reference
 * ones). Threads: chunks of tiles
 * claimed one ahead, the codes prefetched 16 KiB ahead along them (tile_prefetch.h), as the AVX2 file.
 * Reference: linear_ref.c. Test: tests/kernels/test_linear.c.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/blk_scale_avx512.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define MT 8
#define X_SCALE 0x1p112f

static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16k4_size(w->N, w->K) + 63) & ~(size_t)63; }
static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }

static int64_t bk_of(const moq_weight *w) { return w->w.group_cols > 1 ? w->w.group_cols : 0; }
static size_t nan_bytes(const moq_weight *w) { return ((size_t)w->N + 63) & ~(size_t)63; }
static bool row_scales(const moq_weight *w) { return w->w.scale_elem == MOQ_ELEM_E8M0; }

/* Must match linear_fp8_avx2.c (its pack and workspace hooks):
 * X f32 [M, K4], sm f32 [M], then the block-scale area; per thread: quantizer scratch 2K + 64. */
static size_t x_bytes(const moq_weight *w, int64_t M) { return ((size_t)M * (size_t)k4(w) * 4 + (size_t)M * 4 + 63) & ~(size_t)63; }
static size_t shared_bytes(const moq_weight *w, int64_t M) { return x_bytes(w, M) + (((size_t)M * (size_t)(w->K / 32 + 1) * 4 + 63) & ~(size_t)63); }
static size_t thread_bytes(const moq_weight *w) { return ((size_t)w->K * 2 + 64 + 63) & ~(size_t)63; }

/* Unblocked pairs: the AVX-512 quantizer (bit-identical to the reference) gives e4m3 values, scaled
 * by 2^112 here. Block-scaled pairs: the reference quantizer gives the codes (decoded through tab,
 * 2^112 folded in) and the block scales apart (sx). */
static void prepare_row(const moq_linear_launch *l, int64_t m, float *X, float *sm, float *SX, const float *tab, uint8_t *tmp) {
    const int64_t K = l->w->K, K4 = k4(l->w), bk = bk_of(l->w);
    float *xr = X + m * K4;
    if (!bk) {
        moq_act_dequant_row_avx512(l, m, xr, &sm[m], tmp);
        for (int64_t k = 0; k < K; k++) xr[k] *= X_SCALE;
    } else {
        float *sx = SX + m * (K / (bk > 0 ? bk : 32));
        moq_x_row_f32(l->x, l->x_elem, K, m, xr);
        sm[m] = 1.0f;
        if (l->pair == MOQ_PAIR_FP8_BLK128) {
            moq_act_fp8_g128_ref(xr, (size_t)K, tmp, sx);
        } else {
            uint8_t *sf = tmp + K;
            moq_act_mxfp8_ref(xr, (size_t)K, tmp, sf);
            for (int64_t b = 0; b < K / 32; b++) sx[b] = moq_e8m0_decode(sf[b]);
        }
        for (int64_t k = 0; k < K; k++) xr[k] = tab[tmp[k]];
    }
    for (int64_t k = K; k < K4; k++) xr[k] = 0.0f;
}

/* e8m0 codes of 16 rows -> 2^(c-127) (c = 0 -> 2^-127, subnormal; 0xFF rejected at create). */
static inline __m512 e8m0x16(__m128i c) {
    const __m512i v = _mm512_cvtepu8_epi32(c);
    const __mmask16 z = _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512());
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(v, 23), z, _mm512_set1_epi32(0x00400000)));
}

/* Code (r, 4g+j) of 16 rows -> f32 D(code)·2^-120. */
static inline __m512 dec(__m512i v, __m512i idx) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(_mm512_shuffle_epi8(v, idx), 4), _mm512_set1_epi32((int)0x87F00000u)));
}

#define NA(mt) ((mt) == 1 ? 4 : (mt) == 2 ? 2 : 1) /* accumulators per (token, half) */

/* blocked, exact: compile-time 0/1 (exact: moq_blk_exact, one FMA per block; else the block factor split). */
static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, const float *X, const float *sm, const float *SX,
                                                             int64_t t, int64_t m0, const int mt, const int blocked, const int exact,
                                                             const moq_pf_chunks *pc) {
    const moq_weight *w = l->w;
    const int64_t K4 = k4(w), G = K4 / 4, N = w->N, bk = blocked && bk_of(w) > 0 ? bk_of(w) : K4, nblk = blocked ? w->K / bk : 1;
    const uint8_t *W = (const uint8_t *)l->packed + t * G * 64;
    const uint8_t *nan = (const uint8_t *)l->packed + codes_bytes(w), *SFW = nan + nan_bytes(w) + t * nblk * 16;
    const __m512i idx[4] = {
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 4, -1, -1, -1, 8, -1, -1, -1, 12)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 1, -1, -1, -1, 5, -1, -1, -1, 9, -1, -1, -1, 13)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 2, -1, -1, -1, 6, -1, -1, -1, 10, -1, -1, -1, 14)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 3, -1, -1, -1, 7, -1, -1, -1, 11, -1, -1, -1, 15))};
    const int na = NA(mt);
    __m512 acc[MT][4], tot[MT];
    for (int i = 0; i < mt; i++) tot[i] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < nblk; kb++) {
        for (int i = 0; i < mt; i++)
            for (int a = 0; a < na; a++) acc[i][a] = _mm512_setzero_ps();
        const int64_t g1 = blocked ? (kb + 1) * bk / 4 : G;
        for (int64_t g = kb * bk / 4; g < g1; g++) {
            if (m0 == 0) moq_pf_line(l->packed, G * 64, pc, (t * G + g) * 64 + MOQ_PF_BYTES); /* one line per g; first pass only */
            const __m512i v = _mm512_load_si512(W + 64 * g);
            for (int j = 0; j < 4; j++) {
                const __m512 wv = dec(v, idx[j]);
                for (int i = 0; i < mt; i++)
                    acc[i][j % na] = _mm512_fmadd_ps(wv, _mm512_set1_ps(X[(m0 + i) * K4 + 4 * g + j]), acc[i][j % na]);
            }
        }
        for (int i = 0; i < mt; i++) {
            __m512 s = acc[i][0];
            for (int a = 1; a < na; a++) s = _mm512_add_ps(s, acc[i][a]);
            if (!blocked) {
                tot[i] = s;
            } else if (exact) { /* tot += s · F, F = weight scale × token block scale × 2^8 (linear_cpu.h) */
                const float sx = SX[(m0 + i) * nblk + kb];
                const __m512 sc = row_scales(w) ? _mm512_mul_ps(e8m0x16(_mm_load_si128((const __m128i *)(SFW + 16 * kb))), _mm512_set1_ps(sx * 256.0f))
                                                : _mm512_set1_ps(((const float *)w->scale)[(16 * t / 128) * nblk + kb] * (sx * 256.0f));
                tot[i] = _mm512_fmadd_ps(s, sc, tot[i]);
            } else if (row_scales(w)) {
                tot[i] = moq_mx_fma_split16(s, _mm_load_si128((const __m128i *)(SFW + 16 * kb)), SX[(m0 + i) * nblk + kb], tot[i]);
            } else {
                float fa, fb;
                moq_blk128_factor(((const float *)w->scale)[(16 * t / 128) * nblk + kb], SX[(m0 + i) * nblk + kb], &fa, &fb);
                tot[i] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(fb)), _mm512_set1_ps(fa), tot[i]);
            }
        }
    }
    for (int i = 0; i < mt; i++) {
        float v[16]; /* unblocked: tot counts in 2^-8 (exact ×256); block-scaled: F holds the 2^8 */
        _mm512_storeu_ps(v, blocked ? tot[i] : _mm512_mul_ps(tot[i], _mm512_set1_ps(256.0f)));
        const int64_t m = m0 + i;
        for (int r = 0; r < 16 && 16 * t + r < N; r++) {
            const int64_t n = 16 * t + r;
            float y = nan[n] ? NAN : v[r] * sm[m] * l->row_scale[n];
            if (w->bias) y += w->bias[n];
            moq_y_store(l->y, l->y_elem, N, m, n, y);
        }
    }
}

moq_status moq_linear_fp8_k4_run_avx512(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, tiles = (w->N + 15) / 16;
    const int blocked = bk_of(w) != 0, mtmax = blocked ? 6 : MT; /* block + total accumulators */
    float *X = l->ws, *sm = X + M * k4(w), *SX = (float *)((uint8_t *)l->ws + x_bytes(w, M));
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    float tab[256];
    for (int c = 0; c < 256; c++) tab[c] = moq_e4m3_decode((uint8_t)c) * X_SCALE;
    /* Decode (M <= 4): rows prepared before the team starts, so the join is the only sync point. */
    if (M <= 4)
        for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, SX, tab, thr0);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *tmp = thr0 + (size_t)omp_get_thread_num() * thread_bytes(w);
        if (M > 4) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, SX, tab, tmp);
        }
        /* every row prepared (the omp for's barrier): each thread reads the same answer */
        const bool exact = !blocked || moq_blk_exact(w, l->packed, SX, M);
        /* Chunks of MOQ_PF_CHUNK tiles, each thread claiming its next one ahead (tile_prefetch.h). */
        moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
        moq_pf_chunks pc;
        int64_t t0;
        while (moq_pf_walk_next(&wk, &t0, &pc)) {
            for (int64_t t = t0; t < pc.t1; t++)
                for (int64_t m0 = 0; m0 < M; m0 += mtmax) {
                    const int64_t mt = M - m0 < mtmax ? M - m0 : mtmax;
                    if (blocked && exact) {
                        switch (mt) {
#define CASE(n) case n: tile_tokens(l, X, sm, SX, t, m0, n, 1, 1, &pc); break;
                            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5)
#undef CASE
                        default: tile_tokens(l, X, sm, SX, t, m0, 6, 1, 1, &pc); break;
                        }
                    } else if (blocked) {
                        switch (mt) {
#define CASE(n) case n: tile_tokens(l, X, sm, SX, t, m0, n, 1, 0, &pc); break;
                            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5)
#undef CASE
                        default: tile_tokens(l, X, sm, SX, t, m0, 6, 1, 0, &pc); break;
                        }
                    } else {
                        switch (mt) {
#define CASE(n) case n: tile_tokens(l, X, sm, SX, t, m0, n, 0, 1, &pc); break;
                            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
                        default: tile_tokens(l, X, sm, SX, t, m0, 8, 0, 1, &pc); break;
                        }
                    }
                }
        }
    }
    return MOQ_OK;
}
