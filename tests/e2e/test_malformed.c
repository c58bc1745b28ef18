/* test_malformed.c — the malformed-checkpoint suite (issue #7): a good `moq synth` checkpoint
 * (NVFP4, 2 layers, 2 shards, the tiny golden tokenizer) broken in one way per case, named for
 * what is wrong, and every CLI command of `commands[]` (inspect, inspect --json, check --values,
 * run) run on it through the built binary.
 *
 * Per case and command the CLI contract (STYLE.md §4, §12) is asserted:
 *   - no crash: exit status < 128 (a signal gives >= 128 or -1), and not 0 where the command must fail;
 *   - a checkpoint that cannot be opened (stage OPEN): nothing on stdout and exactly one line
 *     "moq: WHERE: MESSAGE" on stderr, WHERE the file/tensor named in the table, MESSAGE containing
 *     the table's distinctive substring;
 *   - a checkpoint that opens but breaks a scheme contract (stage CHECK, VALUES): `moq check --values`
 *     lists it as a "WHERE: MESSAGE" line on stdout; `moq inspect` exits non-zero with one
 *     "moq: ..." line (inspect reads headers only, so scale values (stage VALUES) pass it);
 *   - an architecture `moq run` refuses (stage ARCH): inspect succeeds with a "moq: warning:" line
 *     naming it (a "warnings" entry with --json), `moq check` lists it as a problem;
 *   - `moq run` refuses every case but NOTE (problems the engines accept) with one stderr line;
 *   - nothing is written into the checkpoint directory (names, sizes and mtimes before == after).
 * The expected substrings restate the planted fault (the seeds' rules and contracts, the safetensors
 * rules), not moq's output. A multi-problem checkpoint checks that `moq check` lists every problem.
 *
 * MOQ_MALFORMED_MD=1 ./test_malformed prints the case table as markdown; MOQ_MALFORMED_MD=full adds
 * the message moq gives today (docs/RELIABILITY.md is generated that way).
 * The safetensors editing here is written from the format spec, independent of src/io.
 */
#include "tu.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static char *g_good; /* pristine synth checkpoint */
static char *g_io;   /* where stdout/stderr of each command go */

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX  "model.safetensors.index.json"
#define L0     "model.layers.0."

/* ---- files ---------------------------------------------------------------------------------- */

static char *path_of(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *read_text(const char *dir, const char *name, size_t *len) {
    char *p = path_of(dir, name);
    char *t = tu_read_file(p, len);
    free(p);
    return t;
}

static void write_bytes(const char *dir, const char *name, const void *b, size_t n) { free(tu_write_file(dir, name, b, n)); }
static void write_text(const char *dir, const char *name, const char *t) { write_bytes(dir, name, t, strlen(t)); }

static cJSON *read_json(const char *dir, const char *name) {
    char *t = read_text(dir, name, NULL);
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j) fail_msg("%s/%s: not JSON", dir, name);
    return j;
}

static void write_json(const char *dir, const char *name, cJSON *j) {
    char *t = cJSON_Print(j);
    write_text(dir, name, t);
    free(t);
    cJSON_Delete(j);
}

/* ---- safetensors shards: 8-byte LE header length, JSON header, data (offsets relative to it) ---- */

typedef struct stf {
    cJSON   *hdr;
    uint8_t *data;
    size_t   len;
} stf;

static stf st_load(const char *dir, const char *name) {
    size_t n;
    uint8_t *b = (uint8_t *)read_text(dir, name, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    assert_true(8 + hl <= n);
    stf f = {cJSON_ParseWithLength((const char *)b + 8, hl), malloc(n - 8 - hl + 1), n - 8 - hl};
    assert_non_null(f.hdr);
    memcpy(f.data, b + 8 + hl, f.len);
    free(b);
    return f;
}

/* Writes the header padded with spaces to a multiple of 8 (as the reference writer does). */
static void st_save(const char *dir, const char *name, stf *f) {
    char *h = cJSON_PrintUnformatted(f->hdr);
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8, n = 8 + hl + pad + f->len;
    uint8_t *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)(hl + pad) >> (8 * i));
    memcpy(b + 8, h, hl);
    memset(b + 8 + hl, ' ', pad);
    memcpy(b + 8 + hl + pad, f->data, f->len);
    write_bytes(dir, name, b, n);
    free(b), free(h), free(f->data);
    cJSON_Delete(f->hdr);
}

static size_t off(const cJSON *e, int i) { return (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), i)->valuedouble; }

/* Replaces (or adds, or with bytes == NULL removes) tensor `name` and repacks the data contiguously. */
static void st_put(stf *f, const char *name, const char *dtype, int nd, const int64_t *shape, const void *bytes, size_t n) {
    uint8_t *nb = malloc(f->len + n + 1);
    size_t o = 0;
    bool found = false;
    for (cJSON *e = f->hdr->child, *next; e; e = next) {
        next = e->next;
        if (strcmp(e->string, "__metadata__") == 0) continue;
        const void *src = f->data + off(e, 0);
        size_t sz = off(e, 1) - off(e, 0);
        if (strcmp(e->string, name) == 0) {
            found = true;
            if (!bytes) {
                cJSON_DeleteItemFromObject(f->hdr, name);
                continue;
            }
            src = bytes, sz = n;
            cJSON_ReplaceItemInObject(e, "dtype", cJSON_CreateString(dtype));
            cJSON *sh = cJSON_CreateArray();
            for (int i = 0; i < nd; i++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[i]));
            cJSON_ReplaceItemInObject(e, "shape", sh);
        }
        memcpy(nb + o, src, sz);
        cJSON *offs = cJSON_CreateArray();
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)o));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(o + sz)));
        cJSON_ReplaceItemInObject(e, "data_offsets", offs);
        o += sz;
    }
    if (!found && bytes) {
        cJSON *e = cJSON_AddObjectToObject(f->hdr, name);
        cJSON_AddStringToObject(e, "dtype", dtype);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int i = 0; i < nd; i++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[i]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)o));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(o + n)));
        memcpy(nb + o, bytes, n);
        o += n;
    }
    free(f->data);
    f->data = nb, f->len = o;
}

/* The shard the index lists `tensor` in (static buffer). */
static const char *shard_of(const char *dir, const char *tensor) {
    static char buf[256];
    cJSON *ix = read_json(dir, INDEX);
    const cJSON *s = cJSON_GetObjectItem(cJSON_GetObjectItem(ix, "weight_map"), tensor);
    snprintf(buf, sizeof buf, "%s", cJSON_IsString(s) ? s->valuestring : SHARD1);
    cJSON_Delete(ix);
    return buf;
}

static void index_set(const char *dir, const char *tensor, const char *shard) {
    cJSON *ix = read_json(dir, INDEX);
    cJSON *wm = cJSON_GetObjectItem(ix, "weight_map");
    cJSON_DeleteItemFromObject(wm, tensor);
    if (shard) cJSON_AddStringToObject(wm, tensor, shard);
    write_json(dir, INDEX, ix);
}

/* Sets tensor `name` (in the shard holding `near`, the index kept in step); bytes NULL removes it. */
static void put_tensor(const char *dir, const char *near, const char *name, const char *dtype, int nd, const int64_t *shape,
                       const void *bytes, size_t n) {
    char shard[256];
    snprintf(shard, sizeof shard, "%s", shard_of(dir, near));
    stf f = st_load(dir, shard);
    st_put(&f, name, dtype, nd, shape, bytes, n);
    st_save(dir, shard, &f);
    index_set(dir, name, bytes ? shard : NULL);
}

static void put_f32(const char *dir, const char *name, float v) { put_tensor(dir, name, name, "F32", 0, NULL, &v, 4); }

/* Fills with 0x3c bytes: positive finite in every float dtype (e4m3 1.5), so only the planted fault shows. */
static void put_filled(const char *dir, const char *near, const char *name, const char *dtype, int nd, const int64_t *shape, size_t n) {
    void *z = malloc(n);
    memset(z, 0x3c, n);
    put_tensor(dir, near, name, dtype, nd, shape, z, n);
    free(z);
}

/* Edits one header entry of a shard in place (data untouched). */
static void st_set_field(const char *dir, const char *shard, const char *tensor, const char *field, const char *json) {
    stf f = st_load(dir, shard);
    cJSON *e = cJSON_GetObjectItem(f.hdr, tensor);
    assert_non_null(e);
    cJSON_ReplaceItemInObject(e, field, cJSON_Parse(json));
    st_save(dir, shard, &f);
}

/* Replaces hf_quant_config.json's "quantization" with `q` and drops config.json's copy (so the
 * hf file is the one read). */
static void set_quant(const char *dir, const char *q) {
    char t[4096];
    snprintf(t, sizeof t, "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, \"quantization\": %s}", q);
    write_text(dir, "hf_quant_config.json", t);
    cJSON *c = read_json(dir, "config.json");
    cJSON_DeleteItemFromObject(c, "quantization_config");
    write_json(dir, "config.json", c);
}

static void set_config_field(const char *dir, const char *key, const char *json) {
    cJSON *c = read_json(dir, "config.json");
    cJSON_DeleteItemFromObject(c, key);
    cJSON_AddItemToObject(c, key, cJSON_Parse(json));
    write_json(dir, "config.json", c);
}

static void truncate_to(const char *dir, const char *name, size_t keep) {
    size_t n;
    char *b = read_text(dir, name, &n);
    write_bytes(dir, name, b, keep < n ? keep : n);
    free(b);
}

/* Rewrites a shard's header as raw text (data kept). */
static void raw_header(const char *dir, const char *shard, const char *header) {
    stf f = st_load(dir, shard);
    size_t hl = strlen(header), n = 8 + hl + f.len;
    uint8_t *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    memcpy(b + 8 + hl, f.data, f.len);
    write_bytes(dir, shard, b, n);
    free(b), free(f.data);
    cJSON_Delete(f.hdr);
}

/* ---- the cases ------------------------------------------------------------------------------ */

typedef enum stage {
    OPEN,   /* the checkpoint does not open: every command fails with one stderr line              */
    CHECK,  /* opens; `moq check` lists the problem, `moq inspect` fails (header-level contract)  */
    VALUES, /* opens; only a scan of the scale values finds it (`moq check --values`)            */
    RUN,    /* valid for inspect/check; only `moq run` can refuse it                              */
    NOTE,   /* like CHECK, but `moq run` accepts it as the engines do (an extra or unused tensor,
               fused global scales collapsed to their max with a note)                           */
    ARCH,   /* an architecture `moq run` refuses: inspect warns and succeeds, check lists it      */
} stage;

static const char *const stage_name[] = {"open", "check", "check --values", "run", "check (run accepts)", "check (inspect warns)"};

typedef struct mcase {
    const char *name;  /* what is wrong                                  */
    void (*make)(const char *dir);
    stage       stage;
    const char *where; /* file, tensor or module the message must name   */
    const char *msg;   /* distinctive substring of the message           */
} mcase;

#define Q  "model.layers.0.self_attn.q_proj"
#define K_ "model.layers.0.self_attn.k_proj"
#define O  "model.layers.0.self_attn.o_proj" /* not fused: a bad scalar scale is not also a shard mismatch */

/* safetensors / shards */
static void m_truncated_shard(const char *d) { truncate_to(d, SHARD1, 20000); }
static void m_shard_one_byte_short(const char *d) { size_t n; free(read_text(d, SHARD2, &n)); truncate_to(d, SHARD2, n - 1); }
static void m_shard_empty(const char *d) { truncate_to(d, SHARD1, 0); }
static void m_shard_too_short(const char *d) { truncate_to(d, SHARD1, 5); }
static void m_header_len_beyond_file(const char *d) {
    size_t n;
    uint8_t *b = (uint8_t *)read_text(d, SHARD1, &n);
    uint64_t hl = (uint64_t)n; /* claims the whole file, and 8 more bytes */
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    write_bytes(d, SHARD1, b, n);
    free(b);
}
static void m_header_len_absurd(const char *d) {
    size_t n;
    uint8_t *b = (uint8_t *)read_text(d, SHARD1, &n);
    memset(b, 0xff, 8); /* 2^64 - 1 */
    write_bytes(d, SHARD1, b, n);
    free(b);
}
static void m_header_over_limit(const char *d) {
    size_t n;
    uint8_t *b = (uint8_t *)read_text(d, SHARD1, &n);
    const uint64_t hl = 200000000; /* 200 MB: beyond the 100 MB limit, must be refused before allocating */
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    write_bytes(d, SHARD1, b, n);
    free(b);
}
static void m_header_not_json(const char *d) { raw_header(d, SHARD2, "{\"model.norm.weight\": {\"dtype\": \"BF16\", \"shape\": [64],"); }
static void m_header_not_object(const char *d) { raw_header(d, SHARD2, "[1, 2, 3]"); }
/* Offsets of a tensor as written by synth, as "[b, e]" text moved by `shift` (or swapped). */
static void move_offsets(const char *d, const char *tensor, long shift, bool swap) {
    stf f = st_load(d, SHARD1);
    const cJSON *e = cJSON_GetObjectItem(f.hdr, tensor);
    char t[64];
    const long b = (long)off(e, 0) + shift, en = (long)off(e, 1) + shift;
    snprintf(t, sizeof t, "[%ld, %ld]", swap ? en : b, swap ? b : en);
    free(f.data);
    cJSON_Delete(f.hdr);
    st_set_field(d, SHARD1, tensor, "data_offsets", t);
}
static void m_offsets_overlap(const char *d) { move_offsets(d, Q ".weight_scale", -64, false); } /* 64 bytes into q_proj.weight */
static void m_offsets_past_end(const char *d) { st_set_field(d, SHARD1, "model.embed_tokens.weight", "data_offsets", "[0, 1000000]"); }
static void m_offsets_reversed(const char *d) { move_offsets(d, Q ".weight", 0, true); }
static void m_shape_dtype_span(const char *d) { st_set_field(d, SHARD1, Q ".weight", "shape", "[64, 64]"); }
static void m_dtype_span(const char *d) { st_set_field(d, SHARD1, Q ".weight_scale", "dtype", "\"BF16\""); }
static void m_shape_overflow(const char *d) { st_set_field(d, SHARD1, Q ".weight", "shape", "[4294967296, 4294967296, 4096]"); }
static void m_dtype_unknown(const char *d) { st_set_field(d, SHARD1, Q ".weight", "dtype", "\"F4_E2M1X\""); }
static void m_shape_negative(const char *d) { st_set_field(d, SHARD1, Q ".weight", "shape", "[-64, 32]"); }
/* index */
static void m_index_missing_shard(const char *d) { index_set(d, Q ".weight", "model-00003-of-00003.safetensors"); }
static void m_index_path_outside(const char *d) { index_set(d, Q ".weight", "../" SHARD1); }
static void m_index_absolute_path(const char *d) { index_set(d, Q ".weight", "/etc/passwd"); }
static void m_index_not_json(const char *d) { write_text(d, INDEX, "{\"weight_map\": {\"a\": "); }
static void m_index_weight_map_not_object(const char *d) { write_text(d, INDEX, "{\"weight_map\": [\"" SHARD1 "\"]}"); }
static void m_index_wrong_shard(const char *d) { index_set(d, Q ".weight", SHARD2); }
static void m_index_ghost_tensor(const char *d) { index_set(d, "model.layers.0.mlp.ghost.weight", SHARD1); }
static void m_duplicate_across_shards(const char *d) {
    const int64_t sh[1] = {64};
    put_filled(d, "model.norm.weight", L0 "input_layernorm.weight", "BF16", 1, sh, 128); /* index says shard 1 */
    index_set(d, L0 "input_layernorm.weight", SHARD1);
}
/* config.json */
static void m_config_missing(const char *d) { char *p = path_of(d, "config.json"); unlink(p); free(p); }
static void m_config_not_json(const char *d) { write_text(d, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"],,}"); }
static void m_config_hidden_size_string(const char *d) { set_config_field(d, "hidden_size", "\"64\""); }
static void m_config_layers_negative(const char *d) { set_config_field(d, "num_hidden_layers", "-2"); }
static void m_config_architectures_not_list(const char *d) { set_config_field(d, "architectures", "\"LlamaForCausalLM\""); }
static void m_config_quantization_config_not_object(const char *d) {
    char *p = path_of(d, "hf_quant_config.json");
    unlink(p);
    free(p);
    set_config_field(d, "quantization_config", "\"NVFP4\"");
}
static void m_unsupported_architecture(const char *d) { set_config_field(d, "architectures", "[\"FrobnicatorForCausalLM\"]"); }
/* quantization config: the seeds' errors */
static void m_quant_algo_unknown(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP5\", \"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_quant_algo_missing(const char *d) { set_quant(d, "{\"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_quant_algo_not_string(const char *d) { set_quant(d, "{\"quant_algo\": 4, \"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_quantization_not_object(const char *d) { set_quant(d, "\"NVFP4\""); }
static void m_nvfp4_group_size_missing(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_group_size_zero(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"group_size\": 0, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_group_size_not_integer(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"group_size\": 16.5, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_exclude_modules_null(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": null}"); }
static void m_exclude_modules_not_strings(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": null, \"group_size\": 16, \"exclude_modules\": [7]}"); }
static void m_kv_cache_algo_not_string(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\", \"kv_cache_quant_algo\": 8, \"group_size\": 16, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_mixed_without_layers(const char *d) { set_quant(d, "{\"quant_algo\": \"MIXED_PRECISION\", \"kv_cache_quant_algo\": null, \"exclude_modules\": [\"lm_head\"]}"); }
static void m_mixed_layer_algo_unknown(const char *d) {
    set_quant(d, "{\"quant_algo\": \"MIXED_PRECISION\", \"kv_cache_quant_algo\": null, \"exclude_modules\": [\"lm_head\"], "
                 "\"quantized_layers\": {\"" Q "\": {\"quant_algo\": \"FP9\"}}}");
}
static void m_hf_quant_config_not_json(const char *d) { set_quant(d, "{\"quant_algo\": \"NVFP4\""); }
/* scheme contracts (NVFP4: weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16], weight_scale_2 and input_scale F32 scalar) */
static void m_weight_dtype(const char *d) { const int64_t s[2] = {64, 32}; put_filled(d, Q ".weight", Q ".weight", "I8", 2, s, 64 * 32); }
static void m_weight_shape(const char *d) { const int64_t s[2] = {64, 16}; put_filled(d, Q ".weight", Q ".weight", "U8", 2, s, 64 * 16); }
static void m_weight_scale_dtype(const char *d) { const int64_t s[2] = {64, 4}; put_filled(d, Q ".weight", Q ".weight_scale", "BF16", 2, s, 64 * 4 * 2); }
static void m_weight_scale_shape(const char *d) { const int64_t s[2] = {64, 2}; put_filled(d, Q ".weight", Q ".weight_scale", "F8_E4M3", 2, s, 64 * 2); }
static void m_weight_scale_2_dtype(const char *d) { put_filled(d, Q ".weight", Q ".weight_scale_2", "F16", 0, NULL, 2); }
static void m_weight_scale_2_shape(const char *d) { const int64_t s[1] = {3}; put_filled(d, Q ".weight", Q ".weight_scale_2", "F32", 1, s, 12); }
static void m_input_scale_dtype(const char *d) { put_filled(d, Q ".weight", Q ".input_scale", "BF16", 0, NULL, 2); }
static void m_weight_missing(const char *d) { put_tensor(d, Q ".weight", Q ".weight", NULL, 0, NULL, NULL, 0); }
static void m_weight_scale_missing(const char *d) { put_tensor(d, Q ".weight", Q ".weight_scale", NULL, 0, NULL, NULL, 0); }
static void m_weight_scale_2_missing(const char *d) { put_tensor(d, Q ".weight", Q ".weight_scale_2", NULL, 0, NULL, NULL, 0); }
static void m_input_scale_missing(const char *d) { put_tensor(d, Q ".weight", Q ".input_scale", NULL, 0, NULL, NULL, 0); }
static void m_k_not_divisible_by_group(const char *d) { /* K = 2 * 28 = 56, not a multiple of 16 */
    const int64_t s[2] = {64, 28}, ss[2] = {64, 3};
    put_filled(d, Q ".weight", Q ".weight", "U8", 2, s, 64 * 28);
    put_filled(d, Q ".weight", Q ".weight_scale", "F8_E4M3", 2, ss, 64 * 3);
}
static void m_extra_tensor(const char *d) { put_f32(d, Q ".weight_scale_inv", 1.0f); }
static void m_stored_bf16_resolves_nvfp4(const char *d) {
    const int64_t s[2] = {64, 64};
    put_filled(d, L0 "self_attn.o_proj.weight", L0 "self_attn.o_proj.weight", "BF16", 2, s, 64 * 64 * 2);
    static const char *const roles[] = {"weight_scale", "weight_scale_2", "input_scale"};
    for (int i = 0; i < 3; i++) {
        char n[128];
        snprintf(n, sizeof n, L0 "self_attn.o_proj.%s", roles[i]);
        put_tensor(d, L0 "self_attn.o_proj.weight", n, NULL, 0, NULL, NULL, 0);
    }
}
static void m_embedding_quantized(const char *d) { const int64_t s[2] = {96, 64}; put_filled(d, "model.embed_tokens.weight", "model.embed_tokens.weight", "U8", 2, s, 96 * 64); }
static void m_kv_scale_without_kv_algo(const char *d) { put_f32(d, K_ ".k_scale", 0.01f); }
static void m_fused_shards_different_algos(const char *d) {
    /* MIXED_PRECISION naming k_proj FP8 while q_proj and v_proj are NVFP4 */
    char q[4096];
    int o = snprintf(q, sizeof q, "{\"quant_algo\": \"MIXED_PRECISION\", \"kv_cache_quant_algo\": null, \"exclude_modules\": [\"lm_head\"], \"quantized_layers\": {");
    static const char *const projs[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 7; i++)
            o += snprintf(q + o, sizeof q - (size_t)o, "%s\"model.layers.%d.%s\": {\"quant_algo\": \"%s\"%s}", l || i ? ", " : "", l, projs[i],
                          l == 0 && i == 1 ? "FP8" : "NVFP4", l == 0 && i == 1 ? "" : ", \"group_size\": 16");
    snprintf(q + o, sizeof q - (size_t)o, "}}");
    set_quant(d, q);
}
static void m_fused_shards_different_global_scale(const char *d) {
    stf f = st_load(d, SHARD1); /* k_proj.weight_scale_2 doubled: q/k/v no longer share it */
    const cJSON *e = cJSON_GetObjectItem(f.hdr, K_ ".weight_scale_2");
    float v;
    memcpy(&v, f.data + off(e, 0), 4);
    v *= 2.0f;
    memcpy(f.data + off(e, 0), &v, 4);
    st_save(d, SHARD1, &f);
}
static void m_expert_missing_scales(const char *d) {
    const int64_t s[2] = {64, 32};
    put_filled(d, L0 "mlp.down_proj.weight", L0 "mlp.experts.0.gate_proj.weight", "U8", 2, s, 64 * 32);
}
/* scale values (NaN, Inf, zero, negative) */
static void m_input_scale_nan(const char *d) { put_f32(d, O ".input_scale", NAN); }
static void m_weight_scale_2_inf(const char *d) { put_f32(d, O ".weight_scale_2", INFINITY); }
static void m_input_scale_zero(const char *d) { put_f32(d, O ".input_scale", 0.0f); }
static void m_weight_scale_2_negative(const char *d) { put_f32(d, O ".weight_scale_2", -0.5f); }
static void m_weight_scale_e4m3_nan(const char *d) {
    stf f = st_load(d, SHARD1);
    f.data[off(cJSON_GetObjectItem(f.hdr, Q ".weight_scale"), 0) + 5] = 0x7f; /* e4m3 NaN, block 5 */
    st_save(d, SHARD1, &f);
}

static const mcase cases[] = {
    /* safetensors shards */
    {"truncated_shard", m_truncated_shard, OPEN, SHARD1, "tensor "},
    {"shard_one_byte_short", m_shard_one_byte_short, OPEN, SHARD2, "past the end"},
    {"shard_empty", m_shard_empty, OPEN, SHARD1, "byte"},
    {"shard_shorter_than_length_field", m_shard_too_short, OPEN, SHARD1, "byte"},
    {"header_length_beyond_file", m_header_len_beyond_file, OPEN, SHARD1, "header length"},
    {"header_length_2^64-1", m_header_len_absurd, OPEN, SHARD1, "header length 18446744073709551615"},
    {"header_length_over_100MB_limit", m_header_over_limit, OPEN, SHARD1, "header length 200000000"},
    {"header_not_json", m_header_not_json, OPEN, SHARD2, "JSON"},
    {"header_not_object", m_header_not_object, OPEN, SHARD2, "'{'"},
    {"offsets_overlapping", m_offsets_overlap, OPEN, SHARD1, Q ".weight_scale"},
    {"offsets_past_end", m_offsets_past_end, OPEN, SHARD1, "model.embed_tokens.weight"},
    {"offsets_reversed", m_offsets_reversed, OPEN, SHARD1, Q ".weight"},
    {"shape_x_dtype_not_span", m_shape_dtype_span, OPEN, SHARD1, Q ".weight"},
    {"dtype_x_shape_not_span", m_dtype_span, OPEN, SHARD1, Q ".weight_scale"},
    {"shape_overflows_u64", m_shape_overflow, OPEN, SHARD1, Q ".weight"},
    {"shape_negative", m_shape_negative, OPEN, SHARD1, Q ".weight"},
    {"dtype_unknown", m_dtype_unknown, OPEN, SHARD1, "F4_E2M1X"},
    /* shard index */
    {"index_names_missing_shard", m_index_missing_shard, OPEN, "model-00003-of-00003.safetensors", INDEX},
    {"index_path_outside_directory", m_index_path_outside, OPEN, INDEX, "\"..\""},
    {"index_absolute_path", m_index_absolute_path, OPEN, INDEX, "absolute"},
    {"index_not_json", m_index_not_json, OPEN, INDEX, "JSON"},
    {"index_weight_map_not_object", m_index_weight_map_not_object, OPEN, INDEX, "weight_map"},
    {"index_lists_tensor_in_wrong_shard", m_index_wrong_shard, OPEN, INDEX, Q ".weight"},
    {"index_lists_absent_tensor", m_index_ghost_tensor, OPEN, INDEX, "model.layers.0.mlp.ghost.weight"},
    {"duplicate_tensor_across_shards", m_duplicate_across_shards, OPEN, "", L0 "input_layernorm.weight"},
    /* config.json */
    {"config_json_missing", m_config_missing, OPEN, "config.json", "not found"},
    {"config_json_not_json", m_config_not_json, OPEN, "config.json", "JSON"},
    {"config_hidden_size_string", m_config_hidden_size_string, OPEN, "config.json", "hidden_size"},
    {"config_layers_negative", m_config_layers_negative, OPEN, "config.json", "num_hidden_layers"},
    {"config_architectures_not_list", m_config_architectures_not_list, OPEN, "config.json", "architectures"},
    {"config_quantization_config_not_object", m_config_quantization_config_not_object, OPEN, "config.json", "quantization_config"},
    {"unsupported_architecture", m_unsupported_architecture, ARCH, "config.json", "architecture \"FrobnicatorForCausalLM\" is not supported, expected one of the "},
    /* quantization config (the seeds' errors) */
    {"quant_algo_unknown", m_quant_algo_unknown, OPEN, "hf_quant_config.json", "\"NVFP5\" is not one of"},
    {"quant_algo_missing", m_quant_algo_missing, OPEN, "hf_quant_config.json", "quant_algo is missing"},
    {"quant_algo_not_string", m_quant_algo_not_string, OPEN, "hf_quant_config.json", "quant_algo"},
    {"quantization_not_object", m_quantization_not_object, OPEN, "hf_quant_config.json", "quantization"},
    {"nvfp4_group_size_missing", m_nvfp4_group_size_missing, OPEN, "hf_quant_config.json", "group_size"},
    {"group_size_zero", m_group_size_zero, OPEN, "hf_quant_config.json", "group_size"},
    {"group_size_not_integer", m_group_size_not_integer, OPEN, "hf_quant_config.json", "group_size"},
    {"exclude_modules_null", m_exclude_modules_null, OPEN, "hf_quant_config.json", "exclude_modules"},
    {"exclude_modules_not_strings", m_exclude_modules_not_strings, OPEN, "hf_quant_config.json", "exclude_modules"},
    {"kv_cache_quant_algo_not_string", m_kv_cache_algo_not_string, OPEN, "hf_quant_config.json", "kv_cache_quant_algo"},
    {"mixed_precision_without_quantized_layers", m_mixed_without_layers, OPEN, "hf_quant_config.json", "quantized_layers"},
    {"mixed_precision_layer_algo_unknown", m_mixed_layer_algo_unknown, OPEN, "hf_quant_config.json", "\"FP9\""},
    {"hf_quant_config_not_json", m_hf_quant_config_not_json, OPEN, "hf_quant_config.json", "JSON"},
    /* scheme contracts */
    {"weight_wrong_dtype", m_weight_dtype, CHECK, Q ".weight", "dtype I8, expected U8"},
    {"weight_wrong_shape", m_weight_shape, CHECK, Q ".weight", "shape [64, 16], expected [64, 32] from config.json"},
    {"weight_scale_wrong_dtype", m_weight_scale_dtype, CHECK, Q ".weight_scale", "dtype BF16, expected F8_E4M3"},
    {"weight_scale_wrong_shape", m_weight_scale_shape, CHECK, Q ".weight_scale", "shape [64, 2], expected [64, 4]"},
    {"weight_scale_2_wrong_dtype", m_weight_scale_2_dtype, CHECK, Q ".weight_scale_2", "dtype F16, expected F32"},
    {"weight_scale_2_wrong_shape", m_weight_scale_2_shape, CHECK, Q ".weight_scale_2", "shape [3]"},
    {"input_scale_wrong_dtype", m_input_scale_dtype, CHECK, Q ".input_scale", "dtype BF16, expected F32"},
    {"weight_missing", m_weight_missing, CHECK, Q, "missing tensor weight"},
    {"weight_scale_missing", m_weight_scale_missing, CHECK, Q, "missing tensor weight_scale "},
    {"weight_scale_2_missing", m_weight_scale_2_missing, CHECK, Q, "missing tensor weight_scale_2"},
    {"input_scale_missing", m_input_scale_missing, CHECK, Q, "missing tensor input_scale"},
    {"k_not_divisible_by_group", m_k_not_divisible_by_group, CHECK, Q ".weight", "K=56 is not a multiple of 16"},
    {"extra_tensor", m_extra_tensor, NOTE, Q ".weight_scale_inv", "extra tensor"},
    {"stored_bf16_but_resolves_nvfp4", m_stored_bf16_resolves_nvfp4, CHECK, L0 "self_attn.o_proj", "stored as BF16"},
    {"embedding_quantized", m_embedding_quantized, CHECK, "model.embed_tokens.weight", "dtype U8"},
    {"kv_scale_without_kv_cache_quant_algo", m_kv_scale_without_kv_algo, NOTE, K_ ".k_scale", "kv_cache_quant_algo"},
    {"fused_shards_different_algos", m_fused_shards_different_algos, CHECK, L0 "self_attn.qkv_proj", "q_proj=NVFP4 and k_proj=FP8"},
    {"fused_shards_different_global_scale", m_fused_shards_different_global_scale, NOTE, L0 "self_attn.qkv_proj", "different weight_scale_2"},
    {"expert_missing_tensors", m_expert_missing_scales, NOTE, L0 "mlp.experts.0.gate_proj", "missing tensor weight_scale"},
    /* scale values */
    {"input_scale_nan", m_input_scale_nan, VALUES, O ".input_scale", "1 NaN"},
    {"weight_scale_2_inf", m_weight_scale_2_inf, VALUES, O ".weight_scale_2", "1 Inf"},
    {"input_scale_zero", m_input_scale_zero, VALUES, O ".input_scale", "1 zero"},
    {"weight_scale_2_negative", m_weight_scale_2_negative, VALUES, O ".weight_scale_2", "1 negative"},
    {"weight_scale_e4m3_nan", m_weight_scale_e4m3_nan, VALUES, Q ".weight_scale", "block 5"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* ---- the commands every case runs through ----------------------------------------------------- */

typedef enum cmd_kind {
    CMD_HEADERS, /* reads headers only (inspect): fails at OPEN and CHECK                        */
    CMD_CHECK,   /* lists every problem on stdout (check --values): fails at OPEN, CHECK, VALUES   */
    CMD_RUN,     /* loads everything (run): fails at every stage but NOTE                         */
} cmd_kind;

typedef struct cli_cmd_row {
    const char *args; /* "%s" is the checkpoint directory */
    cmd_kind    kind;
} cli_cmd_row;

static const cli_cmd_row commands[] = {
    {"inspect '%s'", CMD_HEADERS},
    {"inspect --json '%s'", CMD_HEADERS},
    {"check --values '%s'", CMD_CHECK},
    {"run '%s' -p hi -n 1", CMD_RUN},
};

static bool must_fail(cmd_kind k, stage s) {
    switch (k) {
    case CMD_HEADERS: return s == OPEN || s == CHECK || s == NOTE;  /* ARCH: a warning only */
    case CMD_CHECK: return s != RUN;
    case CMD_RUN: return s != NOTE;
    }
    return true;
}

/* ---- directory snapshot: nothing may be written ---------------------------------------------- */

static char *snapshot(const char *dir) {
    size_t cap = 1 << 14, o = 0;
    char *s = calloc(1, cap);
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        if (strcmp(ents[i]->d_name, "..") == 0) { /* the parent changes with other tests running */
            free(ents[i]);
            continue;
        }
        char *p = path_of(dir, ents[i]->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && o < cap)
            o += (size_t)snprintf(s + o, cap - o, "%s %lld %lld.%09ld\n", ents[i]->d_name, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                                  st.st_mtim.tv_nsec);
        free(p);
        free(ents[i]);
    }
    free(ents);
    return s;
}

/* ---- running the CLI ------------------------------------------------------------------------ */

typedef struct cli_out {
    int   status;
    char *out, *err;
} cli_out;

static cli_out run_moq(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "( '%s' %s >'%s/stdout' 2>'%s/stderr' )", tu_moq_bin(), args, g_io, g_io);
    cli_out r = {tu_run(cmd, NULL, 0), read_text(g_io, "stdout", NULL), read_text(g_io, "stderr", NULL)};
    return r;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* A line of `text` starting with `head` and containing `sub`. */
static bool has_line(const char *text, const char *head, const char *sub) {
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (strncmp(l, head, strlen(head)) == 0) {
            char *line = strndup(l, n);
            bool ok = strstr(line, sub) != NULL;
            free(line);
            if (ok) return true;
        }
        l = e ? e + 1 : NULL;
    }
    return false;
}

/* inspect --json: a string of "warnings" containing sub. */
static bool json_warns(const char *out, const char *sub) {
    cJSON *j = cJSON_Parse(out);
    const cJSON *x, *w = cJSON_GetObjectItemCaseSensitive(j, "warnings");
    bool ok = false;
    cJSON_ArrayForEach(x, w) ok |= cJSON_IsString(x) && strstr(x->valuestring, sub) != NULL;
    cJSON_Delete(j);
    return ok;
}

static char *make_case(const mcase *c) {
    char *dir = tu_tmpdir(c->name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good, dir);
    assert_int_equal(tu_run(cmd, NULL, 0), 0);
    c->make(dir);
    return dir;
}

#define CASE_FAIL(...) do { print_error(__VA_ARGS__); print_error("\n"); bad++; goto next; } while (0)
#define CASE_FAIL_END(...) do { print_error(__VA_ARGS__); print_error("\n"); bad++; } while (0)

/* Runs every command on one case; prints each violation and returns their count. */
static int run_case(const mcase *c) {
    int bad = 0;
    char *dir = make_case(c);
    char *before = snapshot(dir);
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        char args[2048], head[512];
        snprintf(args, sizeof args, commands[k].args, dir);
        cli_out r = run_moq(args);
        const char *what = c->name;
        if (r.status < 0 || r.status >= 128) CASE_FAIL("%s: moq %s: killed or crashed (status %d); stderr: %s", what, args, r.status, r.err);
        const bool fail = must_fail(commands[k].kind, c->stage);
        if (!fail) {
            if (r.status != 0) CASE_FAIL("%s: moq %s: exit %d, expected 0; stderr: %s", what, args, r.status, r.err);
            if (c->stage == ARCH && !has_line(r.err, "moq: warning: config.json: ", c->msg) && !json_warns(r.out, c->msg))
                CASE_FAIL("%s: moq %s: no warning \"config.json: ...%s\" (stderr: %s)", what, args, c->msg, r.err);
        } else if (r.status == 0) {
            CASE_FAIL("%s: moq %s: exit 0, expected non-zero; stdout: %.2000s", what, args, r.out);
        } else if (c->stage == OPEN || ((c->stage == RUN || c->stage == ARCH) && commands[k].kind == CMD_RUN)) {
            snprintf(head, sizeof head, "moq: %s", c->where);
            if (r.out[0]) CASE_FAIL("%s: moq %s: stdout not empty: %.500s", what, args, r.out);
            if (count_lines(r.err) != 1) CASE_FAIL("%s: moq %s: stderr is %d lines, expected 1: %s", what, args, count_lines(r.err), r.err);
            if (!has_line(r.err, head, c->msg)) CASE_FAIL("%s: moq %s: stderr \"%s\" lacks \"%s...%s\"", what, args, r.err, head, c->msg);
        } else if (commands[k].kind == CMD_CHECK) {
            snprintf(head, sizeof head, "%s: ", c->where);
            if (!has_line(r.out, head, c->msg)) CASE_FAIL("%s: moq %s: no line \"%s...%s\" in:\n%s", what, args, head, c->msg, r.out);
            if (r.err[0]) CASE_FAIL("%s: moq %s: stderr not empty: %s", what, args, r.err);
        } else {
            if (commands[k].kind == CMD_RUN && r.out[0]) CASE_FAIL("%s: moq %s: stdout not empty: %.500s", what, args, r.out);
            if (count_lines(r.err) != 1 || strncmp(r.err, "moq: ", 5) != 0)
                CASE_FAIL("%s: moq %s: stderr is not one \"moq: where: message\" line: %s", what, args, r.err);
        }
    next:
        free(r.out), free(r.err);
    }
    char *after = snapshot(dir);
    if (strcmp(before, after) != 0) CASE_FAIL_END("%s: the checkpoint directory changed:\nbefore:\n%safter:\n%s", c->name, before, after);
    free(before), free(after);
    tu_rmtree(dir);
    free(dir);
    return bad;
}

static void test_cases(void **state) {
    (void)state;
    assert_true(N_CASES >= 40);
    int bad = 0;
    for (int i = 0; i < N_CASES; i++) bad += run_case(&cases[i]);
    if (bad) fail_msg("%d violations of the CLI contract (listed above)", bad);
}

/* The good checkpoint passes every command: the suite's failures come from the planted faults. */
static void test_good_is_clean(void **state) {
    (void)state;
    char args[2048];
    static const char *const good[] = {"inspect '%s'", "check --values '%s'"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, good[k], g_good);
        cli_out r = run_moq(args);
        if (r.status != 0 || r.err[0]) fail_msg("moq %s: exit %d: %s", args, r.status, r.err);
        free(r.out), free(r.err);
    }
}

/* `moq check` lists every problem of a checkpoint in one run. */
static void test_check_lists_all(void **state) {
    (void)state;
    char *dir = tu_tmpdir("multi_problem");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -p '%s'/* '%s'/", g_good, dir);
    assert_int_equal(tu_run(cmd, NULL, 0), 0);
    m_weight_scale_dtype(dir);                                                         /* layer 0 q_proj */
    put_tensor(dir, "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.input_scale", NULL, 0, NULL, NULL, 0);
    put_f32(dir, "model.layers.1.mlp.down_proj.input_scale", NAN);                      /* values */
    put_f32(dir, "model.layers.1.self_attn.o_proj.weight_scale_inv", 1.0f);              /* extra */
    char args[2048];
    snprintf(args, sizeof args, "check --values '%s'", dir);
    cli_out r = run_moq(args);
    assert_int_equal(r.status, MOQ_ERR_TENSOR);
    static const char *const want[][2] = {
        {Q ".weight_scale: ", "dtype BF16, expected F8_E4M3"},
        {"model.layers.1.mlp.up_proj: ", "missing tensor input_scale"},
        {"model.layers.1.mlp.down_proj.input_scale: ", "1 NaN"},
        {"model.layers.1.self_attn.o_proj.weight_scale_inv: ", "extra tensor"},
    };
    for (int i = 0; i < 4; i++)
        if (!has_line(r.out, want[i][0], want[i][1])) fail_msg("no line \"%s...%s\" in:\n%s", want[i][0], want[i][1], r.out);
    if (!strstr(r.out, ", 4 problems")) fail_msg("expected 4 problems:\n%s", r.out);
    free(r.out), free(r.err);
    tu_rmtree(dir);
    free(dir);
}

/* ---- resource bounds: refuse before allocating, and report out-of-memory naming what was allocated ---- */

/* A valid shard of n one-byte tensors (header ~65 bytes per tensor). */
static void write_many_tensors(const char *dir, const char *name, int n) {
    size_t cap = (size_t)n * 80 + 64, o = 0;
    char *h = malloc(cap);
    h[o++] = '{';
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(h + o, cap - o, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", i, i, i + 1);
    h[o++] = '}';
    while (o % 8) h[o++] = ' ';
    uint8_t *b = calloc(1, 8 + o + (size_t)n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)o >> (8 * i));
    memcpy(b + 8, h, o);
    write_bytes(dir, name, b, 8 + o + (size_t)n);
    free(b), free(h);
}

/* Runs `moq inspect path` under an address-space limit (KiB). */
static cli_out run_limited(const char *path, long kib) {
    char args[2048];
    snprintf(args, sizeof args, "inspect '%s'", path);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "( ulimit -v %ld; '%s' %s >'%s/stdout' 2>'%s/stderr' )", kib, tu_moq_bin(), args, g_io, g_io);
    cli_out r = {tu_run(cmd, NULL, 0), read_text(g_io, "stdout", NULL), read_text(g_io, "stderr", NULL)};
    return r;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { UNDER_SANITIZER = 1 };
#else
enum { UNDER_SANITIZER = 0 };
#endif

static void test_resource_bounds(void **state) {
    (void)state;
    if (UNDER_SANITIZER) {
        skip(); /* the sanitizer runtime reserves terabytes of address space: RLIMIT_AS cannot be used */
        return;
    }
    char *dir = tu_tmpdir("bounds");
    /* 100,000 tensors: a ~6.5 MB header that needs tens of MB of JSON tree and tables. */
    write_many_tensors(dir, "many.safetensors", 100000);
    char *many = path_of(dir, "many.safetensors");
    cli_out r = run_limited(many, 4L << 20); /* 4 GiB: enough */
    if (r.status != 0) fail_msg("many.safetensors without a tight limit: exit %d: %s", r.status, r.err);
    free(r.out), free(r.err);
    int nomem = 0;
    static const long limits_mib[] = {24, 32, 40, 48, 64, 96, 128};
    for (size_t li = 0; li < sizeof limits_mib / sizeof limits_mib[0]; li++) {
        const long mib = limits_mib[li];
        r = run_limited(many, mib << 10);
        if (r.status != 0) {
            /* below what the process needs to start, the loader may fail before main: only judge our own lines */
            if (strncmp(r.err, "moq: ", 5) == 0) {
                if (r.status != MOQ_ERR_NOMEM) fail_msg("limit %ld MiB: exit %d, expected %d (out of memory): %s", mib, r.status, MOQ_ERR_NOMEM, r.err);
                if (count_lines(r.err) != 1 || strncmp(r.err, "moq: many.safetensors: ", 23) != 0)
                    fail_msg("limit %ld MiB: not one \"moq: many.safetensors: ...\" line: %s", mib, r.err);
                if (!strstr(r.err, "allocat") && !strstr(r.err, "out of memory") && !strstr(r.err, "cannot map")) fail_msg("limit %ld MiB: does not say what was allocated: %s", mib, r.err);
                nomem++;
            } else if (r.status >= 128 || r.status < 0) {
                fail_msg("limit %ld MiB: killed (status %d): %s", mib, r.status, r.err);
            }
        }
        free(r.out), free(r.err);
    }
    if (!nomem) fail_msg("no address-space limit between 24 and 128 MiB made loading run out of memory");
    free(many);

    /* An 8 GiB sparse shard under a 1 GiB limit: the map fails, naming the shard and the size. */
    const char *hdr = "{\"w\":{\"dtype\":\"U8\",\"shape\":[8589934592],\"data_offsets\":[0,8589934592]}}      ";
    char *big = tu_write_st(dir, "big.safetensors", hdr, 0);
    if (truncate(big, (off_t)(8 + strlen(hdr)) + (8LL << 30)) != 0) {
        free(big);
        tu_rmtree(dir), free(dir);
        skip(); /* no sparse files here */
    }
    r = run_limited(big, 1L << 20);
    assert_int_equal(r.status, MOQ_ERR_NOMEM);
    char want[128];
    snprintf(want, sizeof want, "moq: big.safetensors: cannot map %llu bytes", 8ULL + strlen(hdr) + (8ULL << 30));
    if (!strstr(r.err, want)) fail_msg("8 GiB map under 1 GiB: \"%s\" lacks \"%s\"", r.err, want);
    free(r.out), free(r.err);
    free(big);
    tu_rmtree(dir), free(dir);
}

/* The case table as markdown. full: also the message moq gives today (needs the CLI; a doc
 * column only: the assertions use the `message contains` column). */
static int setup(void **state);
static int teardown(void **state);
static void print_markdown(bool full) {
    printf("| # | case (what is wrong) | found by | where | message contains |%s\n|---|---|---|---|---|%s\n", full ? " message today |" : "",
           full ? "---|" : "");
    if (full && setup(NULL) != 0) return;
    for (int i = 0; i < N_CASES; i++) {
        printf("| %d | `%s` | %s | `%s` | `%s` |", i + 1, cases[i].name, stage_name[cases[i].stage], cases[i].where[0] ? cases[i].where : "(a shard)",
               cases[i].msg);
        if (full) {
            char *dir = make_case(&cases[i]);
            char args[2048];
            snprintf(args, sizeof args, cases[i].stage == OPEN ? "inspect '%s'" : cases[i].stage == RUN ? "run '%s' -p hi -n 1" : "check --values '%s'", dir);
            cli_out r = run_moq(args);
            const bool on_err = cases[i].stage == OPEN || cases[i].stage == RUN;
            const char *text = on_err ? r.err : r.out;
            if (on_err && strncmp(text, "moq: ", 5) == 0) text += 5;
            size_t n = strcspn(text, "\n");
            printf(" %.*s |", (int)n, text);
            free(r.out), free(r.err);
            tu_rmtree(dir);
            free(dir);
        }
        printf("\n");
    }
    if (full) teardown(NULL);
}

static int setup(void **state) {
    (void)state;
    g_io = tu_tmpdir("malformed_io");
    g_good = tu_tmpdir("malformed_good");
    char args[2048];
    snprintf(args, sizeof args,
             "synth '%s' --algo NVFP4 --layers 2 --hidden 64 --inter 128 --heads 4 --kv-heads 2 --vocab 288 --shards 2", g_good);
    cli_out r = run_moq(args);
    int st = r.status;
    free(r.out), free(r.err);
    /* `moq run` needs a tokenizer: the repository's tiny golden one (279 tokens < vocab 288). */
    char src[1024], cmd[4096];
    snprintf(src, sizeof src, "%s", __FILE__);
    char *slash = strrchr(src, '/');
    if (slash) *slash = 0; /* tests/e2e */
    snprintf(cmd, sizeof cmd, "cp '%s'/../golden/tokenizer/tiny/tokenizer.json '%s'/../golden/tokenizer/tiny/tokenizer_config.json '%s'/", src, src, g_good);
    return st ? st : tu_run(cmd, NULL, 0);
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_io), tu_rmtree(g_good);
    free(g_io), free(g_good);
    return 0;
}

int main(void) {
    const char *md = getenv("MOQ_MALFORMED_MD");
    if (md && *md) {
        print_markdown(strcmp(md, "full") == 0);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_is_clean),
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_check_lists_all),
        cmocka_unit_test(test_resource_bounds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
