/* calibrate.c — max calibration (NUMERICS.md §9.1): run the unquantized model over calibration
 * tokens with an observer on the forward taps (model.h) and keep amax = max |x| per (layer, tap),
 * as ModelOpt's max calibrator does for each input quantizer and the K/V BMM quantizers. Windows of
 * up to 512 tokens, the cache reset between them (each window is one calibration sample).
 * Tested by tests/quant/test_quantize.c against an fp64 forward written in the test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

enum { CALIB_WINDOW = 512 };

void moq_calib_free(moq_calib *c) {
    if (!c) return;
    free(c->amax);
    free(c->expert_amax);
    *c = (moq_calib){0};
}

typedef struct calib_obs {
    moq_calib *c;
    int64_t    bad_layer;   /* first layer with a NaN/Inf, -1 */
    int        bad_tap;
} calib_obs;

static void observe(void *user, int64_t layer, moq_model_tap tap, int64_t expert, const float *x, int64_t rows, int64_t cols) {
    calib_obs *o = user;
    float *a = NULL;
    if (layer < 0 || layer >= o->c->n_layers) return;
    if ((int)tap >= 0 && tap < MOQ_TAP_COUNT) a = &o->c->amax[layer * MOQ_TAP_COUNT + tap];
    else if ((tap == MOQ_TAP_EXPERT_IN || tap == MOQ_TAP_EXPERT_DOWN_IN) && o->c->expert_amax && expert >= 0 && expert < o->c->n_experts)
        a = &o->c->expert_amax[(layer * o->c->n_experts + expert) * 2 + (tap == MOQ_TAP_EXPERT_DOWN_IN)];
    if (!a) return;
    float m = *a;
    for (int64_t i = 0; i < rows * cols; i++) {
        const float v = fabsf(x[i]);
        if (!isfinite(v)) {
            if (o->bad_layer < 0) o->bad_layer = layer, o->bad_tap = (int)tap;
            continue;
        }
        if (v > m) m = v;
    }
    *a = m;
}

moq_status moq_calibrate(moq_calib *out, const char *src_dir, const int32_t *ids, int64_t n_ids, int n_threads,
                         moq_error *err) {
    if (!out || !src_dir || !ids || n_ids < 1)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_calibrate", "out, src_dir and ids must be given and n_ids >= 1 (n_ids=%lld)",
                        (long long)n_ids);
    *out = (moq_calib){0};
    moq_model_opts mo = moq_model_opts_default();
    mo.n_threads = n_threads;
    mo.ctx = n_ids < CALIB_WINDOW ? n_ids : CALIB_WINDOW;
    moq_model *m = NULL;
    MOQ_TRY(moq_model_open(&m, src_dir, &mo, err));
    const moq_arch *a = NULL;
    moq_checkpoint *ck = NULL;
    moq_status st = moq_checkpoint_open(&ck, src_dir, NULL, err);
    if (st == MOQ_OK) a = moq_checkpoint_arch(ck);
    const int64_t L = a ? a->num_hidden_layers : 0, E = a ? a->num_experts : 0;
    moq_checkpoint_free(ck);
    if (st == MOQ_OK && L < 1) st = MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_hidden_layers is missing");
    if (st == MOQ_OK && !(out->amax = malloc((size_t)(L * MOQ_TAP_COUNT) * sizeof *out->amax)))
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, src_dir, "cannot allocate the calibration table");
    if (st == MOQ_OK && E > 0 && !(out->expert_amax = malloc((size_t)(L * E * 2) * sizeof *out->expert_amax)))
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, src_dir, "cannot allocate the expert calibration table");
    if (st != MOQ_OK) {
        moq_model_free(m);
        return st;
    }
    out->n_layers = L;
    out->n_experts = out->expert_amax ? E : 0;
    for (int64_t i = 0; i < L * MOQ_TAP_COUNT; i++) out->amax[i] = -1.0f;
    for (int64_t i = 0; out->expert_amax && i < L * E * 2; i++) out->expert_amax[i] = -1.0f;
    calib_obs o = {.c = out, .bad_layer = -1};
    moq_model_set_observer(m, observe, &o);
    const int64_t V = moq_model_vocab_size(m), win = moq_model_ctx(m);
    for (int64_t p = 0; p < n_ids && st == MOQ_OK; p += win) {
        const int64_t n = n_ids - p < win ? n_ids - p : win;
        for (int64_t i = 0; i < n; i++)
            if (ids[p + i] < 0 || ids[p + i] >= V) {
                st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "calibration text", "token id %d at %lld is outside the vocabulary of %lld",
                              ids[p + i], (long long)(p + i), (long long)V);
                break;
            }
        moq_model_reset(m);
        if (st == MOQ_OK) st = moq_model_prefill(m, ids + p, n, NULL, err);
        if (st == MOQ_OK && o.bad_layer >= 0)
            st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "calibration", "layer %lld tap %d saw NaN or Inf (ModelOpt's max calibrator refuses them too)",
                          (long long)o.bad_layer, o.bad_tap);
    }
    moq_model_free(m);
    if (st != MOQ_OK) {
        moq_calib_free(out);
        return st;
    }
    out->n_tokens = n_ids;
    return MOQ_OK;
}

moq_status moq_calibrate_text(moq_calib *out, const char *src_dir, const char *text, size_t len, int64_t max_tokens,
                              int n_threads, moq_error *err) {
    if (!out || !src_dir || !text) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_calibrate_text", "NULL argument");
    *out = (moq_calib){0};
    /* Only the first max_tokens ids are used: tokenize a prefix of 64 bytes per token (cut at a
     * UTF-8 boundary) rather than the whole file; tokens are far shorter than that on average. */
    if (max_tokens > 0 && (uint64_t)len / 64 > (uint64_t)max_tokens) {
        len = (size_t)max_tokens * 64;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
    }
    moq_tokenizer *tk = NULL;
    MOQ_TRY(moq_tokenizer_open(&tk, src_dir, err));
    size_t n = 0, cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    moq_status st = ids ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, "calibration text", "cannot allocate %zu token ids", cap);
    /* special tokens as the tokenizer's post-processor adds them (Hugging Face's default
     * add_special_tokens=True, as ModelOpt's calibration loader tokenizes) */
    if (st == MOQ_OK) st = moq_tokenizer_encode(tk, text, len, MOQ_ENCODE_ADD_SPECIAL | MOQ_ENCODE_SPECIAL_AS_TEXT, ids, cap, &n, err);
    moq_tokenizer_free(tk);
    if (st == MOQ_OK && n == 0) st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "calibration text", "is empty: no tokens to calibrate on");
    if (st == MOQ_OK && max_tokens > 0 && (int64_t)n > max_tokens) n = (size_t)max_tokens;
    if (st == MOQ_OK) st = moq_calibrate(out, src_dir, ids, (int64_t)n, n_threads, err);
    free(ids);
    return st;
}
