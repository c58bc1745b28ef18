/* device.cu — the CUDA side of the device layer: probe, memory, copies, sync. Errors are
 * returned as text naming the call and CUDA's error name (no printing, no exit). */
#include <cuda_profiler_api.h>
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

/* ---- streams and graphs: the GPU decoder's step runs on its own stream, decode steps as graphs ---- */
extern "C" const char *moq_cuda_stream_create(void **stream) {
    cudaStream_t s = NULL;
    cudaError_t e = cudaStreamCreate(&s); /* blocking: ordered with the legacy default stream's copies */
    *stream = e == cudaSuccess ? (void *)s : NULL;
    return e == cudaSuccess ? NULL : fail("cudaStreamCreate", e);
}

extern "C" void moq_cuda_stream_destroy(void *stream) {
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" const char *moq_cuda_stream_sync(void *stream) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? NULL : fail("cudaStreamSynchronize (a kernel of the step failed)", e);
}

extern "C" const char *moq_cuda_h2d_async(void *dst, const void *src, size_t bytes, void *stream) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
    return e == cudaSuccess ? NULL : fail("cudaMemcpyAsync host to device", e);
}

extern "C" const char *moq_cuda_d2h_async(void *dst, const void *src, size_t bytes, void *stream) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
    return e == cudaSuccess ? NULL : fail("cudaMemcpyAsync device to host", e);
}

extern "C" const char *moq_cuda_host_alloc(size_t bytes, void **out) {
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 256);
    if (e != cudaSuccess) { cudaGetLastError(); *out = NULL; return fail("cudaMallocHost", e); }
    return NULL;
}

extern "C" void moq_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" const char *moq_cuda_capture_begin(void *stream) {
    cudaError_t e = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? NULL : fail("cudaStreamBeginCapture", e);
}

extern "C" const char *moq_cuda_capture_end(void *stream, void **exec) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &graph);
    if (!exec) { /* dropping a capture whose enqueue failed */
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        return NULL;
    }
    *exec = NULL;
    if (e != cudaSuccess) { cudaGetLastError(); return fail("cudaStreamEndCapture", e); }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) { cudaGetLastError(); return fail("cudaGraphInstantiate", e); }
    *exec = (void *)x;
    return NULL;
}

extern "C" const char *moq_cuda_graph_launch(void *exec, void *stream) {
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
    return e == cudaSuccess ? NULL : fail("cudaGraphLaunch", e);
}

extern "C" void moq_cuda_graph_destroy(void *exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

/* cudaProfilerStart / Stop: the range that `ncu --profile-from-start off` profiles. */
extern "C" void moq_cuda_profiler_range(int on) {
    if (on) (void)cudaProfilerStart();
    else (void)cudaProfilerStop();
}

extern "C" const char *moq_cuda_mem_info(size_t *free_b, size_t *total_b) {
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    return e == cudaSuccess ? NULL : fail("cudaMemGetInfo", e);
}
