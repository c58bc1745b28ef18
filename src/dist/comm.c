/* comm.c — the communicator of comm.h: the CPU backend (threads of one process) and the NCCL backend
 * (kernels/cuda/comm_nccl.cu, one GPU per rank). Tested by tests/dist/test_comm.c. */
#include "dist/comm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#ifdef MOQ_HAVE_NCCL
#include "kernels/cuda/nccl_api.h"
#endif

#define MOQ_COMM_MAX_RANKS 64

struct moq_comm {
    moq_comm_group *g;
    int             rank;
};

struct moq_comm_group {
    moq_comm_backend b;
    int              G;
    size_t           max_floats;
    moq_comm         ranks[MOQ_COMM_MAX_RANKS];
    /* CPU: a generation barrier that an abort breaks, the ranks' posted buffers, the shared sum */
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    int              waiting;
    uint64_t         gen;
    bool             aborted;
    const float     *post[MOQ_COMM_MAX_RANKS];
    float           *sum;
    /* NCCL */
    void            *nccl[MOQ_COMM_MAX_RANKS];
    float           *stage[MOQ_COMM_MAX_RANKS];
};

const char *moq_comm_backend_name(moq_comm_backend b) { return b == MOQ_COMM_NCCL ? "nccl" : "cpu"; }

moq_status moq_comm_group_create(moq_comm_group **out, moq_comm_backend b, int G, size_t max_floats, bool host_buffers, moq_error *err) {
    *out = NULL;
    if (G < 1 || G > MOQ_COMM_MAX_RANKS || (unsigned)b >= MOQ_COMM_BACKEND_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_comm_group_create", "%d ranks on backend %d, expected 1..%d ranks on cpu or nccl", G, (int)b,
                        MOQ_COMM_MAX_RANKS);
    moq_comm_group *g = calloc(1, sizeof *g);
    if (!g) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_comm_group_create", "out of memory");
    g->b = b, g->G = G, g->max_floats = max_floats;
    for (int r = 0; r < G; r++) g->ranks[r] = (moq_comm){g, r};
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (b == MOQ_COMM_CPU) {
        g->sum = malloc((max_floats ? max_floats : 1) * sizeof(float));
        if (!g->sum) {
            moq_comm_group_free(g);
            return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_comm_group_create", "out of memory for %zu floats", max_floats);
        }
        *out = g;
        return MOQ_OK;
    }
#ifdef MOQ_HAVE_NCCL
    /* NVLink multicast off in this process before NCCL reads its environment (KINDS.md) */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
    setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
    const int n = moq_nccl_device_count();
    if (n < G) {
        moq_comm_group_free(g);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "nccl", "--tp %d needs a GPU per rank and %d %s visible (NCCL refuses two ranks on one GPU)", G, n,
                        n == 1 ? "is" : "are");
    }
    char msg[200];
    const size_t stage = host_buffers && max_floats > 0 ? max_floats * (size_t)G : 0;
    const char *e = moq_nccl_init(G, stage, g->nccl, g->stage, msg, sizeof msg);
    if (e) {
        moq_comm_group_free(g);
        return MOQ_FAIL(err, MOQ_ERR_DEVICE, "nccl", "%s", e);
    }
    *out = g;
    return MOQ_OK;
#else
    (void)host_buffers;
    moq_comm_group_free(g);
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "nccl", "this build has no NCCL (CMake found no nccl.h and libnccl in the CUDA toolkit); use the cpu backend");
#endif
}

void moq_comm_group_free(moq_comm_group *g) {
    if (!g) return;
#ifdef MOQ_HAVE_NCCL
    if (g->b == MOQ_COMM_NCCL) moq_nccl_free(g->G, g->nccl, g->stage);
#endif
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->sum);
    free(g);
}

moq_comm *moq_comm_rank(moq_comm_group *g, int rank) { return g && rank >= 0 && rank < g->G ? &g->ranks[rank] : NULL; }
int moq_comm_size(const moq_comm *c) { return c ? c->g->G : 1; }
int moq_comm_rank_of(const moq_comm *c) { return c ? c->rank : 0; }

void moq_comm_abort(moq_comm *c) {
    if (!c) return;
    moq_comm_group *g = c->g;
    pthread_mutex_lock(&g->mu);
    g->aborted = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
#ifdef MOQ_HAVE_NCCL
    if (g->b == MOQ_COMM_NCCL && g->nccl[c->rank]) moq_nccl_abort(g->nccl[c->rank]), g->nccl[c->rank] = NULL;
#endif
}

/* Every rank arrives before any leaves; false when the group was aborted. */
static bool barrier(moq_comm_group *g) {
    pthread_mutex_lock(&g->mu);
    const uint64_t gen = g->gen;
    if (++g->waiting == g->G) {
        g->waiting = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
    }
    const bool ok = !g->aborted;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

static moq_status aborted(moq_error *err) {
    return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "tensor parallel group", "another rank failed; this collective was abandoned");
}

moq_status moq_comm_bind_rank(moq_comm_backend b, int rank, moq_error *err) {
#ifdef MOQ_HAVE_NCCL
    if (b == MOQ_COMM_NCCL) {
        const int n = moq_nccl_device_count();
        if (rank >= n)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "nccl", "rank %d needs GPU %d and %d %s visible (NCCL: one GPU per rank; it refuses two ranks on one GPU)",
                            rank, rank, n, n == 1 ? "is" : "are");
        const char *e = moq_nccl_bind(rank);
        if (e) return MOQ_FAIL(err, MOQ_ERR_DEVICE, "nccl", "rank %d cannot bind GPU %d (cudaSetDevice: %s); expected one usable GPU per rank", rank, rank, e);
    }
#endif
    (void)b, (void)rank, (void)err;
    return MOQ_OK;
}

moq_status moq_comm_bind(moq_comm *c, moq_error *err) { return c ? moq_comm_bind_rank(c->g->b, c->rank, err) : MOQ_OK; }

moq_status moq_comm_all_reduce(moq_comm *c, float *buf, size_t n, moq_error *err) { return moq_comm_all_reduce_on(c, buf, n, NULL, err); }

moq_status moq_comm_all_gather(moq_comm *c, const float *send, float *recv, size_t n, moq_error *err) {
    return moq_comm_all_gather_on(c, send, recv, n, NULL, err);
}

moq_status moq_comm_all_reduce_on(moq_comm *c, float *buf, size_t n, void *stream, moq_error *err) {
    moq_comm_group *g = c->g;
    if (g->G == 1) return MOQ_OK;
    if (n > g->max_floats)
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "tensor parallel group", "all_reduce of %zu floats, the group was sized for %zu", n, g->max_floats);
#ifdef MOQ_HAVE_NCCL
    if (g->b == MOQ_COMM_NCCL) {
        char msg[200];
        if (!g->nccl[c->rank]) return aborted(err);
        const char *e = moq_nccl_all_reduce(g->nccl[c->rank], buf, n, g->stage[c->rank], stream, msg, sizeof msg);
        return e ? MOQ_FAIL(err, MOQ_ERR_DEVICE, "nccl", "%s", e) : MOQ_OK;
    }
#endif
    (void)stream;
    g->post[c->rank] = buf;
    if (!barrier(g)) return aborted(err);
    /* reduce-scatter: this rank's 1/G of the elements, summed over ranks in rank order */
    const size_t per = (n + (size_t)g->G - 1) / (size_t)g->G, lo = per * (size_t)c->rank, hi = lo + per < n ? lo + per : n;
    for (size_t i = lo; i < hi; i++) {
        float s = g->post[0][i];
        for (int r = 1; r < g->G; r++) s += g->post[r][i];
        g->sum[i] = s;
    }
    if (!barrier(g)) return aborted(err);
    memcpy(buf, g->sum, n * sizeof(float));
    return barrier(g) ? MOQ_OK : aborted(err); /* the shared sum is free again */
}

moq_status moq_comm_all_gather_on(moq_comm *c, const float *send, float *recv, size_t n, void *stream, moq_error *err) {
    moq_comm_group *g = c->g;
#ifdef MOQ_HAVE_NCCL
    if (g->b == MOQ_COMM_NCCL && g->G > 1) {
        char msg[200];
        if (n > g->max_floats)
            return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "tensor parallel group", "all_gather of %zu floats per rank, the group was sized for %zu", n, g->max_floats);
        if (!g->nccl[c->rank]) return aborted(err);
        const char *e = moq_nccl_all_gather(g->nccl[c->rank], g->G, send, recv, n, g->stage[c->rank], stream, msg, sizeof msg);
        return e ? MOQ_FAIL(err, MOQ_ERR_DEVICE, "nccl", "%s", e) : MOQ_OK;
    }
#endif
    (void)stream;
    g->post[c->rank] = send;
    if (!barrier(g)) return aborted(err);
    for (int r = 0; r < g->G; r++) memcpy(recv + (size_t)r * n, g->post[r], n * sizeof(float));
    return barrier(g) ? MOQ_OK : aborted(err);
}
