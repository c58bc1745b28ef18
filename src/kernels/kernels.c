/* kernels.c — the kernel registry: one row per (op, pair, target, algorithm), tried in table
 * order for a layer's pair; the first whose CPU features and supports() fit is used. Within a
 * pair the widest ISA comes first; the `_ref` row of every pair is last and always fits.
 * Tested by tests/kernels/test_linear.c (every row against its pair's _ref row). */
#include "kernels/kernels.h"

#include <string.h>

#include "kernels/cpu/linear_cpu.h"
#ifdef MOQ_HAVE_CUDA
#include "kernels/cuda/rows_cuda.h"
#endif

#define AVX512 (MOQ_CPU_AVX512)
#define VNNI   (MOQ_CPU_AVX512 | MOQ_CPU_AVX512VNNI)
#define PANEL(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX512, AVX512, p, NULL, moq_linear_panel_packed_size, \
                      moq_linear_panel_pack, moq_linear_panel_workspace, moq_linear_panel_run_avx512, 0, 0}
#define BF16DOT(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX512, AVX512 | MOQ_CPU_AVX512BF16, 1, moq_linear_panel_bf16_supports, \
                      moq_linear_panel_packed_size, moq_linear_panel_pack, moq_linear_panel_workspace, moq_linear_panel_run_avx512, 0, 0}
#define PANEL2(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2, p, NULL, moq_linear_panel_packed_size, \
                      moq_linear_panel_pack, moq_linear_panel_workspace_avx2, moq_linear_panel_run_avx2, 0, 0}
#define FP8K4(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2, 0, NULL, moq_linear_fp8_k4_packed_size, \
                      moq_linear_fp8_k4_pack, moq_linear_fp8_k4_workspace, moq_linear_fp8_k4_run_avx2, 0, 0}
#define FP8K4_512(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX512, AVX512, 0, NULL, moq_linear_fp8_k4_packed_size, \
                      moq_linear_fp8_k4_pack, moq_linear_fp8_k4_workspace, moq_linear_fp8_k4_run_avx512, 0, 0}
#define GEMM2(nm, p, lo, hi) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2, 0, NULL, moq_linear_fp8_k4_packed_size, \
                      moq_linear_fp8_k4_pack, moq_linear_gemm_workspace, moq_linear_gemm_run_avx2, lo, hi}
#define GEMM512(nm, p, lo, hi) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX512, AVX512, 0, NULL, moq_linear_fp8_k4_packed_size, \
                      moq_linear_fp8_k4_pack, moq_linear_gemm_workspace, moq_linear_gemm_run_avx512, lo, hi}
#define K4BF16(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_AVX512, AVX512 | MOQ_CPU_AVX512BF16, 0, NULL, moq_linear_fp8_k4_packed_size, \
                      moq_linear_fp8_k4_pack, moq_linear_gemm_workspace, moq_linear_fp8_bf16dot_run_avx512, 4, 0}
#define CUDA_MMA(nm, p) {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CUDA_SM90, 0, 0, NULL, moq_cuda_row_packed_size, moq_cuda_row_pack, \
                         moq_cuda_row_workspace, moq_cuda_row_run, 0, 0}
#define CUDA_LT(nm, p)  {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CUDA_SM90, 0, 1, moq_cuda_row_lt_supports, moq_cuda_row_packed_size, \
                         moq_cuda_row_pack, moq_cuda_row_workspace_lt, moq_cuda_row_run, 0, 0}
#define CUDA_DQ(nm, p)  {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CUDA_SM90, 0, 2, moq_cuda_row_lt_supports, moq_cuda_row_packed_size, \
                         moq_cuda_row_pack, moq_cuda_row_workspace_dq, moq_cuda_row_run, 0, 0}
#define REF(nm, p)   {nm, MOQ_OP_LINEAR, p, MOQ_TARGET_CPU_REF, 0, 0, NULL, NULL, NULL, moq_linear_ref_workspace, moq_linear_ref_run, 0, 0}

const moq_kernel moq_kernel_table[] = {
#ifdef MOQ_HAVE_CUDA
    /* CUDA (opts.device = MOQ_DEVICE_CUDA only): activation quantizer on the GPU, then a weight-
     * streaming decode kernel for M <= 16 (tensor cores, every row) and a GEMM above. FP8 per-tensor
     * / per-token: the weight dequantized to exact bf16 + cuBLASLt bf16 first, then the mma rows
     * (both exact products, f32 sums: the CPU's result up to summation order); the cuBLASLt fp8
     * rows (FP8 tensor cores, whose accumulation is truncated: 2e-4..4e-4 relative to the exact sum
     * at K = 256, measured on the H200, enough to flip downstream activation codes, so a model's
     * logits move by 4 % against the CPU's) only when asked for by name (opts.kernel, --kernel). */
    CUDA_DQ("cuda_sm90_fp8_tensor_dequant_cublaslt", MOQ_PAIR_FP8_TENSOR),
    CUDA_DQ("cuda_sm90_fp8_row_dequant_cublaslt",    MOQ_PAIR_FP8_ROW),
    CUDA_MMA("cuda_sm90_fp8_tensor_dequant_mma",  MOQ_PAIR_FP8_TENSOR),
    CUDA_MMA("cuda_sm90_fp8_row_dequant_mma",     MOQ_PAIR_FP8_ROW),
    CUDA_LT("cuda_sm90_fp8_tensor_cublaslt", MOQ_PAIR_FP8_TENSOR),
    CUDA_LT("cuda_sm90_fp8_row_cublaslt",    MOQ_PAIR_FP8_ROW),
    CUDA_MMA("cuda_sm90_fp8_blk128_dequant_mma",  MOQ_PAIR_FP8_BLK128),
    /* NVFP4 / MXFP8 / BF16 at M > 16 likewise: the weight dequantized to exact bf16 (N-chunks in
     * the workspace), cuBLASLt bf16 with f32 sums; the mma rows when cuBLASLt cannot be loaded. */
    CUDA_DQ("cuda_sm90_nvfp4_w4a4_dequant_cublaslt",  MOQ_PAIR_NVFP4),
    CUDA_DQ("cuda_sm90_nvfp4_w4a16_dequant_cublaslt", MOQ_PAIR_NVFP4_W4A16),
    CUDA_DQ("cuda_sm90_mxfp8_dequant_cublaslt",       MOQ_PAIR_MXFP8),
    CUDA_DQ("cuda_sm90_bf16_cublaslt",                MOQ_PAIR_BF16),
    CUDA_MMA("cuda_sm90_nvfp4_w4a4_dequant_mma",  MOQ_PAIR_NVFP4),
    CUDA_MMA("cuda_sm90_nvfp4_w4a16_dequant_mma", MOQ_PAIR_NVFP4_W4A16),
    CUDA_MMA("cuda_sm90_mxfp8_dequant_mma",       MOQ_PAIR_MXFP8),
    CUDA_MMA("cuda_sm90_bf16_mma",                MOQ_PAIR_BF16),
#endif
    /* NVFP4 W4A4: integer dot products of e2m1 codes (×2 they are integers in [-12, 12]). */
    {"cpu_avx512_nvfp4_w4a4_vnni16", MOQ_OP_LINEAR, MOQ_PAIR_NVFP4, MOQ_TARGET_CPU_AVX512, VNNI, 0, NULL,
     moq_linear_nvfp4_vnni_packed_size, moq_linear_nvfp4_vnni_pack, moq_linear_nvfp4_vnni_workspace, moq_linear_nvfp4_vnni_run_avx512, 0, 0},
    /* e4m3 weights on rows16k4, one packed weight for every M; each row runs the M range in its
     * last two fields, other M the next row below on that weight (kernels.h). FP8 per-tensor /
     * per-channel at M >= 4 with AVX512_BF16: e4m3 × e4m3 products exact in bf16, vdpbf16ps
     * (32 products per instruction against the f32 FMA's 16; linear_fp8_bf16dot_avx512.c). */
    K4BF16("cpu_avx512_fp8_tensor_k4bf16dot", MOQ_PAIR_FP8_TENSOR),
    K4BF16("cpu_avx512_fp8_row_k4bf16dot",    MOQ_PAIR_FP8_ROW),
    /* linear_gemm_avx512.c: M = 2..64 each weight decoded once for all tokens (f32 FMA); above, for
     * the block-scaled pairs, a packed f32-panel GEMM (the unblocked ones: k4fma, measured faster). */
    GEMM512("cpu_avx512_fp8_tensor_gemm", MOQ_PAIR_FP8_TENSOR, 2, 64),
    GEMM512("cpu_avx512_fp8_row_gemm",    MOQ_PAIR_FP8_ROW,    2, 64),
    GEMM512("cpu_avx512_fp8_blk128_gemm", MOQ_PAIR_FP8_BLK128, 2, 0),
    GEMM512("cpu_avx512_mxfp8_gemm",      MOQ_PAIR_MXFP8,      2, 0),
    /* FP8 decoded in registers from rows16k4 (linear_fp8_avx512.c): 3 integer ops per 16 weights. */
    FP8K4_512("cpu_avx512_fp8_tensor_k4fma", MOQ_PAIR_FP8_TENSOR),
    FP8K4_512("cpu_avx512_fp8_row_k4fma",    MOQ_PAIR_FP8_ROW),
    FP8K4_512("cpu_avx512_fp8_blk128_k4fma", MOQ_PAIR_FP8_BLK128),
    FP8K4_512("cpu_avx512_mxfp8_k4fma",      MOQ_PAIR_MXFP8),
    /* Exact bf16 values on both sides: two products per lane per vdpbf16ps. */
    BF16DOT("cpu_avx512_nvfp4_w4a16_bf16dot", MOQ_PAIR_NVFP4_W4A16),
    BF16DOT("cpu_avx512_fp8_tensor_bf16dot",  MOQ_PAIR_FP8_TENSOR),
    BF16DOT("cpu_avx512_fp8_row_bf16dot",     MOQ_PAIR_FP8_ROW),
    BF16DOT("cpu_avx512_mxfp8_bf16dot",       MOQ_PAIR_MXFP8),
    BF16DOT("cpu_avx512_bf16_bf16dot",        MOQ_PAIR_BF16),
    /* Every pair: weights decoded to an f32 panel of 16 rows, activations quantize-dequantized. */
    PANEL("cpu_avx512_nvfp4_w4a4_dequant_fma",  MOQ_PAIR_NVFP4),
    PANEL("cpu_avx512_nvfp4_w4a16_dequant_fma", MOQ_PAIR_NVFP4_W4A16),
    PANEL("cpu_avx512_fp8_tensor_dequant_fma",  MOQ_PAIR_FP8_TENSOR),
    PANEL("cpu_avx512_fp8_row_dequant_fma",     MOQ_PAIR_FP8_ROW),
    PANEL("cpu_avx512_fp8_blk128_dequant_fma",  MOQ_PAIR_FP8_BLK128),
    PANEL("cpu_avx512_mxfp8_dequant_fma",       MOQ_PAIR_MXFP8),
    PANEL("cpu_avx512_bf16_dequant_fma",        MOQ_PAIR_BF16),
    PANEL("cpu_avx512_f16_dequant_fma",         MOQ_PAIR_F16),
    PANEL("cpu_avx512_f32_fma",                 MOQ_PAIR_F32),
    /* AVX2 + FMA + F16C, decode-first rows: NVFP4 W4A4 as integer block dot products (vpmaddubsw:
     * 2·e2m1 codes are integers), FP8 decoded in registers from an interleaved layout. */
    {"cpu_avx2_nvfp4_w4a4_maddubs", MOQ_OP_LINEAR, MOQ_PAIR_NVFP4, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2, 0, NULL,
     moq_linear_nvfp4_vnni_packed_size, moq_linear_nvfp4_vnni_pack, moq_linear_nvfp4_maddubs_workspace, moq_linear_nvfp4_maddubs_run_avx2, 0, 0},
    /* The packed GEMM on AVX2 (linear_gemm_avx2.c) at M > 16 for the block-scaled pairs and M >= 48
     * for FP8 per-tensor / per-channel (their k4fma rows below hold 6 tokens × 16 rows per pass with
     * no block accumulators and tie the GEMM at M = 32 on Zen 3; measured: docs/PERFORMANCE.md). */
    GEMM2("cpu_avx2_fp8_tensor_gemm", MOQ_PAIR_FP8_TENSOR, 48, 0),
    GEMM2("cpu_avx2_fp8_row_gemm",    MOQ_PAIR_FP8_ROW,    48, 0),
    GEMM2("cpu_avx2_fp8_blk128_gemm", MOQ_PAIR_FP8_BLK128, 17, 0),
    GEMM2("cpu_avx2_mxfp8_gemm",      MOQ_PAIR_MXFP8,      17, 0),
    FP8K4("cpu_avx2_fp8_tensor_k4fma", MOQ_PAIR_FP8_TENSOR),
    FP8K4("cpu_avx2_fp8_row_k4fma",    MOQ_PAIR_FP8_ROW),
    FP8K4("cpu_avx2_fp8_blk128_k4fma", MOQ_PAIR_FP8_BLK128),
    FP8K4("cpu_avx2_mxfp8_k4fma",      MOQ_PAIR_MXFP8),
    {"cpu_avx2_nvfp4_w4a16_shuffma", MOQ_OP_LINEAR, MOQ_PAIR_NVFP4_W4A16, MOQ_TARGET_CPU_AVX2, MOQ_CPU_AVX2, MOQ_PAIR_NVFP4_W4A16, NULL,
     moq_linear_nvfp4_w4a16_packed_size_avx2, moq_linear_nvfp4_w4a16_pack_avx2, moq_linear_nvfp4_w4a16_workspace_avx2, moq_linear_nvfp4_w4a16_run_avx2, 0, 0}, /* M <= 8; above: the panel */
    /* AVX2 + FMA + F16C: the same panel algorithm on 8-lane vectors. */
    PANEL2("cpu_avx2_nvfp4_w4a4_dequant_fma",  MOQ_PAIR_NVFP4),
    PANEL2("cpu_avx2_nvfp4_w4a16_dequant_fma", MOQ_PAIR_NVFP4_W4A16),
    PANEL2("cpu_avx2_fp8_tensor_dequant_fma",  MOQ_PAIR_FP8_TENSOR),
    PANEL2("cpu_avx2_fp8_row_dequant_fma",     MOQ_PAIR_FP8_ROW),
    PANEL2("cpu_avx2_fp8_blk128_dequant_fma",  MOQ_PAIR_FP8_BLK128),
    PANEL2("cpu_avx2_mxfp8_dequant_fma",       MOQ_PAIR_MXFP8),
    PANEL2("cpu_avx2_bf16_dequant_fma",        MOQ_PAIR_BF16),
    PANEL2("cpu_avx2_f16_dequant_fma",         MOQ_PAIR_F16),
    PANEL2("cpu_avx2_f32_fma",                 MOQ_PAIR_F32),
    /* References: always present, always last. */
    REF("cpu_ref_nvfp4_w4a4",  MOQ_PAIR_NVFP4),
    REF("cpu_ref_nvfp4_w4a16", MOQ_PAIR_NVFP4_W4A16),
    REF("cpu_ref_fp8_tensor",  MOQ_PAIR_FP8_TENSOR),
    REF("cpu_ref_fp8_row",     MOQ_PAIR_FP8_ROW),
    REF("cpu_ref_fp8_blk128",  MOQ_PAIR_FP8_BLK128),
    REF("cpu_ref_mxfp8",       MOQ_PAIR_MXFP8),
    REF("cpu_ref_bf16",        MOQ_PAIR_BF16),
    REF("cpu_ref_f16",         MOQ_PAIR_F16),
    REF("cpu_ref_f32",         MOQ_PAIR_F32),
};
const size_t moq_kernel_table_len = sizeof moq_kernel_table / sizeof moq_kernel_table[0];

const moq_kernel *moq_kernel_find(const char *name) {
    for (size_t i = 0; i < moq_kernel_table_len; i++)
        if (strcmp(moq_kernel_table[i].name, name) == 0) return &moq_kernel_table[i];
    return NULL;
}
