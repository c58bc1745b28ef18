/* test_resolve.c — per-module resolution, table-driven, one row per rule of the seeds and per
 * profile. Expected results are read off the seed code (SGLang ModelOptQuantConfig.is_layer_excluded
 * / _get_quant_method / ModelOptMixedPrecisionConfig; vLLM ModelOptQuantConfigBase.is_layer_excluded
 * / get_quant_method / ModelOptMixedPrecisionConfig._resolve_quant_algo), and rows marked PEER restate
 * cases of vLLM's own suite, tests/quantization/test_modelopt.py (vllm-project/vllm, commit 0024350b):
 * the case is restated, no code is copied. */
#include <cjson/cJSON.h>

#include "tu.h"

enum { M = 1 << MOQ_COMPAT_MOQ, V = 1 << MOQ_COMPAT_VLLM, S = 1 << MOQ_COMPAT_SGLANG, ALL = M | V | S };

#define NV(ex) "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[" ex "]}}"
#define NVKV(ex) "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":\"FP8\",\"group_size\":16,\"exclude_modules\":[" ex "]}}"
#define ALGO(a) "{\"quantization\":{\"quant_algo\":\"" a "\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[]}}"
#define MP(layers) "{\"quantization\":{\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[],\"quantized_layers\":{" layers "}}}"
#define MPX(ex, layers) "{\"quantization\":{\"quant_algo\":\"MIXED_PRECISION\",\"kv_cache_quant_algo\":null,\"exclude_modules\":[" ex "],\"quantized_layers\":{" layers "}}}"
#define HYB "{\"quantization_config\":{\"quant_method\":\"fp8\",\"quant_algo\":\"MIXED_PRECISION\",\"moe_quant_algo\":\"NVFP4\",\"group_size\":16,\"weight_block_size\":[128,128],\"ignore\":[\"*.attn.*\",\"head\",\"mtp.*\"],\"quantized_layers\":{\"layers.0.ffn.experts\":{\"quant_algo\":\"NVFP4\",\"group_size\":16}}}}"
#define L(name, algo) "\"" name "\":{\"quant_algo\":\"" algo "\"}"
#define QKV "qkv_proj=q_proj,k_proj,v_proj"
#define L0 "model.layers.0."

typedef struct row {
    int         profiles;
    const char *cfg;
    const char *prefix;
    const char *kind;
    const char *packed;   /* "name=s1,s2;name2=..." or NULL */
    const char *want;     /* "method|algo|excluded|rule" or "!substring of the error" */
} row;

static const row rows[] = {
    /* ---- exclusion ---- */
    {ALL, NV("\"lm_head\""), "lm_head", "lm_head", NULL, "unquantized_linear|-|1|exclude-exact"},
    {ALL, NV("\"model.layers.0*\""), L0 "self_attn.qkv_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    {ALL, NV("\"model.layers.1*\""), "model.layers.12.mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    {ALL, NV("\"model.layers.1.*\""), "model.layers.12.mlp.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {ALL, NV(""), L0 "mlp.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* vLLM's legacy substring rule: a router "mlp.gate" entry also catches "mlp.gate_up_proj". */
    {V | M, NV("\"model.layers.0.mlp.gate\""), L0 "mlp.gate_up_proj", "linear", NULL, "unquantized_linear|-|1|exclude-substring"},
    {S, NV("\"model.layers.0.mlp.gate\""), L0 "mlp.gate_up_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* language_model. prefix: vLLM strips it for the substring rule only; SGLang for every match. */
    {V, NV("\"model.layers.0.self_attn*\""), "language_model.model.layers.0.self_attn.o_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {M, NV("\"model.layers.0.self_attn*\""), "language_model.model.layers.0.self_attn.o_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard-stripped"},
    {S, NV("\"model.layers.0.self_attn*\""), "language_model.model.layers.0.self_attn.o_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    {V | M, NV("\"model.layers.0.self_attn.o_proj\""), "language_model.model.layers.0.self_attn.o_proj", "linear", NULL, "unquantized_linear|-|1|exclude-substring"},
    {S, NV("\"model.layers.0.self_attn.o_proj\""), "language_model.model.layers.0.self_attn.o_proj", "linear", NULL, "unquantized_linear|-|1|exclude-exact"},
    {S, NV("\"model.layers.0.self_attn.o_proj\""), "language_model.model.layers.0.self_attn.experts", "moe", NULL, "nvfp4_moe|NVFP4|0|quant_algo"},
    /* SGLang part-by-part: "mtp*" matches the part "mtp_layers". */
    {S, NV("\"mtp*\""), "model.mtp_layers.0.fc", "linear", NULL, "unquantized_linear|-|1|exclude-part"},
    {V | M, NV("\"mtp*\""), "model.mtp_layers.0.fc", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {ALL, NV("\"mtp*\""), "mtp.layers.0.fc", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    /* SGLang fused patterns: the tail of the pattern (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj)
     * must be a substring of the prefix's last part. Its own example, q_a_proj inside
     * fused_qkv_a_proj_with_mqa, is not a substring ("qkv_a"), so only kv_a_proj_with_mqa fires. */
    {S | M, NV("\"model.layers.0.self_attn.kv_a_proj_with_mqa\""), L0 "self_attn.fused_qkv_a_proj_with_mqa", "linear", NULL, "unquantized_linear|-|1|exclude-fused-pattern"},
    {ALL, NV("\"model.layers.0.self_attn.q_a_proj\""), L0 "self_attn.fused_qkv_a_proj_with_mqa", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {V, NV("\"model.layers.0.self_attn.kv_a_proj_with_mqa\""), L0 "self_attn.fused_qkv_a_proj_with_mqa", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {ALL, NV("\"model.layers.0.self_attn.q_a_proj\",\"model.layers.0.self_attn.kv_a_proj_with_mqa\""), L0 "self_attn.fused_qkv_a_proj_with_mqa", "linear",
     "fused_qkv_a_proj_with_mqa=q_a_proj,kv_a_proj_with_mqa", "unquantized_linear|-|1|exclude-packed-shards"},
    /* Packed modules: skipped only when the shards agree, an error when they disagree. */
    {ALL, NV("\"model.layers.0.self_attn.q_proj\",\"model.layers.0.self_attn.k_proj\",\"model.layers.0.self_attn.v_proj\""), L0 "self_attn.qkv_proj", "linear", QKV,
     "unquantized_linear|-|1|exclude-packed-shards"},
    {ALL, NV("\"model.layers.0.self_attn.q_proj\""), L0 "self_attn.qkv_proj", "linear", QKV, "!some but not all shards of model.layers.0.self_attn.qkv_proj are quantized (q_proj=excluded, k_proj=quantized, v_proj=quantized)"},
    /* No packed mapping: SGLang's is_layer_skipped takes the shards from its built-in table; vLLM
     * compares the fused name itself (not listed: quantized). */
    {S, NV("\"model.layers.0.self_attn.q_proj\""), L0 "self_attn.qkv_proj", "linear", NULL,
     "!some but not all shards of model.layers.0.self_attn.qkv_proj are quantized (q_proj=excluded, k_proj=quantized, v_proj=quantized)"},
    {V | M, NV("\"model.layers.0.self_attn.q_proj\""), L0 "self_attn.qkv_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {S, NV("\"model.layers.0.mlp.gate_proj\",\"model.layers.0.mlp.up_proj\""), L0 "mlp.gate_up_proj", "linear", NULL, "unquantized_linear|-|1|exclude-packed-shards"},
    /* SGLang: an entry is a run of whole dotted parts anywhere in the prefix. */
    {S, NV("\"layers.0\""), L0 "mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-exact"},
    {S, NV("\"layers.0\""), "model.layers.01.mlp.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* SGLang's patterns are regular expressions: a class keeps its meaning (fnmatch's [!..] is "!" or ..). */
    {S, NV("\"model.layers.[0-2].*\""), "model.layers.1.mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    {S, NV("\"model.layers.[0-2].*\""), "model.layers.3.mlp.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {S, NV("\"model.layers.[!0-2].*\""), "model.layers.5.mlp.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {V | M, NV("\"model.layers.[!0-2].*\""), "model.layers.5.mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-wildcard"},
    {S, NV("\"o_proj|down_proj\""), "model.layers.1.mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-part"},
    {ALL, NV("\"model.layers.1.self_attn.q_proj\""), L0 "self_attn.qkv_proj", "linear", QKV, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* Experts: an "experts" entry containing the prefix (vLLM is_layer_skipped); SGLang's MoE path skips it. */
    {V | M, NV("\"model.layers.0.mlp.experts.3.down_proj\""), L0 "mlp.experts", "moe", NULL, "none|-|1|exclude-experts"},
    {S, NV("\"model.layers.0.mlp.experts.3.down_proj\""), L0 "mlp.experts", "moe", NULL, "nvfp4_moe|NVFP4|0|quant_algo"},
    {V | M, NV("\"model.layers.0.mlp.experts*\""), L0 "mlp.experts", "moe", NULL, "none|-|1|exclude-experts"},
    {S, NV("\"model.layers.0.mlp.experts*\""), L0 "mlp.experts", "moe", NULL, "none|-|1|exclude-wildcard"},
    /* The implicit vision rule (vLLM, single-algo configs). */
    {V | M, NV("\"lm_head\""), "vision_tower.blocks.0.attn.qkv", "linear", NULL, "unquantized_linear|-|1|vision-tower"},
    {S, NV("\"lm_head\""), "vision_tower.blocks.0.attn.qkv", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {V, NV("\"lm_head\""), "model.vision_model.experts", "moe", NULL, "unquantized_linear|-|1|vision-tower"},
    {M, NV("\"lm_head\""), "model.vision_model.experts", "moe", NULL, "none|-|1|vision-tower"},
    /* Kinds. */
    {ALL, NV(""), "model.embed_tokens", "embedding", NULL, "none|-|0|embedding-not-quantized"},
    {S | M, NVKV(""), L0 "self_attn.attn", "attention", NULL, "kv_cache|FP8|0|kv-cache-quant-algo"},
    {V, NVKV(""), L0 "self_attn.attn", "attention", NULL, "kv_cache|FP8|0|attention-kv-method"},
    {V, NV(""), L0 "self_attn.attn", "attention", NULL, "kv_cache|-|0|attention-kv-method"},
    {M, NV(""), L0 "self_attn.attn", "attention", NULL, "none|-|0|no-kv-cache-quant"},
    {S, NV(""), L0 "self_attn.attn", "attention", NULL, "kv_cache|auto|0|kv-cache-quant-algo"},
    /* SGLang: a non-string kv_cache_quant_algo gives the KV method when truthy (Python truthiness). */
    {S, "{\"quantization\":{\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":8}}", L0 "self_attn.attn", "attention", NULL, "kv_cache|8|0|kv-cache-quant-algo"},
    {S, "{\"quantization\":{\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":0}}", L0 "self_attn.attn", "attention", NULL, "none|-|0|no-kv-cache-quant"},
    {S, "{\"quantization\":{\"quant_algo\":\"FP8\",\"kv_cache_quant_algo\":\"\"}}", L0 "self_attn.attn", "attention", NULL, "none|-|0|no-kv-cache-quant"},
    /* PEER vLLM test_modelopt_nvfp4_quantizes_parallel_lm_head / ..._leaves_excluded_parallel_lm_head_unquantized */
    {ALL, NV(""), "lm_head", "lm_head", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* Per algo: linear and MoE methods. */
    {ALL, ALGO("FP8"), L0 "mlp.down_proj", "linear", NULL, "fp8_linear|FP8|0|quant_algo"},
    {ALL, ALGO("FP8"), L0 "mlp.experts", "moe", NULL, "fp8_moe|FP8|0|quant_algo"},
    {V | M, ALGO("FP8_PER_CHANNEL_PER_TOKEN"), L0 "mlp.down_proj", "linear", NULL, "fp8_pcpt_linear|FP8_PER_CHANNEL_PER_TOKEN|0|quant_algo"},
    {S, ALGO("FP8_PER_CHANNEL_PER_TOKEN"), L0 "mlp.down_proj", "linear", NULL, "fp8_linear|FP8|0|quant_algo"},
    /* Experts: vLLM's ModelOptFp8Config gives every FP8 algo ModelOptFp8MoEMethod (per-tensor scales);
     * SGLang reads the algo as FP8; moq has the per-channel expert format. */
    {V, ALGO("FP8_PER_CHANNEL_PER_TOKEN"), L0 "mlp.experts", "moe", NULL, "fp8_moe|FP8_PER_CHANNEL_PER_TOKEN|0|quant_algo-fp8-experts-per-tensor"},
    {S, ALGO("FP8_PER_CHANNEL_PER_TOKEN"), L0 "mlp.experts", "moe", NULL, "fp8_moe|FP8|0|quant_algo"},
    {M, ALGO("FP8_PER_CHANNEL_PER_TOKEN"), L0 "mlp.experts", "moe", NULL, "fp8_pcpt_moe|FP8_PER_CHANNEL_PER_TOKEN|0|quant_algo"},
    {V | M, ALGO("FP8_PB_WO"), L0 "mlp.down_proj", "linear", NULL, "fp8_pbwo_linear|FP8_PB_WO|0|quant_algo"},
    {V, ALGO("FP8_PB_WO"), L0 "mlp.experts", "moe", NULL, "fp8_moe|FP8_PB_WO|0|quant_algo-fp8-experts-per-tensor"},
    {M, ALGO("FP8_PB_WO"), L0 "mlp.experts", "moe", NULL, "fp8_block_moe|FP8_PB_WO|0|quant_algo"},
    {V | M, ALGO("MXFP8"), L0 "mlp.down_proj", "linear", NULL, "mxfp8_linear|MXFP8|0|quant_algo"},
    {V | M, ALGO("MXFP8"), L0 "mlp.experts", "moe", NULL, "mxfp8_moe|MXFP8|0|quant_algo"},
    {V | M, "{\"quantization\":{\"quant_algo\":\"W4A16_NVFP4\",\"kv_cache_quant_algo\":null,\"group_size\":16,\"exclude_modules\":[]}}", L0 "mlp.experts", "moe", NULL,
     "w4a16_nvfp4_moe|W4A16_NVFP4|0|quant_algo"},
    /* PEER SGLang test/registered/quant/test_is_layer_skipped.py (sgl-project/sglang @12ad6cb0): its
     * is_layer_skipped matches on dot boundaries; vLLM reaches the same or more through substrings. */
    {ALL, NV("\"layers.0.linear_attn.in_proj_ba\",\"model.layers.0.linear_attn.in_proj_ba\""), L0 "linear_attn.in_proj_ba", "linear",
     QKV ";gate_up_proj=gate_proj,up_proj", "unquantized_linear|-|1|exclude-exact"},
    {S, NV("\"mlp.gate\""), L0 "mlp.gate", "linear", NULL, "unquantized_linear|-|1|exclude-exact"},
    {S, NV("\"mlp.gate\""), L0 "mlp.gate_up_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    {V | M, NV("\"mlp.gate\""), L0 "mlp.gate", "linear", NULL, "unquantized_linear|-|1|exclude-substring"},
    {V | M, NV("\"mlp.gate\""), L0 "mlp.gate_up_proj", "linear", NULL, "unquantized_linear|-|1|exclude-substring"},
    {S, NV("\"model.layers.34.\""), "model.layers.34.mlp.experts.0.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-exact"},
    {V | M, NV("\"model.layers.34.\""), "model.layers.34.mlp.experts.0.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-substring"},
    {ALL, NV("\"model.layers.34.\""), "model.layers.340.mlp.experts.0.down_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|quant_algo"},
    /* ---- mixed precision ---- */
    /* PEER test_modelopt_mixed_precision_quantizes_parallel_lm_head */
    {ALL, MP(L("lm_head", "NVFP4")), "lm_head", "lm_head", NULL, "nvfp4_linear|NVFP4|0|mp-direct"},
    {ALL, MP(L("lm_head", "NVFP4")), "language_model.lm_head", "lm_head", NULL, "nvfp4_linear|NVFP4|0|mp-lm_head"},
    /* PEER test_modelopt_mixed_precision_resolves_declared_packed_projection (SGLang does not dispatch MXFP8) */
    {V | M, MP(L(L0 "self_attn.q_proj", "MXFP8") "," L(L0 "self_attn.k_proj", "MXFP8") "," L(L0 "self_attn.v_proj", "MXFP8")), L0 "self_attn.qkv_proj", "linear", QKV,
     "mxfp8_linear|MXFP8|0|mp-packed-shards"},
    {S, MP(L(L0 "self_attn.q_proj", "MXFP8") "," L(L0 "self_attn.k_proj", "MXFP8") "," L(L0 "self_attn.v_proj", "MXFP8")), L0 "self_attn.qkv_proj", "linear", QKV,
     "unquantized_linear|-|0|mp-algo-not-dispatched"},
    /* PEER test_modelopt_mixed_precision_does_not_quantize_unlisted_fused_sibling */
    {ALL, MP(L(L0 "linear_attn.in_proj_qkv", "FP8") "," L(L0 "linear_attn.in_proj_z", "FP8") "," L(L0 "linear_attn.out_proj", "FP8")), L0 "linear_attn.in_proj_qkvz", "linear",
     "in_proj_qkvz=in_proj_qkv,in_proj_z;in_proj_ba=in_proj_b,in_proj_a", "fp8_linear|FP8|0|mp-packed-shards"},
    {ALL, MP(L(L0 "linear_attn.in_proj_qkv", "FP8") "," L(L0 "linear_attn.in_proj_z", "FP8") "," L(L0 "linear_attn.out_proj", "FP8")), L0 "linear_attn.in_proj_ba", "linear",
     "in_proj_qkvz=in_proj_qkv,in_proj_z;in_proj_ba=in_proj_b,in_proj_a", "unquantized_linear|-|0|mp-not-listed"},
    /* PEER test_modelopt_mixed_precision_infers_fused_gate_up_projection (vLLM's built-in shard names) */
    {V | M, MP(L(L0 "mlp.gate_proj", "NVFP4") "," L(L0 "mlp.up_proj", "NVFP4")), L0 "mlp.gate_up_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|mp-builtin-shards"},
    {S, MP(L(L0 "mlp.gate_proj", "NVFP4") "," L(L0 "mlp.up_proj", "NVFP4")), L0 "mlp.gate_up_proj", "linear", NULL, "unquantized_linear|-|0|mp-not-listed"},
    /* PEER test_modelopt_mixed_precision_does_not_infer_missing_sibling_linear */
    {ALL, MP(L(L0 "mlp.gate_proj", "NVFP4")), L0 "mlp.down_proj", "linear", NULL, "unquantized_linear|-|0|mp-not-listed"},
    {ALL, MP(L(L0 "self_attn.o_proj", "NVFP4")), L0 "self_attn.qkv_proj", "linear", NULL, "unquantized_linear|-|0|mp-not-listed"},
    /* PEER test_modelopt_mixed_precision_dispatches_w4a16_layer */
    {ALL, MP(L(L0 "fake_proj", "NVFP4")), L0 "fake_proj", "linear", NULL, "nvfp4_linear|NVFP4|0|mp-direct"},
    {ALL, MP(L(L0 "fake_proj", "W4A16_NVFP4")), L0 "fake_proj", "linear", NULL, "w4a16_nvfp4_linear|W4A16_NVFP4|0|mp-direct"},
    /* Shards of one fused module with different algos: an error naming each shard. */
    {ALL, MP(L(L0 "self_attn.q_proj", "FP8") "," L(L0 "self_attn.k_proj", "NVFP4")), L0 "self_attn.qkv_proj", "linear", QKV, "!shards q_proj=FP8 and k_proj=NVFP4 disagree"},
    {V | M, MP(L(L0 "mlp.gate_proj", "FP8") "," L(L0 "mlp.up_proj", "NVFP4")), L0 "mlp.gate_up_proj", "linear", NULL, "!shards gate_proj=FP8 and up_proj=NVFP4 disagree"},
    /* SGLang resolves before excluding: the shard error fires even for an excluded module. */
    {V | M, MPX("\"model.layers.0.self_attn.qkv_proj\"", L(L0 "self_attn.q_proj", "FP8") "," L(L0 "self_attn.k_proj", "NVFP4")), L0 "self_attn.qkv_proj", "linear", NULL,
     "unquantized_linear|-|1|exclude-exact"},
    {S, MPX("\"model.layers.0.self_attn.qkv_proj\"", L(L0 "self_attn.q_proj", "FP8") "," L(L0 "self_attn.k_proj", "NVFP4")), L0 "self_attn.qkv_proj", "linear", QKV,
     "!shards q_proj=FP8 and k_proj=NVFP4 disagree"},
    /* language_model.model. <-> model.language_model. */
    {ALL, MP(L("model.language_model.layers.0.mlp.down_proj", "W4A16_NVFP4")), "language_model.model.layers.0.mlp.down_proj", "linear", NULL,
     "w4a16_nvfp4_linear|W4A16_NVFP4|0|mp-language_model-swap"},
    /* Child prefix (routed experts listed per expert) and vLLM's ".experts" parent fallback. */
    {ALL, MP(L(L0 "mlp.experts.0.down_proj", "nvfp4")), L0 "mlp.experts", "moe", NULL, "nvfp4_moe|NVFP4|0|mp-child-prefix"},
    {V | M, MP(L(L0 "moe.gate_proj", "NVFP4")), L0 "moe.experts", "moe", NULL, "nvfp4_moe|NVFP4|0|mp-experts-parent"},
    {S, MP(L(L0 "moe.gate_proj", "NVFP4")), L0 "moe.experts", "moe", NULL, "none|-|0|mp-not-listed"},
    /* Per-layer MoE methods; FP8_BLOCK_SCALES reaches MoE layers only in vLLM. */
    {V | M, MP(L(L0 "mlp.experts", "FP8_PB_WO")), L0 "mlp.experts", "moe", NULL, "fp8_block_moe|FP8_PB_WO|0|mp-direct"},
    {V | M, MP(L(L0 "mlp.experts", "FP8_BLOCK_SCALES")), L0 "mlp.experts", "moe", NULL, "fp8_block_moe|FP8_PB_WO|0|mp-direct"},
    {V, MP(L(L0 "mlp.down_proj", "FP8_BLOCK_SCALES")), L0 "mlp.down_proj", "linear", NULL, "unquantized_linear|-|0|mp-algo-not-dispatched"},
    {M, MP(L(L0 "mlp.down_proj", "FP8_BLOCK_SCALES")), L0 "mlp.down_proj", "linear", NULL, "fp8_pbwo_linear|FP8_PB_WO|0|mp-direct"},
    {S, MP(L(L0 "mlp.experts", "FP8_PB_WO")), L0 "mlp.experts", "moe", NULL, "none|-|0|mp-algo-not-dispatched"},
    {ALL, MP(L(L0 "mlp.experts", "FP8")), L0 "mlp.experts", "moe", NULL, "fp8_moe|FP8|0|mp-direct"},
    {ALL, MP(L(L0 "mlp.experts", "W4A16_NVFP4")), L0 "mlp.experts", "moe", NULL, "w4a16_nvfp4_moe|W4A16_NVFP4|0|mp-direct"},
    {V | M, MP(L(L0 "mlp.experts", "MXFP8")), L0 "mlp.experts", "moe", NULL, "mxfp8_moe|MXFP8|0|mp-direct"},
    /* vLLM's mixed MoE dispatch has no FP8_PER_CHANNEL_PER_TOKEN row (returns None); moq runs the
     * per-channel expert format ModelOpt writes (NUMERICS §12). */
    {V | S, MP(L(L0 "mlp.experts", "FP8_PER_CHANNEL_PER_TOKEN")), L0 "mlp.experts", "moe", NULL, "none|-|0|mp-algo-not-dispatched"},
    {M, MP(L(L0 "mlp.experts", "FP8_PER_CHANNEL_PER_TOKEN")), L0 "mlp.experts", "moe", NULL, "fp8_pcpt_moe|FP8_PER_CHANNEL_PER_TOKEN|0|mp-direct"},
    {V | M, MP(L(L0 "mlp.down_proj", "FP8_PER_CHANNEL_PER_TOKEN")), L0 "mlp.down_proj", "linear", NULL, "fp8_pcpt_linear|FP8_PER_CHANNEL_PER_TOKEN|0|mp-direct"},
    /* No vision rule in mixed precision; attention only with a KV algo. */
    {V | M, MP(L("vision_tower.blocks.0.qkv", "FP8")), "vision_tower.blocks.0.qkv", "linear", NULL, "fp8_linear|FP8|0|mp-direct"},
    {ALL, MP(L(L0 "mlp.down_proj", "FP8")), L0 "self_attn.attn", "attention", NULL, "none|-|0|no-kv-cache-quant"},
    {ALL, MPX("\"model.layers.0.mlp.down_proj\"", L(L0 "mlp.down_proj", "FP8")), L0 "mlp.down_proj", "linear", NULL, "unquantized_linear|-|1|exclude-exact"},
    /* ---- SGLang hybrid FP8 + NVFP4 (DeepSeek-V4 style) ---- */
    {S | M, HYB, "layers.3.ffn.experts", "moe", NULL, "nvfp4_moe|NVFP4|0|hybrid-moe-nvfp4"},
    {S | M, HYB, "mtp.0.ffn.experts", "moe", NULL, "fp8_block_moe|FP8_PB_WO|1|hybrid-moe-excluded-fp8"},
    {S | M, HYB, "layers.0.attn.wq_a", "linear", NULL, "fp8_pbwo_linear|FP8_PB_WO|0|hybrid-fp8-linear"},
    {S | M, HYB, "head", "lm_head", NULL, "unquantized_linear|-|0|hybrid-lm-head-unquantized"},
};

/* "a=b,c;d=e" -> moq_packed entries (static storage: one row at a time). */
static int parse_packed(const char *spec, moq_packed *out, char *buf, size_t n, const char **shards) {
    if (!spec) return 0;
    snprintf(buf, n, "%s", spec);
    int np = 0, ns = 0;
    char *save1 = NULL;
    for (char *e = strtok_r(buf, ";", &save1); e; e = strtok_r(NULL, ";", &save1)) {
        char *eq = strchr(e, '=');
        *eq = 0;
        out[np].name = e;
        out[np].shards = &shards[ns];
        out[np].n_shards = 0;
        char *save2 = NULL;
        for (char *s = strtok_r(eq + 1, ",", &save2); s; s = strtok_r(NULL, ",", &save2)) shards[ns++] = s, out[np].n_shards++;
        np++;
    }
    return np;
}

static void test_rows(void **state) {
    (void)state;
    int checked = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *r = &rows[i];
        for (int p = 0; p < MOQ_COMPAT_COUNT; p++) {
            if (!(r->profiles & (1 << p))) continue;
            moq_qconfig *q = NULL;
            moq_error e = {0};
            const char *file = strstr(r->cfg, "quantization_config") ? "config.json" : "hf_quant_config.json";
            if (moq_qconfig_parse(&q, r->cfg, file, (moq_compat)p, &e) != MOQ_OK) fail_msg("row %zu: config does not parse: %s", i, e.msg);
            moq_packed packed[4];
            const char *shards[16];
            char buf[256];
            int np = parse_packed(r->packed, packed, buf, sizeof buf, shards);
            moq_layer_kind kind;
            assert_int_equal(moq_layer_kind_parse(r->kind, &kind, NULL), MOQ_OK);
            moq_resolution res;
            moq_status st = moq_resolve(q, r->prefix, kind, packed, np, &res, &e);
            if (r->want[0] == '!') {
                if (st != MOQ_ERR_CONFIG) fail_msg("row %zu (%s): expected an error, got %s (%s)", i, moq_compat_name((moq_compat)p), moq_status_str(st), st ? e.msg : res.method);
                if (!strstr(e.msg, r->want + 1)) fail_msg("row %zu: message \"%s\" lacks \"%s\"", i, e.msg, r->want + 1);
                assert_string_equal(e.where, r->prefix);
            } else {
                if (st != MOQ_OK) fail_msg("row %zu (%s): %s: %s", i, moq_compat_name((moq_compat)p), e.where, e.msg);
                char got[256];
                snprintf(got, sizeof got, "%s|%s|%d|%s", res.method, res.algo ? res.algo : "-", res.excluded, res.rule);
                if (strcmp(got, r->want) != 0) fail_msg("row %zu (%s) %s: got %s, expected %s", i, moq_compat_name((moq_compat)p), r->prefix, got, r->want);
            }
            checked++;
            moq_qconfig_free(q);
        }
    }
    assert_true(checked > 150);
}

/* Real configs: a few decisions read off the published files. */
static void test_real(void **state) {
    (void)state;
    static const struct { const char *file, *prefix, *kind, *want; } rr[] = {
        /* Qwen3-235B excludes the routers "model.layers.N.mlp.gate". */
        {"nvidia--Qwen3-235B-A22B-NVFP4_hf_quant_config.json", "model.layers.0.mlp.gate", "linear", "unquantized_linear|-|1|exclude-exact"},
        {"nvidia--Qwen3-235B-A22B-NVFP4_hf_quant_config.json", "model.layers.0.mlp.experts", "moe", "nvfp4_moe|NVFP4|0|quant_algo"},
        /* Kimi-K2.6: language_model.model.layers.0* excludes the whole first layer. */
        {"nvidia--Kimi-K2.6-NVFP4_config.json", "language_model.model.layers.0.mlp.down_proj", "linear", "unquantized_linear|-|1|exclude-wildcard"},
        {"nvidia--Kimi-K2.6-NVFP4_config.json", "language_model.model.layers.3.mlp.experts", "moe", "nvfp4_moe|NVFP4|0|quant_algo"},
        /* Qwen3.6-27B: per-layer FP8 and W4A16, mtp excluded. */
        {"nvidia--Qwen3.6-27B-NVFP4_config.json", "model.language_model.layers.0.linear_attn.out_proj", "linear", "fp8_linear|FP8|0|mp-direct"},
        {"nvidia--Qwen3.6-27B-NVFP4_config.json", "mtp.layers.0.mlp.down_proj", "linear", "unquantized_linear|-|1|exclude-wildcard"},
        /* MiniMax-M3: MXFP8 and NVFP4 per layer. */
        {"nvidia--MiniMax-M3-NVFP4_config.json", "language_model.model.layers.0.mlp.down_proj", "linear", "mxfp8_linear|MXFP8|0|mp-direct"},
        {"nvidia--MiniMax-M3-NVFP4_config.json", "language_model.model.layers.3.block_sparse_moe.experts", "moe", "nvfp4_moe|NVFP4|0|mp-child-prefix"},
    };
    for (size_t i = 0; i < sizeof rr / sizeof rr[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "modelopt_configs/%s", rr[i].file);
        char *p = tu_data_path(rel);
        moq_qconfig *q = NULL;
        TU_OK(moq_qconfig_open(&q, p, MOQ_COMPAT_MOQ, err_));
        moq_layer_kind kind;
        moq_layer_kind_parse(rr[i].kind, &kind, NULL);
        moq_resolution res;
        TU_OK(moq_resolve(q, rr[i].prefix, kind, NULL, 0, &res, err_));
        char got[256];
        snprintf(got, sizeof got, "%s|%s|%d|%s", res.method, res.algo ? res.algo : "-", res.excluded, res.rule);
        if (strcmp(got, rr[i].want) != 0) fail_msg("%s %s: got %s, expected %s", rr[i].file, rr[i].prefix, got, rr[i].want);
        moq_qconfig_free(q);
        free(p);
    }
}

/* SGLang's linear path, is_layer_skipped(...) or is_layer_excluded(...), against the results Python
 * computed in tests/golden/exclude/expected.json ("excluded": gen.py restates both functions and
 * matches with Python's re). */
static void test_sglang_excluded_golden(void **state) {
    (void)state;
    char *path = tu_golden_path("exclude/expected.json");
    size_t len = 0;
    char *text = tu_read_file(path, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    assert_non_null(j);
    int n = 0;
    for (const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "excluded")->child; r; r = r->next, n++) {
        cJSON *cfg = cJSON_CreateObject(), *qs = cJSON_AddObjectToObject(cfg, "quantization");
        cJSON_AddStringToObject(qs, "quant_algo", "NVFP4");
        cJSON_AddNullToObject(qs, "kv_cache_quant_algo");
        cJSON_AddNumberToObject(qs, "group_size", 16);
        cJSON_AddItemToObject(qs, "exclude_modules", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(r, "exclude"), true));
        char *ctext = cJSON_PrintUnformatted(cfg);
        moq_qconfig *q = NULL;
        TU_OK(moq_qconfig_parse(&q, ctext, "hf_quant_config.json", MOQ_COMPAT_SGLANG, err_));
        const char *prefix = cJSON_GetObjectItemCaseSensitive(r, "prefix")->valuestring;
        moq_packed packed[4];
        const char *shards[16];
        int np = 0, ns = 0;
        const cJSON *pk = cJSON_GetObjectItemCaseSensitive(r, "packed");
        for (const cJSON *e = cJSON_IsObject(pk) ? pk->child : NULL; e; e = e->next, np++) {
            packed[np].name = e->string, packed[np].shards = &shards[ns], packed[np].n_shards = 0;
            for (const cJSON *sh = e->child; sh; sh = sh->next) shards[ns++] = sh->valuestring, packed[np].n_shards++;
        }
        moq_resolution res;
        moq_error e = {0};
        const moq_status st = moq_resolve(q, prefix, MOQ_KIND_LINEAR, packed, np, &res, &e);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(r, "result");
        if (cJSON_IsString(want)) { /* "mixed": SGLang raises */
            char m[300];
            snprintf(m, sizeof m, "some but not all shards of %s are quantized", prefix);
            TU_ERR(&e, st, MOQ_ERR_CONFIG, prefix, m);
        } else {
            if (st != MOQ_OK) fail_msg("%s: %s", prefix, e.msg);
            if (res.excluded != cJSON_IsTrue(want))
                fail_msg("excluded(%s, %s) = %d (rule %s), SGLang gives %d", prefix, ctext, res.excluded, res.rule, cJSON_IsTrue(want));
        }
        moq_qconfig_free(q);
        free(ctext);
        cJSON_Delete(cfg);
    }
    assert_true(n >= 30);
    cJSON_Delete(j);
    free(text);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows), cmocka_unit_test(test_real), cmocka_unit_test(test_sglang_excluded_golden)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
