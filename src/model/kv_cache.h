/* kv_cache.h — the per-layer key/value cache, preallocated for the context length at open; no
 * allocation per token. Element encodings are table rows (kv_cache.c): f32, bf16, and e4m3 with
 * per-layer static k_scale / v_scale (NUMERICS §8: write E4s(f32(x ⊘ scale)), true division,
 * saturating; read D4(code) · scale).
 *
 * Layout per layer and per K/V: [ctx, KV heads, D] elements, position-major, so one decode step
 * writes one contiguous row. Tested by tests/model/test_model.c (FP8 KV vs an fp64 oracle that
 * quantizes K and V itself).
 */
#ifndef MOQ_MODEL_KV_CACHE_H
#define MOQ_MODEL_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "moq.h"

typedef struct moq_kv_cache {
    moq_elem  elem;            /* MOQ_ELEM_F32, MOQ_ELEM_BF16 or MOQ_ELEM_E4M3               */
    int64_t   n_layers, ctx, row;   /* row = KV heads * D elements per position                */
    size_t    elem_bytes;
    uint8_t  *k, *v;           /* [L, ctx, row] elements each, owned                           */
    float    *k_scale, *v_scale; /* f32 [L] (1 for unscaled encodings), owned                 */
    float     lut[256];        /* e4m3 code -> f32                                             */
} moq_kv_cache;

/* The cache encoding for a config's kv_cache_quant_algo (NULL / "auto" = `dflt`); unsupported
 * algorithms are MOQ_ERR_UNSUPPORTED naming config.json. */
moq_status moq_kv_elem_for_algo(const char *algo, moq_elem dflt, moq_elem *out, bool *scaled, moq_error *err);

moq_status moq_kv_cache_create(moq_kv_cache *kv, moq_elem elem, int64_t n_layers, int64_t ctx, int64_t row, moq_error *err);
/* A cache with K rows only (v NULL; writes ignore v, reads of V are invalid): MLA's [latent | rope key]. */
moq_status moq_kv_cache_create_k(moq_kv_cache *kv, moq_elem elem, int64_t n_layers, int64_t ctx, int64_t row, moq_error *err);
void       moq_kv_cache_free(moq_kv_cache *kv);
/* Stores k, v f32 [row] at (layer, pos) (v unused by a K-only cache). */
void       moq_kv_cache_write(moq_kv_cache *kv, int64_t layer, int64_t pos, const float *k, const float *v);
/* Reads row `pos` of layer's K (which=0) or V (which=1), elements [off, off+n) into out f32. */
void       moq_kv_cache_read(const moq_kv_cache *kv, int which, int64_t layer, int64_t pos, int64_t off, int64_t n, float *out);
/* The same row in place, for an f32 cache (what moq_kv_cache_read would copy); NULL for the other
 * encodings, whose values need decoding. Lives as long as the cache; rewritten by a write there. */
static inline const float *moq_kv_cache_row_f32(const moq_kv_cache *kv, int which, int64_t layer, int64_t pos, int64_t off) {
    if (kv->elem != MOQ_ELEM_F32) return NULL;
    return (const float *)(which ? kv->v : kv->k) + ((size_t)layer * (size_t)kv->ctx + (size_t)pos) * (size_t)kv->row + (size_t)off;
}
/* Bytes held. */
size_t     moq_kv_cache_bytes(const moq_kv_cache *kv);

#endif
