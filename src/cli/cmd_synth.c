/* cmd_synth.c — `moq synth DIR [--algo A] ...`: write a small synthetic Llama-shaped checkpoint the
 * way ModelOpt exports one (deterministic random bf16 weights; each linear written by its algo's row
 * of quant/export_linear.c), so the demo and the tests need no download. Covered by
 * tests/e2e/test_config_cli.sh, model_cli.sh and test_cli_inspect.c. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format/format.h"
#include "quant/export_linear.h"
#include "quant/export_ref.h"

void cmd_synth_help(FILE *out) {
    fprintf(out,
            "usage: moq synth DIR [--algo A] [--layers L] [--hidden H] [--inter I] [--heads A]\n"
            "                     [--kv-heads KV] [--vocab V] [--shards S] [--seed N]\n"
            "                     [--arch llama|qwen3moe|mixtral] [--experts E] [--top-k K]\n\n"
            "Writes a LlamaForCausalLM checkpoint with deterministic random weights into DIR (created if\n"
            "missing): config.json (with quantization_config), hf_quant_config.json, and S safetensors\n"
            "shards (+ model.safetensors.index.json when S > 1). Linear layers are quantized as ModelOpt's\n"
            "exporter does (NUMERICS.md §2.3, §5.1); q/k/v and gate/up share their global scales; embeddings,\n"
            "norms and lm_head stay BF16 (lm_head is excluded). A: NVFP4, FP8, BF16, FP8_PER_CHANNEL_PER_TOKEN,\n"
            "FP8_PB_WO, W4A16_NVFP4, MXFP8 (NUMERICS.md §5.2, §5.3, §4.2), NVFP4_AWQ (a fixed synthetic AWQ\n"
            "scale s: weights W / s, pre_quant_scale s on every linear), or MIXED_PRECISION (FP8 attention and\n"
            "W4A16_NVFP4 MLP, like nvidia/Qwen3.6-27B-NVFP4). Defaults: NVFP4, 2 layers, hidden 256,\n"
            "inter 512, 4 heads, 2 kv heads, vocab 512, 1 shard, seed 1.\n"
            "--arch qwen3moe | mixtral [--experts E] [--top-k K] writes a Qwen3MoeForCausalLM (q/k norms,\n"
            "mlp.gate + mlp.experts.e.{gate,up,down}_proj) or MixtralForCausalLM (block_sparse_moe.gate +\n"
            "experts.e.{w1,w3,w2}) instead: E experts (default 4) of intermediate size I, K per token (default 2),\n"
            "routers unquantized; the expert tensors follow A like the dense MLP's.\n"
            "With --vocab 259 or more it also writes tokenizer.json and tokenizer_config.json: a byte-level BPE\n"
            "(GPT-2 pre-tokenizer; <unk> <s> </s> at ids 0-2, the 256 bytes at 3-258, then two-letter merges),\n"
            "so `moq run DIR -p TEXT` works on the result.\n");
}

/* Checkpoints whose linears mix two algos: attention in one, the MLP (and experts) in another. */
typedef struct synth_mix {
    const char *algo;       /* the config's quant_algo      */
    const char *attn_algo;  /* q/k/v/o_proj: an export row   */
    const char *mlp_algo;   /* MLP and experts: an export row */
} synth_mix;

/* MIXED_PRECISION is shaped like nvidia/Qwen3.6-27B-NVFP4: FP8 attention, W4A16_NVFP4 MLP. */
static const synth_mix k_mixes[] = {
    {"MIXED_PRECISION", "FP8", "W4A16_NVFP4"},
};

typedef struct synth {
    moq_writer *w;
    void      **bufs;    /* everything the writer borrows until finish */
    size_t      n_bufs;
    uint64_t    rng;
    char       *layers_json;  /* MIXED_PRECISION: the quantized_layers entries written so far */
    size_t      layers_cap;
} synth;

/* Frees the writer and everything it borrowed. */
static void synth_release(synth *s) {
    moq_writer_free(s->w);
    for (size_t i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
    free(s->bufs);
    free(s->layers_json);
    *s = (synth){0};
}

static void *keep(synth *s, size_t n) {
    void *p = calloc(1, n ? n : 1);
    void **b = p ? realloc(s->bufs, (s->n_bufs + 1) * sizeof *b) : NULL;
    if (!b) {
        free(p);
        return NULL;
    }
    s->bufs = b;
    b[s->n_bufs++] = p;
    return p;
}

static double uniform(uint64_t *st) { /* splitmix64 -> [0, 1) */
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53;
}

/* Approximately normal(0, std) values, rounded to bf16 (the model dtype). */
static void fill_bf16_values(synth *s, float *x, size_t n, double std) {
    for (size_t i = 0; i < n; i++) {
        double g = uniform(&s->rng) + uniform(&s->rng) + uniform(&s->rng) - 1.5; /* var 1/4 */
        x[i] = moq_bf16_decode(moq_bf16_encode_rne((float)(2.0 * g * std)));
    }
}

static moq_status add_bf16(synth *s, const char *name, int ndim, const int64_t *shape, double std, double mean,
                           moq_error *err) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    float *tmp = malloc(n * sizeof *tmp);
    uint16_t *h = keep(s, n * 2);
    if (!tmp || !h) {
        free(tmp);
        return MOQ_ERR_NOMEM;
    }
    fill_bf16_values(s, tmp, n, std);
    for (size_t i = 0; i < n; i++) h[i] = moq_bf16_encode_rne(tmp[i] + (float)mean);
    free(tmp);
    return moq_writer_add(s->w, name, MOQ_DT_BF16, ndim, shape, h, n * 2, err);
}

/* A fused group (q/k/v or gate/up): shards share the weight amax and the input scale. */
static moq_status add_group(synth *s, const char *prefix, const char *const *names, const int64_t *ns, int count,
                            int64_t K, const moq_export_linear_row *row, moq_error *err) {
    float *w[4] = {0};
    float amax = 0;
    moq_status st = MOQ_OK;
    for (int i = 0; i < count; i++) {
        w[i] = malloc((size_t)(ns[i] * K) * sizeof(float));
        if (!w[i]) { st = MOQ_ERR_NOMEM; goto done; }
        fill_bf16_values(s, w[i], (size_t)(ns[i] * K), 1.0 / sqrt((double)K));
        float a = moq_amax_f32(w[i], (size_t)(ns[i] * K));
        if (a > amax) amax = a;
    }
    const float act_amax = 4.0f; /* calibrated activation amax of the synthetic model */
    for (int i = 0; i < count && st == MOQ_OK; i++) {
        char nm[256];
        const int64_t N = ns[i];
        if (s->layers_json) { /* MIXED_PRECISION: record the per-layer algo */
            size_t o = strlen(s->layers_json);
            char gsz[32] = "";
            if (row->group_size) snprintf(gsz, sizeof gsz, ", \"group_size\": %d", row->group_size);
            snprintf(s->layers_json + o, s->layers_cap - o, "%s\"%s.%s\": {\"quant_algo\": \"%s\"%s}", o ? ", " : "", prefix, names[i],
                     row->algo, gsz);
        }
        moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS];
        int nt = 0;
        snprintf(nm, sizeof nm, "%s.%s", prefix, names[i]);
        if ((st = moq_export_linear_plan(row, nm, N, K, t, &nt, err))) break;
        for (int j = 0; j < nt && st == MOQ_OK; j++)
            if (!(t[j].data = keep(s, (size_t)t[j].nbytes))) st = MOQ_ERR_NOMEM;
        if (st || (st = moq_export_linear_run(row, nm, w[i], N, K, amax, act_amax, t, nt, err))) break;
        for (int j = 0; j < nt && st == MOQ_OK; j++) {
            snprintf(nm, sizeof nm, "%s.%s.%s", prefix, names[i], t[j].suffix);
            st = moq_writer_add(s->w, nm, t[j].dtype, t[j].ndim, t[j].shape, t[j].data, t[j].nbytes, err);
        }
    }
done:
    for (int i = 0; i < count; i++) free(w[i]);
    return st;
}

/* ---- the byte-level tokenizer written beside the weights ------------------------------------- */

#define SYNTH_TOK_SPECIALS 3  /* <unk> <s> </s>: ids 0, 1, 2 (config.json bos_token_id 1, eos 2) */
#define SYNTH_TOK_MIN_VOCAB (SYNTH_TOK_SPECIALS + 256)

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others (0-32, 127-160, 173)
 * for U+0100 onwards in byte order. Writes the UTF-8 of byte b's character into out (NUL-terminated). */
static void byte_char(unsigned b, char out[4]) {
    unsigned cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++) k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + k;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
}

/* tokenizer.json of a byte-level BPE (the GPT-2 pre-tokenizer and decoder, as Hugging Face
 * `tokenizers` writes one): 3 special tokens, the 256 bytes at ids 3..258, then merges of
 * (space or a-z) x (a-z) pairs up to `vocab` ids (at most 702), so sampled ids print text. NULL on
 * allocation failure; caller frees. */
static char *byte_tokenizer_json(long vocab) {
    static const char *const specials[SYNTH_TOK_SPECIALS] = {"<unk>", "<s>", "</s>"};
    cJSON *root = cJSON_CreateObject(), *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    for (int i = 0; i < SYNTH_TOK_SPECIALS; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", i);
        cJSON_AddStringToObject(t, "content", specials[i]);
        cJSON_AddBoolToObject(t, "single_word", false);
        cJSON_AddBoolToObject(t, "lstrip", false);
        cJSON_AddBoolToObject(t, "rstrip", false);
        cJSON_AddBoolToObject(t, "normalized", false);
        cJSON_AddBoolToObject(t, "special", true);
        cJSON_AddItemToArray(added, t);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", false);
    cJSON_AddBoolToObject(pre, "trim_offsets", true);
    cJSON_AddBoolToObject(pre, "use_regex", true);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", true);
    cJSON_AddBoolToObject(dec, "trim_offsets", true);
    cJSON_AddBoolToObject(dec, "use_regex", true);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", false);
    cJSON_AddBoolToObject(model, "byte_fallback", false);
    cJSON_AddBoolToObject(model, "ignore_merges", false);
    cJSON *v = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < SYNTH_TOK_SPECIALS; i++) cJSON_AddNumberToObject(v, specials[i], i);
    for (unsigned b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        cJSON_AddNumberToObject(v, c, SYNTH_TOK_SPECIALS + (int)b);
    }
    static const char first[] = " abcdefghijklmnopqrstuvwxyz";
    long id = SYNTH_TOK_MIN_VOCAB;
    for (size_t a = 0; a < sizeof first - 1 && id < vocab; a++)
        for (char b = 'a'; b <= 'z' && id < vocab; b++, id++) {
            char l[4], r[4], tok[8], m[12];
            byte_char((unsigned char)first[a], l);
            byte_char((unsigned char)b, r);
            snprintf(tok, sizeof tok, "%s%s", l, r);
            snprintf(m, sizeof m, "%s %s", l, r);
            cJSON_AddNumberToObject(v, tok, (double)id);
            cJSON_AddItemToArray(merges, cJSON_CreateString(m));
        }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

int cmd_synth(int argc, char **argv) {
    static const struct option opts[] = {
        {"algo", required_argument, NULL, 'a'},   {"layers", required_argument, NULL, 'l'},
        {"hidden", required_argument, NULL, 'H'}, {"inter", required_argument, NULL, 'I'},
        {"heads", required_argument, NULL, 'h'},  {"kv-heads", required_argument, NULL, 'k'},
        {"vocab", required_argument, NULL, 'v'},  {"shards", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'S'},   {"arch", required_argument, NULL, 'A'},
        {"experts", required_argument, NULL, 'E'}, {"top-k", required_argument, NULL, 'K'}, {NULL, 0, NULL, 0}};
    const char *arch = "llama";
    long experts = 4, topk = 2;
    const char *algo = "NVFP4";
    long layers = 2, H = 256, I = 512, heads = 4, kvh = 2, V = 512, shards = 1, seed = 1;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        bool num_ok = optarg && end && *end == '\0' && v > 0 && v <= (1L << 20);
        switch (ch) {
        case 'a': algo = optarg ? optarg : algo; break;
        case 'A':
            if (!optarg || (strcmp(optarg, "llama") != 0 && strcmp(optarg, "qwen3moe") != 0 && strcmp(optarg, "mixtral") != 0))
                return cli_usage_error("synth", "--arch \"%s\" is not one of llama, qwen3moe, mixtral", optarg ? optarg : "");
            arch = optarg;
            break;
        case 'E': case 'K':
            if (!num_ok || v > 256) return cli_usage_error("synth", "--%s needs an integer in 1..256, got \"%s\"", ch == 'E' ? "experts" : "top-k", optarg);
            if (ch == 'E') experts = v; else topk = v;
            break;
        case 'l': case 'H': case 'I': case 'h': case 'k': case 'v': case 's': case 'S':
            if (!num_ok) return cli_usage_error("synth", "--%s needs a positive integer, got \"%s\"",
                                                ch == 'l' ? "layers" : ch == 'H' ? "hidden" : ch == 'I' ? "inter" : ch == 'h' ? "heads"
                                                : ch == 'k' ? "kv-heads" : ch == 'v' ? "vocab" : ch == 's' ? "shards" : "seed", optarg);
            if (ch == 'l') layers = v; else if (ch == 'H') H = v; else if (ch == 'I') I = v; else if (ch == 'h') heads = v;
            else if (ch == 'k') kvh = v; else if (ch == 'v') V = v; else if (ch == 's') shards = v; else seed = v;
            break;
        default: return cli_usage_error("synth", "unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("synth", "expected one DIR");
    /* --algo is one export row (quant/export_linear.c) for every linear, or a mix of two. */
    const moq_export_linear_row *attn_row = moq_export_linear_find(algo), *mlp_row = attn_row;
    const synth_mix *mix = NULL;
    for (size_t i = 0; !attn_row && i < sizeof k_mixes / sizeof k_mixes[0]; i++)
        if (strcmp(algo, k_mixes[i].algo) == 0) {
            mix = &k_mixes[i];
            attn_row = moq_export_linear_find(mix->attn_algo), mlp_row = moq_export_linear_find(mix->mlp_algo);
        }
    if (!attn_row || !mlp_row) {
        char list[512] = "";
        size_t n_rows = 0;
        const moq_export_linear_row *rows = moq_export_linear_rows(&n_rows);
        for (size_t i = 0; i < n_rows; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", rows[i].algo);
        for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), ", %s", k_mixes[i].algo);
        return cli_usage_error("synth", "--algo \"%s\" is not one of %s", algo, list);
    }
    const moq_export_linear_row *used[2] = {attn_row, mlp_row};
    for (int i = 0; i < 2; i++)
        if (H % used[i]->k_multiple || I % used[i]->k_multiple)
            return cli_usage_error("synth", "%s needs hidden and inter divisible by %d (got %ld, %ld)", used[i]->algo,
                                   used[i]->k_multiple, H, I);
    const bool mixed = mix != NULL;
    if (H % heads || heads % kvh || H % 16 || I % 16)
        return cli_usage_error("synth", "hidden %ld must divide by heads %ld and 16, heads by kv-heads %ld, inter %ld by 16", H, heads, kvh, I);
    if (topk > experts) return cli_usage_error("synth", "--top-k %ld exceeds --experts %ld", topk, experts);
    const bool qwen3moe = strcmp(arch, "qwen3moe") == 0, mixtral = strcmp(arch, "mixtral") == 0, moe = qwen3moe || mixtral;
    const char *arch_name = qwen3moe ? "Qwen3MoeForCausalLM" : mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM";
    const char *dir = argv[optind];
    const long hd = H / heads;

    synth s = {.rng = (uint64_t)seed};
    if (mixed) {
        s.layers_cap = (size_t)layers * (7 + (size_t)experts * 3) * 200 + 64;
        if (!(s.layers_json = calloc(1, s.layers_cap))) return MOQ_ERR_NOMEM;
    }
    moq_error err = {0};
    moq_status st = moq_writer_create(&s.w, dir, &err);
    if (st) {
        synth_release(&s);
        return cli_report(&err);
    }
    char nm[256];
    const int64_t ev[2] = {V, H}, hv[1] = {H};
    if (!st) st = add_bf16(&s, "model.embed_tokens.weight", 2, ev, 0.02, 0, &err);
    for (long l = 0; l < layers && !st; l++) {
        char pre[128];
        snprintf(nm, sizeof nm, "model.layers.%ld.input_layernorm.weight", l);
        if ((st = add_bf16(&s, nm, 1, hv, 0.05, 1.0, &err))) break;
        snprintf(pre, sizeof pre, "model.layers.%ld.self_attn", l);
        static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t nqkv[3] = {heads * hd, kvh * hd, kvh * hd};
        if ((st = add_group(&s, pre, qkv, nqkv, 3, H, attn_row, &err))) break;
        static const char *const o[1] = {"o_proj"};
        const int64_t no[1] = {H};
        if ((st = add_group(&s, pre, o, no, 1, heads * hd, attn_row, &err))) break;
        if (qwen3moe) { /* per-head q/k RMSNorm */
            const int64_t dv[1] = {hd};
            snprintf(nm, sizeof nm, "model.layers.%ld.self_attn.q_norm.weight", l);
            if ((st = add_bf16(&s, nm, 1, dv, 0.05, 1.0, &err))) break;
            snprintf(nm, sizeof nm, "model.layers.%ld.self_attn.k_norm.weight", l);
            if ((st = add_bf16(&s, nm, 1, dv, 0.05, 1.0, &err))) break;
        }
        snprintf(nm, sizeof nm, "model.layers.%ld.post_attention_layernorm.weight", l);
        if ((st = add_bf16(&s, nm, 1, hv, 0.05, 1.0, &err))) break;
        if (moe) {
            const char *blk = mixtral ? "block_sparse_moe" : "mlp";
            const int64_t rv[2] = {experts, H};
            snprintf(nm, sizeof nm, "model.layers.%ld.%s.gate.weight", l, blk);
            if ((st = add_bf16(&s, nm, 2, rv, 1.0 / sqrt((double)H), 0, &err))) break;
            static const char *const gq[2] = {"gate_proj", "up_proj"}, *const gm[2] = {"w1", "w3"};
            static const char *const dq[1] = {"down_proj"}, *const dm[1] = {"w2"};
            const int64_t ngu[2] = {I, I};
            for (long e = 0; e < experts && !st; e++) {
                snprintf(pre, sizeof pre, "model.layers.%ld.%s.experts.%ld", l, blk, e);
                if ((st = add_group(&s, pre, mixtral ? gm : gq, ngu, 2, H, mlp_row, &err))) break;
                st = add_group(&s, pre, mixtral ? dm : dq, hv, 1, I, mlp_row, &err);
            }
            continue;
        }
        snprintf(pre, sizeof pre, "model.layers.%ld.mlp", l);
        static const char *const gu[2] = {"gate_proj", "up_proj"};
        const int64_t ngu[2] = {I, I};
        if ((st = add_group(&s, pre, gu, ngu, 2, H, mlp_row, &err))) break;
        static const char *const dn[1] = {"down_proj"};
        if ((st = add_group(&s, pre, dn, hv, 1, I, mlp_row, &err))) break;
    }
    if (!st) st = add_bf16(&s, "model.norm.weight", 1, hv, 0.05, 1.0, &err);
    if (!st) st = add_bf16(&s, "lm_head.weight", 2, ev, 0.02, 0, &err);

    const size_t extra = s.layers_json ? strlen(s.layers_json) + 64 : 0;
    char moe_cfg[256] = "";
    if (moe)
        snprintf(moe_cfg, sizeof moe_cfg, ",\n  \"%s\": %ld,\n  \"num_experts_per_tok\": %ld,\n  \"moe_intermediate_size\": %ld,\n  \"norm_topk_prob\": true",
                 mixtral ? "num_local_experts" : "num_experts", experts, topk, I);
    char *cfg = malloc(4096 + extra), *hq = malloc(1024 + extra), *qc = malloc(1024 + extra), ql[64 + 1];
    if (!cfg || !hq || !qc) {
        free(cfg), free(hq), free(qc);
        synth_release(&s);
        err.code = MOQ_ERR_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory for config.json");
        return cli_report(&err);
    }
    const bool quant = attn_row->quantized || mlp_row->quantized;
    /* A mix writes the group size of its grouped algo at the top level, as ModelOpt does. */
    const int group_size = mlp_row->group_size ? mlp_row->group_size : attn_row->group_size;
    char gs[32] = "";
    if (group_size) snprintf(gs, sizeof gs, ", \"group_size\": %d", group_size);
    ql[0] = 0;
    /* MoE routers stay unquantized; ModelOpt exports list them as excluded */
    const char *excl_router = qwen3moe ? ", \"*mlp.gate\"" : mixtral ? ", \"*block_sparse_moe.gate\"" : "";
    const char *layers_txt = s.layers_json ? s.layers_json : "";
    if (mixed) snprintf(ql, sizeof ql, ", \"quantized_layers\": {");
    snprintf(hq, 1024 + extra,
             "{\n  \"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"},\n  \"quantization\": {\n"
             "    \"quant_algo\": \"%s\",\n    \"kv_cache_quant_algo\": null%s,\n    \"exclude_modules\": [\"lm_head\"%s]%s%s%s\n  }\n}\n",
             algo, gs, excl_router, ql, layers_txt, mixed ? "}" : "");
    snprintf(qc, 1024 + extra, ",\n  \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"%s\"%s, "
             "\"kv_cache_quant_algo\": null, \"ignore\": [\"lm_head\"%s]%s%s%s, \"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}}",
             algo, gs, excl_router, ql, layers_txt, mixed ? "}" : "");
    snprintf(cfg, 4096 + extra,
             "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"torch_dtype\": \"bfloat16\",\n"
             "  \"hidden_size\": %ld,\n  \"intermediate_size\": %ld,\n  \"num_hidden_layers\": %ld,\n"
             "  \"num_attention_heads\": %ld,\n  \"num_key_value_heads\": %ld,\n  \"head_dim\": %ld,\n  \"vocab_size\": %ld,\n"
             "  \"max_position_embeddings\": 2048,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n"
             "  \"rope_scaling\": null,\n  \"tie_word_embeddings\": false,\n  \"hidden_act\": \"silu\",\n"
             "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2%s%s\n}\n",
             arch_name, qwen3moe ? "qwen3_moe" : mixtral ? "mixtral" : "llama", H, I, layers, heads, kvh, hd, V, moe_cfg, quant ? qc : "");
    /* A byte-level tokenizer, so that `moq run` works on the result (it needs the 256 bytes + 3 specials). */
    char *tok_json = V >= SYNTH_TOK_MIN_VOCAB ? byte_tokenizer_json(V) : NULL;
    static const char tok_cfg[] = "{\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"unk_token\": \"<unk>\",\n"
                                  "  \"model_max_length\": 2048,\n  \"clean_up_tokenization_spaces\": false,\n"
                                  "  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n";
    if (!st && V >= SYNTH_TOK_MIN_VOCAB && !tok_json) st = MOQ_ERR_NOMEM, snprintf(err.msg, sizeof err.msg, "out of memory for tokenizer.json");
    if (!st && tok_json) st = moq_writer_file(s.w, "tokenizer.json", tok_json, &err);
    if (!st && tok_json) st = moq_writer_file(s.w, "tokenizer_config.json", tok_cfg, &err);
    if (!st) st = moq_writer_file(s.w, "config.json", cfg, &err);
    if (!st && quant) st = moq_writer_file(s.w, "hf_quant_config.json", hq, &err);
    if (!st) st = moq_writer_metadata(s.w, "format", "pt", &err);
    if (!st) st = moq_writer_finish(s.w, (int)shards, &err);
    synth_release(&s);
    free(cfg), free(hq), free(qc);
    cJSON_free(tok_json);
    if (st == MOQ_ERR_NOMEM && !err.msg[0]) moq_error_format(&err, nm, 1), snprintf(err.msg, sizeof err.msg, "out of memory");
    if (st) return cli_report(&err);
    printf("%s: %s checkpoint, %ld layers, %ld shard%s, %s\n", dir, algo, layers, shards, shards == 1 ? "" : "s",
           V >= SYNTH_TOK_MIN_VOCAB ? "byte-level tokenizer" : "no tokenizer (--vocab below 259 cannot hold the 256 bytes)");
    return 0;
}
