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
 * and the scale scan). NVFP4_AWQ: the same, plus pre_quant_scale [K] (f32 in the layer's arena) that
 * the linear entry point multiplies into x before the activation quantizer.
 * Tested by tests/scheme/test_load.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "format/format.h"
#include "scheme/load.h"

/* NVFP4_AWQ: the contract's optional pre_quant_scale (bf16|f16 [K]) in f32. The shards of a fused
 * layer read one input, so they must all have it and agree (ModelOpt averages them, §9.3); none
 * having it is the folded case (no scaling). */
static moq_status pre_quant_scale(moq_load_ctx *x, moq_error *err) {
    if (!moq_contract_rule(x->scheme->contract, "pre_quant_scale")) return MOQ_OK;
    const moq_tensor *t[MOQ_MAX_SHARDS] = {0};
    char nm[320];
    int have = 0;
    for (int s = 0; s < x->n; s++) {
        have += (t[s] = x->sh[s].pqs) != NULL; /* load.c: the tensor, or its slice's view */
    }
    if (!have) return MOQ_OK;
    int first = 0;
    while (!t[first]) first++;
    float *ps = moq_load_take(x, (size_t)x->K * sizeof(float));
    if (!ps) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    for (int s = 0; s < x->n; s++) {
        snprintf(nm, sizeof nm, "%s.pre_quant_scale", x->sh[s].name);
        if (!t[s])
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "tensor missing while %s has one; the shards of fused %s read one input and need one AWQ scale",
                            t[first]->name, x->layer);
        for (int64_t k = 0; k < x->K; k++) { /* the contract check guaranteed bf16|f16 [K] */
            uint16_t h;
            memcpy(&h, (const uint8_t *)t[s]->data + 2 * k, 2);
            const float v = t[s]->dtype == MOQ_DT_BF16 ? moq_bf16_decode(h) : moq_f16_decode(h);
            if (s == 0) ps[k] = v;
            else if (v != ps[k])
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, t[s]->name, "pre_quant_scale[%lld] = %g differs from %s (%g); the shards of fused %s need one AWQ scale",
                                (long long)k, (double)v, t[0]->name, (double)ps[k], x->layer);
        }
    }
    x->w->pre_scale = ps;
    return MOQ_OK;
}

moq_status moq_canon_nvfp4(moq_load_ctx *x, moq_error *err) {
    moq_weight *w = x->w;
    w->w = *x->scheme->w, w->a = *x->scheme->a;
    const bool w4a16 = x->scheme->a->elem == MOQ_ELEM_NONE;
    if (x->G != 16)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, x->layer, "group_size %lld, expected 16 (NVFP4 block scales cover 16 weights)", (long long)x->G);
    const moq_tensor *tq[MOQ_MAX_SHARDS], *ts[MOQ_MAX_SHARDS];
    int64_t rows[MOQ_MAX_SHARDS];
    for (int s = 0; s < x->n; s++) tq[s] = x->sh[s].weight, ts[s] = x->sh[s].scale, rows[s] = x->sh[s].N;
    if (!(w->q = moq_load_concat_codes(x, tq, rows, (size_t)(x->K / 2), err))) return err ? err->code : MOQ_ERR_INTERNAL;
    if (!(w->scale = moq_load_concat_codes(x, ts, rows, (size_t)(x->K / 16), err))) return err ? err->code : MOQ_ERR_INTERNAL;
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
    MOQ_TRY(pre_quant_scale(x, err));
    if (differ && x->rules->nvfp4_fused_ws2_max) {
        for (int s = 0; s < x->n; s++) w->shard_scale[s] = ws2_max;
        moq_load_note(x, "%s: weight_scale_2 differs across shards (%s); using the max %.9g for all as the engines do (loses accuracy)",
                      x->layer, list, (double)ws2_max);
    } else if (differ) {
        moq_load_note(x, "%s: keeps per-shard weight_scale_2 (%s)", x->layer, list);
    }
    return MOQ_OK;
}

/* --nvfp4-as fp8 (moq_linear_opts.nvfp4_as, a row of load.c's recanon_table), after moq_canon_nvfp4:
 * the canonical NVFP4 weight becomes a canonical FP8 weight, as vLLM PR #38728 converts NVFP4
 * checkpoints on Hopper (convert_nvfp4_weight_to_fp8_block: dequantize, then DeepGEMM's
 * per_block_cast_to_fp8 with 128x128 blocks, dynamic 1x128 activation groups).
 *
 *   w[n,k] = D2(q[n,k]) * D4(sf[n,k/16]) * shard_scale[s(n)]   exact in double (a 2-bit x 4-bit
 *                                                              mantissa product times an f32)
 *   K % 128 == 0: per 128x128 block b (a partial last row block kept, as vLLM pads with zeros)
 *       s_b = f32(max(amax_b, 1e-4) / 448)                    vLLM clamps amax at 1e-4
 *       q'  = E4_rne_sat(w / s_b)                              key W_FP8_BLK128 + A_FP8_G128_DYN
 *   else (128-wide activation groups cannot cover K; vLLM's group quantizer refuses it too), and
 *   always for FP8_CHANNEL: per output channel, s_n = f32(max(amax_n, 1e-4) / 448),
 *   q' = E4_rne_sat(w / s_n), key W_FP8_ROW + A_FP8_TOKEN_DYN (dynamic per-token activations);
 *   the K % 128 case of FP8 with a note naming the layer.
 *
 * vLLM dequantizes to bf16 first (one more rounding); moq keeps the exact value. The AWQ
 * pre_scale and the bias stay as they are (both apply outside the weight). Codes go to the
 * layer's arena; the NVFP4 codes are no longer referenced. Tested by tests/scheme/test_load.c
 * against an fp64 requantization written in the test. */
static double nvfp4_value(const moq_weight *w, const uint8_t *q, const uint8_t *sf, int s, int64_t n, int64_t k) {
    const uint8_t byte = q[n * (w->K / 2) + k / 2];
    const double v = (double)moq_e2m1_decode(k % 2 ? (uint8_t)(byte >> 4) : byte);
    return v * (double)moq_e4m3_decode(sf[n * (w->K / 16) + k / 16]) * (double)w->shard_scale[s];
}

static moq_status recanon_nvfp4_fp8(moq_load_ctx *x, bool want_block, moq_error *err) {
    moq_weight *w = x->w;
    const int64_t N = w->N, K = w->K;
    const bool block = want_block && K % 128 == 0;
    const int64_t nb = (N + 127) / 128, kb = K / 128, n_scales = block ? nb * kb : N;
    uint8_t *codes = moq_load_take_codes(x, (size_t)N * (size_t)K);
    float *sc = moq_load_take(x, (size_t)n_scales * sizeof(float));
    int *shard = moq_load_take(x, (size_t)N * sizeof(int));
    double *amax = moq_load_take(x, (size_t)n_scales * sizeof(double));
    if (!codes || !sc || !shard || !amax) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, x->layer, "layer allocation bound too small");
    const uint8_t *q = w->q, *sf = w->scale;
    for (int s = 0; s < w->n_shards; s++)
        for (int64_t n = w->row0[s]; n < w->row0[s + 1]; n++) shard[n] = s;
    /* pass 1: amax per scale group */
    for (int64_t i = 0; i < n_scales; i++) amax[i] = 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const double a = fabs(nvfp4_value(w, q, sf, shard[n], n, k));
            double *g = &amax[block ? (n / 128) * kb + k / 128 : n];
            *g = a > *g ? a : *g;
        }
    for (int64_t i = 0; i < n_scales; i++) sc[i] = (float)(fmax(amax[i], 1e-4) / 448.0);
    /* pass 2: codes */
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const double s = (double)sc[block ? (n / 128) * kb + k / 128 : n];
            codes[n * K + k] = moq_e4m3_encode_rne_sat((float)(nvfp4_value(w, q, sf, shard[n], n, k) / s));
        }
    const moq_quant_key *wk = block ? &MOQ_KEY_W_FP8_BLK128 : &MOQ_KEY_W_FP8_ROW;
    const moq_quant_key *ak = block ? &MOQ_KEY_A_FP8_G128_DYN : &MOQ_KEY_A_FP8_TOKEN_DYN;
    w->w = *wk, w->a = *ak;
    w->q = codes, w->scale = sc;
    for (int s = 0; s < w->n_shards; s++) w->shard_scale[s] = 1.0f, w->shard_in_scale[s] = 1.0f;
    if (want_block && !block)
        moq_load_note(x, "%s: --nvfp4-as fp8 uses per-channel FP8 with per-token activations (K=%lld is not a multiple of the 128-wide blocks vLLM converts to)",
                      x->layer, (long long)K);
    return MOQ_OK;
}

moq_status moq_recanon_nvfp4_fp8(moq_load_ctx *x, moq_error *err) { return recanon_nvfp4_fp8(x, true, err); }
moq_status moq_recanon_nvfp4_fp8_channel(moq_load_ctx *x, moq_error *err) { return recanon_nvfp4_fp8(x, false, err); }
