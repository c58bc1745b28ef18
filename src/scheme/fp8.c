/* fp8.c — canonicalize hooks of the FP8 schemes (NUMERICS §5.1–§5.3): checkpoint tensors -> the
 * canonical moq_weight of scheme/quant_key.h. No kernel layout is touched here.
 *
 *   FP8 (per tensor)  q e4m3 [N, K] (shards concatenated), shard_scale[s] = weight_scale,
 *                     shard_in_scale[s] = input_scale. Profile moq keeps both per shard; the
 *                     compat profiles requantize to the max weight scale (rule fp8_fused):
 *                       q' = E4s(clamp(f32(f16(f32(D4(q) * s_i)) * f32(1 / s_max)), +-448))
 *                     with the fp16 intermediate of the engines' dequant (§5.1).
 *   FP8_PER_CHANNEL   q e4m3 [N, K], scale f32 [N] (from [N] or [N, 1])
 *   FP8_PB_WO         q e4m3 [N, K], scale f32 [ceil(N/128), K/128] squeezed from
 *                     [ceil(N/128), 1, K/128, 1] (or 2-D); a partial last N block is kept as is.
 *                     Fused shards must start on a 128-row boundary (their scale rows concatenate).
 *
 * Tested by tests/scheme/test_load.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "format/format.h"
#include "scheme/load.h"

uint8_t moq_fp8_requant_code(uint8_t q, float s, float inv_s_max) {
    const float deq = moq_f16_decode(moq_f16_encode_rne(moq_e4m3_decode(q) * s)); /* fp16 tensor * 0-dim f32 */
    return moq_e4m3_encode_rne_sat(deq * inv_s_max);
}

/* Weight codes of all shards, concatenated (borrowed for one shard). */
static const uint8_t *fp8_codes(moq_load_ctx *x, moq_error *err) {
    const moq_tensor *t[MOQ_MAX_SHARDS];
    int64_t rows[MOQ_MAX_SHARDS];
    for (int s = 0; s < x->n; s++) t[s] = x->sh[s].weight, rows[s] = x->sh[s].N;
    return moq_load_concat_codes(x, t, rows, (size_t)x->K, err);
}

moq_status moq_canon_fp8_tensor(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    float s_max = 0.0f;
    bool differ = false;
    char list[256];
    for (int s = 0; s < x->n; s++) {
        w->shard_scale[s] = moq_load_scalar(x->sh[s].scale);
        w->shard_in_scale[s] = moq_load_scalar(x->sh[s].in_scale);
        differ |= w->shard_scale[s] != w->shard_scale[0];
        s_max = fmaxf(s_max, w->shard_scale[s]);
    }
    moq_load_shard_values(x, w->shard_scale, list, sizeof list);
    const moq_fp8_fused rule = x->rules->fp8_fused;
    const bool requant = rule == MOQ_FP8_FUSED_REQUANT_ALWAYS || (rule == MOQ_FP8_FUSED_REQUANT_DIFFER && differ);
    if (!requant) {
        if (!(w->q = fp8_codes(x, err))) return err ? err->code : MOQ_ERR_INTERNAL;
        if (differ) moq_load_note(x, "%s: keeps per-shard weight_scale (%s); no requantization", x->layer, list);
        return MOQ_OK;
    }
    uint8_t *q = moq_load_take_codes(x, (size_t)x->N * (size_t)x->K);
    if (!q) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    const float inv = 1.0f / s_max;
    size_t changed = 0;
    for (int s = 0; s < x->n; s++) {
        const uint8_t *src = x->sh[s].weight->data;
        uint8_t *dst = q + (size_t)w->row0[s] * (size_t)x->K;
        const size_t n = (size_t)x->sh[s].N * (size_t)x->K;
        for (size_t i = 0; i < n; i++) {
            dst[i] = moq_fp8_requant_code(src[i], w->shard_scale[s], inv);
            changed += dst[i] != src[i];
        }
        w->shard_scale[s] = s_max;
    }
    w->q = q;
    moq_load_note(x, "%s: requantized to the max weight_scale %.9g (%s; profile rule %s), %zu codes changed", x->layer, (double)s_max,
                  list, rule == MOQ_FP8_FUSED_REQUANT_ALWAYS ? "always" : "scales differ", changed);
    return MOQ_OK;
}

moq_status moq_canon_fp8_row(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    if (!(w->q = fp8_codes(x, err))) return err ? err->code : MOQ_ERR_INTERNAL;
    float *sc = moq_load_take(x, (size_t)x->N * sizeof(float));
    if (!sc) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    for (int s = 0; s < x->n; s++) memcpy(sc + w->row0[s], x->sh[s].scale->data, (size_t)x->sh[s].N * sizeof(float)); /* [N] or [N, 1] */
    w->scale = sc;
    for (int s = 0; s < x->n; s++) w->shard_scale[s] = 1.0f, w->shard_in_scale[s] = 1.0f;
    return MOQ_OK;
}

moq_status moq_canon_fp8_block(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    for (int s = 0; s + 1 < x->n; s++)
        if (x->sh[s].N % 128)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, x->sh[s].weight->name,
                            "N=%lld is not a multiple of 128, expected 128-aligned shards before the last one of fused %s (FP8_PB_WO blocks span 128 rows)",
                            (long long)x->sh[s].N, x->layer);
    if (!(w->q = fp8_codes(x, err))) return err ? err->code : MOQ_ERR_INTERNAL;
    const int64_t kb = x->K / 128;
    float *sc = moq_load_take(x, (size_t)((x->N + 127) / 128) * (size_t)kb * sizeof(float)), *p = sc;
    if (!sc) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    for (int s = 0; s < x->n; s++) { /* [nb, 1, kb, 1] and [nb, kb] hold the same values in the same order */
        const size_t n = (size_t)((x->sh[s].N + 127) / 128) * (size_t)kb;
        memcpy(p, x->sh[s].scale->data, n * sizeof(float));
        p += n;
    }
    w->scale = sc;
    for (int s = 0; s < x->n; s++) w->shard_scale[s] = 1.0f, w->shard_in_scale[s] = 1.0f;
    return MOQ_OK;
}
