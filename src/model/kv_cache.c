/* kv_cache.c — KV cache storage (see kv_cache.h). Tested by tests/model/test_model.c. */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "config/modules.h"
#include "core/error.h"
#include "format/format.h"

moq_status moq_kv_elem_for_algo(const char *algo, moq_elem dflt, moq_elem *out, bool *scaled, moq_error *err) {
    *out = dflt;
    *scaled = false;
    if (!algo || strcmp(algo, "auto") == 0) return MOQ_OK;
    if (moq_kv_algo_find(algo, out, scaled)) return MOQ_OK; /* the table: config/modules.c */
    *out = dflt;
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "kv_cache_quant_algo \"%s\", expected FP8 or none", algo);
}

moq_status moq_kv_cache_create(moq_kv_cache *kv, moq_elem elem, int64_t n_layers, int64_t ctx, int64_t row, moq_error *err) {
    memset(kv, 0, sizeof *kv);
    kv->elem = elem;
    kv->n_layers = n_layers;
    kv->ctx = ctx;
    kv->row = row;
    kv->elem_bytes = elem == MOQ_ELEM_F32 ? 4 : elem == MOQ_ELEM_BF16 ? 2 : 1;
    const size_t n = (size_t)n_layers * (size_t)ctx * (size_t)row * kv->elem_bytes;
    kv->k = malloc(n ? n : 1);
    kv->v = malloc(n ? n : 1);
    kv->k_scale = malloc((size_t)n_layers * sizeof(float));
    kv->v_scale = malloc((size_t)n_layers * sizeof(float));
    if (!kv->k || !kv->v || !kv->k_scale || !kv->v_scale) {
        moq_kv_cache_free(kv);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_model_open", "out of memory for a KV cache of %zu bytes (%lld layers x %lld positions); lower --ctx", 2 * n,
                        (long long)n_layers, (long long)ctx);
    }
    for (int64_t l = 0; l < n_layers; l++) kv->k_scale[l] = kv->v_scale[l] = 1.0f;
    for (int c = 0; c < 256; c++) kv->lut[c] = moq_e4m3_decode((uint8_t)c);
    return MOQ_OK;
}

void moq_kv_cache_free(moq_kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->k_scale);
    free(kv->v_scale);
    kv->k = kv->v = NULL;
    kv->k_scale = kv->v_scale = NULL;
}

size_t moq_kv_cache_bytes(const moq_kv_cache *kv) {
    return 2 * (size_t)kv->n_layers * (size_t)kv->ctx * (size_t)kv->row * kv->elem_bytes;
}

static void store(const moq_kv_cache *kv, uint8_t *dst, const float *x, float scale) {
    for (int64_t i = 0; i < kv->row; i++) {
        switch (kv->elem) {
        case MOQ_ELEM_BF16: { uint16_t h = moq_bf16_encode_rne(x[i]); memcpy(dst + 2 * i, &h, 2); break; }
        case MOQ_ELEM_E4M3: dst[i] = moq_e4m3_encode_rne_sat(x[i] / scale); break;
        default: memcpy(dst + 4 * i, &x[i], 4); break;
        }
    }
}

void moq_kv_cache_write(moq_kv_cache *kv, int64_t layer, int64_t pos, const float *k, const float *v) {
    const size_t off = ((size_t)layer * (size_t)kv->ctx + (size_t)pos) * (size_t)kv->row * kv->elem_bytes;
    store(kv, kv->k + off, k, kv->k_scale[layer]);
    store(kv, kv->v + off, v, kv->v_scale[layer]);
}

void moq_kv_cache_read(const moq_kv_cache *kv, int which, int64_t layer, int64_t pos, int64_t off, int64_t n, float *out) {
    const uint8_t *src = (which ? kv->v : kv->k) + (((size_t)layer * (size_t)kv->ctx + (size_t)pos) * (size_t)kv->row + (size_t)off) * kv->elem_bytes;
    switch (kv->elem) {
    case MOQ_ELEM_BF16:
        for (int64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, src + 2 * i, 2); out[i] = moq_f32_from_bits((uint32_t)h << 16); }
        break;
    case MOQ_ELEM_E4M3: {
        const float s = (which ? kv->v_scale : kv->k_scale)[layer];
        for (int64_t i = 0; i < n; i++) out[i] = kv->lut[src[i]] * s;
        break;
    }
    default: memcpy(out, src, (size_t)n * sizeof(float)); break;
    }
}
