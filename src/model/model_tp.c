/* model_tp.c — `--tp G`: one process, one thread per rank (docs/ARCHITECTURE.md says why). The handle
 * the caller holds is rank 0; moq_tp_open opens the G ranks in parallel (each loads only its slices
 * of the mmap: model.c tp_setup / open_layers, scheme/slice.h), makes the communicator group
 * (dist/comm.h: CPU threads or NCCL) and starts a thread per rank 1..G-1 that waits for work. A
 * prefill on rank 0 posts the tokens, runs rank 0's part in the caller's thread and waits for the
 * others; the ranks meet in the forward's collectives (embedding and each row-parallel output
 * all-reduced, lm_head all-gathered), so every rank ends with the same logits and rank 0's are the
 * model's. A rank that fails aborts the group: the others' collectives return, and the group refuses
 * later work (the error names the rank that failed first).
 * Tested by tests/dist/test_tp.c.
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model_priv.h"

#define TP_MAX 64

typedef struct tp_rank {
    moq_tp_group *g;
    moq_model    *m;
    int           rank;
    moq_status    st;
    moq_error     err;
} tp_rank;

struct moq_tp_group {
    int             G;
    moq_comm_group *cg;
    tp_rank         r[TP_MAX];
    pthread_t       th[TP_MAX];
    int             started;   /* worker threads running (ranks 1..started)                  */
    pthread_mutex_t mu;
    pthread_cond_t  go, done;
    uint64_t        job;       /* generation of the posted work                              */
    int             pending;   /* workers still running it                                   */
    bool            quit, broken;
    const int32_t  *tok;       /* the posted prefill                                         */
    int64_t         n;
    bool            all_rows;
    /* opening */
    const char          *dir;
    const moq_model_opts *opts;
};

static void *worker(void *arg) {
    tp_rank *r = arg;
    moq_tp_group *g = r->g;
    uint64_t seen = 0;
    r->st = moq_comm_bind(r->m->comm, &r->err);
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->job == seen && !g->quit) pthread_cond_wait(&g->go, &g->mu);
        if (g->quit) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        seen = g->job;
        pthread_mutex_unlock(&g->mu);
        if (r->st == MOQ_OK) r->st = moq_model_prefill_rank(r->m, g->tok, g->n, g->all_rows, NULL, &r->err);
        if (r->st != MOQ_OK) moq_comm_abort(r->m->comm);
        pthread_mutex_lock(&g->mu);
        if (--g->pending == 0) pthread_cond_signal(&g->done);
        pthread_mutex_unlock(&g->mu);
    }
}

static void *open_one(void *arg) {
    tp_rank *r = arg;
    moq_model_opts o = *r->g->opts;
    const int nt = o.n_threads > 0 ? o.n_threads : omp_get_max_threads();
    o.n_threads = nt / r->g->G > 0 ? nt / r->g->G : 1; /* the cores shared among the ranks */
    if (r->rank) o.progress = NULL;                       /* rank 0 reports */
    r->st = moq_comm_bind_rank((moq_comm_backend)o.tp_backend, r->rank, &r->err); /* NCCL: the rank's GPU holds its layers */
    if (r->st == MOQ_OK) r->st = moq_model_open_rank(&r->m, r->g->dir, &o, r->g->G, r->rank, &r->err);
    return NULL;
}

/* The error to report: the first rank whose failure is its own (not an abandoned collective). */
static moq_status pick_error(moq_tp_group *g, moq_error *err) {
    int first = -1;
    bool own_first = false;
    for (int i = 0; i < g->G; i++) {
        if (g->r[i].st == MOQ_OK) continue;
        const bool own = strcmp(g->r[i].err.where, "tensor parallel group") != 0;
        if (first < 0 || (own && !own_first)) first = i, own_first = own;
    }
    if (first < 0) return MOQ_OK;
    if (err) {
        *err = g->r[first].err;
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "rank %d of --tp %d: %s", first, g->G, g->r[first].err.msg);
        memcpy(err->msg, msg, sizeof msg);
    }
    return g->r[first].st;
}

static void group_free(moq_tp_group *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = true;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    for (int i = 1; i <= g->started; i++) pthread_join(g->th[i], NULL);
    for (int i = 1; i < g->G; i++) moq_model_free(g->r[i].m);
    moq_comm_group_free(g->cg);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done);
    free(g);
}

moq_status moq_tp_open(moq_model **out, const char *dir, const moq_model_opts *opts, moq_error *err) {
    *out = NULL;
    const int G = opts->tp;
    if (G > TP_MAX) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--tp", "%d ranks, expected at most %d", G, TP_MAX);
    if ((unsigned)opts->tp_backend >= MOQ_COMM_BACKEND_COUNT)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "--tp", "backend %d, expected 0 (cpu) or 1 (nccl)", opts->tp_backend);
    moq_tp_group *g = calloc(1, sizeof *g);
    if (!g) return MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory");
    g->G = G, g->dir = dir, g->opts = opts;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go, NULL);
    pthread_cond_init(&g->done, NULL);
    /* every rank opens its own slices at once (each reads only its part of the mmap) */
    int made = 0;
    for (int i = 0; i < G; i++) {
        g->r[i] = (tp_rank){.g = g, .rank = i};
        if (i && pthread_create(&g->th[i], NULL, open_one, &g->r[i]) == 0) made = i;
        else if (i) g->r[i].st = MOQ_FAIL(&g->r[i].err, MOQ_ERR_NOMEM, dir, "could not start the thread of rank %d", i);
    }
    open_one(&g->r[0]);
    for (int i = 1; i <= made; i++) pthread_join(g->th[i], NULL);
    moq_status st = pick_error(g, err);
    moq_model *m0 = g->r[0].m;
    if (st == MOQ_OK) { /* the largest all-reduce: a chunk of hidden rows; the gather: a chunk of vocabulary rows */
        const int64_t C = m0->gpu ? moq_gpu_chunk(m0) : m0->chunk; /* rows of a step: the GPU's chunk is larger */
        const size_t h = (size_t)(C * m0->H), v = (size_t)(C * m0->tp.v_per);
        st = moq_comm_group_create(&g->cg, (moq_comm_backend)opts->tp_backend, G, h > v ? h : v, !m0->gpu, err);
    }
    if (st != MOQ_OK) {
        for (int i = 0; i < G; i++) moq_model_free(g->r[i].m), g->r[i].m = NULL;
        group_free(g);
        return st;
    }
    for (int i = 0; i < G; i++) g->r[i].m->comm = moq_comm_rank(g->cg, i);
    for (int i = 1; st == MOQ_OK && i < G; i++) /* GPU workers: where the rows of an all-rows step land */
        if (g->r[i].m->gpu && !(g->r[i].m->lrows_h = moq_blobs_alloc(&g->r[i].m->blobs, (size_t)(moq_gpu_chunk(g->r[i].m) * m0->V) * sizeof(float))))
            st = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "out of memory for rank %d's logits rows", i);
    if (st == MOQ_OK) st = moq_comm_bind(m0->comm, err);
    for (int i = 1; st == MOQ_OK && i < G; i++) {
        if (pthread_create(&g->th[i], NULL, worker, &g->r[i]) != 0) {
            st = MOQ_FAIL(err, MOQ_ERR_NOMEM, dir, "could not start the thread of rank %d", i);
            break;
        }
        g->started = i;
    }
    if (st != MOQ_OK) {
        group_free(g);
        moq_model_free(m0);
        return st;
    }
    m0->grp = g;
    *out = m0;
    return MOQ_OK;
}

moq_status moq_tp_prefill(moq_model *m, const int32_t *tokens, int64_t n, float *logits_all, moq_error *err) {
    moq_tp_group *g = m->grp;
    if (g->broken) return MOQ_FAIL(err, MOQ_ERR_INTERNAL, "tensor parallel group", "a rank failed in an earlier step; reopen the model");
    if (!tokens || n < 1 || m->pos + n > m->T) /* checked here too, so no rank starts a step that another refuses */
        return moq_model_prefill_rank(m, tokens, n, logits_all != NULL, logits_all, err);
    pthread_mutex_lock(&g->mu);
    g->tok = tokens, g->n = n, g->all_rows = logits_all != NULL;
    g->pending = g->G - 1;
    g->job++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    tp_rank *r0 = &g->r[0];
    r0->st = moq_model_prefill_rank(m, tokens, n, logits_all != NULL, logits_all, &r0->err);
    if (r0->st != MOQ_OK) moq_comm_abort(m->comm);
    pthread_mutex_lock(&g->mu);
    while (g->pending > 0) pthread_cond_wait(&g->done, &g->mu);
    pthread_mutex_unlock(&g->mu);
    const moq_status st = pick_error(g, err);
    if (st != MOQ_OK) g->broken = true;
    return st;
}

void moq_tp_reset(moq_model *m) {
    if (!m->grp) return;
    for (int i = 1; i < m->grp->G; i++) moq_model_reset(m->grp->r[i].m); /* the workers are idle between steps */
}

void moq_tp_close(moq_model *m) {
    moq_tp_group *g = m->grp;
    m->grp = NULL;
    group_free(g);
}
