/* quant_key.h — the C form of vLLM's QuantKey, and the canonical in-memory weight that every scheme
 * produces and every kernel consumes (STYLE.md §6 "canonicalize, then pack").
 *
 * This header is the only part of scheme/ that kernels/ may include: kernels never see JSON, file
 * names or quant_algo strings. The scheme table (scheme.c) maps a quant_algo to a (weight key,
 * activation key) pair; the kernel registry (kernels/kernels.c) maps key pairs to kernels.
 */
#ifndef MOQ_SCHEME_QUANT_KEY_H
#define MOQ_SCHEME_QUANT_KEY_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

/* How values of one tensor role are encoded. group_rows/group_cols: -1 = whole extent, so
 * (-1,-1) = one scale per tensor, (1,-1) = per row (weight: output channel; activation: token),
 * (1,16) NVFP4 blocks, (1,32) MXFP8 blocks, (128,128) FP8 weight blocks, (1,128) FP8 activation
 * groups. An unquantized tensor has scale_elem == MOQ_ELEM_NONE. */
typedef struct moq_quant_key {
    moq_elem elem;          /* element encoding of the values                              */
    moq_elem scale_elem;    /* encoding of the per-group scale (MOQ_ELEM_NONE if none)      */
    int16_t  group_rows;
    int16_t  group_cols;
    bool     scale_static;  /* scale read from the checkpoint vs computed at run time       */
    bool     global_scale;  /* a second f32 per-tensor scale on top of the group scales     */
} moq_quant_key;

/* The keys the ModelOpt schemes use, one row each (defined in quant_key.c). */
extern const moq_quant_key MOQ_KEY_W_F32, MOQ_KEY_W_BF16, MOQ_KEY_W_F16;
extern const moq_quant_key MOQ_KEY_W_FP8_TENSOR;   /* e4m3 [N,K], f32 scale per tensor (per shard)  */
extern const moq_quant_key MOQ_KEY_W_FP8_ROW;      /* e4m3 [N,K], f32 [N]                           */
extern const moq_quant_key MOQ_KEY_W_FP8_BLK128;   /* e4m3 [N,K], f32 [ceil(N/128), K/128]          */
extern const moq_quant_key MOQ_KEY_W_NVFP4;        /* e2m1 [N,K/2], e4m3 [N,K/16], f32 global        */
extern const moq_quant_key MOQ_KEY_W_MXFP8;        /* e4m3 [N,K], e8m0 [N,K/32]                      */
extern const moq_quant_key MOQ_KEY_A_NONE;         /* activations stay f32/bf16 (W-only schemes)    */
extern const moq_quant_key MOQ_KEY_A_FP8_TENSOR_STATIC; /* e4m3, checkpoint input_scale              */
extern const moq_quant_key MOQ_KEY_A_FP8_TOKEN_DYN;     /* e4m3, per-token scale at run time         */
extern const moq_quant_key MOQ_KEY_A_FP8_G128_DYN;      /* e4m3, per token per 128 columns           */
extern const moq_quant_key MOQ_KEY_A_NVFP4_DYN;    /* e2m1 + e4m3 per 16, global = input_scale      */
extern const moq_quant_key MOQ_KEY_A_MXFP8_DYN;    /* e4m3 + e8m0 per 32 (ceil rule)                 */

bool moq_quant_key_eq(const moq_quant_key *a, const moq_quant_key *b);
/* "w:e2m1/e4m3[1x16]+g" style short description for messages. */
const char *moq_quant_key_str(const moq_quant_key *k, char *buf, size_t n);

/* A fused module (qkv_proj, gate_up_proj, MoE w13) keeps its shards' static scales when they
 * differ instead of requantizing to the max (no accuracy loss). At most this many shards. */
#define MOQ_MAX_SHARDS 8

/* Canonical weight of one linear layer (or one expert projection): y = x · Wᵀ.
 * Pointers are borrowed (checkpoint mmap or the model's arena) and outlive the layer.
 *   q       codes: e4m3 u8 [N, K] | packed e2m1 u8 [N, K/2] | bf16/f16 u16 [N, K] | f32 [N, K]
 *   scale   FP8_TENSOR: NULL (see shard_scale) | FP8_ROW: f32 [N] | FP8_BLK128: f32 [ceil(N/128), K/128]
 *           NVFP4: e4m3 u8 [N, K/16] | MXFP8: e8m0 u8 [N, K/32] | unquantized: NULL
 *   shards  rows [row0[s], row0[s+1]) of W came from shard s; shard_scale[s] is that shard's
 *           FP8 weight_scale or NVFP4 weight_scale_2; shard_in_scale[s] its input_scale (static
 *           activation keys). n_shards = 1 for an unfused layer.
 *   bias    f32 [N] or NULL
 */
typedef struct moq_weight {
    moq_quant_key w, a;
    int64_t       N, K;
    const void   *q;
    const void   *scale;
    int           n_shards;
    int64_t       row0[MOQ_MAX_SHARDS + 1];
    float         shard_scale[MOQ_MAX_SHARDS];
    float         shard_in_scale[MOQ_MAX_SHARDS];
    const float  *bias;
    const float  *pre_scale;  /* f32 [K] or NULL: AWQ pre_quant_scale, x[:, k] * pre_scale[k] (f32)
                                 before the activation quantizer (NVFP4_AWQ)                   */
} moq_weight;

#endif
