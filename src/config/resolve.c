/* resolve.c — which scheme applies to one module, and why.
 *
 * Resolution order (each step is a rule name, returned with the result):
 *   0. embedding                      -> none (neither engine quantizes embeddings)
 *   1. attention                      -> kv_cache when a KV algo is set (vLLM single-algo: always)
 *   2. exclusion (exclude_modules / ignore), in this order, each behind a compat switch:
 *        exclude-exact, exclude-packed-shards (error when shards disagree), exclude-experts,
 *        exclude-substring, exclude-wildcard, exclude-wildcard-stripped, exclude-part,
 *        exclude-fused-pattern; an LM head under another name also as "lm_head" (exclude-lm_head-alias)
 *      then vision-tower (implicit vLLM rule)       -> unquantized_linear / none
 *   3. MIXED_PRECISION: quantized_layers lookup (SGLang does it before step 2):
 *        mp-direct, mp-lm_head, mp-language_model-swap, mp-packed-shards, mp-child-prefix,
 *        mp-experts-parent, mp-builtin-shards; shards that disagree are an error naming each one;
 *        not found -> mp-not-listed (unquantized)
 *   4. otherwise the global quant_algo (quant_algo), or the hybrid rules (hybrid-*)
 * Switches: moq_compat_rules in config/modelopt.h. Tests: tests/config/test_resolve.c.
 */
#include "config/resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/glob.h"
#include "core/error.h"

static const char LM_PREFIX[] = "language_model.";

static const char *last_part(const char *s) {
    const char *d = strrchr(s, '.');
    return d ? d + 1 : s;
}

static const moq_packed *find_packed(const moq_packed *p, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (p[i].name && strcmp(p[i].name, name) == 0) return &p[i];
    return NULL;
}

/* Current SGLang is_layer_skipped, one entry: trailing dots dropped, the entry matches when it equals
 * the prefix, when the prefix starts with entry + ".", or when "." + entry + "." occurs in
 * "." + prefix + ".". All three say one thing: the entry is a run of whole dotted parts of the prefix
 * ("mlp.gate" matches model.layers.0.mlp.gate, not ...mlp.gate_up_proj; "layers.0" matches
 * model.layers.0.mlp, not model.layers.01.mlp). */
static bool path_match(const char *prefix, const char *entry) {
    size_t ne = strlen(entry);
    while (ne && entry[ne - 1] == '.') ne--;
    const size_t np = strlen(prefix);
    for (size_t i = 0; i + ne <= np; i++)
        if ((i == 0 || prefix[i - 1] == '.') && (i + ne == np || prefix[i + ne] == '.') && memcmp(prefix + i, entry, ne) == 0) return true;
    return false;
}

/* The engines' built-in fused projections, used when the model gives no packed mapping for a name
 * (vLLM's mixed-precision lookup; SGLang's is_layer_skipped). */
static const char *const QKV_SHARDS[] = {"q_proj", "k_proj", "v_proj"}, *const GATE_UP_SHARDS[] = {"gate_proj", "up_proj"};
static const moq_packed BUILTIN_FUSED[] = {{"qkv_proj", QKV_SHARDS, 3}, {"gate_up_proj", GATE_UP_SHARDS, 2}};
#define N_BUILTIN_FUSED ((int)(sizeof BUILTIN_FUSED / sizeof BUILTIN_FUSED[0]))

/* Is `s` listed? Exact membership (vLLM) or SGLang's dot-boundary match. */
static bool in_list(const moq_qconfig *q, const char *s) {
    for (int i = 0; i < q->n_exclude; i++)
        if (q->r->ex_skipped_dot_boundary ? path_match(s, q->exclude[i]) : strcmp(q->exclude[i], s) == 0) return true;
    return false;
}

/* Python's str.replace(old, new): every occurrence. */
static char *replace_all(const char *s, const char *old, const char *new_) {
    size_t lo = strlen(old), ln = strlen(new_), n = 0;
    for (const char *p = s; (p = strstr(p, old)); p += lo) n++;
    char *out = malloc(strlen(s) + n * (ln > lo ? ln - lo : 0) + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = s, *h; ; p = h + lo) {
        h = strstr(p, old);
        if (!h) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(h - p)), o += h - p;
        memcpy(o, new_, ln), o += ln;
    }
    return out;
}

/* The engines' shared helper is_layer_skipped (vLLM/SGLang quantization utils, not in the seeds):
 * a fused module is skipped when every shard name is listed, and it is an error when only some
 * are ("Detected some but not all shards of PREFIX are quantized", both engines); SGLang takes the
 * shards of qkv_proj / gate_up_proj from its built-in table when the model gives no mapping for
 * them. vLLM: an experts prefix is skipped when it is a substring of a listed "experts" entry;
 * otherwise exact membership (SGLang: path_match). */
static moq_status layer_skipped(const moq_qconfig *q, const char *prefix, const moq_packed *packed, int n_packed,
                                bool *skipped, const char **rule, moq_error *err) {
    const char *proj = last_part(prefix);
    const moq_packed *pk = find_packed(packed, n_packed, proj);
    if (!pk && q->r->ex_skipped_builtin_fused) pk = find_packed(BUILTIN_FUSED, N_BUILTIN_FUSED, proj);
    *skipped = false;
    if (pk && pk->n_shards > 0) {
        int n_sk = 0;
        char detail[400];
        size_t o = 0;
        for (int s = 0; s < pk->n_shards; s++) {
            char *sp = replace_all(prefix, proj, pk->shards[s]);
            if (!sp) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory");
            bool hit = in_list(q, sp);
            free(sp);
            n_sk += hit;
            if (o < sizeof detail)
                o += (size_t)snprintf(detail + o, sizeof detail - o, "%s%s=%s", s ? ", " : "", pk->shards[s], hit ? "excluded" : "quantized");
        }
        if (n_sk && n_sk != pk->n_shards)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, prefix, "some but not all shards of %s are quantized (%s); all shards of a fused layer need the same precision",
                            prefix, detail);
        *skipped = n_sk > 0;
        *rule = "exclude-packed-shards";
        return MOQ_OK;
    }
    if (strstr(prefix, "experts") && !q->r->ex_skipped_dot_boundary) {
        for (int i = 0; i < q->n_exclude && !*skipped; i++)
            *skipped = strstr(q->exclude[i], "experts") && strstr(q->exclude[i], prefix);
        *rule = "exclude-experts";
        return MOQ_OK;
    }
    *skipped = in_list(q, prefix);
    *rule = "exclude-exact";
    return MOQ_OK;
}

moq_status moq_resolve_excluded(const moq_qconfig *q, const char *prefix, bool linear, const moq_packed *packed,
                                int n_packed, bool *ex, const char **rule, moq_error *err) {
    const moq_compat_rules *r = q->r;
    *ex = false;
    if (q->n_exclude == 0) return MOQ_OK;
    const bool has_lm = strncmp(prefix, LM_PREFIX, sizeof LM_PREFIX - 1) == 0;
    const char *stripped = has_lm ? prefix + sizeof LM_PREFIX - 1 : NULL;
    if (!r->ex_skipped_linear_only || linear) {
        MOQ_TRY(layer_skipped(q, prefix, packed, n_packed, ex, rule, err));
        if (*ex) return MOQ_OK;
    }
    for (int i = 0; i < q->n_exclude; i++) {
        const char *pat = q->exclude[i];
        if (r->ex_substring && strcmp(pat, prefix) != 0 && (strstr(prefix, pat) || (stripped && strstr(stripped, pat)))) {
            *rule = "exclude-substring";
            return *ex = true, MOQ_OK;
        }
    }
    for (int i = 0; i < q->n_exclude; i++) {
        const char *pat = q->exclude[i];
        if (r->ex_fnmatch && moq_glob_fnmatch(pat, prefix)) return *rule = "exclude-wildcard", *ex = true, MOQ_OK;
        if (r->ex_fnmatch_stripped && stripped && moq_glob_fnmatch(pat, stripped))
            return *rule = "exclude-wildcard-stripped", *ex = true, MOQ_OK;
    }
    static const char *const fused[] = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};
    for (int i = 0; i < q->n_exclude; i++) {
        const char *pat = q->exclude[i];
        if (r->ex_regex_parts && q->exclude_re) {
            const moq_glob_regex *re = &q->exclude_re[i];
            const char *cands[2] = {prefix, stripped};
            for (int c = 0; c < 2; c++) {
                const char *p = cands[c];
                if (!p) continue;
                if (moq_glob_regex_full(re, p, strlen(p))) return *rule = "exclude-wildcard", *ex = true, MOQ_OK;
                for (const char *s = p;;) {
                    const char *d = strchr(s, '.');
                    size_t len = d ? (size_t)(d - s) : strlen(s);
                    if (moq_glob_regex_full(re, s, len)) return *rule = "exclude-part", *ex = true, MOQ_OK;
                    if (!d) break;
                    s = d + 1;
                }
            }
        }
        if (r->ex_fused_patterns) {
            const char *tail = last_part(pat);
            for (size_t f = 0; f < sizeof fused / sizeof fused[0]; f++) {
                if (strcmp(tail, fused[f]) != 0) continue;
                if (strstr(last_part(prefix), tail) || (stripped && strstr(last_part(stripped), tail)))
                    return *rule = "exclude-fused-pattern", *ex = true, MOQ_OK;
            }
        }
    }
    return MOQ_OK;
}

/* ---- MIXED_PRECISION lookup ------------------------------------------------------------------ */

typedef struct cands {
    char  buf[3][512];
    int   n;
} cands;

/* The prefix, "lm_head" for "*.lm_head", and the language_model.model. <-> model.language_model. swap. */
static void candidates(const char *prefix, cands *c) {
    static const char A[] = "language_model.model.", B[] = "model.language_model.";
    c->n = 0;
    snprintf(c->buf[c->n++], sizeof c->buf[0], "%s", prefix);
    size_t n = strlen(prefix);
    if (n >= 8 && strcmp(prefix + n - 8, ".lm_head") == 0) snprintf(c->buf[c->n++], sizeof c->buf[0], "lm_head");
    if (strncmp(prefix, A, sizeof A - 1) == 0) snprintf(c->buf[c->n++], sizeof c->buf[0], "%s%s", B, prefix + sizeof A - 1);
    else if (strncmp(prefix, B, sizeof B - 1) == 0) snprintf(c->buf[c->n++], sizeof c->buf[0], "%s%s", A, prefix + sizeof B - 1);
}

static const char *cand_rule(const cands *c, int i) {
    if (i == 0) return "mp-direct";
    return strcmp(c->buf[i], "lm_head") == 0 ? "mp-lm_head" : "mp-language_model-swap";
}

/* Algo of shard names under `parent_dot` (one algo, or an error naming each shard). */
static moq_status shard_algos(const moq_qconfig *q, const char *prefix, const char *parent, const char *const *shards,
                              int n, const moq_qlayer **found, moq_error *err) {
    char name[600], detail[400];
    size_t o = 0;
    const moq_qlayer *first = NULL;
    bool differ = false;
    for (int s = 0; s < n; s++) {
        snprintf(name, sizeof name, "%s%s", parent, shards[s]);
        int i = moq_qconfig_layer_find(q, name);
        if (i < 0) continue;
        const moq_qlayer *L = &q->layers[i];
        if (o < sizeof detail) o += (size_t)snprintf(detail + o, sizeof detail - o, "%s%s=%s", o ? " and " : "", shards[s], L->algo);
        if (!first) first = L;
        else if (strcmp(first->algo, L->algo) != 0) differ = true;
    }
    if (differ) return MOQ_FAIL(err, MOQ_ERR_CONFIG, prefix, "shards %s disagree; a fused layer needs one scheme", detail);
    *found = first;
    return MOQ_OK;
}

static moq_status mp_lookup(const moq_qconfig *q, const char *prefix, const moq_packed *packed, int n_packed,
                            const moq_qlayer **out, const char **rule, moq_error *err) {
    const moq_compat_rules *r = q->r;
    cands c;
    candidates(prefix, &c);
    *out = NULL;
    for (int i = 0; i < c.n; i++) {
        int k = moq_qconfig_layer_find(q, c.buf[i]);
        if (k >= 0) return *out = &q->layers[k], *rule = cand_rule(&c, i), MOQ_OK;
    }
    const char *proj = last_part(prefix);
    const moq_packed *pk = find_packed(packed, n_packed, proj);
    if (pk) {
        char base[512];
        snprintf(base, sizeof base, "%.*s", (int)(proj > prefix ? proj - 1 - prefix : (long)strlen(prefix)), prefix);
        cands bc;
        candidates(base, &bc);
        const moq_qlayer *hit = NULL;
        char detail[400];
        size_t o = 0;
        bool differ = false;
        for (int i = 0; i < bc.n; i++)
            for (int s = 0; s < pk->n_shards; s++) {
                char name[600];
                snprintf(name, sizeof name, "%s.%s", bc.buf[i], pk->shards[s]);
                int k = moq_qconfig_layer_find(q, name);
                if (k < 0) continue;
                if (o < sizeof detail) o += (size_t)snprintf(detail + o, sizeof detail - o, "%s%s=%s", o ? " and " : "", pk->shards[s], q->layers[k].algo);
                if (!hit) hit = &q->layers[k];
                else if (strcmp(hit->algo, q->layers[k].algo) != 0) differ = true;
            }
        if (differ) return MOQ_FAIL(err, MOQ_ERR_CONFIG, prefix, "shards %s disagree; a fused layer needs one scheme", detail);
        if (hit) return *out = hit, *rule = "mp-packed-shards", MOQ_OK;
    }
    for (int i = 0; i < c.n; i++) {
        size_t n = strlen(c.buf[i]);
        for (int k = 0; k < q->n_layers; k++) {
            const char *key = q->layers[k].name;
            if (strncmp(key, c.buf[i], n) == 0 && key[n] == '.') return *out = &q->layers[k], *rule = "mp-child-prefix", MOQ_OK;
        }
    }
    size_t n = strlen(prefix);
    if (r->mp_experts_parent && n >= 8 && strcmp(prefix + n - 8, ".experts") == 0) {
        size_t pn = n - 8 + 1; /* keep the dot */
        for (int k = 0; k < q->n_layers; k++)
            if (strncmp(q->layers[k].name, prefix, pn) == 0) return *out = &q->layers[k], *rule = "mp-experts-parent", MOQ_OK;
    }
    if (r->mp_builtin_shards) {
        const moq_packed *bp = find_packed(BUILTIN_FUSED, N_BUILTIN_FUSED, proj);
        for (int i = 0; bp && i < c.n; i++) {
            char parent[520];
            const char *d = strrchr(c.buf[i], '.');
            snprintf(parent, sizeof parent, "%.*s.", (int)(d ? d - c.buf[i] : (long)strlen(c.buf[i])), c.buf[i]);
            MOQ_TRY(shard_algos(q, prefix, parent, bp->shards, bp->n_shards, out, err));
            if (*out) return *rule = "mp-builtin-shards", MOQ_OK;
        }
    }
    *rule = "mp-not-listed";
    return MOQ_OK;
}

/* ---- public entry ----------------------------------------------------------------------------- */

const char *moq_layer_kind_name(moq_layer_kind k) {
    static const char *const names[MOQ_KIND_COUNT] = {"linear", "lm_head", "moe", "attention", "embedding"};
    return (unsigned)k < MOQ_KIND_COUNT ? names[k] : "?";
}

moq_status moq_layer_kind_parse(const char *name, moq_layer_kind *out, moq_error *err) {
    for (int k = 0; k < MOQ_KIND_COUNT; k++)
        if (name && strcmp(name, moq_layer_kind_name((moq_layer_kind)k)) == 0) return *out = (moq_layer_kind)k, MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--kind", "\"%s\" is not one of linear, lm_head, moe, attention, embedding", name ? name : "");
}

static void set(moq_resolution *o, moq_method m, const char *algo, const char *rule, int64_t gs) {
    o->method = moq_method_name(m);
    o->algo = algo;
    o->rule = rule;
    o->group_size = gs;
}

static int64_t group_of(const moq_qconfig *q, const moq_scheme *s) {
    if (!s) return 0;
    if (s->group == 16) return q->group_size ? q->group_size : 16;
    if (s->group == 128 && q->form == MOQ_QC_MIXED) return q->block_size;
    return s->group;
}

static bool kv_applies(const moq_qconfig *q) { return q->kv && (strcmp(q->kv, "auto") != 0 || q->r->kv_auto_is_kv); }

moq_status moq_resolve(const moq_qconfig *q, const char *prefix, moq_layer_kind kind, const moq_packed *packed,
                       int n_packed, moq_resolution *out, moq_error *err) {
    if (!q || !prefix || !out || (unsigned)kind >= MOQ_KIND_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix ? prefix : "", "moq_resolve: NULL argument or bad kind");
    const moq_compat_rules *r = q->r;
    const bool lin = kind == MOQ_KIND_LINEAR || kind == MOQ_KIND_LM_HEAD;
    memset(out, 0, sizeof *out);
    set(out, MOQ_METHOD_NONE, NULL, "none", 0);
    const moq_qlayer *L = NULL;
    const char *mp_rule = NULL;

    if (q->form == MOQ_QC_MIXED && r->mp_resolve_first) MOQ_TRY(mp_lookup(q, prefix, packed, n_packed, &L, &mp_rule, err));
    if (kind == MOQ_KIND_EMBEDDING) return set(out, MOQ_METHOD_NONE, NULL, "embedding-not-quantized", 0), MOQ_OK;
    if (kind == MOQ_KIND_ATTENTION) {
        if (q->form == MOQ_QC_SINGLE && r->attention_always_kv) set(out, MOQ_METHOD_KV_CACHE, q->kv, "attention-kv-method", 0);
        else if (kv_applies(q)) set(out, MOQ_METHOD_KV_CACHE, q->kv, "kv-cache-quant-algo", 0);
        else set(out, MOQ_METHOD_NONE, NULL, "no-kv-cache-quant", 0);
        return MOQ_OK;
    }
    if (q->form == MOQ_QC_HYBRID) {
        if (kind == MOQ_KIND_MOE) {
            bool ex;
            const char *rule = NULL;
            MOQ_TRY(moq_resolve_excluded(q, prefix, false, packed, n_packed, &ex, &rule, err));
            if (ex) return out->excluded = true, set(out, MOQ_METHOD_FP8_BLOCK_MOE, "FP8_PB_WO", "hybrid-moe-excluded-fp8", 128), MOQ_OK;
            return set(out, q->moe_scheme->moe, q->moe_scheme->algo, "hybrid-moe-nvfp4", group_of(q, q->moe_scheme)), MOQ_OK;
        }
        if (kind == MOQ_KIND_LM_HEAD) return set(out, MOQ_METHOD_UNQUANTIZED_LINEAR, NULL, "hybrid-lm-head-unquantized", 0), MOQ_OK;
        return set(out, q->scheme->linear, q->scheme->algo, "hybrid-fp8-linear", 128), MOQ_OK;
    }

    bool ex = false;
    const char *rule = NULL;
    MOQ_TRY(moq_resolve_excluded(q, prefix, lin, packed, n_packed, &ex, &rule, err));
    /* An LM head stored under another name (DeepSeek-V4's `head`): ModelOpt lists it by transformers'
     * module name, lm_head (0.47 on DeepseekV4ForCausalLM, measured), and the engines match their own
     * module, also lm_head. */
    if (!ex && kind == MOQ_KIND_LM_HEAD && strcmp(last_part(prefix), "lm_head") != 0) {
        MOQ_TRY(moq_resolve_excluded(q, "lm_head", lin, packed, n_packed, &ex, &rule, err));
        if (ex) rule = "exclude-lm_head-alias";
    }
    if (ex) {
        out->excluded = true;
        return set(out, lin ? MOQ_METHOD_UNQUANTIZED_LINEAR : MOQ_METHOD_NONE, NULL, rule, 0), MOQ_OK;
    }
    if (q->form == MOQ_QC_SINGLE) {
        if (r->vision_rule && (strstr(prefix, "vision_tower") || strstr(prefix, "vision_model") || strstr(prefix, "vit_large_projector"))) {
            out->excluded = true;
            return set(out, lin || r->vision_moe_linear ? MOQ_METHOD_UNQUANTIZED_LINEAR : MOQ_METHOD_NONE, NULL, "vision-tower", 0), MOQ_OK;
        }
        const moq_scheme *s = q->scheme;
        if (lin) return set(out, s->linear, s->algo, "quant_algo", group_of(q, s)), MOQ_OK;
        moq_method m = s->moe;
        const char *why = "quant_algo";
        if (m == MOQ_METHOD_FP8_BLOCK_MOE && !r->pbwo_block_moe) m = MOQ_METHOD_FP8_MOE, why = "quant_algo-fp8-experts-per-tensor";
        /* vLLM's ModelOptFp8Config hands every FP8 algo's experts ModelOptFp8MoEMethod (per-tensor) */
        if (m == MOQ_METHOD_FP8_PCPT_MOE && !r->pcpt_moe_channel) m = MOQ_METHOD_FP8_MOE, why = "quant_algo-fp8-experts-per-tensor";
        return set(out, m, s->algo, why, m == MOQ_METHOD_FP8_MOE ? 0 : group_of(q, s)), MOQ_OK;
    }

    /* MIXED_PRECISION */
    if (!r->mp_resolve_first) MOQ_TRY(mp_lookup(q, prefix, packed, n_packed, &L, &mp_rule, err));
    const moq_scheme *s = L ? L->scheme : NULL;
    const bool dispatched = s && (r->mp_all_linear_algos || s->sglang_mixed) && (!s->moq_only || r->moq_only_algos);
    if (lin) {
        /* vLLM's LINEAR_ALGOS has no FP8_BLOCK_SCALES: that alias only reaches MoE layers. */
        const bool alias_ok = !s || r->algo_alias_top || strcmp(L->algo, s->algo) == 0;
        if (!dispatched || !alias_ok)
            return set(out, MOQ_METHOD_UNQUANTIZED_LINEAR, NULL, L ? "mp-algo-not-dispatched" : mp_rule, 0), MOQ_OK;
        return set(out, s->linear, s->algo, mp_rule, group_of(q, s)), MOQ_OK;
    }
    if (!dispatched || (s->moe == MOQ_METHOD_FP8_PCPT_MOE && !r->pcpt_moe_channel)) /* vLLM: no MoE method for it */
        return set(out, MOQ_METHOD_NONE, NULL, L ? "mp-algo-not-dispatched" : mp_rule, 0), MOQ_OK;
    return set(out, s->moe, s->algo, mp_rule, group_of(q, s)), MOQ_OK;
}
