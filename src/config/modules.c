/* modules.c — see modules.h. A module is every tensor sharing a name up to its last dot
 * ("model.layers.0.mlp.down_proj.weight_scale" -> module "model.layers.0.mlp.down_proj", role
 * "weight_scale"). Kinds come from one table of name rules; each module is resolved with
 * moq_resolve and checked against the scheme table's contract for its method. */
#include "config/modules.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/resolve.h"
#include "core/error.h"
#include "core/strmap.h"
#include "core/cpu_features.h"
#include "format/format.h"
#include "io/safetensors.h"

const char *moq_module_kind_name(moq_module_kind k) {
    static const char *const n[] = {"linear", "lm_head", "moe", "embedding", "other"};
    return (unsigned)k <= MOQ_MOD_OTHER ? n[k] : "?";
}

bool moq_checkpoint_has_qconfig(const moq_checkpoint *c) {
    if (moq_checkpoint_json_text(c, "hf_quant_config.json")) return true;
    const char *t = moq_checkpoint_json_text(c, "config.json");
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    /* Any non-null value counts, so a malformed one is reported by moq_qconfig_open, not ignored. */
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
    const bool has = qc && !cJSON_IsNull(qc);
    cJSON_Delete(j);
    return has;
}

/* Name rules, first match wins (last part of the module name). */
static const struct { const char *last; moq_module_kind kind; } kind_rules[] = {
    {"embed_tokens", MOQ_MOD_EMBEDDING}, {"embeddings", MOQ_MOD_EMBEDDING}, {"wte", MOQ_MOD_EMBEDDING},
    {"word_embeddings", MOQ_MOD_EMBEDDING}, {"embed", MOQ_MOD_EMBEDDING},
    {"lm_head", MOQ_MOD_LM_HEAD}, {"head", MOQ_MOD_LM_HEAD},
};

/* Fused projections whose shards the checkpoint stores separately (runtime name = first column). */
static const char *const fused_qkv[] = {"q_proj", "k_proj", "v_proj"};
static const char *const fused_gu[] = {"gate_proj", "up_proj"};
static const char *const fused_w13[] = {"w1", "w3"};
static const moq_packed fused_groups[] = {
    {"qkv_proj", fused_qkv, 3}, {"gate_up_proj", fused_gu, 2}, {"w13", fused_w13, 2}};
enum { N_FUSED = sizeof fused_groups / sizeof fused_groups[0] };

/* Tensor roles that belong to the KV cache, not to the module's weight contract. */
static bool kv_role(const char *r) { return strcmp(r, "k_scale") == 0 || strcmp(r, "v_scale") == 0; }

/* Tensors a module may hold beside its weight and bias: the FP8 KV-cache scales (NUMERICS §8),
 * DeepSeek-V3's router selection bias (mlp.gate.e_score_correction_bias, src/moe routing) and
 * DeepSeek-V4's hash router table (ffn.gate.tid2eid, model.c). */
static bool side_role(const char *r) {
    static const char *const roles[] = {"k_scale", "v_scale", "e_score_correction_bias", "tid2eid"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(r, roles[i]) == 0) return true;
    return false;
}

static const char *last_part(const char *s) {
    if (!s) return "";
    const char *d = strrchr(s, '.');
    return d ? d + 1 : s;
}

static void problem(moq_modules *m, moq_status code, const char *where, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void problem(moq_modules *m, moq_status code, const char *where, const char *fmt, ...) {
    if (m->n_probs == m->cap_probs) {
        int cap = m->cap_probs ? m->cap_probs * 2 : 16;
        moq_problem *p = realloc(m->probs, (size_t)cap * sizeof *p);
        if (!p) return;
        m->probs = p, m->cap_probs = cap;
    }
    moq_problem *p = &m->probs[m->n_probs++];
    p->code = code;
    snprintf(p->where, sizeof p->where, "%s", where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
}

static const moq_tensor *named_tensor(const moq_checkpoint *c, const char *module, const char *role) {
    char nm[600];
    snprintf(nm, sizeof nm, "%s.%s", module, role);
    return moq_checkpoint_tensor(c, nm);
}
static const moq_tensor *module_tensor(const moq_checkpoint *c, const moq_module *mod, const char *role) {
    return named_tensor(c, mod->name, role);
}

const moq_packed *moq_modules_fused_groups(int *n) {
    *n = N_FUSED;
    return fused_groups;
}

/* Stacked experts (transformers' Llama4TextExperts / GptOssExperts layout, src/moe/moe.c): module
 * "<...>.experts" holding gate_up_proj [E, H, 2I] and down_proj [E, I, H] (x · W), each scale
 * beside its projection as <proj>_<role>. */
static const struct { const char *proj; bool gate_up; } stacked_projs[] = {{"gate_up_proj", true}, {"down_proj", false}};

static bool is_stacked(const moq_checkpoint *c, const moq_module *mod) {
    if (strcmp(last_part(mod->name), "experts") != 0) return false;
    for (size_t i = 0; i < sizeof stacked_projs / sizeof stacked_projs[0]; i++)
        if (module_tensor(c, mod, stacked_projs[i].proj)) return true;
    return false;
}

static moq_module_kind classify(const moq_checkpoint *c, moq_module *mod, char **resolve_prefix) {
    const char *last = last_part(mod->name);
    *resolve_prefix = NULL;
    for (size_t i = 0; i < sizeof kind_rules / sizeof kind_rules[0]; i++)
        if (strcmp(last, kind_rules[i].last) == 0) return kind_rules[i].kind;
    if (is_stacked(c, mod)) { /* <...>.experts.{gate_up_proj,down_proj}[_<scale>]: resolved as the experts */
        *resolve_prefix = strdup(mod->name);
        return MOQ_MOD_EXPERT;
    }
    const char *e = strstr(mod->name, ".experts.");
    if (e && e[9] >= '0' && e[9] <= '9') {
        size_t n = (size_t)(e - mod->name) + 8;
        if ((*resolve_prefix = malloc(n + 1))) memcpy(*resolve_prefix, mod->name, n), (*resolve_prefix)[n] = 0;
        return MOQ_MOD_EXPERT;
    }
    const moq_tensor *w = module_tensor(c, mod, "weight");
    if (w && w->ndim >= 2) return MOQ_MOD_LINEAR;
    if (module_tensor(c, mod, "weight_scale") || module_tensor(c, mod, "input_scale")) return MOQ_MOD_LINEAR;
    return MOQ_MOD_OTHER;
}

static const moq_layer_kind resolve_kind[] = {
    [MOQ_MOD_LINEAR] = MOQ_KIND_LINEAR, [MOQ_MOD_LM_HEAD] = MOQ_KIND_LM_HEAD, [MOQ_MOD_EXPERT] = MOQ_KIND_MOE,
    [MOQ_MOD_EMBEDDING] = MOQ_KIND_EMBEDDING, [MOQ_MOD_OTHER] = MOQ_KIND_EMBEDDING};

moq_status moq_modules_build(moq_modules *out, const moq_checkpoint *c, const moq_qconfig *q, moq_error *err) {
    memset(out, 0, sizeof *out);
    const size_t nt = moq_checkpoint_tensor_count(c);
    moq_strmap map;
    if (!moq_strmap_init(&map, nt + 1) || !(out->mods = calloc(nt + 1, sizeof *out->mods))) {
        moq_strmap_free(&map);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(c), "out of memory");
    }
    size_t *count = calloc(nt + 1, sizeof *count), *owner = calloc(nt + 1, sizeof *owner);
    if (!count || !owner) {
        free(count), free(owner), moq_strmap_free(&map);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(c), "out of memory");
    }
    for (size_t i = 0; i < nt; i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        const char *dot = strrchr(t->name, '.');
        size_t len = dot ? (size_t)(dot - t->name) : strlen(t->name);
        char *name = malloc(len + 1);
        if (!name) continue;
        memcpy(name, t->name, len), name[len] = 0;
        size_t idx;
        if (moq_strmap_get(&map, name, &idx)) free(name);
        else {
            idx = (size_t)out->n++;
            out->mods[idx].name = name;
            moq_strmap_put(&map, name, idx, NULL);
        }
        owner[i] = idx;
        count[idx]++;
    }
    for (int k = 0; k < out->n; k++) out->mods[k].tensors = calloc(count[k] ? count[k] : 1, sizeof(size_t));
    for (size_t i = 0; i < nt; i++) {
        moq_module *mod = &out->mods[owner[i]];
        if (!mod->tensors) continue;
        mod->tensors[mod->n_tensors++] = i;
        mod->bytes += moq_checkpoint_tensor_at(c, i)->nbytes;
    }
    free(count), free(owner);
    moq_strmap_free(&map);

    for (int k = 0; k < out->n; k++) {
        moq_module *mod = &out->mods[k];
        mod->kind = classify(c, mod, &mod->resolve_prefix);
        const char *rp = mod->resolve_prefix ? mod->resolve_prefix : mod->name;
        mod->resolved = true;
        if (mod->kind == MOQ_MOD_OTHER) {
            mod->res = (moq_resolution){.method = "none", .rule = "not-a-layer"};
            continue;
        }
        if (!q) {
            const bool lin = mod->kind == MOQ_MOD_LINEAR || mod->kind == MOQ_MOD_LM_HEAD;
            mod->res = (moq_resolution){.method = lin ? "unquantized_linear" : "none", .rule = "no-quantization-config"};
            continue;
        }
        /* Experts of one layer share their resolution: reuse the previous module's when the prefix matches. */
        const moq_module *prev = k ? &out->mods[k - 1] : NULL;
        if (prev && prev->resolved && prev->kind == mod->kind && prev->resolve_prefix && mod->resolve_prefix &&
            strcmp(prev->resolve_prefix, mod->resolve_prefix) == 0) {
            mod->res = prev->res;
            continue;
        }
        moq_error e = {0};
        if (moq_resolve(q, rp, resolve_kind[mod->kind], fused_groups, N_FUSED, &mod->res, &e) != MOQ_OK) {
            mod->resolved = false;
            mod->res = (moq_resolution){.method = "none", .rule = "error"};
            problem(out, e.code, e.where[0] ? e.where : mod->name, "%s", e.msg);
        }
    }
    return MOQ_OK;
}

void moq_modules_free(moq_modules *m) {
    if (!m) return;
    moq_notes_free(&m->notes);
    for (int k = 0; k < m->n; k++) free(m->mods[k].name), free(m->mods[k].resolve_prefix), free(m->mods[k].tensors);
    free(m->mods);
    free(m->probs);
    memset(m, 0, sizeof *m);
}

/* ---- checks ---------------------------------------------------------------------------------- */

static moq_method method_of(const char *name) {
    for (int i = 0; i < MOQ_METHOD_COUNT; i++)
        if (strcmp(moq_method_name((moq_method)i), name) == 0) return (moq_method)i;
    return MOQ_METHOD_NONE;
}

static bool float_dtype(moq_dtype d) { return d == MOQ_DT_BF16 || d == MOQ_DT_F16 || d == MOQ_DT_F32; }

/* A row-block dimension (MXFP8 scales stored once per r rows): any divisor of N. */
static bool dim_matches(moq_dim d, int64_t have, int64_t N, int64_t K, int64_t G) {
    if (d == MOQ_DIM_N_ROWBLK) return have >= 1 && N % have == 0;
    const int64_t v = moq_dim_eval(d, N, K, G);
    return v >= 0 && v == have;
}

static bool shape_is(const moq_tensor *t, const moq_dim *dims, int64_t N, int64_t K, int64_t G) {
    int nd = 0;
    while (nd < MOQ_RULE_MAX_DIMS && dims[nd] != MOQ_DIM_END) nd++;
    if (t->ndim == 0 && nd > 0) { /* one value: ModelOpt 0.47 writes a one-block FP8_PB_WO scale 0-d (NUMERICS §12) */
        for (int d = 0; d < nd; d++)
            if (!dim_matches(dims[d], 1, N, K, G)) return false;
        return true;
    }
    if (t->ndim != nd) return false;
    for (int d = 0; d < nd; d++)
        if (!dim_matches(dims[d], t->shape[d], N, K, G)) return false;
    return true;
}

/* A tensor in any of the rule's accepted shapes: the main one, the alternative, or (scalar_if_one)
 * 0-d where the main shape holds exactly one element. */
static bool rule_shape_ok(const moq_tensor *t, const moq_tensor_rule *r, int64_t N, int64_t K, int64_t G) {
    if (shape_is(t, r->shape, N, K, G) || (r->alt_used && shape_is(t, r->shape_alt, N, K, G))) return true;
    if (!r->scalar_if_one || t->ndim != 0) return false;
    int64_t n = 1;
    for (int d = 0; d < MOQ_RULE_MAX_DIMS && r->shape[d] != MOQ_DIM_END; d++) {
        const int64_t v = moq_dim_eval(r->shape[d], N, K, G);
        if (v < 0) return false;
        n *= v;
    }
    return n == 1;
}

static const char *shape_str(const moq_tensor *t, char *b, size_t n) {
    size_t o = (size_t)snprintf(b, n, "[");
    for (int d = 0; d < t->ndim && o < n; d++) o += (size_t)snprintf(b + o, n - o, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (o < n) snprintf(b + o, n - o, "]");
    return b;
}

static const char *expect_str(const moq_dim *dims, int64_t N, int64_t K, int64_t G, char *b, size_t n) {
    size_t o = (size_t)snprintf(b, n, "[");
    for (int d = 0; d < MOQ_RULE_MAX_DIMS && dims[d] != MOQ_DIM_END && o < n; d++) {
        int64_t v = moq_dim_eval(dims[d], N, K, G);
        if (dims[d] == MOQ_DIM_N_ROWBLK) o += (size_t)snprintf(b + o, n - o, "%sN/r", d ? ", " : "");
        else if (v < 0) o += (size_t)snprintf(b + o, n - o, "%s?", d ? ", " : "");
        else o += (size_t)snprintf(b + o, n - o, "%s%lld", d ? ", " : "", (long long)v);
    }
    if (o < n) snprintf(b + o, n - o, "]");
    return b;
}

/* The divisor a K-derived shape symbol needs (0 when it needs none). */
static int64_t k_divisor(moq_dim d, int64_t G) {
    switch (d) {
    case MOQ_DIM_K_HALF: return 2;
    case MOQ_DIM_K_DIV_G: return G;
    case MOQ_DIM_K_BLK128: return 128;
    default: return 0;
    }
}

/* Where config.json says a projection's weight dims come from (N rows, K columns), one row per
 * projection name. Used only to tell which tensor is wrong when a weight and its scales disagree. */
typedef enum cfg_dim { CFG_HIDDEN, CFG_Q, CFG_KV, CFG_INTER } cfg_dim;
static const struct { const char *proj; cfg_dim n, k; } proj_dims[] = {
    {"q_proj", CFG_Q, CFG_HIDDEN},        {"k_proj", CFG_KV, CFG_HIDDEN},     {"v_proj", CFG_KV, CFG_HIDDEN},
    {"o_proj", CFG_HIDDEN, CFG_Q},        {"gate_proj", CFG_INTER, CFG_HIDDEN}, {"up_proj", CFG_INTER, CFG_HIDDEN},
    {"down_proj", CFG_HIDDEN, CFG_INTER}, {"w1", CFG_INTER, CFG_HIDDEN},      {"w3", CFG_INTER, CFG_HIDDEN},
    {"w2", CFG_HIDDEN, CFG_INTER},
};

static int64_t cfg_value(const moq_arch *a, cfg_dim d, bool expert) {
    const int64_t hd = a->head_dim;
    switch (d) {
    case CFG_HIDDEN: return a->hidden_size;
    case CFG_Q: return a->num_attention_heads * hd;
    case CFG_KV: return a->num_key_value_heads * hd;
    case CFG_INTER: return expert && a->moe_intermediate_size > 0 ? a->moe_intermediate_size : a->intermediate_size;
    }
    return 0;
}

/* N and K of module `name` from config.json, or false when the config does not say. */
static bool config_dims(const moq_checkpoint *c, const char *name, int64_t *N, int64_t *K) {
    const moq_arch *a = moq_checkpoint_arch(c);
    if (!a) return false;
    const char *proj = last_part(name);
    const bool expert = strstr(name, ".experts.") != NULL;
    for (size_t i = 0; i < sizeof proj_dims / sizeof proj_dims[0]; i++)
        if (strcmp(proj_dims[i].proj, proj) == 0) {
            *N = cfg_value(a, proj_dims[i].n, expert), *K = cfg_value(a, proj_dims[i].k, expert);
            return *N > 0 && *K > 0;
        }
    return false;
}

/* A weight whose shape disagrees with config.json while its scales agree with config.json (and
 * none agrees with the weight) is the wrong tensor: the scales are then checked against the
 * config's N and K and the problem names the weight. */
static bool weight_shape_wrong(const moq_checkpoint *c, const char *name, const moq_tensor *w, const moq_tensor_rule *rules,
                               int64_t N, int64_t K, int64_t G, int64_t *Nc, int64_t *Kc) {
    if (!config_dims(c, name, Nc, Kc) || shape_is(w, rules[0].shape, *Nc, *Kc, G)) return false;
    int for_config = 0, for_weight = 0;
    for (const moq_tensor_rule *r = rules + 1; r->suffix; r++) {
        const moq_tensor *t = named_tensor(c, name, r->suffix);
        if (!t) continue;
        const bool fc = rule_shape_ok(t, r, *Nc, *Kc, G);
        const bool fw = rule_shape_ok(t, r, N, K, G);
        for_config += fc && !fw, for_weight += fw && !fc;
    }
    return for_config > 0 && for_weight == 0;
}

void moq_module_validate(moq_modules *m, const moq_checkpoint *c, const char *name, const moq_resolution *res,
                         const size_t *tensors, int n_tensors, int *expected, int *found) {
    *expected = *found = 0;
    const moq_tensor *w = named_tensor(c, name, "weight");
    const moq_method meth = method_of(res->method);
    const bool unq = meth == MOQ_METHOD_NONE || meth == MOQ_METHOD_UNQUANTIZED_LINEAR;
    char b1[96], b2[96], b3[48];
    if (unq) {
        /* Quantized tensors in a module resolved as unquantized. */
        char held[160] = "";
        size_t o = 0;
        if (w && !float_dtype(w->dtype)) o += (size_t)snprintf(held + o, sizeof held - o, "weight %s", moq_dtype_name(w->dtype));
        static const char *const qroles[] = {"weight_scale", "weight_scale_2", "input_scale", "weight_scale_inv"};
        for (size_t r = 0; r < sizeof qroles / sizeof qroles[0] && o < sizeof held; r++)
            if (named_tensor(c, name, qroles[r])) o += (size_t)snprintf(held + o, sizeof held - o, "%s%s", o ? ", " : "", qroles[r]);
        if (o) {
            problem(m, MOQ_ERR_CONFIG, name, "holds quantized tensors (%s) but resolves to %s (rule %s)", held, res->method, res->rule);
            return;
        }
        const moq_tensor_rule *cr = moq_scheme_unquantized_contract();
        *expected = 1;
        if (!w) problem(m, MOQ_ERR_TENSOR, name, "missing tensor weight (%s)", cr[0].note);
        else *found = 1;
        for (int i = 0; i < n_tensors; i++) {
            const char *role = last_part(moq_checkpoint_tensor_at(c, tensors[i])->name);
            if (strcmp(role, "weight") != 0 && strcmp(role, "bias") != 0 && !side_role(role))
                problem(m, MOQ_ERR_TENSOR, moq_checkpoint_tensor_at(c, tensors[i])->name, "extra tensor: %s is not part of an unquantized linear", role);
        }
        return;
    }
    const moq_scheme *s = moq_scheme_for_method(meth);
    if (!s) return;
    if (w && float_dtype(w->dtype)) {
        problem(m, MOQ_ERR_CONFIG, name, "stored as %s but resolves to %s (rule %s); exclude it in the config or re-export",
                moq_dtype_name(w->dtype), res->method, res->rule);
        return;
    }
    const moq_tensor_rule *rules = s->contract;
    int64_t N = -1, K = -1, G = res->group_size ? res->group_size : s->group;
    bool w_reported = false;
    if (w && w->ndim == 2) {
        N = w->shape[0];
        K = rules[0].shape[1] == MOQ_DIM_K_HALF ? 2 * w->shape[1] : w->shape[1];
        int64_t Nc = 0, Kc = 0;
        if (weight_shape_wrong(c, name, w, rules, N, K, G, &Nc, &Kc)) {
            problem(m, MOQ_ERR_TENSOR, w->name, "shape %s, expected %s from config.json (scheme %s: %s; N=%lld, K=%lld; its scales agree with the config)",
                    shape_str(w, b1, sizeof b1), expect_str(rules[0].shape, Nc, Kc, G, b2, sizeof b2), s->algo, rules[0].note,
                    (long long)Nc, (long long)Kc);
            N = Nc, K = Kc, w_reported = true;
        }
        /* K not divisible by what the contract groups along K: one problem naming the weight. */
        int64_t need = 0;
        const char *why = "";
        for (const moq_tensor_rule *r = rules; r->suffix && !need; r++)
            for (int d = 0; d < MOQ_RULE_MAX_DIMS && r->shape[d] != MOQ_DIM_END && !need; d++) {
                const int64_t dv = k_divisor(r->shape[d], G);
                if (dv > 0 && K % dv) need = dv, why = r->note;
            }
        if (need) {
            problem(m, MOQ_ERR_TENSOR, w->name, "K=%lld is not a multiple of %lld (scheme %s: %s)", (long long)K, (long long)need, s->algo, why);
            N = -1; /* shapes cannot be checked against a K the scheme cannot group */
        }
    }
    for (const moq_tensor_rule *r = rules; r->suffix; r++) {
        const moq_tensor *t = named_tensor(c, name, r->suffix);
        if (!t) {
            if (!r->optional) {
                (*expected)++;
                problem(m, MOQ_ERR_TENSOR, name, "missing tensor %s (scheme %s: %s)", r->suffix, s->algo, r->note);
            }
            continue;
        }
        (*expected)++, (*found)++;
        if (t->dtype != r->dtype && t->dtype != r->dtype_alt)
            problem(m, MOQ_ERR_TENSOR, t->name, "dtype %s, expected %s (scheme %s: %s)", moq_dtype_name(t->dtype), moq_dtype_name(r->dtype), s->algo, r->note);
        if (t == w && w_reported) continue;
        if (N < 0) {
            if (t == w && w->ndim != 2) problem(m, MOQ_ERR_TENSOR, t->name, "shape %s, expected 2 dimensions (scheme %s)", shape_str(t, b1, sizeof b1), s->algo);
            continue;
        }
        if (!rule_shape_ok(t, r, N, K, G))
            problem(m, MOQ_ERR_TENSOR, t->name, "shape %s, expected %s (scheme %s: %s; N=%lld, K=%lld%s)", shape_str(t, b1, sizeof b1),
                    expect_str(r->shape, N, K, G, b2, sizeof b2), s->algo, r->note, (long long)N, (long long)K,
                    G ? (snprintf(b3, sizeof b3, ", group %lld", (long long)G), b3) : "");
    }
    for (int i = 0; i < n_tensors; i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, tensors[i]);
        const char *role = last_part(t->name);
        bool known = strcmp(role, "bias") == 0 || side_role(role);
        for (const moq_tensor_rule *r = rules; r->suffix && !known; r++) known = strcmp(role, r->suffix) == 0;
        if (!known) problem(m, MOQ_ERR_TENSOR, t->name, "extra tensor: %s is not part of scheme %s", role, s->algo);
    }
}

/* Stacked-expert methods moq run loads (src/moe/moe.c load_stacked refuses MXFP8, whose stacked scales
 * ModelOpt writes along the output dimension, and the block / per-channel formats no export showed). */
static const moq_method stacked_methods[] = {MOQ_METHOD_NONE, MOQ_METHOD_UNQUANTIZED_LINEAR, MOQ_METHOD_FP8_MOE, MOQ_METHOD_NVFP4_MOE,
                                             MOQ_METHOD_W4A16_NVFP4_MOE, MOQ_METHOD_NVFP4_AWQ_MOE};

/* The contract of each projection of a stacked-experts module, laid out as moe.c reads it: the
 * weight <proj> [E, K, N] (the rule's [N, K] transposed, K packed in halves for e2m1), a scale of
 * rule shape [N, K/G] as <proj>_<role> [E, K/G, N], a scalar one as a scalar or [E], and an optional
 * <proj>_bias [E, N] (gpt-oss; both projections or neither). E, H and the expert I from config.json. */
static void validate_stacked(moq_modules *m, const moq_checkpoint *c, const moq_module *mod, int *expected, int *found) {
    const moq_method meth = method_of(mod->res.method);
    bool ok = false;
    for (size_t i = 0; i < sizeof stacked_methods / sizeof stacked_methods[0]; i++) ok |= stacked_methods[i] == meth;
    const moq_scheme *s = moq_scheme_for_method(meth);
    if (!ok) {
        problem(m, MOQ_ERR_UNSUPPORTED, mod->name, "stacked experts (experts.gate_up_proj [E, H, 2I]) resolve to %s (rule %s): `moq run` "
                "loads stacked experts in FP8, NVFP4, W4A16_NVFP4, NVFP4_AWQ or unquantized only", mod->res.method, mod->res.rule);
        return;
    }
    const moq_tensor_rule *rules = s ? s->contract : moq_scheme_unquantized_contract();
    const char *algo = s ? s->algo : "unquantized";
    const moq_arch *a = moq_checkpoint_arch(c);
    const int64_t E = a ? a->num_experts : 0, H = a ? a->hidden_size : 0, I = a ? cfg_value(a, CFG_INTER, true) : 0;
    const int64_t G = mod->res.group_size ? mod->res.group_size : (s ? s->group : 0);
    char nm[600], b1[96], role[160];
    const moq_tensor *bias[2] = {NULL, NULL};
    for (size_t p = 0; p < sizeof stacked_projs / sizeof stacked_projs[0]; p++) {
        const char *proj = stacked_projs[p].proj;
        const int64_t N = stacked_projs[p].gate_up ? 2 * I : H, K = stacked_projs[p].gate_up ? H : I;
        for (const moq_tensor_rule *r = rules; r->suffix; r++) {
            if (strcmp(r->suffix, "bias") == 0) continue; /* <proj>_bias below */
            const bool weight = r == rules;
            snprintf(role, sizeof role, weight ? "%s" : "%s_%s", proj, r->suffix);
            snprintf(nm, sizeof nm, "%s.%s", mod->name, role);
            const moq_tensor *t = moq_checkpoint_tensor(c, nm);
            if (!t) {
                if (!r->optional) (*expected)++, problem(m, MOQ_ERR_TENSOR, mod->name, "missing tensor %s (stacked experts, scheme %s: %s)", role, algo, r->note);
                continue;
            }
            (*expected)++, (*found)++;
            if (s ? t->dtype != r->dtype && t->dtype != r->dtype_alt : !float_dtype(t->dtype))
                problem(m, MOQ_ERR_TENSOR, nm, "dtype %s, expected %s (stacked experts, scheme %s: %s)", moq_dtype_name(t->dtype),
                        s ? moq_dtype_name(r->dtype) : "BF16, F16 or F32", algo, r->note);
            if (E <= 0 || N <= 0 || K <= 0) continue; /* no config.json sizes: dtypes only */
            if (r->shape[0] == MOQ_DIM_END) {
                if (t->nelem != 1 && !(t->ndim == 1 && t->shape[0] == E))
                    problem(m, MOQ_ERR_TENSOR, nm, "shape %s, expected a scalar (all experts) or [%lld] (one per expert; scheme %s: %s)",
                            shape_str(t, b1, sizeof b1), (long long)E, algo, r->note);
                continue;
            }
            const int64_t dn = moq_dim_eval(r->shape[0], N, K, G), dk = r->shape[1] == MOQ_DIM_END ? -1 : moq_dim_eval(r->shape[1], N, K, G);
            if (dn < 0 || dk < 0 || r->shape[2] != MOQ_DIM_END) continue; /* 1-D rules (pre_quant_scale): no stacked form seen */
            if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != dk || t->shape[2] != dn)
                problem(m, MOQ_ERR_TENSOR, nm, "shape %s, expected [%lld, %lld, %lld] from config.json (stacked experts [E, %s, %s], x · W; scheme %s: %s)",
                        shape_str(t, b1, sizeof b1), (long long)E, (long long)dk, (long long)dn, stacked_projs[p].gate_up ? "H" : "I",
                        stacked_projs[p].gate_up ? "2I" : "H", algo, r->note);
        }
        snprintf(nm, sizeof nm, "%s.%s_bias", mod->name, proj);
        const moq_tensor *b = bias[p] = moq_checkpoint_tensor(c, nm);
        if (!b) continue;
        if (!float_dtype(b->dtype)) problem(m, MOQ_ERR_TENSOR, nm, "dtype %s, expected BF16, F16 or F32 (stacked expert bias)", moq_dtype_name(b->dtype));
        if (E > 0 && N > 0 && (b->ndim != 2 || b->shape[0] != E || b->shape[1] != N))
            problem(m, MOQ_ERR_TENSOR, nm, "shape %s, expected [%lld, %lld] from config.json (stacked expert bias [E, %s])", shape_str(b, b1, sizeof b1),
                    (long long)E, (long long)N, stacked_projs[p].gate_up ? "2I" : "H");
    }
    if (!bias[0] != !bias[1])
        problem(m, MOQ_ERR_TENSOR, mod->name, "%s_bias without %s_bias; expected both stacked expert biases or neither",
                stacked_projs[bias[0] ? 0 : 1].proj, stacked_projs[bias[0] ? 1 : 0].proj);
    for (int i = 0; i < mod->n_tensors; i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, mod->tensors[i]);
        const char *rl = last_part(t->name);
        bool known = side_role(rl);
        for (size_t p = 0; p < sizeof stacked_projs / sizeof stacked_projs[0] && !known; p++) {
            const size_t n = strlen(stacked_projs[p].proj);
            if (strncmp(rl, stacked_projs[p].proj, n) != 0) continue;
            if (!rl[n] || strcmp(rl + n, "_bias") == 0) known = true;
            for (const moq_tensor_rule *r = rules + 1; r->suffix && !known && rl[n] == '_'; r++) known = strcmp(rl + n + 1, r->suffix) == 0;
        }
        if (!known) problem(m, MOQ_ERR_TENSOR, t->name, "extra tensor: %s is not part of stacked experts in scheme %s", rl, algo);
    }
}

static void check_module(moq_modules *m, const moq_module *mod, const moq_checkpoint *c, const moq_qconfig *q, int *expected, int *found) {
    *expected = *found = 0;
    if (mod->kind == MOQ_MOD_OTHER || !mod->resolved) return;
    const moq_tensor *w = module_tensor(c, mod, "weight");
    if (mod->kind == MOQ_MOD_EMBEDDING) {
        if (w && !float_dtype(w->dtype))
            problem(m, MOQ_ERR_TENSOR, w->name, "dtype %s, expected BF16, F16 or F32 (neither engine quantizes embeddings)", moq_dtype_name(w->dtype));
        return;
    }
    /* KV-cache scales ride on k_proj / v_proj. */
    for (int i = 0; i < mod->n_tensors; i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, mod->tensors[i]);
        if (kv_role(last_part(t->name)) && (!q || !q->kv))
            problem(m, MOQ_ERR_CONFIG, t->name, "KV-cache scale present but the config sets no kv_cache_quant_algo; the scale would be ignored");
    }
    if (mod->kind == MOQ_MOD_EXPERT && is_stacked(c, mod)) validate_stacked(m, c, mod, expected, found);
    else moq_module_validate(m, c, mod->name, &mod->res, mod->tensors, mod->n_tensors, expected, found);
}

static bool scalar_f32(const moq_tensor *t, float *v) {
    if (!t || t->dtype != MOQ_DT_F32 || t->nelem != 1 || !t->data) return false;
    memcpy(v, t->data, 4);
    return true;
}

/* Shards of a fused projection: one method, one NVFP4 global scale, one static input scale. */
static void check_fused(moq_modules *m, const moq_module *first, const moq_checkpoint *c, const moq_qconfig *q, const moq_strmap *by_name) {
    const char *last = last_part(first->name);
    for (int g = 0; g < N_FUSED; g++) {
        const moq_packed *fg = &fused_groups[g];
        if (strcmp(last, fg->shards[0]) != 0) continue;
        const size_t plen = (size_t)(last - first->name);
        const moq_module *sh[MOQ_MAX_SHARDS];
        int n = 0;
        char nm[600];
        for (int s = 0; s < fg->n_shards; s++) {
            snprintf(nm, sizeof nm, "%.*s%s", (int)plen, first->name, fg->shards[s]);
            size_t idx;
            /* a shard is a module with a weight: Gemma 4's k_eq_v layers have no v_proj, yet ModelOpt
               writes their FP8 KV scale as self_attn.v_proj.v_scale (a module of that tensor alone) */
            if (moq_strmap_get(by_name, nm, &idx) && module_tensor(c, &m->mods[idx], "weight")) sh[n++] = &m->mods[idx];
        }
        if (n < 2) return;
        char fused[600];
        snprintf(fused, sizeof fused, "%.*s%s", (int)plen, first->name, fg->name);
        if (q && first->kind == MOQ_MOD_LINEAR) {
            moq_resolution res;
            moq_error e = {0};
            if (moq_resolve(q, fused, MOQ_KIND_LINEAR, fg, 1, &res, &e) != MOQ_OK) {
                problem(m, e.code, e.where, "%s", e.msg);
                return;
            }
        }
        char detail[400];
        size_t o = 0;
        bool differ = false;
        for (int s = 0; s < n; s++) {
            differ |= strcmp(sh[s]->res.method, sh[0]->res.method) != 0;
            if (o < sizeof detail) o += (size_t)snprintf(detail + o, sizeof detail - o, "%s%s=%s", s ? " and " : "", last_part(sh[s]->name), sh[s]->res.method);
        }
        if (differ) {
            problem(m, MOQ_ERR_CONFIG, fused, "fused shards %s disagree; a fused layer needs one scheme", detail);
            return;
        }
        /* AWQ: the shards read one input, so one pre_quant_scale (scheme/nvfp4.c refuses the rest) */
        const moq_tensor *p0 = NULL;
        int n_pqs = 0;
        bool pqs_differ = false;
        for (int s = 0; s < n; s++) {
            const moq_tensor *t = module_tensor(c, sh[s], "pre_quant_scale");
            if (!t) continue;
            if (!n_pqs++) p0 = t;
            else pqs_differ |= t->nbytes != p0->nbytes || t->dtype != p0->dtype || (t->data && p0->data && memcmp(t->data, p0->data, t->nbytes) != 0);
        }
        if (n_pqs && (n_pqs != n || pqs_differ))
            problem(m, MOQ_ERR_TENSOR, fused, "fused shards have %s pre_quant_scale (%d of %d have one); the shards read one input and need one AWQ scale",
                    n_pqs != n ? "missing" : "different", n_pqs, n);
        static const char *const globals[] = {"weight_scale_2", "input_scale"};
        for (size_t r = 0; r < 2; r++) {
            float v0 = 0, v;
            bool have0 = false, diff = false;
            o = 0;
            for (int s = 0; s < n; s++) {
                if (!scalar_f32(module_tensor(c, sh[s], globals[r]), &v)) continue;
                if (!have0) v0 = v, have0 = true;
                else diff |= v != v0;
                if (o < sizeof detail) o += (size_t)snprintf(detail + o, sizeof detail - o, "%s%s=%g", o ? ", " : "", last_part(sh[s]->name), (double)v);
            }
            if (diff)
                problem(m, MOQ_ERR_TENSOR, fused, "fused shards have different %s (%s); the engines collapse them to the max, which loses accuracy",
                        globals[r], detail);
        }
        return;
    }
}

/* One value of a scale tensor as f32; false when the dtype is not a scale dtype. */
static bool scale_value(const moq_tensor *t, uint64_t i, float *v) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case MOQ_DT_F32: memcpy(v, p + 4 * i, 4); return true;
    case MOQ_DT_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); *v = moq_bf16_decode(h); return true; }
    case MOQ_DT_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); *v = moq_f16_decode(h); return true; }
    case MOQ_DT_F8_E4M3: *v = moq_e4m3_decode(p[i]); return true;
    case MOQ_DT_F8_E8M0: case MOQ_DT_U8: *v = moq_e8m0_decode(p[i]); return true;
    default: return false;
    }
}

/* One-byte scales (e4m3, e8m0: NVFP4 and MXFP8 block scales, 1/16 and 1/32 of the weights) take
 * the load's hot loop: a 256-bin histogram of the codes (no per-element decode or branch), each
 * used code decoded once; the element walk below runs only to name a bad one (load time, issue 14). */
static bool bytes_all_good(const moq_tensor *t) {
    if (t->dtype != MOQ_DT_F8_E4M3 && t->dtype != MOQ_DT_F8_E8M0 && t->dtype != MOQ_DT_U8) return false;
    uint64_t hist[4][256] = {{0}}; /* four tables: consecutive bytes do not wait on one counter */
    const uint8_t *p = t->data;
    uint64_t i = 0;
    for (; i + 4 <= t->nelem; i += 4) hist[0][p[i]]++, hist[1][p[i + 1]]++, hist[2][p[i + 2]]++, hist[3][p[i + 3]]++;
    for (; i < t->nelem; i++) hist[0][p[i]]++;
    for (int c = 0; c < 256; c++) {
        if (!(hist[0][c] | hist[1][c] | hist[2][c] | hist[3][c])) continue;
        const uint8_t b = (uint8_t)c;
        const float v = t->dtype == MOQ_DT_F8_E4M3 ? moq_e4m3_decode(b) : moq_e8m0_decode(b);
        if (isnan(v) || isinf(v) || v == 0.0f || v < 0.0f) return false;
    }
    return true;
}

void moq_tensor_check_scale_values(moq_modules *m, const moq_tensor *t) {
    if (!t->data || bytes_all_good(t)) return;
    uint64_t nan = 0, inf = 0, zero = 0, neg = 0, first = UINT64_MAX;
    float v;
    for (uint64_t i = 0; i < t->nelem; i++) {
        if (!scale_value(t, i, &v)) break;
        const bool bad = isnan(v) || isinf(v) || v == 0.0f || v < 0.0f;
        nan += isnan(v) != 0, inf += isinf(v) != 0, zero += v == 0.0f, neg += v < 0.0f;
        if (bad && first == UINT64_MAX) first = i;
    }
    if (first == UINT64_MAX) return;
    char at[96];
    if (t->ndim == 2) snprintf(at, sizeof at, "block %llu (row %llu, column %llu)", (unsigned long long)first,
                               (unsigned long long)(first / (uint64_t)t->shape[1]), (unsigned long long)(first % (uint64_t)t->shape[1]));
    else snprintf(at, sizeof at, "block %llu", (unsigned long long)first);
    problem(m, MOQ_ERR_TENSOR, t->name, "%llu NaN, %llu Inf, %llu zero, %llu negative of %llu scale values; first at %s",
            (unsigned long long)nan, (unsigned long long)inf, (unsigned long long)zero, (unsigned long long)neg,
            (unsigned long long)t->nelem, at);
}

/* The tensors the scale scan covers: scale tensors of quantized-capable modules. */
static bool scale_scanned(const moq_module *mod, const moq_tensor *t) {
    return mod->kind != MOQ_MOD_OTHER && strstr(last_part(t->name), "scale") != NULL;
}

static void check_values(moq_modules *m, const moq_module *mod, const moq_checkpoint *c) {
    for (int k = 0; k < mod->n_tensors; k++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, mod->tensors[k]);
        if (scale_scanned(mod, t)) moq_tensor_check_scale_values(m, t);
    }
}

bool moq_tensor_check_payload_values(moq_modules *m, const moq_tensor *t) {
    const moq_elem e = moq_dtype_elem(t->dtype);
    if (e == MOQ_ELEM_NONE || !t->data) return true;
    const moq_conv_row *dec = moq_conv_find(e, -1, moq_cpu_features(), MOQ_TARGET_COUNT);
    if (!dec) return true;
    enum { CHUNK = 4096 };
    float buf[CHUNK];
    const size_t esz = moq_elem_bytes(e, 1);
    uint64_t nan = 0, inf = 0, first = UINT64_MAX;
    for (uint64_t i0 = 0; i0 < t->nelem; i0 += CHUNK) {
        const size_t n = (size_t)(t->nelem - i0 < CHUNK ? t->nelem - i0 : CHUNK);
        dec->decode((const uint8_t *)t->data + i0 * esz, buf, n);
        for (size_t i = 0; i < n; i++) {
            if (isfinite(buf[i])) continue;
            nan += isnan(buf[i]) != 0, inf += isinf(buf[i]) != 0;
            if (first == UINT64_MAX) first = i0 + i;
        }
    }
    if (first == UINT64_MAX) return true;
    char at[128], code[48] = "";
    if (t->ndim == 2)
        snprintf(at, sizeof at, "index %llu (row %llu, column %llu)", (unsigned long long)first,
                 (unsigned long long)(first / (uint64_t)t->shape[1]), (unsigned long long)(first % (uint64_t)t->shape[1]));
    else snprintf(at, sizeof at, "index %llu", (unsigned long long)first);
    if (esz == 1) snprintf(code, sizeof code, " (code 0x%02X)", ((const uint8_t *)t->data)[first]);
    problem(m, MOQ_ERR_TENSOR, t->name, "%llu NaN and %llu Inf of %llu %s values; first at %s%s; ModelOpt saturates and never writes them: the file is corrupt",
            (unsigned long long)nan, (unsigned long long)inf, (unsigned long long)t->nelem, moq_elem_name(e), at, code);
    return false;
}

void moq_modules_check_payloads(moq_modules *m, const moq_checkpoint *c, moq_progress_fn progress, void *user) {
    uint64_t total = 0, done = 0;
    for (int k = 0; k < m->n; k++)
        for (int i = 0; i < m->mods[k].n_tensors; i++) total += moq_checkpoint_tensor_at(c, m->mods[k].tensors[i])->nbytes;
    for (int k = 0; k < m->n; k++) {
        const moq_module *mod = &m->mods[k];
        for (int i = 0; i < mod->n_tensors; i++) {
            const moq_tensor *t = moq_checkpoint_tensor_at(c, mod->tensors[i]);
            if (!scale_scanned(mod, t)) moq_tensor_check_payload_values(m, t);
            done += t->nbytes;
        }
        if (progress) progress(user, "values", done, total);
    }
}

/* ---- FP8 KV cache ---------------------------------------------------------------------------- */

static const struct { const char *algo; moq_elem elem; bool scaled; } kv_algos[] = {
    {"FP8", MOQ_ELEM_E4M3, true},
};

bool moq_kv_algo_find(const char *algo, moq_elem *elem, bool *scaled) {
    for (size_t i = 0; algo && i < sizeof kv_algos / sizeof kv_algos[0]; i++)
        if (strcmp(kv_algos[i].algo, algo) == 0) {
            *elem = kv_algos[i].elem, *scaled = kv_algos[i].scaled;
            return true;
        }
    return false;
}

/* Names ModelOpt and the engines use for the per-layer KV scales (NUMERICS §8), in order of
 * preference; the legacy single kv_scale serves both. */
static const struct { const char *k, *v; } kv_scale_names[] = {
    {".self_attn.k_proj.k_scale", ".self_attn.v_proj.v_scale"},
    {".self_attn.k_scale", ".self_attn.v_scale"},
    {".self_attn.attn.k_scale", ".self_attn.attn.v_scale"},
    {".self_attn.kv_scale", ".self_attn.kv_scale"},
};
enum { N_KV_NAMES = sizeof kv_scale_names / sizeof kv_scale_names[0] };

/* The first tensor of layer l under the k (which 0) or v (1) names, or NULL. */
static const moq_tensor *kv_tensor(const moq_checkpoint *c, const char *prefix, int64_t l, int which) {
    char nm[320];
    for (int r = 0; r < N_KV_NAMES; r++) {
        snprintf(nm, sizeof nm, "%s.layers.%lld%s", prefix, (long long)l, which ? kv_scale_names[r].v : kv_scale_names[r].k);
        const moq_tensor *t = moq_checkpoint_tensor(c, nm);
        if (t) return t;
    }
    return NULL;
}

moq_status moq_kv_scales_read(const moq_checkpoint *c, const char *prefix, int64_t L, const bool *attn, float *k, float *v, bool *defaulted,
                              moq_error *err) {
    *defaulted = false;
    int64_t first_with = -1;
    for (int64_t l = 0; l < L && first_with < 0; l++)
        if (kv_tensor(c, prefix, l, 0) || kv_tensor(c, prefix, l, 1)) first_with = l;
    if (first_with < 0) {
        for (int64_t l = 0; l < L; l++) {
            if (k) k[l] = 1.0f;
            if (v) v[l] = 1.0f;
        }
        *defaulted = true;
        return MOQ_OK;
    }
    char nm[320];
    for (int64_t l = 0; l < L; l++)
        for (int which = 0; which < 2 && (!attn || attn[l]); which++) { /* layers without attention have no KV */
            const moq_tensor *t = kv_tensor(c, prefix, l, which);
            float val = 0;
            if (!t) {
                snprintf(nm, sizeof nm, "%s.layers.%lld%s", prefix, (long long)l, which ? kv_scale_names[0].v : kv_scale_names[0].k);
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "tensor missing while layer %lld has KV scales (also looked for .self_attn.%s, "
                                ".self_attn.attn.%s, .self_attn.kv_scale); an FP8 KV cache needs k_scale and v_scale in every layer or in none",
                                (long long)first_with, which ? "v_scale" : "k_scale", which ? "v_scale" : "k_scale");
            }
            if (t->nelem != 1 || !t->data || !scale_value(t, 0, &val))
                return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "%s with %llu elements, expected one F32, BF16 or F16 value",
                                moq_dtype_name(t->dtype), (unsigned long long)t->nelem);
            if (!(val > 0) || !isfinite(val)) return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "KV scale %g, expected a finite value > 0", (double)val);
            if (which == 0 && k) k[l] = val;
            if (which == 1 && v) v[l] = val;
        }
    return MOQ_OK;
}

/* Where the decoder's layers live ("model", or the text stack of a multimodal checkpoint) and which
 * of them attend (hold a self_attn tensor; Gated DeltaNet layers hold linear_attn instead), from the
 * tensor names. attn: bool [L], all true when no layer names self_attn. */
static const char *decoder_layers(const moq_checkpoint *c, int64_t L, bool *attn) {
    static const char *const prefixes[] = {"model", "model.language_model", "language_model.model"};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        const size_t n = strlen(prefixes[p]);
        bool any = false;
        for (int64_t l = 0; l < L; l++) attn[l] = false;
        for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
            const char *t = moq_checkpoint_tensor_at(c, i)->name, *r = t + n;
            if (strncmp(t, prefixes[p], n) != 0 || strncmp(r, ".layers.", 8) != 0) continue;
            char *end = NULL;
            const long long l = strtoll(r + 8, &end, 10);
            if (end == r + 8 || l < 0 || l >= L || strncmp(end, ".self_attn.", 11) != 0) continue;
            attn[l] = any = true;
        }
        if (any) return prefixes[p];
    }
    for (int64_t l = 0; l < L; l++) attn[l] = true;
    return "model";
}

/* The KV-cache scales of a config declaring a scaled KV cache, as the runner will read them. */
static void check_kv_scales(moq_modules *m, const moq_checkpoint *c, const moq_qconfig *q) {
    const moq_arch *a = moq_checkpoint_arch(c);
    moq_elem e;
    bool scaled = false, defaulted = false;
    if (!q || !a || a->num_hidden_layers < 1 || !moq_kv_algo_find(moq_qconfig_kv_cache_quant_algo(q), &e, &scaled) || !scaled) return;
    bool *attn = malloc((size_t)a->num_hidden_layers * sizeof *attn);
    if (!attn) return;
    const char *prefix = decoder_layers(c, a->num_hidden_layers, attn);
    moq_error er = {0};
    if (moq_kv_scales_read(c, prefix, a->num_hidden_layers, attn, NULL, NULL, &defaulted, &er) != MOQ_OK) problem(m, er.code, er.where, "%s", er.msg);
    else if (defaulted) (void)moq_notes_add(&m->notes, "%s", MOQ_KV_SCALES_DEFAULT_NOTE);
    free(attn);
}

moq_status moq_modules_check(moq_modules *m, const moq_checkpoint *c, const moq_qconfig *q, bool values, moq_error *err) {
    check_kv_scales(m, c, q);
    moq_strmap by_name;
    if (!moq_strmap_init(&by_name, (size_t)m->n + 1)) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(c), "out of memory");
    for (int k = 0; k < m->n; k++) moq_strmap_put(&by_name, m->mods[k].name, (size_t)k, NULL);
    for (int k = 0; k < m->n; k++) {
        moq_module *mod = &m->mods[k];
        check_module(m, mod, c, q, &mod->n_expected, &mod->n_found);
        if (mod->resolved && (mod->kind == MOQ_MOD_LINEAR || mod->kind == MOQ_MOD_EXPERT)) check_fused(m, mod, c, q, &by_name);
        if (values && mod->kind != MOQ_MOD_OTHER) check_values(m, mod, c);
    }
    moq_strmap_free(&by_name);
    return MOQ_OK;
}
