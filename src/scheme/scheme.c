/* scheme.c — the scheme table (see scheme.h). Contracts restate the tensors the seeds register in
 * create_weights (SGLang ModelOpt*LinearMethod, vLLM K* QuantKeySchemes), per linear layer, with
 * N = output rows, K = input columns, G = the config's group size:
 *
 *   FP8                       weight e4m3 [N,K]  weight_scale f32 scalar  input_scale f32 scalar
 *   FP8_PER_CHANNEL_PER_TOKEN weight e4m3 [N,K]  weight_scale f32 [N] (or [N,1]), no input scale
 *   FP8_PB_WO                 weight e4m3 [N,K]  weight_scale f32 [ceil(N/128),1,K/128,1] (or 2-D, or 0-d
 *                                                for a single block: ModelOpt 0.47, NUMERICS §12)
 *   NVFP4                     weight u8 [N,K/2]  weight_scale e4m3 [N,K/G]  weight_scale_2, input_scale f32
 *   W4A16_NVFP4               as NVFP4, input_scale optional (legacy exports; vLLM drops it)
 *   MXFP8                     weight e4m3 [N,K]  weight_scale e8m0|u8 [N,K/32]
 *   NVFP4_AWQ                 as NVFP4, plus pre_quant_scale bf16|f16 [K] where ModelOpt did not fold it
 *
 * Routed experts store the same tensors per expert projection (experts.<e>.<proj>.*).
 * Tested by tests/config/test_scheme.c.
 */
#include "scheme/scheme.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const method_names[MOQ_METHOD_COUNT] = {
    [MOQ_METHOD_NONE] = "none",
    [MOQ_METHOD_UNQUANTIZED_LINEAR] = "unquantized_linear",
    [MOQ_METHOD_FP8_LINEAR] = "fp8_linear",
    [MOQ_METHOD_FP8_PCPT_LINEAR] = "fp8_pcpt_linear",
    [MOQ_METHOD_FP8_PBWO_LINEAR] = "fp8_pbwo_linear",
    [MOQ_METHOD_NVFP4_LINEAR] = "nvfp4_linear",
    [MOQ_METHOD_W4A16_NVFP4_LINEAR] = "w4a16_nvfp4_linear",
    [MOQ_METHOD_MXFP8_LINEAR] = "mxfp8_linear",
    [MOQ_METHOD_FP8_MOE] = "fp8_moe",
    [MOQ_METHOD_FP8_BLOCK_MOE] = "fp8_block_moe",
    [MOQ_METHOD_NVFP4_MOE] = "nvfp4_moe",
    [MOQ_METHOD_W4A16_NVFP4_MOE] = "w4a16_nvfp4_moe",
    [MOQ_METHOD_MXFP8_MOE] = "mxfp8_moe",
    [MOQ_METHOD_KV_CACHE] = "kv_cache",
    [MOQ_METHOD_FP8_PCPT_MOE] = "fp8_pcpt_moe",
    [MOQ_METHOD_NVFP4_AWQ_LINEAR] = "nvfp4_awq_linear",
    [MOQ_METHOD_NVFP4_AWQ_MOE] = "nvfp4_awq_moe",
};

const char *moq_method_name(moq_method m) {
    return (unsigned)m < MOQ_METHOD_COUNT ? method_names[m] : "none";
}

#define SCALAR {MOQ_DIM_END}
#define ONE {MOQ_DIM_ONE, MOQ_DIM_END}
#define F32 MOQ_DT_F32, MOQ_DT_F32

static const moq_tensor_rule fp8_tensor_c[] = {
    /* suffix          dtype(s)                          shape                                  alt shape        alt    opt    0-d if one  note */
    {"weight",       MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_END},     {0},             false, false, false, "e4m3 weights"},
    {"weight_scale", F32,                             SCALAR,                                   ONE,             true,  false, false, "one f32 scale per tensor (amax / 448)"},
    {"input_scale",  F32,                             SCALAR,                                   ONE,             true,  false, false, "static activation scale"},
    {0}};
static const moq_tensor_rule fp8_row_c[] = {
    {"weight",       MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_END},     {0},             false, false, false, "e4m3 weights"},
    {"weight_scale", F32,                             {MOQ_DIM_N, MOQ_DIM_END},                 {MOQ_DIM_N, MOQ_DIM_ONE, MOQ_DIM_END}, true, false, false, "one f32 scale per output channel"},
    {0}};
static const moq_tensor_rule fp8_blk_c[] = {
    {"weight",       MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_END},     {0},             false, false, false, "e4m3 weights, K % 128 == 0"},
    {"weight_scale", F32, {MOQ_DIM_N_BLK128, MOQ_DIM_ONE, MOQ_DIM_K_BLK128, MOQ_DIM_ONE, MOQ_DIM_END},
                          {MOQ_DIM_N_BLK128, MOQ_DIM_K_BLK128, MOQ_DIM_END}, true, false, true, "one f32 scale per 128x128 block"},
    {0}};
static const moq_tensor_rule nvfp4_c[] = {
    {"weight",         MOQ_DT_U8, MOQ_DT_U8,           {MOQ_DIM_N, MOQ_DIM_K_HALF, MOQ_DIM_END},  {0},           false, false, false, "two e2m1 per byte"},
    {"weight_scale",   MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K_DIV_G, MOQ_DIM_END}, {0},           false, false, false, "one e4m3 scale per group of weights"},
    {"weight_scale_2", F32,                            SCALAR,                                    ONE,           true,  false, false, "global scale amax / (6 * 448)"},
    {"input_scale",    F32,                            SCALAR,                                    ONE,           true,  false, false, "activation global scale"},
    {0}};
/* NVFP4_AWQ (ModelOpt NVFP4_AWQ_LITE_CFG, NUMERICS §12): NVFP4 plus the AWQ per-input-channel
 * scale where ModelOpt could not fold it into the previous layer (o_proj; folded elsewhere). */
static const moq_tensor_rule nvfp4_awq_c[] = {
    {"weight",          MOQ_DT_U8, MOQ_DT_U8,           {MOQ_DIM_N, MOQ_DIM_K_HALF, MOQ_DIM_END},  {0},           false, false, false, "two e2m1 per byte"},
    {"weight_scale",    MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K_DIV_G, MOQ_DIM_END}, {0},           false, false, false, "one e4m3 scale per group of weights"},
    {"weight_scale_2",  F32,                            SCALAR,                                    ONE,           true,  false, false, "global scale amax / (6 * 448)"},
    {"input_scale",     F32,                            SCALAR,                                    ONE,           true,  false, false, "activation global scale"},
    {"pre_quant_scale", MOQ_DT_BF16, MOQ_DT_F16,        {MOQ_DIM_K, MOQ_DIM_END},                  {0},           false, true,  false, "AWQ scale per input channel, x * s before quantization"},
    {0}};
static const moq_tensor_rule nvfp4_w_only_c[] = {
    {"weight",         MOQ_DT_U8, MOQ_DT_U8,           {MOQ_DIM_N, MOQ_DIM_K_HALF, MOQ_DIM_END},  {0},           false, false, false, "two e2m1 per byte"},
    {"weight_scale",   MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K_DIV_G, MOQ_DIM_END}, {0},           false, false, false, "one e4m3 scale per group of weights"},
    {"weight_scale_2", F32,                            SCALAR,                                    ONE,           true,  false, false, "global scale amax / (6 * 448)"},
    {"input_scale",    F32,                            SCALAR,                                    ONE,           true,  true,  false, "legacy, unused by W4A16"},
    {0}};
static const moq_tensor_rule mxfp8_c[] = {
    {"weight",       MOQ_DT_F8_E4M3, MOQ_DT_F8_E4M3, {MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_END},       {0},           false, false, false, "e4m3 weights, K % 32 == 0"},
    {"weight_scale", MOQ_DT_U8, MOQ_DT_F8_E8M0,      {MOQ_DIM_N, MOQ_DIM_K_DIV_G, MOQ_DIM_END}, {MOQ_DIM_N_ROWBLK, MOQ_DIM_K_DIV_G, MOQ_DIM_END}, true, false, false, "one e8m0 scale per 32 weights (or per r rows x 32)"},
    {0}};
static const moq_tensor_rule unquantized_c[] = {
    {"weight", MOQ_DT_BF16, MOQ_DT_F16, {MOQ_DIM_N, MOQ_DIM_K, MOQ_DIM_END}, {0}, false, false, false, "model-dtype weights"},
    {"bias",   MOQ_DT_BF16, MOQ_DT_F16, {MOQ_DIM_N, MOQ_DIM_END},            {0}, false, true,  false, "model-dtype bias"},
    {0}};

static const moq_scheme schemes[] = {
    /* algo                         alias               owner             weight key              activation key                     linear                          moe                         group contract    sglang_mixed moq_only summary */
    {"FP8",                       NULL,               "modelopt",       &MOQ_KEY_W_FP8_TENSOR, &MOQ_KEY_A_FP8_TENSOR_STATIC, MOQ_METHOD_FP8_LINEAR,         MOQ_METHOD_FP8_MOE,         0,   fp8_tensor_c,   true,  false, "FP8 per-tensor weights, static per-tensor activations"},
    {"FP8_PER_CHANNEL_PER_TOKEN", NULL,               "modelopt",       &MOQ_KEY_W_FP8_ROW,    &MOQ_KEY_A_FP8_TOKEN_DYN,     MOQ_METHOD_FP8_PCPT_LINEAR,    MOQ_METHOD_FP8_PCPT_MOE,    0,   fp8_row_c,      false, false, "FP8 per-channel weights, dynamic per-token activations"},
    {"FP8_PB_WO",                 "FP8_BLOCK_SCALES", "modelopt",       &MOQ_KEY_W_FP8_BLK128, &MOQ_KEY_A_FP8_G128_DYN,      MOQ_METHOD_FP8_PBWO_LINEAR,    MOQ_METHOD_FP8_BLOCK_MOE,   128, fp8_blk_c,      false, false, "FP8 128x128 block weights, dynamic per-128 activations"},
    {"NVFP4",                     NULL,               "modelopt_fp4",   &MOQ_KEY_W_NVFP4,      &MOQ_KEY_A_NVFP4_DYN,         MOQ_METHOD_NVFP4_LINEAR,       MOQ_METHOD_NVFP4_MOE,       16,  nvfp4_c,        true,  false, "NVFP4 weights and activations (W4A4)"},
    {"W4A16_NVFP4",               NULL,               "modelopt_fp4",   &MOQ_KEY_W_NVFP4,      &MOQ_KEY_A_NONE,              MOQ_METHOD_W4A16_NVFP4_LINEAR, MOQ_METHOD_W4A16_NVFP4_MOE, 16,  nvfp4_w_only_c, true,  false, "NVFP4 weights, 16-bit activations (W4A16)"},
    {"MXFP8",                     NULL,               "modelopt_mxfp8", &MOQ_KEY_W_MXFP8,      &MOQ_KEY_A_MXFP8_DYN,         MOQ_METHOD_MXFP8_LINEAR,       MOQ_METHOD_MXFP8_MOE,       32,  mxfp8_c,        false, false, "MXFP8 weights (e8m0 per 32), dynamic MXFP8 activations"},
    {"NVFP4_AWQ",                 NULL,               "modelopt_fp4",   &MOQ_KEY_W_NVFP4,      &MOQ_KEY_A_NVFP4_DYN,         MOQ_METHOD_NVFP4_AWQ_LINEAR,   MOQ_METHOD_NVFP4_AWQ_MOE,   16,  nvfp4_awq_c,    false, true,  "NVFP4 W4A4 with AWQ pre_quant_scale on the input channels"},
};
enum { N_SCHEMES = sizeof schemes / sizeof schemes[0] };

int moq_scheme_count(void) { return N_SCHEMES; }
const moq_scheme *moq_scheme_at(int i) { return i >= 0 && i < N_SCHEMES ? &schemes[i] : NULL; }

const moq_scheme *moq_scheme_find(const char *algo, bool case_insensitive) {
    if (!algo) return NULL;
    for (int i = 0; i < N_SCHEMES; i++) {
        const moq_scheme *s = &schemes[i];
        if (case_insensitive ? strcasecmp(algo, s->algo) == 0 : strcmp(algo, s->algo) == 0) return s;
        if (s->alias && (case_insensitive ? strcasecmp(algo, s->alias) == 0 : strcmp(algo, s->alias) == 0)) return s;
    }
    return NULL;
}

const moq_scheme *moq_scheme_for_method(moq_method m) {
    for (int i = 0; i < N_SCHEMES; i++)
        if (schemes[i].linear == m || schemes[i].moe == m) return &schemes[i];
    return NULL;
}

const moq_tensor_rule *moq_scheme_unquantized_contract(void) { return unquantized_c; }

const moq_tensor_rule *moq_contract_rule(const moq_tensor_rule *contract, const char *suffix) {
    for (const moq_tensor_rule *r = contract; r && r->suffix; r++)
        if (strcmp(r->suffix, suffix) == 0) return r;
    return NULL;
}

static const char *scheme_list(char *buf, size_t n, bool engines_only) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < N_SCHEMES && o < n; i++) {
        if (engines_only && schemes[i].moq_only) continue;
        int w = snprintf(buf + o, n - o, "%s%s", o ? ", " : "", schemes[i].algo);
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}
const char *moq_scheme_list(char *buf, size_t n) { return scheme_list(buf, n, false); }
const char *moq_scheme_list_engines(char *buf, size_t n) { return scheme_list(buf, n, true); }

int64_t moq_dim_eval(moq_dim d, int64_t N, int64_t K, int64_t G) {
    switch (d) {
    case MOQ_DIM_N: return N;
    case MOQ_DIM_K: return K;
    case MOQ_DIM_K_HALF: return K % 2 ? -1 : K / 2;
    case MOQ_DIM_K_DIV_G: return (G <= 0 || K % G) ? -1 : K / G;
    case MOQ_DIM_N_BLK128: return (N + 127) / 128;
    case MOQ_DIM_K_BLK128: return K % 128 ? -1 : K / 128;
    case MOQ_DIM_ONE: return 1;
    case MOQ_DIM_N_ROWBLK: /* any divisor of N: the validator checks it (config/modules.c) */
    case MOQ_DIM_END: break;
    }
    return -1;
}

const char *moq_dim_str(const moq_dim *shape, char *buf, size_t n) {
    static const char *const sym[] = {"", "N", "K", "K/2", "K/G", "ceil(N/128)", "K/128", "1", "N/r"};
    size_t o = 0;
    o += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < MOQ_RULE_MAX_DIMS && shape[i] != MOQ_DIM_END && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", sym[shape[i]]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}
