/* linear_fp8_bf16dot_avx512.c — FP8 per-tensor / per-channel (e4m3 W, e4m3 x) at small M on
 * AVX512_BF16 (issue 15: the serve engine's batched decode steps), on the k4fma rows' packed
 * weight (rows16k4 codes + NaN-row flags, linear_fp8_avx2.c's pack and the _gemm rows' workspace).
 *
 * Every e4m3 value is exactly a bf16 (4 significant bits; e4m3 subnormals m·2^-9 are normal bf16),
 * so an e4m3 × e4m3 product is exact and vdpbf16ps does 32 of them per instruction against the f32
 * FMA's 16 (measured on Zen 5: the same throughput per instruction). The weight codes are decoded
 * in registers, two k of 16 rows per zmm as bf16 pairs (k, k+1) per dword, value D·2^-8:
 *   vpshufb       code of k, k+1 into the high byte of each word of the row's dword
 *   vpsraw 4      sign to bits 15..11, exponent e to bits 10..7, mantissa to bits 6..4
 *   vpternlog     (· & 0x07F0) | 0x3800: exponent field e + 112 (no carry: 112 = 0b1110000)
 *   vptestnmw     lanes with e = 0 (subnormal or zero codes): their bf16 comes from an 8-entry
 *   vpsrlw 4 +    table of m·2^-17 by a masked word permute (index = the mantissa: the two index
 *   vpermw{k}     bits above it are e's, 0 in those lanes)
 *   vpternlog     | (sign & 0x8000)
 * 7 vector ops per 32 weights (the f32 decode: 6). Activations: the AVX-512 quantizers (bit-identical
 * to the reference), whose dequantized values are e4m3 values (× the per-token scale, applied in the
 * epilogue), truncated to bf16 pairs (exact). vdpbf16ps flushes denormal inputs and outputs: none
 * occur (weights >= 2^-17, products multiples of 2^-26). NaN weight codes decode to finite values;
 * the pack's NaN-row flags turn those rows' outputs into NaN, as on the k4fma rows. Sums: f32 in
 * vdpbf16ps's order (two products, then the accumulator), so results match the `_ref` row to f32
 * summation order. Structure of the _gemm rows' small-M pass: two 16-row tiles per pass, up to 8
 * tokens (16 accumulators), each broadcast x pair feeding two vdpbf16ps; M = 9..64 token groups of
 * <= 8 over 256-k chunks, larger M in blocks of 64 tokens. Rows: cpu_avx512_fp8_{tensor,row}_k4bf16dot
 * (kernels.c), M >= 4 (its
 * M range in the registry; other M run the next row on the same packed weight).
 * Reference: linear_ref.c. Test: tests/kernels/test_linear.c (shape sweep, subnormal, NaN codes).
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define MTB 8   /* tokens per pass                                  */
#define MAXM 64 /* tokens per block (C: 2 × 4 KiB on the stack)     */

static int64_t k4(const moq_weight *w) { return (w->K + 3) / 4 * 4; }
static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

/* Workspace, inside moq_linear_gemm_workspace(w, M, n) for M <= MAXM:
 *   shared  Xp u32 [K4/2, M] bf16 pairs of x, k-pair major; sm f32 [M]
 *   thread  row f32 [K4] + quantizer scratch 2K + 64 */
static size_t xp_bytes(const moq_weight *w, int64_t M) { return al64((size_t)M * (size_t)k4(w) * 2); }
static size_t thread_bytes(const moq_weight *w) { return al64((size_t)k4(w) * 4) + al64((size_t)w->K * 2 + 64); }

static void prepare(const moq_linear_launch *l, int64_t m, uint32_t *Xp, float *sm, float *xr, uint8_t *tmp) {
    const int64_t K = l->w->K, K4 = k4(l->w), M = l->M;
    moq_act_dequant_row_avx512(l, m, xr, &sm[m], tmp);
    for (int64_t k = K; k < K4; k++) xr[k] = 0.0f;
    for (int64_t kp = 0; kp < K4 / 2; kp++) /* exact: the values are e4m3 numbers */
        Xp[kp * M + m] = moq_f32_bits(xr[2 * kp]) >> 16 | (moq_f32_bits(xr[2 * kp + 1]) & 0xFFFF0000u);
}

/* Columns 4g + j, 4g + j + 1 (j = 0 or 2) of 16 rows (one 64-byte line v) -> bf16 pairs D·2^-8. */
static inline __m512i dec2(__m512i v, __m512i idx, __m512i sub) {
    const __m512i s = _mm512_srai_epi16(_mm512_shuffle_epi8(v, idx), 4);
    __m512i r = _mm512_ternarylogic_epi32(s, _mm512_set1_epi16(0x07F0), _mm512_set1_epi16(0x3800), 0xEA); /* (A & B) | C */
    const __mmask32 z = _mm512_testn_epi16_mask(s, _mm512_set1_epi16(0x0780));
    r = _mm512_mask_permutexvar_epi16(r, z, _mm512_srli_epi16(s, 4), sub);
    return _mm512_ternarylogic_epi32(r, s, _mm512_set1_epi16((short)0x8000), 0xF8); /* A | (B & C) */
}
/* vpshufb index: per dword (row) bytes j, j + 1 into the high bytes of its two words. */
#define IDX2(j)                                                                                                         \
    _mm512_broadcast_i32x4(_mm_setr_epi8(-1, (j), -1, (j) + 1, -1, 4 + (j), -1, 5 + (j), -1, 8 + (j), -1, 9 + (j), -1, 12 + (j), \
                                         -1, 13 + (j)))

/* Where a pass prefetches (the first pass over a unit's weights): the packed base, bytes per tile,
 * the unit's first tile and the thread's chunks (tile_prefetch.h); pc NULL: no prefetch. */
typedef struct pf_at { const uint8_t *base; int64_t tile_bytes, t0; const moq_pf_chunks *pc; } pf_at;

/* Tokens i0..i0+mt (Xp already offset by i0) over lines [g0, g1) of nt (1 or 2) tiles; C[u] [tokens][16]. */
static inline __attribute__((always_inline)) void pass(const uint8_t *const *W, const int nt, int64_t g0, int64_t g1, const uint32_t *Xp,
                                                      int64_t M, const int mt, float *const *C, int first, const pf_at *pf) {
    const int na = mt * nt >= 8 ? 1 : mt * nt >= 4 ? 2 : 4;
    static const uint16_t subt[32] = {0, 0x3700, 0x3780, 0x37C0, 0x3800, 0x3820, 0x3840, 0x3860}; /* bf16 of m·2^-17 */
    const __m512i sub = _mm512_loadu_si512(subt), i0 = IDX2(0), i2 = IDX2(2);
    __m512 acc[MTB][2][4];
    for (int i = 0; i < mt; i++)
        for (int u = 0; u < nt; u++)
            for (int a = 0; a < na; a++) acc[i][u][a] = _mm512_setzero_ps();
    for (int64_t g = g0; g < g1; g++) {
        const __m512i v0 = _mm512_load_si512(W[0] + 64 * g), v1 = nt == 2 ? _mm512_load_si512(W[1] + 64 * g) : v0;
        if (pf->pc) /* line g of both tiles, MOQ_PF_BYTES ahead */
            for (int u = 0; u < nt; u++) moq_pf_line(pf->base, pf->tile_bytes, pf->pc, (pf->t0 + u) * pf->tile_bytes + 64 * g + MOQ_PF_BYTES);
        const uint32_t *x = Xp + 2 * g * M;
        for (int h = 0; h < 2; h++) {
            const __m512i idx = h ? i2 : i0;
            const __m512i w0 = dec2(v0, idx, sub), w1 = nt == 2 ? dec2(v1, idx, sub) : w0;
            const int a = (int)((2 * g + h) % na);
            for (int i = 0; i < mt; i++) {
                const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[h * M + i]);
                acc[i][0][a] = _mm512_dpbf16_ps(acc[i][0][a], (__m512bh)w0, xb);
                if (nt == 2) acc[i][1][a] = _mm512_dpbf16_ps(acc[i][1][a], (__m512bh)w1, xb);
            }
        }
    }
    for (int u = 0; u < nt; u++)
        for (int i = 0; i < mt; i++) {
            __m512 s = acc[i][u][0];
            for (int a = 1; a < na; a++) s = _mm512_add_ps(s, acc[i][u][a]);
            float *c = C[u] + 16 * i;
            _mm512_store_ps(c, first ? s : _mm512_add_ps(s, _mm512_load_ps(c)));
        }
}

static void pass_any(const uint8_t *const *W, int nt, int64_t g0, int64_t g1, const uint32_t *Xp, int64_t M, int mt, float *const *C,
                     int first, const pf_at *pf) {
    if (nt == 2) {
        switch (mt) {
#define CASE(n) case n: pass(W, 2, g0, g1, Xp, M, n, C, first, pf); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
        default: pass(W, 2, g0, g1, Xp, M, 8, C, first, pf); break;
        }
    } else {
        switch (mt) {
#define CASE(n) case n: pass(W, 1, g0, g1, Xp, M, n, C, first, pf); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
        default: pass(W, 1, g0, g1, Xp, M, 8, C, first, pf); break;
        }
    }
}

_Static_assert(MOQ_PF_CHUNK % 2 == 0, "a chunk of tiles must hold whole tile pairs");

/* Unit p: tiles 2p, 2p + 1 (the last may be alone); the first pass over them prefetches along the
 * thread's chunks pc. */
static void unit(const moq_linear_launch *l, const uint32_t *Xp, const float *sm, int64_t p, const moq_pf_chunks *pc) {
    const moq_weight *w = l->w;
    const int64_t M = l->M, N = w->N, G = k4(w) / 4, tiles = (N + 15) / 16, t0 = 2 * p;
    const int nt = t0 + 2 <= tiles ? 2 : 1;
    const uint8_t *nan = (const uint8_t *)l->packed + moq_linear_fp8_k4_nan_offset(w);
    const uint8_t *W[2] = {(const uint8_t *)l->packed + t0 * G * 64, (const uint8_t *)l->packed + (t0 + nt - 1) * G * 64};
    _Alignas(64) float Cb[2][MAXM * 16];
    float *C[2] = {Cb[0], Cb[1]};
    for (int64_t mb = 0; mb < M; mb += MAXM) { /* token blocks of <= MAXM: C stays on the stack */
        const int64_t Mb = M - mb < MAXM ? M - mb : MAXM;
        for (int u = 0; u < nt; u++) memset(C[u], 0, (size_t)Mb * 64); /* K = 0: no pass writes C */
        const int64_t ng = (Mb + MTB - 1) / MTB, mt = (Mb + ng - 1) / ng, cg = ng == 1 ? G : 64;
        for (int64_t g0 = 0; g0 < G; g0 += cg) {
            const int64_t g1 = g0 + cg < G ? g0 + cg : G;
            for (int64_t i0 = 0; i0 < Mb; i0 += mt) {
                float *Ci[2] = {C[0] + 16 * i0, C[1] + 16 * i0};
                const pf_at pf = {(const uint8_t *)l->packed, G * 64, t0, mb == 0 && i0 == 0 ? pc : NULL};
                pass_any(W, nt, g0, g1, Xp + mb + i0, M, (int)(Mb - i0 < mt ? Mb - i0 : mt), Ci, g0 == 0, &pf);
            }
        }
        for (int u = 0; u < nt; u++)
            for (int64_t i = 0; i < Mb; i++) {
                const float *c = C[u] + 16 * i;
                const int64_t n0 = 16 * (t0 + u), m = mb + i;
                if (l->y_elem == MOQ_ELEM_F32 && n0 + 16 <= N) { /* the scalar loop below, 16 lanes, same operations */
                    __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(c), _mm512_set1_ps(256.0f)), _mm512_set1_ps(sm[m])),
                                             _mm512_loadu_ps(l->row_scale + n0));
                    y = _mm512_mask_mov_ps(y, _mm_cmpneq_epi8_mask(_mm_loadu_si128((const __m128i *)(nan + n0)), _mm_setzero_si128()),
                                           _mm512_set1_ps(NAN));
                    if (w->bias) y = _mm512_add_ps(y, _mm512_loadu_ps(w->bias + n0));
                    _mm512_storeu_ps((float *)l->y + m * N + n0, y);
                    continue;
                }
                for (int r = 0; r < 16 && n0 + r < N; r++) {
                    const int64_t n = n0 + r;
                    float y = nan[n] ? NAN : c[r] * 256.0f * sm[m] * l->row_scale[n];
                    if (w->bias) y += w->bias[n];
                    moq_y_store(l->y, l->y_elem, N, m, n, y);
                }
            }
    }
}

#define SERIAL_PREP_M 8
moq_status moq_linear_fp8_bf16dot_run_avx512(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, tiles = (w->N + 15) / 16;
    uint32_t *Xp = l->ws;
    float *sm = (float *)((uint8_t *)l->ws + xp_bytes(w, M));
    uint8_t *thr0 = (uint8_t *)sm + al64((size_t)M * 4);
    const size_t tb = thread_bytes(w);
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
    /* M <= 8 (a batched decode step): rows prepared before the team starts, so the join is the
       only sync point: a row takes a few us, a barrier on the shared 2-vCPU VM 20-75 us of CPU
       with a passive wait policy (docs/PERFORMANCE.md "Server CPU per token: where it goes") */
    if (M <= SERIAL_PREP_M)
        for (int64_t m = 0; m < M; m++) prepare(l, m, Xp, sm, (float *)thr0, thr0 + al64((size_t)k4(w) * 4));
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
        if (M > SERIAL_PREP_M) {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) prepare(l, m, Xp, sm, (float *)mine, mine + al64((size_t)k4(w) * 4));
        }
        /* chunks of MOQ_PF_CHUNK tiles (even: whole pairs) claimed one ahead, prefetched along */
        moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
        moq_pf_chunks pc;
        int64_t c0;
        while (moq_pf_walk_next(&wk, &c0, &pc))
            for (int64_t p = c0 / 2; 2 * p < pc.t1; p++) unit(l, Xp, sm, p, &pc);
    }
    return MOQ_OK;
}
