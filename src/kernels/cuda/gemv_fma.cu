/* gemv_fma.cu — the CUDA-core decode kernel (issue 12's first decode path), kept for the (pair, M)
 * where it measured faster than the tensor-core kernel of gemv.cu (MXFP8 at M <= 2:
 * docs/PERFORMANCE.md): each warp owns R output rows (R = 4 for M <= 2); lanes stream the packed
 * weight rows in 16-byte vectors (each byte read once), decode to f32 in registers (e4m3 by
 * integer ops, e2m1 by placing its bits in an f16), multiply with the M activation rows (bf16 A
 * from the workspace, loaded once per vector for all R rows) and reduce across the warp; lane 0
 * applies the epilogue y = acc · row_scale[n] · tok[m] (+ bias[n]). Products are exact in f32,
 * only the f32 summation order differs from the CPU reference. */
#include "kernels/cuda/common.cuh"

#include <cuda_fp16.h>


template <int KIND> struct wfmt;
/* codes per 16-byte vector */
template <> struct wfmt<MOQ_CK_BF16> { static constexpr int C = 8; };
template <> struct wfmt<MOQ_CK_FP8_TENSOR> { static constexpr int C = 16; };
template <> struct wfmt<MOQ_CK_FP8_ROW> { static constexpr int C = 16; };
template <> struct wfmt<MOQ_CK_FP8_BLK128> { static constexpr int C = 16; };
template <> struct wfmt<MOQ_CK_MXFP8> { static constexpr int C = 16; };
template <> struct wfmt<MOQ_CK_NVFP4> { static constexpr int C = 32; };
template <> struct wfmt<MOQ_CK_NVFP4_W4A16> { static constexpr int C = 32; };

/* 4 e4m3 codes -> D4 · 2^-120 each, exact, by integer ops only (the conversion unit's 16 ops per
 * clock per SM would bound the decode otherwise): the code's e/m bits become an f32's top
 * exponent/mantissa bits, sign kept by the arithmetic shift. */
__device__ __forceinline__ void fp8x4(uint32_t w, float *o) {
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = u2f((uint32_t)((int32_t)(w << (24 - 8 * i)) >> 4) & 0x87F00000u);
}
/* 8 e2m1 codes (low nibble first) -> D2 · 2^-14 each, exact: the code's e/m bits become an f16's. */
__device__ __forceinline__ void e2m1x8(uint32_t w, float *o) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t b = (w >> (8 * j)) & 0xFF;
        const uint32_t h = ((b & 0x7u) << 9) | ((b & 0x8u) << 12) | ((b & 0x70u) << 21) | ((b & 0x80u) << 24);
        const float2 f = __half22float2(*(const __half2 *)&h);
        o[2 * j] = f.x, o[2 * j + 1] = f.y;
    }
}
__device__ __forceinline__ void bf16x2(uint32_t w, float *o) { o[0] = u2f(w << 16), o[1] = u2f(w & 0xFFFF0000u); }

/* R weight rows per warp share every activation load (A traffic through L1 / R); U vectors
 * per row per lane are in flight before any is used. */
template <int MT> struct gshape {
    static constexpr int R = MT <= 2 ? 4 : MT <= 4 ? 2 : 1;
    static constexpr int U = MT <= 2 ? 2 : MT <= 4 ? 2 : 2;
};

template <int KIND, int MT>
__global__ void __launch_bounds__(256) gemv_kernel(moq_cuda_args a) {
    constexpr int C = wfmt<KIND>::C, R = gshape<MT>::R, U = gshape<MT>::U;
    const int lane = threadIdx.x & 31;
    const int64_t n0 = ((int64_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
    pdl_wait(); /* launched by moq_launch_pdl: the quantized activation is the previous kernel's */
    if (n0 >= a.N) return;
    const char *ws = (const char *)a.ws_d;
    const __nv_bfloat16 *A = (const __nv_bfloat16 *)(ws + a.ws.a);
    const float *tok = (const float *)(ws + a.ws.tok), *gs = (const float *)(ws + a.ws.gs);
    const int64_t Kp = a.Kp, nvec = Kp / C, rowbytes = Kp * (KIND == MOQ_CK_BF16 ? 2 : 1) / (C == 32 ? 2 : 1);
    /* rows n0 .. n0+R-1 < Np: R divides 128 and the packed weight has Np zero-padded rows */
    const uint4 *wrow = (const uint4 *)((const uint8_t *)a.codes_d + n0 * rowbytes);
    const int64_t rstride = rowbytes / 16;
    float acc[R][MT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MT; m++) acc[r][m] = 0.0f;
    for (int64_t v0 = lane; v0 < nvec; v0 += 32 * U) {
        uint4 wvs[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) wvs[u][r] = v0 + 32 * u < nvec ? __ldg(wrow + r * rstride + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = v0 + 32 * u;
            if (v >= nvec) break;
            const int64_t k0 = v * C;
            /* the activations of this vector as bf16 pairs: loaded once for all R rows (M <= 4),
             * per row for larger M (registers) */
            constexpr int MA = R > 1 ? MT : 1;
            uint32_t ab[MA][C / 2];
            auto load_a = [&](int ma, int m) {
#pragma unroll
                for (int j = 0; j < C / 8; j++) {
                    const uint4 av = __ldg((const uint4 *)(A + m * Kp + k0) + j);
                    ab[ma][4 * j] = av.x, ab[ma][4 * j + 1] = av.y, ab[ma][4 * j + 2] = av.z, ab[ma][4 * j + 3] = av.w;
                }
            };
            if (R > 1)
#pragma unroll
                for (int m = 0; m < MT; m++) load_a(m < MA ? m : 0, m);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t n = n0 + r;
                const uint32_t wr[4] = {wvs[u][r].x, wvs[u][r].y, wvs[u][r].z, wvs[u][r].w};
                float w[C];
                if (KIND == MOQ_CK_BF16) {
#pragma unroll
                    for (int j = 0; j < 4; j++) bf16x2(wr[j], w + 2 * j);
                } else if (C == 16) {
#pragma unroll
                    for (int j = 0; j < 4; j++) fp8x4(wr[j], w + 4 * j);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) e2m1x8(wr[j], w + 8 * j);
                }
                /* Scale of each 16-value half of the vector, applied to its partial sum; the decode
                 * offsets (e4m3 2^-120, e2m1 2^-14) are undone exactly by powers of two. */
                float sc0 = 1.0f, sc1 = 1.0f;
                if (KIND == MOQ_CK_NVFP4 || KIND == MOQ_CK_NVFP4_W4A16) {
                    const uint8_t *s = (const uint8_t *)a.scales_d + n * (Kp / 16) + 2 * v;
                    sc0 = d_e4m3_dec(s[0]) * 16384.0f, sc1 = d_e4m3_dec(s[1]) * 16384.0f;
                } else if (KIND == MOQ_CK_MXFP8) {
                    sc0 = d_e8m0_dec(((const uint8_t *)a.scales_d)[n * (Kp / 32) + k0 / 32]);
                }
                float swg = 1.0f;
                if (KIND == MOQ_CK_FP8_BLK128) swg = ((const float *)a.scales_d)[(n / 128) * (Kp / 128) + k0 / 128];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int ma = R > 1 ? (m < MA ? m : 0) : 0;
                    if (R == 1) load_a(0, m);
                    float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
                    for (int t = 0; t < C / 2; t++) {
                        float &p = 2 * t < 16 ? p0 : p1;
                        p = fmaf(u2f(ab[ma][t] << 16), w[2 * t], p);
                        p = fmaf(u2f(ab[ma][t] & 0xFFFF0000u), w[2 * t + 1], p);
                    }
                    if (KIND == MOQ_CK_FP8_BLK128) acc[r][m] = fmaf(p0, swg * gs[m * (Kp / 128) + k0 / 128], acc[r][m]);
                    else if (KIND == MOQ_CK_MXFP8) acc[r][m] = fmaf(p0 * 0x1p120f, sc0, acc[r][m]); /* no overflow, no underflow */
                    else if (C == 32) acc[r][m] = fmaf(p1, sc1, fmaf(p0, sc0, acc[r][m]));
                    else acc[r][m] = fmaf(p0, sc0, acc[r][m]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < MT; m++)
            for (int o = 16; o; o >>= 1) acc[r][m] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][m], o);
    if (lane == 0) {
        /* e4m3 decoded as D4 · 2^-120 (MXFP8 undoes it per vector, before its block scale) */
        constexpr float undo = KIND == MOQ_CK_FP8_TENSOR || KIND == MOQ_CK_FP8_ROW || KIND == MOQ_CK_FP8_BLK128 ? 0x1p120f : 1.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t n = n0 + r;
            if (n >= a.N) break;
            const float rs = a.row_scale_d[n], b = a.bias_d[n];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (m >= a.M) break;
                const float y = fmaf(acc[r][m] * undo * rs, tok[m], b);
                if (a.y_bf16) ((__nv_bfloat16 *)a.y_d)[m * a.N + n] = __float2bfloat16_rn(y);
                else ((float *)a.y_d)[m * a.N + n] = y;
            }
        }
    }
}
template <int KIND, int MT> static void fma_launch(const moq_cuda_args *a) {
    const dim3 grid((unsigned)cdiv(a->N, 8 * gshape<MT>::R)), block(256);
    (void)moq_launch_pdl(gemv_kernel<KIND, MT>, grid, block, 0, (cudaStream_t)a->stream, *a);
}

/* The pairs and M that run here (gemv.cu asks): measured faster than the tensor-core kernel. */
static const struct { int kind; int64_t max_m; } fma_rows[] = {{MOQ_CK_MXFP8, 2}};

extern "C" int moq_cuda_gemv_fma_fits(int kind, int64_t M) {
    for (size_t i = 0; i < sizeof fma_rows / sizeof fma_rows[0]; i++)
        if (fma_rows[i].kind == kind && M <= fma_rows[i].max_m) return 1;
    return 0;
}

extern "C" const char *moq_cuda_gemv_fma(const moq_cuda_args *a) {
    if (!moq_cuda_gemv_fma_fits(a->kind, a->M)) return "gemv_fma: pair kind or M without an FMA decode path";
    if (a->kind == MOQ_CK_MXFP8) {
        if (a->M <= 1) fma_launch<MOQ_CK_MXFP8, 1>(a);
        else fma_launch<MOQ_CK_MXFP8, 2>(a);
    }
    return moq_cuda_launch_check("gemv_fma kernel launch");
}
