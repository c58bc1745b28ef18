/* test_comm.c — the communicator (dist/comm.h). CPU backend: G threads each post their own values;
 * all_reduce must give every rank the sum over ranks 0..G-1 added in rank order (the test adds them
 * itself, so the bits are known), all_gather every rank's buffer in rank order; a rank that aborts
 * releases the others with an error instead of a hang. NCCL backend: runs only where the build has
 * NCCL and a GPU is visible (else it skips saying why); G = the visible GPUs, since NCCL refuses two
 * ranks on one GPU — which is checked as a refusal when exactly one GPU is visible. */
#include "tu.h"

#include <math.h>
#include <pthread.h>

#include "dist/comm.h"

enum { N = 1003, GMAX = 8 };

typedef struct job {
    moq_comm  *c;
    int        rank, G;
    bool       abort_instead;
    moq_status st_reduce, st_gather;
    float      buf[N], got[GMAX * N];
} job;

static float val(int rank, int i) { return (float)((rank + 1) * 0.37 + i * 1e-3 * (rank % 3 + 1)); }

static void *body(void *arg) {
    job *j = arg;
    moq_error e;
    j->st_reduce = moq_comm_bind(j->c, &e);
    if (j->abort_instead) {
        moq_comm_abort(j->c);
        return NULL;
    }
    for (int i = 0; i < N; i++) j->buf[i] = val(j->rank, i);
    float mine[N];
    memcpy(mine, j->buf, sizeof mine);
    if (j->st_reduce == MOQ_OK) j->st_reduce = moq_comm_all_reduce(j->c, j->buf, N, &e);
    j->st_gather = moq_comm_all_gather(j->c, mine, j->got, N, &e);
    return NULL;
}

static void run_group(moq_comm_backend b, int G, int aborter, job *jobs) {
    moq_comm_group *g = NULL;
    TU_OK(moq_comm_group_create(&g, b, G, N, true, err_));
    assert_int_equal(moq_comm_size(moq_comm_rank(g, 0)), G);
    pthread_t th[GMAX];
    for (int r = 0; r < G; r++) {
        jobs[r] = (job){.c = moq_comm_rank(g, r), .rank = r, .G = G, .abort_instead = r == aborter};
        assert_int_equal(pthread_create(&th[r], NULL, body, &jobs[r]), 0);
    }
    for (int r = 0; r < G; r++) pthread_join(th[r], NULL);
    moq_comm_group_free(g);
}

static void check_sums(const job *jobs, int G) {
    for (int r = 0; r < G; r++) {
        assert_int_equal(jobs[r].st_reduce, MOQ_OK);
        assert_int_equal(jobs[r].st_gather, MOQ_OK);
        for (int i = 0; i < N; i++) {
            float s = val(0, i);
            for (int q = 1; q < G; q++) s += val(q, i); /* rank order, f32 */
            if (jobs[r].buf[i] != s) fail_msg("rank %d element %d: all_reduce %.9g, sum in rank order %.9g", r, i, jobs[r].buf[i], s);
            for (int q = 0; q < G; q++) assert_true(jobs[r].got[q * N + i] == val(q, i));
        }
    }
}

static void test_cpu(void **s) {
    (void)s;
    static job jobs[GMAX];
    for (int G = 1; G <= GMAX; G++) {
        run_group(MOQ_COMM_CPU, G, -1, jobs);
        check_sums(jobs, G);
    }
}

static void test_cpu_abort(void **s) {
    (void)s;
    static job jobs[GMAX];
    run_group(MOQ_COMM_CPU, 4, 2, jobs);
    for (int r = 0; r < 4; r++)
        if (r != 2) assert_int_equal(jobs[r].st_reduce, MOQ_ERR_INTERNAL); /* released, not hung */
}

static void test_errors(void **s) {
    (void)s;
    moq_comm_group *g = NULL;
    moq_error e;
    TU_ERR(&e, moq_comm_group_create(&g, MOQ_COMM_CPU, 0, 16, true, &e), MOQ_ERR_INVALID_ARG, "moq_comm_group_create", "expected 1..64 ranks");
    TU_ERR(&e, moq_comm_group_create(&g, MOQ_COMM_CPU, 65, 16, true, &e), MOQ_ERR_INVALID_ARG, "moq_comm_group_create", "expected 1..64 ranks");
    TU_OK(moq_comm_group_create(&g, MOQ_COMM_CPU, 2, 16, true, err_));
    float x[32] = {0};
    TU_ERR(&e, moq_comm_all_reduce(moq_comm_rank(g, 0), x, 32, &e), MOQ_ERR_INTERNAL, "tensor parallel group", "the group was sized for 16");
    moq_comm_group_free(g);
}

static int gpus(void) {
    char info[256];
    return moq_device_check(MOQ_DEVICE_CUDA, info, sizeof info, NULL) == MOQ_OK;
}

static void test_nccl(void **s) {
    (void)s;
    moq_comm_group *g = NULL;
    moq_error e;
    const moq_status st = moq_comm_group_create(&g, MOQ_COMM_NCCL, 1, N, true, &e);
    if (st != MOQ_OK || !gpus()) {
        moq_comm_group_free(g);
        print_message("SKIP nccl: %s\n", st != MOQ_OK ? e.msg : "no usable GPU");
        skip();
    }
    moq_comm_group_free(g);
    static job jobs[GMAX];
    int G = 1; /* the most ranks NCCL accepts here: one per visible GPU */
    for (int k = 2; k <= GMAX; k++) {
        moq_comm_group *t = NULL;
        if (moq_comm_group_create(&t, MOQ_COMM_NCCL, k, N, true, &e) != MOQ_OK) {
            if (k == 2) TU_ERR(&e, MOQ_ERR_UNSUPPORTED, MOQ_ERR_UNSUPPORTED, "nccl", "NCCL refuses two ranks on one GPU");
            break;
        }
        moq_comm_group_free(t);
        G = k;
    }
    print_message("nccl: %d rank(s), one per GPU\n", G);
    run_group(MOQ_COMM_NCCL, G, -1, jobs);
    for (int r = 0; r < G; r++) { /* NCCL's ring may add in another order: within G ulps of the rank-order sum */
        assert_int_equal(jobs[r].st_reduce, MOQ_OK);
        assert_int_equal(jobs[r].st_gather, MOQ_OK);
        for (int i = 0; i < N; i++) {
            double sd = 0;
            for (int q = 0; q < G; q++) sd += val(q, i);
            assert_true(fabs(jobs[r].buf[i] - sd) <= G * 1.2e-7 * fabs(sd) + 1e-30);
            for (int q = 0; q < G; q++) assert_true(jobs[r].got[q * N + i] == val(q, i));
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_cpu_abort),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nccl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
