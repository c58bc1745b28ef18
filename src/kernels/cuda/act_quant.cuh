/* act_quant.cuh — the per-value arithmetic of the run-time activation quantizers, shared by the
 * quantizer kernel (act_quant.cu) and the decode kernel that quantizes its own activation slice
 * (gemv.cu, fused path), so both produce the same codes and scales bit for bit. Each thread
 * quantizes 8 consecutive values; a group of G values (NVFP4 16, MXFP8 32, FP8 128x128 128) spans
 * G/8 consecutive lanes, which must all call aq8 together (it shuffles). The arithmetic is
 * src/kernels/cpu/act_quant_ref.c step for step in correctly rounded f32. */
#ifndef MOQ_KERNELS_CUDA_ACT_QUANT_CUH
#define MOQ_KERNELS_CUDA_ACT_QUANT_CUH

#include "kernels/cuda/common.cuh"

#define MOQ_FP8_TOKEN_MIN_SCALE (1.0f / (448.0f * 512.0f))

/* Max over the G/8 consecutive lanes that hold one group of G values (8 values per lane). */
template <int LANES> __device__ __forceinline__ float group_amax(float v) {
#pragma unroll
    for (int o = 1; o < LANES; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

/* Per-row constants: tok (FP8 per-token scale, else 1), inv (FP8 per-tensor 1/s), S, r6, rS (NVFP4). */
struct aq_consts {
    float tok, inv, S, r6, rS;
    int approx;
};
template <int KIND> __device__ __forceinline__ aq_consts aq_consts_of(float a_scale, int approx, float tok) {
    aq_consts c;
    c.tok = tok, c.approx = approx;
    c.inv = KIND == MOQ_CK_FP8_TENSOR ? __fdiv_rn(1.0f, a_scale) : 0.0f;
    c.S = KIND == MOQ_CK_NVFP4 ? __fdiv_rn(1.0f, a_scale) : 0.0f;
    c.r6 = KIND == MOQ_CK_NVFP4 ? d_rcpa(6.0f, approx) : 0.0f;
    c.rS = KIND == MOQ_CK_NVFP4 ? d_rcpa(c.S, approx) : 0.0f;
    return c;
}
/* FP8 per-token scale from the row's absolute maximum. */
__device__ __forceinline__ float aq_token_scale(float amax) {
    float tok = __fdiv_rn(amax, 448.0f);
    if (!(tok >= MOQ_FP8_TOKEN_MIN_SCALE)) tok = fmaxf(tok, MOQ_FP8_TOKEN_MIN_SCALE);
    return tok;
}

/* The 8 values v -> e4m3 codes q (FP8 kinds, MXFP8), dequantized values d (what A holds: exact in
 * bf16), NVFP4 packed e2m1 codes; the group's scale: gscale (FP8 128-block s, f32) or scode
 * (NVFP4 e4m3 / MXFP8 e8m0 code). */
template <int KIND>
__device__ __forceinline__ void aq8(const float *v, const aq_consts &c, uint8_t *q, float *d, uint32_t &packed, float &gscale, uint8_t &scode) {
    float am = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
    packed = 0, gscale = 0.0f, scode = 0;
    if (KIND == MOQ_CK_BF16 || KIND == MOQ_CK_NVFP4_W4A16) {
#pragma unroll
        for (int i = 0; i < 8; i++) d[i] = v[i];
    } else if (KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[i] = d_e4m3_rne_sat(clamp448(KIND == MOQ_CK_FP8_ROW ? __fdiv_rn(v[i], c.tok) : __fmul_rn(v[i], c.inv)));
            d[i] = d_e4m3_dec(q[i]);
        }
    } else if (KIND == MOQ_CK_FP8_BLK128) {
        const float a = group_amax<16>(am);
        const float s = __fdiv_rn(fmaxf(1e-10f, a), 448.0f);
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = d_e4m3_rne_sat(clamp448(__fdiv_rn(v[i], s))), d[i] = d_e4m3_dec(q[i]);
        gscale = s;
    } else if (KIND == MOQ_CK_NVFP4) {
        const float a = group_amax<2>(am);
        const float sfv = __fmul_rn(c.S, __fmul_rn(a, c.r6));
        const uint8_t code = d_e4m3_rne_sat(sfv);
        const float sfd = d_e4m3_dec(code);
        const float outs = sfd != 0.0f ? d_rcpa(__fmul_rn(sfd, c.rS), c.approx) : 0.0f;
        scode = code;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint8_t e = d_e2m1_rne_sat(__fmul_rn(v[i], outs));
            packed |= (uint32_t)e << (4 * i);
            d[i] = __fmul_rn(d_e2m1_dec(e), sfd);
        }
    } else if (KIND == MOQ_CK_MXFP8) {
        const float a = group_amax<4>(am);
        const uint8_t ce = d_e8m0_up_sat(__fmul_rn(a, u2f(0x3B124925u))); /* f32(1/448) == rcpa(448) on the H200 */
        const float mult = ce == 0 ? 0.0f : ldexpf(1.0f, 127 - (int)ce), sc = d_e8m0_dec(ce);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[i] = d_e4m3_rne_sat(clamp448(__fmul_rn(v[i], mult)));
            d[i] = __fmul_rn(d_e4m3_dec(q[i]), sc);
        }
        scode = ce;
    }
}

/* 8 values of row `base` (x f32 or bf16, K per row) from k0; zeros past K or for a dead row. */
__device__ __forceinline__ void aq_load8(const void *x, int xb, bool live, int64_t base, int64_t K, int64_t k0, float *v) {
    if (live && (K % 8) == 0 && k0 < K) {
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
        for (int i = 0; i < 8; i++) {
            const int64_t j = base + k0 + i;
            v[i] = live && k0 + i < K ? (xb ? u2f((uint32_t)((const uint16_t *)x)[j] << 16) : ((const float *)x)[j]) : 0.0f;
        }
    }
}

/* d[0..7] -> 8 halves as 4 words, rounded to nearest even: bf16 (F16 false) or f16 (F16 true;
 * exact for the NVFP4 dequantized values, e2m1 · e4m3). */
template <bool F16> __device__ __forceinline__ uint4 aq_halfx8(const float *d) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (F16) {
            const __half2 h = __floats2half2_rn(d[2 * i], d[2 * i + 1]);
            w[i] = *(const uint32_t *)&h;
        } else {
            const __nv_bfloat162 h = __floats2bfloat162_rn(d[2 * i], d[2 * i + 1]);
            w[i] = *(const uint32_t *)&h;
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint4 aq_bf16x8(const float *d) { return aq_halfx8<false>(d); }
__device__ __forceinline__ uint4 aq_f16x8(const float *d) { return aq_halfx8<true>(d); }
__device__ __forceinline__ uint2 aq_u8x8(const uint8_t *c) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) lo |= (uint32_t)c[i] << (8 * i), hi |= (uint32_t)c[4 + i] << (8 * i);
    return make_uint2(lo, hi);
}

#endif
