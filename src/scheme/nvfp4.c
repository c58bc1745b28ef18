/* nvfp4.c — canonicalize hook of NVFP4 (W4A4) and W4A16_NVFP4 (NUMERICS §2.1, §2.2, §2.5, §2.6).
 *
 *   q      packed e2m1 u8 [N, K/2]   shards concatenated along N (borrowed for one shard)
 *   scale  e4m3 u8 [N, K/G]          linear row-major block scales, concatenated the same way
 *   shard_scale[s]    = weight_scale_2 of shard s (global weight scale)
 *   shard_in_scale[s] = input_scale of shard s (W4A4 only); the kernel's epilogue per row is
 *                       alpha = f32(max(input_scale) * weight_scale_2[s])
 *
 * Fused shards keep their own weight_scale_2 (profile moq). Both engines take one
 * weight_scale_2 = max over the shards without touching the codes (rule nvfp4_fused_ws2_max),
 * which the compat profiles reproduce, with a warning naming the shards. A W4A16 checkpoint's
 * legacy input_scale is accepted and ignored (warning), as vLLM does. NaN-sentinel block scales
 * and a BF16 weight under an NVFP4 config are caught before this hook (load.c: the contract check
 * and the scale scan). Tested by tests/scheme/test_load.c.
 */
#include <math.h>
#include <stdio.h>

#include "core/error.h"
#include "scheme/load.h"

moq_status moq_canon_nvfp4(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    const bool w4a16 = x->scheme->a->elem == MOQ_ELEM_NONE;
    if (x->G != 16)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, x->layer, "group_size %lld, expected 16 (NVFP4 block scales cover 16 weights)", (long long)x->G);
    const moq_tensor *tq[MOQ_MAX_SHARDS], *ts[MOQ_MAX_SHARDS];
    int64_t rows[MOQ_MAX_SHARDS];
    for (int s = 0; s < x->n; s++) tq[s] = x->sh[s].weight, ts[s] = x->sh[s].scale, rows[s] = x->sh[s].N;
    if (!(w->q = moq_load_concat_rows(x, tq, rows, (size_t)(x->K / 2), err))) return err ? err->code : MOQ_ERR_INTERNAL;
    if (!(w->scale = moq_load_concat_rows(x, ts, rows, (size_t)(x->K / 16), err))) return err ? err->code : MOQ_ERR_INTERNAL;
    float ws2_max = 0.0f;
    bool differ = false, legacy_in = false;
    char list[256];
    for (int s = 0; s < x->n; s++) {
        w->shard_scale[s] = moq_load_scalar(x->sh[s].scale2);
        w->shard_in_scale[s] = w4a16 ? 1.0f : moq_load_scalar(x->sh[s].in_scale);
        legacy_in |= w4a16 && x->sh[s].in_scale;
        differ |= w->shard_scale[s] != w->shard_scale[0];
        ws2_max = fmaxf(ws2_max, w->shard_scale[s]);
    }
    moq_load_shard_values(x, w->shard_scale, list, sizeof list);
    if (legacy_in) moq_load_note(x, "%s: input_scale of a W4A16_NVFP4 checkpoint ignored (legacy export; activations stay unquantized)", x->layer);
    if (differ && x->rules->nvfp4_fused_ws2_max) {
        for (int s = 0; s < x->n; s++) w->shard_scale[s] = ws2_max;
        moq_load_note(x, "%s: weight_scale_2 differs across shards (%s); using the max %.9g for all as the engines do (loses accuracy)",
                      x->layer, list, (double)ws2_max);
    } else if (differ) {
        moq_load_note(x, "%s: keeps per-shard weight_scale_2 (%s)", x->layer, list);
    }
    return MOQ_OK;
}
