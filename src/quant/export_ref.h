/* export_ref.h — ModelOpt's weight exporters, restated in C (NUMERICS.md §2.3, §5.1, §9.4): what a
 * checkpoint written by ModelOpt contains for a given weight. Used by `moq synth`, by tests that
 * build checkpoints, and later by the quantizer. Portable C, no allocation. */
#ifndef MOQ_QUANT_EXPORT_REF_H
#define MOQ_QUANT_EXPORT_REF_H

#include <stddef.h>
#include <stdint.h>

/* NVFP4 weight, W f32 [N, K] (values already representable in the model dtype), K % 16 == 0.
 *   packed u8 [N, K/2] (low nibble = even k), sf e4m3 [N, K/16], *ws2 f32 scalar.
 * amax: the tensor amax to use (the group max for fused layers), or < 0 to compute it from W. */
void moq_export_nvfp4_weight(const float *W, size_t N, size_t K, float amax, uint8_t *packed,
                             uint8_t *sf, float *ws2);

/* FP8 per-tensor weight: q e4m3 [N, K], *scale = f32(amax / 448). The quotient is rounded to the
 * model dtype before the e4m3 cast, as ModelOpt's 0-dim scale division does in PyTorch:
 * model_bf16 = 1 for bf16, 0 for fp16. amax < 0 computes it from W. */
void moq_export_fp8_tensor_weight(const float *W, size_t N, size_t K, float amax, int model_bf16,
                                  uint8_t *q, float *scale);

/* FP8 per-channel weight (FP8_PER_CHANNEL_PER_TOKEN, NUMERICS.md §5.2): scale f32 [N] with
 * scale[n] = f32(rowamax / 448) (zero row -> 1.0), q e4m3 [N, K] = E4n(f32(w / scale[n])): single
 * rounding, the scale being a 2-D tensor. */
void moq_export_fp8_row_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale);

/* FP8 128x128 block weight (FP8_PB_WO, NUMERICS.md §5.3), K % 128 == 0 (N may end in a partial
 * block): scale f32 [ceil(N/128), K/128] (written as [.., 1, .., 1]) = f32(blockamax / 448) (zero
 * block -> 1.0), q e4m3 [N, K] = E4n(f32(w / scale)). */
void moq_export_fp8_block_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale);

/* MXFP8 weight (NUMERICS.md §4.2), K % 32 == 0: per 32 values e = clamp(ceil(log2(f32(bamax / 448))),
 * -127, 127) (zero block -> -127), code u8 [N, K/32] = e + 127, q e4m3 [N, K] =
 * E4n(clamp(f32(w * 2^(127 - code)), ±448)). */
void moq_export_mxfp8_weight(const float *W, size_t N, size_t K, uint8_t *q, uint8_t *scale);

/* amax over n values (max |x|). */
float moq_amax_f32(const float *x, size_t n);

#endif
