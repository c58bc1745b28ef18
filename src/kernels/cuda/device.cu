/* device.cu — the CUDA side of the device layer: probe, memory, copies, sync. Errors are
 * returned as text naming the call and CUDA's error name (no printing, no exit). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "kernels/cuda/cuda_api.h"

static thread_local char g_msg[512];

static const char *fail(const char *what, cudaError_t e) {
    snprintf(g_msg, sizeof g_msg, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return g_msg;
}

extern "C" const char *moq_cuda_probe(char *info, size_t info_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) { /* no driver (cudaErrorInsufficientDriver) or no GPU (cudaErrorNoDevice) */
        cudaGetLastError();
        return fail("no usable CUDA GPU or driver here: cudaGetDeviceCount", e);
    }
    if (n < 1) return "no CUDA device is present";
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return fail("cudaGetDevice", e);
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) return fail("cudaGetDeviceProperties", e);
    if (info && info_len)
        snprintf(info, info_len, "%.200s, sm_%d%d, %d SMs, %.0f GiB, L2 %d MiB", p.name, p.major, p.minor, p.multiProcessorCount,
                 (double)p.totalGlobalMem / (1 << 30), p.l2CacheSize >> 20);
    if (p.major != 9 || p.minor != 0) {
        snprintf(g_msg, sizeof g_msg, "CUDA device 0 is %.200s (sm_%d%d); the CUDA kernels are built for Hopper sm_90a only", p.name, p.major,
                 p.minor);
        return g_msg;
    }
    return NULL;
}

extern "C" const char *moq_cuda_malloc(size_t bytes, void **out) {
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e != cudaSuccess) { cudaGetLastError(); *out = NULL; return fail("cudaMalloc", e); }
    return NULL;
}

extern "C" void moq_cuda_free(void *p) {
    if (p) cudaFree(p);
}

extern "C" const char *moq_cuda_h2d(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? NULL : fail("cudaMemcpy host to device", e);
}

extern "C" const char *moq_cuda_d2h(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? NULL : fail("cudaMemcpy device to host", e);
}

extern "C" const char *moq_cuda_d2d(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? NULL : fail("cudaMemcpy device to device", e);
}

extern "C" const char *moq_cuda_sync(void) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? NULL : fail("cudaDeviceSynchronize (a kernel failed)", e);
}
