/* mxfp8.c — canonicalize hook of MXFP8 (NUMERICS §4.1): q e4m3 [N, K], scale e8m0 u8 [N, K/32].
 *
 * The checkpoint's scale is either [N, K/32] (one e8m0 per 32 weights of a row, borrowed for one
 * shard) or the row-block form [N/r, K/32]: one scale row shared by r consecutive weight rows, which
 * vLLM's loader expands with repeat_interleave(r, dim=0) when the checkpoint's scale block is
 * (r, 32). Here r = N / rows of the scale (the contract accepts any divisor of N), and the scale
 * is expanded to the canonical [N, K/32] in the layer's memory:
 *
 *   canonical[n, b] = stored[n / r, b]
 *
 * Tested by tests/scheme/test_load.c.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "scheme/load.h"

moq_status moq_canon_mxfp8(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    const size_t kb = (size_t)(x->K / 32);
    const moq_tensor *tq[MOQ_MAX_SHARDS], *ts[MOQ_MAX_SHARDS];
    int64_t rows[MOQ_MAX_SHARDS];
    bool row_blocks = false;
    const int n_sh = x->n;
    for (int s = 0; s < n_sh; s++) {
        if (!x->sh[s].scale) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->sh[s].name, "weight_scale missing after the contract check");
        tq[s] = x->sh[s].weight, ts[s] = x->sh[s].scale, rows[s] = x->sh[s].N;
        row_blocks |= ts[s]->shape[0] != x->sh[s].N;
    }
    if (!(w->q = moq_load_concat_codes(x, tq, rows, (size_t)x->K, err))) return err ? err->code : MOQ_ERR_INTERNAL;
    if (!row_blocks) {
        if (!(w->scale = moq_load_concat_codes(x, ts, rows, kb, err))) return err ? err->code : MOQ_ERR_INTERNAL;
    } else {
        uint8_t *sc = moq_load_take_codes(x, (size_t)x->N * kb);
        if (!sc) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
        for (int s = 0; s < n_sh; s++) {
            const int64_t r = x->sh[s].N / ts[s]->shape[0]; /* the contract check guarantees it divides */
            const uint8_t *src = ts[s]->data;
            for (int64_t n = 0; n < x->sh[s].N; n++) memcpy(sc + (size_t)(w->row0[s] + n) * kb, src + (size_t)(n / r) * kb, kb);
            if (r > 1) moq_load_note(x, "%s: weight_scale stored per %lld rows x 32 ([%lld, %zu]); expanded to one scale row per weight row",
                                     x->sh[s].name, (long long)r, (long long)ts[s]->shape[0], kb);
        }
        w->scale = sc;
    }
    for (int s = 0; s < x->n; s++) w->shard_scale[s] = 1.0f, w->shard_in_scale[s] = 1.0f;
    return MOQ_OK;
}
