/* gemm_mma.cu — any-M GEMM for every pair: 128x128x32 block tiles, 8 warps of 64x32, bf16
 * mma.sync m16n8k16 with f32 accumulators. A (the quantize-dequantized activation, bf16, exact)
 * arrives by cp.async; the packed weight tile is loaded into registers one tile ahead, decoded
 * (e4m3 by the hardware cvt, e2m1 through an f16, times its e4m3 / e8m0 block scale: exact in
 * bf16) and stored to shared memory while the tensor cores work on the current tile. FP8 128x128
 * blocks: the tile's partial sums are scaled by s_w[n/128, g] · s_x[m, g] every 128 K.
 * Epilogue y = acc · row_scale[n] · tok[m] (+ bias[n]), rows < M and columns < N only.
 * Plain sm_80-style mma.sync: correct everywhere, not the wgmma/TMA ceiling (docs/PERFORMANCE.md). */
#include "kernels/cuda/common.cuh"

#include <cuda_fp16.h>

#define BM 128
#define BN 128
#define BK 32
#define LDS 40 /* bf16 per smem row: 32 + 8 pad (80 bytes: ldmatrix rows hit distinct banks) */

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(s)), "l"(g));
}
__device__ __forceinline__ void ldsm4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ uint32_t fp8x2_bf16(uint32_t w16, float s) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w16 & 0xFFFF), __NV_E4M3);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return bf16x2_rn(f.x * s, f.y * s);
}
__device__ __forceinline__ uint32_t e2m1x2_bf16(uint32_t b, float s16384) {
    const uint32_t h = ((b & 0x7u) << 9) | ((b & 0x8u) << 12) | ((b & 0x70u) << 21) | ((b & 0x80u) << 24);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return bf16x2_rn(f.x * s16384, f.y * s16384);
}

/* One thread's share of a weight tile: 16 codes of row (t / 2), half (t % 2), or 8 bf16 x2. */
struct breg {
    uint4 v;
    float s;
};

template <int KIND>
__device__ __forceinline__ void load_b(const moq_cuda_args &a, int64_t n0, int64_t k0, breg &r) {
    const int t = threadIdx.x, row = t >> 1, half = t & 1;
    const int64_t n = n0 + row, Kp = a.Kp;
    if (KIND == MOQ_CK_BF16) return; /* cp.async path */
    if (KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16) {
        const uint2 w = __ldg((const uint2 *)((const uint8_t *)a.codes_d + n * (Kp / 2) + k0 / 2 + half * 8));
        r.v = make_uint4(w.x, w.y, 0, 0);
        r.s = d_e4m3_dec(((const uint8_t *)a.scales_d)[n * (Kp / 16) + (k0 + half * 16) / 16]) * 16384.0f;
    } else {
        r.v = __ldg((const uint4 *)((const uint8_t *)a.codes_d + n * Kp + k0 + half * 16));
        r.s = KIND == MOQ_CK_MXFP8 ? d_e8m0_dec(((const uint8_t *)a.scales_d)[n * (Kp / 32) + (k0 + half * 16) / 32]) : 1.0f;
    }
}

template <int KIND>
__device__ __forceinline__ void store_b(const breg &r, __nv_bfloat16 (*Bs)[LDS]) {
    const int t = threadIdx.x, row = t >> 1, half = t & 1;
    uint32_t o[8];
    if (KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16) {
        const uint32_t w[2] = {r.v.x, r.v.y};
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = e2m1x2_bf16((w[j >> 2] >> (8 * (j & 3))) & 0xFF, r.s);
    } else {
        const uint32_t w[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = fp8x2_bf16(w[j >> 1] >> (16 * (j & 1)), r.s);
    }
    uint4 *d = (uint4 *)&Bs[row][half * 16];
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

template <int KIND>
__global__ void __launch_bounds__(256) gemm_mma_kernel(moq_cuda_args a) {
    __shared__ __align__(128) __nv_bfloat16 As[2][BM][LDS];
    __shared__ __align__(128) __nv_bfloat16 Bs[2][BN][LDS];
    constexpr bool G128 = KIND == MOQ_CK_FP8_BLK128;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, wm = warp >> 2, wn = warp & 3;
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * BM, Kp = a.Kp;
    const char *ws = (const char *)a.ws_d;
    const __nv_bfloat16 *A = (const __nv_bfloat16 *)(ws + a.ws.a);
    const float *tok = (const float *)(ws + a.ws.tok), *gs = (const float *)(ws + a.ws.gs);
    const __nv_bfloat16 *Wb = (const __nv_bfloat16 *)a.codes_d;

    float acc[4][4][4], part[G128 ? 4 : 1][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    if (G128) {
#pragma unroll
        for (int i = 0; i < (G128 ? 4 : 1); i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) part[i][j][e] = 0.0f;
    }

    auto load_a = [&](int buf, int64_t k0) {
#pragma unroll
        for (int c = t; c < BM * 4; c += 256) {
            const int row = c >> 2, col = (c & 3) * 8;
            cp_async16(&As[buf][row][col], A + (m0 + row) * Kp + k0 + col);
            if (KIND == MOQ_CK_BF16) cp_async16(&Bs[buf][row][col], Wb + (n0 + row) * Kp + k0 + col);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    const int64_t KT = Kp / BK;
    breg br;
    load_a(0, 0);
    load_b<KIND>(a, n0, 0, br);
    if (KIND != MOQ_CK_BF16) store_b<KIND>(br, Bs[0]);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    for (int64_t kt = 0; kt < KT; kt++) {
        const int buf = (int)(kt & 1);
        if (kt + 1 < KT) {
            load_a(buf ^ 1, (kt + 1) * BK);
            load_b<KIND>(a, n0, (kt + 1) * BK, br);
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) ldsm4(af[mi], &As[buf][wm * 64 + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
            for (int nj = 0; nj < 2; nj++) {
                uint32_t r[4];
                ldsm4(r, &Bs[buf][wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8][kk + ((lane >> 3) & 1) * 8]);
                bf[2 * nj][0] = r[0], bf[2 * nj][1] = r[1], bf[2 * nj + 1][0] = r[2], bf[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) mma_bf16_16816(G128 ? part[mi & (G128 ? 3 : 0)][ni] : acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
        if (G128 && ((kt + 1) * BK) % 128 == 0) {
            const int64_t g = kt * BK / 128;
            const float sw = ((const float *)a.scales_d)[(n0 / 128) * (Kp / 128) + g];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                const int64_t r0 = m0 + wm * 64 + mi * 16 + (lane >> 2);
                const float s0 = sw * gs[r0 * (Kp / 128) + g], s1 = sw * gs[(r0 + 8) * (Kp / 128) + g];
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    float *p = part[mi & (G128 ? 3 : 0)][ni];
                    acc[mi][ni][0] = fmaf(p[0], s0, acc[mi][ni][0]), acc[mi][ni][1] = fmaf(p[1], s0, acc[mi][ni][1]);
                    acc[mi][ni][2] = fmaf(p[2], s1, acc[mi][ni][2]), acc[mi][ni][3] = fmaf(p[3], s1, acc[mi][ni][3]);
                    p[0] = p[1] = p[2] = p[3] = 0.0f;
                }
            }
        }
        if (kt + 1 < KT && KIND != MOQ_CK_BF16) store_b<KIND>(br, Bs[buf ^ 1]);
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t m = m0 + wm * 64 + mi * 16 + (lane >> 2) + 8 * h;
            if (m >= a.M) continue;
            const float tm = tok[m];
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t n = n0 + wn * 32 + ni * 8 + (lane & 3) * 2 + e;
                    if (n >= a.N) continue;
                    const float y = fmaf(acc[mi][ni][2 * h + e] * a.row_scale_d[n], tm, a.bias_d[n]);
                    if (a.y_bf16) ((__nv_bfloat16 *)a.y_d)[m * a.N + n] = __float2bfloat16_rn(y);
                    else ((float *)a.y_d)[m * a.N + n] = y;
                }
        }
}

extern "C" const char *moq_cuda_gemm_mma(const moq_cuda_args *a) {
    const dim3 grid((unsigned)(a->Np / BN), (unsigned)(moq_cuda_mpad(a->M) / BM)), block(256);
    if (moq_cuda_mpad(a->M) % BM) return "gemm_mma: M must be > 16 (the workspace pads it to 128)";
    switch (a->kind) {
    case MOQ_CK_BF16: gemm_mma_kernel<MOQ_CK_BF16><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_FP8_TENSOR: gemm_mma_kernel<MOQ_CK_FP8_TENSOR><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_FP8_ROW: gemm_mma_kernel<MOQ_CK_FP8_ROW><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_FP8_BLK128: gemm_mma_kernel<MOQ_CK_FP8_BLK128><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_NVFP4: gemm_mma_kernel<MOQ_CK_NVFP4><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_NVFP4_W4A16: gemm_mma_kernel<MOQ_CK_NVFP4_W4A16><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    case MOQ_CK_MXFP8: gemm_mma_kernel<MOQ_CK_MXFP8><<<grid, block, 0, (cudaStream_t)a->stream>>>(*a); break;
    default: return "gemm_mma: unknown pair kind";
    }
    return moq_cuda_launch_check("gemm_mma kernel launch");
}
