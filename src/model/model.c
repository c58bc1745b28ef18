/* model.c — Llama/Mistral/Qwen2/Qwen3 decoder runner (moq.h "models").
 *
 *   x = embed(tokens)                                   f32 [M, H]
 *   per layer:  h = rmsnorm(x) ; qkv = h · Wqkvᵀ (+b)   f32 [M, (A + 2 KV) D]
 *               q, k = rmsnorm_per_head (Qwen3) ; rope(q, k) ; cache <- k, v
 *               o = softmax(q kᵀ / sqrt(D), causal) v   f32 [M, A D]   (K, V read back from the cache)
 *               x += o · Woᵀ
 *               h = rmsnorm(x) ; gu = h · Wgate_upᵀ ; x += (silu(g) · u) · Wdownᵀ
 *   logits = rmsnorm(x) · Wlm_headᵀ                     f32 [M, V]
 *
 * Every dense linear is opened by the loader (moq_linear_layer_open: resolution, contract,
 * canonical weight, kernel), routed experts by src/moe (moq_moe_create), embeddings by layers.c:
 * no format appears here. Activations are f32 between layers; the
 * kernels quantize them per scheme (NUMERICS §2.4-§5.3). The embedding row is dequantized from the
 * canonical weight (moq_weight_dequant_row), so a tied lm_head shares the embedding's weight.
 * Attention reads K and V back from the cache for every position, the current one included, so
 * an FP8 cache affects the current token as it does in vLLM's paged decode.
 * Sliding-window layers attend to the last `sliding_window` positions, the current one included;
 * MoE models may interleave dense MLP layers (Qwen3-MoE mlp_only_layers, decoder_sparse_step):
 * both are per-layer facts read from config.json once at open (read_layer_plan).
 * Workspace for min(ctx, MOQ_MODEL_CHUNK) tokens is allocated at open; prefill runs in chunks.
 * Tested by tests/model/test_model.c.
 */
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/modules.h"
#include "core/error.h"
#include "io/json.h"
#include "kernels/kernels.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/rope.h"
#include "moe/moe.h"

#define MOQ_MODEL_CHUNK 32
#define MOQ_MODEL_MAX_WARN 16

/* Which layers use sliding-window attention, as transformers' config classes decide it. The window
 * covers `sliding_window` key positions counting the current one: a query at position i attends to
 * keys j with i - sliding_window < j <= i (transformers masking_utils.sliding_window_overlay,
 * `kv_idx > q_idx - sliding_window`, v4.53+; vLLM passes window_size (sliding_window - 1, 0) to
 * flash-attention, the same set). */
typedef enum window_rule {
    WINDOW_NONE,         /* config has no sliding window (Llama)                                     */
    WINDOW_ALL_LAYERS,   /* Mistral, Mixtral: `sliding_window` (null = none) applies to every layer  */
    WINDOW_QWEN2,        /* Qwen2/Qwen3(-MoE): only when `use_sliding_window` is true, and only for
                            layers l >= `max_window_layers` (Qwen2Config.layer_types:
                            "sliding_attention" if sliding_window is not None and i >= max_window_layers;
                            the config docstring says the opposite, the code is what runs)           */
} window_rule;

/* One row per supported config.json architecture. Bias on q/k/v is loaded wherever the checkpoint
 * has it (Qwen2 always, Llama with attention_bias), so it is no column. Window defaults are the
 * config classes' defaults when config.json lacks the key (MistralConfig 4096, MixtralConfig None,
 * Qwen2Config sliding_window 4096, max_window_layers 28). */
typedef struct arch_row {
    const char *name;
    const char *moe_block;     /* module holding the router ("gate") and experts (src/moe finds
                                  experts.N.{gate,up,down}_proj or experts.N.{w1,w3,w2}); NULL = dense */
    bool        qk_norm;       /* per-head RMSNorm of q and k before RoPE (Qwen3)                   */
    bool        norm_topk;     /* renormalize the top-k router weights when config.json is silent  */
    bool        sparse_step;   /* MoE only on layers outside mlp_only_layers with (l + 1) % decoder_sparse_step
                                  == 0 (Qwen3MoeDecoderLayer); the others are dense MLPs of intermediate_size */
    window_rule window;
    int64_t     window_default;      /* sliding_window when absent; 0 = none                        */
    int64_t     max_window_default;  /* max_window_layers when absent (WINDOW_QWEN2)                */
    const char *config_class;        /* transformers' config class, whose default_theta / rope_theta */
    double      theta_default;       /*   default applies when config.json has none (0: refuse)      */
} arch_row;

/* theta default: transformers' config class (default_theta in transformers 5, the rope_theta
 * argument default in 4.x): 10000 for Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE; 1e6 for Mixtral. */
static const arch_row arch_rows[] = {
    /* name                    moe block           qk_norm norm_topk sparse_step window             default  max_window config class      theta */
    {"LlamaForCausalLM",       NULL,               false,  false,    false,      WINDOW_NONE,       0,       0,         "LlamaConfig",    10000.0},
    {"MistralForCausalLM",     NULL,               false,  false,    false,      WINDOW_ALL_LAYERS, 4096,    0,         "MistralConfig",  10000.0},
    {"Qwen2ForCausalLM",       NULL,               false,  false,    false,      WINDOW_QWEN2,      4096,    28,        "Qwen2Config",    10000.0},
    {"Qwen3ForCausalLM",       NULL,               true,   false,    false,      WINDOW_QWEN2,      4096,    28,        "Qwen3Config",    10000.0},
    {"Qwen3MoeForCausalLM",    "mlp",              true,   false,    true,       WINDOW_QWEN2,      4096,    28,        "Qwen3MoeConfig", 10000.0},
    {"MixtralForCausalLM",     "block_sparse_moe", false,  true,     false,      WINDOW_ALL_LAYERS, 0,       0,         "MixtralConfig",  1000000.0},
};

bool moq_model_rope_theta_default(const char *architecture, double *theta, const char **config_class) {
    for (size_t i = 0; architecture && i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, architecture) == 0 && arch_rows[i].theta_default > 0) {
            *theta = arch_rows[i].theta_default, *config_class = arch_rows[i].config_class;
            return true;
        }
    return false;
}

static const char *const qkv_shards[] = {"q_proj", "k_proj", "v_proj"};
static const char *const gate_up_shards[] = {"gate_proj", "up_proj"};

bool moq_model_architecture_supported(const char *name) {
    for (size_t i = 0; name && i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, name) == 0) return true;
    return false;
}

const char *moq_model_supported_list(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0] && o < n; i++) {
        int w = snprintf(buf + o, n - o, "%s%s", i ? ", " : "", arch_rows[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}

typedef struct layer {
    moq_layer_linear qkv, o, gate_up, down;
    moq_moe         *moe;                /* MoE: router + experts (src/moe), NULL when dense  */
    moq_moe_format   moe_fmt;
    bool             is_moe;             /* routed experts in place of the dense MLP          */
    int64_t          window;             /* sliding window in positions, 0 = full causal      */
    float *in_norm, *post_norm;      /* f32 [H]          */
    float *q_norm, *k_norm;          /* f32 [D] or NULL  */
} layer;

struct moq_model {
    moq_checkpoint   *ckpt;
    moq_qconfig      *q;
    const arch_row   *arch;
    moq_model_opts    opts;
    int               n_threads;
    int64_t           H, A, KV, D, I, V, L, T, chunk;
    int64_t           E, topk, Ie;       /* experts, experts per token, expert intermediate  */
    bool              norm_topk;
    double            eps;
    layer            *layers;
    moq_layer_linear  embed, lm_head_own;
    const moq_layer_linear *lm_head;   /* &lm_head_own, or &embed when tied       */
    float            *final_norm;      /* f32 [H]                                  */
    float            *inv_freq;        /* f32 [D/2]                                */
    float             mscale;
    moq_kv_cache      kv;
    moq_blobs         blobs;
    int64_t           pos;
    /* workspace, allocated at open for `chunk` tokens */
    float  *x, *h, *qkv, *att, *tmp, *gu, *act, *logits_ws, *logits;
    float  *scratch;                   /* per thread: [T] scores + [D] row          */
    double *erow;                      /* f64 [H] embedding row                     */
    void   *lws;
    size_t  lws_size;
    moq_model_timings tm;
    const char *warn[MOQ_MODEL_MAX_WARN]; /* from the validation pass, in blobs */
    int         n_warn;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

moq_model_opts moq_model_opts_default(void) {
    moq_model_opts o;
    memset(&o, 0, sizeof o);
    o.compat = MOQ_COMPAT_MOQ;
    o.kv_elem = MOQ_ELEM_F32;
    o.cpu_mask = ~0u;
    return o;
}

/* A top-level boolean of config.json; *v unchanged when absent. */
static moq_status read_bool(const moq_checkpoint *c, const char *key, bool *v, moq_error *err) {
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text) return MOQ_OK;
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    bool present = false, b = false;
    const moq_status st = moq_json_bool(j, key, &b, &present, "config.json", NULL, err);
    if (st == MOQ_OK && present) *v = b;
    cJSON_Delete(j);
    return st;
}

/* rope_scaling details beyond moq_arch (llama3 and yarn parameters). */
/* RoPE settings: theta and the type's parameters from the object hf_config.c found
 * (rope_parameters or rope_scaling, maybe under text_config). A config without rope_theta takes
 * the architecture's documented default, with a note (*note, static text in `note`); a row
 * without one is an error: never a silent 10000. */
static moq_status read_rope(const moq_checkpoint *c, const moq_arch *a, moq_rope_params *p, char *note, size_t note_n, moq_error *err) {
    memset(p, 0, sizeof *p);
    note[0] = 0;
    snprintf(p->type, sizeof p->type, "%s", a->rope_scaling_type);
    p->theta = a->rope_theta;
    if (!a->rope_theta_key[0]) {
        const char *cls = NULL;
        if (!moq_model_rope_theta_default(a->architecture, &p->theta, &cls))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "rope_theta is missing (no rope_parameters.rope_theta, rope_theta or "
                            "rope_scaling.rope_theta) and %s has no documented default", a->architecture);
        snprintf(note, note_n, "config.json: no rope_theta (looked in rope_parameters, rope_theta, rope_scaling); %s's default %g is used",
                 cls, p->theta);
    }
    p->factor = a->rope_scaling_factor > 0 ? a->rope_scaling_factor : 1.0;
    p->low_freq_factor = 1.0;
    p->high_freq_factor = 4.0;
    p->original_max_pos = (double)a->max_position_embeddings;
    p->beta_fast = 32.0;
    p->beta_slow = 1.0;
    const char *text = moq_checkpoint_json_text(c, "config.json");
    if (!text || !a->rope_params_key[0]) return MOQ_OK;
    cJSON *j = NULL;
    MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    const bool in_text = strncmp(a->rope_params_key, "text_config.", 12) == 0;
    const cJSON *base = in_text ? cJSON_GetObjectItemCaseSensitive(j, "text_config") : j;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(base, in_text ? a->rope_params_key + 12 : a->rope_params_key);
    static const struct { const char *key; size_t off; } keys[] = {
        {"low_freq_factor", offsetof(moq_rope_params, low_freq_factor)},
        {"high_freq_factor", offsetof(moq_rope_params, high_freq_factor)},
        {"original_max_position_embeddings", offsetof(moq_rope_params, original_max_pos)},
        {"beta_fast", offsetof(moq_rope_params, beta_fast)},
        {"beta_slow", offsetof(moq_rope_params, beta_slow)},
        {"attention_factor", offsetof(moq_rope_params, attention_factor)},
    };
    moq_status st = MOQ_OK;
    for (size_t i = 0; rs && cJSON_IsObject(rs) && i < sizeof keys / sizeof keys[0] && st == MOQ_OK; i++) {
        bool present = false;
        double v = 0;
        st = moq_json_num(rs, keys[i].key, &v, &present, "config.json", a->rope_params_key, err);
        if (present) memcpy((char *)p + keys[i].off, &v, sizeof v);
    }
    cJSON_Delete(j);
    return st;
}

/* sliding_window of config.json: a positive integer, null (-> *v = 0, no window) or absent (*v unchanged). */
static moq_status read_window(const cJSON *j, int64_t *v, moq_error *err) {
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window"))) {
        *v = 0;
        return MOQ_OK;
    }
    bool present = false;
    MOQ_TRY(moq_json_int(j, "sliding_window", v, &present, "config.json", NULL, err));
    if (present && *v < 1) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "sliding_window %lld, expected a positive integer or null", (long long)*v);
    return MOQ_OK;
}

/* Per-layer plan from config.json j: each layer's attention window (arch_row.window) and whether it
 * holds routed experts (arch_row.moe_block, narrowed by arch_row.sparse_step). *n_moe: MoE layers. */
static moq_status plan_layers(moq_model *m, const cJSON *j, int64_t *n_moe, moq_error *err) {
    const arch_row *r = m->arch;
    int64_t win = r->window == WINDOW_NONE ? 0 : r->window_default, from = 0, step = 1;
    bool use = r->window != WINDOW_QWEN2, present = false;
    if (r->window != WINDOW_NONE) MOQ_TRY(read_window(j, &win, err));
    if (r->window == WINDOW_QWEN2) {
        from = r->max_window_default;
        MOQ_TRY(moq_json_bool(j, "use_sliding_window", &use, &present, "config.json", NULL, err));
        MOQ_TRY(moq_json_int(j, "max_window_layers", &from, &present, "config.json", NULL, err));
    }
    const cJSON *only = NULL;
    if (r->sparse_step) {
        MOQ_TRY(moq_json_int(j, "decoder_sparse_step", &step, &present, "config.json", NULL, err));
        if (step < 1) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "decoder_sparse_step %lld, expected >= 1", (long long)step);
        only = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_only_layers is %s, expected an array of layer indices", moq_json_type(only));
    }
    /* Qwen3MoeDecoderLayer: experts iff l not in mlp_only_layers, num_experts > 0 and (l + 1) % step == 0 */
    const bool experts = r->moe_block && (!r->sparse_step || m->E > 0);
    for (int64_t l = 0; l < m->L; l++) {
        m->layers[l].is_moe = experts && (l + 1) % step == 0;
        m->layers[l].window = use && l >= from ? win : 0;
    }
    const cJSON *e = NULL, *arr = cJSON_IsArray(only) ? only : NULL;
    int i = 0;
    cJSON_ArrayForEach(e, arr) {
        if (!moq_json_is_int(e, 0, (double)(m->L - 1)))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "mlp_only_layers[%d] is %s, expected a layer index in [0, %lld)", i,
                            cJSON_IsNumber(e) ? "out of range or not an integer" : moq_json_type(e), (long long)m->L);
        m->layers[(int64_t)e->valuedouble].is_moe = false;
        i++;
    }
    *n_moe = 0;
    for (int64_t l = 0; l < m->L; l++) *n_moe += m->layers[l].is_moe;
    return MOQ_OK;
}

static moq_status read_layer_plan(moq_model *m, int64_t *n_moe, moq_error *err) {
    const char *text = moq_checkpoint_json_text(m->ckpt, "config.json");
    cJSON *j = NULL;
    if (text) MOQ_TRY(moq_json_parse(&j, text, strlen(text), "config.json", err));
    else j = cJSON_CreateObject();
    if (!j) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "config.json", "out of memory");
    const moq_status st = plan_layers(m, j, n_moe, err);
    cJSON_Delete(j);
    return st;
}

static void progress(const moq_model *m, uint64_t done, uint64_t total) {
    if (m->opts.progress) m->opts.progress(m->opts.progress_user, "load", done, total);
}

/* Whose scale handling the experts follow, per resolution profile (one row each). */
static const moq_moe_compat moe_compat_of[MOQ_COMPAT_COUNT] = {
    [MOQ_COMPAT_MOQ] = MOQ_MOE_COMPAT_EXACT, [MOQ_COMPAT_VLLM] = MOQ_MOE_COMPAT_VLLM, [MOQ_COMPAT_SGLANG] = MOQ_MOE_COMPAT_SGLANG,
};

/* Router and experts of layer l through src/moe: the experts module is resolved once (kind
 * MOQ_KIND_MOE), the method picks the expert format; softmax top-k routing, SiLU-gated experts. */
static moq_status open_moe(moq_model *m, int64_t l, const moq_linear_opts *lo, moq_error *err) {
    layer *ly = &m->layers[l];
    char p[256], e[300];
    snprintf(p, sizeof p, "model.layers.%lld.%s", (long long)l, m->arch->moe_block);
    snprintf(e, sizeof e, "%s.experts", p);
    moq_resolution res = {.method = moq_method_name(MOQ_METHOD_NONE), .rule = "no-quantization-config"};
    if (m->q) MOQ_TRY(moq_resolve(m->q, e, MOQ_KIND_MOE, NULL, 0, &res, err));
    moq_moe_opts mo = moq_moe_opts_default();
    if (moq_moe_format_from_method(res.method, &mo.format, err) != MOQ_OK)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, e, "resolved to %s (rule %s), which is not an expert method", res.method, res.rule);
    mo.act = MOQ_MOE_ACT_SILU;
    mo.routing.scoring = MOQ_MOE_SCORE_SOFTMAX;
    mo.routing.top_k = (int)m->topk;
    mo.routing.renormalize = m->norm_topk;
    mo.num_experts = m->E;
    mo.router = "gate";
    mo.compat = moe_compat_of[m->opts.compat < MOQ_COMPAT_COUNT ? m->opts.compat : MOQ_COMPAT_MOQ];
    mo.n_threads = lo->n_threads;
    mo.cpu_mask = lo->cpu_mask;
    ly->moe_fmt = mo.format;
    const double t0 = now_s();
    const moq_status st = moq_moe_create(&ly->moe, m->ckpt, p, &mo, err);
    m->blobs.pack_s += now_s() - t0;
    return st;
}

static moq_status open_layers(moq_model *m, const moq_linear_opts *lo, moq_error *err) {
    const moq_checkpoint *c = m->ckpt;
    char p[256], n[320];
    for (int64_t l = 0; l < m->L; l++) {
        layer *ly = &m->layers[l];
        snprintf(p, sizeof p, "model.layers.%lld.self_attn.qkv_proj", (long long)l);
        MOQ_TRY(moq_layers_load_linear(&ly->qkv, c, m->q, p, MOQ_KIND_LINEAR, qkv_shards, 3, lo, &m->blobs, err));
        snprintf(p, sizeof p, "model.layers.%lld.self_attn.o_proj", (long long)l);
        MOQ_TRY(moq_layers_load_linear(&ly->o, c, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, &m->blobs, err));
        if (ly->is_moe) MOQ_TRY(open_moe(m, l, lo, err));
        else {
            snprintf(p, sizeof p, "model.layers.%lld.mlp.gate_up_proj", (long long)l);
            MOQ_TRY(moq_layers_load_linear(&ly->gate_up, c, m->q, p, MOQ_KIND_LINEAR, gate_up_shards, 2, lo, &m->blobs, err));
            snprintf(p, sizeof p, "model.layers.%lld.mlp.down_proj", (long long)l);
            MOQ_TRY(moq_layers_load_linear(&ly->down, c, m->q, p, MOQ_KIND_LINEAR, NULL, 1, lo, &m->blobs, err));
        }
        const int64_t qkvN = (m->A + 2 * m->KV) * m->D;
        if (ly->qkv.w.N != qkvN || ly->qkv.w.K != m->H || ly->qkv.w.row0[1] != m->A * m->D)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->qkv.name, "qkv rows %lld (q %lld), K %lld; expected (%lld + 2 x %lld) x %lld rows, q %lld, K = hidden %lld",
                            (long long)ly->qkv.w.N, (long long)ly->qkv.w.row0[1], (long long)ly->qkv.w.K, (long long)m->A, (long long)m->KV,
                            (long long)m->D, (long long)(m->A * m->D), (long long)m->H);
        if (ly->o.w.N != m->H || ly->o.w.K != m->A * m->D)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->o.name, "o_proj shape [%lld, %lld], expected [%lld, %lld]", (long long)ly->o.w.N,
                            (long long)ly->o.w.K, (long long)m->H, (long long)(m->A * m->D));
        if (!ly->is_moe && (ly->gate_up.w.N != 2 * m->I || ly->gate_up.w.row0[1] != m->I || ly->gate_up.w.K != m->H || ly->down.w.N != m->H || ly->down.w.K != m->I))
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, ly->down.name, "mlp shapes gate_up [%lld, %lld], down [%lld, %lld]; expected [2 x %lld, %lld] and [%lld, %lld]",
                            (long long)ly->gate_up.w.N, (long long)ly->gate_up.w.K, (long long)ly->down.w.N, (long long)ly->down.w.K,
                            (long long)m->I, (long long)m->H, (long long)m->H, (long long)m->I);
        snprintf(n, sizeof n, "model.layers.%lld.input_layernorm.weight", (long long)l);
        MOQ_TRY(moq_layers_f32(&ly->in_norm, c, n, m->H, &m->blobs, err));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm.weight", (long long)l);
        MOQ_TRY(moq_layers_f32(&ly->post_norm, c, n, m->H, &m->blobs, err));
        if (m->arch->qk_norm) {
            snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_norm.weight", (long long)l);
            MOQ_TRY(moq_layers_f32(&ly->q_norm, c, n, m->D, &m->blobs, err));
            snprintf(n, sizeof n, "model.layers.%lld.self_attn.k_norm.weight", (long long)l);
            MOQ_TRY(moq_layers_f32(&ly->k_norm, c, n, m->D, &m->blobs, err));
        }
        progress(m, (uint64_t)l + 1, (uint64_t)m->L);
    }
    return MOQ_OK;
}

/* FP8 (or other scaled) KV: per-layer scales from the checkpoint, or 1.0 in every layer when none
 * has any (config/modules.c decides, as `moq check` does; the note came with the validation pass). */
static moq_status open_kv_scales(moq_model *m, moq_error *err) {
    bool defaulted;
    return moq_kv_scales_read(m->ckpt, m->L, m->kv.k_scale, m->kv.v_scale, &defaulted, err);
}

static moq_status alloc_ws(moq_model *m, moq_error *err) {
    const int64_t C = m->chunk, qkvN = (m->A + 2 * m->KV) * m->D, I = m->I;
    struct { float **p; int64_t n; } bufs[] = {
        {&m->x, C * m->H}, {&m->h, C * m->H}, {&m->qkv, C * qkvN}, {&m->att, C * m->A * m->D}, {&m->tmp, C * m->H},
        {&m->gu, C * 2 * I}, {&m->act, C * I}, {&m->logits_ws, C * m->V}, {&m->logits, m->V},
        {&m->scratch, (int64_t)m->n_threads * (m->T + m->D)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i].p = moq_blobs_alloc(&m->blobs, (size_t)bufs[i].n * sizeof(float));
        if (!*bufs[i].p) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %lld floats of workspace", (long long)bufs[i].n);
    }
    m->erow = moq_blobs_alloc(&m->blobs, (size_t)m->H * sizeof(double));
    size_t ws = moq_linear_workspace_size(m->lm_head->lin, C);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        const moq_layer_linear *ls[] = {&ly->qkv, &ly->o, &ly->gate_up, &ly->down};
        for (int i = 0; i < 4; i++) {
            size_t s = ls[i]->lin ? moq_linear_workspace_size(ls[i]->lin, C) : 0;
            if (s > ws) ws = s;
        }
        const size_t sm = ly->moe ? moq_moe_workspace_size(ly->moe, C) : 0;
        if (sm > ws) ws = sm;
    }
    m->lws_size = ws;
    m->lws = moq_blobs_alloc(&m->blobs, ws);
    if (!m->erow || !m->lws) return MOQ_FAIL(err, MOQ_ERR_NOMEM, moq_checkpoint_path(m->ckpt), "out of memory for %zu bytes of linear workspace", ws);
    return MOQ_OK;
}

static moq_status open_model(moq_model *m, const char *dir, moq_error *err) {
    const double t0 = now_s();
    MOQ_TRY(moq_checkpoint_open(&m->ckpt, dir, NULL, err));
    const moq_arch *a = moq_checkpoint_arch(m->ckpt);
    if (!a) return MOQ_FAIL(err, MOQ_ERR_CONFIG, dir, "no config.json, expected one naming the architecture");
    for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        if (strcmp(arch_rows[i].name, a->architecture) == 0) m->arch = &arch_rows[i];
    char list[512];
    if (!m->arch)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "config.json", "architecture \"%s\", expected one of %s", a->architecture,
                        moq_model_supported_list(list, sizeof list));
    if (moq_checkpoint_has_qconfig(m->ckpt)) MOQ_TRY(moq_qconfig_open(&m->q, dir, m->opts.compat, err));
    m->H = a->hidden_size;
    m->A = a->num_attention_heads;
    m->KV = a->num_key_value_heads ? a->num_key_value_heads : a->num_attention_heads;
    m->D = a->head_dim ? a->head_dim : (m->A ? m->H / m->A : 0);
    m->I = a->intermediate_size;
    m->V = a->vocab_size;
    m->L = a->num_hidden_layers;
    m->eps = a->rms_norm_eps > 0 ? a->rms_norm_eps : 1e-6;
    if (m->arch->moe_block) {
        m->E = a->num_experts;
        m->topk = a->num_experts_per_tok;
        m->Ie = a->moe_intermediate_size ? a->moe_intermediate_size : a->intermediate_size;
        m->norm_topk = m->arch->norm_topk;
        MOQ_TRY(read_bool(m->ckpt, "norm_topk_prob", &m->norm_topk, err));
    }
    if (m->H < 1 || m->A < 1 || m->KV < 1 || m->A % m->KV || m->D < 2 || m->V < 1 || m->L < 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "hidden_size %lld, num_attention_heads %lld, num_key_value_heads %lld, head_dim %lld, "
                        "vocab_size %lld, num_hidden_layers %lld; expected positive values with heads %% kv_heads == 0",
                        (long long)m->H, (long long)m->A, (long long)m->KV, (long long)m->D, (long long)m->V, (long long)m->L);
    m->layers = moq_blobs_alloc(&m->blobs, (size_t)m->L * sizeof(layer));
    if (!m->layers) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld layers", (long long)m->L);
    int64_t n_moe = 0;
    MOQ_TRY(read_layer_plan(m, &n_moe, err));
    if (n_moe > 0 && (m->E < 1 || m->topk < 1 || m->topk > m->E || m->Ie < 1))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "num_experts %lld, num_experts_per_tok %lld, expert intermediate size %lld; expected 1 <= per_tok <= experts and a positive size",
                        (long long)m->E, (long long)m->topk, (long long)m->Ie);
    if (n_moe == m->L) m->I = 1; /* the dense MLP buffers are unused */
    if (m->I < 1)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, "config.json", "intermediate_size %lld with %lld dense MLP layers; expected a positive size",
                        (long long)m->I, (long long)(m->L - n_moe));
    m->T = m->opts.ctx > 0 ? m->opts.ctx : (a->max_position_embeddings > 0 && a->max_position_embeddings < 4096 ? a->max_position_embeddings : 4096);
    m->chunk = m->T < MOQ_MODEL_CHUNK ? m->T : MOQ_MODEL_CHUNK;
    moq_rope_params rp;
    char rope_note[320];
    MOQ_TRY(read_rope(m->ckpt, a, &rp, rope_note, sizeof rope_note, err));
    if (rope_note[0] && m->n_warn < MOQ_MODEL_MAX_WARN) {
        char *w = moq_blobs_alloc(&m->blobs, sizeof rope_note);
        if (!w) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        memcpy(w, rope_note, sizeof rope_note);
        m->warn[m->n_warn++] = w;
    }
    m->inv_freq = moq_blobs_alloc(&m->blobs, (size_t)m->D / 2 * sizeof(float));
    if (!m->inv_freq) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for %lld rope frequencies", (long long)m->D / 2);
    MOQ_TRY(moq_rope_inv_freq(&rp, m->D, m->inv_freq, &m->mscale, err));
    m->tm.open_s = now_s() - t0;

    /* validate: every module of the checkpoint against its resolved scheme's contract, all at once
     * (the `moq check` pass); the first problem is the error */
    const double tv = now_s();
    moq_modules mods;
    memset(&mods, 0, sizeof mods);
    moq_status vst = moq_modules_build(&mods, m->ckpt, m->q, err);
    if (vst == MOQ_OK) vst = moq_modules_check(&mods, m->ckpt, m->q, false, err);
    /* what `moq check` reports is kept as warnings: the loader below decides what is fatal (a missing
     * or malformed tensor), the rest (fused shards with different input scales, ...) runs */
    for (int i = 0; vst == MOQ_OK && i < mods.n_probs && m->n_warn < MOQ_MODEL_MAX_WARN; i++) {
        char *w = moq_blobs_alloc(&m->blobs, 800);
        if (!w) vst = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        else snprintf(w, 800, "%.256s: %.512s", mods.probs[i].where, mods.probs[i].msg);
        m->warn[m->n_warn++] = w;
    }
    for (int i = 0; vst == MOQ_OK && i < mods.notes.n && m->n_warn < MOQ_MODEL_MAX_WARN; i++) {
        char *w = moq_blobs_alloc(&m->blobs, 800);
        if (!w) vst = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for warnings");
        else snprintf(w, 800, "%s", moq_notes_at(&mods.notes, i));
        m->warn[m->n_warn++] = w;
    }
    moq_modules_free(&mods);
    m->tm.validate_s = now_s() - tv;
    MOQ_TRY(vst);

    moq_linear_opts lo = moq_linear_opts_default();
    lo.n_threads = m->n_threads;
    lo.cpu_mask = m->opts.cpu_mask;
    MOQ_TRY(moq_layers_load_linear(&m->embed, m->ckpt, m->q, "model.embed_tokens", MOQ_KIND_EMBEDDING, NULL, 0, &lo, &m->blobs, err));
    if (m->embed.w.N != m->V || m->embed.w.K != m->H)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, "model.embed_tokens.weight", "shape [%lld, %lld], expected [vocab_size %lld, hidden_size %lld]",
                        (long long)m->embed.w.N, (long long)m->embed.w.K, (long long)m->V, (long long)m->H);
    MOQ_TRY(open_layers(m, &lo, err));
    MOQ_TRY(moq_layers_f32(&m->final_norm, m->ckpt, "model.norm.weight", m->H, &m->blobs, err));
    if (moq_checkpoint_tensor(m->ckpt, "lm_head.weight") || !a->tie_word_embeddings) {
        MOQ_TRY(moq_layers_load_linear(&m->lm_head_own, m->ckpt, m->q, "lm_head", MOQ_KIND_LM_HEAD, NULL, 1, &lo, &m->blobs, err));
        if (m->lm_head_own.w.N != m->V || m->lm_head_own.w.K != m->H)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, "lm_head.weight", "shape [%lld, %lld], expected [%lld, %lld]", (long long)m->lm_head_own.w.N,
                            (long long)m->lm_head_own.w.K, (long long)m->V, (long long)m->H);
        m->lm_head = &m->lm_head_own;
    } else {
        m->lm_head = &m->embed;
    }
    m->tm.pack_s = m->blobs.validate_s + m->blobs.pack_s; /* loading and packing every layer */

    /* KV cache: the config's kv_cache_quant_algo picks the encoding (kv_cache.c table) */
    moq_elem ke;
    bool scaled;
    MOQ_TRY(moq_kv_elem_for_algo(m->q ? moq_qconfig_kv_cache_quant_algo(m->q) : NULL, m->opts.kv_elem, &ke, &scaled, err));
    MOQ_TRY(moq_kv_cache_create(&m->kv, ke, m->L, m->T, m->KV * m->D, err));
    if (scaled) MOQ_TRY(open_kv_scales(m, err));
    return alloc_ws(m, err);
}

moq_status moq_model_open(moq_model **out, const char *dir, const moq_model_opts *opts, moq_error *err) {
    if (!out || !dir) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_model_open", "out and dir must not be NULL");
    *out = NULL;
    moq_model *m = calloc(1, sizeof *m);
    if (!m) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory");
    m->opts = opts ? *opts : moq_model_opts_default();
    if (m->opts.kv_elem != MOQ_ELEM_F32 && m->opts.kv_elem != MOQ_ELEM_BF16) {
        free(m);
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, dir, "kv_elem %s, expected f32 or bf16", moq_elem_name(opts->kv_elem));
    }
    m->n_threads = m->opts.n_threads > 0 ? m->opts.n_threads : omp_get_max_threads();
    moq_status st = open_model(m, dir, err);
    if (st != MOQ_OK) {
        moq_model_free(m);
        return st;
    }
    *out = m;
    return MOQ_OK;
}

void moq_model_free(moq_model *m) {
    if (!m) return;
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        moq_layers_close_linear(&m->layers[l].qkv);
        moq_layers_close_linear(&m->layers[l].o);
        moq_layers_close_linear(&m->layers[l].gate_up);
        moq_layers_close_linear(&m->layers[l].down);
        moq_moe_free(m->layers[l].moe);
    }
    moq_layers_close_linear(&m->embed);
    moq_layers_close_linear(&m->lm_head_own);
    moq_kv_cache_free(&m->kv);
    moq_blobs_free(&m->blobs);
    moq_qconfig_free(m->q);
    moq_checkpoint_free(m->ckpt);
    free(m);
}

static void rmsnorm(float *out, const float *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static moq_status run_linear(moq_model *m, const moq_layer_linear *l, const float *x, int64_t M, float *y, moq_error *err) {
    return moq_linear_run(l->lin, x, MOQ_ELEM_F32, M, y, MOQ_ELEM_F32, m->lws, m->lws_size, err);
}

/* Causal attention of M new tokens (positions p0..p0+M-1) over the cache, one (token, head) per
 * task; a sliding-window layer (window W > 0) sees positions npos - W .. npos - 1 (the last W,
 * the current one included; arch_row.window). out f32 [M, A D]. */
static void attention(moq_model *m, int64_t l, int64_t p0, int64_t M) {
    const int64_t A = m->A, D = m->D, grp = A / m->KV, qkvN = (A + 2 * m->KV) * D, W = m->layers[l].window;
    const float sc = 1.0f / sqrtf((float)D);
#pragma omp parallel for num_threads(m->n_threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < M * A; t++) {
        const int64_t i = t / A, hd = t % A, kvh = hd / grp, npos = p0 + i + 1, p_lo = W > 0 && npos > W ? npos - W : 0;
        float *s = m->scratch + (int64_t)omp_get_thread_num() * (m->T + D), *row = s + m->T;
        const float *q = m->qkv + i * qkvN + hd * D;
        float mx = -INFINITY;
        for (int64_t p = p_lo; p < npos; p++) {
            moq_kv_cache_read(&m->kv, 0, l, p, kvh * D, D, row);
            float d = 0;
            for (int64_t e = 0; e < D; e++) d += q[e] * row[e];
            s[p] = d * sc;
            if (s[p] > mx) mx = s[p];
        }
        float sum = 0;
        for (int64_t p = p_lo; p < npos; p++) {
            s[p] = expf(s[p] - mx);
            sum += s[p];
        }
        float *o = m->att + i * A * D + hd * D;
        memset(o, 0, (size_t)D * sizeof(float));
        for (int64_t p = p_lo; p < npos; p++) {
            moq_kv_cache_read(&m->kv, 1, l, p, kvh * D, D, row);
            const float wgt = s[p] / sum;
            for (int64_t e = 0; e < D; e++) o[e] += wgt * row[e];
        }
    }
}

/* act [M, I] = silu(gate) * up of gu [M, 2I] (gate = first half; NUMERICS §7, one f32 rounding). */
static void swiglu(const float *gu, int64_t M, int64_t I, float *act) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t e = 0; e < I; e++) {
            const float g = gu[i * 2 * I + e], u = gu[i * 2 * I + I + e];
            act[i * I + e] = g / (1.0f + expf(-g)) * u;
        }
}

/* Routed experts on h [M, H] (src/moe: router, top-k, each expert once over its tokens), added into x. */
static moq_status moe_block(moq_model *m, const layer *ly, int64_t M, moq_error *err) {
    MOQ_TRY(moq_moe_run(ly->moe, m->h, MOQ_ELEM_F32, M, NULL, m->tmp, MOQ_ELEM_F32, m->lws, m->lws_size, err));
    for (int64_t c = 0; c < M * m->H; c++) m->x[c] += m->tmp[c];
    return MOQ_OK;
}

/* Non-finite outputs. The logits of every step are checked (V values: cheap next to the step);
 * when one is not finite the step is run again with every module's output checked, and the first
 * module whose output is not finite while its input was is named (the step's positions are
 * rewritten with the same values; m->pos is not advanced). */
static int64_t first_nonfinite(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return i;
    return -1;
}

static moq_status check_out(const moq_model *m, const float *p, int64_t rows, int64_t cols, const char *where, moq_error *err) {
    const int64_t i = first_nonfinite(p, rows * cols);
    if (i < 0) return MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, where,
                    "output is not finite (%s at token %lld of the step, position %lld, column %lld) while its input was; "
                    "its weights or scales hold NaN/Inf (`moq check --values` names them)",
                    isnan(p[i]) ? "NaN" : "Inf", (long long)(i / cols), (long long)(m->pos + i / cols), (long long)(i % cols));
}

/* One chunk of M <= chunk tokens at position m->pos. logits_rows: f32 [M, V] or NULL (last only).
 * locate: check every module's output (after a step whose logits were not finite). */
static moq_status forward_chunk(moq_model *m, const int32_t *tok, int64_t M, float *logits_rows, bool locate, moq_error *err) {
    const int64_t H = m->H, D = m->D, A = m->A, KV = m->KV, I = m->I, qkvN = (A + 2 * KV) * D, p0 = m->pos;
    char where[300];
#define CHECK(p, rows, cols, ...)                                                                  \
    do {                                                                                           \
        if (locate) {                                                                              \
            snprintf(where, sizeof where, __VA_ARGS__);                                            \
            MOQ_TRY(check_out(m, p, rows, cols, where, err));                                      \
        }                                                                                          \
    } while (0)
    for (int64_t i = 0; i < M; i++) {
        moq_weight_dequant_row(&m->embed.w, tok[i], m->erow);
        for (int64_t e = 0; e < H; e++) m->x[i * H + e] = (float)m->erow[e];
    }
    CHECK(m->x, M, H, "%s", m->embed.name);
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->x + i * H, ly->in_norm, H, m->eps);
        CHECK(m->h, M, H, "model.layers.%lld.input_layernorm", (long long)l);
        MOQ_TRY(run_linear(m, &ly->qkv, m->h, M, m->qkv, err));
        CHECK(m->qkv, M, qkvN, "%s", ly->qkv.name);
        for (int64_t i = 0; i < M; i++) {
            float *q = m->qkv + i * qkvN, *k = q + A * D, *v = k + KV * D;
            for (int64_t hd = 0; hd < A; hd++) {
                if (ly->q_norm) rmsnorm(q + hd * D, q + hd * D, ly->q_norm, D, m->eps);
                moq_rope_apply(q + hd * D, D, p0 + i, m->inv_freq, m->mscale);
            }
            for (int64_t hd = 0; hd < KV; hd++) {
                if (ly->k_norm) rmsnorm(k + hd * D, k + hd * D, ly->k_norm, D, m->eps);
                moq_rope_apply(k + hd * D, D, p0 + i, m->inv_freq, m->mscale);
            }
            moq_kv_cache_write(&m->kv, l, p0 + i, k, v);
        }
        CHECK(m->qkv, M, qkvN, "model.layers.%lld.self_attn (q/k norm and rope)", (long long)l);
        attention(m, l, p0, M);
        CHECK(m->att, M, A * D, "model.layers.%lld.self_attn (attention)", (long long)l);
        MOQ_TRY(run_linear(m, &ly->o, m->att, M, m->tmp, err));
        CHECK(m->tmp, M, H, "%s", ly->o.name);
        for (int64_t e = 0; e < M * H; e++) m->x[e] += m->tmp[e];
        CHECK(m->x, M, H, "model.layers.%lld (residual after attention)", (long long)l);
        for (int64_t i = 0; i < M; i++) rmsnorm(m->h + i * H, m->x + i * H, ly->post_norm, H, m->eps);
        CHECK(m->h, M, H, "model.layers.%lld.post_attention_layernorm", (long long)l);
        if (ly->is_moe) {
            MOQ_TRY(moe_block(m, ly, M, err));
            CHECK(m->tmp, M, H, "model.layers.%lld.%s", (long long)l, m->arch->moe_block);
            CHECK(m->x, M, H, "model.layers.%lld (residual after the experts)", (long long)l);
            continue;
        }
        MOQ_TRY(run_linear(m, &ly->gate_up, m->h, M, m->gu, err));
        CHECK(m->gu, M, 2 * I, "%s", ly->gate_up.name);
        swiglu(m->gu, M, I, m->act);
        CHECK(m->act, M, I, "model.layers.%lld.mlp (silu(gate) * up)", (long long)l);
        MOQ_TRY(run_linear(m, &ly->down, m->act, M, m->tmp, err));
        CHECK(m->tmp, M, H, "%s", ly->down.name);
        for (int64_t e = 0; e < M * H; e++) m->x[e] += m->tmp[e];
        CHECK(m->x, M, H, "model.layers.%lld (residual after the MLP)", (long long)l);
    }
    /* logits: every row when asked, else only the last */
    const int64_t r0 = logits_rows ? 0 : M - 1, nr = M - r0;
    for (int64_t i = r0; i < M; i++) rmsnorm(m->h + (i - r0) * H, m->x + i * H, m->final_norm, H, m->eps);
    CHECK(m->h, nr, H, "model.norm");
    MOQ_TRY(run_linear(m, m->lm_head, m->h, nr, m->logits_ws, err));
    CHECK(m->logits_ws, nr, m->V, "%s", m->lm_head->name);
#undef CHECK
    const int64_t bad = first_nonfinite(m->logits_ws, nr * m->V);
    if (bad >= 0 && !locate) return forward_chunk(m, tok, M, logits_rows, true, err);
    if (bad >= 0) /* not reached: the located run stops at the module, at the latest at lm_head */
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, m->lm_head->name, "logits are not finite at column %lld, and no module output was on the second run",
                        (long long)(bad % m->V));
    if (logits_rows) memcpy(logits_rows, m->logits_ws, (size_t)(M * m->V) * sizeof(float));
    memcpy(m->logits, m->logits_ws + (nr - 1) * m->V, (size_t)m->V * sizeof(float));
    m->pos += M;
    return MOQ_OK;
}

moq_status moq_model_prefill(moq_model *m, const int32_t *tokens, int64_t n, float *logits_all, moq_error *err) {
    if (!m || !tokens || n < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_model_prefill", "model and tokens must not be NULL and n >= 1 (n=%lld)", (long long)n);
    if (m->pos + n > m->T)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_checkpoint_path(m->ckpt), "%lld cached + %lld new tokens exceed the context of %lld positions",
                        (long long)m->pos, (long long)n, (long long)m->T);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->V)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_checkpoint_path(m->ckpt), "token %d at index %lld, expected [0, %lld)", tokens[i],
                            (long long)i, (long long)m->V);
    for (int64_t i = 0; i < n; i += m->chunk) {
        const int64_t M = n - i < m->chunk ? n - i : m->chunk;
        MOQ_TRY(forward_chunk(m, tokens + i, M, logits_all ? logits_all + i * m->V : NULL, false, err));
    }
    return MOQ_OK;
}

moq_status moq_model_decode(moq_model *m, int32_t token, moq_error *err) { return moq_model_prefill(m, &token, 1, NULL, err); }
const float *moq_model_logits(const moq_model *m) { return m ? m->logits : NULL; }
void moq_model_reset(moq_model *m) {
    if (m) m->pos = 0;
}
int64_t moq_model_vocab_size(const moq_model *m) { return m ? m->V : 0; }
int64_t moq_model_ctx(const moq_model *m) { return m ? m->T : 0; }
int64_t moq_model_pos(const moq_model *m) { return m ? m->pos : 0; }
const char *moq_model_architecture(const moq_model *m) { return m ? m->arch->name : ""; }
int moq_model_warning_count(const moq_model *m) { return m ? m->n_warn : 0; }
const char *moq_model_warning(const moq_model *m, int i) { return m && i >= 0 && i < m->n_warn ? m->warn[i] : ""; }

moq_model_timings moq_model_load_timings(const moq_model *m) {
    moq_model_timings t = {0, 0, 0};
    return m ? m->tm : t;
}

static uint64_t weight_bytes(const moq_weight *w) {
    const uint64_t nk = (uint64_t)w->N * (uint64_t)w->K;
    uint64_t b = nk * (uint64_t)moq_elem_bits(w->w.elem) / 8;
    if (w->w.scale_elem != MOQ_ELEM_NONE && w->w.group_cols > 0)
        b += nk / (uint64_t)w->w.group_cols / (uint64_t)(w->w.group_rows > 0 ? w->w.group_rows : 1) * (uint64_t)moq_elem_bits(w->w.scale_elem) / 8;
    return b;
}

uint64_t moq_model_decode_bytes(const moq_model *m) {
    if (!m) return 0;
    uint64_t b = weight_bytes(&m->lm_head->w) + (uint64_t)m->H * (uint64_t)moq_elem_bits(m->embed.w.w.elem) / 8;
    for (int64_t l = 0; l < m->L; l++) {
        const layer *ly = &m->layers[l];
        b += weight_bytes(&ly->qkv.w) + weight_bytes(&ly->o.w) + weight_bytes(&ly->gate_up.w) + weight_bytes(&ly->down.w);
        /* MoE: the router and the k experts a token is routed to (all experts are the same size) */
        if (ly->moe) b += (uint64_t)(m->E * m->H) * 2 + (uint64_t)m->topk * moq_moe_expert_bytes(ly->moe_fmt, m->H, m->Ie);
    }
    return b;
}
