/* layers.h — what the runner needs to open its pieces by checkpoint name: every matrix (dense
 * linears, fused qkv / gate_up through the packed mapping, lm_head, and the embedding table) goes
 * through the one loader, moq_linear_layer_open (scheme/load.c: resolution -> contract check ->
 * canonical moq_weight -> kernel), so the runner never looks at a format; norms and KV scales are
 * small f32 vectors/scalars read here. Embedding rows are gathered from the layer's canonical
 * weight (moq_weight_dequant_row). Memory: moq_blobs, freed with the model.
 * Tested through tests/model/test_model.c.
 */
#ifndef MOQ_MODEL_LAYERS_H
#define MOQ_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "moq.h"
#include "scheme/quant_key.h"
#include "scheme/slice.h"

/* Owned allocations of a model, released together. */
typedef struct moq_blobs {
    void  **p;
    size_t  n, cap;
    uint64_t bytes;
    double   validate_s, pack_s;  /* load time spent opening matrices, per phase        */
} moq_blobs;
void *moq_blobs_alloc(moq_blobs *b, size_t n);   /* 64-byte aligned, zeroed; NULL on failure */
void  moq_blobs_free(moq_blobs *b);

/* One prepared linear: the canonical weight (kept: embeddings dequantize rows from it) and the
 * kernel-bound layer. */
typedef struct moq_layer_linear {
    moq_weight        w;          /* copy of the canonical weight (pointers borrowed)          */
    const moq_linear *lin;        /* the kernel-bound layer, owned by ll                      */
    moq_linear_layer *ll;         /* opened by the loader (moq_linear_layer_open)             */
    moq_resolution  res;
    char            name[256];   /* module name, for messages ("model.layers.0.self_attn.qkv_proj") */
} moq_layer_linear;

/* Opens the dense linear `prefix` (kind MOQ_KIND_LINEAR or MOQ_KIND_LM_HEAD) through the loader,
 * moq_linear_layer_open, with the packed mapping {fused: shards} when shards is not NULL. */
moq_status moq_layers_load_linear(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                  moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                  moq_blobs *blobs, moq_error *err);

/* The same, keeping only this rank's part: slices[s] of packed shard s (of the layer when unfused);
 * NULL = whole (scheme/slice.h). */
moq_status moq_layers_load_linear_sliced(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                         moq_layer_kind kind, const char *const *shards, int n_shards, const moq_linear_opts *lopts,
                                         const moq_slice *slices, moq_blobs *blobs, moq_error *err);

/* Memory (docs/ARCHITECTURE.md "Weight memory"): moq_layers_load_linear keeps one copy of the
 * weight: when the kernel row packed it, the canonical codes are dropped (out->w.q = NULL) and the
 * mapped pages released; an embedding keeps its canonical weight (rows are gathered from it).
 * moq_layers_load_linear_kept (one unfused matrix) keeps it until moq_layers_drop_canonical, for a
 * caller that reads the canonical weight once after load (MLA dequantizes kv_b_proj). */
moq_status moq_layers_load_linear_kept(moq_layer_linear *out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                       moq_layer_kind kind, const moq_linear_opts *lopts, moq_blobs *blobs, moq_error *err);
void moq_layers_drop_canonical(moq_layer_linear *l);
/* Adds the layer's resident weight bytes (moq_linear_layer_memory) to mm. */
void moq_layers_memory(const moq_layer_linear *l, moq_model_memory *mm);

void moq_layers_close_linear(moq_layer_linear *l);

/* A plain tensor (norm weight, bias) as f32 [n] in blobs; dtype F32/BF16/F16; shape must have
 * exactly n elements. */
moq_status moq_layers_f32(float **out, const moq_checkpoint *c, const char *name, int64_t n, moq_blobs *blobs,
                          moq_error *err);
/* A scalar f32 tensor (k_scale, ...): *found false when absent. Shape [] or [1]. */
moq_status moq_layers_scalar(float *out, bool *found, const moq_checkpoint *c, const char *name, moq_error *err);

#endif
