/* linear_fp8_avx512.c — the AVX-512 form of linear_fp8_avx2.c: same rows16k4 layout, NaN-row
 * flags, pack and workspace (the AVX2 file's hooks), same exact decode, on 16-row zmm vectors: one
 * 64-byte line of the layout is k 4g..4g+3 of all 16 rows of a tile, and vpshufb (per 128-bit
 * lane: rows 4L..4L+3) puts column j of every row in a dword's top byte. Three integer ops per 16
 * weights, one FMA per token. MT = 8 tokens share each decoded vector; M = 1 and 2 keep four / two
 * accumulators so FMA latency does not bound them. Activations: the AVX-512 quantizers
 * (moq_act_dequant_row_avx512, bit-identical to the reference ones).
 * Reference: linear_ref.c. Test: tests/kernels/test_linear.c.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/layout/layout.h"

#define MT 8
#define X_SCALE 0x1p112f

static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16k4_size(w->N, w->K) + 63) & ~(size_t)63; }
static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }

/* Must match linear_fp8_avx2.c (its pack and workspace hooks; this file runs the unblocked pairs):
 * X f32 [M, K4], sm f32 [M], then the block-scale area; per thread: quantizer scratch 2K + 64. */
static size_t x_bytes(const moq_weight *w, int64_t M) { return ((size_t)M * (size_t)k4(w) * 4 + (size_t)M * 4 + 63) & ~(size_t)63; }
static size_t shared_bytes(const moq_weight *w, int64_t M) { return x_bytes(w, M) + (((size_t)M * (size_t)(w->K / 32 + 1) * 4 + 63) & ~(size_t)63); }
static size_t thread_bytes(const moq_weight *w) { return ((size_t)w->K * 2 + 64 + 63) & ~(size_t)63; }

static void prepare_row(const moq_linear_launch *l, int64_t m, float *X, float *sm, uint8_t *tmp) {
    const int64_t K = l->w->K, K4 = k4(l->w);
    float *xr = X + m * K4;
    moq_act_dequant_row_avx512(l, m, xr, &sm[m], tmp);
    for (int64_t k = 0; k < K; k++) xr[k] *= X_SCALE;
    for (int64_t k = K; k < K4; k++) xr[k] = 0.0f;
}

/* Code (r, 4g+j) of 16 rows -> f32 D(code)·2^-120. */
static inline __m512 dec(__m512i v, __m512i idx) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(_mm512_shuffle_epi8(v, idx), 4), _mm512_set1_epi32((int)0x87F00000u)));
}

#define NA(mt) ((mt) == 1 ? 4 : (mt) == 2 ? 2 : 1) /* accumulators per (token, half) */

static inline __attribute__((always_inline)) void tile_tokens(const moq_linear_launch *l, const float *X, const float *sm, int64_t t,
                                                             int64_t m0, const int mt) {
    const moq_weight *w = l->w;
    const int64_t K4 = k4(w), G = K4 / 4, N = w->N;
    const uint8_t *W = (const uint8_t *)l->packed + t * G * 64;
    const __m512i idx[4] = {
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 4, -1, -1, -1, 8, -1, -1, -1, 12)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 1, -1, -1, -1, 5, -1, -1, -1, 9, -1, -1, -1, 13)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 2, -1, -1, -1, 6, -1, -1, -1, 10, -1, -1, -1, 14)),
        _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, 3, -1, -1, -1, 7, -1, -1, -1, 11, -1, -1, -1, 15))};
    const int na = NA(mt);
    __m512 acc[MT][4];
    for (int i = 0; i < mt; i++)
        for (int a = 0; a < na; a++) acc[i][a] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const __m512i v = _mm512_load_si512(W + 64 * g);
        for (int j = 0; j < 4; j++) {
            const __m512 wv = dec(v, idx[j]);
            for (int i = 0; i < mt; i++)
                acc[i][j % na] = _mm512_fmadd_ps(wv, _mm512_set1_ps(X[(m0 + i) * K4 + 4 * g + j]), acc[i][j % na]);
        }
    }
    const uint8_t *nan = (const uint8_t *)l->packed + codes_bytes(w);
    for (int i = 0; i < mt; i++) {
        float v[16];
        __m512 s = acc[i][0];
        for (int a = 1; a < na; a++) s = _mm512_add_ps(s, acc[i][a]);
        _mm512_storeu_ps(v, _mm512_mul_ps(s, _mm512_set1_ps(256.0f)));
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
    float *X = l->ws, *sm = X + M * k4(w);
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    /* Decode (M <= 4): rows prepared before the team starts, so the join is the only sync point. */
    if (M <= 4)
        for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, thr0);
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *tmp = thr0 + (size_t)omp_get_thread_num() * thread_bytes(w);
        if (M > 4) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare_row(l, m, X, sm, tmp);
        }
#pragma omp for schedule(dynamic, 4) /* a descheduled thread (shared VM) holds 4 tiles, not half */
        for (int64_t t = 0; t < tiles; t++)
            for (int64_t m0 = 0; m0 < M; m0 += MT) {
                switch (M - m0 < MT ? M - m0 : MT) {
                case 1: tile_tokens(l, X, sm, t, m0, 1); break;
                case 2: tile_tokens(l, X, sm, t, m0, 2); break;
                case 3: tile_tokens(l, X, sm, t, m0, 3); break;
                case 4: tile_tokens(l, X, sm, t, m0, 4); break;
                case 5: tile_tokens(l, X, sm, t, m0, 5); break;
                case 6: tile_tokens(l, X, sm, t, m0, 6); break;
                case 7: tile_tokens(l, X, sm, t, m0, 7); break;
                default: tile_tokens(l, X, sm, t, m0, 8); break;
                }
            }
    }
    return MOQ_OK;
}
