/* linear_cpu.h — CPU linear rows: the `_ref` kernel (linear_ref.c) and the ISA drivers
 * (linear_dequant_panel_avx512.c, linear_nvfp4_avx512.c, the *_avx2.c twins), with their pack/workspace hooks.
 * Included by kernels.c (the registry) and the ISA files; the ISA files include nothing else
 * of moq but this, kernels.h and the layout headers. */
#ifndef MOQ_KERNELS_CPU_LINEAR_CPU_H
#define MOQ_KERNELS_CPU_LINEAR_CPU_H

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
