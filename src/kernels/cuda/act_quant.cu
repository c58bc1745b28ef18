/* act_quant.cu — run-time activation quantizers on the GPU, one block per activation row, each
 * the arithmetic of src/kernels/cpu/act_quant_ref.c step for step in correctly rounded f32
 * (__fmul_rn / __fdiv_rn: no contraction into FMA), so codes and scales equal the CPU's bit for
 * bit (tests/kernels/test_linear_cuda.c). NVFP4 uses rcp.approx.ftz like the peers' kernels when
 * the layer has the measured reciprocal table (rcp_approx), else IEEE reciprocals like the CPU. */
#include "kernels/cuda/act_quant.cuh"

struct aq_out {
    __nv_bfloat16 *A;
    uint8_t *q, *sf;
    float *tok, *gs;
    int skip_a, a_f16;
};

__device__ float block_amax(float v) {
    __shared__ float red[32];
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.0f;
        for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    return red[0];
}

#define AQ_THREADS 512

/* Blocks (row m, slice blockIdx.y) (rows M..Mp-1 get zeros); each thread quantizes 8 consecutive
 * values per step (aq8, act_quant.cuh), so every load of a step is in flight at once and groups
 * of 16/32/128 values reduce across 2/4/16 lanes. A slice is AQ_THREADS · 8 values (one step per
 * thread: at decode M the quantizer is latency, not work), except for FP8 per-token, whose row
 * amax needs the whole row in one block (gridDim.y = 1, the slice = the row). */
template <int KIND>
__global__ void __launch_bounds__(AQ_THREADS) act_quant_kernel(const void *x, int xb, int64_t M, int64_t K, int64_t Kp, float a_scale, int approx,
                                                                aq_out o) {
    /* the decode kernel after this one (gemv.cu, programmatic dependent launch) may start now: it
     * streams its first weights and waits (griddepcontrol.wait) for this grid's results */
    pdl_trigger();
    pdl_wait(); /* x is the previous kernel's output (launched by moq_launch_pdl) */
    const int64_t m = blockIdx.x, nch = KIND == MOQ_CK_FP8_ROW ? Kp / 8 : min(Kp / 8, (int64_t)(blockIdx.y + 1) * AQ_THREADS);
    const bool live = m < M;
    const int64_t base = m * K;
    __nv_bfloat16 *A = o.A + m * Kp;
    float tok = 1.0f;
    if (KIND == MOQ_CK_FP8_ROW) {
        float a = 0.0f;
        for (int64_t c0 = 0; c0 < nch; c0 += AQ_THREADS) {
            const int64_t c = c0 + threadIdx.x;
            float v[8];
            aq_load8(x, xb, live, base, K, 8 * c, v);
#pragma unroll
            for (int i = 0; i < 8; i++) a = fmaxf(a, fabsf(v[i]));
        }
        tok = aq_token_scale(block_amax(a));
    }
    const aq_consts cs = aq_consts_of<KIND>(a_scale, approx, tok);
    for (int64_t c0 = KIND == MOQ_CK_FP8_ROW ? 0 : (int64_t)blockIdx.y * AQ_THREADS; c0 < nch; c0 += AQ_THREADS) { /* uniform trip count */
        const int64_t c = c0 + threadIdx.x, k0 = 8 * c;
        const bool act = c < nch;
        float v[8], d[8], gscale;
        uint8_t q[8], scode;
        uint32_t packed;
        aq_load8(x, xb, live && act, base, K, act ? k0 : 0, v);
        aq8<KIND>(v, cs, q, d, packed, gscale, scode);
        if (!act) continue;
        if (KIND == MOQ_CK_FP8_BLK128 && (c & 15) == 0) o.gs[m * (Kp / 128) + k0 / 128] = live && k0 < K ? gscale : 0.0f;
        if (KIND == MOQ_CK_NVFP4) {
            if ((c & 1) == 0) o.sf[m * (Kp / 16) + k0 / 16] = scode;
            *(uint32_t *)(o.q + m * (Kp / 2) + k0 / 2) = packed;
        }
        if (KIND == MOQ_CK_MXFP8 && (c & 3) == 0) o.sf[m * (Kp / 32) + k0 / 32] = scode;
        if (!o.skip_a) *(uint4 *)(A + k0) = o.a_f16 ? aq_f16x8(d) : aq_bf16x8(d);
        if (KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW || KIND == MOQ_CK_FP8_BLK128 || KIND == MOQ_CK_MXFP8)
            *(uint2 *)(o.q + m * Kp + k0) = aq_u8x8(q);
    }
    if (threadIdx.x == 0 && blockIdx.y == 0) o.tok[m] = live ? tok : 0.0f;
}

extern "C" const char *moq_cuda_act_quant(const moq_cuda_args *a) {
    char *ws = (char *)a->ws_d;
    aq_out o = {(__nv_bfloat16 *)(ws + a->ws.a), (uint8_t *)(ws + a->ws.q), (uint8_t *)(ws + a->ws.sf), (float *)(ws + a->ws.tok),
                (float *)(ws + a->ws.gs), a->skip_a, a->a_f16};
    const int64_t slices = a->kind == MOQ_CK_FP8_ROW ? 1 : cdiv(a->Kp / 8, AQ_THREADS);
    const dim3 grid((unsigned)moq_cuda_mpad(a->M), (unsigned)slices), block(AQ_THREADS);
#define AQ(k) (void)moq_launch_pdl(act_quant_kernel<k>, grid, block, 0, (cudaStream_t)a->stream, a->x_d, a->x_bf16, a->M, a->K, a->Kp, a->a_scale, a->rcp_approx, o); break
    switch (a->kind) {
    case MOQ_CK_BF16: AQ(MOQ_CK_BF16);
    case MOQ_CK_FP8_TENSOR: AQ(MOQ_CK_FP8_TENSOR);
    case MOQ_CK_FP8_ROW: AQ(MOQ_CK_FP8_ROW);
    case MOQ_CK_FP8_BLK128: AQ(MOQ_CK_FP8_BLK128);
    case MOQ_CK_NVFP4: AQ(MOQ_CK_NVFP4);
    case MOQ_CK_NVFP4_W4A16: AQ(MOQ_CK_NVFP4_W4A16);
    case MOQ_CK_MXFP8: AQ(MOQ_CK_MXFP8);
    default: return "act_quant: unknown pair kind";
    }
#undef AQ
    return moq_cuda_launch_check("act_quant kernel launch");
}
