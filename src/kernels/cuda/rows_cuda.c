/* rows_cuda.c — the CUDA rows of the kernel registry: host-side packing into the padded layout
 * of cuda_api.h, workspace sizes, and run(): activation quantizer (unless the decode kernel
 * quantizes x itself or the dequant GEMM reads a bf16 x as it is), then the decode kernel (M <= 16, or up to 64 with
 * MOQ_CUDA_GEMV_MMAX), the mma.sync GEMM, cuBLASLt fp8 (variant 1, FP8 per-tensor / per-token) or the weight
 * dequantized to bf16 + cuBLASLt bf16 (variant 2, NVFP4 / MXFP8 / BF16). Run only
 * enqueues work; kernel faults surface at moq_device_sync. */
#include "kernels/cuda/rows_cuda.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cuda/cuda_api.h"

#define PAD 128

static const moq_cuda_kind kind_of_pair[MOQ_PAIR_COUNT] = {
    [MOQ_PAIR_F32] = MOQ_CK_COUNT, [MOQ_PAIR_BF16] = MOQ_CK_BF16, [MOQ_PAIR_F16] = MOQ_CK_COUNT,
    [MOQ_PAIR_FP8_TENSOR] = MOQ_CK_FP8_TENSOR, [MOQ_PAIR_FP8_ROW] = MOQ_CK_FP8_ROW, [MOQ_PAIR_FP8_BLK128] = MOQ_CK_FP8_BLK128,
    [MOQ_PAIR_NVFP4] = MOQ_CK_NVFP4, [MOQ_PAIR_NVFP4_W4A16] = MOQ_CK_NVFP4_W4A16, [MOQ_PAIR_MXFP8] = MOQ_CK_MXFP8,
};

static int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static size_t al(size_t a) { return (a + 255) & ~(size_t)255; }

int64_t moq_cuda_mpad(int64_t M) { return M <= 16 ? 16 : rup(M, PAD); }

moq_cuda_ws moq_cuda_ws_layout(int64_t M, int64_t N, int64_t Kp, int with_lt) {
    N = rup(N, PAD); /* cuBLASLt writes D [M, Np] */
    const size_t Mp = (size_t)moq_cuda_mpad(M), kp = (size_t)Kp;
    moq_cuda_ws w = {0};
    size_t o = 0;
    w.a = o, o += al(Mp * kp * 2);
    w.q = o, o += al(Mp * kp);
    w.sf = o, o += al(Mp * kp / 16);
    w.tok = o, o += al(Mp * 4);
    w.gs = o, o += al(Mp * kp / 128 * 4);
    w.d = o, o += with_lt ? al(Mp * (size_t)N * 4) : 0; /* D [M, Np] or [Np, Mp] */
    w.lt = o, o += with_lt ? ((size_t)32 << 20) : 0;
    w.wb = o, o += with_lt == 2 && M > 16 ? al((size_t)moq_cuda_wb_rows(N, Kp) * kp * 2) : 0;
    w.total = o;
    return w;
}

/* Offsets of the packed blob: codes, scales, row_scale [Np], bias [Np]. */
typedef struct blob { size_t codes, scales, rs, bias, total; int64_t Np, Kp; } blob;

static blob blob_of(const moq_weight *w) {
    blob b = {0};
    b.Np = rup(w->N, PAD), b.Kp = rup(w->K, PAD);
    const size_t nk = (size_t)b.Np * (size_t)b.Kp;
    size_t o = 0, cb = 0, sb = 0;
    switch (moq_pair_of(w)) {
    case MOQ_PAIR_BF16: cb = nk * 2; break;
    case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW: cb = nk; break;
    case MOQ_PAIR_FP8_BLK128: cb = nk, sb = nk / (128 * 128) * 4; break;
    case MOQ_PAIR_NVFP4: case MOQ_PAIR_NVFP4_W4A16: cb = nk / 2, sb = nk / 16; break;
    case MOQ_PAIR_MXFP8: cb = nk, sb = nk / 32; break;
    default: break;
    }
    b.codes = o, o += al(cb);
    b.scales = o, o += al(sb);
    b.rs = o, o += al((size_t)b.Np * 4);
    b.bias = o, o += al((size_t)b.Np * 4);
    b.total = o;
    return b;
}

size_t moq_cuda_row_packed_size(const moq_weight *w) { return blob_of(w).total; }

moq_cuda_blob moq_cuda_row_blob(const moq_weight *w) {
    const blob b = blob_of(w);
    const moq_pair_id p = moq_pair_of(w);
    return (moq_cuda_blob){b.codes, b.scales, b.rs, b.bias, b.total, b.Np, b.Kp, p < MOQ_PAIR_COUNT ? (int)kind_of_pair[p] : (int)MOQ_CK_COUNT};
}

void moq_cuda_row_pack(const moq_weight *w, void *dst) {
    const blob b = blob_of(w);
    uint8_t *d = dst;
    memset(d, 0, b.total);
    const moq_pair_id p = moq_pair_of(w);
    const int64_t N = w->N, K = w->K, Kp = b.Kp;
    const uint8_t *q = w->q, *s8 = w->scale;
    switch (p) {
    case MOQ_PAIR_BF16:
        for (int64_t n = 0; n < N; n++) memcpy(d + b.codes + (size_t)(n * Kp) * 2, q + (size_t)(n * K) * 2, (size_t)K * 2);
        break;
    case MOQ_PAIR_FP8_TENSOR: case MOQ_PAIR_FP8_ROW: case MOQ_PAIR_FP8_BLK128: case MOQ_PAIR_MXFP8:
        for (int64_t n = 0; n < N; n++) memcpy(d + b.codes + (size_t)(n * Kp), q + (size_t)(n * K), (size_t)K);
        break;
    case MOQ_PAIR_NVFP4: case MOQ_PAIR_NVFP4_W4A16:
        for (int64_t n = 0; n < N; n++) memcpy(d + b.codes + (size_t)(n * Kp / 2), q + (size_t)(n * K / 2), (size_t)K / 2);
        for (int64_t n = 0; n < N; n++) memcpy(d + b.scales + (size_t)(n * Kp / 16), s8 + (size_t)(n * K / 16), (size_t)K / 16);
        break;
    default: break;
    }
    if (p == MOQ_PAIR_MXFP8)
        for (int64_t n = 0; n < N; n++) memcpy(d + b.scales + (size_t)(n * Kp / 32), s8 + (size_t)(n * K / 32), (size_t)K / 32);
    if (p == MOQ_PAIR_FP8_BLK128) {
        const float *s = w->scale;
        float *o = (float *)(d + b.scales);
        for (int64_t r = 0; r < (N + 127) / 128; r++) memcpy(o + r * (Kp / 128), s + r * (K / 128), (size_t)(K / 128) * 4);
    }
    float *rs = (float *)(d + b.rs), *bias = (float *)(d + b.bias);
    for (int64_t n = 0; n < N; n++) {
        rs[n] = moq_linear_row_scale(w, n);
        bias[n] = w->bias ? w->bias[n] : 0.0f;
    }
}

size_t moq_cuda_row_workspace(const moq_weight *w, int64_t M, int n_threads) {
    (void)n_threads;
    return moq_cuda_ws_layout(M, w->N, rup(w->K, PAD), 0).total;
}

size_t moq_cuda_row_workspace_lt(const moq_weight *w, int64_t M, int n_threads) {
    (void)n_threads;
    return moq_cuda_ws_layout(M, w->N, rup(w->K, PAD), 1).total;
}

size_t moq_cuda_row_workspace_dq(const moq_weight *w, int64_t M, int n_threads) {
    (void)n_threads;
    return moq_cuda_ws_layout(M, w->N, rup(w->K, PAD), 2).total;
}

bool moq_cuda_row_lt_supports(const moq_weight *w, char *why, size_t why_len) {
    (void)w;
    const char *e = moq_cuda_lt_init();
    if (e) snprintf(why, why_len, "%s", e);
    return e == NULL;
}

/* Whether every row_scale the pack wrote (moq_linear_row_scale, n < N) is one value, and which: the
 * cuBLASLt rows then scale by a host scalar (cublaslt.cu). The pair's scale is 1, a shard's or the
 * static activation scale times a shard's, so equal shard scales decide it in O(shards) per call;
 * the packed copy lives on the device, out of the host's reach. Per-channel: not checked (false). */
static bool rs_uniform(const moq_weight *w, float *v) {
    *v = 1.0f;
    switch (moq_pairs[moq_pair_of(w)].row_scale) {
    case MOQ_ROWSCALE_NONE: return true;
    case MOQ_ROWSCALE_SHARD_W: case MOQ_ROWSCALE_SHARD_W_IN:
        for (int s = 1; s < w->n_shards; s++)
            if (w->shard_scale[s] != w->shard_scale[0]) return false;
        *v = moq_linear_row_scale(w, 0);
        return true;
    default: return false;
    }
}

/* the GEMM for M > 16 of each row variant (kernels.c: CUDA_MMA 0, CUDA_LT 1, CUDA_DQ 2) */
static const char *(*const gemm_of_variant[3])(const moq_cuda_args *) = {moq_cuda_gemm_mma, moq_cuda_gemm_cublaslt, moq_cuda_gemm_dequant_lt};

moq_status moq_cuda_row_run(const moq_linear_launch *l, moq_error *err) {
    const moq_weight *w = l->w;
    const blob b = blob_of(w);
    const bool gemv = l->M <= moq_cuda_gemv_mmax((int)kind_of_pair[l->pair]); /* the decode kernel, else the variant's GEMM */
    const uint8_t *pk = l->packed;
    moq_cuda_args a = {
        .kind = kind_of_pair[l->pair], .M = l->M, .N = w->N, .K = w->K, .Np = b.Np, .Kp = b.Kp,
        .x_d = l->x, .x_bf16 = l->x_elem == MOQ_ELEM_BF16, .y_d = l->y, .y_bf16 = l->y_elem == MOQ_ELEM_BF16,
        .codes_d = pk + b.codes, .scales_d = pk + b.scales, .row_scale_d = (const float *)(pk + b.rs),
        .bias_d = (const float *)(pk + b.bias), .has_bias = w->bias != NULL, .a_scale = l->a_scale, .rcp_approx = l->rcpa_corr != NULL, .ws_d = l->ws,
        .ws = moq_cuda_ws_layout(l->M, w->N, b.Kp, l->k->variant), .skip_a = !gemv ? l->k->variant == 1 : moq_cuda_gemv_reads_q((int)kind_of_pair[l->pair], l->M),
        .a_f16 = gemv && moq_cuda_gemv_a_f16((int)kind_of_pair[l->pair], l->M), .stream = l->stream,
    };
    a.rs_uniform = rs_uniform(w, &a.rs_value);
    if (a.ws.total > l->ws_size)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, l->k->name, "workspace %zu bytes, expected >= %zu", l->ws_size, a.ws.total);
    /* the decode kernel quantizes x itself at small M (gemv.cu, FUSED), and the dequant rows' GEMM
     * reads a bf16 x itself for BF16 / W4A16 (cublaslt.cu): no quantizer kernel then */
    const bool own_x = gemv ? moq_cuda_gemv_fuses(&a) : l->k->variant == 2 && moq_cuda_dq_reads_x(&a);
    const char *e = own_x ? NULL : moq_cuda_act_quant(&a);
    if (!e) e = gemv ? moq_cuda_gemv(&a) : gemm_of_variant[l->k->variant](&a);
    if (e) return MOQ_FAIL(err, MOQ_ERR_DEVICE, l->k->name, "%s", e);
    return MOQ_OK;
}
