/* modelopt.c — ModelOpt quantization configs, both layouts, as the reference engines read them.
 *
 *   hf_quant_config.json   {"producer": {...}, "quantization": {"quant_algo", "kv_cache_quant_algo",
 *                           "group_size", "exclude_modules": [...], "quantized_layers": {...}}}
 *   config.json            "quantization_config": {"quant_method": "modelopt", "quant_algo",
 *                           "kv_cache_scheme": {...} | "fp8", "ignore": [...], "group_size" or
 *                           "config_groups": {g: {"weights": {"group_size"}, "input_activations"}},
 *                           "quantized_layers"}
 *   MiniMax MXFP8          {"quant_method": "mxfp8", "ignored_layers": [...]}      (no quant_algo)
 *   SGLang hybrid          {"quant_method": "fp8", "moe_quant_algo": "NVFP4", "weight_block_size"}
 *
 * Which engine rule applies where they differ is a switch of moq_compat_rules (table below);
 * docs/COMPAT.md has the list. Tested by tests/config/test_modelopt.c (every error, every switch)
 * and tests/config/test_real_configs.c (the 38 files in ../shared/modelopt_configs).
 */
#include "config/modelopt.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/json.h"

/* The resolution rule that is not a scheme (STYLE.md §6: mixed precision is a rule). */
static const char MIXED[] = "MIXED_PRECISION";

/* clang-format off */
const moq_compat_rules moq_compat_table[MOQ_COMPAT_COUNT] = {
    [MOQ_COMPAT_MOQ] = {
        .name = "moq", .nested_if_quantization_key = true, .algo_upper = true, .sglang_algo_set = false,
        .algo_alias_top = true, .kv = MOQ_KV_MOQ, .kv_must_be_string = true, .kv_python_truthy = false, .exclude_null_is_error = true,
        .group_size_truncate = false, .group_size_string = true, .group_size_int_literal = false, .group_size_from_groups = true, .group_size_consistent = true,
        .group_size_required_fp4 = false, .nested_required_fields = true, .nvfp4_wonly_groups = true,
        .mxfp8_minimax = true, .hybrid_fp8_nvfp4 = true, .mp_block_size_check = true, .mp_group_from_layers = false,
        .mp_unknown_algo_error = true, .moq_only_algos = true,
        .ex_substring = true, .ex_fnmatch = true, .ex_fnmatch_stripped = true, .ex_regex_parts = false,
        .ex_fused_patterns = true, .ex_skipped_dot_boundary = false, .ex_skipped_linear_only = false, .ex_skipped_builtin_fused = false, .vision_rule = true, .vision_moe_linear = false,
        .attention_always_kv = false, .kv_auto_is_kv = false, .pbwo_block_moe = true, .pcpt_moe_channel = true,
        .mp_experts_parent = true, .mp_builtin_shards = true, .mp_resolve_first = false, .mp_all_linear_algos = true,
        .mp_attention_kv = true,
        .fp8_fused = MOQ_FP8_FUSED_KEEP, .nvfp4_fused_ws2_max = false,
    },
    [MOQ_COMPAT_VLLM] = {
        .name = "vllm", .nested_if_quantization_key = true, .algo_upper = true, .sglang_algo_set = false,
        .algo_alias_top = false, .kv = MOQ_KV_VLLM, .kv_must_be_string = true, .kv_python_truthy = false, .exclude_null_is_error = true,
        .group_size_truncate = true, .group_size_string = true, .group_size_int_literal = false, .group_size_from_groups = false, .group_size_consistent = false,
        .group_size_required_fp4 = false, .nested_required_fields = true, .nvfp4_wonly_groups = true,
        .mxfp8_minimax = true, .hybrid_fp8_nvfp4 = false, .mp_block_size_check = true, .mp_group_from_layers = false,
        .mp_unknown_algo_error = false, .moq_only_algos = false,
        .ex_substring = true, .ex_fnmatch = true, .ex_fnmatch_stripped = false, .ex_regex_parts = false,
        .ex_fused_patterns = false, .ex_skipped_dot_boundary = false, .ex_skipped_linear_only = false, .ex_skipped_builtin_fused = false, .vision_rule = true, .vision_moe_linear = true,
        .attention_always_kv = true, .kv_auto_is_kv = false, .pbwo_block_moe = false, .pcpt_moe_channel = false,
        .mp_experts_parent = true, .mp_builtin_shards = true, .mp_resolve_first = false, .mp_all_linear_algos = true,
        .mp_attention_kv = true,
        .fp8_fused = MOQ_FP8_FUSED_REQUANT_DIFFER, .nvfp4_fused_ws2_max = true,
    },
    [MOQ_COMPAT_SGLANG] = {
        .name = "sglang", .nested_if_quantization_key = false, .algo_upper = false, .sglang_algo_set = true,
        .algo_alias_top = false, .kv = MOQ_KV_SGLANG, .kv_must_be_string = false, .kv_python_truthy = true, .exclude_null_is_error = false,
        .group_size_truncate = false, .group_size_string = false, .group_size_int_literal = true, .group_size_from_groups = true, .group_size_consistent = false,
        .group_size_required_fp4 = true, .nested_required_fields = false, .nvfp4_wonly_groups = false,
        .mxfp8_minimax = false, .hybrid_fp8_nvfp4 = true, .mp_block_size_check = false, .mp_group_from_layers = true,
        .mp_unknown_algo_error = false, .moq_only_algos = false,
        .ex_substring = false, .ex_fnmatch = false, .ex_fnmatch_stripped = false, .ex_regex_parts = true,
        .ex_fused_patterns = true, .ex_skipped_dot_boundary = true, .ex_skipped_linear_only = true, .ex_skipped_builtin_fused = true, .vision_rule = false, .vision_moe_linear = false,
        .attention_always_kv = false, .kv_auto_is_kv = true, .pbwo_block_moe = false, .pcpt_moe_channel = false,
        .mp_experts_parent = false, .mp_builtin_shards = false, .mp_resolve_first = true, .mp_all_linear_algos = false,
        .mp_attention_kv = true,
        .fp8_fused = MOQ_FP8_FUSED_REQUANT_ALWAYS, .nvfp4_fused_ws2_max = true,
    },
};
/* clang-format on */

const char *moq_compat_name(moq_compat p) { return (unsigned)p < MOQ_COMPAT_COUNT ? moq_compat_table[p].name : "?"; }

moq_status moq_compat_parse(const char *name, moq_compat *out, moq_error *err) {
    for (int i = 0; i < MOQ_COMPAT_COUNT; i++)
        if (name && strcmp(name, moq_compat_table[i].name) == 0) {
            *out = (moq_compat)i;
            return MOQ_OK;
        }
    return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--compat", "\"%s\" is not one of moq, vllm, sglang", name ? name : "");
}

/* ---- small helpers ------------------------------------------------------------------------- */

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void upper(char *s) {
    for (; *s; s++) *s = (char)toupper((unsigned char)*s);
}

void moq_qconfig_note(moq_qconfig *q, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)moq_notes_addv(&q->notes, fmt, ap); /* a note lost to OOM is not an error */
    va_end(ap);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL; }
static bool absent(const cJSON *j) { return !j || cJSON_IsNull(j); }

/* An integer group_size from JSON under the profile's rules. *have = false when absent/null. */
static moq_status json_group_size(const moq_qconfig *q, const cJSON *j, const char *file, const char *key,
                                  int64_t *out, bool *have, moq_error *err) {
    *have = false;
    if (absent(j)) return MOQ_OK;
    if (cJSON_IsNumber(j) && q->r->group_size_int_literal && moq_json_is_float_literal(j))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %g written as a float; SGLang keeps a float group size and its NVFP4 weight shapes (K // group_size) fail, expected an integer",
                        key, j->valuedouble);
    if (cJSON_IsNumber(j) && isfinite(j->valuedouble) && fabs(j->valuedouble) < 9.0e15) {
        double v = j->valuedouble;
        if (v != floor(v) && !q->r->group_size_truncate)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %g, expected an integer", key, v);
        *out = (int64_t)v; /* int() truncates toward zero, as the cast does */
        *have = true;
    } else if (cJSON_IsString(j) && q->r->group_size_string) {
        char *end;
        errno = 0;
        long long v = strtoll(j->valuestring, &end, 10);
        if (errno || end == j->valuestring || *end)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is \"%s\", expected an integer", key, j->valuestring);
        *out = v, *have = true;
    } else {
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s, expected an integer", key, moq_json_type(j));
    }
    if (*out <= 0) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %lld, expected a positive integer", key, (long long)*out);
    return MOQ_OK;
}

/* Every group_size the file states (SGLang common_group_size's places). */
static moq_status group_sizes_agree(moq_qconfig *q, const cJSON *root, const char *file, int64_t *first,
                                    bool *have, moq_error *err) {
    int64_t seen[16];
    int n = 0;
    const cJSON *places[64];
    int np = 0;
    places[np++] = get(root, "group_size");
    places[np++] = get(get(root, "quantization"), "group_size");
    const cJSON *groups = get(root, "config_groups");
    for (const cJSON *g = cJSON_IsObject(groups) ? groups->child : NULL; g && np < 60; g = g->next) {
        places[np++] = get(g, "group_size");
        for (const cJSON *sub = cJSON_IsObject(g) ? g->child : NULL; sub && np < 62; sub = sub->next)
            if (cJSON_IsObject(sub)) places[np++] = get(sub, "group_size");
    }
    for (int i = 0; i < np; i++) {
        const cJSON *j = places[i];
        if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble)) continue; /* isinstance(v, int) */
        if (q->r->group_size_int_literal && moq_json_is_float_literal(j)) {     /* 16.0 is a Python float */
            moq_qconfig_note(q, "%s: a group_size written as %g (a float) is not counted; SGLang counts only integers", file, j->valuedouble);
            continue;
        }
        int64_t v = (int64_t)j->valuedouble;
        bool dup = false;
        for (int k = 0; k < n; k++) dup |= seen[k] == v;
        if (!dup && n < 16) seen[n++] = v;
    }
    if (n > 1) {
        char list[128];
        size_t o = 0;
        for (int k = 0; k < n && o < sizeof list; k++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%lld", k ? ", " : "", (long long)seen[k]);
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "group_size values disagree (%s); one group size is expected", list);
    }
    *have = n == 1;
    if (n == 1) *first = seen[0];
    return MOQ_OK;
}

/* SGLang config class chosen for a top-level algo (names the quant_method and the KV rules). */
typedef enum { CLS_FP8, CLS_FP4, CLS_MXFP8, CLS_MIXED, CLS_HYBRID } qc_class;

static const char *kv_from_string(const char *s) {
    static const struct { const char *in, *kv; } map[] = {
        {"FP8", "FP8"}, {"FLOAT8", "FP8"}, {"FP4", "NVFP4"}, {"FLOAT4", "NVFP4"}, {"NVFP4", "NVFP4"}};
    char b[32] = {0};
    size_t i = 0;
    while (isspace((unsigned char)*s)) s++;
    for (; i < sizeof b - 1 && s[i]; i++) b[i] = (char)toupper((unsigned char)s[i]);
    while (i && isspace((unsigned char)b[i - 1])) i--;
    b[i] = 0;
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (strcmp(b, map[k].in) == 0) return map[k].kv;
    return NULL;
}

/* Python's bool(value) for a JSON value. */
static bool py_truthy(const cJSON *j) {
    if (cJSON_IsBool(j)) return cJSON_IsTrue(j);
    if (cJSON_IsNumber(j)) return j->valuedouble != 0;
    if (cJSON_IsString(j)) return j->valuestring[0] != 0;
    if (cJSON_IsArray(j) || cJSON_IsObject(j)) return j->child != NULL;
    return false; /* null */
}

/* KV-cache algo of the flat or nested layout (docs/COMPAT.md "KV cache"). */
static moq_status parse_kv(moq_qconfig *q, const cJSON *root, const cJSON *sect, bool nested, qc_class cls,
                           const char *file, moq_error *err) {
    const char *kv = NULL;
    char buf[64];
    const cJSON *algo = get(nested ? sect : root, "kv_cache_quant_algo");
    if (!absent(algo) && !cJSON_IsString(algo) && q->r->kv_must_be_string && (nested || q->r->kv != MOQ_KV_VLLM))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%skv_cache_quant_algo is %s, expected a string", nested ? "quantization." : "",
                        moq_json_type(algo));
    const char *algo_s = cJSON_IsString(algo) ? algo->valuestring : NULL;
    char *algo_json = NULL; /* SGLang: a non-string value kept as it is (its JSON text), when truthy */
    if (!absent(algo) && !cJSON_IsString(algo) && q->r->kv_python_truthy) {
        if (py_truthy(algo) && !(algo_json = cJSON_PrintUnformatted(algo))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
        algo_s = algo_json; /* falsy: as if absent */
    }
    const bool sg_auto = q->r->kv == MOQ_KV_SGLANG && (cls == CLS_FP4 || cls == CLS_MIXED);
    if (nested) {
        kv = algo_s && *algo_s ? algo_s : NULL;
        if (!kv && q->r->kv == MOQ_KV_SGLANG && cls == CLS_FP4) kv = "auto";
    } else {
        const cJSON *sch = get(root, "kv_cache_scheme");
        if (cJSON_IsObject(sch)) {
            const cJSON *type = get(sch, "type"), *bits = get(sch, "num_bits");
            const bool is_float = cJSON_IsString(type) && strcmp(type->valuestring, "float") == 0;
            const double nb = cJSON_IsNumber(bits) ? bits->valuedouble : -1;
            if (is_float && nb == 8) kv = "FP8";
            else if (is_float && nb == 4 && (q->r->kv == MOQ_KV_MOQ || (q->r->kv == MOQ_KV_SGLANG && cls == CLS_MIXED))) kv = "NVFP4";
            else if (sg_auto) kv = "auto";
            else if (q->r->kv == MOQ_KV_MOQ) moq_qconfig_note(q, "%s: kv_cache_scheme is not {type: float, num_bits: 8 or 4}; KV cache stays unquantized", file);
        } else if (cJSON_IsString(sch) && (q->r->kv == MOQ_KV_MOQ || (q->r->kv == MOQ_KV_SGLANG && cls == CLS_FP4))) {
            kv = kv_from_string(sch->valuestring);
            if (!kv && sg_auto) kv = "auto";
            if (!kv && q->r->kv == MOQ_KV_MOQ) moq_qconfig_note(q, "%s: kv_cache_scheme \"%s\" is not FP8/FLOAT8/FP4/FLOAT4/NVFP4; KV cache stays unquantized", file, sch->valuestring);
        } else if (q->r->kv != MOQ_KV_VLLM) {
            kv = algo_s && *algo_s ? algo_s : NULL;
            if (!kv && q->r->kv == MOQ_KV_SGLANG && cls == CLS_FP4) kv = "auto";
        }
    }
    if (!kv) return free(algo_json), MOQ_OK;
    if (kv == algo_json) {
        q->kv = algo_json; /* never upper-cased: only strings are (and SGLang upper-cases none) */
        moq_qconfig_note(q, "%s: %skv_cache_quant_algo is %s (%s), not a string; SGLang keeps it as it is and, being truthy, gives attention the KV-cache method",
                         file, nested ? "quantization." : "", algo_json, moq_json_type(algo));
        return MOQ_OK;
    }
    free(algo_json);
    snprintf(buf, sizeof buf, "%s", kv);
    if (q->r->algo_upper) upper(buf);
    if (!(q->kv = dupstr(buf))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
    return MOQ_OK;
}

static moq_status parse_exclude(moq_qconfig *q, const cJSON *list, const char *file, const char *key, bool null_ok,
                                moq_error *err) {
    if (!list) return MOQ_OK;
    if (cJSON_IsNull(list)) {
        if (null_ok) return MOQ_OK;
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is null, expected a list of module patterns", key);
    }
    if (!cJSON_IsArray(list))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s, expected a list of module patterns", key, moq_json_type(list));
    int n = cJSON_GetArraySize(list), i = 0;
    q->exclude = calloc((size_t)n + 1, sizeof *q->exclude);
    if (!q->exclude) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s[%d] is %s, expected a string", key, i, moq_json_type(e));
        if (!(q->exclude[q->n_exclude] = dupstr(e->valuestring))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
        q->n_exclude++;
    }
    return MOQ_OK;
}

/* SGLang (ex_regex_parts): every exclude pattern as the regular expression SGLang builds from it,
 * compiled once here; a pattern Python would reject is a config error, one moq cannot translate is
 * unsupported (config/glob.h). */
static moq_status compile_exclude(moq_qconfig *q, const char *file, const char *key, moq_error *err) {
    if (!q->n_exclude) return MOQ_OK;
    if (!(q->exclude_re = calloc((size_t)q->n_exclude, sizeof *q->exclude_re))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
    for (int i = 0; i < q->n_exclude; i++) {
        char why[160];
        const int rc = moq_glob_regex_compile(&q->exclude_re[i], q->exclude[i], why, sizeof why);
        if (rc == MOQ_GLOB_RE_INVALID)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s[%d] \"%.60s\" is not a valid regular expression once SGLang turns . into \\. and * into .* (Python: %s)",
                            key, i, q->exclude[i], why);
        if (rc != MOQ_GLOB_RE_OK)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file, "%s[%d] \"%.60s\": SGLang reads it as a regular expression, and moq does not translate it: %s",
                            key, i, q->exclude[i], why);
    }
    return MOQ_OK;
}

static moq_status parse_layers(moq_qconfig *q, const cJSON *ql, const char *file, const char *key, moq_error *err) {
    if (!cJSON_IsObject(ql) || !ql->child)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s; MIXED_PRECISION requires a non-empty quantized_layers map",
                        key, ql ? (cJSON_IsObject(ql) ? "empty" : moq_json_type(ql)) : "absent");
    int n = cJSON_GetArraySize(ql);
    if (!(q->layers = calloc((size_t)n, sizeof *q->layers)) || !moq_strmap_init(&q->layer_map, (size_t)n))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
    char where[96], list[160];
    for (const cJSON *e = ql->child; e; e = e->next) {
        snprintf(where, sizeof where, "%s[\"%.60s\"]", key, e->string ? e->string : "");
        const cJSON *a = get(e, "quant_algo");
        if (!cJSON_IsObject(e)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s, expected an object", where, moq_json_type(e));
        if (!cJSON_IsString(a))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s.quant_algo is %s, expected a string", where, moq_json_type(a));
        moq_qlayer *L = &q->layers[q->n_layers];
        if (!(L->name = dupstr(e->string ? e->string : "")) || !(L->algo = dupstr(a->valuestring)))
            return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
        q->n_layers++;
        upper(L->algo); /* both engines: quantized_layers[...]["quant_algo"].upper() */
        bool have;
        MOQ_TRY(json_group_size(q, get(e, "group_size"), file, where, &L->group_size, &have, err));
        L->scheme = moq_scheme_find(L->algo, true);
        if (!L->scheme && q->r->mp_unknown_algo_error)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s.quant_algo \"%s\" is not one of %s", where, L->algo,
                            moq_scheme_list(list, sizeof list));
        size_t old;
        if (!moq_strmap_put(&q->layer_map, L->name, (size_t)(q->n_layers - 1), &old))
            moq_qconfig_note(q, "%s: %s appears twice; the first entry is used", file, where);
    }
    return MOQ_OK;
}

static const char *quant_method_name(const moq_qconfig *q, qc_class cls) {
    const bool sg = q->r->sglang_algo_set;
    switch (cls) {
    case CLS_FP8: return sg ? "modelopt_fp8" : "modelopt";
    case CLS_FP4: return "modelopt_fp4";
    case CLS_MXFP8: return "modelopt_mxfp8";
    case CLS_MIXED: return "modelopt_mixed";
    case CLS_HYBRID: return "fp8";
    }
    return "modelopt";
}

static qc_class class_of(const moq_scheme *s) {
    if (strcmp(s->owner, "modelopt_fp4") == 0) return CLS_FP4;
    if (strcmp(s->owner, "modelopt_mxfp8") == 0) return CLS_MXFP8;
    return CLS_FP8;
}

/* Parses one config object (the whole hf_quant_config.json or config.json's quantization_config). */
static moq_status parse_root(moq_qconfig *q, const cJSON *root, const char *file, moq_error *err) {
    const moq_compat_rules *r = q->r;
    char list[200];
    if (!cJSON_IsObject(root)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "top level is %s, expected an object", moq_json_type(root));
    const cJSON *qsec = get(root, "quantization");
    const cJSON *flat_algo = get(root, "quant_algo");
    const bool nested = r->nested_if_quantization_key ? qsec != NULL : absent(flat_algo);
    const cJSON *sect = root;
    if (nested) {
        if (!cJSON_IsObject(qsec))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "quantization is %s, expected an object with quant_algo", moq_json_type(qsec));
        sect = qsec;
    }
    const char *kp = nested ? "quantization." : "";
    const cJSON *qm = get(root, "quant_method");
    const char *qm_s = cJSON_IsString(qm) ? qm->valuestring : "";
    const cJSON *algo_j = get(sect, "quant_algo");
    const cJSON *moe_j = get(root, "moe_quant_algo");
    const cJSON *excl = get(sect, nested ? "exclude_modules" : "ignore");
    const char *excl_key = nested ? "quantization.exclude_modules" : "ignore";
    char algo[64];
    qc_class cls;
    bool minimax = false;

    /* MiniMax-style MXFP8: quant_method "mxfp8", ignored_layers, no quant_algo (vLLM normalizes it). */
    if (!nested && (absent(algo_j) || (cJSON_IsString(algo_j) && !*algo_j->valuestring)) && strcasecmp(qm_s, "mxfp8") == 0) {
        if (!r->mxfp8_minimax)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file, "quant_method \"mxfp8\" (MiniMax form) is not read by this profile's engine");
        minimax = true;
        snprintf(algo, sizeof algo, "MXFP8");
        excl = get(root, "ignored_layers");
        excl_key = "ignored_layers";
        if (cJSON_IsNull(excl)) excl = NULL; /* `or []` */
    } else {
        if (absent(algo_j) || (cJSON_IsString(algo_j) && !*algo_j->valuestring))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%squant_algo is missing; expected one of %s, MIXED_PRECISION", kp,
                            moq_scheme_list(list, sizeof list));
        if (!cJSON_IsString(algo_j)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%squant_algo is %s, expected a string", kp, moq_json_type(algo_j));
        snprintf(algo, sizeof algo, "%s", algo_j->valuestring);
        if (r->algo_upper) upper(algo);
    }

    /* SGLang hybrid: FP8 linears (SGLang's own Fp8Config) + NVFP4 experts. */
    const bool hybrid = !nested && strcmp(qm_s, "fp8") == 0 && cJSON_IsString(moe_j);
    if (hybrid) {
        if (!r->hybrid_fp8_nvfp4)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file,
                            "quant_method \"fp8\" with moe_quant_algo \"%s\" is SGLang's hybrid FP8 + NVFP4 form; vLLM's ModelOpt module does not read it (use --compat moq or sglang)",
                            moe_j->valuestring);
        char moe[64];
        snprintf(moe, sizeof moe, "%s", moe_j->valuestring);
        upper(moe);
        q->moe_scheme = moq_scheme_find(moe, false);
        if (!q->moe_scheme || q->moe_scheme->moe != MOQ_METHOD_NVFP4_MOE)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file, "moe_quant_algo \"%s\", expected NVFP4 (the only hybrid expert format)", moe_j->valuestring);
        q->scheme = moq_scheme_find("FP8_PB_WO", false);
        q->form = MOQ_QC_HYBRID;
        cls = CLS_HYBRID;
    } else if (strcmp(algo, MIXED) == 0) {
        q->form = MOQ_QC_MIXED;
        cls = CLS_MIXED;
    } else if (r->sglang_algo_set) {
        /* SGLang: ModelOptFp8Config takes any algo containing "FP8" (as per-tensor FP8);
         * ModelOptFp4Config takes exactly "NVFP4". Everything else is rejected. */
        if (strcmp(algo, "NVFP4") == 0) q->scheme = moq_scheme_find(algo, false), cls = CLS_FP4;
        else if (strstr(algo, "FP4"))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file,
                            "%squant_algo \"%s\" contains FP4: SGLang routes it to its FP4 config (tested before FP8), which "
                            "takes only NVFP4 and raises \"ModelOpt currently only supports: FP8, NVFP4 quantizations in sglang\"",
                            kp, algo);
        else if (strstr(algo, "FP8")) {
            q->scheme = moq_scheme_find("FP8", false), cls = CLS_FP8;
            if (strcmp(algo, "FP8") != 0)
                moq_qconfig_note(q, "%s: SGLang reads quant_algo \"%s\" as per-tensor FP8 (its FP8 config accepts any name containing FP8)", file, algo);
        } else
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file, "%squant_algo \"%s\" is not one of FP8, NVFP4, MIXED_PRECISION (SGLang)", kp, algo);
        q->form = MOQ_QC_SINGLE;
    } else {
        const moq_scheme *s = moq_scheme_find(algo, false);
        if (!s || (!r->algo_alias_top && strcmp(s->algo, algo) != 0))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%squant_algo \"%s\" is not one of %s, MIXED_PRECISION", kp, algo,
                            moq_scheme_list(list, sizeof list));
        if (s->moq_only && !r->moq_only_algos)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, file,
                            "%squant_algo \"%s\": vLLM's ModelOpt module raises \"ModelOpt currently only supports: %s, MIXED_PRECISION "
                            "quantizations in vLLM\" (use --compat moq)", kp, algo, moq_scheme_list_engines(list, sizeof list));
        q->scheme = s;
        q->form = MOQ_QC_SINGLE;
        cls = class_of(s);
    }
    if (!(q->quant_algo = dupstr(algo))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
    if (cJSON_IsString(moe_j) && !(q->moe_quant_algo = dupstr(moe_j->valuestring))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");

    /* KV cache. MiniMax form: vLLM builds {"quantization": {"kv_cache_quant_algo": ...}}. */
    MOQ_TRY(parse_kv(q, root, minimax ? root : sect, nested || minimax, cls, file, err));

    /* Exclusions. */
    const bool null_ok = !r->exclude_null_is_error && !(r->group_size_required_fp4 && cls == CLS_FP4);
    if (cJSON_IsNull(excl) && r->group_size_required_fp4 && cls == CLS_FP4)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is null; NVFP4 requires group_size and exclude_modules", excl_key);
    MOQ_TRY(parse_exclude(q, excl, file, excl_key, null_ok, err));
    if (r->ex_regex_parts) MOQ_TRY(compile_exclude(q, file, excl_key, err));

    /* Group size. */
    int64_t gs = 0;
    bool have_gs = false;
    if (r->group_size_required_fp4 && cls == CLS_FP4) {
        if (nested) {
            MOQ_TRY(group_sizes_agree(q, root, file, &gs, &have_gs, err)); /* common_group_size */
        } else {
            MOQ_TRY(json_group_size(q, get(root, "group_size"), file, "group_size", &gs, &have_gs, err));
            const cJSON *g0 = get(root, "config_groups");
            if (!have_gs && cJSON_IsObject(g0) && g0->child)
                MOQ_TRY(json_group_size(q, get(get(g0->child, "weights"), "group_size"), file,
                                        "config_groups[0].weights.group_size", &gs, &have_gs, err));
        }
        if (!have_gs)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%sgroup_size is missing; NVFP4 requires group_size and exclude_modules", kp);
    } else if (!r->sglang_algo_set) {
        char key[48];
        snprintf(key, sizeof key, "%sgroup_size", kp);
        MOQ_TRY(json_group_size(q, get(sect, "group_size"), file, key, &gs, &have_gs, err));
        const cJSON *g0 = get(root, "config_groups");
        if (!have_gs && !nested && r->group_size_from_groups && cJSON_IsObject(g0) && g0->child)
            MOQ_TRY(json_group_size(q, get(get(g0->child, "weights"), "group_size"), file,
                                    "config_groups[0].weights.group_size", &gs, &have_gs, err));
        if (r->group_size_consistent) {
            int64_t any = 0;
            bool have_any = false;
            MOQ_TRY(group_sizes_agree(q, root, file, &any, &have_any, err));
            if (have_any && have_gs && any != gs)
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "group_size values disagree (%lld, %lld); one group size is expected",
                                (long long)gs, (long long)any);
        }
    }

    /* vLLM: required keys of the nested NVFP4 / MXFP8 layout (present, even if null). */
    if (r->nested_required_fields && nested && q->form == MOQ_QC_SINGLE && cls != CLS_FP8) {
        static const char *const nvfp4_req[] = {"group_size", "kv_cache_quant_algo", "exclude_modules", NULL};
        static const char *const mxfp8_req[] = {"kv_cache_quant_algo", "exclude_modules", NULL};
        const char *const *req = cls == CLS_FP4 ? nvfp4_req : mxfp8_req;
        char miss[128] = "";
        size_t o = 0;
        for (int i = 0; req[i]; i++)
            if (!get(sect, req[i])) o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%s", o ? ", " : "", req[i]);
        if (o)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "quantization is missing %s; %s requires group_size%s, kv_cache_quant_algo and exclude_modules",
                            miss, algo, cls == CLS_FP4 ? "" : " (NVFP4 only)");
    }

    /* vLLM: NVFP4 whose config_groups all quantize weights only is W4A16_NVFP4. */
    if (r->nvfp4_wonly_groups && q->form == MOQ_QC_SINGLE && strcmp(q->scheme->algo, "NVFP4") == 0) {
        const cJSON *groups = get(root, "config_groups");
        bool all_wonly = cJSON_IsObject(groups) && groups->child;
        for (const cJSON *g = all_wonly ? groups->child : NULL; g; g = g->next)
            all_wonly &= cJSON_IsObject(g) && absent(get(g, "input_activations"));
        if (all_wonly) {
            q->scheme = moq_scheme_find("W4A16_NVFP4", false);
            moq_qconfig_note(q, "%s: quant_algo NVFP4 but every config_groups entry has input_activations null: weight-only, read as W4A16_NVFP4", file);
            free(q->quant_algo);
            if (!(q->quant_algo = dupstr(q->scheme->algo))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory");
        }
    }

    /* Mixed precision (and the hybrid form, which carries quantized_layers too). */
    const cJSON *ql = get(nested ? sect : root, "quantized_layers");
    if (q->form == MOQ_QC_MIXED) {
        MOQ_TRY(parse_layers(q, ql, file, nested ? "quantization.quantized_layers" : "quantized_layers", err));
        q->block_size = 128;
        if (r->mp_block_size_check) {
            bool have = false;
            for (int i = 0; i < q->n_layers; i++) {
                const moq_qlayer *L = &q->layers[i];
                if (!L->scheme || L->scheme->moe != MOQ_METHOD_FP8_BLOCK_MOE) continue;
                const int64_t b = L->group_size ? L->group_size : 128;
                if (have && b != q->block_size)
                    return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "block-FP8 layers use group sizes %lld and %lld (%s); MIXED_PRECISION needs one",
                                    (long long)q->block_size, (long long)b, L->name);
                q->block_size = b, have = true;
            }
        }
        if (!have_gs || r->mp_group_from_layers) {
            have_gs = false;
            for (int i = 0; i < q->n_layers && !have_gs; i++)
                if (q->layers[i].scheme && q->layers[i].scheme->group == 16 && q->layers[i].scheme->linear != MOQ_METHOD_MXFP8_LINEAR) {
                    gs = q->layers[i].group_size ? q->layers[i].group_size : 16;
                    have_gs = true;
                }
        }
        if (!have_gs) gs = 16, have_gs = true;
    } else if (cJSON_IsObject(ql) && ql->child) {
        MOQ_TRY(parse_layers(q, ql, file, nested ? "quantization.quantized_layers" : "quantized_layers", err));
    }
    if (q->form == MOQ_QC_SINGLE && q->scheme->group == 16 && !have_gs) gs = 16, have_gs = true; /* NVFP4 default */
    if (q->form == MOQ_QC_HYBRID && !have_gs) gs = 16, have_gs = true;
    q->group_size = have_gs ? gs : 0;
    if (q->form == MOQ_QC_SINGLE && q->scheme->group == 16 && q->group_size != 16)
        moq_qconfig_note(q, "%s: NVFP4 group_size %lld; ModelOpt and the kernels use 16", file, (long long)q->group_size);
    q->quant_method = quant_method_name(q, cls);
    return MOQ_OK;
}

/* ---- public API ---------------------------------------------------------------------------- */

static moq_status qc_new(moq_qconfig **out, moq_compat profile, moq_error *err) {
    *out = NULL;
    if ((unsigned)profile >= MOQ_COMPAT_COUNT) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_qconfig_open", "profile %d out of range, expected 0..%d", (int)profile, MOQ_COMPAT_COUNT - 1);
    moq_qconfig *q = calloc(1, sizeof *q);
    if (!q) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_qconfig_open", "out of memory for the config");
    q->profile = profile;
    q->r = &moq_compat_table[profile];
    *out = q;
    return MOQ_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A JSON document: config.json (has quantization_config), hf_quant_config.json, or a bare object. */
static moq_status parse_doc(moq_qconfig *q, const cJSON *doc, const char *file, moq_error *err) {
    const cJSON *qc = get(doc, "quantization_config");
    if (qc) {
        if (!cJSON_IsObject(qc)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "quantization_config is %s, expected an object", moq_json_type(qc));
        snprintf(q->source, sizeof q->source, "%s:quantization_config", file);
        return parse_root(q, qc, file, err);
    }
    snprintf(q->source, sizeof q->source, "%s", file);
    return parse_root(q, doc, file, err);
}

moq_status moq_qconfig_parse(moq_qconfig **out, const char *text, const char *file, moq_compat profile, moq_error *err) {
    MOQ_TRY(qc_new(out, profile, err));
    cJSON *doc = NULL;
    moq_status st = moq_json_parse(&doc, text, strlen(text), file, err);
    if (st == MOQ_OK) moq_json_mark_floats(doc, text, strlen(text)), st = parse_doc(*out, doc, file, err);
    cJSON_Delete(doc);
    if (st != MOQ_OK) moq_qconfig_free(*out), *out = NULL;
    return st;
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A config.json quantization_config that a ModelOpt reader takes (else hf_quant_config.json wins). */
static bool modelopt_qc(const cJSON *qc) {
    const cJSON *qm = get(qc, "quant_method");
    if (!cJSON_IsString(qm)) return false;
    const char *m = qm->valuestring;
    return strncasecmp(m, "modelopt", 8) == 0 || strcasecmp(m, "mxfp8") == 0 ||
           (strcmp(m, "fp8") == 0 && cJSON_IsString(get(qc, "moe_quant_algo")));
}

static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* Notes every field on which the two files disagree. */
static void compare(moq_qconfig *q, const moq_qconfig *o) {
    if (!q || !o) return;
    const char *u = q->source, *v = o->source;
    if (!same_str(q->quant_algo, o->quant_algo)) moq_qconfig_note(q, "%s says quant_algo %s, %s says %s; %s is used", u, q->quant_algo, v, o->quant_algo, u);
    if (!same_str(q->kv, o->kv))
        moq_qconfig_note(q, "%s says kv_cache_quant_algo %s, %s says %s; %s is used", u, q->kv ? q->kv : "none", v, o->kv ? o->kv : "none", u);
    if (q->group_size != o->group_size)
        moq_qconfig_note(q, "%s says group_size %lld, %s says %lld; %s is used", u, (long long)q->group_size, v, (long long)o->group_size, u);
    int missing = 0, extra = 0;
    const char *first_m = NULL, *first_x = NULL;
    for (int i = 0; i < q->n_exclude; i++) {
        bool f = false;
        for (int k = 0; k < o->n_exclude && !f; k++) f = strcmp(q->exclude[i], o->exclude[k]) == 0;
        if (!f && !extra++) first_x = q->exclude[i];
    }
    for (int k = 0; k < o->n_exclude; k++) {
        bool f = false;
        for (int i = 0; i < q->n_exclude && !f; i++) f = strcmp(q->exclude[i], o->exclude[k]) == 0;
        if (!f && !missing++) first_m = o->exclude[k];
    }
    if (extra) moq_qconfig_note(q, "%d exclude pattern(s) only in %s (first: %s)", extra, u, first_x);
    if (missing) moq_qconfig_note(q, "%d exclude pattern(s) only in %s (first: %s); they are not applied", missing, v, first_m);
    if (q->n_layers != o->n_layers) moq_qconfig_note(q, "%s has %d quantized_layers, %s has %d; %s is used", u, q->n_layers, v, o->n_layers, u);
}

/* Reads a JSON file and flags its float literals (moq_json_mark_floats: SGLang's isinstance(v, int)). */
static moq_status read_marked(cJSON **doc, const char *path, const char *file, moq_error *err) {
    char *text = NULL;
    MOQ_TRY(moq_json_read(doc, &text, path, file, err));
    moq_json_mark_floats(*doc, text, strlen(text));
    free(text);
    return MOQ_OK;
}

moq_status moq_qconfig_open(moq_qconfig **out, const char *path, moq_compat profile, moq_error *err) {
    *out = NULL;
    if (!path) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_qconfig_open", "path is NULL");
    if (is_file(path)) {
        cJSON *doc = NULL;
        MOQ_TRY(read_marked(&doc, path, base_name(path), err));
        moq_status st = qc_new(out, profile, err);
        if (st == MOQ_OK) st = parse_doc(*out, doc, base_name(path), err);
        cJSON_Delete(doc);
        if (st != MOQ_OK) moq_qconfig_free(*out), *out = NULL;
        return st;
    }
    size_t n = strlen(path) + 32;
    char *cfg_p = malloc(n), *hf_p = malloc(n);
    if (!cfg_p || !hf_p) {
        free(cfg_p), free(hf_p);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, path, "out of memory");
    }
    snprintf(cfg_p, n, "%s/config.json", path);
    snprintf(hf_p, n, "%s/hf_quant_config.json", path);
    cJSON *cfg = NULL, *hf = NULL;
    moq_status st = MOQ_OK;
    if (is_file(cfg_p)) st = read_marked(&cfg, cfg_p, "config.json", err);
    if (st == MOQ_OK && is_file(hf_p)) st = read_marked(&hf, hf_p, "hf_quant_config.json", err);
    free(cfg_p), free(hf_p);
    const cJSON *qc = get(cfg, "quantization_config");
    if (st == MOQ_OK && !hf && !qc)
        st = MOQ_FAIL(err, MOQ_ERR_CONFIG, path, "no hf_quant_config.json and no quantization_config in config.json: not a quantized checkpoint");
    if (st == MOQ_OK) {
        const bool use_cfg = qc && (modelopt_qc(qc) || !hf);
        st = qc_new(out, profile, err);
        if (st == MOQ_OK) st = use_cfg ? parse_doc(*out, cfg, "config.json", err) : parse_doc(*out, hf, "hf_quant_config.json", err);
        if (st == MOQ_OK && qc && hf) {
            moq_qconfig *other = NULL;
            moq_error e2 = {0};
            moq_qconfig_note(*out, "both config.json quantization_config and hf_quant_config.json present; %s is used", (*out)->source);
            if (qc_new(&other, profile, &e2) == MOQ_OK) {
                if ((use_cfg ? parse_doc(other, hf, "hf_quant_config.json", &e2) : parse_doc(other, cfg, "config.json", &e2)) == MOQ_OK)
                    compare(*out, other);
                else {
                    char b[800];
                    moq_error_format(&e2, b, sizeof b);
                    moq_qconfig_note(*out, "the unused file does not parse: %s", b);
                }
            }
            moq_qconfig_free(other);
        } else if (st == MOQ_OK && qc && !use_cfg) {
            moq_qconfig_note(*out, "config.json quantization_config is not a ModelOpt one; hf_quant_config.json is used");
        }
        if (st != MOQ_OK) moq_qconfig_free(*out), *out = NULL;
    }
    cJSON_Delete(cfg);
    cJSON_Delete(hf);
    return st;
}

void moq_qconfig_free(moq_qconfig *q) {
    if (!q) return;
    free(q->quant_algo);
    free(q->moe_quant_algo);
    free(q->kv);
    for (int i = 0; i < q->n_exclude; i++) {
        free(q->exclude[i]);
        if (q->exclude_re) moq_glob_regex_free(&q->exclude_re[i]);
    }
    free(q->exclude_re);
    free(q->exclude);
    for (int i = 0; i < q->n_layers; i++) free(q->layers[i].name), free(q->layers[i].algo);
    free(q->layers);
    moq_strmap_free(&q->layer_map);
    moq_notes_free(&q->notes);
    free(q);
}

int moq_qconfig_layer_find(const moq_qconfig *q, const char *name) {
    size_t v;
    if (!q->n_layers || !moq_strmap_get(&q->layer_map, name, &v)) return -1;
    return (int)v;
}

moq_compat  moq_qconfig_profile(const moq_qconfig *q) { return q->profile; }
const char *moq_qconfig_source(const moq_qconfig *q) { return q->source; }
const char *moq_qconfig_quant_method(const moq_qconfig *q) { return q->quant_method; }
const char *moq_qconfig_quant_algo(const moq_qconfig *q) { return q->quant_algo; }
const char *moq_qconfig_kv_cache_quant_algo(const moq_qconfig *q) { return q->kv; }
const char *moq_qconfig_moe_quant_algo(const moq_qconfig *q) { return q->moe_quant_algo; }
int64_t     moq_qconfig_group_size(const moq_qconfig *q) { return q->group_size; }
int         moq_qconfig_exclude_count(const moq_qconfig *q) { return q->n_exclude; }
const char *moq_qconfig_exclude_at(const moq_qconfig *q, int i) { return i >= 0 && i < q->n_exclude ? q->exclude[i] : NULL; }
int         moq_qconfig_layer_count(const moq_qconfig *q) { return q->n_layers; }
bool moq_qconfig_layer_at(const moq_qconfig *q, int i, const char **name, const char **algo, int64_t *group_size) {
    if (i < 0 || i >= q->n_layers) return false;
    if (name) *name = q->layers[i].name;
    if (algo) *algo = q->layers[i].algo;
    if (group_size) *group_size = q->layers[i].group_size;
    return true;
}
int         moq_qconfig_note_count(const moq_qconfig *q) { return q->notes.n; }
const char *moq_qconfig_note_at(const moq_qconfig *q, int i) { return moq_notes_at(&q->notes, i); }
