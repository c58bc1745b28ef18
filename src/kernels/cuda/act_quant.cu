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

template <int KIND>
__global__ void __launch_bounds__(256) act_quant_kernel(const void *x, int xb, int64_t M, int64_t K, int64_t Kp, float a_scale, int approx,
                                                         aq_out o) {
    const int64_t m = blockIdx.x;
    const void *xr = x;
    const int64_t base = m * K;
    __nv_bfloat16 *A = o.A + m * Kp;
    const bool live = m < M;
    if (KIND == MOQ_CK_BF16 || KIND == MOQ_CK_NVFP4_W4A16) {
        for (int64_t k = threadIdx.x; k < Kp; k += blockDim.x)
            A[k] = __float2bfloat16_rn(live && k < K ? ldx(xr, xb, base + k) : 0.0f);
        if (threadIdx.x == 0) o.tok[m] = 1.0f;
    } else if (KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW) {
        float s = 1.0f, inv = 0.0f;
        if (KIND == MOQ_CK_FP8_ROW) {
            float a = 0.0f;
            for (int64_t k = threadIdx.x; live && k < K; k += blockDim.x) a = fmaxf(a, fabsf(ldx(xr, xb, base + k)));
            a = block_amax(a);
            s = __fdiv_rn(a, 448.0f);
            if (!(s >= MOQ_FP8_TOKEN_MIN_SCALE)) s = fmaxf(s, MOQ_FP8_TOKEN_MIN_SCALE);
        } else {
            inv = __fdiv_rn(1.0f, a_scale);
        }
        uint8_t *q = o.q + m * Kp;
        for (int64_t k = threadIdx.x; k < Kp; k += blockDim.x) {
            uint8_t c = 0;
            if (live && k < K) {
                const float v = ldx(xr, xb, base + k);
                c = d_e4m3_rne_sat(clamp448(KIND == MOQ_CK_FP8_ROW ? __fdiv_rn(v, s) : __fmul_rn(v, inv)));
            }
            q[k] = c;
            A[k] = __float2bfloat16_rn(d_e4m3_dec(c));
        }
        if (threadIdx.x == 0) o.tok[m] = live ? s : 0.0f;
    } else if (KIND == MOQ_CK_FP8_BLK128) {
        uint8_t *q = o.q + m * Kp;
        for (int64_t g = threadIdx.x; g < Kp / 128; g += blockDim.x) {
            const int64_t k0 = 128 * g;
            const bool in = live && k0 < K;
            float a = 0.0f;
            for (int i = 0; in && i < 128; i++) a = fmaxf(a, fabsf(ldx(xr, xb, base + k0 + i)));
            const float s = __fdiv_rn(fmaxf(1e-10f, a), 448.0f);
            for (int i = 0; i < 128; i++) {
                const uint8_t c = in ? d_e4m3_rne_sat(clamp448(__fdiv_rn(ldx(xr, xb, base + k0 + i), s))) : 0;
                q[k0 + i] = c;
                A[k0 + i] = __float2bfloat16_rn(d_e4m3_dec(c));
            }
            o.gs[m * (Kp / 128) + g] = in ? s : 0.0f;
        }
        if (threadIdx.x == 0) o.tok[m] = 1.0f;
    } else if (KIND == MOQ_CK_NVFP4) {
        const float S = __fdiv_rn(1.0f, a_scale);
        const float r6 = d_rcpa(6.0f, approx), rS = d_rcpa(S, approx);
        uint8_t *q = o.q + m * (Kp / 2), *sf = o.sf + m * (Kp / 16);
        for (int64_t b = threadIdx.x; b < Kp / 16; b += blockDim.x) {
            const int64_t k0 = 16 * b;
            const bool in = live && k0 < K;
            float xv[16];
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) { xv[i] = in ? ldx(xr, xb, base + k0 + i) : 0.0f; a = fmaxf(a, fabsf(xv[i])); }
            const float sfv = __fmul_rn(S, __fmul_rn(a, r6));
            const uint8_t code = in ? d_e4m3_rne_sat(sfv) : 0;
            const float sfd = d_e4m3_dec(code);
            const float outs = sfd != 0.0f ? d_rcpa(__fmul_rn(sfd, rS), approx) : 0.0f;
            sf[b] = code;
#pragma unroll
            for (int i = 0; i < 16; i += 2) {
                const uint8_t lo = d_e2m1_rne_sat(__fmul_rn(xv[i], outs)), hi = d_e2m1_rne_sat(__fmul_rn(xv[i + 1], outs));
                q[8 * b + i / 2] = (uint8_t)(lo | hi << 4);
                A[k0 + i] = __float2bfloat16_rn(__fmul_rn(d_e2m1_dec(lo), sfd));
                A[k0 + i + 1] = __float2bfloat16_rn(__fmul_rn(d_e2m1_dec(hi), sfd));
            }
        }
        if (threadIdx.x == 0) o.tok[m] = 1.0f;
    } else if (KIND == MOQ_CK_MXFP8) {
        const float r448 = u2f(0x3B124925u); /* f32(1/448) == rcpa(448) on the H200 (golden/rcp) */
        uint8_t *q = o.q + m * Kp, *sf = o.sf + m * (Kp / 32);
        for (int64_t b = threadIdx.x; b < Kp / 32; b += blockDim.x) {
            const int64_t k0 = 32 * b;
            const bool in = live && k0 < K;
            float a = 0.0f;
            for (int i = 0; in && i < 32; i++) a = fmaxf(a, fabsf(ldx(xr, xb, base + k0 + i)));
            const uint8_t c = in ? d_e8m0_up_sat(__fmul_rn(a, r448)) : 0;
            const float mult = c == 0 ? 0.0f : ldexpf(1.0f, 127 - (int)c);
            const float sc = d_e8m0_dec(c);
            sf[b] = c;
            for (int i = 0; i < 32; i++) {
                const uint8_t e = in ? d_e4m3_rne_sat(clamp448(__fmul_rn(ldx(xr, xb, base + k0 + i), mult))) : 0;
                q[k0 + i] = e;
                A[k0 + i] = __float2bfloat16_rn(__fmul_rn(d_e4m3_dec(e), sc));
            }
        }
        if (threadIdx.x == 0) o.tok[m] = 1.0f;
    }
}

extern "C" const char *moq_cuda_act_quant(const moq_cuda_args *a) {
    char *ws = (char *)a->ws_d;
    aq_out o = {(__nv_bfloat16 *)(ws + a->ws.a), (uint8_t *)(ws + a->ws.q), (uint8_t *)(ws + a->ws.sf), (float *)(ws + a->ws.tok),
                (float *)(ws + a->ws.gs)};
    const dim3 grid((unsigned)moq_cuda_mpad(a->M)), block(256);
#define AQ(k) act_quant_kernel<k><<<grid, block>>>(a->x_d, a->x_bf16, a->M, a->K, a->Kp, a->a_scale, a->rcp_approx, o); break
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
