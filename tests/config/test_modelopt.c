/* test_modelopt.c — config parsing, one table row per rule and per error of the two seeds
 * (SGLang modelopt_quant.py from_config / common_group_size; vLLM modelopt.py from_config and the
 * per-class _from_config), for each compat profile. Expected values are read off the seed code,
 * not from moq's output. */
#include "tu.h"

enum { M = MOQ_COMPAT_MOQ, V = MOQ_COMPAT_VLLM, S = MOQ_COMPAT_SGLANG };

typedef struct row {
    int         profile;
    const char *file;        /* "hf" = hf_quant_config.json, "cfg" = config.json (quantization_config) */
    const char *json;
    moq_status  st;
    const char *want;        /* st == OK: "method|algo|kv|group_size|n_exclude"; else msg substring */
} row;

#define NESTED(body) "{\"producer\":{\"name\":\"modelopt\"},\"quantization\":{" body "}}"
#define FLAT(body) "{\"quantization_config\":{\"quant_method\":\"modelopt\"," body "}}"

static const row rows[] = {
    /* ---- layouts and quant_method names ---- */
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"FP8\",\"exclude_modules\":[\"lm_head\"]"), MOQ_OK, "modelopt|FP8|FP8|0|1"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"FP8\",\"exclude_modules\":[\"lm_head\"]"), MOQ_OK, "modelopt_fp8|FP8|FP8|0|1"},
    {M, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[]"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"MXFP8\",\"ignore\":[\"lm_head\",\"x\"]"), MOQ_OK, "modelopt_mxfp8|MXFP8|-|0|2"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8_PB_WO\""), MOQ_OK, "modelopt|FP8_PB_WO|-|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8_PER_CHANNEL_PER_TOKEN\""), MOQ_OK, "modelopt|FP8_PER_CHANNEL_PER_TOKEN|-|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"W4A16_NVFP4\",\"group_size\":16"), MOQ_OK, "modelopt_fp4|W4A16_NVFP4|-|16|0"},
    /* vLLM upper-cases quant_algo ("ModelOpt may emit lowercase"); SGLang compares as written. */
    {V, "cfg", FLAT("\"quant_algo\":\"fp8_pb_wo\""), MOQ_OK, "modelopt|FP8_PB_WO|-|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"fp8\""), MOQ_ERR_UNSUPPORTED, "not one of FP8, NVFP4, MIXED_PRECISION"},
    /* ModelOpt 0.47 writes FP8_PB_WO as "fp8_pb_wo" (NUMERICS §12): moq reads it as vLLM does; SGLang's
     * case-sensitive `"FP8" in quant_algo` rejects it. */
    {M, "cfg", FLAT("\"quant_algo\":\"fp8_pb_wo\""), MOQ_OK, "modelopt|FP8_PB_WO|-|0|0"},
    {M, "hf", NESTED("\"quant_algo\":\"fp8_pb_wo\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[]"), MOQ_OK, "modelopt|FP8_PB_WO|-|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"fp8_pb_wo\""), MOQ_ERR_UNSUPPORTED, "\"fp8_pb_wo\" is not one of FP8, NVFP4, MIXED_PRECISION"},
    /* SGLang's FP8 config accepts any name containing FP8 (and reads it as per-tensor FP8). */
    {S, "cfg", FLAT("\"quant_algo\":\"FP8_PB_WO\""), MOQ_OK, "modelopt_fp8|FP8_PB_WO|-|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"W4A16_NVFP4\",\"group_size\":16"), MOQ_ERR_UNSUPPORTED, "contains FP4: SGLang routes it to its FP4 config"},
    {S, "cfg", FLAT("\"quant_algo\":\"MXFP8\""), MOQ_OK, "modelopt_fp8|MXFP8|-|0|0"},
    /* FP8_BLOCK_SCALES: vLLM knows it only as a mixed-precision MoE alias. */
    {V, "cfg", FLAT("\"quant_algo\":\"FP8_BLOCK_SCALES\""), MOQ_ERR_CONFIG, "is not one of FP8, FP8_PER_CHANNEL_PER_TOKEN"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8_BLOCK_SCALES\""), MOQ_OK, "modelopt|FP8_BLOCK_SCALES|-|0|0"},
    /* ---- errors ---- */
    {V, "hf", NESTED("\"kv_cache_quant_algo\":null"), MOQ_ERR_CONFIG, "quantization.quant_algo is missing"},
    {S, "hf", "{\"producer\":{}}", MOQ_ERR_CONFIG, "quantization is absent"},
    {M, "cfg", FLAT("\"quant_algo\":\"NVFP5\""), MOQ_ERR_CONFIG, "\"NVFP5\" is not one of FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, NVFP4_AWQ, MIXED_PRECISION"},
    /* NVFP4_AWQ (ModelOpt NVFP4_AWQ_LITE_CFG, NUMERICS §12): moq reads it; vLLM's QUANT_ALGOS and
     * SGLang's ["FP8", "NVFP4"] reject it with the errors below. */
    {M, "hf", NESTED("\"quant_algo\":\"NVFP4_AWQ\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[\"lm_head\"],\"has_zero_point\":false,\"pre_quant_scale\":true"), MOQ_OK, "modelopt_fp4|NVFP4_AWQ|-|16|1"},
    {V, "hf", NESTED("\"quant_algo\":\"NVFP4_AWQ\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[\"lm_head\"]"), MOQ_ERR_UNSUPPORTED,
     "quantization.quant_algo \"NVFP4_AWQ\": vLLM's ModelOpt module raises \"ModelOpt currently only supports: FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION quantizations in vLLM\""},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4_AWQ\",\"group_size\":16"), MOQ_ERR_UNSUPPORTED, "ModelOpt currently only supports: FP8, NVFP4 quantizations in sglang"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":\"lm_head\""), MOQ_ERR_CONFIG, "quantization.exclude_modules is a string, expected a list"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":null"), MOQ_ERR_CONFIG, "exclude_modules is null, expected a list"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":null"), MOQ_OK, "modelopt_fp8|FP8|-|0|0"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"group_size\":\"x\""), MOQ_ERR_CONFIG, "quantization.group_size is \"x\", expected an integer"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"group_size\":[16]"), MOQ_ERR_CONFIG, "group_size is an array, expected an integer"},
    {V, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"group_size\":\"16\""), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    {V, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"group_size\":16.5"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    {M, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"group_size\":16.5"), MOQ_ERR_CONFIG, "group_size is 16.5, expected an integer"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":8"), MOQ_ERR_CONFIG, "kv_cache_quant_algo is a number, expected a string"},
    /* vLLM: nested NVFP4 needs group_size, kv_cache_quant_algo, exclude_modules; MXFP8 the last two. */
    {V, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"group_size\":16"), MOQ_ERR_CONFIG, "missing kv_cache_quant_algo, exclude_modules"},
    {V, "hf", NESTED("\"quant_algo\":\"MXFP8\",\"exclude_modules\":[]"), MOQ_ERR_CONFIG, "missing kv_cache_quant_algo"},
    {S, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"exclude_modules\":[]"), MOQ_ERR_CONFIG, "group_size is missing"},
    /* SGLang common_group_size: every group_size in the file must agree. */
    {S, "hf", "{\"group_size\":32,\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":16}}", MOQ_ERR_CONFIG, "group_size values disagree (32, 16)"},
    {M, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"config_groups\":{\"g\":{\"weights\":{\"group_size\":32}}}"), MOQ_ERR_CONFIG, "group_size values disagree"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"ignore\":[]"), MOQ_ERR_CONFIG, "group_size is missing"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"ignore\":null"), MOQ_ERR_CONFIG, "ignore is null"},
    /* group_size from config_groups[first].weights (SGLang FP4; moq) vs vLLM's default 16. */
    {M, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"config_groups\":{\"g\":{\"weights\":{\"group_size\":32},\"input_activations\":{}}}"), MOQ_OK, "modelopt_fp4|NVFP4|-|32|0"},
    {V, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"config_groups\":{\"g\":{\"weights\":{\"group_size\":32},\"input_activations\":{}}}"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    /* vLLM: NVFP4 whose config groups all have input_activations null is W4A16_NVFP4. */
    {V, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"config_groups\":{\"a\":{\"weights\":{\"group_size\":16},\"input_activations\":null},\"b\":{\"weights\":{}}}"), MOQ_OK, "modelopt_fp4|W4A16_NVFP4|-|16|0"},
    {V, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"config_groups\":{\"a\":{\"input_activations\":null},\"b\":{\"input_activations\":{\"num_bits\":4}}}"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"config_groups\":{\"a\":{\"weights\":{\"group_size\":16},\"input_activations\":null}}"), MOQ_OK, "modelopt_fp4|NVFP4|auto|16|0"},
    /* ---- KV cache ---- */
    {V, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":{\"type\":\"float\",\"num_bits\":8}"), MOQ_OK, "modelopt|FP8|FP8|0|0"},
    {V, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":{\"type\":\"float\",\"num_bits\":4}"), MOQ_OK, "modelopt|FP8|-|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":{\"type\":\"float\",\"num_bits\":4}"), MOQ_OK, "modelopt|FP8|NVFP4|0|0"},
    {V, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":\"fp8\""), MOQ_OK, "modelopt|FP8|-|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":\" float8 \""), MOQ_OK, "modelopt|FP8|FP8|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":\"nvfp4\""), MOQ_OK, "modelopt|FP8|NVFP4|0|0"},
    {V, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"FP8\""), MOQ_OK, "modelopt|FP8|-|0|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"fp8\""), MOQ_OK, "modelopt|FP8|FP8|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"FP8\""), MOQ_OK, "modelopt_fp8|FP8|FP8|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_scheme\":\"fp8\",\"kv_cache_quant_algo\":\"X\""), MOQ_OK, "modelopt_fp8|FP8|X|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"kv_cache_scheme\":\"fp4\""), MOQ_OK, "modelopt_fp4|NVFP4|NVFP4|16|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"kv_cache_scheme\":{\"type\":\"int\",\"num_bits\":8}"), MOQ_OK, "modelopt_fp4|NVFP4|auto|16|0"},
    {S, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"kv_cache_quant_algo\":\"\""), MOQ_OK, "modelopt_fp4|NVFP4|auto|16|0"},
    /* ---- MIXED_PRECISION ---- */
    {M, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{}"), MOQ_ERR_CONFIG, "requires a non-empty quantized_layers"},
    {S, "cfg", FLAT("\"quant_algo\":\"MIXED_PRECISION\""), MOQ_ERR_CONFIG, "requires a non-empty quantized_layers"},
    {M, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{\"a\":{\"group_size\":16}}"), MOQ_ERR_CONFIG, "quant_algo is absent, expected a string"},
    {M, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{\"a\":{\"quant_algo\":\"INT4\"}}"), MOQ_ERR_CONFIG, "\"INT4\" is not one of"},
    {V, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{\"a\":{\"quant_algo\":\"INT4\"}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|-|16|0"},
    {V, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{\"a\":{\"quant_algo\":\"FP8_PB_WO\"},\"b\":{\"quant_algo\":\"fp8_block_scales\",\"group_size\":64}}"), MOQ_ERR_CONFIG, "block-FP8 layers use group sizes 128 and 64"},
    {S, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"quantized_layers\":{\"a\":{\"quant_algo\":\"FP8_PB_WO\"},\"b\":{\"quant_algo\":\"FP8_PB_WO\",\"group_size\":64}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|-|16|0"},
    /* group size: vLLM top-level first, else the first NVFP4-family entry; SGLang always the entry. */
    {V, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"group_size\":32,\"quantized_layers\":{\"a\":{\"quant_algo\":\"nvfp4\",\"group_size\":8}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|-|32|0"},
    {S, "hf", NESTED("\"quant_algo\":\"MIXED_PRECISION\",\"group_size\":32,\"quantized_layers\":{\"a\":{\"quant_algo\":\"nvfp4\",\"group_size\":8}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|-|8|0"},
    {M, "cfg", FLAT("\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_scheme\":{\"type\":\"float\",\"num_bits\":4},\"quantized_layers\":{\"a\":{\"quant_algo\":\"FP8\"}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|NVFP4|16|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_scheme\":{\"type\":\"float\",\"num_bits\":4},\"quantized_layers\":{\"a\":{\"quant_algo\":\"FP8\"}}"), MOQ_OK, "modelopt_mixed|MIXED_PRECISION|NVFP4|16|0"},
    /* SGLang keeps a non-string kv_cache_quant_algo as it is; Python truthiness decides (FP4: falsy -> "auto"). */
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":8"), MOQ_OK, "modelopt_fp8|FP8|8|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":true"), MOQ_OK, "modelopt_fp8|FP8|true|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":{\"a\":1}"), MOQ_OK, "modelopt_fp8|FP8|{\"a\":1}|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":0"), MOQ_OK, "modelopt_fp8|FP8|-|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":false"), MOQ_OK, "modelopt_fp8|FP8|-|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":[]"), MOQ_OK, "modelopt_fp8|FP8|-|0|0"},
    {S, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"kv_cache_quant_algo\":0"), MOQ_OK, "modelopt_fp4|NVFP4|auto|16|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":1"), MOQ_OK, "modelopt_fp8|FP8|1|0|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":16,\"kv_cache_quant_algo\":false"), MOQ_OK, "modelopt_fp4|NVFP4|auto|16|0"},
    {S, "cfg", FLAT("\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_quant_algo\":[\"FP8\"],\"quantized_layers\":{\"a\":{\"quant_algo\":\"FP8\"}}"), MOQ_OK,
     "modelopt_mixed|MIXED_PRECISION|[\"FP8\"]|16|0"},
    {M, "hf", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":8"), MOQ_ERR_CONFIG, "kv_cache_quant_algo is a number, expected a string"},
    /* SGLang common_group_size counts isinstance(v, int) only: 16.0 is a float and is not counted. */
    {S, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"group_size\":16.0"), MOQ_ERR_CONFIG, "group_size is missing"},
    {S, "hf", "{\"config_groups\":{\"g\":{\"weights\":{\"group_size\":32}}},\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":16.0}}", MOQ_OK, "modelopt_fp4|NVFP4|auto|32|0"},
    {S, "hf", "{\"config_groups\":{\"g\":{\"weights\":{\"group_size\":32}}},\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":16}}", MOQ_ERR_CONFIG, "group_size values disagree"},
    {S, "cfg", FLAT("\"quant_algo\":\"NVFP4\",\"group_size\":1.6e1"), MOQ_ERR_CONFIG, "group_size is 16 written as a float"},
    {V, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"group_size\":16.0"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    {M, "hf", NESTED("\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"group_size\":16.0"), MOQ_OK, "modelopt_fp4|NVFP4|-|16|0"},
    /* A string exclude_modules is an error everywhere (SGLang would iterate it character by character). */
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":\"lm_head\""), MOQ_ERR_CONFIG, "exclude_modules is a string, expected a list"},
    {V, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":\"lm_head\""), MOQ_ERR_CONFIG, "exclude_modules is a string, expected a list"},
    /* SGLang reads exclude patterns as regular expressions: Python's re.error is a config error;
     * what moq cannot translate to POSIX is unsupported, by name. */
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":[\"lm_head\",\"layers.[2-0]\"]"), MOQ_ERR_CONFIG, "exclude_modules[1] \"layers.[2-0]\" is not a valid regular expression"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":[\"(?=x)y\"]"), MOQ_ERR_UNSUPPORTED, "moq does not translate it: group extension"},
    {M, "hf", NESTED("\"quant_algo\":\"FP8\",\"exclude_modules\":[\"layers.[2-0]\"]"), MOQ_OK, "modelopt|FP8|-|0|1"},
    /* SGLang routes a name containing FP4 to its FP4 config before FP8: W4A8_NVFP4_FP8 is not read as FP8. */
    {S, "hf", NESTED("\"quant_algo\":\"W4A8_NVFP4_FP8\""), MOQ_ERR_UNSUPPORTED, "contains FP4: SGLang routes it to its FP4 config"},
    {S, "hf", NESTED("\"quant_algo\":\"FP8_PB_WO\""), MOQ_OK, "modelopt_fp8|FP8_PB_WO|-|0|0"},
    /* ---- MiniMax MXFP8 and the SGLang hybrid ---- */
    {V, "cfg", "{\"quantization_config\":{\"quant_method\":\"mxfp8\",\"ignored_layers\":[\"lm_head\"]}}", MOQ_OK, "modelopt_mxfp8|MXFP8|-|0|1"},
    {S, "cfg", "{\"quantization_config\":{\"quant_method\":\"mxfp8\",\"ignored_layers\":[\"lm_head\"]}}", MOQ_ERR_CONFIG, "quantization is absent"},
    {S, "cfg", "{\"quantization_config\":{\"quant_method\":\"fp8\",\"quant_algo\":\"FP8\",\"moe_quant_algo\":\"NVFP4\",\"ignore\":[\"mtp.*\"]}}", MOQ_OK, "fp8|FP8|-|16|1"},
    {V, "cfg", "{\"quantization_config\":{\"quant_method\":\"fp8\",\"quant_algo\":\"FP8\",\"moe_quant_algo\":\"NVFP4\"}}", MOQ_ERR_UNSUPPORTED, "hybrid"},
    {M, "cfg", "{\"quantization_config\":{\"quant_method\":\"fp8\",\"quant_algo\":\"FP8\",\"moe_quant_algo\":\"MXFP8\"}}", MOQ_ERR_UNSUPPORTED, "expected NVFP4"},
    {M, "hf", "{\"quantization\":[]}", MOQ_ERR_CONFIG, "quantization is an array"},
    {M, "hf", "{\"quantization\":", MOQ_ERR_FORMAT, "not valid JSON"},
};

static void check_row(const row *r, int idx) {
    moq_qconfig *q = NULL;
    moq_error e = {0};
    const char *file = strcmp(r->file, "hf") == 0 ? "hf_quant_config.json" : "config.json";
    moq_status st = moq_qconfig_parse(&q, r->json, file, (moq_compat)r->profile, &e);
    char got[512];
    if (st != r->st) {
        moq_error_format(&e, got, sizeof got);
        fail_msg("row %d (%s): status %s, expected %s (%s)", idx, moq_compat_name((moq_compat)r->profile), moq_status_str(st),
                 moq_status_str(r->st), got);
    }
    if (st != MOQ_OK) {
        assert_null(q);
        if (!strstr(e.msg, r->want) && !strstr(e.where, r->want))
            fail_msg("row %d: message \"%s\" lacks \"%s\"", idx, e.msg, r->want);
        if (!strstr(e.where, file)) fail_msg("row %d: where \"%s\" does not name %s", idx, e.where, file);
        return;
    }
    const char *kv = moq_qconfig_kv_cache_quant_algo(q);
    snprintf(got, sizeof got, "%s|%s|%s|%lld|%d", moq_qconfig_quant_method(q), moq_qconfig_quant_algo(q), kv ? kv : "-",
             (long long)moq_qconfig_group_size(q), moq_qconfig_exclude_count(q));
    if (strcmp(got, r->want) != 0) fail_msg("row %d (%s): got %s, expected %s", idx, moq_compat_name((moq_compat)r->profile), got, r->want);
    moq_qconfig_free(q);
}

static void test_rows(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) check_row(&rows[i], (int)i);
}

/* A checkpoint directory with both files: config.json wins, disagreements become notes. */
static void wstr(const char *dir, const char *name, const char *text) { free(tu_write_file(dir, name, text, strlen(text))); }

static void test_both_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir("qc_both");
    wstr(dir, "config.json", FLAT("\"quant_algo\":\"NVFP4\",\"ignore\":[\"lm_head\"],\"group_size\":16"));
    wstr(dir, "hf_quant_config.json", NESTED("\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"FP8\",\"exclude_modules\":[\"lm_head\",\"x\"]"));
    moq_qconfig *q = NULL;
    TU_OK(moq_qconfig_open(&q, dir, MOQ_COMPAT_MOQ, err_));
    assert_string_equal(moq_qconfig_source(q), "config.json:quantization_config");
    assert_string_equal(moq_qconfig_quant_algo(q), "NVFP4");
    char all[4096] = "";
    for (int i = 0; i < moq_qconfig_note_count(q); i++) strncat(all, moq_qconfig_note_at(q, i), sizeof all - strlen(all) - 2), strcat(all, "\n");
    assert_non_null(strstr(all, "quant_algo NVFP4"));
    assert_non_null(strstr(all, "says FP8"));
    assert_non_null(strstr(all, "kv_cache_quant_algo none"));
    assert_non_null(strstr(all, "only in hf_quant_config.json (first: x)"));
    moq_qconfig_free(q);
    /* No config at all. */
    char *d2 = tu_tmpdir("qc_none");
    moq_error e = {0};
    moq_status st = moq_qconfig_open(&q, d2, MOQ_COMPAT_MOQ, &e);
    TU_ERR(&e, st, MOQ_ERR_CONFIG, "qc_none", "not a quantized checkpoint");
    tu_rmtree(dir);
    tu_rmtree(d2);
    free(dir);
    free(d2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows), cmocka_unit_test(test_both_files)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
