/* export_linear.c — see export_linear.h: one row per quant_algo, each naming the exporter of
 * quant/export_ref.c that produces its tensors and the names, dtypes and shapes ModelOpt gives them
 * (NUMERICS.md §2.3 NVFP4, §5.1 FP8, §5.2 per-channel, §5.3 128x128 block, §4.2 MXFP8).
 * Input scales are f32(act_amax ⊗ f32(1/448)) (FP8) and f32(act_amax ⊗ f32(1/2688)) (NVFP4, 6 · 448),
 * reciprocal products as PyTorch computes ModelOpt's amax / maxbound (export_ref.h); weight-only and
 * dynamic-activation algos write none. Tested by tests/quant/test_export_linear.c. */
#include "quant/export_linear.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "format/format.h"
#include "quant/export_ref.h"

static void put(moq_export_tensor *t, int *count, const char *suffix, moq_dtype dt, int ndim,
                const int64_t *shape, uint64_t nbytes) {
    moq_export_tensor *x = &t[(*count)++];
    x->suffix = suffix;
    x->dtype = dt;
    x->ndim = ndim;
    for (int d = 0; d < 4; d++) x->shape[d] = d < ndim ? shape[d] : 0;
    x->nbytes = nbytes;
}

static void put_scalar(moq_export_tensor *t, int *count, const char *suffix, const float *v) {
    put(t, count, suffix, MOQ_DT_F32, 0, NULL, 4);
    if (v) memcpy(t[*count - 1].data, v, 4);
}

/* NVFP4 (W4A4) and W4A16_NVFP4 differ only in the input scale. */
static void nvfp4_common(const float *W, size_t N, size_t K, float amax, moq_export_tensor *t, int *count) {
    const int64_t sq[2] = {(int64_t)N, (int64_t)(K / 2)}, ss[2] = {(int64_t)N, (int64_t)(K / 16)};
    put(t, count, "weight", MOQ_DT_U8, 2, sq, (uint64_t)(N * K / 2));
    put(t, count, "weight_scale", MOQ_DT_F8_E4M3, 2, ss, (uint64_t)(N * K / 16));
    float ws2 = 0;
    if (W) moq_export_nvfp4_weight(W, N, K, amax, t[0].data, t[1].data, &ws2);
    put_scalar(t, count, "weight_scale_2", W ? &ws2 : NULL);
}

static void export_nvfp4(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t,
                         int *count) {
    nvfp4_common(W, N, K, a->amax, t, count);
    const float is = a->act_amax * MOQ_RCP2688;
    put_scalar(t, count, "input_scale", W ? &is : NULL);
}

/* NVFP4_AWQ, synthetic: no calibration here, so the AWQ scale is a fixed pattern s[k] in [0.5, 2)
 * (bf16 values, the same for every linear of a K, so fused shards agree). The weight is W ⊘ s
 * quantized as NVFP4 (the runtime multiplies x by s, so W' (x s) = W x); its global amax bound is
 * 2 · amax, the input scale 2 · act_amax / 2688 (|x s| <= 2 |x|). Block by block through the
 * NVFP4 exporter, so no buffer is needed. amax < 0 means this weight's own amax of W ⊘ s. */
static float awq_scale(size_t k) { return moq_bf16_decode(moq_bf16_encode_rne(0.5f + 1.5f * (float)((k * 37) % 64) / 64.0f)); }

static void export_nvfp4_awq(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t,
                             int *count) {
    const float amax = a->amax, act_amax = a->act_amax;
    const int64_t sq[2] = {(int64_t)N, (int64_t)(K / 2)}, ss[2] = {(int64_t)N, (int64_t)(K / 16)}, sk[1] = {(int64_t)K};
    put(t, count, "weight", MOQ_DT_U8, 2, sq, (uint64_t)(N * K / 2));
    put(t, count, "weight_scale", MOQ_DT_F8_E4M3, 2, ss, (uint64_t)(N * K / 16));
    float ws2 = 0;
    if (W) {
        float a2 = 2.0f * amax; /* amax < 0: this weight's own, i.e. the amax of W ⊘ s */
        for (size_t i = 0; amax < 0 && i < N * K; i++) a2 = fmaxf(a2, fabsf(W[i] / awq_scale(i % K)));
        uint8_t *q = t[0].data, *sf = t[1].data;
        float blk[16];
        for (size_t n = 0; n < N; n++)
            for (size_t b = 0; b < K / 16; b++) {
                for (size_t j = 0; j < 16; j++) blk[j] = W[n * K + b * 16 + j] / awq_scale(b * 16 + j);
                moq_export_nvfp4_weight(blk, 1, 16, a2, q + n * (K / 2) + b * 8, sf + n * (K / 16) + b, &ws2);
            }
    }
    put_scalar(t, count, "weight_scale_2", W ? &ws2 : NULL);
    const float is = 2.0f * act_amax / 2688.0f;
    put_scalar(t, count, "input_scale", W ? &is : NULL);
    put(t, count, "pre_quant_scale", MOQ_DT_BF16, 1, sk, (uint64_t)K * 2);
    if (W)
        for (size_t k = 0; k < K; k++) ((uint16_t *)t[4].data)[k] = moq_bf16_encode_rne(awq_scale(k));
}

static void export_w4a16_nvfp4(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t, int *count) {
    nvfp4_common(W, N, K, a->amax, t, count);
}

/* FP8 per-tensor: each shard its own weight amax. ModelOpt's fusion step skips FP8
 * (_fuse_shared_input_modules leaves QUANTIZATION_FP8 groups alone), so q/k/v keep their own
 * weight_scale; their input_scale agrees because they read the same input. The loaders take the
 * max over a fused group (NUMERICS.md §5.1). */
static void export_fp8(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t, int *count) {
    const int64_t sq[2] = {(int64_t)N, (int64_t)K};
    put(t, count, "weight", MOQ_DT_F8_E4M3, 2, sq, (uint64_t)(N * K));
    float sc = 0;
    if (W) moq_export_fp8_tensor_weight(W, N, K, -1.0f, a->model_dtype, t[0].data, &sc);
    put_scalar(t, count, "weight_scale", W ? &sc : NULL);
    const float is = (a->act_amax == 0.0f ? 448.0f : a->act_amax) * MOQ_RCP448; /* export_amax: 0 -> 448 */
    put_scalar(t, count, "input_scale", W ? &is : NULL);
}

static void export_fp8_row(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t, int *count) {
    (void)a;
    const int64_t sq[2] = {(int64_t)N, (int64_t)K}, ss[1] = {(int64_t)N};
    put(t, count, "weight", MOQ_DT_F8_E4M3, 2, sq, (uint64_t)(N * K));
    put(t, count, "weight_scale", MOQ_DT_F32, 1, ss, (uint64_t)N * 4);
    if (W) moq_export_fp8_row_weight(W, N, K, t[0].data, t[1].data);
}

/* The block scale is written 4-D, [ceil(N/128), 1, K/128, 1], as ModelOpt does, except that a
 * weight of a single block gets a 0-d scale (not a routed expert's gate/up: [1, 1, 1, 1]), and that
 * single block's amax is the group amax (§12). */
static void export_fp8_block(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t, int *count) {
    const int64_t nb = (int64_t)((N + 127) / 128), kb = (int64_t)(K / 128);
    const int64_t sq[2] = {(int64_t)N, (int64_t)K}, ss[4] = {nb, 1, kb, 1};
    const bool one = nb * kb == 1;
    put(t, count, "weight", MOQ_DT_F8_E4M3, 2, sq, (uint64_t)(N * K));
    put(t, count, "weight_scale", MOQ_DT_F32, one && !a->moe_gate_up ? 0 : 4, ss, (uint64_t)(nb * kb) * 4);
    if (!W) return;
    if (one && a->amax >= 0) moq_export_fp8_block_weight_amax(W, N, K, a->amax, t[0].data, t[1].data);
    else moq_export_fp8_block_weight(W, N, K, t[0].data, t[1].data);
}

static void export_mxfp8(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t,
                         int *count) {
    (void)a;
    const int64_t sq[2] = {(int64_t)N, (int64_t)K}, ss[2] = {(int64_t)N, (int64_t)(K / 32)};
    put(t, count, "weight", MOQ_DT_F8_E4M3, 2, sq, (uint64_t)(N * K));
    put(t, count, "weight_scale", MOQ_DT_U8, 2, ss, (uint64_t)(N * K / 32));
    if (W) moq_export_mxfp8_weight(W, N, K, t[0].data, t[1].data);
}

static void export_bf16(const float *W, size_t N, size_t K, const moq_export_args *a, moq_export_tensor *t, int *count) {
    (void)a;
    const int64_t sq[2] = {(int64_t)N, (int64_t)K};
    put(t, count, "weight", MOQ_DT_BF16, 2, sq, (uint64_t)(N * K) * 2);
    if (!W) return;
    uint16_t *h = t[0].data;
    for (size_t j = 0; j < N * K; j++) h[j] = moq_bf16_encode_rne(W[j]);
}

#define FP8_GROUP "{\"input_activations\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\"}, " \
                  "\"weights\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\"}}"
#define FP4_W     "\"weights\": {\"dynamic\": false, \"num_bits\": 4, \"type\": \"float\", \"group_size\": 16}"
#define NVFP4_GROUP "{\"input_activations\": {\"dynamic\": false, \"num_bits\": 4, \"type\": \"float\", \"group_size\": 16}, " FP4_W "}"
#define W4A16_GROUP "{" FP4_W "}"
#define PCPT_GROUP "{\"input_activations\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\"}, " \
                   "\"weights\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\", \"strategy\": \"channel\"}}"
#define MXFP8_GROUP "{\"input_activations\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\", \"group_size\": 32}, " \
                    "\"weights\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\", \"group_size\": 32}}"
#define PBWO_GROUP "{\"quant_algo\": \"fp8_pb_wo\"}"  /* ModelOpt has no mapping for it: it writes the algo */

/* config groups: what ModelOpt's convert_hf_quant_config_format writes for a single algo (NUMERICS
 * §12: FP8, NVFP4 and W4A16 only), as in the nvidia NVFP4 checkpoints, and per algo of a mix
 * (_quant_algo_to_group_config), as in nvidia/Qwen3.6-27B-NVFP4's config.json. */
static const moq_export_linear_row k_rows[] = {
    /* algo                         written                      quantized  group  k_mult  group_amax  static_input  act_zero_ok  synthetic  exporter            config group  mixed group */
    {"NVFP4",                     "NVFP4",                     true,      16,    16,     true,       true,         false,       false,     export_nvfp4,       NVFP4_GROUP,  NVFP4_GROUP},
    {"FP8",                       "FP8",                       true,      0,     1,      false,      true,         true,        false,     export_fp8,         FP8_GROUP,    FP8_GROUP},
    {"BF16",                      "BF16",                      false,     0,     1,      false,      false,        false,       false,     export_bf16,        NULL,         NULL},
    {"FP8_PER_CHANNEL_PER_TOKEN", "FP8_PER_CHANNEL_PER_TOKEN", true,      0,     1,      false,      false,        false,       false,     export_fp8_row,     NULL,         PCPT_GROUP},
    {"FP8_PB_WO",                 "fp8_pb_wo",                 true,      0,     128,    true,       false,        false,       false,     export_fp8_block,   NULL,         PBWO_GROUP},
    {"W4A16_NVFP4",               "W4A16_NVFP4",               true,      16,    16,     true,       false,        false,       false,     export_w4a16_nvfp4, W4A16_GROUP,  W4A16_GROUP},
    {"MXFP8",                     "MXFP8",                     true,      32,    32,     false,      false,        false,       false,     export_mxfp8,       NULL,         MXFP8_GROUP},
    {"NVFP4_AWQ",                 "NVFP4_AWQ",                 true,      16,    16,     true,       true,         false,       true,      export_nvfp4_awq,   NULL,         NULL},
};

moq_export_args moq_export_args_default(void) {
    return (moq_export_args){.amax = -1.0f, .act_amax = 0.0f, .model_dtype = MOQ_DT_BF16, .moe_gate_up = false};
}

const moq_export_linear_row *moq_export_linear_rows(size_t *count) {
    *count = sizeof k_rows / sizeof k_rows[0];
    return k_rows;
}

const moq_export_linear_row *moq_export_linear_find(const char *algo) {
    for (size_t i = 0; algo && i < sizeof k_rows / sizeof k_rows[0]; i++)
        if (strcmp(k_rows[i].algo, algo) == 0) return &k_rows[i];
    return NULL;
}

moq_status moq_export_linear_plan(const moq_export_linear_row *row, const char *where, int64_t N,
                                  int64_t K, const moq_export_args *a,
                                  moq_export_tensor t[MOQ_EXPORT_LINEAR_MAX_TENSORS], int *count, moq_error *err) {
    *count = 0;
    if (!row) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "no export row given");
    if (N <= 0 || K <= 0 || N > (INT64_C(1) << 31) || K > (INT64_C(1) << 31))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "weight shape [%lld, %lld], expected both in 1..2^31",
                        (long long)N, (long long)K);
    if (K % row->k_multiple)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "K = %lld, expected a multiple of %d for %s",
                        (long long)K, row->k_multiple, row->algo);
    memset(t, 0, MOQ_EXPORT_LINEAR_MAX_TENSORS * sizeof *t);
    const moq_export_args def = moq_export_args_default();
    row->export_fn(NULL, (size_t)N, (size_t)K, a ? a : &def, t, count);
    return MOQ_OK;
}

moq_status moq_export_linear_run(const moq_export_linear_row *row, const char *where, const float *W,
                                 int64_t N, int64_t K, const moq_export_args *a,
                                 moq_export_tensor *t, int count, moq_error *err) {
    moq_export_tensor want[MOQ_EXPORT_LINEAR_MAX_TENSORS];
    int n = 0;
    const moq_export_args def = moq_export_args_default();
    if (!a) a = &def;
    MOQ_TRY(moq_export_linear_plan(row, where, N, K, a, want, &n, err));
    if (!W || !t || count != n)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "%s export of [%lld, %lld] given %d tensors%s, expected %d",
                        row->algo, (long long)N, (long long)K, count, W ? "" : " and no weight", n);
    for (int i = 0; i < n; i++)
        if (!t[i].data || t[i].nbytes != want[i].nbytes || !t[i].suffix || strcmp(t[i].suffix, want[i].suffix) != 0)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, where, "tensor %d: %s of %llu bytes%s, expected %s of %llu bytes as planned",
                            i, t[i].suffix ? t[i].suffix : "(none)", (unsigned long long)t[i].nbytes,
                            t[i].data ? "" : " without data", want[i].suffix, (unsigned long long)want[i].nbytes);
    int m = 0;
    row->export_fn(W, (size_t)N, (size_t)K, a, t, &m);
    return MOQ_OK;
}
