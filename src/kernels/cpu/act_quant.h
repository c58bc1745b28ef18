/* act_quant.h — run-time activation quantizers, one row of K values at a time (NUMERICS §2.4,
 * §4.3, §5.1–§5.3). Inputs are f32 (bf16 activations are widened exactly first). Reference form:
 * plain C, every step one correctly rounded f32 operation in the order the spec gives.
 * Tested by tests/kernels/test_act_quant.c (bit-exact vs definitions written in the test). */
#ifndef MOQ_KERNELS_CPU_ACT_QUANT_H
#define MOQ_KERNELS_CPU_ACT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define MOQ_FP8_TOKEN_MIN_SCALE (1.0f / (448.0f * 512.0f)) /* §5.2: vLLM min_scaling_factor   */
#define MOQ_FP8_G128_EPS        1e-10f                     /* §5.3: running max starts at eps */
#define MOQ_RCPA_TABLE_BYTES    ((size_t)1 << 21)          /* 2^23 entries, 2 bits each        */

/* rcp.approx.ftz.f32 as measured on the H200 (golden/rcp/README.md): f32(1/x) corrected by the
 * table entry of x's mantissa (0 same, 1 one ulp up, 2 one ulp down); subnormal in or out -> 0
 * (inputs flush to ±0 so rcpa gives ±inf). corr == NULL: the IEEE value f32(1/x). */
float moq_rcpa(float x, const uint8_t *corr);

/* §5.1 static per-tensor: q = E4s(clamp(x ⊗ f32(1 ⊘ s_in), ±448)). q: e4m3 [K]. */
void moq_act_fp8_static_ref(const float *x, size_t K, float s_in, uint8_t *q);
/* §5.2 per token: s = max(f32(amax ⊘ 448), 1/(448·512)); q = E4s(clamp(x ⊘ s, ±448)). */
void moq_act_fp8_token_ref(const float *x, size_t K, uint8_t *q, float *scale);
/* §5.3 per token per 128 columns (K % 128 == 0): s_g = f32(max(eps, amax_g) ⊘ 448). */
void moq_act_fp8_g128_ref(const float *x, size_t K, uint8_t *q, float *scales /* [K/128] */);
/* §2.4 NVFP4 (K % 16 == 0) with global S = f32(1 ⊘ input_scale): q packed e2m1 [K/2], sf e4m3
 * [K/16] (linear layout). Guard of vLLM's kernel: SFd == 0 -> outScale 0. rcpa via corr. */
void moq_act_nvfp4_ref(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf);
/* §4.3 MXFP8 (K % 32 == 0): c = U8up(amax ⊗ f32(1/448)), q = E4s(clamp(x ⊗ 2^(127-c), ±448)),
 * c == 0 multiplies by 0 (FTZ on the GPU). q e4m3 [K], sf e8m0 [K/32]. */
void moq_act_mxfp8_ref(const float *x, size_t K, uint8_t *q, uint8_t *sf);

/* AVX-512 twin of moq_act_nvfp4_ref (bit-exact for finite x). When a8 is not NULL also writes
 * a8 = 2·D2(code) as int8 [K] and asum[b] = Σ of a8 over block b (the VNNI kernel's operands). */
void moq_act_nvfp4_avx512(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf, int8_t *a8,
                          int32_t *asum);

/* AVX2 twin of the same (act_quant_avx2.c), same contract; q may be NULL. */
void moq_act_nvfp4_avx2(const float *x, size_t K, float S, const uint8_t *corr, uint8_t *q, uint8_t *sf, int8_t *a8, int32_t *asum);

/* AVX-512 twins of the FP8 / MXFP8 quantizers (bit-exact for finite x). q may be NULL; deq, when
 * not NULL, receives the dequantized f32 values with the group scales of g128/MXFP8 applied and
 * without the per-token / static scale (as moq_act_dequant_row). */
void moq_act_fp8_static_avx512(const float *x, size_t K, float s_in, uint8_t *q, float *deq);
void moq_act_fp8_token_avx512(const float *x, size_t K, uint8_t *q, float *scale, float *deq);
void moq_act_fp8_g128_avx512(const float *x, size_t K, uint8_t *q, float *scales, float *deq);
void moq_act_mxfp8_avx512(const float *x, size_t K, uint8_t *q, uint8_t *sf, float *deq);
/* moq_act_dequant_row with the AVX-512 quantizers (same results, bit for bit). */
void moq_act_dequant_row_avx512(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp);

/* AVX2 (+FMA/F16C) twins of the same four (act_quant_avx2.c), same contract; bit-exact with the
 * references for every input, NaN and inf included. */
void moq_act_fp8_static_avx2(const float *x, size_t K, float s_in, uint8_t *q, float *deq);
void moq_act_fp8_token_avx2(const float *x, size_t K, uint8_t *q, float *scale, float *deq);
void moq_act_fp8_g128_avx2(const float *x, size_t K, uint8_t *q, float *scales, float *deq);
void moq_act_mxfp8_avx2(const float *x, size_t K, uint8_t *q, uint8_t *sf, float *deq);
/* moq_act_dequant_row with the AVX2 FP8 / MXFP8 quantizers (same results, bit for bit); other
 * pairs go to moq_act_dequant_row itself. */
void moq_act_dequant_row_avx2(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp);
/* Token row m of l's x as e4m3 codes for the AVX2 e4m3-weight rows (k4fma, gemm): the f32 row in
 * xr [K], the pair's codes (the AVX2 quantizer above, FP8 / MXFP8 pairs only) in codes [K] (MXFP8:
 * its e8m0 block codes after them, K / 32 bytes), the per-token scale in *tok (1 when none), the
 * activation block scales in sx (128x128: f32 per 128; MXFP8: 2^(c-127) per 32). FP8 per-tensor:
 * s_in lives in the row scale. */
void moq_act_e4m3_codes_avx2(const moq_linear_launch *l, int64_t m, float *xr, uint8_t *codes, float *tok, float *sx);

/* The MXFP8 quantizer's multiplier for block code c (§4.3): 2^(127-c), 0 for c = 0 — as
 * ldexpf(1, 127 - c) gives it (the reference's form), built from its bits: normal for c <= 253,
 * subnormal for 254 (2^-127) and 255 (2^-128, a NaN amax). The SIMD twins' form. */
static inline float moq_mxfp8_act_mult(uint8_t c) {
    const int e = 254 - (int)c;
    return c == 0 ? 0.0f : moq_f32_from_bits(e >= 1 ? (uint32_t)e << 23 : 0x00400000u >> -e);
}

/* Quantize activation row m the way launch l's pair says, then dequantize it back to f32 with
 * every per-group scale folded in, except the per-token scale (returned in *row_scale, 1 when
 * none) and the static tensor scale (folded into the pair's row_scale). Pair without activation
 * quantization: x widened to f32. xq: f32 [K] output. tmp: >= 2K + 64 bytes scratch.
 * Exactly representable: D4·2^e, D2·D4 products are exact in f32; FP8 g128 D4·s_g rounds once. */
void moq_act_dequant_row(const moq_linear_launch *l, int64_t m, float *xq, float *row_scale, uint8_t *tmp);

#endif
