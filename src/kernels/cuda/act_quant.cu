/* act_quant.cu — run-time activation quantizers on the GPU, one block per activation row, each
 * the arithmetic of src/kernels/cpu/act_quant_ref.c step for step in correctly rounded f32
 * (__fmul_rn / __fdiv_rn: no contraction into FMA), so codes and scales equal the CPU's bit for
 * bit (tests/kernels/test_linear_cuda.c). NVFP4 uses rcp.approx.ftz like the peers' kernels when
 * the layer has the measured reciprocal table (rcp_approx), else IEEE reciprocals like the CPU. */
#include "kernels/cuda/common.cuh"

#define MOQ_FP8_TOKEN_MIN_SCALE (1.0f / (448.0f * 512.0f))

struct aq_out {
    __nv_bfloat16 *A;
    uint8_t *q, *sf;
    float *tok, *gs;
    int skip_a;
};

__device__ __forceinline__ float ldx(const void *x, int bf16, int64_t i) {
    if (bf16) return u2f((uint32_t)((const uint16_t *)x)[i] << 16);
    return ((const float *)x)[i];
}

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

/* Max over the G/8 consecutive lanes that hold one group of G values (8 values per lane). */
template <int LANES> __device__ __forceinline__ float group_amax(float v) {
#pragma unroll
    for (int o = 1; o < LANES; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

#define AQ_THREADS 512

/* One block per activation row (rows M..Mp-1 get zeros); each thread quantizes 8 consecutive
 * values per step, so every load of a step is in flight at once and groups of 16/32/128 values
 * reduce across 2/4/16 lanes. The arithmetic per value is the CPU reference's, in its order. */
template <int KIND>
__global__ void __launch_bounds__(AQ_THREADS) act_quant_kernel(const void *x, int xb, int64_t M, int64_t K, int64_t Kp, float a_scale, int approx,
                                                                aq_out o) {
    /* the decode kernel after this one (gemv.cu, programmatic dependent launch) may start now: it
     * streams its first weights and waits (griddepcontrol.wait) for this grid's results */
    asm volatile("griddepcontrol.launch_dependents;");
    const int64_t m = blockIdx.x, nch = Kp / 8;
    const bool live = m < M, vec = (K % 8) == 0;
    const int64_t base = m * K;
    __nv_bfloat16 *A = o.A + m * Kp;
    const int lane = threadIdx.x & 31;
    auto load8 = [&](int64_t k0, float *v) {
        if (live && vec && k0 < K) {
            if (xb) {
                const uint4 u = __ldg((const uint4 *)((const uint16_t *)x + base + k0));
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; i++) v[2 * i] = u2f(w[i] << 16), v[2 * i + 1] = u2f(w[i] & 0xFFFF0000u);
            } else {
                const float4 a = __ldg((const float4 *)((const float *)x + base + k0)), b = __ldg((const float4 *)((const float *)x + base + k0) + 1);
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = live && k0 + i < K ? ldx(x, xb, base + k0 + i) : 0.0f;
        }
    };
    auto storeA = [&](int64_t k0, const float *d) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(d[2 * i], d[2 * i + 1]);
            w[i] = *(const uint32_t *)&h;
        }
        *(uint4 *)(A + k0) = make_uint4(w[0], w[1], w[2], w[3]);
    };
    auto storeQ8 = [&](int64_t k0, const uint8_t *c) {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) lo |= (uint32_t)c[i] << (8 * i), hi |= (uint32_t)c[4 + i] << (8 * i);
        *(uint2 *)(o.q + m * Kp + k0) = make_uint2(lo, hi);
    };
    float tok = 1.0f, inv = 0.0f;
    if (KIND == MOQ_CK_FP8_ROW) {
        float a = 0.0f;
        for (int64_t c0 = 0; c0 < nch; c0 += AQ_THREADS) {
            const int64_t c = c0 + threadIdx.x;
            float v[8];
            load8(8 * c, v);
#pragma unroll
            for (int i = 0; i < 8; i++) a = fmaxf(a, fabsf(v[i]));
        }
        a = block_amax(a);
        tok = __fdiv_rn(a, 448.0f);
        if (!(tok >= MOQ_FP8_TOKEN_MIN_SCALE)) tok = fmaxf(tok, MOQ_FP8_TOKEN_MIN_SCALE);
    }
    if (KIND == MOQ_CK_FP8_TENSOR) inv = __fdiv_rn(1.0f, a_scale);
    const float S = KIND == MOQ_CK_NVFP4 ? __fdiv_rn(1.0f, a_scale) : 0.0f;
    const float r6 = KIND == MOQ_CK_NVFP4 ? d_rcpa(6.0f, approx) : 0.0f, rS = KIND == MOQ_CK_NVFP4 ? d_rcpa(S, approx) : 0.0f;
    for (int64_t c0 = 0; c0 < nch; c0 += AQ_THREADS) { /* uniform trip count: shuffles see every lane */
        const int64_t c = c0 + threadIdx.x, k0 = 8 * c;
        const bool act = c < nch;
        float v[8], d[8];
        uint8_t q[8];
        load8(act ? k0 : 0, v);
        if (!act)
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
        float am = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
        if (KIND == MOQ_CK_BF16 || KIND == MOQ_CK_NVFP4_W4A16) {
#pragma unroll
            for (int i = 0; i < 8; i++) d[i] = v[i];
        } else if (KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                q[i] = d_e4m3_rne_sat(clamp448(KIND == MOQ_CK_FP8_ROW ? __fdiv_rn(v[i], tok) : __fmul_rn(v[i], inv)));
                d[i] = d_e4m3_dec(q[i]);
            }
        } else if (KIND == MOQ_CK_FP8_BLK128) {
            const float a = group_amax<16>(am);
            const float s = __fdiv_rn(fmaxf(1e-10f, a), 448.0f);
#pragma unroll
            for (int i = 0; i < 8; i++) q[i] = d_e4m3_rne_sat(clamp448(__fdiv_rn(v[i], s))), d[i] = d_e4m3_dec(q[i]);
            if (act && (c & 15) == 0) o.gs[m * (Kp / 128) + k0 / 128] = live && k0 < K ? s : 0.0f;
        } else if (KIND == MOQ_CK_NVFP4) {
            const float a = group_amax<2>(am);
            const float sfv = __fmul_rn(S, __fmul_rn(a, r6));
            const uint8_t code = d_e4m3_rne_sat(sfv);
            const float sfd = d_e4m3_dec(code);
            const float outs = sfd != 0.0f ? d_rcpa(__fmul_rn(sfd, rS), approx) : 0.0f;
            if (act && (c & 1) == 0) o.sf[m * (Kp / 16) + k0 / 16] = code;
            uint32_t packed = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint8_t e = d_e2m1_rne_sat(__fmul_rn(v[i], outs));
                packed |= (uint32_t)e << (4 * i);
                d[i] = __fmul_rn(d_e2m1_dec(e), sfd);
            }
            if (act) *(uint32_t *)(o.q + m * (Kp / 2) + k0 / 2) = packed;
        } else if (KIND == MOQ_CK_MXFP8) {
            const float a = group_amax<4>(am);
            const uint8_t ce = d_e8m0_up_sat(__fmul_rn(a, u2f(0x3B124925u))); /* f32(1/448) == rcpa(448) on the H200 */
            const float mult = ce == 0 ? 0.0f : ldexpf(1.0f, 127 - (int)ce), sc = d_e8m0_dec(ce);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                q[i] = d_e4m3_rne_sat(clamp448(__fmul_rn(v[i], mult)));
                d[i] = __fmul_rn(d_e4m3_dec(q[i]), sc);
            }
            if (act && (c & 3) == 0) o.sf[m * (Kp / 32) + k0 / 32] = ce;
        }
        if (act) {
            if (!o.skip_a) storeA(k0, d);
            if (KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW || KIND == MOQ_CK_FP8_BLK128 || KIND == MOQ_CK_MXFP8) storeQ8(k0, q);
        }
    }
    (void)lane;
    if (threadIdx.x == 0) o.tok[m] = live ? tok : 0.0f;
}

extern "C" const char *moq_cuda_act_quant(const moq_cuda_args *a) {
    char *ws = (char *)a->ws_d;
    aq_out o = {(__nv_bfloat16 *)(ws + a->ws.a), (uint8_t *)(ws + a->ws.q), (uint8_t *)(ws + a->ws.sf), (float *)(ws + a->ws.tok),
                (float *)(ws + a->ws.gs), a->skip_a};
    const dim3 grid((unsigned)moq_cuda_mpad(a->M)), block(AQ_THREADS);
#define AQ(k) act_quant_kernel<k><<<grid, block, 0, (cudaStream_t)a->stream>>>(a->x_d, a->x_bf16, a->M, a->K, a->Kp, a->a_scale, a->rcp_approx, o); break
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
