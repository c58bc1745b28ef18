/* export_ref.h — ModelOpt's weight exporters, restated in C (NUMERICS.md §2.3, §5.1, §9.4): what a
 * checkpoint written by ModelOpt contains for a given weight. Used by `moq synth`, by tests that
 * build checkpoints, and later by the quantizer. Portable C, no allocation. */
#ifndef MOQ_QUANT_EXPORT_REF_H
#define MOQ_QUANT_EXPORT_REF_H

#include <stddef.h>
#include <stdint.h>

#include "moq.h"

/* NVFP4 weight, W f32 [N, K] (values already representable in the model dtype), K % 16 == 0.
 *   packed u8 [N, K/2] (low nibble = even k), sf e4m3 [N, K/16], *ws2 = f32(amax ⊗ MOQ_RCP2688). Element codes
 *   carry the sign of (q < 0), as ModelOpt's _cast_fp4: a -0.0 weight is code 0.
 * amax: the tensor amax to use (the group max for fused layers), or < 0 to compute it from W. */
void moq_export_nvfp4_weight(const float *W, size_t N, size_t K, float amax, uint8_t *packed,
                             uint8_t *sf, float *ws2);

/* FP8 per-tensor weight: q e4m3 [N, K], *scale = f32(amax / 448) (amax 0 -> scale 1). ModelOpt
 * divides the model-dtype weight by the 0-dim f32 scale on the GPU: PyTorch keeps the model dtype,
 * so the scale is read as that dtype and the quotient rounded to it before the e4m3 cast:
 * q = E4n(md(w / md(s))) with md = bf16, f16 or (MOQ_DT_F32) nothing (NUMERICS.md §12, measured on
 * real exports; §5.1's example omits md(s)). amax < 0 computes it from W. */
void moq_export_fp8_tensor_weight(const float *W, size_t N, size_t K, float amax, moq_dtype model_dtype,
                                  uint8_t *q, float *scale);

/* FP8 per-channel weight (FP8_PER_CHANNEL_PER_TOKEN, NUMERICS.md §5.2): scale f32 [N] with
 * scale[n] = f32(rowamax ⊗ MOQ_RCP448) (zero row -> 1.0), q e4m3 [N, K] = E4n(f32(w / scale[n])): single
 * rounding, the scale being a 2-D tensor. */
void moq_export_fp8_row_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale);

/* FP8 128x128 block weight (FP8_PB_WO, NUMERICS.md §5.3), K % 128 == 0 (N may end in a partial
 * block): scale f32 [ceil(N/128), K/128] (written as [.., 1, .., 1]) = f32(blockamax ⊗ MOQ_RCP448) (zero
 * block -> 1.0), q e4m3 [N, K] = E4n(f32(w / scale)). */
void moq_export_fp8_block_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale);
/* The same for a weight of one block (N <= 128, K == 128) whose amax is given: ModelOpt's fusion
 * step gives a one-element block amax the group max (q/k/v, gate/up), like a per-tensor amax. */
void moq_export_fp8_block_weight_amax(const float *W, size_t N, size_t K, float amax, uint8_t *q, float *scale);

/* MXFP8 weight (NUMERICS.md §4.2), K % 32 == 0: per 32 values e = clamp(ceil(log2(f32(bamax ⊗ MOQ_RCP448))),
 * -127, 127) (zero block -> -127), code u8 [N, K/32] = e + 127, q e4m3 [N, K] =
 * E4n(clamp(f32(w * 2^(127 - code)), ±448)). */
void moq_export_mxfp8_weight(const float *W, size_t N, size_t K, uint8_t *q, uint8_t *scale);

/* ModelOpt computes most scales as a CUDA f32 tensor divided by a Python number, which PyTorch
 * performs as a multiplication by the f32 reciprocal (div_true_kernel_cuda's CPU-scalar path):
 * scale = f32(amax ⊗ f32(1/448)) or f32(amax ⊗ f32(1/2688)), not f32(amax ⊘ 448). Measured on the
 * real exports (tests/data/modelopt_real: every FP8_PER_CHANNEL_PER_TOKEN row scale; f32(amax ⊘ 448)
 * misses about 1 in 9). The exceptions divide: FP8 per-tensor weight scales (a Python float
 * amax.item() / 448) and NVFP4 block scales (tensor by tensor). */
#define MOQ_RCP448  (1.0f / 448.0f)    /* f32(1/448)  = 0x3B124925 */
#define MOQ_RCP2688 (1.0f / 2688.0f)   /* f32(1/2688)              */

/* amax over n values (max |x|). */
float moq_amax_f32(const float *x, size_t n);

#endif
