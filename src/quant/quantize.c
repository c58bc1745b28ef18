/* quantize.c — see quantize.h: plan, amax, write. The only format knowledge here is the leaf table
 * (which checkpoint names are linears, which fuse, which calibration tap feeds them); everything a
 * format writes comes from its row of quant/export_linear.c. */
#include "quant/quantize.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/glob.h"
#include "core/error.h"
#include "core/strmap.h"
#include "format/format.h"
#include "io/checkpoint.h"
#include "io/json.h"
#include "io/mmap.h"
#include "io/writer.h"
#include "quant/export_linear.h"
#include "quant/export_ref.h"

/* ---- the leaf table ------------------------------------------------------------------------- */

enum { GRP_NONE = 0, GRP_QKV, GRP_GATE_UP, GRP_W13 };

typedef struct leaf_row {
    const char   *leaf;      /* last component of the module name                             */
    const char   *kv_suffix; /* "k_scale" / "v_scale" when it carries the FP8 KV scale (§8)   */
    int           group;     /* fused group (shards that read the same input)                 */
    moq_model_tap tap;       /* calibration tap of its input (dense layers)                   */
    moq_model_tap kv;        /* MOQ_TAP_K / MOQ_TAP_V: the tap of that KV scale               */
    bool          lm_head;   /* excluded by default (ModelOpt's default config disables it)   */
} leaf_row;

static const leaf_row k_leaves[] = {
    /* leaf        kv_suffix  group        tap                 kv            lm_head */
    {"q_proj",    NULL,      GRP_QKV,     MOQ_TAP_QKV_IN,     MOQ_TAP_NONE, false},
    {"k_proj",    "k_scale", GRP_QKV,     MOQ_TAP_QKV_IN,     MOQ_TAP_K,    false},
    {"v_proj",    "v_scale", GRP_QKV,     MOQ_TAP_QKV_IN,     MOQ_TAP_V,    false},
    {"o_proj",    NULL,      GRP_NONE,    MOQ_TAP_O_IN,       MOQ_TAP_NONE, false},
    /* MLA (kv_b_proj stays unquantized: the attention reads it dequantized, absorbed into q and o) */
    {"q_a_proj",  NULL,      GRP_NONE,    MOQ_TAP_QKV_IN,     MOQ_TAP_NONE, false},
    {"q_b_proj",  NULL,      GRP_NONE,    MOQ_TAP_Q_B_IN,     MOQ_TAP_NONE, false},
    {"kv_a_proj_with_mqa", NULL, GRP_NONE, MOQ_TAP_QKV_IN,    MOQ_TAP_NONE, false},
    /* Gated DeltaNet */
    {"in_proj_qkv", NULL,    GRP_NONE,    MOQ_TAP_QKV_IN,     MOQ_TAP_NONE, false},
    {"in_proj_z", NULL,      GRP_NONE,    MOQ_TAP_QKV_IN,     MOQ_TAP_NONE, false},
    {"out_proj",  NULL,      GRP_NONE,    MOQ_TAP_O_IN,       MOQ_TAP_NONE, false},
    {"gate_proj", NULL,      GRP_GATE_UP, MOQ_TAP_GATE_UP_IN, MOQ_TAP_NONE, false},
    {"up_proj",   NULL,      GRP_GATE_UP, MOQ_TAP_GATE_UP_IN, MOQ_TAP_NONE, false},
    {"down_proj", NULL,      GRP_NONE,    MOQ_TAP_DOWN_IN,    MOQ_TAP_NONE, false},
    {"w1",        NULL,      GRP_W13,     MOQ_TAP_NONE,       MOQ_TAP_NONE, false},
    {"w3",        NULL,      GRP_W13,     MOQ_TAP_NONE,       MOQ_TAP_NONE, false},
    {"w2",        NULL,      GRP_NONE,    MOQ_TAP_NONE,       MOQ_TAP_NONE, false},
    {"lm_head",   NULL,      GRP_NONE,    MOQ_TAP_NONE,       MOQ_TAP_NONE, true},
};

/* Modules ModelOpt lists as excluded without being asked (§12): the embedding and MoE routers.
 * A router is a 2-D "<block>.gate.weight" outside any experts list. */
static const char *const k_embed_leaves[] = {"embed_tokens"};
static const char *const k_router_leaves[] = {"gate", "router"};

/* Files of the source directory not copied: the ones moq writes itself, and weights in any format
 * (the quantized safetensors replace them). */
static const char *const k_not_copied[] = {"config.json", "hf_quant_config.json", "model.safetensors.index.json"};
static const char *const k_not_copied_ext[] = {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"};

static const char *leaf_of(const char *module) {
    const char *d = strrchr(module, '.');
    return d ? d + 1 : module;
}

static const leaf_row *leaf_find(const char *leaf) {
    for (size_t i = 0; i < sizeof k_leaves / sizeof k_leaves[0]; i++)
        if (strcmp(k_leaves[i].leaf, leaf) == 0) return &k_leaves[i];
    return NULL;
}

static bool in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) return true;
    return false;
}

/* ---- the plan ------------------------------------------------------------------------------- */

typedef struct unit {
    const moq_tensor           *src;       /* the source tensor (the weight for a linear)        */
    char                       *module;    /* linear: the module name; else NULL                 */
    const leaf_row             *leaf;
    const moq_export_linear_row *row;      /* NULL: copied unchanged                             */
    moq_export_args             args;
    int64_t                     layer;     /* "model.layers.<l>." or -1                          */
    bool                        expert;
    float                       own_amax;  /* weight amax (group-amax rows)                      */
    int                         group_of;  /* index of the group's first unit, or -1             */
    moq_export_tensor           t[MOQ_EXPORT_LINEAR_MAX_TENSORS];
    int                         nt;
    float                       kv_scale;  /* k_proj / v_proj with FP8 KV: the scale             */
    bool                        has_kv;
    float                       v_scale;   /* k_proj of a layer without v_proj (Gemma 4 k_eq_v):
                                              the layer's v_scale, written as ModelOpt does under
                                              the absent <...>.v_proj.v_scale                    */
    bool                        has_v;
} unit;

typedef struct out_tensor {
    char      *name;
    moq_dtype  dtype;
    int        ndim;
    int64_t    shape[MOQ_MAX_DIMS];
    uint64_t   nbytes;
    size_t     unit;
    int        part;      /* index into unit.t, -1: the copied source, -2: the kv scale, -3: unit.v_scale */
    int        shard;
} out_tensor;

typedef struct qctx {
    const moq_quantize_opts *o;
    moq_checkpoint          *ck;
    unit                    *u;
    size_t                   nu;
    out_tensor              *ot;
    size_t                   not, cap_ot;
    char                   **excl;        /* exclude list, in order */
    size_t                   nexcl;
    cJSON                   *recipe;
    const moq_export_linear_row *single;  /* non-mixed: the row of --algo */
    bool                     mixed;
    int                      n_shards;
    char                    *tmp_dir;
    char                    *dst_dir;
} qctx;

static moq_status add_excl(qctx *q, const char *name, moq_error *err) {
    for (size_t i = 0; i < q->nexcl; i++)
        if (strcmp(q->excl[i], name) == 0) return MOQ_OK;
    char **e = realloc(q->excl, (q->nexcl + 1) * sizeof *e);
    if (!e) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    q->excl = e;
    if (!(e[q->nexcl] = strdup(name))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    q->nexcl++;
    return MOQ_OK;
}

static moq_status add_out(qctx *q, const char *name, moq_dtype dt, int ndim, const int64_t *shape, uint64_t nbytes,
                          size_t u, int part, moq_error *err) {
    if (q->not == q->cap_ot) {
        size_t cap = q->cap_ot ? 2 * q->cap_ot : 256;
        out_tensor *t = realloc(q->ot, cap * sizeof *t);
        if (!t) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
        q->ot = t, q->cap_ot = cap;
    }
    out_tensor *t = &q->ot[q->not];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot allocate");
    t->dtype = dt, t->ndim = ndim, t->nbytes = nbytes, t->unit = u, t->part = part;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    q->not++;
    return MOQ_OK;
}

/* The export row for an algo as moq or ModelOpt spells it, any case ("FP8_PB_WO", "fp8_pb_wo", "nvfp4"). */
static const moq_export_linear_row *row_named(const char *name) {
    size_t nr = 0;
    const moq_export_linear_row *rows = moq_export_linear_rows(&nr);
    for (size_t i = 0; name && i < nr; i++)
        if (!rows[i].synthetic && (strcasecmp(rows[i].algo, name) == 0 || strcasecmp(rows[i].written, name) == 0)) return &rows[i];
    return NULL;
}

/* The algo of a module: MIXED_PRECISION recipe (first matching pattern, else its default) or the
 * single --algo row. */
static moq_status algo_for(const qctx *q, const char *module, const moq_export_linear_row **row, moq_error *err) {
    if (!q->mixed) return *row = q->single, MOQ_OK;
    const char *name = q->o->recipe_name ? q->o->recipe_name : "recipe";
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(q->recipe, "layers");
    const cJSON *pick = NULL;
    for (const cJSON *e = layers ? layers->child : NULL; e && !pick; e = e->next)
        if (moq_glob_fnmatch(e->string, module)) pick = e;
    if (!pick) pick = cJSON_GetObjectItemCaseSensitive(q->recipe, "default");
    *row = row_named(pick->valuestring);
    if (!*row) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, name, "algo \"%s\" was checked at parse time", pick->valuestring);
    return MOQ_OK;
}

static void algo_list(char *buf, size_t n) {
    size_t nr = 0;
    const moq_export_linear_row *rows = moq_export_linear_rows(&nr);
    buf[0] = 0;
    for (size_t i = 0; i < nr; i++)
        if (!rows[i].synthetic) snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", rows[i].algo);
}

/* {"default": ALGO, "layers": {PATTERN: ALGO, ...}} with ALGO a row of the export table. */
static moq_status parse_recipe(qctx *q, moq_error *err) {
    const char *name = q->o->recipe_name ? q->o->recipe_name : "recipe";
    char list[256];
    algo_list(list, sizeof list);
    if (!q->o->recipe) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "MIXED_PRECISION", "needs a recipe (--recipe FILE: {\"default\": ALGO, \"layers\": {PATTERN: ALGO}})");
    moq_status pst = moq_json_parse(&q->recipe, q->o->recipe, strlen(q->o->recipe), name, err);
    if (pst != MOQ_OK) return pst;
    if (!cJSON_IsObject(q->recipe)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "is %s, expected an object {\"default\": ALGO, \"layers\": {...}}",
                                                    cJSON_IsArray(q->recipe) ? "an array" : "not an object");
    for (const cJSON *e = q->recipe->child; e; e = e->next)
        if (strcmp(e->string, "default") != 0 && strcmp(e->string, "layers") != 0)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "unknown key \"%s\", expected default and layers", e->string);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(q->recipe, "default");
    if (!cJSON_IsString(d)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "default is %s, expected an algo string (one of %s)", d ? "not a string" : "missing", list);
    if (!row_named(d->valuestring))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "default \"%s\" is not one of %s", d->valuestring, list);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(q->recipe, "layers");
    if (l && !cJSON_IsObject(l)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "layers is not an object {PATTERN: ALGO}");
    for (const cJSON *e = l ? l->child : NULL; e; e = e->next) {
        if (!cJSON_IsString(e) || !row_named(e->valuestring))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "layers[\"%s\"] is %s%s%s, expected one of %s", e->string,
                            cJSON_IsString(e) ? "\"" : "not a string", cJSON_IsString(e) ? e->valuestring : "", cJSON_IsString(e) ? "\"" : "", list);
        if (!e->string[0]) return MOQ_FAIL(err, MOQ_ERR_CONFIG, name, "layers has an empty pattern");
    }
    return MOQ_OK;
}

/* "model.layers.<l>." -> l, else -1. */
static int64_t layer_of(const char *name) {
    const char *p = strstr(name, "layers.");
    if (!p) return -1;
    char *end = NULL;
    long long l = strtoll(p + 7, &end, 10);
    return end && end != p + 7 && *end == '.' ? (int64_t)l : -1;
}

static float decode_one(const moq_tensor *t, uint64_t i) {
    const uint8_t *p = t->data;
    if (t->dtype == MOQ_DT_F32) { float v; memcpy(&v, p + 4 * i, 4); return v; }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == MOQ_DT_BF16 ? moq_bf16_decode(h) : moq_f16_decode(h);
}

static void decode_all(const moq_tensor *t, float *out) {
#pragma omp parallel for schedule(static) if (t->nelem >= (1u << 16))
    for (uint64_t i = 0; i < t->nelem; i++) out[i] = decode_one(t, i);
}

static float tensor_amax(const moq_tensor *t) {
    float m = 0;
#pragma omp parallel for reduction(max : m) schedule(static) if (t->nelem >= (1u << 16))
    for (uint64_t i = 0; i < t->nelem; i++) {
        const float a = fabsf(decode_one(t, i));
        if (a > m) m = a;
    }
    return m;
}

static bool is_float_src(moq_dtype d) { return d == MOQ_DT_BF16 || d == MOQ_DT_F16 || d == MOQ_DT_F32; }

/* Builds the units: one per source tensor, linears with their row. */
static moq_status plan(qctx *q, moq_quantize_report *rep, moq_error *err) {
    const moq_checkpoint *c = q->ck;
    const size_t n = moq_checkpoint_tensor_count(c);
    if (!(q->u = calloc(n ? n : 1, sizeof *q->u))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "plan", "cannot allocate %zu units", n);
    q->nu = n;
    MOQ_TRY(add_excl(q, "lm_head", err));   /* ModelOpt lists lm_head first, also when tied */
    for (size_t i = 0; i < n; i++) {
        unit *u = &q->u[i];
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        u->src = t;
        u->group_of = -1;
        u->layer = layer_of(t->name);
        size_t len = strlen(t->name);
        const bool is_weight = len > 7 && strcmp(t->name + len - 7, ".weight") == 0;
        if ((t->dtype == MOQ_DT_F8_E4M3 || t->dtype == MOQ_DT_F4 || t->dtype == MOQ_DT_F8_E8M0 || t->dtype == MOQ_DT_F8_E5M2))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected BF16, F16 or F32 (moq quantize takes an unquantized checkpoint)",
                            moq_dtype_name(t->dtype));
        const char *stk = strstr(t->name, ".experts.");
        if (!is_weight && t->ndim == 3 && stk && !strchr(stk + 9, '.')) {
            /* stacked experts (Llama 4, GPT-OSS "<block>.experts.gate_up_proj" [E, ...]): not quantized
             * by moq quantize; listed as excluded so the config does not claim them */
            char blk[512];
            snprintf(blk, sizeof blk, "%.*s.experts", (int)(stk - t->name), t->name);
            MOQ_TRY(add_excl(q, blk, err));
            continue;
        }
        if (!is_weight) continue;
        char module[512];
        snprintf(module, sizeof module, "%.*s", (int)(len - 7), t->name);
        const char *leaf = leaf_of(module);
        if (in_list(leaf, k_embed_leaves, sizeof k_embed_leaves / sizeof k_embed_leaves[0])) {
            MOQ_TRY(add_excl(q, module, err));
            continue;
        }
        const bool expert = strstr(module, ".experts.") != NULL;
        if (t->ndim == 2 && !expert && in_list(leaf, k_router_leaves, sizeof k_router_leaves / sizeof k_router_leaves[0])) {
            MOQ_TRY(add_excl(q, module, err));  /* MoE router: always BF16 */
            continue;
        }
        const leaf_row *lr = leaf_find(leaf);
        if (!lr && t->ndim >= 2 && !expert) { /* a module the table does not quantize (MLA's kv_b_proj, a gate, a conv): listed as excluded */
            MOQ_TRY(add_excl(q, module, err));
            continue;
        }
        if (!lr || t->ndim != 2) continue;
        if (!is_float_src(t->dtype))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected BF16, F16 or F32 (moq quantize takes an unquantized checkpoint)",
                            moq_dtype_name(t->dtype));
        if (!(u->module = strdup(module))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, module, "cannot allocate");
        u->leaf = lr;
        u->expert = expert;
        rep->n_linears++;
        if (lr->lm_head) continue;     /* excluded by default, already listed */
        bool excluded = false;
        for (int e = 0; e < q->o->n_exclude && !excluded; e++) excluded = moq_glob_fnmatch(q->o->exclude[e], module);
        const moq_export_linear_row *row = NULL;
        if (!excluded) MOQ_TRY(algo_for(q, module, &row, err));
        if (excluded || !row->quantized) {
            MOQ_TRY(add_excl(q, module, err));
            continue;
        }
        u->row = row;
        u->args = moq_export_args_default();
        u->args.model_dtype = t->dtype;
        u->args.moe_gate_up = expert && lr->group != GRP_NONE;
        rep->n_quantized++;
    }
    /* Fused groups: the first member found (in source order) leads; members must share the algo.
     * Key "<parent>.#<group>" -> the leading unit, in one hash map. */
    moq_strmap lead = {0};
    char **keys = calloc(n ? n : 1, sizeof *keys);
    moq_status st = keys && moq_strmap_init(&lead, n ? n : 1) ? MOQ_OK : MOQ_FAIL(err, MOQ_ERR_NOMEM, "plan", "cannot allocate the fused-group map");
    for (size_t i = 0; i < n && st == MOQ_OK; i++) {
        unit *u = &q->u[i];
        if (!u->module || !u->leaf || u->leaf->group == GRP_NONE) continue;
        const size_t plen = (size_t)(leaf_of(u->module) - u->module);
        if (!(keys[i] = malloc(plen + 16))) {
            st = MOQ_FAIL(err, MOQ_ERR_NOMEM, u->module, "cannot allocate");
            break;
        }
        snprintf(keys[i], plen + 16, "%.*s#%d", (int)plen, u->module, u->leaf->group);
        size_t j = 0;
        if (moq_strmap_put(&lead, keys[i], i, &j)) continue;  /* the first of its group */
        const unit *v = &q->u[j];
        if (v->row != u->row)
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, u->module, "fused with %s, which is %s, while this one is %s; fused shards need one algo (recipe or --exclude)",
                          v->module, v->row ? v->row->algo : "unquantized", u->row ? u->row->algo : "unquantized");
        u->group_of = (int)j;
    }
    moq_strmap_free(&lead);
    for (size_t i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
    return st;
}

/* A routed expert's input amax: over the tokens routed to it (gate/up: its input rows; down: its
 * activation). An expert no calibration token reached gets the max of the layer's calibrated experts
 * for the same projection, else 0.5: ModelOpt's set_expert_quantizer_amax. */
static moq_status expert_input_amax(const moq_calib *cb, const unit *u, float *out, moq_error *err) {
    const char *p = strstr(u->module, ".experts.");
    char *end = NULL;
    const long long e = p ? strtoll(p + 9, &end, 10) : -1;
    if (!cb->expert_amax || u->layer < 0 || u->layer >= cb->n_layers || e < 0 || e >= cb->n_experts)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module, "the calibration recorded no routed experts for layer %lld (%lld experts); a %s input_scale needs them",
                        (long long)u->layer, (long long)cb->n_experts, u->row->algo);
    const int slot = u->leaf->group == GRP_NONE;   /* down_proj / w2: the activation */
    const float *row = cb->expert_amax + u->layer * cb->n_experts * 2;
    float a = row[e * 2 + slot];
    if (a < 0) {
        a = -1.0f;
        for (int64_t x = 0; x < cb->n_experts; x++)
            if (row[x * 2 + slot] > a) a = row[x * 2 + slot];
        if (a < 0) a = 0.5f;
    }
    *out = a;
    return MOQ_OK;
}

/* Weight amax of group-amax rows, maxed over each fused group; input and KV amax from calib. */
/* Whether the module next to `module` (same parent, leaf `leaf`) is a quantized linear of the plan. */
static bool has_sibling(const qctx *q, const char *module, const char *leaf) {
    const size_t plen = (size_t)(leaf_of(module) - module);
    for (size_t i = 0; i < q->nu; i++) {
        const char *m = q->u[i].module;
        if (m && strncmp(m, module, plen) == 0 && strcmp(m + plen, leaf) == 0) return true;
    }
    return false;
}

static moq_status amax_pass(qctx *q, moq_error *err) {
    const moq_calib *cb = q->o->calib;
    uint64_t done = 0, total = 0;
    for (size_t i = 0; i < q->nu; i++)
        if (q->u[i].row && q->u[i].row->group_amax) total += q->u[i].src->nbytes;
    for (size_t i = 0; i < q->nu; i++) {
        unit *u = &q->u[i];
        if (!u->row) continue;
        if (u->row->group_amax) {
            u->own_amax = tensor_amax(u->src);
            done += u->src->nbytes;
            if (q->o->progress) q->o->progress(q->o->progress_user, "amax ", done, total);
            moq_map_release(u->src->data, u->src->nbytes);  /* streaming: keep the resident set small */
        }
        if (q->o->cancel && *q->o->cancel) return MOQ_FAIL(err, MOQ_ERR_IO, q->dst_dir, "interrupted");
    }
    /* the group max, gathered on each group's leading unit */
    float *gmax = calloc(q->nu ? q->nu : 1, sizeof *gmax);
    if (!gmax) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "amax", "cannot allocate");
    for (size_t i = 0; i < q->nu; i++) {
        const size_t lead = q->u[i].group_of >= 0 ? (size_t)q->u[i].group_of : i;
        if (q->u[i].row && q->u[i].own_amax > gmax[lead]) gmax[lead] = q->u[i].own_amax;
    }
    for (size_t i = 0; i < q->nu; i++)
        if (q->u[i].row && q->u[i].row->group_amax) q->u[i].args.amax = gmax[q->u[i].group_of >= 0 ? (size_t)q->u[i].group_of : i];
    free(gmax);
    for (size_t i = 0; i < q->nu; i++) {
        unit *u = &q->u[i];
        if (!u->row) continue;
        if (u->row->static_input) {
            if (!cb)
                return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module,
                                "%s writes a static input_scale from calibrated activations: pass --calib FILE (text to calibrate on; --calib-tokens N limits it)",
                                u->row->algo);
            float a = u->layer >= 0 && u->layer < cb->n_layers && u->leaf->tap != MOQ_TAP_NONE && !u->expert
                          ? cb->amax[u->layer * MOQ_TAP_COUNT + u->leaf->tap] : -1.0f;
            if (u->expert) MOQ_TRY(expert_input_amax(cb, u, &a, err));
            if (a < 0)
                return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module, "calibration recorded no input for this linear (layer %lld); a %s input_scale needs one",
                                (long long)u->layer, u->row->algo);
            if (a == 0 && !u->row->act_zero_ok)
                return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module, "calibration saw only zeros at this linear's input; a %s input_scale of 0 is invalid "
                                "(ModelOpt refuses it too): calibrate on more text or exclude the module", u->row->algo);
            u->args.act_amax = a;
        }
    }
    if (!q->o->kv_fp8) return MOQ_OK;
    if (!cb) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--kv-cache fp8", "k_scale and v_scale are amax/448 of calibrated K and V: pass --calib FILE");
    int found = 0;
    for (size_t i = 0; i < q->nu; i++) {
        unit *u = &q->u[i];
        if (!u->leaf || u->leaf->kv == MOQ_TAP_NONE || !u->module || !strstr(u->module, "self_attn.")) continue;
        const float a = u->layer >= 0 && u->layer < cb->n_layers ? cb->amax[u->layer * MOQ_TAP_COUNT + u->leaf->kv] : -1.0f;
        if (a < 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module, "calibration recorded no %s for layer %lld", u->leaf->kv == MOQ_TAP_K ? "K" : "V", (long long)u->layer);
        u->kv_scale = a * MOQ_RCP448;   /* §8: amax / 448 (a reciprocal product, export_ref.h), no clamp on the HF export path */
        u->has_kv = true;
        found++;
        if (u->leaf->kv != MOQ_TAP_K || has_sibling(q, u->module, "v_proj")) continue;
        const float av = cb->amax[u->layer * MOQ_TAP_COUNT + MOQ_TAP_V]; /* k_eq_v: V is the normed k projection */
        if (av < 0) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, u->module, "calibration recorded no V for layer %lld", (long long)u->layer);
        u->v_scale = av * MOQ_RCP448;
        u->has_v = true;
    }
    if (!found) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--kv-cache fp8", "the checkpoint has no self_attn.k_proj / v_proj to carry k_scale / v_scale "
                                      "(MLA's latent cache and Gated DeltaNet have none: moq quantize writes FP8 KV scales for GQA attention only)");
    return MOQ_OK;
}

/* Output tensor list in source order; a linear's tensors in its row's order, then its KV scale. */
static moq_status layout(qctx *q, moq_quantize_report *rep, moq_error *err) {
    char nm[640];
    for (size_t i = 0; i < q->nu; i++) {
        unit *u = &q->u[i];
        const moq_tensor *t = u->src;
        if (!u->row) {
            MOQ_TRY(add_out(q, t->name, t->dtype, t->ndim, t->shape, t->nbytes, i, -1, err));
        } else {
            MOQ_TRY(moq_export_linear_plan(u->row, u->module, t->shape[0], t->shape[1], &u->args, u->t, &u->nt, err));
            for (int p = 0; p < u->nt; p++) {
                snprintf(nm, sizeof nm, "%s.%s", u->module, u->t[p].suffix);
                MOQ_TRY(add_out(q, nm, u->t[p].dtype, u->t[p].ndim, u->t[p].shape, u->t[p].nbytes, i, p, err));
            }
        }
        if (u->has_kv) {
            snprintf(nm, sizeof nm, "%s.%s", u->module, u->leaf->kv_suffix);
            MOQ_TRY(add_out(q, nm, MOQ_DT_F32, 0, NULL, 4, i, -2, err));
        }
        if (u->has_v) { /* "<...>.k_proj" -> "<...>.v_proj.v_scale" */
            snprintf(nm, sizeof nm, "%.*sv_proj.v_scale", (int)(leaf_of(u->module) - u->module), u->module);
            MOQ_TRY(add_out(q, nm, MOQ_DT_F32, 0, NULL, 4, i, -3, err));
        }
        rep->bytes_in += t->nbytes;
    }
    /* shards: greedy in order, a new one when the next tensor would pass shard_size */
    const uint64_t cap = q->o->shard_size ? q->o->shard_size : UINT64_C(5000000000);
    uint64_t acc = 0;
    int s = 0;
    for (size_t i = 0; i < q->not; i++) {
        if (acc > 0 && acc + q->ot[i].nbytes > cap) s++, acc = 0;
        q->ot[i].shard = s;
        acc += q->ot[i].nbytes;
        rep->bytes_out += q->ot[i].nbytes;
        if (q->ot[i].nbytes > rep->largest_tensor) rep->largest_tensor = q->ot[i].nbytes;
    }
    q->n_shards = q->not ? s + 1 : 1;
    if (q->n_shards > 99999) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--shard-size", "%llu bytes gives %d shards, at most 99999",
                                             (unsigned long long)cap, q->n_shards);
    rep->n_tensors_out = q->not;
    rep->n_shards = q->n_shards;
    return MOQ_OK;
}

/* ---- writing -------------------------------------------------------------------------------- */

static void shard_name(const qctx *q, int s, char *buf, size_t n) {
    if (q->n_shards == 1) snprintf(buf, n, "model.safetensors");
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", s + 1, q->n_shards);
}

static char *shard_header(const qctx *q, size_t lo, size_t hi, uint64_t *len) {
    cJSON *root = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(m, "format", "pt");
    cJSON_AddStringToObject(m, "moq_version", moq_version_string());
    if (q->o->command) cJSON_AddStringToObject(m, "moq_command", q->o->command);
    uint64_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        const out_tensor *t = &q->ot[i];
        if (!moq_st_header_tensor(root, t->name, t->dtype, t->ndim, t->shape, off, t->nbytes)) break;
        off += t->nbytes;
    }
    return moq_st_header_finish(root, len);
}

static moq_status put(FILE *f, const void *p, size_t n, const char *where, moq_error *err) {
    if (n && fwrite(p, 1, n, f) != n) return MOQ_FAIL(err, MOQ_ERR_IO, where, "write failed: %s", strerror(errno));
    return MOQ_OK;
}

/* Exports unit u into its tensors' buffers (the source weight decoded to f32 first). */
static moq_status produce(qctx *q, unit *u, float **wbuf, size_t *wcap, moq_error *err) {
    const size_t ne = (size_t)u->src->nelem;
    if (ne > *wcap) {
        float *w = realloc(*wbuf, ne * sizeof *w);
        if (!w) return MOQ_FAIL(err, MOQ_ERR_NOMEM, u->module, "cannot allocate %zu floats for the weight", ne);
        *wbuf = w, *wcap = ne;
    }
    decode_all(u->src, *wbuf);
    moq_map_release(u->src->data, u->src->nbytes);
    for (int p = 0; p < u->nt; p++)
        if (!(u->t[p].data = malloc((size_t)u->t[p].nbytes ? (size_t)u->t[p].nbytes : 1)))
            return MOQ_FAIL(err, MOQ_ERR_NOMEM, u->module, "cannot allocate %llu bytes for %s", (unsigned long long)u->t[p].nbytes, u->t[p].suffix);
    (void)q;
    return moq_export_linear_run(u->row, u->module, *wbuf, u->src->shape[0], u->src->shape[1], &u->args, u->t, u->nt, err);
}

static void release(unit *u) {
    for (int p = 0; p < u->nt; p++) {
        free(u->t[p].data);
        u->t[p].data = NULL;
    }
}

static moq_status write_shards(qctx *q, moq_error *err) {
    float *wbuf = NULL;
    size_t wcap = 0, live = (size_t)-1;   /* the unit whose buffers are filled */
    moq_status st = MOQ_OK;
    uint64_t done = 0, total = 0;
    for (size_t i = 0; i < q->not; i++) total += q->ot[i].nbytes;
    size_t i = 0;
    for (int s = 0; s < q->n_shards && st == MOQ_OK; s++) {
        size_t hi = i;
        while (hi < q->not && q->ot[hi].shard == s) hi++;
        char nm[64];
        shard_name(q, s, nm, sizeof nm);
        char *path = moq_path_join(q->tmp_dir, nm);
        uint64_t hlen = 0;
        char *hdr = path ? shard_header(q, i, hi, &hlen) : NULL;
        FILE *f = hdr ? fopen(path, "wb") : NULL;
        if (!f) st = hdr ? MOQ_FAIL(err, MOQ_ERR_IO, nm, "cannot create in %s: %s", q->tmp_dir, strerror(errno))
                         : MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "cannot build the header");
        uint8_t len8[8];
        for (int b = 0; b < 8; b++) len8[b] = (uint8_t)(hlen >> (8 * b));
        if (st == MOQ_OK) st = put(f, len8, 8, nm, err);
        if (st == MOQ_OK) st = put(f, hdr, (size_t)hlen, nm, err);
        for (; i < hi && st == MOQ_OK; i++) {
            const out_tensor *t = &q->ot[i];
            unit *u = &q->u[t->unit];
            if (q->o->cancel && *q->o->cancel) {
                st = MOQ_FAIL(err, MOQ_ERR_IO, q->dst_dir, "interrupted; nothing written there");
                break;
            }
            if (t->part == -1) {
                st = put(f, u->src->data, (size_t)u->src->nbytes, t->name, err);
                moq_map_release(u->src->data, u->src->nbytes);
            }
            else if (t->part == -2) st = put(f, &u->kv_scale, 4, t->name, err);
            else if (t->part == -3) st = put(f, &u->v_scale, 4, t->name, err);
            else {
                if (live != t->unit) {
                    if (live != (size_t)-1) release(&q->u[live]);
                    live = t->unit;
                    st = produce(q, u, &wbuf, &wcap, err);
                }
                if (st == MOQ_OK) st = put(f, u->t[t->part].data, (size_t)t->nbytes, t->name, err);
            }
            done += t->nbytes;
            if (q->o->progress) q->o->progress(q->o->progress_user, "write", done, total);
        }
        if (f && fclose(f) != 0 && st == MOQ_OK) st = MOQ_FAIL(err, MOQ_ERR_IO, nm, "close failed: %s", strerror(errno));
        free(hdr);
        free(path);
    }
    if (live != (size_t)-1) release(&q->u[live]);
    free(wbuf);
    return st;
}

static moq_status write_text(const qctx *q, const char *name, const char *text, moq_error *err) {
    char *path = moq_path_join(q->tmp_dir, name);
    FILE *f = path ? fopen(path, "wb") : NULL;
    free(path);
    if (!f) return MOQ_FAIL(err, MOQ_ERR_IO, name, "cannot create in %s: %s", q->tmp_dir, strerror(errno));
    moq_status st = put(f, text, strlen(text), name, err);
    if (fclose(f) != 0 && st == MOQ_OK) st = MOQ_FAIL(err, MOQ_ERR_IO, name, "close failed: %s", strerror(errno));
    return st;
}

/* JSON as Python's json.dump(obj, f, indent=4) lays it out (ModelOpt writes both config files so):
 * one member or element per line, 4 spaces per level, "key": value, empty containers as {} / [].
 * Scalars are printed by cJSON. */
typedef struct jbuf {
    char  *p;
    size_t n, cap;
    bool   oom;
} jbuf;

static void jput(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->p, cap);
        if (!t) { b->oom = true; return; }
        b->p = t, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void jputs(jbuf *b, const char *s) { jput(b, s, strlen(s)); }

static void jindent(jbuf *b, int level) {
    for (int i = 0; i < level; i++) jputs(b, "    ");
}

static void jscalar(jbuf *b, const cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    if (!s) { b->oom = true; return; }
    jputs(b, s);
    free(s);
}

static void jdump(jbuf *b, const cJSON *j, int level) {
    const bool obj = cJSON_IsObject(j), arr = cJSON_IsArray(j);
    if (!obj && !arr) { jscalar(b, j); return; }
    if (!j->child) { jputs(b, obj ? "{}" : "[]"); return; }
    jputs(b, obj ? "{\n" : "[\n");
    for (const cJSON *c = j->child; c; c = c->next) {
        jindent(b, level + 1);
        if (obj) {
            cJSON *k = cJSON_CreateString(c->string);
            if (!k) { b->oom = true; return; }
            jscalar(b, k);
            cJSON_Delete(k);
            jputs(b, ": ");
        }
        jdump(b, c, level + 1);
        jputs(b, c->next ? ",\n" : "\n");
    }
    jindent(b, level);
    jputs(b, obj ? "}" : "]");
}

static moq_status write_json(const qctx *q, const char *name, cJSON *j, moq_error *err) {
    jbuf b = {0};
    jdump(&b, j, 0);
    if (b.oom || !b.p) {
        free(b.p);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, name, "cannot print");
    }
    moq_status st = write_text(q, name, b.p, err);
    free(b.p);
    return st;
}

/* ---- module order ----------------------------------------------------------------------------
 * ModelOpt lists modules in named_modules() order (the order the model class defines them), not the
 * safetensors order (alphabetical in Hugging Face files: layers.10 before layers.2, mlp before
 * self_attn). Names are compared segment by segment: numbers numerically, known segments by their
 * place in a decoder (this table), others alphabetically after them. */
static const char *const k_module_order[] = {
    "embed_tokens", "layers", "input_layernorm", "self_attn", "q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm",
    "post_attention_layernorm", "mlp", "block_sparse_moe", "gate", "experts", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3",
    "norm", "lm_head"};

static int seg_rank(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof k_module_order / sizeof k_module_order[0]; i++)
        if (strlen(k_module_order[i]) == n && strncmp(k_module_order[i], s, n) == 0) return (int)i;
    return 1000;
}

static bool all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return n > 0;
}

static int module_cmp(const char *a, const char *b) {
    while (*a && *b) {
        const size_t na = strcspn(a, "."), nb = strcspn(b, ".");
        int c = 0;
        if (all_digits(a, na) && all_digits(b, nb)) c = na != nb ? (na < nb ? -1 : 1) : strncmp(a, b, na);
        else {
            const int ra = seg_rank(a, na), rb = seg_rank(b, nb);
            if (ra != rb) c = ra < rb ? -1 : 1;
            else {
                c = strncmp(a, b, na < nb ? na : nb);
                if (!c && na != nb) c = na < nb ? -1 : 1;
            }
        }
        if (c) return c;
        a += na, b += nb;
        if (*a == '.') a++;
        if (*b == '.') b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int cmp_module(const void *x, const void *y) { return module_cmp(*(char *const *)x, *(char *const *)y); }

/* ---- exclude_modules: ModelOpt's prefix-wildcard summary ------------------------------------
 * process_layer_quant_config writes sorted(_prefix_wildcard_summarize_exclude_modules(unquantized,
 * quantized)): for each unquantized module, in order, the first of "a*", {"a", "a.*"} (a = the name
 * up to each dot, left to right) and finally the name itself that matches no quantized module is
 * kept ("a.*" alone for the pair); a module already covered adds nothing. So "lm_head" and
 * "model.embed_tokens" stay as they are, and unquantized attention becomes
 * "model.layers.N.self_attn*" (NUMERICS §12). */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Index of the first of sorted[0..n) not below key. */
static size_t lower_bound(char *const *sorted, size_t n, const char *key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (strcmp(sorted[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* A wildcard some quantized module matches (one of its prefixes + "*", or its exact name). */
static bool negative(char *const *sorted, size_t n, const char *w) {
    const size_t len = strlen(w);
    if (len && w[len - 1] == '*') {
        char *p = strndup(w, len - 1);
        if (!p) return true;
        const size_t i = lower_bound(sorted, n, p);
        const bool hit = i < n && strncmp(sorted[i], p, len - 1) == 0;
        free(p);
        return hit;
    }
    const size_t i = lower_bound(sorted, n, w);
    return i < n && strcmp(sorted[i], w) == 0;
}

typedef struct strset {
    char **s;
    size_t n;
} strset;

static bool set_has(const strset *set, const char *w) {
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->s[i], w) == 0) return true;
    return false;
}

static bool set_add(strset *set, const char *w) {
    if (set_has(set, w)) return true;
    char **t = realloc(set->s, (set->n + 1) * sizeof *t);
    if (!t) return false;
    set->s = t;
    return (t[set->n] = strdup(w)) != NULL && (set->n++, true);
}

static void set_free(strset *set) {
    for (size_t i = 0; i < set->n; i++) free(set->s[i]);
    free(set->s);
    *set = (strset){0};
}

/* The summary of q->excl against the quantized modules, sorted; NULL on allocation failure. */
static moq_status summarize_excl(const qctx *q, strset *out, moq_error *err) {
    size_t nq = 0;
    char **quant = malloc((q->nu ? q->nu : 1) * sizeof *quant);
    if (!quant) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "exclude_modules", "cannot allocate");
    for (size_t i = 0; i < q->nu; i++)
        if (q->u[i].row) quant[nq++] = q->u[i].module;
    if (nq > 1) qsort(quant, nq, sizeof *quant, cmp_str);
    *out = (strset){0};
    bool ok = true;
    /* ModelOpt walks the unquantized modules in module order */
    char **excl = malloc((q->nexcl ? q->nexcl : 1) * sizeof *excl);
    if (!excl) {
        free(quant);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "exclude_modules", "cannot allocate");
    }
    memcpy(excl, q->excl, q->nexcl * sizeof *excl);
    if (q->nexcl > 1) qsort(excl, q->nexcl, sizeof *excl, cmp_module);
    for (size_t e = 0; e < q->nexcl && ok; e++) {
        const char *name = excl[e];
        const size_t len = strlen(name);
        char *buf = malloc(2 * len + 8);
        if (!buf) { ok = false; break; }
        /* candidates in ModelOpt's order: at each dot "a*", then {"a", "a.*"}; then the name */
        const char *cand[2] = {NULL, NULL};
        char *c1 = buf, *c2 = buf + len + 4;
        bool chosen = false, covered = false;
        for (size_t i = 0; i <= len && !chosen && !covered; i++) {
            if (i < len && name[i] != '.') continue;
            for (int form = 0; form < (i < len ? 2 : 1) && !chosen && !covered; form++) {
                int nc;
                if (i == len) nc = 1, snprintf(c1, len + 4, "%s", name);
                else if (form == 0) nc = 1, snprintf(c1, len + 4, "%.*s*", (int)i, name);
                else nc = 2, snprintf(c1, len + 4, "%.*s", (int)i, name), snprintf(c2, len + 4, "%.*s.*", (int)i, name);
                const char *w[2] = {c1, c2};
                bool neg = false, all_in = true;
                for (int k = 0; k < nc; k++) neg |= negative(quant, nq, w[k]), all_in &= set_has(out, w[k]);
                if (neg) continue;
                if (all_in) { covered = true; break; }
                cand[0] = c1, cand[1] = nc == 2 ? c2 : NULL, chosen = true;
            }
        }
        if (chosen) ok = cand[1] ? set_add(out, cand[1]) : set_add(out, cand[0]);
        free(buf);
    }
    free(quant);
    free(excl);
    if (!ok) {
        set_free(out);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "exclude_modules", "cannot allocate");
    }
    if (out->n > 1) qsort(out->s, out->n, sizeof *out->s, cmp_str);
    return MOQ_OK;
}

static cJSON *excl_array(const strset *ex) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < ex->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(ex->s[i]));
    return a;
}

static cJSON *producer(void) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "modelopt");
    cJSON_AddStringToObject(p, "version", "0.47.0");
    return p;
}

/* The group size written at the top level: the single algo's, or a mix's first grouped algo. */
static int top_group_size(const qctx *q) {
    if (!q->mixed) return q->single->group_size;
    for (size_t i = 0; i < q->nu; i++)
        if (q->u[i].row && q->u[i].row->group_size) return q->u[i].row->group_size;
    return 0;
}

static moq_status write_configs_with(qctx *q, const strset *ex, moq_error *err);

static int unit_order_cmp(const void *x, const void *y) {
    return module_cmp((*(const unit *const *)x)->module, (*(const unit *const *)y)->module);
}

/* The quantized units in module order (malloc'd, *n of them). */
static const unit **quantized_in_order(const qctx *q, size_t *n) {
    const unit **v = malloc((q->nu ? q->nu : 1) * sizeof(const unit *));
    *n = 0;
    for (size_t i = 0; v && i < q->nu; i++)
        if (q->u[i].row) v[(*n)++] = &q->u[i];
    if (v && *n > 1) qsort(v, *n, sizeof(const unit *), unit_order_cmp);
    return v;
}

static cJSON *quantized_layers(const qctx *q) {
    size_t nq = 0;
    const unit **ord = quantized_in_order(q, &nq);
    cJSON *ql = ord ? cJSON_CreateObject() : NULL;
    for (size_t i = 0; ql && i < nq; i++) {
        const unit *u = ord[i];
        cJSON *e = cJSON_AddObjectToObject(ql, u->module);
        cJSON_AddStringToObject(e, "quant_algo", u->row->written);
        if (u->row->group_size) cJSON_AddNumberToObject(e, "group_size", u->row->group_size);
    }
    free(ord);
    return ql;
}

static moq_status write_configs(qctx *q, moq_error *err) {
    strset ex;
    MOQ_TRY(summarize_excl(q, &ex, err));
    moq_status st = write_configs_with(q, &ex, err);
    set_free(&ex);
    return st;
}

static moq_status write_configs_with(qctx *q, const strset *ex, moq_error *err) {
    const char *algo = q->mixed ? "MIXED_PRECISION" : q->single->written;
    const int gs = top_group_size(q);
    /* hf_quant_config.json */
    cJSON *hq = cJSON_CreateObject();
    cJSON_AddItemToObject(hq, "producer", producer());
    cJSON *qz = cJSON_AddObjectToObject(hq, "quantization");
    cJSON_AddStringToObject(qz, "quant_algo", algo);
    if (q->o->kv_fp8) cJSON_AddStringToObject(qz, "kv_cache_quant_algo", "FP8");
    else cJSON_AddNullToObject(qz, "kv_cache_quant_algo");
    if (q->mixed) cJSON_AddItemToObject(qz, "quantized_layers", quantized_layers(q));
    else if (gs) cJSON_AddNumberToObject(qz, "group_size", gs);
    cJSON_AddItemToObject(qz, "exclude_modules", excl_array(ex));
    moq_status st = write_json(q, "hf_quant_config.json", hq, err);
    cJSON_Delete(hq);
    if (st) return st;

    /* config.json + quantization_config (convert_hf_quant_config_format's shape) */
    const char *ctext = moq_checkpoint_json_text(q->ck, "config.json");
    cJSON *cfg = ctext ? cJSON_Parse(ctext) : NULL;
    if (!cfg) return MOQ_FAIL(err, MOQ_ERR_FORMAT, "config.json", "cannot be read back as JSON");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
    cJSON *qc = cJSON_AddObjectToObject(cfg, "quantization_config");
    cJSON *groups = cJSON_CreateObject();
    int ng = 0;
    if (!q->mixed && q->single->config_group) {
        cJSON *g = cJSON_Parse(q->single->config_group), *targets = cJSON_CreateArray();
        cJSON_AddItemToArray(targets, cJSON_CreateString("Linear"));
        cJSON_AddItemToObject(g, "targets", targets);
        cJSON_AddItemToObject(groups, "group_0", g);
        ng = 1;
    }
    /* a mix: one group per distinct algo in order of first appearance (module order), targets sorted */
    size_t nq = 0;
    const unit **ord = q->mixed ? quantized_in_order(q, &nq) : NULL;
    const char **names = ord ? malloc((nq ? nq : 1) * sizeof *names) : NULL;
    const moq_export_linear_row *done_rows[32];
    size_t n_done = 0;
    for (size_t i = 0; names && i < nq; i++) {
        const moq_export_linear_row *row = ord[i]->row;
        bool seen = false;
        for (size_t j = 0; j < n_done && !seen; j++) seen = done_rows[j] == row;
        if (seen || n_done == sizeof done_rows / sizeof done_rows[0]) continue;
        done_rows[n_done++] = row;
        if (!row->mixed_group) continue;
        cJSON *g = cJSON_Parse(row->mixed_group), *targets = cJSON_CreateArray();
        size_t nt = 0;
        for (size_t j = i; j < nq; j++)
            if (ord[j]->row == row) names[nt++] = ord[j]->module;
        if (nt > 1) qsort(names, nt, sizeof *names, cmp_str);
        for (size_t j = 0; targets && j < nt; j++) cJSON_AddItemToArray(targets, cJSON_CreateString(names[j]));
        if (!g) {
            cJSON_Delete(targets);
            continue;
        }
        cJSON_AddItemToObject(g, "targets", targets);
        char gn[24];
        snprintf(gn, sizeof gn, "group_%d", ng++);
        cJSON_AddItemToObject(groups, gn, g);
    }
    free(names);
    free(ord);
    if (ng) cJSON_AddItemToObject(qc, "config_groups", groups);
    else cJSON_Delete(groups);
    if (q->mixed) cJSON_AddItemToObject(qc, "quantized_layers", quantized_layers(q));
    cJSON_AddItemToObject(qc, "ignore", excl_array(ex));
    cJSON_AddStringToObject(qc, "quant_algo", algo);
    if (q->o->kv_fp8) {
        cJSON *kv = cJSON_AddObjectToObject(qc, "kv_cache_scheme");
        cJSON_AddFalseToObject(kv, "dynamic");
        cJSON_AddNumberToObject(kv, "num_bits", 8);
        cJSON_AddStringToObject(kv, "type", "float");
    }
    cJSON_AddItemToObject(qc, "producer", producer());
    cJSON_AddStringToObject(qc, "quant_method", "modelopt");
    st = write_json(q, "config.json", cfg, err);
    cJSON_Delete(cfg);
    if (st || q->n_shards == 1) return st;

    cJSON *ix = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(ix, "metadata");
    uint64_t total = 0;
    for (size_t i = 0; i < q->not; i++) total += q->ot[i].nbytes;
    cJSON_AddNumberToObject(md, "total_size", (double)total);
    cJSON *wm = cJSON_AddObjectToObject(ix, "weight_map");
    for (size_t i = 0; i < q->not; i++) {
        char nm[64];
        shard_name(q, q->ot[i].shard, nm, sizeof nm);
        cJSON_AddStringToObject(wm, q->ot[i].name, nm);
    }
    st = write_json(q, "model.safetensors.index.json", ix, err);
    cJSON_Delete(ix);
    return st;
}

/* Copies every other regular file of the source directory (tokenizer, generation config, chat
 * template, ...), as ModelOpt's copy_non_safetensor_files_from_ckpt does. */
static moq_status copy_side_files(qctx *q, const char *src_dir, moq_error *err) {
    DIR *d = opendir(src_dir);
    if (!d) return MOQ_FAIL(err, MOQ_ERR_IO, src_dir, "cannot list: %s", strerror(errno));
    moq_status st = MOQ_OK;
    struct dirent *e;
    while (st == MOQ_OK && (e = readdir(d))) {
        const char *nm = e->d_name;
        const size_t n = strlen(nm);
        bool weights = false;
        for (size_t x = 0; x < sizeof k_not_copied_ext / sizeof k_not_copied_ext[0]; x++) {
            const size_t el = strlen(k_not_copied_ext[x]);
            weights |= n > el && strcmp(nm + n - el, k_not_copied_ext[x]) == 0;
        }
        if (nm[0] == '.' || weights || in_list(nm, k_not_copied, sizeof k_not_copied / sizeof k_not_copied[0])) continue;
        char *sp = moq_path_join(src_dir, nm), *dp = moq_path_join(q->tmp_dir, nm);
        struct stat sb;
        if (!sp || !dp) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "cannot allocate");
        else if (stat(sp, &sb) == 0 && S_ISREG(sb.st_mode)) {
            FILE *in = fopen(sp, "rb"), *out = in ? fopen(dp, "wb") : NULL;
            if (!in || !out) st = MOQ_FAIL(err, MOQ_ERR_IO, nm, "cannot copy: %s", strerror(errno));
            char buf[1 << 16];
            size_t r;
            while (st == MOQ_OK && (r = fread(buf, 1, sizeof buf, in)) > 0) st = put(out, buf, r, nm, err);
            if (st == MOQ_OK && ferror(in)) st = MOQ_FAIL(err, MOQ_ERR_IO, nm, "read failed");
            if (in) fclose(in);
            if (out && fclose(out) != 0 && st == MOQ_OK) st = MOQ_FAIL(err, MOQ_ERR_IO, nm, "close failed: %s", strerror(errno));
        }
        free(sp);
        free(dp);
    }
    closedir(d);
    return st;
}

/* Removes the partial directory (only files moq put there: it holds no subdirectories). */
static void remove_partial(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = moq_path_join(dir, e->d_name);
        if (p) unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

static const char k_marker[] = ".moq-partial";

moq_quantize_opts moq_quantize_opts_default(void) {
    moq_quantize_opts o;
    memset(&o, 0, sizeof o);
    o.algo = "NVFP4";
    return o;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void qctx_free(qctx *q) {
    for (size_t i = 0; q->u && i < q->nu; i++) {
        release(&q->u[i]);
        free(q->u[i].module);
    }
    free(q->u);
    for (size_t i = 0; i < q->not; i++) free(q->ot[i].name);
    free(q->ot);
    for (size_t i = 0; i < q->nexcl; i++) free(q->excl[i]);
    free(q->excl);
    cJSON_Delete(q->recipe);
    moq_checkpoint_free(q->ck);
    free(q->tmp_dir);
}

moq_status moq_quantize(const char *src_dir, const char *dst_dir, const moq_quantize_opts *o, moq_quantize_report *rep,
                        moq_error *err) {
    if (!src_dir || !dst_dir || !o || !o->algo)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_quantize", "src_dir, dst_dir, opts and opts.algo must be given");
    moq_quantize_report rdummy;
    if (!rep) rep = &rdummy;
    memset(rep, 0, sizeof *rep);
    qctx q = {.o = o, .dst_dir = (char *)dst_dir};
    q.mixed = strcasecmp(o->algo, "MIXED_PRECISION") == 0;
    q.single = q.mixed ? NULL : row_named(o->algo);
    if (!q.mixed && (!q.single || !q.single->quantized)) {
        char list[256];
        algo_list(list, sizeof list);
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--algo", "\"%s\" is not a quantized algo; expected one of %s, MIXED_PRECISION (BF16 only in a recipe)",
                        o->algo, list);
    }
    if (!q.mixed && o->recipe) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--recipe", "is for --algo MIXED_PRECISION (got %s)", o->algo);
    struct stat sb;
    if (lstat(dst_dir, &sb) == 0) return MOQ_FAIL(err, MOQ_ERR_IO, dst_dir, "already exists; moq quantize writes a new directory");
    double t0 = now_s();
    moq_status st = q.mixed ? parse_recipe(&q, err) : MOQ_OK;
    if (st == MOQ_OK) st = moq_checkpoint_open(&q.ck, src_dir, NULL, err);
    if (st == MOQ_OK && !q.ck->is_dir) st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, src_dir, "is a file; expected a Hugging Face checkpoint directory");
    if (st == MOQ_OK && moq_checkpoint_json_text(q.ck, "hf_quant_config.json"))
        st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "hf_quant_config.json", "the source is already quantized; moq quantize takes a BF16, F16 or F32 checkpoint");
    if (st == MOQ_OK) {
        const cJSON *cfg = q.ck->side[MOQ_SIDE_CONFIG].json;
        if (cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config"))
            st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "config.json", "has a quantization_config: the source is already quantized; moq quantize takes a BF16, F16 or F32 checkpoint");
    }
    if (st == MOQ_OK) st = plan(&q, rep, err);
    rep->plan_s = now_s() - t0;
    t0 = now_s();
    if (st == MOQ_OK) st = amax_pass(&q, err);
    if (st == MOQ_OK) st = layout(&q, rep, err);
    rep->amax_s = now_s() - t0;
    if (st) {
        qctx_free(&q);
        return st;
    }
    /* DST.moq-partial: a stale one from an interrupted run (it holds the marker) is removed */
    t0 = now_s();
    const size_t dl = strlen(dst_dir);
    if (!(q.tmp_dir = malloc(dl + sizeof k_marker + 1))) {
        qctx_free(&q);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, dst_dir, "cannot allocate");
    }
    size_t tl = dl;
    memcpy(q.tmp_dir, dst_dir, dl);
    while (tl > 1 && q.tmp_dir[tl - 1] == '/') tl--;   /* "out/" -> "out.moq-partial" */
    snprintf(q.tmp_dir + tl, sizeof k_marker + 1, "%s", k_marker);
    char *marker = moq_path_join(q.tmp_dir, k_marker);
    if (lstat(q.tmp_dir, &sb) == 0) {
        if (marker && access(marker, F_OK) == 0) remove_partial(q.tmp_dir);
        else st = MOQ_FAIL(err, MOQ_ERR_IO, q.tmp_dir, "exists and is not moq's partial output; remove it first");
    }
    if (st == MOQ_OK && mkdir(q.tmp_dir, 0777) != 0) st = MOQ_FAIL(err, MOQ_ERR_IO, q.tmp_dir, "cannot create: %s", strerror(errno));
    else if (st == MOQ_OK) {
        if (!marker) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, q.tmp_dir, "cannot allocate");
        else st = write_text(&q, k_marker, "moq quantize writes here; renamed when complete\n", err);
        if (st == MOQ_OK) st = write_shards(&q, err);
        if (st == MOQ_OK) st = write_configs(&q, err);
        if (st == MOQ_OK) st = copy_side_files(&q, src_dir, err);
        if (st == MOQ_OK && unlink(marker) != 0) st = MOQ_FAIL(err, MOQ_ERR_IO, marker, "cannot remove: %s", strerror(errno));
        if (st == MOQ_OK && rename(q.tmp_dir, dst_dir) != 0)
            st = MOQ_FAIL(err, MOQ_ERR_IO, dst_dir, "cannot rename %s into place: %s", q.tmp_dir, strerror(errno));
        if (st != MOQ_OK) remove_partial(q.tmp_dir);
    }
    free(marker);
    rep->write_s = now_s() - t0;
    qctx_free(&q);
    return st;
}
