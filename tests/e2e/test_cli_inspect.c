/* test_cli_inspect.c — `moq inspect` end to end, through the built CLI (tu_moq_bin()).
 *
 * Oracles: the synth command's documented layout (NVFP4 linears = weight U8, weight_scale F8_E4M3,
 * weight_scale_2 and input_scale F32; embeddings, norms and lm_head BF16), counted here by hand;
 * the same checkpoint opened through the library (counts per shard and per dtype); the arguments
 * passed to synth (architecture fields); and the CLI contract of STYLE.md §12 / cli.h: on error,
 * nothing on stdout, exactly one line "moq: <where>: <msg>" on stderr, exit status = moq_status.
 */
#include "tu.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

typedef struct cli_out {
    int   status;
    char *out; /* stdout, malloc'd */
    char *err; /* stderr, malloc'd */
} cli_out;

static char *g_tmp;

/* Runs `moq ARGS` with stdout and stderr captured separately. */
static cli_out run_moq(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "( '%s' %s >'%s/stdout' 2>'%s/stderr' )", tu_moq_bin(), args, g_tmp, g_tmp);
    cli_out r;
    r.status = tu_run(cmd, NULL, 0);
    char p[1024];
    snprintf(p, sizeof p, "%s/stdout", g_tmp);
    r.out = tu_read_file(p, NULL);
    snprintf(p, sizeof p, "%s/stderr", g_tmp);
    r.err = tu_read_file(p, NULL);
    return r;
}

static void cli_free(cli_out *r) {
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* ---- a synthetic two-shard checkpoint -------------------------------------------------------- */

enum { LAYERS = 2, HIDDEN = 64, INTER = 128, HEADS = 4, KV_HEADS = 2, VOCAB = 96 };

static char *synth_dir(const char *tag, int shards) {
    char *dir = tu_tmpdir(tag);
    char args[2048];
    snprintf(args, sizeof args, "synth '%s' --algo NVFP4 --layers %d --hidden %d --inter %d --heads %d --kv-heads %d --vocab %d --shards %d",
             dir, LAYERS, HIDDEN, INTER, HEADS, KV_HEADS, VOCAB, shards);
    cli_out r = run_moq(args);
    if (r.status != 0) fail_msg("moq %s -> %d: %s", args, r.status, r.err);
    cli_free(&r);
    return dir;
}

static const cJSON *obj(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) fail_msg("inspect --json: key \"%s\" missing", k);
    return v;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = obj(o, k);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static void test_inspect_two_shards(void **state) {
    (void)state;
    char *dir = synth_dir("cli_two", 2);

    /* The library's view of the same checkpoint. */
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    const size_t nt = moq_checkpoint_tensor_count(c);
    size_t per_dtype[MOQ_DT_COUNT] = {0};
    unsigned long long bytes_dtype[MOQ_DT_COUNT] = {0};
    for (size_t i = 0; i < nt; i++) {
        per_dtype[moq_checkpoint_tensor_at(c, i)->dtype]++;
        bytes_dtype[moq_checkpoint_tensor_at(c, i)->dtype] += moq_checkpoint_tensor_at(c, i)->nbytes;
    }
    /* And by hand, from synth's documented layout: 7 linears per layer, 4 tensors each (NVFP4),
     * 2 norms per layer, plus embed_tokens, norm and lm_head. */
    assert_int_equal(nt, 3 + LAYERS * (2 + 7 * 4));
    assert_int_equal(per_dtype[MOQ_DT_U8], 7 * LAYERS);
    assert_int_equal(per_dtype[MOQ_DT_F8_E4M3], 7 * LAYERS);
    assert_int_equal(per_dtype[MOQ_DT_F32], 2 * 7 * LAYERS);
    assert_int_equal(per_dtype[MOQ_DT_BF16], 3 + 2 * LAYERS);
    assert_int_equal(moq_checkpoint_shard_count(c), 2);

    /* Text output: the summary line and one row per shard. */
    char args[1024];
    snprintf(args, sizeof args, "inspect '%s'", dir);
    cli_out r = run_moq(args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    char want[1024];
    snprintf(want, sizeof want, "(2 shards, %zu tensors,", nt);
    if (!strstr(r.out, want)) fail_msg("inspect output lacks \"%s\":\n%s", want, r.out);
    for (int s = 0; s < 2; s++) {
        snprintf(want, sizeof want, "%s", moq_checkpoint_shard_name(c, s));
        const char *row = strstr(r.out, want);
        assert_non_null(row);
        int n = -1;
        assert_int_equal(sscanf(row + strlen(want), "%d tensors", &n), 1);
        assert_int_equal(n, moq_checkpoint_shard_tensor_count(c, s));
    }
    assert_non_null(strstr(r.out, "LlamaForCausalLM"));
    cli_free(&r);

    /* JSON output. */
    snprintf(args, sizeof args, "inspect --json '%s'", dir);
    r = run_moq(args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("inspect --json is not JSON:\n%s", r.out);
    assert_int_equal((size_t)num(j, "tensors"), nt);
    const cJSON *shards = obj(j, "shards");
    assert_int_equal(cJSON_GetArraySize(shards), 2);
    int s = 0, sum = 0;
    for (const cJSON *e = shards->child; e; e = e->next, s++) {
        assert_string_equal(obj(e, "name")->valuestring, moq_checkpoint_shard_name(c, s));
        assert_int_equal((int)num(e, "tensors"), moq_checkpoint_shard_tensor_count(c, s));
        assert_int_equal((uint64_t)num(e, "bytes"), moq_checkpoint_shard_size(c, s));
        sum += (int)num(e, "tensors");
    }
    assert_int_equal((size_t)sum, nt);
    const cJSON *dts = obj(j, "dtypes");
    int listed = 0;
    for (int d = 0; d < MOQ_DT_COUNT; d++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(dts, moq_dtype_name((moq_dtype)d));
        if (!per_dtype[d]) {
            assert_null(e);
            continue;
        }
        listed++;
        assert_non_null(e);
        assert_int_equal((size_t)num(e, "tensors"), per_dtype[d]);
        assert_int_equal((unsigned long long)num(e, "bytes"), bytes_dtype[d]);
    }
    assert_int_equal(cJSON_GetArraySize(dts), listed);
    const cJSON *a = obj(j, "architecture");
    assert_string_equal(obj(a, "architecture")->valuestring, "LlamaForCausalLM");
    assert_string_equal(obj(a, "model_type")->valuestring, "llama");
    assert_int_equal((int)num(a, "hidden_size"), HIDDEN);
    assert_int_equal((int)num(a, "num_hidden_layers"), LAYERS);
    assert_int_equal((int)num(a, "num_attention_heads"), HEADS);
    assert_int_equal((int)num(a, "num_key_value_heads"), KV_HEADS);
    assert_int_equal((int)num(a, "head_dim"), HIDDEN / HEADS);
    assert_int_equal((int)num(a, "intermediate_size"), INTER);
    assert_int_equal((int)num(a, "vocab_size"), VOCAB);
    const cJSON *q = obj(obj(j, "quantization"), "hf_quant_config.json");
    assert_string_equal(obj(q, "quant_algo")->valuestring, "NVFP4");
    assert_int_equal(cJSON_GetArraySize(obj(j, "warnings")), 0);
    cJSON_Delete(j);
    cli_free(&r);

    /* One shard of it alone. */
    snprintf(args, sizeof args, "inspect --json '%s/%s'", dir, moq_checkpoint_shard_name(c, 1));
    r = run_moq(args);
    assert_int_equal(r.status, 0);
    j = cJSON_Parse(r.out);
    assert_non_null(j);
    assert_int_equal((int)num(j, "tensors"), moq_checkpoint_shard_tensor_count(c, 1));
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "architecture"));
    cJSON_Delete(j);
    cli_free(&r);

    moq_checkpoint_free(c);
    tu_rmtree(dir);
    free(dir);
}

/* ---- bad files: one line on stderr, nothing on stdout, exit = status --------------------------- */

typedef struct bad_file {
    const char *file, *header;
    size_t      data_len;
    const char *tensor; /* named in the message, or NULL */
} bad_file;

#define ENTRY(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const bad_file bad_files[] = {
    {"bad_header_leading_space.safetensors", " {}", 0, NULL},
    {"bad_utf8_surrogate.safetensors", "{\"\xed\xa0\x80\":1}", 0, NULL},
    {"bad_not_json.safetensors", "{\"t\": }", 0, NULL},
    {"bad_json_trailing_garbage.safetensors", "{} x", 0, NULL},
    {"bad_metadata_value_number.safetensors", "{\"__metadata__\": {\"format\": 1}}", 0, NULL},
    {"bad_entry_not_object.safetensors", "{\"model.embed_tokens.weight\": 7}", 0, "model.embed_tokens.weight"},
    {"bad_dtype_unknown.safetensors", "{\"lm_head.weight\":" ENTRY("F9", "[1]", 0, 1) "}", 1, "lm_head.weight"},
    {"bad_shape_negative.safetensors", "{\"w\":" ENTRY("U8", "[-1]", 0, 1) "}", 1, "w"},
    {"bad_shape_9_dims.safetensors", "{\"w\":" ENTRY("U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, "w"},
    {"bad_offsets_reversed.safetensors", "{\"w\":" ENTRY("U8", "[0]", 4, 0) "}", 4, "w"},
    {"bad_duplicate_name.safetensors", "{\"w\":" ENTRY("U8", "[1]", 0, 1) ",\"w\":" ENTRY("U8", "[1]", 1, 2) "}", 2, "w"},
    {"bad_size_mismatch.safetensors", "{\"model.norm.weight\":" ENTRY("BF16", "[4]", 0, 4) "}", 4, "model.norm.weight"},
    {"bad_shape_overflow.safetensors", "{\"w\":" ENTRY("F32", "[4294967296,4294967296,16]", 0, 0) "}", 0, "w"},
    {"bad_f4_odd_count.safetensors", "{\"w\":" ENTRY("F4", "[3]", 0, 1) "}", 1, "w"},
    {"bad_overlap.safetensors", "{\"a\":" ENTRY("U8", "[8]", 0, 8) ",\"b\":" ENTRY("U8", "[8]", 4, 12) "}", 12, "b"},
    {"bad_hole_between.safetensors", "{\"a\":" ENTRY("U8", "[4]", 0, 4) ",\"b\":" ENTRY("U8", "[4]", 8, 12) "}", 12, "b"},
    {"bad_truncated_data.safetensors", "{\"w\":" ENTRY("U8", "[8]", 0, 8) "}", 5, "w"},
    {"bad_trailing_bytes.safetensors", "{\"w\":" ENTRY("U8", "[4]", 0, 4) "}", 7, NULL},
};

/* Runs inspect (text and --json) on path; checks the one-line error against the library's. */
static void expect_one_line_error(const char *path, const char *where, const char *tensor) {
    moq_checkpoint *c = NULL;
    moq_error e = {0};
    moq_status st = moq_checkpoint_open(&c, path, NULL, &e);
    assert_int_not_equal(st, MOQ_OK);
    char line[1200], fmt[1100];
    moq_error_format(&e, fmt, sizeof fmt);
    snprintf(line, sizeof line, "moq: %s\n", fmt);
    for (int json = 0; json < 2; json++) {
        char args[1024];
        snprintf(args, sizeof args, "inspect %s'%s'", json ? "--json " : "", path);
        cli_out r = run_moq(args);
        if (r.status != (int)st) fail_msg("%s: exit %d, expected %d (%s); stderr: %s", path, r.status, (int)st, moq_status_str(st), r.err);
        if (r.out[0]) fail_msg("%s: stdout not empty: %s", path, r.out);
        if (count_lines(r.err) != 1) fail_msg("%s: stderr is %d lines: %s", path, count_lines(r.err), r.err);
        char head[512];
        snprintf(head, sizeof head, "moq: %s: ", where);
        if (strncmp(r.err, head, strlen(head)) != 0) fail_msg("%s: stderr \"%s\" does not start with \"%s\"", path, r.err, head);
        if (tensor) {
            char t[256];
            snprintf(t, sizeof t, "tensor %s", tensor);
            if (!strstr(r.err, t)) fail_msg("%s: stderr \"%s\" does not name %s", path, r.err, t);
        }
        assert_string_equal(r.err, line); /* the CLI prints exactly the library's error */
        cli_free(&r);
    }
}

static void test_inspect_bad_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir("cli_bad");
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        const bad_file *b = &bad_files[i];
        char *path = tu_write_st(dir, b->file, b->header, b->data_len);
        expect_one_line_error(path, b->file, b->tensor);
        /* Every one of these is a format error: exit status 3. */
        char args[1024];
        snprintf(args, sizeof args, "inspect '%s'", path);
        cli_out r = run_moq(args);
        assert_int_equal(r.status, MOQ_ERR_FORMAT);
        assert_int_equal(r.status, 3);
        cli_free(&r);
        free(path);
    }
    /* Too short, and a header length beyond the file (written byte by byte). */
    char *p = tu_write_file(dir, "bad_too_short.safetensors", "\x01\x00", 2);
    expect_one_line_error(p, "bad_too_short.safetensors", NULL);
    free(p);
    p = tu_write_file(dir, "bad_header_too_large.safetensors", "\x01\xe1\xf5\x05\x00\x00\x00\x00{}", 10);
    expect_one_line_error(p, "bad_header_too_large.safetensors", NULL);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* Checkpoint-level errors: each its own status. */
static void test_inspect_bad_checkpoints(void **state) {
    (void)state;
    char *dir = synth_dir("cli_badck", 2);
    char ix[1024];
    snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", dir);
    char *orig = tu_read_file(ix, NULL);

    /* A tensor the index lists but the shard lacks: MOQ_ERR_TENSOR (5). */
    const char *ghost = "{\"weight_map\": {\"model.layers.9.ghost\": \"model-00001-of-00002.safetensors\"}}";
    free(tu_write_file(dir, "model.safetensors.index.json", ghost, strlen(ghost)));
    expect_one_line_error(dir, "model.safetensors.index.json", "model.layers.9.ghost");
    char args[1024];
    snprintf(args, sizeof args, "inspect '%s'", dir);
    cli_out r = run_moq(args);
    assert_int_equal(r.status, MOQ_ERR_TENSOR);
    cli_free(&r);

    /* A shard path leaving the directory: format (3). */
    const char *escape = "{\"weight_map\": {\"w\": \"../model-00001-of-00002.safetensors\"}}";
    free(tu_write_file(dir, "model.safetensors.index.json", escape, strlen(escape)));
    expect_one_line_error(dir, "model.safetensors.index.json", "w");

    /* A config field of the wrong type: MOQ_ERR_CONFIG (4). */
    free(tu_write_file(dir, "model.safetensors.index.json", orig, strlen(orig)));
    char cfgp[1024];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    char *cfg = tu_read_file(cfgp, NULL);
    const char *bad_cfg = "{\"hidden_size\": \"4096\"}";
    free(tu_write_file(dir, "config.json", bad_cfg, strlen(bad_cfg)));
    expect_one_line_error(dir, "config.json", NULL);
    r = run_moq(args);
    assert_int_equal(r.status, MOQ_ERR_CONFIG);
    assert_non_null(strstr(r.err, "hidden_size"));
    cli_free(&r);
    free(tu_write_file(dir, "config.json", cfg, strlen(cfg)));
    free(cfg);

    /* A shard truncated by one byte: format error naming that shard. */
    char sp[1024];
    snprintf(sp, sizeof sp, "%s/model-00002-of-00002.safetensors", dir);
    size_t len;
    char *bytes = tu_read_file(sp, &len);
    free(tu_write_file(dir, "model-00002-of-00002.safetensors", bytes, len - 1));
    expect_one_line_error(dir, "model-00002-of-00002.safetensors", NULL);
    free(tu_write_file(dir, "model-00002-of-00002.safetensors", bytes, len));
    free(bytes);

    /* A shard that is gone: I/O (2). */
    assert_int_equal(unlink(sp), 0);
    expect_one_line_error(dir, "model-00002-of-00002.safetensors", NULL);
    r = run_moq(args);
    assert_int_equal(r.status, MOQ_ERR_IO);
    cli_free(&r);

    /* A path that does not exist: I/O (2). */
    char nope[1024];
    snprintf(nope, sizeof nope, "%s/nope", dir);
    expect_one_line_error(nope, nope, NULL);

    free(orig);
    tu_rmtree(dir);
    free(dir);
}

/* Unlisted tensors are warnings: exit 0, the warning on stderr, the report on stdout. */
static void test_inspect_warning(void **state) {
    (void)state;
    char *dir = synth_dir("cli_warn", 2);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    char text[512];
    snprintf(text, sizeof text, "{\"weight_map\": {\"lm_head.weight\": \"%s\"}}",
             moq_checkpoint_shard_name(c, moq_checkpoint_tensor(c, "lm_head.weight")->shard));
    moq_checkpoint_free(c);
    free(tu_write_file(dir, "model.safetensors.index.json", text, strlen(text)));
    char args[1024];
    snprintf(args, sizeof args, "inspect '%s'", dir);
    cli_out r = run_moq(args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "moq: warning: "));
    assert_non_null(strstr(r.err, "but not listed in the index"));
    assert_non_null(strstr(r.out, "tensors by dtype"));
    cli_free(&r);
    tu_rmtree(dir);
    free(dir);
}

/* ---- intermediate sizes by family ---------------------------------------------------------------- */

/* The dense MLP and expert sizes `moq inspect` prints, against the numbers in each config.json as read
 * here by hand with the transformers config classes' meanings: Llama4TextConfig.intermediate_size is
 * an expert's and intermediate_size_mlp the dense MLP's; GptOssConfig.intermediate_size is an
 * expert's; DeepseekV3Config keeps moe_intermediate_size for the experts. */
static void test_inspect_intermediate(void **state) {
    (void)state;
    static const struct { const char *dir; int dense, expert; } rows[] = {
        {"modelopt_real/llama4_a_fp8", 96, 32},
        {"modelopt_real/gpt_oss_nvfp4", 32, 32},
        {"hf_tiny/llama4_a", 96, 32},
        {"hf_tiny/deepseek_v3_a", 96, 32},
        {"hf_tiny/qwen3_5_moe", 0, 32}, /* no intermediate_size: every layer is MoE */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *dir = tu_src_data_path(rows[i].dir), args[1024], want[128];
        snprintf(args, sizeof args, "inspect '%s'", dir);
        cli_out r = run_moq(args);
        if (r.status != 0) fail_msg("%s: exit %d: %s", rows[i].dir, r.status, r.err);
        snprintf(want, sizeof want, "intermediate %d, vocab", rows[i].dense);
        if (!strstr(r.out, want)) fail_msg("%s: no \"%s\" in\n%s", rows[i].dir, want, r.out);
        snprintf(want, sizeof want, ", moe intermediate %d)", rows[i].expert);
        if (!strstr(r.out, want)) fail_msg("%s: no \"%s\" in\n%s", rows[i].dir, want, r.out);
        cli_free(&r);
        snprintf(args, sizeof args, "inspect '%s' --json", dir);
        r = run_moq(args);
        assert_int_equal(r.status, 0);
        cJSON *j = cJSON_Parse(r.out);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "architecture");
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, "dense_intermediate")), rows[i].dense);
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, "expert_intermediate")), rows[i].expert);
        cJSON_Delete(j);
        cli_free(&r);
        free(dir);
    }
}

/* `moq help archs`: one name a line, and every architecture of the real exports and the transformers
 * tiny models in tests/data among them (their config.json architectures[0], copied here by hand). */
static void test_help_archs(void **state) {
    (void)state;
    cli_out r = run_moq("help archs");
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    static const char *const want[] = {"LlamaForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "Gemma3ForCausalLM",
                                       "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Llama4ForCausalLM", "GptOssForCausalLM",
                                       "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "\n%s\n", want[i]);
        if (!strstr(r.out, line) && strncmp(r.out, line + 1, strlen(line + 1)) != 0) fail_msg("no line %s in\n%s", want[i], r.out);
    }
    assert_true(count_lines(r.out) >= (int)(sizeof want / sizeof want[0]));
    assert_null(strchr(r.out, ' '));
    cli_free(&r);
}

/* ---- global options and usage errors ------------------------------------------------------------ */

static void test_usage(void **state) {
    (void)state;
    cli_out r = run_moq("--version");
    assert_int_equal(r.status, 0);
    char want[64];
    snprintf(want, sizeof want, "moq %d.%d.%d ", MOQ_VERSION_MAJOR, MOQ_VERSION_MINOR, MOQ_VERSION_PATCH);
    assert_true(strncmp(r.out, want, strlen(want)) == 0);
    assert_int_equal(count_lines(r.out), 1);
    cli_free(&r);

    r = run_moq("--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: moq"));
    assert_non_null(strstr(r.out, "  inspect "));
    assert_string_equal(r.err, "");
    cli_free(&r);

    r = run_moq("inspect --help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: moq inspect PATH"));
    assert_non_null(strstr(r.out, "--json"));
    cli_free(&r);

    r = run_moq("help inspect");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: moq inspect PATH"));
    cli_free(&r);

    static const struct { const char *args, *err; } usage_errors[] = {
        {"", "usage: moq"},
        {"frobnicate", "unknown command \"frobnicate\""},
        {"inspect", "moq inspect: expected one PATH"},
        {"inspect a b", "moq inspect: expected one PATH"},
        {"inspect --bogus x", "moq inspect: unknown option"},
    };
    for (size_t i = 0; i < sizeof usage_errors / sizeof usage_errors[0]; i++) {
        r = run_moq(usage_errors[i].args);
        if (r.status != MOQ_ERR_INVALID_ARG) fail_msg("moq %s: exit %d, expected %d", usage_errors[i].args, r.status, MOQ_ERR_INVALID_ARG);
        if (!strstr(r.err, usage_errors[i].err)) fail_msg("moq %s: stderr \"%s\" lacks \"%s\"", usage_errors[i].args, r.err, usage_errors[i].err);
        assert_string_equal(r.out, "");
        cli_free(&r);
    }
}

static int setup(void **state) {
    (void)state;
    g_tmp = tu_tmpdir("cli_io");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_tmp);
    free(g_tmp);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_inspect_intermediate),
        cmocka_unit_test(test_help_archs),
        cmocka_unit_test(test_inspect_two_shards),
        cmocka_unit_test(test_inspect_bad_files),
        cmocka_unit_test(test_inspect_bad_checkpoints),
        cmocka_unit_test(test_inspect_warning),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
