/* common.cuh — device twins of src/format's scalar encoders (the same integer logic, so the
 * codes are the CPU's bit for bit), decoders, and the launch-error helper of the .cu files. */
#ifndef MOQ_KERNELS_CUDA_COMMON_CUH
#define MOQ_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_api.h"

/* Returns NULL or "what: cudaErrorX (text)" for the last launch (thread-local buffer). */
static inline const char *moq_cuda_launch_check(const char *what) {
    static thread_local char msg[256];
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return NULL;
    snprintf(msg, sizeof msg, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return msg;
}

/* A tuning or A/B knob from the environment (read by the caller once): dflt when unset or outside lo..hi. */
static inline int moq_cuda_knob(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    const int x = v ? atoi(v) : dflt;
    return x < lo || x > hi ? dflt : x;
}

/* Programmatic dependent launch (PDL) for the decode step's kernels. moq_launch_pdl launches a
 * kernel that may start while the kernel before it on the stream still runs (a CUDA graph keeps
 * the edge), so its launch and prologue overlap that kernel's tail; the kernel must call pdl_wait()
 * before it touches any global memory that an earlier kernel writes or reads (griddepcontrol.wait:
 * the previous grid has finished and its writes are visible), and every kernel launched this way
 * calls it unconditionally, so completion stays transitive along the stream. pdl_trigger() lets
 * the next such kernel start (without it, it starts when this grid ends). Off by default: on the
 * H100 (2026-12-07) it gained 0-1 % at batch 1 and lost at batch 64 (docs/PERFORMANCE.md "GPU runs
 * of 2026-12-07 night"); MOQ_CUDA_PDL=1 turns it on; off, the launches are plain and pdl_wait /
 * pdl_trigger do nothing. The decode GEMV
 * (gemv.cu) and the MoE kernels (moe.cu) launch with their own attributes (cluster size; always
 * PDL, measured on 2026-12-01) and are not switched by this knob. */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
static inline bool moq_cuda_pdl_on(void) {
    static const bool on = moq_cuda_knob("MOQ_CUDA_PDL", 0, 0, 1) == 1;
    return on;
}
template <typename... P, typename... A>
static inline cudaError_t moq_launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cfg.attrs = at, cfg.numAttrs = moq_cuda_pdl_on() ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, args...);
    if (e != cudaSuccess && cfg.numAttrs) { /* a stream or driver that refuses the attribute */
        (void)cudaGetLastError();
        cfg.numAttrs = 0;
        e = cudaLaunchKernelEx(&cfg, k, args...);
    }
    return e;
}

__device__ __forceinline__ uint32_t f2u(float x) { return __float_as_uint(x); }
__device__ __forceinline__ float u2f(uint32_t u) { return __uint_as_float(u); }

/* moq_e4m3_encode_rne_sat (src/format/e4m3.c). */
__device__ __forceinline__ uint8_t d_e4m3_rne_sat(float x) {
    const uint32_t u = f2u(x), s = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(s | 0x7F);
    if (a >= 0x43E00000u) return (uint8_t)(s | 0x7E);
    if (a < 0x3C800000u) return (uint8_t)(s | (uint32_t)rintf(__fmul_rn(u2f(a), 512.0f)));
    const uint32_t odd = (a >> 20) & 1;
    const uint32_t b = a + ((uint32_t)(7 - 127) << 23) + 0x7FFFFu + odd;
    return (uint8_t)(s | (b >> 20));
}

/* moq_e2m1_encode_rne_sat (src/format/e2m1.c). */
__device__ __forceinline__ uint8_t d_e2m1_rne_sat(float x) {
    const uint32_t u = f2u(x), s = (u >> 28) & 8;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint8_t)(s ^ 8);
    const float a = fabsf(x);
    uint8_t m;
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return (uint8_t)(s | m);
}

/* moq_e8m0_encode_up_sat (src/format/e8m0.c). */
__device__ __forceinline__ uint8_t d_e8m0_up_sat(float x) {
    const uint32_t a = f2u(x) & 0x7FFFFFFFu, e = a >> 23, m = a & 0x7FFFFFu;
    if (a > 0x7F800000u) return 0xFF;
    if (e == 0xFF) return 0xFE;
    if (e == 0) return m > 0x400000u ? 1 : 0;
    const uint32_t r = e + (m != 0);
    return r > 254 ? 0xFE : (uint8_t)r;
}

__device__ __forceinline__ float d_e4m3_dec(uint32_t c) {
    const uint32_t e = (c >> 3) & 0xF, m = c & 7, s = (c & 0x80u) << 24;
    if (e == 0xF && m == 7) return u2f(s | 0x7FC00000u);
    if (e == 0) return u2f(s | f2u((float)m * 0x1p-9f));
    return u2f(s | ((e + 120) << 23) | (m << 20));
}
__device__ __forceinline__ float d_e2m1_dec(uint32_t c) { /* low nibble */
    const uint32_t s = (c & 8u) << 28, em = c & 7u;
    if (em == 0) return u2f(s);
    if (em == 1) return u2f(s | 0x3F000000u);
    return u2f(s | ((((em >> 1) - 1) + 127) << 23) | ((em & 1) << 22));
}
__device__ __forceinline__ float d_e8m0_dec(uint32_t c) { /* 2^(c-127); c = 0 -> 2^-127 (subnormal) */
    if (c == 0) return u2f(0x00400000u);
    if (c == 0xFF) return u2f(0x7FC00000u);
    return u2f(c << 23);
}

/* moq_rcpa: approx = rcp.approx.ftz.f32 (the peers' kernels); else the IEEE value with the
 * same flush of subnormal inputs and results as the CPU's moq_rcpa(x, NULL). */
__device__ __forceinline__ float d_rcpa(float x, bool approx) {
    if (approx) {
        float r;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
        return r;
    }
    const uint32_t u = f2u(x), s = u & 0x80000000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return x;
    if (a < 0x00800000u) return u2f(s | 0x7F800000u);
    if (a == 0x7F800000u) return u2f(s);
    const float r = __frcp_rn(x);
    if ((f2u(r) & 0x7F800000u) == 0) return u2f(s);
    return r;
}

__device__ __forceinline__ float clamp448(float v) { return v > 448.0f ? 448.0f : (v < -448.0f ? -448.0f : v); }

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* c += a · b on the tensor cores: mma.sync m16n8k16, bf16 operands, f32 accumulators (the mma.sync
 * GEMM of gemm_mma.cu, the tensor-core prefill attention of model_ops.cu). */
__device__ __forceinline__ void mma_bf16_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two f32 → bf16 (round to nearest even) in one word, lo in the low half (the lower column / k) */
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&h;
}

#endif
