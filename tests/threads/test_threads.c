/* test_threads.c — thread safety of what moq shares between threads (issue #7):
 *   - one moq_linear, run from 4 threads at once, each with its own workspace and output, gives
 *     bit-identical results to the same runs made one after another (moq.h: "a moq_linear is
 *     immutable after create: concurrent runs with separate y and ws are safe"), for every weight
 *     format pair and several M;
 *   - checkpoints and quantization configs opened from 4 threads at once (no shared parse state)
 *     give the same tensors and decisions as one open.
 * The oracle is the serial run: a race shows as a difference here, and as a report under
 * ThreadSanitizer (scripts/tsan.sh builds this file with -fsanitize=thread). Inner OpenMP
 * parallelism is set by MOQ_TEST_INNER_THREADS (default 2).
 */
#include "tu.h"

#include <pthread.h>

#include "../kernels/kref.h"
#include "config/modules.h"

enum { N_THREADS = 4, ITERS = 6, N_ = 64, K_ = 256 };
static const int64_t Ms[] = {1, 3, 17};
enum { N_M = sizeof Ms / sizeof Ms[0] };

static int inner_threads(void) {
    const char *s = getenv("MOQ_TEST_INNER_THREADS");
    return s && *s ? atoi(s) : 2;
}

typedef struct job {
    const moq_linear *l;
    const float      *x;         /* f32 [max M, K] */
    float            *y[N_M];    /* this thread's outputs, one per M */
    const float      *ref[N_M];  /* serial results */
    int               mismatches;
    moq_status        st;
} job;

static void *run_linear(void *arg) {
    job *j = arg;
    moq_error e = {0};
    for (int it = 0; it < ITERS; it++)
        for (int mi = 0; mi < N_M; mi++) {
            const int64_t M = Ms[(mi + it) % N_M]; /* threads interleave different M */
            const int k = (mi + it) % N_M;
            const size_t wsz = moq_linear_workspace_size(j->l, M);
            void *ws = malloc(wsz ? wsz : 1);
            moq_status st = moq_linear_run(j->l, j->x, MOQ_ELEM_F32, M, j->y[k], MOQ_ELEM_F32, ws, wsz, &e);
            free(ws);
            if (st != MOQ_OK) j->st = st;
            if (memcmp(j->y[k], j->ref[k], (size_t)(M * N_) * sizeof(float)) != 0) j->mismatches++;
        }
    return NULL;
}

static void test_linear_concurrent(void **state) {
    (void)state;
    static const tpair pairs[] = {TP_BF16, TP_FP8_TENSOR, TP_FP8_ROW, TP_FP8_BLK128, TP_NVFP4, TP_NVFP4_W4A16, TP_MXFP8};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        tw t = tw_make(pairs[p], N_, K_, 1, 0);
        moq_linear_opts o = moq_linear_opts_default();
        o.name = "test.threads";
        o.n_threads = inner_threads();
        moq_linear *l = NULL;
        TU_OK(moq_linear_create_from_weight(&l, &t.w, &o, err_));
        float *x = malloc(sizeof(float) * 17 * K_);
        fill(x, 17 * K_, 1.0f);
        /* Serial reference runs. */
        float *ref[N_M];
        for (int mi = 0; mi < N_M; mi++) {
            ref[mi] = malloc(sizeof(float) * (size_t)(Ms[mi] * N_));
            const size_t wsz = moq_linear_workspace_size(l, Ms[mi]);
            void *ws = malloc(wsz ? wsz : 1);
            TU_OK(moq_linear_run(l, x, MOQ_ELEM_F32, Ms[mi], ref[mi], MOQ_ELEM_F32, ws, wsz, err_));
            free(ws);
            for (int64_t i = 0; i < Ms[mi] * N_; i++)
                if (!isfinite(ref[mi][i])) fail_msg("%s: serial run gives %g at %lld", tpair_name[pairs[p]], (double)ref[mi][i], (long long)i);
        }
        job jobs[N_THREADS];
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            jobs[i] = (job){.l = l, .x = x};
            for (int mi = 0; mi < N_M; mi++) jobs[i].y[mi] = malloc(sizeof(float) * (size_t)(Ms[mi] * N_)), jobs[i].ref[mi] = ref[mi];
            assert_int_equal(pthread_create(&th[i], NULL, run_linear, &jobs[i]), 0);
        }
        for (int i = 0; i < N_THREADS; i++) {
            pthread_join(th[i], NULL);
            if (jobs[i].st != MOQ_OK || jobs[i].mismatches)
                fail_msg("%s (kernel %s): thread %d: status %s, %d of %d runs differ from the serial run", tpair_name[pairs[p]],
                         moq_linear_kernel_name(l), i, moq_status_str(jobs[i].st), jobs[i].mismatches, ITERS * N_M);
            for (int mi = 0; mi < N_M; mi++) free(jobs[i].y[mi]);
        }
        for (int mi = 0; mi < N_M; mi++) free(ref[mi]);
        free(x);
        moq_linear_free(l);
        tw_free(&t);
    }
}

/* ---- checkpoints and configs opened concurrently ---------------------------------------------- */

static char *g_dir;

typedef struct open_job {
    size_t     tensors, modules, problems;
    char       algo[32];
    moq_status st;
} open_job;

static void *open_all(void *arg) {
    open_job *j = arg;
    moq_error e = {0};
    for (int it = 0; it < 3; it++) {
        moq_checkpoint *c = NULL;
        moq_qconfig *q = NULL;
        moq_modules m = {0};
        if ((j->st = moq_checkpoint_open(&c, g_dir, NULL, &e)) != MOQ_OK) return NULL;
        if ((j->st = moq_qconfig_open(&q, g_dir, MOQ_COMPAT_MOQ, &e)) == MOQ_OK && (j->st = moq_modules_build(&m, c, q, &e)) == MOQ_OK &&
            (j->st = moq_modules_check(&m, c, q, true, &e)) == MOQ_OK) {
            j->tensors = moq_checkpoint_tensor_count(c);
            j->modules = (size_t)m.n;
            j->problems = (size_t)m.n_probs;
            snprintf(j->algo, sizeof j->algo, "%s", moq_qconfig_quant_algo(q));
        }
        moq_modules_free(&m);
        moq_qconfig_free(q);
        moq_checkpoint_free(c);
        if (j->st != MOQ_OK) return NULL;
    }
    return NULL;
}

static void test_open_concurrent(void **state) {
    (void)state;
    open_job serial = {0};
    open_all(&serial);
    assert_int_equal(serial.st, MOQ_OK);
    assert_int_equal(serial.problems, 0);
    assert_string_equal(serial.algo, "NVFP4");
    assert_int_equal(serial.tensors, 3 + 2 * (2 + 7 * 4)); /* synth: 2 layers, 7 NVFP4 linears of 4 tensors, 2 norms; embed, norm, lm_head */
    open_job jobs[N_THREADS] = {0};
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, open_all, &jobs[i]), 0);
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].st, MOQ_OK);
        assert_int_equal(jobs[i].tensors, serial.tensors);
        assert_int_equal(jobs[i].modules, serial.modules);
        assert_int_equal(jobs[i].problems, 0);
        assert_string_equal(jobs[i].algo, serial.algo);
    }
}

static int setup(void **state) {
    (void)state;
    g_dir = tu_tmpdir("threads_ck");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' synth '%s' --algo NVFP4 --layers 2 --hidden 64 --inter 128 --heads 4 --kv-heads 2 --vocab 96 --shards 2 >/dev/null",
             tu_moq_bin(), g_dir);
    return tu_run(cmd, NULL, 0);
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(g_dir);
    free(g_dir);
    return 0;
}

int main(void) {
    g_seed = 12345; /* kref.h's generator; fixed so failures reproduce */
    g_rng = g_seed;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_linear_concurrent), cmocka_unit_test(test_open_concurrent)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
