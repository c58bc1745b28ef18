/* layers.h — "open a linear by checkpoint prefix": resolution (config/resolve.c) -> the scheme's
 * tensor contract (scheme/scheme.c) -> one canonical moq_weight (scheme/quant_key.h) -> a
 * moq_linear from the kernel registry. The runner (model.c) only calls this; it never looks at a
 * format. When the `loader` branch's moq_linear_open lands, moq_layers_open_linear becomes a call
 * to it.
 *
 * Fused modules (qkv_proj, gate_up_proj) are resolved once under the fused name with the packed
 * mapping (so shards that disagree are an error naming every shard), then their shards' tensors
 * are concatenated along N into one weight whose per-shard static scales are kept
 * (moq_weight.shard_scale / shard_in_scale; no requantization).
 *
 * Memory: tensors are borrowed from the checkpoint mmap when they can be used in place; copies
 * (fused concatenation, bias and scales converted to f32, misaligned data) go to a moq_blobs list
 * that the model frees at once. Tested through tests/model/test_model.c.
 */
#ifndef MOQ_MODEL_LAYERS_H
#define MOQ_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "moq.h"
#include "scheme/quant_key.h"

/* Owned allocations of a model, released together. */
typedef struct moq_blobs {
    void  **p;
    size_t  n, cap;
    uint64_t bytes;
    double   validate_s, pack_s;  /* load time spent in moq_layers_open_linear, per phase */
} moq_blobs;
void *moq_blobs_alloc(moq_blobs *b, size_t n);   /* 64-byte aligned, zeroed; NULL on failure */
void  moq_blobs_free(moq_blobs *b);

/* One prepared linear: the canonical weight (kept: embeddings dequantize rows from it) and the
 * kernel-bound layer. */
typedef struct moq_layer_linear {
    moq_weight        w;          /* copy of the canonical weight (pointers borrowed)          */
    const moq_linear *lin;        /* the kernel-bound layer, owned by own or ll               */
    moq_linear       *own;        /* created here (embeddings, routers, experts)              */
    moq_linear_layer *ll;         /* opened by the loader (moq_linear_layer_open: dense linears) */
    moq_resolution  res;
    char            name[256];   /* module name, for messages ("model.layers.0.self_attn.qkv_proj") */
} moq_layer_linear;

/* Opens the dense linear `prefix` (kind MOQ_KIND_LINEAR or MOQ_KIND_LM_HEAD) through the loader,
 * moq_linear_layer_open, with the packed mapping {fused: shards} when shards is not NULL. */
moq_status moq_layers_load_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                  moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                  moq_blobs *blobs, moq_error *err);

/* Opens module `prefix` of kind `kind` with moq's own glue (used for embeddings). When `shards` is not NULL the module is the fused one
 * `prefix` = <parent>.<fused> built from <parent>.<shards[i]> (n_shards entries); the packed
 * mapping passed to resolution is {fused, shards}. q may be NULL (unquantized checkpoint).
 * Errors name the checkpoint tensor or the module. */
moq_status moq_layers_open_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q,
                                  const char *prefix, moq_layer_kind kind, const char *const *shards,
                                  int n_shards, const moq_linear_opts *lopts, moq_blobs *blobs, moq_error *err);
void moq_layers_close_linear(moq_layer_linear *l);

/* A plain tensor (norm weight, bias) as f32 [n] in blobs; dtype F32/BF16/F16; shape must have
 * exactly n elements. */
moq_status moq_layers_f32(float **out, const moq_checkpoint *c, const char *name, int64_t n, moq_blobs *blobs,
                          moq_error *err);
/* A scalar f32 tensor (k_scale, ...): *found false when absent. Shape [] or [1]. */
moq_status moq_layers_scalar(float *out, bool *found, const moq_checkpoint *c, const char *name, moq_error *err);

#endif
