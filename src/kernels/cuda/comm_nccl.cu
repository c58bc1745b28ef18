/* comm_nccl.cu — NCCL communicators for the ranks of one process, one GPU per rank (nccl_api.h;
 * used by src/dist/comm.c). ncclCommInitAll makes all G communicators in one call, so no unique id
 * has to travel between processes; each rank's thread then calls the collectives on its own
 * communicator, on the legacy default stream of its device, which orders them after the forward's
 * kernels and before the kernels and synchronous copies that follow: on device buffers nothing waits
 * on the host (the GPU step keeps its one synchronisation, the logits download). Host buffers (the CPU forward) are staged
 * through the rank's device buffer; device buffers (the GPU forward) are used in place.
 * Tested by tests/dist/test_comm.c (skips without a GPU). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "kernels/cuda/nccl_api.h"

static const char *nccl_err(ncclResult_t r, const char *call, char *msg, size_t n) {
    snprintf(msg, n, "%s: %s", call, ncclGetErrorString(r));
    return msg;
}

static const char *cuda_err(cudaError_t e, const char *call, char *msg, size_t n) {
    snprintf(msg, n, "%s: %s", call, cudaGetErrorString(e));
    return msg;
}

static bool on_device(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* plain host memory on old runtimes */
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

extern "C" int moq_nccl_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" const char *moq_nccl_init(int G, size_t stage_floats, void **comms, float **stage, char *msg, size_t msg_len) {
    ncclComm_t *c = (ncclComm_t *)comms;
    ncclResult_t r = ncclCommInitAll(c, G, NULL);
    if (r != ncclSuccess) return nccl_err(r, "ncclCommInitAll", msg, msg_len);
    for (int i = 0; i < G; i++) {
        stage[i] = NULL;
        cudaError_t e = cudaSetDevice(i);
        if (e == cudaSuccess && stage_floats) e = cudaMalloc((void **)&stage[i], stage_floats * sizeof(float));
        if (e != cudaSuccess) return cuda_err(e, "cudaMalloc (NCCL staging buffer)", msg, msg_len);
    }
    cudaSetDevice(0);
    return NULL;
}

extern "C" void moq_nccl_free(int G, void **comms, float **stage) {
    for (int i = 0; i < G; i++) {
        if (stage[i]) cudaSetDevice(i), cudaFree(stage[i]);
        if (comms[i]) ncclCommDestroy((ncclComm_t)comms[i]);
    }
    cudaSetDevice(0);
}

extern "C" const char *moq_nccl_bind(int dev) {
    const cudaError_t e = cudaSetDevice(dev);
    return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

extern "C" const char *moq_nccl_all_reduce(void *comm, float *buf, size_t n, float *stage, void *stream, char *msg, size_t msg_len) {
    const bool dev = on_device(buf);
    if (!dev && !stage) return "a host buffer, and the group was made for device buffers only";
    float *p = dev ? buf : stage;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = dev ? cudaSuccess : cudaMemcpy(p, buf, n * sizeof(float), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuda_err(e, "cudaMemcpy (all_reduce in)", msg, msg_len);
    const ncclResult_t r = ncclAllReduce(p, p, n, ncclFloat, ncclSum, (ncclComm_t)comm, s);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllReduce", msg, msg_len);
    if (dev) return NULL; /* enqueued on the stream: the forward's next kernels wait for it, the host does not */
    e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) e = cudaMemcpy(buf, p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? NULL : cuda_err(e, "all_reduce out", msg, msg_len);
}

extern "C" const char *moq_nccl_all_gather(void *comm, int G, const float *send, float *recv, size_t n, float *stage, void *stream, char *msg,
                                           size_t msg_len) {
    const bool dev = on_device(recv);
    if ((!dev || !on_device(send)) && !stage) return "a host buffer, and the group was made for device buffers only";
    cudaStream_t s = (cudaStream_t)stream;
    float *out = dev ? recv : stage;
    const float *in = send;
    cudaError_t e = cudaSuccess;
    if (!on_device(send)) { /* this rank's part of the staging buffer holds its input */
        int rank = 0;
        ncclCommUserRank((ncclComm_t)comm, &rank);
        e = cudaMemcpy(out + (size_t)rank * n, send, n * sizeof(float), cudaMemcpyHostToDevice);
        in = out + (size_t)rank * n;
    }
    if (e != cudaSuccess) return cuda_err(e, "cudaMemcpy (all_gather in)", msg, msg_len);
    const ncclResult_t r = ncclAllGather(in, out, n, ncclFloat, (ncclComm_t)comm, s);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllGather", msg, msg_len);
    if (dev) return NULL; /* ordered before the caller's download on the stream */
    e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) e = cudaMemcpy(recv, out, (size_t)G * n * sizeof(float), cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? NULL : cuda_err(e, "all_gather out", msg, msg_len);
}

extern "C" void moq_nccl_abort(void *comm) { ncclCommAbort((ncclComm_t)comm); }
