/* gguf_convert.c — GGUF (llama.cpp) → Hugging Face checkpoint directory.
 *
 * What is read and how it maps (one table row per fact):
 *   - general.architecture picks a row of k_archs (only "llama" → LlamaForCausalLM today).
 *   - hyper-parameters: k_hparams, "<arch>.<key>" → config.json field, required or defaulted.
 *   - tensors: k_tensors, GGUF name (per layer "blk.N.<suffix>") → Hugging Face name, expected shape,
 *     and whether llama.cpp permuted its rows. Every GGUF tensor must match a row, every required
 *     row must be present in every layer, and every shape must agree with the hyper-parameters.
 *   - GGUF shapes are ggml order (ne[0] = row length): HF shape = reversed ne.
 *   - Q/K rows: llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute) stores each head's rows
 *     reordered for its interleaved RoPE: within a head of D rows, GGUF row 2j+s holds HF row
 *     s·D/2 + j (s = 0, 1; j < D/2). Heads: n_head for Q, n_head_kv for K. Undone here so that
 *     the checkpoint uses Hugging Face's rotate-half RoPE.
 *   - values: dequantized to f32 exactly as ggml does (gguf.c), then kept (F32) or rounded to
 *     bf16 nearest-even (BF16, as torch's .to(torch.bfloat16)).
 *   - tokenizer: tokenizer.ggml.model "gpt2" (byte-level BPE) with tokens, merges, token_type;
 *     tokenizer.ggml.pre picks the pre-tokenizer row of k_pretok. Tokens of type CONTROL (3) are
 *     special added tokens; USER_DEFINED (4) added tokens that are not special.
 *   - tokenizer_config.json: bos/eos/unk/pad token texts from their ids, the chat template,
 *     add_bos_token / add_eos_token; generation_config.json: the ids.
 * Files are written through moq_writer (temporary names, renamed when all are complete).
 */
#include "io/gguf_convert.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/strmap.h"
#include "format/format.h"
#include "io/gguf.h"
#include "io/safetensors.h"

/* ---- tables -------------------------------------------------------------------------------- */

typedef struct arch_row {
    const char *gguf;           /* general.architecture   */
    const char *hf_arch;        /* config.json architectures[0] */
    const char *model_type;
} arch_row;

static const arch_row k_archs[] = {
    { "llama", "LlamaForCausalLM", "llama" },
};

/* Hyper-parameters, read as "<arch>.<key>". */
enum { HP_LAYERS, HP_HIDDEN, HP_INTER, HP_HEADS, HP_KV_HEADS, HP_CTX, HP_EPS, HP_THETA, HP_KEY_LEN,
       HP_VALUE_LEN, HP_ROPE_DIM, HP_VOCAB, HP_COUNT };
typedef struct hparam_row {
    const char *key;
    bool        is_float;
    bool        required;
    double      dflt;           /* when not required and absent; NaN-free sentinel -1 = derived */
} hparam_row;

static const hparam_row k_hparams[HP_COUNT] = {
    [HP_LAYERS]    = { "block_count",                     false, true,  0 },
    [HP_HIDDEN]    = { "embedding_length",                false, true,  0 },
    [HP_INTER]     = { "feed_forward_length",             false, true,  0 },
    [HP_HEADS]     = { "attention.head_count",            false, true,  0 },
    [HP_KV_HEADS]  = { "attention.head_count_kv",         false, false, -1 },  /* = heads        */
    [HP_CTX]       = { "context_length",                  false, false, 2048 },
    [HP_EPS]       = { "attention.layer_norm_rms_epsilon", true, true,  0 },
    [HP_THETA]     = { "rope.freq_base",                  true,  false, 10000 },
    [HP_KEY_LEN]   = { "attention.key_length",            false, false, -1 },  /* = hidden/heads */
    [HP_VALUE_LEN] = { "attention.value_length",          false, false, -1 },  /* = key_length   */
    [HP_ROPE_DIM]  = { "rope.dimension_count",            false, false, -1 },  /* = key_length   */
    [HP_VOCAB]     = { "vocab_size",                      false, false, -1 },  /* = token count  */
};

/* Dimension symbols of the expected shapes (HF order). */
enum { D_NONE, D_H, D_V, D_I, D_Q, D_KV };
enum { PERM_NONE, PERM_HEADS, PERM_KV_HEADS };

typedef struct tensor_row {
    const char *gguf;           /* name, or suffix after "blk.N." when per_layer */
    const char *hf;             /* name, or suffix after "model.layers.N."         */
    bool        per_layer, required;
    uint8_t     dims[2];        /* expected HF shape                              */
    uint8_t     perm;
} tensor_row;

static const tensor_row k_tensors[] = {
/*    gguf                 hf                                               layer  req    shape        perm */
    { "token_embd.weight",  "model.embed_tokens.weight",                   false, true,  {D_V, D_H},  PERM_NONE },
    { "output_norm.weight", "model.norm.weight",                           false, true,  {D_H},       PERM_NONE },
    { "output.weight",      "lm_head.weight",                              false, false, {D_V, D_H},  PERM_NONE },
    { "attn_norm.weight",   "input_layernorm.weight",          true, true, {D_H},      PERM_NONE },
    { "attn_q.weight",      "self_attn.q_proj.weight",         true, true, {D_Q, D_H}, PERM_HEADS },
    { "attn_k.weight",      "self_attn.k_proj.weight",         true, true, {D_KV, D_H}, PERM_KV_HEADS },
    { "attn_v.weight",      "self_attn.v_proj.weight",         true, true, {D_KV, D_H}, PERM_NONE },
    { "attn_output.weight", "self_attn.o_proj.weight",         true, true, {D_H, D_Q}, PERM_NONE },
    { "ffn_norm.weight",    "post_attention_layernorm.weight", true, true, {D_H},      PERM_NONE },
    { "ffn_gate.weight",    "mlp.gate_proj.weight",            true, true, {D_I, D_H}, PERM_NONE },
    { "ffn_up.weight",      "mlp.up_proj.weight",              true, true, {D_I, D_H}, PERM_NONE },
    { "ffn_down.weight",    "mlp.down_proj.weight",            true, true, {D_H, D_I}, PERM_NONE },
};
#define N_TROWS (sizeof k_tensors / sizeof k_tensors[0])

/* Pre-tokenizers by tokenizer.ggml.pre (llama.cpp's names), as the models' tokenizer.json spell
 * them. "smollm": llama.cpp splits \p{N} then the GPT-2 regex; Hugging Face SmolLM2 says Digits
 * (individual) then ByteLevel with its GPT-2 regex: the same pieces. */
typedef struct pretok_row {
    const char *pre;
    const char *json;
} pretok_row;

#define BYTELEVEL_GPT2 "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"
static const pretok_row k_pretok[] = {
    { "smollm", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true}," BYTELEVEL_GPT2 "]}" },
    { "gpt2",   BYTELEVEL_GPT2 },
};

enum { TOKEN_TYPE_NORMAL = 1, TOKEN_TYPE_CONTROL = 3, TOKEN_TYPE_USER_DEFINED = 4 };

/* ---- helpers ------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

moq_gguf_convert_opts moq_gguf_convert_opts_default(void) {
    return (moq_gguf_convert_opts){ .dtype = MOQ_DT_BF16 };
}

/* Shortest decimal that reads back as the same float (config.json shows 1e-05, not 9.99999975e-06);
 * whole numbers as 100000.0. */
static void float_text(float v, char *buf, size_t n) {
    if (v == (float)(int64_t)v && v < 1e9f && v > -1e9f) {
        snprintf(buf, n, "%.1f", (double)v);
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, n, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
}

typedef struct conv {
    moq_gguf_file        f;
    const arch_row      *arch;
    int64_t              hp[HP_COUNT];
    double               eps, theta;
    int64_t              head_dim;
    const moq_gguf_kv   *tokens, *merges, *types;
    moq_error           *err;
} conv;

static moq_status read_hparams(conv *c) {
    const moq_gguf_file *f = &c->f;
    moq_error *err = c->err;
    char key[128];
    for (int i = 0; i < HP_COUNT; i++) {
        const hparam_row *r = &k_hparams[i];
        snprintf(key, sizeof key, "%s.%s", c->arch->gguf, r->key);
        const moq_gguf_kv *kv = moq_gguf_find_kv(f, key);
        c->hp[i] = (int64_t)r->dflt;
        if (!kv) {
            if (r->required) return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s is missing; a %s model needs it", key, c->arch->gguf);
            if (i == HP_EPS) c->eps = r->dflt;
            if (i == HP_THETA) c->theta = r->dflt;
            continue;
        }
        if (r->is_float) {
            double v;
            MOQ_TRY(moq_gguf_kv_float(f, kv, &v, err));
            if (!(v > 0) || v > 1e12) return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %g, expected a positive number", key, v);
            if (i == HP_EPS) c->eps = v;
            else c->theta = v;
        } else {
            int64_t v;
            MOQ_TRY(moq_gguf_kv_int(f, kv, &v, err));
            if (v < 1 || v > (1 << 24))
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s: %lld, expected 1 to %d", key, (long long)v, 1 << 24);
            c->hp[i] = v;
        }
    }
    int64_t *hp = c->hp;
    if (hp[HP_KV_HEADS] < 0) hp[HP_KV_HEADS] = hp[HP_HEADS];
    if (hp[HP_HEADS] % hp[HP_KV_HEADS])
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s.attention.head_count %lld is not a multiple of head_count_kv %lld",
                        c->arch->gguf, (long long)hp[HP_HEADS], (long long)hp[HP_KV_HEADS]);
    if (hp[HP_KEY_LEN] < 0) {
        if (hp[HP_HIDDEN] % hp[HP_HEADS])
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key %s.embedding_length %lld is not a multiple of head_count %lld",
                            c->arch->gguf, (long long)hp[HP_HIDDEN], (long long)hp[HP_HEADS]);
        hp[HP_KEY_LEN] = hp[HP_HIDDEN] / hp[HP_HEADS];
    }
    c->head_dim = hp[HP_KEY_LEN];
    if (hp[HP_VALUE_LEN] >= 0 && hp[HP_VALUE_LEN] != c->head_dim)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, f->name, "key %s.attention.value_length %lld differs from key_length %lld; moq's llama needs one head size",
                        c->arch->gguf, (long long)hp[HP_VALUE_LEN], (long long)c->head_dim);
    if (hp[HP_ROPE_DIM] >= 0 && hp[HP_ROPE_DIM] != c->head_dim)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, f->name, "key %s.rope.dimension_count %lld is not the head size %lld (partial rotary is not supported)",
                        c->arch->gguf, (long long)hp[HP_ROPE_DIM], (long long)c->head_dim);
    if (c->head_dim % 2)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "head size %lld is odd; RoPE pairs need an even size", (long long)c->head_dim);
    snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch->gguf);
    const moq_gguf_kv *sc = moq_gguf_find_kv(f, key);
    if (sc) {
        const char *s;
        uint64_t n;
        MOQ_TRY(moq_gguf_kv_str(f, sc, &s, &n, err));
        if (!(n == 4 && memcmp(s, "none", 4) == 0))
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, f->name, "key %s is \"%.*s\"; the converter handles no RoPE scaling yet", key,
                            (int)(n < 40 ? n : 40), s);
    }
    return MOQ_OK;
}

static int64_t dim_value(const conv *c, int d) {
    switch (d) {
    case D_H: return c->hp[HP_HIDDEN];
    case D_V: return c->hp[HP_VOCAB];
    case D_I: return c->hp[HP_INTER];
    case D_Q: return c->hp[HP_HEADS] * c->head_dim;
    case D_KV: return c->hp[HP_KV_HEADS] * c->head_dim;
    default: return 0;
    }
}

/* The row (and layer) a GGUF tensor name matches; NULL when none. */
static const tensor_row *match_tensor(const char *name, int64_t *layer) {
    *layer = -1;
    if (strncmp(name, "blk.", 4) == 0) {
        const char *p = name + 4;
        int64_t l = 0;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.')) return NULL;
        while (*p >= '0' && *p <= '9' && l < (1 << 24)) l = l * 10 + (*p++ - '0');
        if (*p++ != '.') return NULL;
        for (size_t i = 0; i < N_TROWS; i++)
            if (k_tensors[i].per_layer && strcmp(p, k_tensors[i].gguf) == 0) {
                *layer = l;
                return &k_tensors[i];
            }
        return NULL;
    }
    for (size_t i = 0; i < N_TROWS; i++)
        if (!k_tensors[i].per_layer && strcmp(name, k_tensors[i].gguf) == 0) return &k_tensors[i];
    return NULL;
}

static int out_bytes(moq_dtype d) { return d == MOQ_DT_F32 ? 4 : 2; }

/* HF row r of a permuted matrix comes from GGUF row perm_src(r) (see the top of the file). */
static int64_t perm_src(int64_t r, int64_t d) {
    const int64_t h = r / d, i = r % d, half = d / 2;
    return h * d + (i < half ? 2 * i : 2 * (i - half) + 1);
}

/* ---- tokenizer ----------------------------------------------------------------------------- */

static moq_status arr_kv(conv *c, const char *key, moq_gguf_vtype want, bool required, const moq_gguf_kv **out) {
    *out = moq_gguf_find_kv(&c->f, key);
    if (!*out) {
        if (required) return MOQ_FAIL(c->err, MOQ_ERR_CONFIG, c->f.name, "key %s is missing; the tokenizer needs it", key);
        return MOQ_OK;
    }
    const moq_gguf_kv *kv = *out;
    const bool int_ok = want == MOQ_GGUF_I32 && kv->arr_type != MOQ_GGUF_STRING && kv->arr_type != MOQ_GGUF_F32 &&
                        kv->arr_type != MOQ_GGUF_F64 && kv->arr_type != MOQ_GGUF_BOOL;
    if (kv->type != MOQ_GGUF_ARRAY || (kv->arr_type != want && !int_ok))
        return MOQ_FAIL(c->err, MOQ_ERR_CONFIG, c->f.name, "key %s: %s of %s, expected an array of %s", key, moq_gguf_vtype_name(kv->type),
                        kv->type == MOQ_GGUF_ARRAY ? moq_gguf_vtype_name(kv->arr_type) : "-", want == MOQ_GGUF_STRING ? "STRING" : "integers");
    return MOQ_OK;
}

/* An optional token id key; -1 when absent. */
static moq_status token_id(conv *c, const char *key, int64_t n_vocab, int64_t *id) {
    *id = -1;
    const moq_gguf_kv *kv = moq_gguf_find_kv(&c->f, key);
    if (!kv) return MOQ_OK;
    MOQ_TRY(moq_gguf_kv_int(&c->f, kv, id, c->err));
    if (*id < 0 || *id >= n_vocab)
        return MOQ_FAIL(c->err, MOQ_ERR_CONFIG, c->f.name, "key %s: id %lld is outside the vocabulary [0, %lld)", key, (long long)*id, (long long)n_vocab);
    return MOQ_OK;
}

static cJSON *str_json(const char *s, uint64_t n) {
    char *t = malloc((size_t)n + 1);
    if (!t) return NULL;
    memcpy(t, s, (size_t)n);
    t[n] = 0;
    cJSON *j = cJSON_CreateString(t);
    free(t);
    return j;
}

/* Builds tokenizer.json, tokenizer_config.json and generation_config.json texts. The token strings
 * are kept in `texts` (malloc'd, NUL-terminated, [n_vocab]) for the config files. */
static moq_status build_tokenizer(conv *c, char **tok_json, char **tok_cfg, char **gen_cfg, cJSON *config) {
    moq_gguf_file *f = &c->f;
    moq_error *err = c->err;
    const moq_gguf_kv *model = moq_gguf_find_kv(f, "tokenizer.ggml.model");
    if (!model) return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.model is missing; the converter needs the tokenizer");
    const char *s;
    uint64_t n;
    MOQ_TRY(moq_gguf_kv_str(f, model, &s, &n, err));
    if (!(n == 4 && memcmp(s, "gpt2", 4) == 0))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, f->name, "key tokenizer.ggml.model is \"%.*s\"; moq converts \"gpt2\" (byte-level BPE) tokenizers only",
                        (int)(n < 40 ? n : 40), s);
    const pretok_row *pre = NULL;
    const moq_gguf_kv *prekv = moq_gguf_find_kv(f, "tokenizer.ggml.pre");
    const char *pres = "default";
    uint64_t pren = 7;
    if (prekv) MOQ_TRY(moq_gguf_kv_str(f, prekv, &pres, &pren, err));
    for (size_t i = 0; i < sizeof k_pretok / sizeof k_pretok[0]; i++)
        if (strlen(k_pretok[i].pre) == pren && memcmp(k_pretok[i].pre, pres, (size_t)pren) == 0) pre = &k_pretok[i];
    if (!pre)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, f->name, "key tokenizer.ggml.pre is \"%.*s\"; the converter knows smollm, gpt2",
                        (int)(pren < 40 ? pren : 40), pres);
    MOQ_TRY(arr_kv(c, "tokenizer.ggml.tokens", MOQ_GGUF_STRING, true, &c->tokens));
    MOQ_TRY(arr_kv(c, "tokenizer.ggml.merges", MOQ_GGUF_STRING, true, &c->merges));
    MOQ_TRY(arr_kv(c, "tokenizer.ggml.token_type", MOQ_GGUF_I32, false, &c->types));
    const int64_t nv = (int64_t)c->tokens->n;
    if (nv != c->hp[HP_VOCAB])
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.tokens has %lld tokens, the model's vocabulary is %lld", (long long)nv,
                        (long long)c->hp[HP_VOCAB]);
    if (c->types && c->types->n != c->tokens->n)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens %llu",
                        (unsigned long long)c->types->n, (unsigned long long)c->tokens->n);
    int64_t bos, eos, unk, pad;
    MOQ_TRY(token_id(c, "tokenizer.ggml.bos_token_id", nv, &bos));
    MOQ_TRY(token_id(c, "tokenizer.ggml.eos_token_id", nv, &eos));
    MOQ_TRY(token_id(c, "tokenizer.ggml.unknown_token_id", nv, &unk));
    MOQ_TRY(token_id(c, "tokenizer.ggml.padding_token_id", nv, &pad));

    moq_status st = MOQ_OK;
    cJSON *root = cJSON_CreateObject(), *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    cJSON *added = cJSON_CreateArray(), *cfg = cJSON_CreateObject(), *gen = cJSON_CreateObject();
    char **texts = calloc((size_t)nv, sizeof *texts);
    moq_strmap seen = {0};
    const bool seen_ok = moq_strmap_init(&seen, (size_t)nv);
    if (!root || !vocab || !merges || !added || !cfg || !gen || !texts || !seen_ok) {
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, f->name, "cannot allocate the tokenizer of %lld tokens", (long long)nv);
        goto done;
    }
    uint64_t pos = 0;
    for (int64_t i = 0; i < nv && st == MOQ_OK; i++) {
        moq_gguf_arr_str_next(c->tokens, &pos, &s, &n);
        const size_t bad = moq_utf8_invalid_at((const uint8_t *)s, (size_t)n);
        if (bad != n || memchr(s, 0, (size_t)n) || n == 0) {
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.tokens[%lld] is %s", (long long)i,
                          n == 0 ? "empty" : "not valid UTF-8 text (or holds a NUL byte)");
            break;
        }
        if (!(texts[i] = malloc((size_t)n + 1))) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, f->name, "cannot allocate"); break; }
        memcpy(texts[i], s, (size_t)n);
        texts[i][n] = 0;
        size_t old;
        if (!moq_strmap_put(&seen, texts[i], (size_t)i, &old)) {
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.tokens[%lld] \"%.60s\" is also token %zu; a vocabulary maps each text once",
                          (long long)i, texts[i], old);
            break;
        }
        cJSON_AddItemToObject(vocab, texts[i], cJSON_CreateNumber((double)i));
        const int64_t ty = c->types ? moq_gguf_arr_int(c->types, (uint64_t)i) : TOKEN_TYPE_NORMAL;
        if (ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED) {
            const bool special = ty == TOKEN_TYPE_CONTROL;
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", texts[i]);
            cJSON_AddBoolToObject(a, "single_word", false);
            cJSON_AddBoolToObject(a, "lstrip", false);
            cJSON_AddBoolToObject(a, "rstrip", false);
            cJSON_AddBoolToObject(a, "normalized", !special);
            cJSON_AddBoolToObject(a, "special", special);
            cJSON_AddItemToArray(added, a);
        }
    }
    if (st != MOQ_OK) goto done;
    pos = 0;
    for (uint64_t i = 0; moq_gguf_arr_str_next(c->merges, &pos, &s, &n); i++) {
        const char *sp = memchr(s, ' ', (size_t)n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)) ||
            moq_utf8_invalid_at((const uint8_t *)s, (size_t)n) != n || memchr(s, 0, (size_t)n)) {
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.ggml.merges[%llu] \"%.60s\" is not two tokens joined by one space",
                          (unsigned long long)i, moq_utf8_invalid_at((const uint8_t *)s, (size_t)n) == n ? s : "(invalid UTF-8)");
            goto done;
        }
        cJSON_AddItemToArray(merges, str_json(s, n));
    }

    /* tokenizer.json */
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddItemToObject(root, "added_tokens", added);
    added = NULL;
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(pre->json));
    cJSON_AddItemToObject(root, "post_processor", cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true}"));
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}"));
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    if (!m) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, f->name, "cannot allocate"); goto done; }
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddNullToObject(m, "dropout");
    cJSON_AddNullToObject(m, "unk_token");
    cJSON_AddNullToObject(m, "continuing_subword_prefix");
    cJSON_AddNullToObject(m, "end_of_word_suffix");
    cJSON_AddBoolToObject(m, "fuse_unk", false);
    cJSON_AddBoolToObject(m, "byte_fallback", false);
    cJSON_AddBoolToObject(m, "ignore_merges", false);
    cJSON_AddItemToObject(m, "vocab", vocab);
    cJSON_AddItemToObject(m, "merges", merges);
    vocab = merges = NULL;

    /* tokenizer_config.json and generation_config.json */
    bool add_bos = false, add_eos = false;
    const moq_gguf_kv *kv;
    if ((kv = moq_gguf_find_kv(f, "tokenizer.ggml.add_bos_token")) && (st = moq_gguf_kv_bool(f, kv, &add_bos, err))) goto done;
    if ((kv = moq_gguf_find_kv(f, "tokenizer.ggml.add_eos_token")) && (st = moq_gguf_kv_bool(f, kv, &add_eos, err))) goto done;
    cJSON_AddBoolToObject(cfg, "add_bos_token", add_bos);
    cJSON_AddBoolToObject(cfg, "add_eos_token", add_eos);
    static const char *const tok_keys[4] = { "bos_token", "eos_token", "unk_token", "pad_token" };
    const int64_t tok_ids[4] = { bos, eos, unk, pad };
    for (int i = 0; i < 4; i++)
        if (tok_ids[i] >= 0) cJSON_AddStringToObject(cfg, tok_keys[i], texts[tok_ids[i]]);
    if ((kv = moq_gguf_find_kv(f, "tokenizer.chat_template"))) {
        if ((st = moq_gguf_kv_str(f, kv, &s, &n, err))) goto done;
        if (moq_utf8_invalid_at((const uint8_t *)s, (size_t)n) != n || memchr(s, 0, (size_t)n)) {
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, f->name, "key tokenizer.chat_template is not valid UTF-8 text");
            goto done;
        }
        cJSON_AddItemToObject(cfg, "chat_template", str_json(s, n));
    }
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", false);
    cJSON_AddNumberToObject(cfg, "model_max_length", (double)c->hp[HP_CTX]);
    cJSON_AddStringToObject(cfg, "tokenizer_class", "GPT2Tokenizer");
    static const char *const id_keys[4] = { "bos_token_id", "eos_token_id", NULL, "pad_token_id" };
    for (int i = 0; i < 4; i++)
        if (id_keys[i] && tok_ids[i] >= 0) {
            cJSON_AddNumberToObject(gen, id_keys[i], (double)tok_ids[i]);
            cJSON_AddNumberToObject(config, id_keys[i], (double)tok_ids[i]);
        }
    cJSON_AddBoolToObject(gen, "_from_model_config", true);

    *tok_json = cJSON_PrintUnformatted(root);
    *tok_cfg = cJSON_Print(cfg);
    *gen_cfg = cJSON_Print(gen);
    if (!*tok_json || !*tok_cfg || !*gen_cfg) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, f->name, "cannot print the tokenizer files");
done:
    if (texts)
        for (int64_t i = 0; i < nv; i++) free(texts[i]);
    free(texts);
    moq_strmap_free(&seen);
    cJSON_Delete(root);
    cJSON_Delete(vocab);
    cJSON_Delete(merges);
    cJSON_Delete(added);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    return st;
}

/* ---- driver -------------------------------------------------------------------------------- */

typedef struct out_tensor {
    const moq_gguf_tensor *src;
    const tensor_row      *row;
    char                   name[96];
    int64_t                shape[2];
    int                    ndim;
    uint8_t               *data;      /* inside the one output block */
    uint64_t               nbytes;
} out_tensor;

static moq_status check_out_dir(const char *dir, moq_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return MOQ_OK;
        return MOQ_FAIL(err, MOQ_ERR_IO, dir, "cannot open the output directory: %s", strerror(errno));
    }
    const struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = false;
    closedir(d);
    if (!empty) return MOQ_FAIL(err, MOQ_ERR_IO, dir, "exists and is not empty; moq writes a conversion only into a new or empty directory");
    return MOQ_OK;
}

/* Maps every GGUF tensor to its row, checks shapes and completeness, fills outs[]. */
static moq_status plan_tensors(conv *c, out_tensor *outs, moq_dtype dtype, uint64_t *total) {
    moq_gguf_file *f = &c->f;
    const int64_t nl = c->hp[HP_LAYERS];
    uint32_t *count = calloc(N_TROWS, sizeof *count);
    if (!count) return MOQ_FAIL(c->err, MOQ_ERR_NOMEM, f->name, "cannot allocate");
    moq_status st = MOQ_OK;
    *total = 0;
    for (uint64_t i = 0; i < f->n_tensors && st == MOQ_OK; i++) {
        const moq_gguf_tensor *t = &f->tensors[i];
        int64_t layer;
        const tensor_row *r = match_tensor(t->name, &layer);
        if (!r) {
            st = MOQ_FAIL(c->err, MOQ_ERR_UNSUPPORTED, f->name, "tensor %s has no Hugging Face name in moq's %s table (token_embd, output_norm, output, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down})",
                          t->name, c->arch->gguf);
            break;
        }
        if (r->per_layer && layer >= nl) {
            st = MOQ_FAIL(c->err, MOQ_ERR_CONFIG, f->name, "tensor %s: layer %lld, but %s.block_count is %lld", t->name, (long long)layer,
                          c->arch->gguf, (long long)nl);
            break;
        }
        if (!moq_ggml_type_dequantizable(t->type)) {
            st = MOQ_FAIL(c->err, MOQ_ERR_UNSUPPORTED, f->name, "tensor %s: type %s; moq dequantizes F32, F16, BF16, Q8_0, Q4_0, Q4_1", t->name,
                          moq_ggml_type_name(t->type));
            break;
        }
        out_tensor *o = &outs[i];
        o->src = t;
        o->row = r;
        count[r - k_tensors]++;
        if (r->per_layer) snprintf(o->name, sizeof o->name, "model.layers.%lld.%s", (long long)layer, r->hf);
        else snprintf(o->name, sizeof o->name, "%s", r->hf);
        o->ndim = r->dims[1] ? 2 : 1;
        int64_t want[2] = { dim_value(c, r->dims[0]), r->dims[1] ? dim_value(c, r->dims[1]) : 1 };
        /* HF shape = reversed ne */
        int64_t got[2] = { o->ndim == 2 ? t->ne[1] : t->ne[0], o->ndim == 2 ? t->ne[0] : 1 };
        if (t->n_dims > o->ndim || got[0] != want[0] || got[1] != want[1]) {
            if (o->ndim == 2)
                st = MOQ_FAIL(c->err, MOQ_ERR_TENSOR, f->name, "tensor %s (%s): ne [%lld, %lld, %lld, %lld], expected [%lld, %lld] from the hyper-parameters",
                              t->name, o->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                              (long long)want[1], (long long)want[0]);
            else
                st = MOQ_FAIL(c->err, MOQ_ERR_TENSOR, f->name, "tensor %s (%s): ne [%lld, %lld, %lld, %lld], expected [%lld] from the hyper-parameters",
                              t->name, o->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                              (long long)want[0]);
            break;
        }
        o->shape[0] = want[0];
        o->shape[1] = want[1];
        o->nbytes = t->nelem * (uint64_t)out_bytes(dtype);
        *total += o->nbytes;
    }
    for (size_t r = 0; r < N_TROWS && st == MOQ_OK; r++) {
        const uint32_t want = k_tensors[r].per_layer ? (uint32_t)nl : 1;
        if (k_tensors[r].required && count[r] != want) {
            /* name the first missing one */
            char g[96];
            for (int64_t l = 0; l < (k_tensors[r].per_layer ? nl : 1); l++) {
                if (k_tensors[r].per_layer) snprintf(g, sizeof g, "blk.%lld.%s", (long long)l, k_tensors[r].gguf);
                else snprintf(g, sizeof g, "%s", k_tensors[r].gguf);
                if (!moq_gguf_find_tensor(f, g)) break;
            }
            st = MOQ_FAIL(c->err, MOQ_ERR_TENSOR, f->name, "tensor %s is missing (%u of %u %s tensors present)", g, count[r], want, k_tensors[r].gguf);
        }
    }
    free(count);
    return st;
}

/* Dequantizes, unpermutes and converts one tensor into o->data. scratch holds nelem floats. */
static moq_status convert_tensor(conv *c, const out_tensor *o, moq_dtype dtype, float *scratch) {
    const moq_gguf_tensor *t = o->src;
    const bool direct = dtype == MOQ_DT_F32 && o->row->perm == PERM_NONE;
    float *x = direct ? (float *)(void *)o->data : scratch;
    MOQ_TRY(moq_gguf_dequant(t->type, t->data, x, t->nelem, t->name, c->err));
    if (direct) return MOQ_OK;
    const int64_t rows = o->ndim == 2 ? o->shape[0] : 1, cols = o->ndim == 2 ? o->shape[1] : o->shape[0];
    const int64_t heads = o->row->perm == PERM_HEADS ? c->hp[HP_HEADS] : c->hp[HP_KV_HEADS];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t src = o->row->perm == PERM_NONE ? r : perm_src(r, rows / heads);
        const float *in = x + src * cols;
        if (dtype == MOQ_DT_F32) {
            memcpy(o->data + (uint64_t)(r * cols) * 4, in, (size_t)cols * 4);
        } else {
            uint8_t *out = o->data + (uint64_t)(r * cols) * 2;
            for (int64_t j = 0; j < cols; j++) {
                const uint16_t h = moq_bf16_encode_rne(in[j]);
                out[2 * j] = (uint8_t)h;
                out[2 * j + 1] = (uint8_t)(h >> 8);
            }
        }
    }
    return MOQ_OK;
}

static void types_summary(const moq_gguf_file *f, char *buf, size_t n) {
    uint64_t cnt[MOQ_GGML_TYPE_LIMIT] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) cnt[f->tensors[i].type]++;
    size_t k = 0;
    buf[0] = 0;
    for (int t = 0; t < MOQ_GGML_TYPE_LIMIT && k < n; t++)
        if (cnt[t]) k += (size_t)snprintf(buf + k, n - k, "%s%s x%llu", k ? ", " : "", moq_ggml_type_name((moq_ggml_type)t), (unsigned long long)cnt[t]);
}

moq_status moq_gguf_convert(const char *path, const char *out_dir, const moq_gguf_convert_opts *opts,
                            moq_gguf_convert_info *info, moq_error *err) {
    if (!path || !out_dir) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gguf_convert", "NULL path");
    moq_gguf_convert_opts o = opts ? *opts : moq_gguf_convert_opts_default();
    if (o.dtype != MOQ_DT_BF16 && o.dtype != MOQ_DT_F32)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_gguf_convert", "dtype %s, expected BF16 or F32", moq_dtype_name(o.dtype));
    moq_gguf_convert_info inf_local = {0}, *inf = info ? info : &inf_local;
    memset(inf, 0, sizeof *inf);
    MOQ_TRY(check_out_dir(out_dir, err));

    double t0 = now_s();
    conv c = { .err = err };
    MOQ_TRY(moq_gguf_open(&c.f, path, NULL, err));
    moq_status st = MOQ_OK;
    out_tensor *outs = NULL;
    uint8_t *block = NULL;
    float *scratch = NULL;
    cJSON *config = NULL;
    char *config_txt = NULL, *tok_json = NULL, *tok_cfg = NULL, *gen_cfg = NULL;
    moq_writer *w = NULL;
    types_summary(&c.f, inf->gguf_types, sizeof inf->gguf_types);

    const moq_gguf_kv *ak = moq_gguf_find_kv(&c.f, "general.architecture");
    const char *as = NULL;
    uint64_t an = 0;
    if (!ak) { st = MOQ_FAIL(err, MOQ_ERR_CONFIG, c.f.name, "key general.architecture is missing"); goto done; }
    if ((st = moq_gguf_kv_str(&c.f, ak, &as, &an, err))) goto done;
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strlen(k_archs[i].gguf) == an && memcmp(k_archs[i].gguf, as, (size_t)an) == 0) c.arch = &k_archs[i];
    if (!c.arch) {
        st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, c.f.name, "key general.architecture is \"%.*s\"; the converter knows llama", (int)(an < 40 ? an : 40), as);
        goto done;
    }
    if ((st = read_hparams(&c))) goto done;
    const moq_gguf_tensor *emb = moq_gguf_find_tensor(&c.f, "token_embd.weight");
    if (c.hp[HP_VOCAB] < 0) {
        const moq_gguf_kv *tk = moq_gguf_find_kv(&c.f, "tokenizer.ggml.tokens");
        c.hp[HP_VOCAB] = tk && tk->type == MOQ_GGUF_ARRAY ? (int64_t)tk->n : emb ? emb->ne[1] : 0;
    }
    inf->read_s = now_s() - t0;

    /* tensors */
    t0 = now_s();
    uint64_t total = 0, max_nel = 0;
    outs = calloc(c.f.n_tensors ? c.f.n_tensors : 1, sizeof *outs);
    if (!outs) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c.f.name, "cannot allocate"); goto done; }
    if ((st = plan_tensors(&c, outs, o.dtype, &total))) goto done;
    for (uint64_t i = 0; i < c.f.n_tensors; i++)
        if (outs[i].src->nelem > max_nel) max_nel = outs[i].src->nelem;
    block = malloc(total ? total : 1);
    scratch = malloc(max_nel * sizeof(float) + 1);
    if (!block || !scratch) {
        st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c.f.name, "cannot allocate %llu bytes for the converted tensors", (unsigned long long)total);
        goto done;
    }
    uint64_t done_b = 0;
    for (uint64_t i = 0; i < c.f.n_tensors; i++) {
        outs[i].data = block + done_b;
        if ((st = convert_tensor(&c, &outs[i], o.dtype, scratch))) goto done;
        done_b += outs[i].nbytes;
        if (o.progress) o.progress(o.progress_ctx, done_b, total);
    }
    inf->n_tensors = c.f.n_tensors;
    inf->tensor_bytes = total;
    inf->n_layers = (int)c.hp[HP_LAYERS];
    inf->tied = moq_gguf_find_tensor(&c.f, "output.weight") == NULL;
    inf->tensors_s = now_s() - t0;

    /* config.json, tokenizer files */
    t0 = now_s();
    char num[32];
    config = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(config, "architectures");
    if (!config || !archs) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c.f.name, "cannot allocate"); goto done; }
    cJSON_AddItemToArray(archs, cJSON_CreateString(c.arch->hf_arch));
    cJSON_AddStringToObject(config, "model_type", c.arch->model_type);
    cJSON_AddNumberToObject(config, "hidden_size", (double)c.hp[HP_HIDDEN]);
    cJSON_AddNumberToObject(config, "intermediate_size", (double)c.hp[HP_INTER]);
    cJSON_AddNumberToObject(config, "num_hidden_layers", (double)c.hp[HP_LAYERS]);
    cJSON_AddNumberToObject(config, "num_attention_heads", (double)c.hp[HP_HEADS]);
    cJSON_AddNumberToObject(config, "num_key_value_heads", (double)c.hp[HP_KV_HEADS]);
    cJSON_AddNumberToObject(config, "head_dim", (double)c.head_dim);
    cJSON_AddNumberToObject(config, "vocab_size", (double)c.hp[HP_VOCAB]);
    cJSON_AddNumberToObject(config, "max_position_embeddings", (double)c.hp[HP_CTX]);
    float_text((float)c.eps, num, sizeof num);
    cJSON_AddRawToObject(config, "rms_norm_eps", num);
    float_text((float)c.theta, num, sizeof num);
    cJSON_AddRawToObject(config, "rope_theta", num);
    cJSON_AddNullToObject(config, "rope_scaling");
    cJSON_AddStringToObject(config, "hidden_act", "silu");
    cJSON_AddBoolToObject(config, "attention_bias", false);
    cJSON_AddBoolToObject(config, "mlp_bias", false);
    cJSON_AddBoolToObject(config, "tie_word_embeddings", inf->tied);
    cJSON_AddStringToObject(config, "torch_dtype", o.dtype == MOQ_DT_BF16 ? "bfloat16" : "float32");
    if ((st = build_tokenizer(&c, &tok_json, &tok_cfg, &gen_cfg, config))) goto done;
    if (!(config_txt = cJSON_Print(config))) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, c.f.name, "cannot allocate"); goto done; }
    inf->tokenizer_s = now_s() - t0;

    /* write */
    t0 = now_s();
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if ((st = moq_writer_create(&w, out_dir, err))) goto done;
    if ((st = moq_writer_metadata(w, "format", "pt", err))) goto done;
    if ((st = moq_writer_metadata(w, "moq_converted_from", base, err))) goto done;
    for (uint64_t i = 0; i < c.f.n_tensors; i++)
        if ((st = moq_writer_add(w, outs[i].name, o.dtype, outs[i].ndim, outs[i].shape, outs[i].data, outs[i].nbytes, err))) goto done;
    if ((st = moq_writer_file(w, "config.json", config_txt, err))) goto done;
    if ((st = moq_writer_file(w, "generation_config.json", gen_cfg, err))) goto done;
    if ((st = moq_writer_file(w, "tokenizer.json", tok_json, err))) goto done;
    if ((st = moq_writer_file(w, "tokenizer_config.json", tok_cfg, err))) goto done;
    st = moq_writer_finish(w, 1, err);
    inf->write_s = now_s() - t0;
done:
    moq_writer_free(w);
    cJSON_Delete(config);
    free(config_txt);
    free(tok_json);
    free(tok_cfg);
    free(gen_cfg);
    free(scratch);
    free(block);
    free(outs);
    moq_gguf_close(&c.f);
    return st;
}
