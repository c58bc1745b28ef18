/* export_moe_ref.h — ModelOpt weight exporters for the formats export_ref.h lacks: FP8 128x128
 * blocks (FP8_PB_WO, NUMERICS §5.3) and MXFP8 (§4.2). Used by tests/moe to write expert
 * checkpoints and by `moq bench moe`. Portable C, no allocation. */
#ifndef MOQ_QUANT_EXPORT_MOE_REF_H
#define MOQ_QUANT_EXPORT_MOE_REF_H

#include <stddef.h>
#include <stdint.h>

/* FP8_PB_WO: W f32 [N, K] -> q e4m3 [N, K], scale f32 [ceil(N/128), ceil(K/128)] (the file stores
 * it as [N/128, 1, K/128, 1]). s_blk = f32(blkamax / 448), zero block -> 1.0 (export_amax);
 * q = E4n(f32(w ⊘ s_blk)) — one rounding: the scale is a 2-D tensor (§5.3). */
void moq_export_fp8_block_weight(const float *W, size_t N, size_t K, uint8_t *q, float *scale);

/* MXFP8: W f32 [N, K], K % 32 == 0 -> q e4m3 [N, K], sf e8m0 u8 [N, K/32].
 * c = clamp(ceil(log2(f32(bamax ⊘ 448))), -127, 127) + 127 (zero block -> 0);
 * q = E4n(clamp(f32(w ⊗ 2^(127-c)), ±448)) (§4.2). */
void moq_export_mxfp8_weight(const float *W, size_t N, size_t K, uint8_t *q, uint8_t *sf);

#endif
