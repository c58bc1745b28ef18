/* test_checkpoint.c — checkpoint directories (src/io/checkpoint.c), config.json architecture
 * fields (src/io/hf_config.c) and the writer (src/io/writer.c).
 *
 * Oracles: the bytes, shapes and names this test hands to moq_writer (round trip); the shard index
 * the writer produced, read back here with cJSON; the Hugging Face index rules (shard names stay
 * inside the directory, every listed tensor is in its shard, names unique across shards); the 16
 * real config.json files of tests/data/modelopt_configs.tar.xz, read here with cJSON independently of
 * hf_config.c. Each error case asserts the status, err.where and the names in the message.
 */
#include "tu.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "io/checkpoint.h"

/* ---- a small model written with moq_writer ---------------------------------------------------- */

typedef struct tspec {
    const char *name;
    moq_dtype   dtype;
    int         ndim;
    int64_t     shape[3];
    size_t      nbytes;  /* computed here from the safetensors element sizes */
} tspec;

static const tspec model_tensors[] = {
    {"model.embed_tokens.weight", MOQ_DT_BF16, 2, {16, 8, 0}, 16 * 8 * 2},
    {"model.layers.0.self_attn.q_proj.weight", MOQ_DT_U8, 2, {8, 4, 0}, 32},
    {"model.layers.0.self_attn.q_proj.weight_scale", MOQ_DT_F8_E4M3, 2, {8, 1, 0}, 8},
    {"model.layers.0.self_attn.q_proj.weight_scale_2", MOQ_DT_F32, 0, {0, 0, 0}, 4},
    {"model.layers.0.mlp.experts.w4", MOQ_DT_F4, 3, {2, 3, 4}, 12},
    {"model.layers.0.empty", MOQ_DT_F16, 2, {0, 5, 0}, 0},
    {"model.layers.0.steps", MOQ_DT_I64, 1, {3, 0, 0}, 24},
    {"model.norm.weight", MOQ_DT_BF16, 1, {8, 0, 0}, 16},
    {"lm_head.weight", MOQ_DT_BF16, 2, {16, 8, 0}, 16 * 8 * 2},
};
#define N_MODEL (sizeof model_tensors / sizeof model_tensors[0])

static const char model_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"torch_dtype\": \"bfloat16\",\n"
    " \"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,\n"
    " \"intermediate_size\": 24, \"vocab_size\": 16, \"max_position_embeddings\": 4096, \"rope_theta\": 500000.0,\n"
    " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true,\n"
    " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}\n";
static const char model_hf_quant[] = "{\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16}}\n";

/* Deterministic bytes for tensor i (malloc'd). */
static uint8_t *tensor_bytes(size_t i) {
    const size_t n = model_tensors[i].nbytes;
    uint8_t *b = malloc(n ? n : 1);
    for (size_t k = 0; k < n; k++) b[k] = (uint8_t)(k * 31 + i * 17 + 1);
    return b;
}

/* Writes the model above into dir with n_shards shards (optionally without config.json). */
static void write_model(const char *dir, int n_shards, bool with_config) {
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dir, err_));
    uint8_t *bufs[N_MODEL];
    for (size_t i = 0; i < N_MODEL; i++) {
        bufs[i] = tensor_bytes(i);
        const tspec *t = &model_tensors[i];
        TU_OK(moq_writer_add(w, t->name, t->dtype, t->ndim, t->shape, bufs[i], t->nbytes, err_));
    }
    TU_OK(moq_writer_metadata(w, "format", "pt", err_));
    TU_OK(moq_writer_metadata(w, "producer", "test_checkpoint", err_));
    if (with_config) TU_OK(moq_writer_file(w, "config.json", model_config, err_));
    TU_OK(moq_writer_file(w, "hf_quant_config.json", model_hf_quant, err_));
    TU_OK(moq_writer_finish(w, n_shards, err_));
    moq_writer_free(w);
    for (size_t i = 0; i < N_MODEL; i++) free(bufs[i]);
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void write_text(const char *dir, const char *name, const char *text) {
    free(tu_write_file(dir, name, text, strlen(text)));
}

/* Number of directory entries other than . and .., and whether any name contains `sub`. */
static int dir_entries(const char *dir, const char *sub, bool *found) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    if (found) *found = false;
    for (struct dirent *de; (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        n++;
        if (found && sub && strstr(de->d_name, sub)) *found = true;
    }
    closedir(d);
    return n;
}

static void check_model_tensors(const moq_checkpoint *c) {
    assert_int_equal(moq_checkpoint_tensor_count(c), N_MODEL);
    for (size_t i = 0; i < N_MODEL; i++) {
        const tspec *s = &model_tensors[i];
        const moq_tensor *t = moq_checkpoint_tensor(c, s->name);
        if (!t) fail_msg("tensor %s not found by name", s->name);
        assert_string_equal(t->name, s->name);
        assert_int_equal(t->dtype, s->dtype);
        assert_int_equal(t->ndim, s->ndim);
        uint64_t nelem = 1;
        for (int d = 0; d < s->ndim; d++) {
            assert_int_equal(t->shape[d], s->shape[d]);
            nelem *= (uint64_t)s->shape[d];
        }
        assert_int_equal(t->nelem, nelem);
        assert_int_equal(t->nbytes, s->nbytes);
        if (s->nbytes) {
            uint8_t *want = tensor_bytes(i);
            assert_memory_equal(t->data, want, s->nbytes);
            free(want);
        } else {
            assert_null(t->data);
        }
        assert_true(t->shard >= 0 && t->shard < moq_checkpoint_shard_count(c));
    }
    assert_null(moq_checkpoint_tensor(c, "model.layers.1.mlp.down_proj.weight"));
    assert_null(moq_checkpoint_tensor(c, ""));
    assert_null(moq_checkpoint_tensor(c, NULL));
}

/* ---- round trip -------------------------------------------------------------------------------- */

static void test_two_shard_round_trip(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_two");
    write_model(dir, 2, true);
    bool tmp_left;
    dir_entries(dir, ".tmp-moq", &tmp_left);
    assert_false(tmp_left);

    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    assert_string_equal(moq_checkpoint_path(c), dir);
    assert_int_equal(moq_checkpoint_shard_count(c), 2);
    assert_string_equal(moq_checkpoint_shard_name(c, 0), "model-00001-of-00002.safetensors");
    assert_string_equal(moq_checkpoint_shard_name(c, 1), "model-00002-of-00002.safetensors");
    check_model_tensors(c);
    assert_int_equal(moq_checkpoint_warning_count(c), 0);

    /* Each tensor's shard is the one the writer's index names (read here with cJSON). */
    char *ixp = path_in(dir, "model.safetensors.index.json");
    char *ixt = tu_read_file(ixp, NULL);
    cJSON *ix = cJSON_Parse(ixt);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix, "weight_map");
    assert_int_equal(cJSON_GetArraySize(wm), N_MODEL);
    int per_shard[2] = {0, 0};
    for (const cJSON *e = wm->child; e; e = e->next) {
        const moq_tensor *t = moq_checkpoint_tensor(c, e->string);
        assert_non_null(t);
        assert_string_equal(moq_checkpoint_shard_name(c, t->shard), e->valuestring);
        per_shard[t->shard]++;
    }
    assert_true(per_shard[0] > 0 && per_shard[1] > 0);
    assert_int_equal(moq_checkpoint_shard_tensor_count(c, 0), per_shard[0]);
    assert_int_equal(moq_checkpoint_shard_tensor_count(c, 1), per_shard[1]);
    /* total_size is the sum of tensor bytes. */
    size_t total = 0;
    for (size_t i = 0; i < N_MODEL; i++) total += model_tensors[i].nbytes;
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ix, "metadata"), "total_size");
    assert_true(cJSON_IsNumber(ts));
    assert_int_equal((size_t)ts->valuedouble, total);
    cJSON_Delete(ix);
    free(ixt);
    free(ixp);

    /* Stable order: by shard, then by data offset. */
    const moq_tensor *prev = NULL;
    for (size_t i = 0; i < moq_checkpoint_tensor_count(c); i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        assert_non_null(t);
        if (prev && prev->shard == t->shard && prev->data && t->data)
            assert_true((const uint8_t *)prev->data + prev->nbytes == (const uint8_t *)t->data);
        if (prev) assert_true(prev->shard <= t->shard);
        prev = t;
    }
    assert_null(moq_checkpoint_tensor_at(c, N_MODEL));

    /* Shard files: sizes as on disk, headers padded to a multiple of 8 (writer.c's promise). */
    for (int s = 0; s < 2; s++) {
        char *p = path_in(dir, moq_checkpoint_shard_name(c, s));
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        assert_int_equal(moq_checkpoint_shard_size(c, s), (uint64_t)sb.st_size);
        size_t len;
        uint8_t *b = tu_read_file(p, &len);
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
        assert_int_equal(n % 8, 0);
        free(b);
        free(p);
        /* Metadata is written into every shard, in order. */
        assert_int_equal(moq_checkpoint_metadata_count(c, s), 2);
        const char *k = NULL, *v = NULL;
        assert_true(moq_checkpoint_metadata_at(c, s, 0, &k, &v));
        assert_string_equal(k, "format");
        assert_string_equal(v, "pt");
        assert_true(moq_checkpoint_metadata_at(c, s, 1, &k, &v));
        assert_string_equal(k, "producer");
        assert_string_equal(v, "test_checkpoint");
        assert_false(moq_checkpoint_metadata_at(c, s, 2, &k, &v));
    }

    /* Side files: text as written; architecture fields from config.json. */
    assert_string_equal(moq_checkpoint_json_text(c, "config.json"), model_config);
    assert_string_equal(moq_checkpoint_json_text(c, "hf_quant_config.json"), model_hf_quant);
    assert_non_null(moq_checkpoint_json_text(c, "model.safetensors.index.json"));
    assert_null(moq_checkpoint_json_text(c, "generation_config.json"));
    assert_null(moq_checkpoint_json_text(c, "tokenizer.json"));
    const moq_arch *a = moq_checkpoint_arch(c);
    assert_non_null(a);
    assert_string_equal(a->architecture, "LlamaForCausalLM");
    assert_string_equal(a->model_type, "llama");
    assert_string_equal(a->torch_dtype, "bfloat16");
    assert_int_equal(a->hidden_size, 8);
    assert_int_equal(a->num_hidden_layers, 1);
    assert_int_equal(a->num_attention_heads, 2);
    assert_int_equal(a->num_key_value_heads, 1);
    assert_int_equal(a->head_dim, 4); /* absent: hidden / heads */
    assert_int_equal(a->intermediate_size, 24);
    assert_int_equal(a->vocab_size, 16);
    assert_int_equal(a->max_position_embeddings, 4096);
    assert_int_equal(a->num_experts, 0);
    assert_true(a->rope_theta == 500000.0);
    assert_true(a->rms_norm_eps == 1e-05);
    assert_true(a->tie_word_embeddings);
    assert_string_equal(a->rope_scaling_type, "llama3");
    assert_true(a->rope_scaling_factor == 8.0);
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
}

static void test_single_file_and_single_shard(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_one");
    write_model(dir, 1, true);
    bool has_index;
    dir_entries(dir, "index.json", &has_index);
    assert_false(has_index); /* one shard: model.safetensors, no index */

    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    assert_int_equal(moq_checkpoint_shard_count(c), 1);
    assert_string_equal(moq_checkpoint_shard_name(c, 0), "model.safetensors");
    assert_int_equal(moq_checkpoint_shard_tensor_count(c, 0), N_MODEL);
    check_model_tensors(c);
    moq_checkpoint_free(c);

    /* The file alone: named by its base name, no config, no arch. */
    char *file = path_in(dir, "model.safetensors");
    TU_OK(moq_checkpoint_open(&c, file, NULL, err_));
    assert_int_equal(moq_checkpoint_shard_count(c), 1);
    assert_string_equal(moq_checkpoint_shard_name(c, 0), "model.safetensors");
    check_model_tensors(c);
    assert_null(moq_checkpoint_arch(c));
    assert_null(moq_checkpoint_json_text(c, "config.json"));
    moq_checkpoint_free(c);
    free(file);
    tu_rmtree(dir);
    free(dir);
}

/* No index and no model.safetensors: every *.safetensors, sorted by name. */
static void test_directory_of_loose_shards(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_loose");
    write_text(dir, "config.json", "{}");
    free(tu_write_st(dir, "b.safetensors", "{\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2));
    free(tu_write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
    write_text(dir, "notes.safetensors.txt", "not a shard");
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    assert_int_equal(moq_checkpoint_shard_count(c), 2);
    assert_string_equal(moq_checkpoint_shard_name(c, 0), "a.safetensors");
    assert_string_equal(moq_checkpoint_shard_name(c, 1), "b.safetensors");
    assert_int_equal(moq_checkpoint_tensor(c, "y")->shard, 1);
    assert_string_equal(moq_checkpoint_tensor_at(c, 0)->name, "x");
    assert_non_null(moq_checkpoint_arch(c)); /* "{}" is a config with nothing in it */
    assert_int_equal(moq_checkpoint_arch(c)->hidden_size, 0);
    moq_checkpoint_free(c);

    /* Same tensor in two shards. */
    free(tu_write_st(dir, "c.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1));
    moq_error e = {0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, "c.safetensors", "tensor x is also in a.safetensors");
    assert_string_equal(e.where, "c.safetensors");
    assert_null(c);

    /* The same with an index that lists x once: the shards still disagree. */
    free(tu_write_st(dir, "c.safetensors",
                     "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2));
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\", \"z\": \"c.safetensors\"}}");
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, "c.safetensors", "tensor x is also in a.safetensors");
    assert_string_equal(e.where, "c.safetensors");
    tu_rmtree(dir);
    free(dir);
}

/* ---- index errors ------------------------------------------------------------------------------- */

#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"
#define IX "model.safetensors.index.json"

/* weight_map entries of the written two-shard model, with the shard assignment read from disk. */
static char *index_with(const char *dir, const char *extra_entry, const char *replace_name, const char *replace_shard) {
    char *ixp = path_in(dir, IX);
    char *ixt = tu_read_file(ixp, NULL);
    cJSON *ix = cJSON_Parse(ixt);
    cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix, "weight_map");
    if (replace_name) cJSON_ReplaceItemInObjectCaseSensitive(wm, replace_name, cJSON_CreateString(replace_shard));
    char *s = cJSON_PrintUnformatted(ix);
    cJSON_Delete(ix);
    free(ixt);
    free(ixp);
    if (extra_entry) { /* splice `"name": "shard",` right after {"weight_map":{ */
        char *at = strstr(s, "\"weight_map\":{");
        assert_non_null(at);
        at += strlen("\"weight_map\":{");
        size_t n = strlen(s) + strlen(extra_entry) + 2;
        char *t = malloc(n);
        snprintf(t, n, "%.*s%s,%s", (int)(at - s), s, extra_entry, at);
        free(s);
        s = t;
    }
    return s;
}

typedef struct ix_case {
    const char *what;
    const char *index;       /* whole index text; NULL = edit the written one with the fields below */
    const char *extra;       /* extra weight_map entry                                             */
    const char *rename_t;    /* tensor whose shard is replaced by rename_s                         */
    const char *rename_s;
    moq_status  code;
    const char *where;
    const char *msg1, *msg2; /* substrings the message must hold (tensor and shard names)          */
} ix_case;

static const ix_case ix_cases[] = {
    {"shard missing", NULL, NULL, "lm_head.weight", "model-00003-of-00003.safetensors", MOQ_ERR_IO,
     "model-00003-of-00003.safetensors", "cannot open", "lists it for tensor lm_head.weight"},
    {"absolute shard path", NULL, "\"x\":\"/etc/passwd\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "\"/etc/passwd\" is an absolute path","tensor x: shard"},
    {"dot-dot shard path", NULL, "\"x\":\"../x.safetensors\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "\"../x.safetensors\" has a \"..\" component","tensor x: shard"},
    {"dot-dot inside shard path", NULL, "\"x\":\"a/../../x\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "\"a/../../x\" has a \"..\" component","tensor x: shard"},
    {"trailing dot-dot", NULL, "\"x\":\"sub/..\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "\"sub/..\" has a \"..\" component","tensor x: shard"},
    {"empty shard name", NULL, "\"x\":\"\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "tensor x: weight_map names an empty shard file", NULL},
    {"backslash", NULL, "\"x\":\"..\\\\x.safetensors\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "backslash","tensor x: shard"},
    {"tensor absent from its shard", NULL, "\"model.layers.9.ghost\":\"" S1 "\"", NULL, NULL, MOQ_ERR_TENSOR, IX,
     "tensor model.layers.9.ghost is listed in shard " S1, "but " S1 " does not contain it"},
    {"tensor under the wrong shard", NULL, NULL, "lm_head.weight", S1, MOQ_ERR_TENSOR, IX,
     "tensor lm_head.weight is listed in shard " S1, "but it is in " S2},
    {"tensor listed twice", NULL, "\"lm_head.weight\":\"" S2 "\"", NULL, NULL, MOQ_ERR_FORMAT, IX, "tensor lm_head.weight is listed twice", NULL},
    {"shard name not a string", NULL, "\"x\":3", NULL, NULL, MOQ_ERR_FORMAT, IX, "weight_map.x is a number, expected a shard file name", NULL},
    {"weight_map missing", "{\"metadata\": {}}", NULL, NULL, NULL, MOQ_ERR_FORMAT, IX, "weight_map is absent", NULL},
    {"weight_map not an object", "{\"weight_map\": [\"" S1 "\"]}", NULL, NULL, NULL, MOQ_ERR_FORMAT, IX, "weight_map is an array", NULL},
    {"weight_map empty", "{\"weight_map\": {}}", NULL, NULL, NULL, MOQ_ERR_FORMAT, IX, "weight_map is empty", NULL},
    {"index not JSON", "{\"weight_map\": {", NULL, NULL, NULL, MOQ_ERR_FORMAT, IX, "not valid JSON", NULL},
    {"index not an object", "[]", NULL, NULL, NULL, MOQ_ERR_FORMAT, IX, "top level is an array", NULL},
};

static void test_index_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_index");
    write_model(dir, 2, true);
    char *ixp = path_in(dir, IX);
    char *orig = tu_read_file(ixp, NULL);
    for (size_t i = 0; i < sizeof ix_cases / sizeof ix_cases[0]; i++) {
        const ix_case *k = &ix_cases[i];
        write_text(dir, IX, orig); /* each case edits the index the writer produced */
        char *text = k->index ? strdup(k->index) : index_with(dir, k->extra, k->rename_t, k->rename_s);
        write_text(dir, IX, text);
        moq_checkpoint *c = NULL;
        moq_error e = {0};
        moq_status st = moq_checkpoint_open(&c, dir, NULL, &e);
        char b[1200];
        moq_error_format(&e, b, sizeof b);
        if (st != k->code || strcmp(e.where, k->where) != 0 || !strstr(e.msg, k->msg1) || (k->msg2 && !strstr(e.msg, k->msg2)))
            fail_msg("%s: got %s \"%s\"; expected %s with where \"%s\" and \"%s\"%s%s", k->what, moq_status_str(st), b,
                     moq_status_str(k->code), k->where, k->msg1, k->msg2 ? " and " : "", k->msg2 ? k->msg2 : "");
        assert_null(c);
        free(text);
    }
    /* The untouched index opens. */
    write_text(dir, IX, orig);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    moq_checkpoint_free(c);

    free(orig);
    free(ixp);
    tu_rmtree(dir);
    free(dir);
}

static void test_shard_deleted_or_damaged(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_damaged");
    write_model(dir, 2, true);
    char *s2 = path_in(dir, S2);
    size_t len;
    uint8_t *bytes = tu_read_file(s2, &len);

    /* Truncated by one byte (SQLite-style I/O fault): the shard's own format error. */
    free(tu_write_file(dir, S2, bytes, len - 1));
    moq_checkpoint *c = NULL;
    moq_error e = {0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, S2, "past the end of the data");
    assert_string_equal(e.where, S2);
    assert_true(strncmp(e.msg, "tensor ", 7) == 0);

    /* One byte too many. */
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, bytes, len);
    longer[len] = 0;
    free(tu_write_file(dir, S2, longer, len + 1));
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, S2, "1 bytes short of the end of the file");
    free(longer);

    /* Deleted. */
    assert_int_equal(unlink(s2), 0);
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_IO, S2, "cannot open");
    assert_string_equal(e.where, S2);
    assert_non_null(strstr(e.msg, IX " lists it for tensor "));
    assert_null(c);

    /* Restored: opens again. */
    free(tu_write_file(dir, S2, bytes, len));
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    moq_checkpoint_free(c);
    free(bytes);
    free(s2);
    tu_rmtree(dir);
    free(dir);
}

/* Shard tensors the index omits: kept, reported as warnings naming tensor and shard (at most 5,
 * then a count). */
static void test_unlisted_tensors_warn(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_unlisted");
    write_model(dir, 2, true);
    /* An index listing only lm_head.weight and model.embed_tokens.weight. */
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    char text[512];
    snprintf(text, sizeof text, "{\"weight_map\": {\"lm_head.weight\": \"%s\", \"model.embed_tokens.weight\": \"%s\"}}",
             moq_checkpoint_shard_name(c, moq_checkpoint_tensor(c, "lm_head.weight")->shard),
             moq_checkpoint_shard_name(c, moq_checkpoint_tensor(c, "model.embed_tokens.weight")->shard));
    moq_checkpoint_free(c);
    write_text(dir, IX, text);
    /* Both shards are named in the index, so both are opened; 7 tensors are unlisted. */
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    check_model_tensors(c);
    assert_int_equal(moq_checkpoint_warning_count(c), 6);
    for (int i = 0; i < 5; i++) {
        const char *w = moq_checkpoint_warning(c, i);
        assert_non_null(strstr(w, "but not listed in the index"));
        assert_non_null(strstr(w, IX));
        /* Names a tensor of the model and the shard holding it. */
        const char *t0 = strstr(w, "tensor ");
        assert_non_null(t0);
        char name[128];
        assert_int_equal(sscanf(t0 + 7, "%127s", name), 1);
        const moq_tensor *t = moq_checkpoint_tensor(c, name);
        assert_non_null(t);
        assert_non_null(strstr(w, moq_checkpoint_shard_name(c, t->shard)));
    }
    assert_non_null(strstr(moq_checkpoint_warning(c, 5), "2 more tensors"));
    assert_null(moq_checkpoint_warning(c, 6));
    assert_null(moq_checkpoint_warning(c, -1));
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
}

/* ---- config.json -------------------------------------------------------------------------------- */

typedef struct cfg_case {
    const char *what, *text;
    moq_status  code;
    const char *msg;
} cfg_case;

static const cfg_case cfg_cases[] = {
    {"not JSON", "{\"hidden_size\": 4096,", MOQ_ERR_FORMAT, "not valid JSON"},
    {"trailing bytes", "{\"hidden_size\": 4096} }", MOQ_ERR_FORMAT, "bytes after the JSON value"},
    {"not an object", "[\"LlamaForCausalLM\"]", MOQ_ERR_FORMAT, "top level is an array, expected a JSON object"},
    {"string hidden_size", "{\"hidden_size\": \"4096\"}", MOQ_ERR_CONFIG, "hidden_size is a string, expected an integer"},
    {"fractional layers", "{\"num_hidden_layers\": 32.5}", MOQ_ERR_CONFIG, "num_hidden_layers is a non-integer number"},
    {"negative heads", "{\"num_attention_heads\": -8}", MOQ_ERR_CONFIG, "num_attention_heads is -8, expected a value >= 0"},
    {"bool vocab", "{\"vocab_size\": true}", MOQ_ERR_CONFIG, "vocab_size is a boolean"},
    {"string rope_theta", "{\"rope_theta\": \"1e6\"}", MOQ_ERR_CONFIG, "rope_theta is a string, expected a number"},
    {"architectures not array", "{\"architectures\": \"LlamaForCausalLM\"}", MOQ_ERR_CONFIG, "architectures is a string, expected an array"},
    {"architectures[0] not string", "{\"architectures\": [1]}", MOQ_ERR_CONFIG, "architectures[0] is a number"},
    {"model_type not string", "{\"model_type\": 3}", MOQ_ERR_CONFIG, "model_type is a number, expected a string"},
    {"tie not bool", "{\"tie_word_embeddings\": 1}", MOQ_ERR_CONFIG, "tie_word_embeddings is a number, expected true or false"},
    {"rope_scaling not object", "{\"rope_scaling\": 8}", MOQ_ERR_CONFIG, "rope_scaling is a number, expected an object or null"},
    {"rope_scaling.factor string", "{\"rope_scaling\": {\"factor\": \"8\"}}", MOQ_ERR_CONFIG, "rope_scaling.factor is a string"},
    {"rope_parameters not object", "{\"rope_parameters\": 8}", MOQ_ERR_CONFIG, "rope_parameters is a number, expected an object or null"},
    {"rope_parameters.rope_theta string", "{\"rope_parameters\": {\"rope_theta\": \"1e6\"}}", MOQ_ERR_CONFIG, "rope_parameters.rope_theta is a string"},
    {"rope_theta zero", "{\"rope_theta\": 0}", MOQ_ERR_CONFIG, "rope_theta is 0, expected a value > 0"},
    {"rope_parameters theta negative", "{\"rope_parameters\": {\"rope_theta\": -1}}", MOQ_ERR_CONFIG, "rope_parameters.rope_theta is -1, expected a value > 0"},
    {"text_config field", "{\"text_config\": {\"hidden_size\": \"x\"}}", MOQ_ERR_CONFIG, "text_config.hidden_size is a string"},
    {"text_config negative", "{\"text_config\": {\"vocab_size\": -1}}", MOQ_ERR_CONFIG, "text_config.vocab_size is -1, expected a value >= 0"},
};

static void test_config_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_config");
    write_model(dir, 1, false);
    /* config.json missing: an error by default, allowed with require_config = false. */
    moq_checkpoint *c = NULL;
    moq_error e = {0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_IO, "config.json", "not found");
    assert_string_equal(e.where, "config.json");
    assert_null(c);
    moq_checkpoint_opts o = moq_checkpoint_opts_default();
    assert_true(o.require_config);
    o.require_config = false;
    TU_OK(moq_checkpoint_open(&c, dir, &o, err_));
    assert_null(moq_checkpoint_arch(c));
    check_model_tensors(c);
    moq_checkpoint_free(c);

    for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
        const cfg_case *k = &cfg_cases[i];
        write_text(dir, "config.json", k->text);
        e = (moq_error){0};
        moq_status st = moq_checkpoint_open(&c, dir, NULL, &e);
        if (st != k->code || strcmp(e.where, "config.json") != 0 || !strstr(e.msg, k->msg)) {
            char b[1200];
            moq_error_format(&e, b, sizeof b);
            fail_msg("%s: got %s \"%s\", expected %s \"config.json: ...%s...\"", k->what, moq_status_str(st), b,
                     moq_status_str(k->code), k->msg);
        }
        assert_null(c);
    }
    /* Other side files are checked too, each naming itself. */
    write_text(dir, "config.json", "{}");
    write_text(dir, "generation_config.json", "{\"do_sample\": tru}");
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, "generation_config.json", "not valid JSON");
    char *gen = path_in(dir, "generation_config.json");
    assert_int_equal(unlink(gen), 0);
    free(gen);
    write_text(dir, "hf_quant_config.json", "3");
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_FORMAT, "hf_quant_config.json", "top level is a number");
    tu_rmtree(dir);
    free(dir);
}

static moq_status arch_of(const char *text, moq_arch *a, moq_error *e) {
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    moq_status st = moq_arch_parse(a, j, "config.json", e);
    cJSON_Delete(j);
    return st;
}

static void test_arch_fields(void **state) {
    (void)state;
    moq_arch a;
    moq_error e = {0};
    /* Multimodal layout: the decoder's fields under text_config. */
    assert_int_equal(arch_of("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\","
                             " \"torch_dtype\": \"bfloat16\", \"text_config\": {\"model_type\": \"gemma3_text\", \"hidden_size\": 2560,"
                             " \"num_hidden_layers\": 34, \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 256,"
                             " \"intermediate_size\": 10240, \"vocab_size\": 262208, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-06,"
                             " \"tie_word_embeddings\": true, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}}",
                             &a, &e),
                     MOQ_OK);
    assert_string_equal(a.architecture, "Gemma3ForConditionalGeneration");
    assert_string_equal(a.model_type, "gemma3"); /* the top level wins */
    assert_string_equal(a.torch_dtype, "bfloat16");
    assert_int_equal(a.hidden_size, 2560);
    assert_int_equal(a.num_hidden_layers, 34);
    assert_int_equal(a.num_key_value_heads, 4);
    assert_int_equal(a.head_dim, 256);
    assert_int_equal(a.vocab_size, 262208);
    assert_true(a.rope_theta == 1e6);
    assert_true(a.rms_norm_eps == 1e-6);
    assert_true(a.tie_word_embeddings);
    assert_string_equal(a.rope_scaling_type, "linear");
    assert_true(a.rope_scaling_factor == 8.0);

    /* Expert-count aliases; kv heads default to heads; "dtype" when torch_dtype is absent;
     * rope_scaling "type" when rope_type is absent; rope_theta inside rope_scaling. */
    assert_int_equal(arch_of("{\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"num_attention_heads\": 32,"
                             " \"hidden_size\": 4096, \"dtype\": \"float16\","
                             " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"rope_theta\": 50000}}",
                             &a, &e),
                     MOQ_OK);
    assert_int_equal(a.num_experts, 8);
    assert_int_equal(a.num_experts_per_tok, 2);
    assert_int_equal(a.num_key_value_heads, 32);
    assert_int_equal(a.head_dim, 128);
    assert_string_equal(a.torch_dtype, "float16");
    assert_string_equal(a.rope_scaling_type, "yarn");
    assert_true(a.rope_theta == 50000.0);
    assert_int_equal(arch_of("{\"n_routed_experts\": 256, \"moe_intermediate_size\": 2048}", &a, &e), MOQ_OK);
    assert_int_equal(a.num_experts, 256);
    assert_int_equal(a.moe_intermediate_size, 2048);
    assert_int_equal(arch_of("{\"num_experts\": 128, \"n_routed_experts\": 64}", &a, &e), MOQ_OK);
    assert_int_equal(a.num_experts, 128);
    /* transformers 5: RoPE settings only inside rope_parameters (NUMERICS §12); the dict's own theta
     * wins over a top-level one (transformers keeps it: setdefault). */
    assert_int_equal(arch_of("{\"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}}", &a, &e), MOQ_OK);
    assert_true(a.rope_theta == 1e6);
    assert_string_equal(a.rope_theta_key, "rope_parameters.rope_theta");
    assert_string_equal(a.rope_params_key, "rope_parameters");
    assert_string_equal(a.rope_scaling_type, "default");
    assert_int_equal(arch_of("{\"rope_theta\": 10000, \"rope_parameters\": {\"rope_theta\": 5e5, \"rope_type\": \"yarn\", \"factor\": 4}}", &a, &e), MOQ_OK);
    assert_true(a.rope_theta == 5e5);
    assert_string_equal(a.rope_scaling_type, "yarn");
    assert_true(a.rope_scaling_factor == 4.0);
    assert_int_equal(arch_of("{\"text_config\": {\"rope_parameters\": {\"rope_theta\": 1e6}}}", &a, &e), MOQ_OK);
    assert_true(a.rope_theta == 1e6);
    assert_string_equal(a.rope_theta_key, "text_config.rope_parameters.rope_theta");
    assert_int_equal(arch_of("{\"rope_theta\": 500000.0, \"rope_scaling\": null}", &a, &e), MOQ_OK);
    assert_string_equal(a.rope_theta_key, "rope_theta");
    assert_string_equal(a.rope_params_key, "");
    /* no theta anywhere: 0 and no key (the runner decides: the architecture's default or an error) */
    assert_int_equal(arch_of("{\"hidden_size\": 64}", &a, &e), MOQ_OK);
    assert_true(a.rope_theta == 0);
    assert_string_equal(a.rope_theta_key, "");
    /* null means absent. */
    assert_int_equal(arch_of("{\"hidden_size\": null, \"rope_scaling\": null, \"architectures\": null}", &a, &e), MOQ_OK);
    assert_int_equal(a.hidden_size, 0);
    assert_string_equal(a.architecture, "");
}

/* The real configs: every one parses, and the fields match a plain cJSON lookup (top level first,
 * then text_config; for the expert count the first of the three names present). */
static int64_t lookup_int(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "text_config"), key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static void test_real_configs(void **state) {
    (void)state;
    char *d = tu_data_path("modelopt_configs");
    DIR *dd = opendir(d);
    if (!dd) fail_msg("cannot open %s", d);
    int n = 0;
    for (struct dirent *de; (de = readdir(dd));) {
        const size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, "_config.json") != 0 || strstr(de->d_name, "hf_quant")) continue;
        char *p = path_in(d, de->d_name);
        char *text = tu_read_file(p, NULL);
        cJSON *j = cJSON_Parse(text);
        assert_non_null(j);
        moq_arch a;
        moq_error e = {0};
        moq_status st = moq_arch_parse(&a, j, de->d_name, &e);
        if (st != MOQ_OK) fail_msg("%s: %s: %s", de->d_name, e.where, e.msg);
        static const char *const keys[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"};
        const int64_t got[] = {a.hidden_size, a.num_hidden_layers, a.num_attention_heads, a.vocab_size, a.intermediate_size};
        for (size_t k = 0; k < 5; k++) {
            int64_t want = lookup_int(j, keys[k]);
            if (want < 0) want = 0;
            if (got[k] != want) fail_msg("%s: %s = %lld, expected %lld", de->d_name, keys[k], (long long)got[k], (long long)want);
        }
        int64_t experts = lookup_int(j, "num_experts");
        if (experts < 0) experts = lookup_int(j, "num_local_experts");
        if (experts < 0) experts = lookup_int(j, "n_routed_experts");
        assert_int_equal(a.num_experts, experts < 0 ? 0 : experts);
        const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "architectures"), 0);
        assert_string_equal(a.architecture, cJSON_IsString(arch) ? arch->valuestring : "");
        assert_true(a.hidden_size > 0 && a.num_hidden_layers > 0);
        cJSON_Delete(j);
        free(text);
        free(p);
        n++;
    }
    closedir(dd);
    free(d);
    assert_true(n >= 10);
}

static void test_open_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_open");
    moq_checkpoint *c = (moq_checkpoint *)1;
    moq_error e = {0};
    /* A directory with a config but no weights at all. */
    write_text(dir, "config.json", "{}");
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_IO, dir, "no model.safetensors.index.json, model.safetensors or *.safetensors");
    assert_null(c);
    /* A path that does not exist. */
    char *nope = path_in(dir, "nope");
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, nope, NULL, &e), MOQ_ERR_IO, "nope", "cannot open");
    free(nope);
    /* model.safetensors that is a directory. */
    char *sub = path_in(dir, "model.safetensors");
    assert_int_equal(mkdir(sub, 0777), 0);
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, dir, NULL, &e), MOQ_ERR_IO, "model.safetensors", "not a regular file");
    free(sub);
    /* NULL arguments. */
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(NULL, dir, NULL, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL argument");
    e = (moq_error){0};
    TU_ERR(&e, moq_checkpoint_open(&c, NULL, NULL, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL argument");
    assert_int_equal(moq_checkpoint_open(&c, NULL, NULL, NULL), MOQ_ERR_INVALID_ARG); /* err may be NULL */
    tu_rmtree(dir);
    free(dir);
}

/* Every accessor accepts NULL and out-of-range indices. */
static void test_accessors_null_and_range(void **state) {
    (void)state;
    moq_checkpoint_free(NULL);
    assert_null(moq_checkpoint_path(NULL));
    assert_int_equal(moq_checkpoint_shard_count(NULL), 0);
    assert_null(moq_checkpoint_shard_name(NULL, 0));
    assert_int_equal(moq_checkpoint_shard_size(NULL, 0), 0);
    assert_int_equal(moq_checkpoint_shard_tensor_count(NULL, 0), 0);
    assert_int_equal(moq_checkpoint_tensor_count(NULL), 0);
    assert_null(moq_checkpoint_tensor_at(NULL, 0));
    assert_null(moq_checkpoint_tensor(NULL, "x"));
    assert_null(moq_checkpoint_arch(NULL));
    assert_null(moq_checkpoint_json_text(NULL, "config.json"));
    assert_int_equal(moq_checkpoint_metadata_count(NULL, 0), 0);
    assert_false(moq_checkpoint_metadata_at(NULL, 0, 0, NULL, NULL));
    assert_int_equal(moq_checkpoint_warning_count(NULL), 0);
    assert_null(moq_checkpoint_warning(NULL, 0));

    char *dir = tu_tmpdir("ck_range");
    write_model(dir, 2, true);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    const int bad[] = {-1, 2, 1 << 30};
    for (size_t i = 0; i < 3; i++) {
        assert_null(moq_checkpoint_shard_name(c, bad[i]));
        assert_int_equal(moq_checkpoint_shard_size(c, bad[i]), 0);
        assert_int_equal(moq_checkpoint_shard_tensor_count(c, bad[i]), 0);
        assert_int_equal(moq_checkpoint_metadata_count(c, bad[i]), 0);
        assert_false(moq_checkpoint_metadata_at(c, bad[i], 0, NULL, NULL));
        assert_false(moq_checkpoint_metadata_at(c, 0, bad[i], NULL, NULL));
        assert_null(moq_checkpoint_warning(c, bad[i]));
    }
    assert_null(moq_checkpoint_tensor_at(c, (size_t)-1));
    assert_null(moq_checkpoint_json_text(c, NULL));
    assert_true(moq_checkpoint_metadata_at(c, 0, 0, NULL, NULL)); /* key/value pointers optional */
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
}

/* ---- writer ------------------------------------------------------------------------------------- */

static void test_writer_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_writer");
    char *target = path_in(dir, "out");
    const uint8_t data[16] = {1, 2, 3};
    const int64_t s4[1] = {4}, s3[1] = {3}, neg[1] = {-1}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    moq_writer *w = NULL;
    moq_error e = {0};

    TU_ERR(&e, moq_writer_create(NULL, target, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL argument");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_create(&w, NULL, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL argument");
    moq_writer_free(NULL);

    TU_OK(moq_writer_create(&w, target, err_));
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "t", MOQ_DT_F32, 1, s4, data, 8, &e), MOQ_ERR_INVALID_ARG, "t", "8 bytes given");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "f4", MOQ_DT_F4, 1, s3, data, 1, &e), MOQ_ERR_INVALID_ARG, "f4", "needs 12 bits");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "n", MOQ_DT_U8, 1, neg, data, 0, &e), MOQ_ERR_INVALID_ARG, "n", "is negative");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "d9", MOQ_DT_U8, 9, s9, data, 1, &e), MOQ_ERR_INVALID_ARG, "d9", "ndim 9");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "nd", MOQ_DT_U8, 1, NULL, data, 1, &e), MOQ_ERR_INVALID_ARG, "nd", "with a shape");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "nodata", MOQ_DT_U8, 1, s4, NULL, 4, &e), MOQ_ERR_INVALID_ARG, "nodata", "NULL data");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "dt", MOQ_DT_COUNT, 1, s4, data, 4, &e), MOQ_ERR_INVALID_ARG, "dt", "unknown dtype");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "__metadata__", MOQ_DT_U8, 1, s4, data, 4, &e), MOQ_ERR_INVALID_ARG, "__metadata__", "reserved");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "", MOQ_DT_U8, 1, s4, data, 4, &e), MOQ_ERR_INVALID_ARG, NULL, "empty name");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(NULL, "x", MOQ_DT_U8, 1, s4, data, 4, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL writer");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_file(w, "sub/config.json", "{}", &e), MOQ_ERR_INVALID_ARG, "sub/config.json", "plain file names");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_file(w, "..", "{}", &e), MOQ_ERR_INVALID_ARG, "..", "plain file names");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_metadata(w, NULL, "v", &e), MOQ_ERR_INVALID_ARG, NULL, "NULL argument");
    TU_OK(moq_writer_add(w, "a", MOQ_DT_U8, 1, s4, data, 4, err_));
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_add(w, "a", MOQ_DT_U8, 1, s4, data, 4, &e), MOQ_ERR_INVALID_ARG, "a", "added twice");
    TU_OK(moq_writer_add(w, "b", MOQ_DT_F32, 1, s4, data, 16, err_));
    /* More shards than tensors, or none. */
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_finish(w, 3, &e), MOQ_ERR_INVALID_ARG, NULL, "3 shards requested for 2 tensors");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_finish(w, 0, &e), MOQ_ERR_INVALID_ARG, NULL, "0 shards requested");
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_finish(NULL, 1, &e), MOQ_ERR_INVALID_ARG, NULL, "NULL writer");
    /* Nothing was written by the refused calls. */
    struct stat sb;
    assert_int_not_equal(stat(target, &sb), 0);
    moq_writer_free(w);

    /* The target "directory" is a regular file: an I/O error, the file untouched, nothing beside it. */
    write_text(dir, "out", "precious");
    TU_OK(moq_writer_create(&w, target, err_));
    TU_OK(moq_writer_add(w, "a", MOQ_DT_U8, 1, s4, data, 4, err_));
    TU_OK(moq_writer_file(w, "config.json", "{}", err_));
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_finish(w, 1, &e), MOQ_ERR_IO, "model.safetensors", "cannot create");
    moq_writer_free(w);
    char *kept = tu_read_file(target, NULL);
    assert_string_equal(kept, "precious");
    free(kept);
    assert_int_equal(dir_entries(dir, NULL, NULL), 1);
    unlink(target);

    /* A rename that would fail (a directory where the index goes): refused before anything is
     * renamed; no shard, no temporary file left behind. */
    assert_int_equal(mkdir(target, 0777), 0);
    char *blocker = path_in(target, IX);
    assert_int_equal(mkdir(blocker, 0777), 0);
    TU_OK(moq_writer_create(&w, target, err_));
    TU_OK(moq_writer_add(w, "a", MOQ_DT_U8, 1, s4, data, 4, err_));
    TU_OK(moq_writer_add(w, "b", MOQ_DT_U8, 1, s4, data, 4, err_));
    TU_OK(moq_writer_file(w, "config.json", "{}", err_));
    e = (moq_error){0};
    TU_ERR(&e, moq_writer_finish(w, 2, &e), MOQ_ERR_IO, IX, "is a directory");
    moq_writer_free(w);
    assert_int_equal(dir_entries(target, NULL, NULL), 1); /* only the blocking directory */
    rmdir(blocker);
    free(blocker);

    /* Zero tensors, one shard: a valid empty model.safetensors. */
    TU_OK(moq_writer_create(&w, target, err_));
    TU_OK(moq_writer_file(w, "config.json", "{}", err_));
    TU_OK(moq_writer_finish(w, 1, err_));
    moq_writer_free(w);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, target, NULL, err_));
    assert_int_equal(moq_checkpoint_tensor_count(c), 0);
    assert_int_equal(moq_checkpoint_shard_size(c, 0), 16); /* 8 + "{}" padded to 8 */
    moq_checkpoint_free(c);

    free(target);
    tu_rmtree(dir);
    free(dir);
}

/* Many shards: each gets at least one tensor, the index lists all, lookup works across shards. */
static void test_writer_many_shards(void **state) {
    (void)state;
    char *dir = tu_tmpdir("ck_many");
    moq_writer *w = NULL;
    TU_OK(moq_writer_create(&w, dir, err_));
    enum { NT = 40, NS = 7 };
    static uint8_t data[NT][64];
    char names[NT][48];
    for (int i = 0; i < NT; i++) {
        /* Uneven sizes: one big tensor first, then small ones. */
        const int64_t n = i == 0 ? 64 : 1 + i % 5;
        for (int k = 0; k < n; k++) data[i][k] = (uint8_t)(i * 3 + k);
        snprintf(names[i], sizeof names[i], "model.layers.%d.w", i);
        TU_OK(moq_writer_add(w, names[i], MOQ_DT_U8, 1, &n, data[i], (uint64_t)n, err_));
    }
    TU_OK(moq_writer_file(w, "config.json", "{}", err_));
    TU_OK(moq_writer_finish(w, NS, err_));
    moq_writer_free(w);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    assert_int_equal(moq_checkpoint_shard_count(c), NS);
    int sum = 0;
    for (int s = 0; s < NS; s++) {
        char want[64];
        snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", s + 1, NS);
        assert_string_equal(moq_checkpoint_shard_name(c, s), want);
        assert_true(moq_checkpoint_shard_tensor_count(c, s) >= 1);
        sum += moq_checkpoint_shard_tensor_count(c, s);
    }
    assert_int_equal(sum, NT);
    int last_shard = 0;
    for (int i = 0; i < NT; i++) {
        const moq_tensor *t = moq_checkpoint_tensor(c, names[i]);
        assert_non_null(t);
        assert_memory_equal(t->data, data[i], t->nbytes);
        assert_true(t->shard >= last_shard); /* insertion order is kept across shards */
        last_shard = t->shard;
    }
    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_shard_round_trip),
        cmocka_unit_test(test_single_file_and_single_shard),
        cmocka_unit_test(test_directory_of_loose_shards),
        cmocka_unit_test(test_index_errors),
        cmocka_unit_test(test_shard_deleted_or_damaged),
        cmocka_unit_test(test_unlisted_tensors_warn),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_arch_fields),
        cmocka_unit_test(test_real_configs),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_accessors_null_and_range),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_many_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
