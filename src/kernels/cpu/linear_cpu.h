/* linear_cpu.h — CPU linear rows: the `_ref` kernel (linear_ref.c) and the ISA drivers
 * (linear_dequant_panel_avx512.c, linear_nvfp4_avx512.c, the *_avx2.c twins), with their pack/workspace hooks.
 * Included by kernels.c (the registry) and the ISA files; the ISA files include nothing else
 * of moq but this, kernels.h and the layout headers. */
#ifndef MOQ_KERNELS_CPU_LINEAR_CPU_H
#define MOQ_KERNELS_CPU_LINEAR_CPU_H

#include <float.h>
#include <math.h>

#include "kernels/kernels.h"

size_t     moq_linear_ref_workspace(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_ref_run(const moq_linear_launch *l, moq_error *err);

/* Dequantize-panel + f32 FMA driver, every pair (variant = moq_pair_id). */
size_t     moq_linear_panel_packed_size(const moq_weight *w);
void       moq_linear_panel_pack(const moq_weight *w, void *dst);
size_t     moq_linear_panel_workspace(const moq_weight *w, int64_t M, int n_threads);
/* AVX2: the same layout plus per-thread tile-block panels and accumulators for the prefill. */
size_t     moq_linear_panel_workspace_avx2(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_panel_run_avx2(const moq_linear_launch *l, moq_error *err);
bool       moq_linear_panel_bf16_supports(const moq_weight *w, char *why, size_t why_len);
moq_status moq_linear_panel_run_avx512(const moq_linear_launch *l, moq_error *err);

/* NVFP4 W4A4 with VNNI int8 dot products per 16-block. */
size_t     moq_linear_nvfp4_vnni_packed_size(const moq_weight *w);
void       moq_linear_nvfp4_vnni_pack(const moq_weight *w, void *dst);
size_t     moq_linear_nvfp4_vnni_workspace(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_nvfp4_vnni_run_avx512(const moq_linear_launch *l, moq_error *err);
/* The same on AVX2 with vpmaddubsw + vpmaddwd (linear_nvfp4_avx2.c); same pack and workspace. */
/* Its workspace: the VNNI row's plus a per-thread buffer of decoded code planes (prefill). */
size_t     moq_linear_nvfp4_maddubs_workspace(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_nvfp4_maddubs_run_avx2(const moq_linear_launch *l, moq_error *err);

/* FP8 e4m3 weights (per-tensor, per-channel) on AVX2: rows16k4 codes decoded in registers
 * (linear_fp8_avx2.c). */
size_t     moq_linear_fp8_k4_packed_size(const moq_weight *w);
void       moq_linear_fp8_k4_pack(const moq_weight *w, void *dst);
size_t     moq_linear_fp8_k4_workspace(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_fp8_k4_run_avx2(const moq_linear_launch *l, moq_error *err);
moq_status moq_linear_fp8_k4_run_avx512(const moq_linear_launch *l, moq_error *err); /* linear_fp8_avx512.c */
/* Byte offsets in that packed weight: u8 [N] NaN-row flags; MXFP8's rows16 e8m0 block scales. */
size_t     moq_linear_fp8_k4_nan_offset(const moq_weight *w);
size_t     moq_linear_fp8_k4_scale_offset(const moq_weight *w);
/* Block-scaled pairs: 64 bytes after the NaN flags (and MXFP8's scales): the weight block scales'
 * range, MXFP8 u8 [2] smallest and largest e8m0 code, FP8 128x128 f32 [2] smallest nonzero and
 * largest |scale|. */
size_t     moq_linear_fp8_k4_range_offset(const moq_weight *w);
/* Whether every block factor F (below) of this call is a normal f32 (MXFP8: exact, down to 2^-149):
 * then the rows add one FMA per block, as they always did; otherwise they split F. SX f32 [M, K / block]
 * the tokens' block scales. Real checkpoints' scales lie near 2^0 and always pass. */
bool       moq_blk_exact(const moq_weight *w, const void *packed, const float *SX, int64_t M);

/* Block-scaled pairs (FP8 128x128, MXFP8) in the k4fma and AVX-512 small-M rows: a block's f32 sum s
 * counts in units of 2^-8 (D·2^-120 × D·2^112) and enters the accumulator, which counts in units of
 * y, as s × F with F = weight block scale × token block scale × 2^8. F alone can leave the f32 range
 * (scales near 2^-100 and 2^-50 give 2^-142: an f32 subnormal that keeps few bits, or 0; near 2^100
 * and 2^30, +inf) while s·F and y are normal. Where F is a normal f32 (an exact power of two for
 * MXFP8, down to 2^-149) the rows add fma(s, F, acc) as always; elsewhere fma(s·b, a, acc) with
 * F = a·b, b = 2^j, a in the normal range and j of F's own sign, so s·b lies between s and s·F and is
 * exact unless the term is out of range anyway (below 2^-250 or above FLT_MAX); a call takes the
 * split only where moq_blk_exact says some block needs it. Tested by
 * test_block_scale_extremes (tests/kernels/test_linear.c). */

/* MXFP8: F = 2^(c-127) · sx · 2^8 is exact as 2^(c-127) × f32(sx·2^8) (sx·2^8 finite, the product at
 * least 2^-149 and below 2^128) for every weight code c in [cmin, cmax] iff lo <= sx <= hi. A NaN sx
 * passes (it propagates as before). */
static inline void moq_mx_exact_sx(int cmin, int cmax, float *lo, float *hi) {
    const int elo = -30 - cmin, ehi = 246 - cmax; /* c - 127 + log2(sx) + 8 in [-149, 127] */
    *lo = elo < -127 ? 0.0f : ldexpf(1.0f, elo);
    *hi = ldexpf(1.0f, ehi < 119 ? ehi : 119); /* and sx·2^8 <= 2^127 */
}

/* FP8 128x128: F = ws · sx · 2^8 as a · b. b = 1 and a = f32(ws·sx·2^8) (the one rounding the rows
 * always made) when that is a normal f32, zero, NaN or infinite; otherwise a = F rounded to 24 bits
 * and scaled into [2^-126, 2^-125) or [2^126, 2^127), b the power of two that undoes it (clamped to
 * f32: F beyond 2^-250 or 2^254 only makes terms that vanish or overflow anyway). */
static inline void moq_blk128_factor(float ws, float sx, float *a, float *b) {
    const double d = (double)ws * (double)sx * 256.0; /* exact: 24 × 24 bits */
    const double ad = fabs(d);
    if (d == 0 || isnan(d) || isinf(d) || (ad >= FLT_MIN && ad <= FLT_MAX)) {
        *a = (float)d, *b = 1.0f;
        return;
    }
    int e;
    (void)frexp(d, &e); /* d = f·2^e, |f| in [0.5, 1) */
    int j = ad < FLT_MIN ? e + 125 : e - 127;
    j = j < -126 ? -126 : j > 127 ? 127 : j;
    const double as = ldexp(d, -j);
    *a = (float)(as > FLT_MAX ? FLT_MAX : as < -FLT_MAX ? -FLT_MAX : as);
    *b = ldexpf(1.0f, j);
}

/* The same packed weight for every M (linear_gemm_avx2.c, linear_gemm_avx512.c; each row's M range
 * is in kernels.c): M = 1 the k4fma row, 2..64 (AVX-512) one decode of each weight for all tokens (register-blocked over tokens), above a packed
 * BLIS-style GEMM (f32 weight panels decoded once per cache block, 2-D thread split). */
size_t     moq_linear_gemm_workspace(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_gemm_run_avx2(const moq_linear_launch *l, moq_error *err);
moq_status moq_linear_gemm_run_avx512(const moq_linear_launch *l, moq_error *err);
/* FP8 per-tensor / per-channel, M >= 4, AVX512_BF16: the same packed weight and workspace, e4m3
 * decoded to bf16 pairs in registers, vdpbf16ps (linear_fp8_bf16dot_avx512.c). */
moq_status moq_linear_fp8_bf16dot_run_avx512(const moq_linear_launch *l, moq_error *err);

/* NVFP4 W4A16 decode (M <= 8) on AVX2 (linear_nvfp4_w4a16_avx2.c): M = 1 integer block sums
 * (vpmaddubsw, x in three 8-bit digits per 16-block), M = 2..8 e2m1 via vpshufb and f32 FMA; the
 * panel row's pack, its workspace plus the M = 1 digits; M > 8 runs the panel row. */
size_t     moq_linear_nvfp4_w4a16_packed_size_avx2(const moq_weight *w); /* the panel's + one scale flag per 16-row tile */
void       moq_linear_nvfp4_w4a16_pack_avx2(const moq_weight *w, void *dst); /* the panel's, codes regrouped (nvfp4_k4n_avx2.h) */
size_t     moq_linear_nvfp4_w4a16_workspace_avx2(const moq_weight *w, int64_t M, int n_threads);
moq_status moq_linear_nvfp4_w4a16_run_avx2(const moq_linear_launch *l, moq_error *err);

#endif
