/* linear_dequant_panel_avx2.c — the AVX2 + FMA + F16C form of linear_dequant_panel_avx512.c for
 * CPUs without AVX-512: same packed layout (rows16; shared pack hooks; the workspace is the
 * AVX-512 row's plus a per-thread prefill block, moq_linear_panel_workspace_avx2), same exact
 * decoders on 8-lane vectors (two ymm per 16-row column), same f32 FMA micro-kernel with 6 tokens
 * × 16 rows of accumulators. Activations: moq_act_dequant_row_avx2 (the AVX2 FP8 / MXFP8
 * quantizers, bit-exact twins of the references; other pairs the reference row).
 *
 *   packed  rows16 codes (+ rows16 NVFP4/MXFP8 block scales), see linear_dequant_panel_avx512.c
 *   Pb      f32 [NT][PKC, 16] per thread: NT = 4 tiles of W decoded for PKC columns (64 KiB, L2)
 *   X       activations packed in groups of 6 tokens, column-major in the group (one stream, L1)
 *   Cb      f32 [NT][M][16] per thread: the block's accumulators across the k-chunks
 *
 * Prefill (M > 8; BF16 / F16 / F32 weights: M > 32): BLIS-style, the tokens are the micro-kernel's
 * short side; see moq_linear_panel_run_avx2. BF16 / F16 / F32 weights at M <= 32 (decode steps and
 * the model's prefill chunks of 32) skip the panel (gemv_tiles, issues 14 and 15); other pairs at
 * M <= 8 run other rows.
 * Reference: linear_ref.c. Test: tests/kernels/test_linear.c (every row vs _ref).
 */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/nvfp4_k4n_avx2.h"
#include "kernels/cpu/y_store_avx2.h"
#include "kernels/cpu/tile_prefetch.h"
#include "kernels/layout/layout.h"

#define KC 256
#define MR 6
#define NT 4 /* tiles per prefill block (moq_linear_panel_run_avx2) */
#define PKC 256 /* k-chunk of the prefill blocks */

static int64_t cols_of(const moq_weight *w) { return w->w.elem == MOQ_ELEM_E2M1 ? w->K / 2 : w->K; }
static size_t unit_of(const moq_weight *w) { return w->w.elem == MOQ_ELEM_E2M1 ? 1 : (size_t)moq_elem_bytes(w->w.elem, 1); }
static size_t codes_bytes(const moq_weight *w) { return (moq_layout_rows16_size(w->N, cols_of(w), unit_of(w)) + 63) & ~(size_t)63; }
/* Must match moq_linear_panel_workspace's layout (linear_dequant_panel_avx512.c). */
static size_t thread_bytes(const moq_weight *w, int64_t M) {
    return (size_t)KC * 64 + (size_t)KC * 32 + (size_t)M * 64 + (((size_t)w->K * 2 + 64 + 63) & ~(size_t)63);
}
static size_t shared_bytes(const moq_weight *w, int64_t M) {
    return (((size_t)M * (size_t)w->K * 4 + (size_t)M * 4 + 63) & ~(size_t)63) +
           (((size_t)M * (size_t)(w->K + 1) / 2 * 4 + 63) & ~(size_t)63);
}

/* 8 e4m3 codes -> f32 / 256 (exact: the f16 shift trick of the AVX-512 file). */
static inline __m256 e4m3x8_div256(__m128i c8) {
    const __m128i w = _mm_cvtepu8_epi16(c8);
    __m128i t = _mm_slli_epi16(w, 7);
    t = _mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000)));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7F)); /* S.1111.111 */
    return _mm256_cvtph_ps(_mm_or_si128(t, nan));
}

static inline __m256 e8m0x8(__m128i c8) {
    const __m256i v = _mm256_cvtepu8_epi32(c8);
    const __m256i z = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(v, 23), _mm256_set1_epi32(0x00400000), z));
}

/* e2m1 codes (dword lanes, 0..15) -> f32: magnitude from an 8-entry permute, sign from bit 3. */
static inline __m256 e2m1x8(__m256i c) {
    const __m256 mag = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), c);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28)));
}

static void store16(float *P, __m256 a, __m256 b) { _mm256_store_ps(P, a); _mm256_store_ps(P + 8, b); }

static const float *decode_panel(const moq_linear_launch *l, int64_t t, int64_t k0, int kc, float *P) {
    const moq_weight *w = l->w;
    const int64_t K = w->K;
    const uint8_t *pk = l->packed;
    const __m256 c256 = _mm256_set1_ps(256.0f);
    switch (l->pair) {
    case MOQ_PAIR_F32: return (const float *)l->packed + (t * K + k0) * 16;
    case MOQ_PAIR_BF16:
        for (int k = 0; k < kc; k++) {
            const uint8_t *p = pk + ((t * K + k0 + k) * 16) * 2;
            store16(P + 16 * k, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128((const __m128i *)p)), 16)),
                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128((const __m128i *)(p + 16))), 16)));
        }
        break;
    case MOQ_PAIR_F16:
        for (int k = 0; k < kc; k++) {
            const uint8_t *p = pk + ((t * K + k0 + k) * 16) * 2;
            store16(P + 16 * k, _mm256_cvtph_ps(_mm_load_si128((const __m128i *)p)), _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p + 16))));
        }
        break;
    case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW: case MOQ_PAIR_FP8_BLK128: case MOQ_PAIR_MXFP8: {
        const uint8_t *sf = pk + codes_bytes(w);
        for (int k = 0; k < kc; k++) {
            const __m128i c = _mm_load_si128((const __m128i *)(pk + (t * K + k0 + k) * 16));
            __m256 a = _mm256_mul_ps(e4m3x8_div256(c), c256), b = _mm256_mul_ps(e4m3x8_div256(_mm_srli_si128(c, 8)), c256);
            if (l->pair == MOQ_PAIR_FP8_BLK128) {
                const __m256 s = _mm256_set1_ps(((const float *)w->scale)[(t * 16 / 128) * (K / 128) + (k0 + k) / 128]);
                a = _mm256_mul_ps(a, s), b = _mm256_mul_ps(b, s);
            } else if (l->pair == MOQ_PAIR_MXFP8) {
                const __m128i sc = _mm_load_si128((const __m128i *)(sf + (t * (K / 32) + (k0 + k) / 32) * 16));
                a = _mm256_mul_ps(a, e8m0x8(sc)), b = _mm256_mul_ps(b, e8m0x8(_mm_srli_si128(sc, 8)));
            }
            store16(P + 16 * k, a, b);
        }
        break;
    }
    case MOQ_PAIR_NVFP4: case MOQ_PAIR_NVFP4_W4A16: {
        const uint8_t *sf = pk + codes_bytes(w);
        const __m256i low4 = _mm256_set1_epi32(0xF);
        /* the AVX2 W4A16 row's codes are regrouped per 16 rows × 4 k (nvfp4_k4n_avx2.h) */
        const bool k4n = l->k && l->k->pack == moq_linear_nvfp4_w4a16_pack_avx2;
        __m128i k4n_next = _mm_setzero_si128();
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        for (int k = 0; k < kc; k += 2) {
            if ((k & 15) == 0) {
                const __m128i sc = _mm_load_si128((const __m128i *)(sf + (t * (K / 16) + (k0 + k) / 16) * 16));
                s0 = _mm256_mul_ps(e4m3x8_div256(sc), c256), s1 = _mm256_mul_ps(e4m3x8_div256(_mm_srli_si128(sc, 8)), c256);
            }
            __m128i by;
            if (!k4n) by = _mm_load_si128((const __m128i *)(pk + (t * (K / 2) + (k0 + k) / 2) * 16));
            else if ((k & 2) == 0) k4n_cols(pk + (t * (K / 2) + (k0 + k) / 2) * 16, &by, &k4n_next); /* k0, kc: multiples of 16 */
            else by = k4n_next;
            const __m256i b0 = _mm256_cvtepu8_epi32(by), b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(by, 8));
            store16(P + 16 * k, _mm256_mul_ps(e2m1x8(_mm256_and_si256(b0, low4)), s0), _mm256_mul_ps(e2m1x8(_mm256_and_si256(b1, low4)), s1));
            store16(P + 16 * k + 16, _mm256_mul_ps(e2m1x8(_mm256_srli_epi32(b0, 4)), s0), _mm256_mul_ps(e2m1x8(_mm256_srli_epi32(b1, 4)), s1));
        }
        break;
    }
    case MOQ_PAIR_COUNT: break;
    }
    return P;
}

/* The i loops are unrolled by pragma: without it GCC keeps a0/a1 in memory and stores both
 * accumulators after every FMA pair (seen in objdump), which halved the FMA rate. X is the
 * token group's packed micro-panel: token i of column k at X[k * mr + i] (one stream, L1). */
static inline __attribute__((always_inline)) void micro(const float *P, const float *X, int kc, float *C, const int mr,
                                                       const float *pf) {
    __m256 a0[MR], a1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) a0[i] = _mm256_load_ps(C + 16 * i), a1[i] = _mm256_load_ps(C + 16 * i + 8);
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        const __m256 w0 = _mm256_load_ps(P + 16 * k), w1 = _mm256_load_ps(P + 16 * k + 8);
        _mm_prefetch((const char *)(pf + 6 * k), _MM_HINT_T0);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const __m256 x = _mm256_broadcast_ss(X + k * mr + i);
            a0[i] = _mm256_fmadd_ps(x, w0, a0[i]);
            a1[i] = _mm256_fmadd_ps(x, w1, a1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) _mm256_store_ps(C + 16 * i, a0[i]), _mm256_store_ps(C + 16 * i + 8, a1[i]);
}

/* pf: the next token group's micro-panel, brought into L1 while this one runs (X is in L3). */
static void micro_any(const float *P, const float *X, int kc, float *C, int mr, const float *pf) {
    switch (mr) {
#define CASE(n) case n: micro(P, X, kc, C, n, pf); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
#undef CASE
    default: break;
    }
}

/* Small M (M <= GEMV_M = 32) of the 16-bit and f32 pairs (issues 14, 15): the rows16 column of 16
 * rows widened in registers (bf16 << 16, F16C, or loaded) and multiplied straight away, no panel.
 * Register-blocked over tokens: one widened column feeds a group of up to GEMV_G = 6 tokens (2 ymm
 * accumulators each: 12 of the 16 ymm registers); M <= 2 keeps two accumulator chains per 8 rows so
 * FMA latency does not bound it. M > 6 runs ceil(M / 6) groups of near-equal size (3..6 tokens:
 * 7 = 4 + 3, 8 = 4 + 4, 16 = 6 + 5 + 5, 32 = 6 + 6 + 5 + 5 + 5 + 5) over K-chunks of GEMV_KC columns (8 KiB of bf16), so each
 * weight byte comes from DRAM once and the later groups re-read it from L1. Each group's x is packed
 * interleaved in X (token i of column k at Xg[k mr + i], moq_linear_panel_run_avx2): one pointer
 * reaches all of its tokens.
 * The weight stream is prefetched GEMV_PF bytes ahead (tile_prefetch.h); the lines of a chunk go to
 * the groups in turn, so the requests reach DRAM evenly over all passes (all of them in the first
 * pass left DRAM idle in the others: gate_up M = 8 ran at 62 % of the FMA peak).
 * BF16, 3..6 tokens: the 4-column step is in assembly (GSTEP; GEMV_ASM=0 builds the intrinsic loop):
 * from intrinsics GCC kept two or three of the twelve accumulators of a 6-token group on the stack
 * (perf annotate at M = 16; the assembly took gate_up M = 16 from 9.6 to 8.2 ms).
 * Exact: bf16 -> f32 is a shift or a mask; each product is one FMA rounding (exact for bf16 x: 8 + 8
 * significant bits); f32 sums in another order than the reference. Measured: docs/PERFORMANCE.md
 * "BF16 small-M GEMV on AVX2". */
#define GEMV_M 32
#define GEMV_G 6
#define GEMV_KC 256
#define GEMV_PF 8192
#ifndef GEMV_ASM
#define GEMV_ASM 1
#endif

static inline __attribute__((always_inline)) __m256 w16(const moq_pair_id pair, const uint8_t *p, int h) {
    switch (pair) {
    case MOQ_PAIR_BF16: return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128((const __m128i *)(p + 16 * h))), 16));
    case MOQ_PAIR_F16: return _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p + 16 * h)));
    default: return _mm256_load_ps((const float *)p + 8 * h);
    }
}

/* The 16 rows of one column as two f32 vectors. BF16: one 32-byte load; the dword j holds rows 2j
 * (low half) and 2j + 1 (high half), so a = the dwords masked to their high halves (rows 1, 3, ..,
 * 15, exact) and b = the dwords shifted left by 16 (rows 0, 2, .., 14): one shift (FP pipes 1-2,
 * which the FMAs share) and one AND (any FP pipe) per column, and no zero register. row_fix puts
 * the finished sums back in row order. */
static const uint32_t bf16_hi_mask[8] __attribute__((aligned(32))) = {0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                                                                      0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u};
static inline __attribute__((always_inline)) void wcol(const moq_pair_id pair, const uint8_t *p, __m256 *a, __m256 *b) {
    if (pair == MOQ_PAIR_BF16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)p);
        *a = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_load_si256((const __m256i *)bf16_hi_mask)));
        *b = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    } else {
        *a = w16(pair, p, 0), *b = w16(pair, p, 1);
    }
}
/* BF16 sums (a: odd rows, b: even rows) -> rows 0-7, 8-15. */
static inline __attribute__((always_inline)) void row_fix(const moq_pair_id pair, __m256 *a, __m256 *b) {
    if (pair != MOQ_PAIR_BF16) return;
    const __m256 e = _mm256_unpacklo_ps(*b, *a), o = _mm256_unpackhi_ps(*b, *a); /* rows 0-3 | 8-11, 4-7 | 12-15 */
    *a = _mm256_permute2f128_ps(e, o, 0x20), *b = _mm256_permute2f128_ps(e, o, 0x31);
}

/* BF16, a group of T = 3..6 tokens: 4 columns (128 bytes at p) into a0..a5 / b0..b5, x at x4
 * (token i of column c at x4[c T + i]). The same operations in the same order as the intrinsic
 * loop of gemv_tile (wcol, then per token one broadcast and two FMAs): the same sums. */
#define GB(c, T, i) \
    "vbroadcastss (" #c "*" #T "+" #i ")*4(%[x]), %%ymm15\n\t" \
    "vfmadd231ps %%ymm13, %%ymm15, %[a" #i "]\n\t"              \
    "vfmadd231ps %%ymm14, %%ymm15, %[b" #i "]\n\t"
#define GB3(c, T) GB(c, T, 0) GB(c, T, 1) GB(c, T, 2)
#define GB4(c, T) GB3(c, T) GB(c, T, 3)
#define GB5(c, T) GB4(c, T) GB(c, T, 4)
#define GB6(c, T) GB5(c, T) GB(c, T, 5)
#define GCOL(c, T, BODY)                        \
    "vmovdqu " #c "*32(%[p]), %%ymm14\n\t"      \
    "vpand %[mask], %%ymm14, %%ymm13\n\t"       \
    "vpslld $16, %%ymm14, %%ymm14\n\t" BODY(c, T)
#define GSTEP(T, BODY)                                                                                                    \
    __asm__(GCOL(0, T, BODY) GCOL(1, T, BODY) GCOL(2, T, BODY) GCOL(3, T, BODY)                                           \
            : [a0] "+x"(a0), [b0] "+x"(b0), [a1] "+x"(a1), [b1] "+x"(b1), [a2] "+x"(a2), [b2] "+x"(b2), [a3] "+x"(a3),      \
              [b3] "+x"(b3), [a4] "+x"(a4), [b4] "+x"(b4), [a5] "+x"(a5), [b5] "+x"(b5)                                     \
            : [p] "r"(p), [x] "r"(x4), [mask] "m"(*(const uint32_t(*)[8])bf16_hi_mask), "m"(*(const uint8_t(*)[128])p),     \
              "m"(*(const float(*)[4 * (T)])x4)                                                                             \
            : "xmm13", "xmm14", "xmm15")

/* Token i's accumulators, named (a GCC array of them went to the stack; the asm needs names). */
#define ACC_FMA(i, a, b, x)                                                    \
    if ((i) < mr) {                                                            \
        const __m256 x_ = _mm256_broadcast_ss((x) + (i));                      \
        a##i = _mm256_fmadd_ps(a, x_, a##i), b##i = _mm256_fmadd_ps(b, x_, b##i); \
    }
#define ACC_COL(a, b, x) ACC_FMA(0, a, b, x) ACC_FMA(1, a, b, x) ACC_FMA(2, a, b, x) ACC_FMA(3, a, b, x) ACC_FMA(4, a, b, x) ACC_FMA(5, a, b, x)
#define ACC_STORE(i)                                                                                   \
    if ((i) < mr) {                                                                                    \
        row_fix(pair, &a##i, &b##i);                                                                   \
        _mm256_store_ps(C + 16 * (i), _mm256_add_ps(_mm256_load_ps(C + 16 * (i)), a##i));              \
        _mm256_store_ps(C + 16 * (i) + 8, _mm256_add_ps(_mm256_load_ps(C + 16 * (i) + 8), b##i));      \
    }

/* One token group (Xg: token i of column k at Xg[k mr + i]) over columns [k0, k1) of tile t, added
 * into C (16 per token). Prefetch: pass `pass` of `groups` over this chunk takes every groups-th
 * line, starting at its own turn. */
static inline __attribute__((always_inline)) void gemv_tile(const moq_linear_launch *l, const moq_pair_id pair, int64_t t,
                                                            const float *Xg, float *C, const int mr, int64_t k0, int64_t k1,
                                                            const moq_pf_chunks *pc, int pass, int groups) {
    const int64_t K = l->w->K;
    const size_t unit = pair == MOQ_PAIR_F32 ? 4 : 2;
    const int64_t tb = K * 16 * (int64_t)unit; /* bytes per tile; 4 columns = 128 (bf16, f16) or 256 bytes */
    const uint8_t *pk = (const uint8_t *)l->packed + (size_t)(t * K) * 16 * unit;
    if (mr <= 2) {
        __m256 acc[2][2][2]; /* [token][half][chain]: k unrolled by 2 so every index is a constant (registers) */
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) acc[i][0][0] = acc[i][0][1] = acc[i][1][0] = acc[i][1][1] = _mm256_setzero_ps();
        int64_t k = k0;
        for (; k + 1 < k1; k += 2) {
            const uint8_t *p = pk + (size_t)k * 16 * unit;
            for (int j = 0; j < 32 * (int)unit; j += 64) moq_pf_line(l->packed, tb, pc, t * tb + k * 16 * (int64_t)unit + MOQ_PF_BYTES + j);
            __m256 a, b, c, d;
            wcol(pair, p, &a, &b), wcol(pair, p + 16 * unit, &c, &d);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m256 x = _mm256_broadcast_ss(Xg + k * mr + i), y = _mm256_broadcast_ss(Xg + (k + 1) * mr + i);
                acc[i][0][0] = _mm256_fmadd_ps(a, x, acc[i][0][0]);
                acc[i][1][0] = _mm256_fmadd_ps(b, x, acc[i][1][0]);
                acc[i][0][1] = _mm256_fmadd_ps(c, y, acc[i][0][1]);
                acc[i][1][1] = _mm256_fmadd_ps(d, y, acc[i][1][1]);
            }
        }
        if (k < k1) {
            const uint8_t *p = pk + (size_t)k * 16 * unit;
            __m256 a, b;
            wcol(pair, p, &a, &b);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m256 x = _mm256_broadcast_ss(Xg + k * mr + i);
                acc[i][0][0] = _mm256_fmadd_ps(a, x, acc[i][0][0]);
                acc[i][1][0] = _mm256_fmadd_ps(b, x, acc[i][1][0]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m256 s0 = _mm256_add_ps(acc[i][0][0], acc[i][0][1]), s1 = _mm256_add_ps(acc[i][1][0], acc[i][1][1]);
            row_fix(pair, &s0, &s1);
            _mm256_store_ps(C + 16 * i, _mm256_add_ps(_mm256_load_ps(C + 16 * i), s0));
            _mm256_store_ps(C + 16 * i + 8, _mm256_add_ps(_mm256_load_ps(C + 16 * i + 8), s1));
        }
        return;
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0;
    int64_t k = k0;
    int own = 0; /* the chunk's lines go to the groups in turn; this one prefetches those of turn `pass` */
    for (; k + 3 < k1; k += 4) {
        const uint8_t *p = pk + (size_t)k * 16 * unit;
        const float *x4 = Xg + k * mr;
#pragma GCC unroll 4
        for (int j = 0; j < (int)unit; j++) {
            if (own == pass) moq_pf_line(l->packed, tb, pc, t * tb + k * 16 * (int64_t)unit + GEMV_PF + 64 * j);
            if (++own == groups) own = 0;
        }
#if GEMV_ASM
        if (pair == MOQ_PAIR_BF16) {
            switch (mr) {
            case 3: GSTEP(3, GB3); break;
            case 4: GSTEP(4, GB4); break;
            case 5: GSTEP(5, GB5); break;
            default: GSTEP(6, GB6); break;
            }
            continue;
        }
#endif
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256 a, b;
            wcol(pair, p + 16 * unit * (size_t)c, &a, &b);
            ACC_COL(a, b, x4 + c * mr)
        }
    }
    for (; k < k1; k++) {
        __m256 a, b;
        wcol(pair, pk + (size_t)k * 16 * unit, &a, &b);
        ACC_COL(a, b, Xg + k * mr)
    }
    ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
}
#undef ACC_STORE
#undef ACC_COL
#undef ACC_FMA
#undef GSTEP
#undef GCOL
#undef GB6
#undef GB5
#undef GB4
#undef GB3
#undef GB

/* One instance per (pair, token count): the widening and the token loop are fixed at compile time. */
static void gemv_any(const moq_linear_launch *l, int64_t t, const float *Xg, float *C, int mr, int64_t k0, int64_t k1,
                     const moq_pf_chunks *pc, int pass, int groups) {
#define CASE(pr, n) case n: gemv_tile(l, pr, t, Xg, C, n, k0, k1, pc, pass, groups); break;
#define PAIR(pr) switch (mr) { CASE(pr, 1) CASE(pr, 2) CASE(pr, 3) CASE(pr, 4) CASE(pr, 5) CASE(pr, 6) default: break; }
    switch (l->pair) {
    case MOQ_PAIR_BF16: PAIR(MOQ_PAIR_BF16) break;
    case MOQ_PAIR_F16: PAIR(MOQ_PAIR_F16) break;
    default: PAIR(MOQ_PAIR_F32) break;
    }
#undef PAIR
#undef CASE
}

/* The token groups of gemv_tiles for M tokens: `groups` of them, the first `big` one token larger. */
static void gemv_groups(int64_t M, int *groups, int *base, int *big) {
    *groups = (int)((M + GEMV_G - 1) / GEMV_G), *base = (int)M / *groups, *big = (int)M % *groups;
}

/* C (zeroed) += tile t for all M <= GEMV_M tokens: one group (M <= GEMV_G) over all of K, else the
 * groups over each K-chunk in turn. X: the groups packed one after the other (gemv_groups). */
static void gemv_tiles(const moq_linear_launch *l, int64_t t, const float *X, float *C, const moq_pf_chunks *pc) {
    const int64_t M = l->M, K = l->w->K;
    if (M <= GEMV_G) { gemv_any(l, t, X, C, (int)M, 0, K, pc, 0, 1); return; }
    int groups, base, big;
    gemv_groups(M, &groups, &base, &big);
    for (int64_t k0 = 0; k0 < K; k0 += GEMV_KC) {
        const int64_t k1 = K - k0 < GEMV_KC ? K : k0 + GEMV_KC;
        for (int g = 0, m0 = 0; g < groups; m0 += base + (g < big), g++)
            gemv_any(l, t, X + m0 * K, C + 16 * m0, base + (g < big), k0, k1, pc, g, groups);
    }
}

static bool gemv_fits(const moq_linear_launch *l) {
    return l->M <= GEMV_M && (l->pair == MOQ_PAIR_BF16 || l->pair == MOQ_PAIR_F16 || l->pair == MOQ_PAIR_F32);
}

/* moq_y_store_tile16 on 8-lane vectors for nt full tiles t0.. (the same operations in the same
 * order: (C · sm) · row_scale, + bias, unfused; bf16 by round-to-nearest-even, NaN -> 0xFFFF),
 * token by token so that each row of y gets nt · 16 contiguous outputs: the scalar epilogue was
 * 3-4 % of the M = 512 prefill. C: [nt][M][16]. */
static void store_tiles(const moq_linear_launch *l, const float *C, const float *sm, int64_t t0, int nt) {
    const moq_weight *w = l->w;
    const int64_t M = l->M;
    if (!moq_y_row16_fits_avx2(l, 16 * (t0 + nt - 1))) {
        for (int j = 0; j < nt; j++) moq_y_store_tile16(l, C + (int64_t)j * M * 16, sm, t0 + j);
        return;
    }
    for (int64_t m = 0; m < M; m++) {
        const __m256 s = _mm256_broadcast_ss(sm + m);
        for (int j = 0; j < nt; j++) {
            const int64_t n0 = 16 * (t0 + j);
            const float *c = C + ((int64_t)j * M + m) * 16;
            __m256 v0 = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(c), s), _mm256_loadu_ps(l->row_scale + n0));
            __m256 v1 = _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(c + 8), s), _mm256_loadu_ps(l->row_scale + n0 + 8));
            if (w->bias) v0 = _mm256_add_ps(v0, _mm256_loadu_ps(w->bias + n0)), v1 = _mm256_add_ps(v1, _mm256_loadu_ps(w->bias + n0 + 8));
            moq_y_row16_avx2(l, m, n0, v0, v1);
        }
    }
}

/* Prefetch part g of groups of the packed weight chunk that decode_panel reads next: columns
 * [k0, k0 + PKC) of tiles t0.., or, past K, the first chunk of the next block. Spread over the
 * token groups of the current chunk, so the decode finds it in L2 instead of waiting on DRAM. */
static void pf_chunk(const moq_linear_launch *l, int64_t t0, int64_t k0, int64_t g, int64_t groups) {
    const moq_weight *w = l->w;
    const int64_t K = w->K, cols = cols_of(w), tiles = (w->N + 15) / 16, per = K / cols; /* k per stored column */
    if (k0 >= K) k0 = 0, t0 += NT;
    if (t0 >= tiles) return;
    const int64_t nt = tiles - t0 < NT ? tiles - t0 : NT, kc = K - k0 < PKC ? K - k0 : PKC;
    const int64_t unit = (int64_t)unit_of(w), lines = (kc / per * 16 * unit + 63) / 64, total = nt * lines;
    if (lines <= 0 || groups <= 0) return;
    const int64_t each = (total + groups - 1) / groups, i1 = (g + 1) * each < total ? (g + 1) * each : total;
    for (int64_t i = g * each; i < i1; i++)
        _mm_prefetch((const char *)l->packed + ((t0 + i / lines) * cols + k0 / per) * 16 * unit + (i % lines) * 64, _MM_HINT_T1);
}

/* Prefill (M > GEMV_M): BLIS-style blocking with the tokens as the micro-kernel's short side.
 *   X   the activations packed in token groups of MR (token i of group g, column k at
 *       X[MR g K + k mr + i], mr = the group's width): one stream per micro-kernel call
 *   Pb  NT panels of PKC x 16 (NT tiles of W, 64 KiB, L2), decoded once per (tile block, k-chunk)
 *   Cb  f32 [NT][M][16] accumulators of the block across the k-chunks (L2 at M = 512)
 * For each k-chunk and token group the group's micro-panel (kc x mr, 6 KiB, L1) serves the NT
 * tiles in turn, so X comes from L3 once per NT tiles instead of once per tile. */
static size_t extra_bytes(const moq_weight *w, int64_t M) {
    return (size_t)NT * PKC * 64 + (size_t)NT * (size_t)M * 64 + (((size_t)w->K * 4 + 63) & ~(size_t)63);
}

size_t moq_linear_panel_workspace_avx2(const moq_weight *w, int64_t M, int n_threads) {
    return moq_linear_panel_workspace(w, M, n_threads) + (size_t)n_threads * extra_bytes(w, M);
}

moq_status moq_linear_panel_run_avx2(const moq_linear_launch *l, moq_error *err) {
    (void)err;
    const moq_weight *w = l->w;
    const int64_t M = l->M, N = w->N, K = w->K, tiles = (N + 15) / 16;
    float *X = l->ws, *sm = X + M * K;
    uint8_t *thr0 = (uint8_t *)l->ws + shared_bytes(w, M);
    const size_t tb = thread_bytes(w, M);
    uint8_t *ext0 = (uint8_t *)l->ws + moq_linear_panel_workspace(w, M, l->n_threads);
    const size_t eb = extra_bytes(w, M);
    _Atomic int64_t next_chunk = 0; /* the team's chunk counter (tile_prefetch.h) */
#pragma omp parallel num_threads(l->n_threads)
    {
        uint8_t *mine = thr0 + (size_t)omp_get_thread_num() * tb;
        float *C = (float *)(mine + (size_t)KC * 64 + (size_t)KC * 32);
        uint8_t *tmp = (uint8_t *)(C + M * 16);
        if (gemv_fits(l)) {
            float *row = (float *)(ext0 + (size_t)omp_get_thread_num() * eb + (size_t)NT * PKC * 64 + (size_t)NT * (size_t)M * 64);
            int groups, base, big;
            gemv_groups(M, &groups, &base, &big);
#pragma omp for schedule(static)
            for (int g = 0; g < groups; g++) { /* gemv_tiles' token groups, each packed interleaved */
                const int64_t mr = base + (g < big), m0 = (int64_t)g * base + (g < big ? g : big);
                for (int64_t m = m0; m < m0 + mr; m++) {
                    if (mr == 1) { moq_act_dequant_row_avx2(l, m, X + m * K, &sm[m], tmp); continue; }
                    moq_act_dequant_row_avx2(l, m, row, &sm[m], tmp);
                    for (int64_t k = 0; k < K; k++) X[m0 * K + k * mr + m - m0] = row[k];
                }
            }
            /* Chunks of MOQ_PF_CHUNK tiles claimed one ahead; M <= 2 prefetches the weights into the
             * thread's own next chunk (tile_prefetch.h). */
            moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
            moq_pf_chunks pc;
            int64_t t0;
            while (moq_pf_walk_next(&wk, &t0, &pc)) {
                for (int64_t t = t0; t < pc.t1; t++) {
                    memset(C, 0, (size_t)M * 64);
                    gemv_tiles(l, t, X, C, &pc);
                    store_tiles(l, C, sm, t, 1);
                }
            }
        } else {
            uint8_t *ext = ext0 + (size_t)omp_get_thread_num() * eb;
            float *Pb = (float *)ext, *Cb = (float *)(ext + (size_t)NT * PKC * 64), *row = Cb + NT * M * 16;
            const int64_t groups = (M + MR - 1) / MR, blocks = (tiles + NT - 1) / NT;
#pragma omp for schedule(static)
            for (int64_t g = 0; g < groups; g++) {
                const int64_t m0 = g * MR, mr = M - m0 < MR ? M - m0 : MR;
                float *Xg = X + m0 * K;
                for (int64_t i = 0; i < mr; i++) {
                    moq_act_dequant_row_avx2(l, m0 + i, row, &sm[m0 + i], tmp);
                    for (int64_t k = 0; k < K; k++) Xg[k * mr + i] = row[k];
                }
            }
#pragma omp for schedule(dynamic, 1) /* a descheduled thread (shared VM) holds NT tiles, not half */
            for (int64_t b = 0; b < blocks; b++) {
                const int64_t t0 = b * NT;
                const int nt = (int)(tiles - t0 < NT ? tiles - t0 : NT);
                memset(Cb, 0, (size_t)nt * (size_t)M * 64);
                for (int64_t k0 = 0; k0 < K; k0 += PKC) {
                    const int kc = (int)(K - k0 < PKC ? K - k0 : PKC);
                    const float *Pt[NT];
                    for (int j = 0; j < nt; j++) Pt[j] = decode_panel(l, t0 + j, k0, kc, Pb + (size_t)j * PKC * 16);
                    for (int64_t m0 = 0; m0 < M; m0 += MR) {
                        const int mr = (int)(M - m0 < MR ? M - m0 : MR);
                        const float *Xg = X + m0 * K + k0 * mr;
                        const int64_t m1 = m0 + MR < M ? m0 + MR : 0, mr1 = M - m1 < MR ? M - m1 : MR;
                        const float *pf = X + m1 * K + (m1 ? k0 : k0 + PKC) * mr1; /* last group: the next chunk's first */
                        pf_chunk(l, t0, k0 + PKC, m0 / MR, groups);
                        for (int j = 0; j < nt; j++) micro_any(Pt[j], Xg, kc, Cb + (int64_t)j * M * 16 + m0 * 16, mr, pf);
                    }
                }
                store_tiles(l, Cb, sm, t0, nt);
            }
        }
    }
    return MOQ_OK;
}
