/* comm.h — the collectives a tensor-parallel forward needs, behind one small interface with two
 * backends (issue 16; docs/ARCHITECTURE.md "Tensor and expert parallelism"):
 *
 *   CPU   G ranks as threads of one process; all_reduce is a reduce-scatter over the ranks' buffers
 *         (each rank sums its 1/G of the elements over ranks 0..G-1 in rank order, into a shared
 *         buffer) then every rank copies the result: every rank gets the same bits, and the sum is
 *         the one a single process would make adding the G partial outputs in rank order. A test
 *         vehicle on the CPU, not a fast path.
 *   NCCL  one thread per GPU of one process (ncclCommInitAll over devices 0..G-1), ncclAllReduce /
 *         ncclAllGather on the rank's stream; host buffers are staged through device memory.
 *         NCCL refuses two ranks on one GPU, so G <= the GPUs visible. NVLink multicast stays off:
 *         moq_comm_group_create sets NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1 and
 *         TORCH_SYMM_MEM_DISABLE_MULTICAST=1 in the process before NCCL starts (KINDS.md of the
 *         device machines: multicast can take the host's GPUs out of service).
 *
 * A group is created once for G ranks and hands out one moq_comm per rank; each is used by one thread.
 * Collectives are blocking; every rank must call the same sequence. A rank that fails calls
 * moq_comm_abort so the others' pending and later collectives return MOQ_ERR_INTERNAL instead of
 * waiting forever. Buffers are the caller's (no allocation per call; the CPU backend's shared sum
 * buffer is sized at create: max_floats). Tested by tests/dist/test_comm.c (CPU, and NCCL when a GPU
 * is present).
 */
#ifndef MOQ_DIST_COMM_H
#define MOQ_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "moq.h"

typedef enum moq_comm_backend { MOQ_COMM_CPU = 0, MOQ_COMM_NCCL, MOQ_COMM_BACKEND_COUNT } moq_comm_backend;

typedef struct moq_comm_group moq_comm_group;
typedef struct moq_comm       moq_comm;

/* G ranks (1..64); max_floats: the largest all_reduce (and per-rank all_gather). NCCL: host_buffers
 * says whether collectives will see host memory (the CPU forward), which needs a device staging
 * buffer of G max_floats per GPU; MOQ_ERR_UNSUPPORTED when the build has no NCCL or fewer than G GPUs
 * are visible (saying which). */
moq_status moq_comm_group_create(moq_comm_group **out, moq_comm_backend b, int G, size_t max_floats, bool host_buffers, moq_error *err);
void       moq_comm_group_free(moq_comm_group *g);
moq_comm  *moq_comm_rank(moq_comm_group *g, int rank);
int        moq_comm_size(const moq_comm *c);
int        moq_comm_rank_of(const moq_comm *c);
const char *moq_comm_backend_name(moq_comm_backend b);   /* "cpu", "nccl" */

/* NCCL: makes this thread's current GPU the rank's (call once in each thread that runs the rank);
 * CPU: no-op. bind_rank does the same before the group exists (a rank's model is opened on its GPU
 * first, and the group is sized from it). */
moq_status moq_comm_bind(moq_comm *c, moq_error *err);
moq_status moq_comm_bind_rank(moq_comm_backend b, int rank, moq_error *err);
/* buf f32 [n] on every rank <- the elementwise sum over ranks (n <= max_floats). */
moq_status moq_comm_all_reduce(moq_comm *c, float *buf, size_t n, moq_error *err);
/* recv f32 [G, n] <- every rank's send f32 [n], in rank order. */
moq_status moq_comm_all_gather(moq_comm *c, const float *send, float *recv, size_t n, moq_error *err);
/* The same on device buffers, enqueued on `stream` (a cudaStream_t; NULL: the default stream) without
 * waiting for it: the GPU forward's next kernels on that stream see the result. CPU: as above. */
moq_status moq_comm_all_reduce_on(moq_comm *c, float *buf, size_t n, void *stream, moq_error *err);
moq_status moq_comm_all_gather_on(moq_comm *c, const float *send, float *recv, size_t n, void *stream, moq_error *err);
/* Wakes every rank waiting in a collective of the group; they and later calls fail. */
void       moq_comm_abort(moq_comm *c);

#endif
