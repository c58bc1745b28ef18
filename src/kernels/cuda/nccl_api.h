/* nccl_api.h — the C interface of comm_nccl.cu: NCCL communicators for the ranks of one process, one
 * GPU each (src/dist/comm.c is the only caller). No CUDA or NCCL type appears here. Every function
 * returns NULL on success or a static / `msg` string naming the failed call and NCCL's or CUDA's
 * error text. Built only when CMake finds nccl.h and libnccl (MOQ_HAVE_NCCL). */
#ifndef MOQ_KERNELS_CUDA_NCCL_API_H
#define MOQ_KERNELS_CUDA_NCCL_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Visible GPUs (0 when none or no driver). */
int         moq_nccl_device_count(void);
/* comms[0..G) for devices 0..G-1 (ncclCommInitAll) and a device staging buffer of stage_floats f32
 * on each (stage[r]; none when 0: the collectives then take device buffers only). */
const char *moq_nccl_init(int G, size_t stage_floats, void **comms, float **stage, char *msg, size_t msg_len);
void        moq_nccl_free(int G, void **comms, float **stage);
const char *moq_nccl_bind(int dev);
/* In-place sum over ranks of buf [n] on `stream` (a cudaStream_t, NULL = default): device memory is
 * enqueued and not waited for; host memory goes through stage and is waited for. */
const char *moq_nccl_all_reduce(void *comm, float *buf, size_t n, float *stage, void *stream, char *msg, size_t msg_len);
/* recv [G, n] <- send [n] of every rank (host or device memory alike; stage holds G n floats). */
const char *moq_nccl_all_gather(void *comm, int G, const float *send, float *recv, size_t n, float *stage, void *stream, char *msg,
                                size_t msg_len);
/* Aborts the communicator (a rank failed): NCCL calls of the other ranks return. */
void        moq_nccl_abort(void *comm);

#ifdef __cplusplus
}
#endif

#endif
