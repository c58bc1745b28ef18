/* test_batch.c — the batched decode API (moq.h "batched decode", src/model/batch.c).
 *
 * Oracle: moq_model_prefill / moq_model_decode of each sequence alone on its own model handle
 * (tested against fp64 forwards in test_model.c). Sequences of different prompt lengths are run
 * through one moq_batch with chunked prefills mixed into decode steps, page tables that interleave
 * (sequences take pages in turn, one is freed mid-way and its pages reused), and more rows than
 * the 32-row workspace; every logits row must equal the alone run to f32 rounding, with the same
 * argmax (close_logits says why not bit for bit). Then the pool rules: reserve, exhaustion (nothing taken),
 * pages back on free, and every bad argument refused with nothing changed.
 * Checkpoints come from `moq synth` (MOQ_BIN).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "moq.h"
#include "tu.h"

#define NSEQ 6
#define NDEC 5

static char *synth(const char *tag, const char *args) {
    char *dir = tu_tmpdir(tag), cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' synth '%s/m' %s", tu_moq_bin(), dir, args);
    const int rc = tu_run(cmd, out, sizeof out);
    if (rc != 0) fail_msg("%s: exit %d: %s", cmd, rc, out);
    return dir;
}

static moq_model *open_model(const char *dir, int64_t ctx) {
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 2, o.ctx = ctx;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, path, &o, err_));
    return m;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

/* Equal to f32 rounding, same argmax. The CPU kernels choose their blocking by M (rows in the
 * call), so a row's f32 sums may be added in another order when other rows share the call: measured
 * differences are ~3e-7 on logits of magnitude ~1 (one or two ulps). 1e-5 relative to the largest
 * |logit| is ~100 ulps: far below any real difference (a wrong position or page shifts logits by
 * 1e-2 or more), and the argmax must be the same. */
static bool close_logits(const float *got, const float *ref, int64_t V) {
    double mx = 1, md = 0;
    for (int64_t q = 0; q < V; q++) mx = fabs(ref[q]) > mx ? fabs(ref[q]) : mx;
    for (int64_t q = 0; q < V; q++) md = fabs((double)got[q] - ref[q]) > md ? fabs((double)got[q] - ref[q]) : md;
    if (md > 1e-5 * mx || argmax(got, V) != argmax(ref, V)) {
        fprintf(stderr, "max |diff| %g (largest |logit| %g), argmax %d vs %d\n", md, mx, argmax(got, V), argmax(ref, V));
        return false;
    }
    return true;
}

/* Every sequence alone, then all in one batch; logits compared bit for bit. */
static void batch_equals_alone(const char *args, int64_t page_tokens) {
    static const int64_t plen[NSEQ] = {3, 45, 1, 17, 70, 9}; /* 45, 70: prefill over the 32-row chunk */
    char *dir = synth("batch", args);
    moq_model *alone = open_model(dir, 128), *bm = open_model(dir, 128);
    const int64_t V = moq_model_vocab_size(alone);
    int32_t prompts[NSEQ][80], dec[NSEQ][NDEC + 1];
    float *ref = malloc((size_t)(NSEQ * (NDEC + 1) * V) * sizeof(float)), *got = malloc((size_t)(NSEQ * V) * sizeof(float));
    uint64_t st = 7;
    for (int s = 0; s < NSEQ; s++)
        for (int64_t t = 0; t < plen[s]; t++) st = st * 6364136223846793005ull + 1442695040888963407ull, prompts[s][t] = (int32_t)((st >> 33) % (uint64_t)V);
    for (int s = 0; s < NSEQ; s++) { /* alone: prompt, then NDEC greedy steps */
        moq_model_reset(alone);
        TU_OK(moq_model_prefill(alone, prompts[s], plen[s], NULL, err_));
        for (int k = 0; k <= NDEC; k++) {
            memcpy(ref + (s * (NDEC + 1) + k) * V, moq_model_logits(alone), (size_t)V * sizeof(float));
            dec[s][k] = argmax(moq_model_logits(alone), V);
            if (k < NDEC) TU_OK(moq_model_decode(alone, dec[s][k], err_));
        }
    }
    moq_batch_opts bo = moq_batch_opts_default();
    bo.page_tokens = page_tokens;
    moq_batch *b = NULL;
    TU_OK(moq_batch_create(&b, bm, &bo, err_));
    const int64_t total = moq_batch_pages_total(b);
    moq_seq *seq[NSEQ], *spare = NULL;
    for (int s = 0; s < NSEQ; s++) TU_OK(moq_seq_create(&seq[s], b, err_));
    /* a spare sequence takes pages first and is freed mid-way: its pages are reused by others */
    TU_OK(moq_seq_create(&spare, b, err_));
    int32_t junk[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    TU_OK(moq_seq_prefill(b, spare, junk, 20, NULL, err_));
    /* prefill in chunks of 8 tokens, sequences in turn (their pages interleave in the pool) */
    int64_t done[NSEQ] = {0};
    for (bool more = true; more;) {
        more = false;
        moq_batch_item it[NSEQ];
        int64_t n = 0;
        for (int s = 0; s < NSEQ; s++) {
            if (done[s] == plen[s]) continue;
            const int64_t c = plen[s] - done[s] < 8 ? plen[s] - done[s] : 8;
            it[n++] = (moq_batch_item){seq[s], prompts[s] + done[s], c, done[s] + c == plen[s] ? got + s * V : NULL, NULL};
            done[s] += c;
            more = true;
        }
        if (n) TU_OK(moq_batch_run(b, it, n, err_));
        if (spare) moq_seq_free(spare), spare = NULL;
    }
    for (int k = 0; k <= NDEC; k++) {
        for (int s = 0; s < NSEQ; s++)
            if (!close_logits(got + s * V, ref + (s * (NDEC + 1) + k) * V, V))
                fail_msg("%s: sequence %d (prompt %lld) step %d: batched logits differ from the sequence alone", args, s, (long long)plen[s], k);
        if (k == NDEC) break;
        int32_t tok[NSEQ];
        for (int s = 0; s < NSEQ; s++) tok[s] = dec[s][k];
        if (k % 2 == 0) {
            TU_OK(moq_batch_step(b, seq, tok, NSEQ, got, err_));
        } else { /* logits and the library's argmax of the same rows */
            moq_batch_item it[NSEQ];
            int32_t ids[NSEQ];
            for (int s = 0; s < NSEQ; s++) it[s] = (moq_batch_item){seq[s], &tok[s], 1, got + s * V, &ids[s]};
            TU_OK(moq_batch_run(b, it, NSEQ, err_));
            for (int s = 0; s < NSEQ; s++)
                if (ids[s] != argmax(got + s * V, V)) fail_msg("%s: sequence %d step %d: argmax %d, the logits' is %d", args, s, k, ids[s], argmax(got + s * V, V));
        }
    }
    for (int s = 0; s < NSEQ; s++) assert_int_equal(moq_seq_pos(seq[s]), plen[s] + NDEC);
    for (int s = 0; s < NSEQ; s++) moq_seq_free(seq[s]);
    assert_int_equal(moq_batch_pages_free(b), total);
    assert_int_equal(moq_batch_seq_count(b), 0);
    moq_batch_free(b);
    moq_model_free(alone);
    moq_model_free(bm);
    free(ref);
    free(got);
    tu_rmtree(dir);
    free(dir);
}

static void test_llama_bf16(void **st) { (void)st; batch_equals_alone("--algo BF16 --layers 2 --vocab 512 --hidden 128 --inter 256", 16); }
static void test_llama_nvfp4(void **st) { (void)st; batch_equals_alone("--algo NVFP4 --layers 2 --vocab 512 --hidden 128 --inter 256", 4); }
static void test_llama_fp8(void **st) { (void)st; batch_equals_alone("--algo FP8 --layers 2 --vocab 512 --hidden 128 --inter 256", 16); }
static void test_llama_w4a16(void **st) { (void)st; batch_equals_alone("--algo W4A16_NVFP4 --layers 2 --vocab 512 --hidden 128 --inter 256", 7); }
static void test_qwen3moe_nvfp4(void **st) {
    (void)st;
    batch_equals_alone("--arch qwen3moe --algo NVFP4 --layers 1 --vocab 512 --hidden 128 --inter 128 --experts 4 --top-k 2", 16);
}

/* The three ways a greedy step gets its ids give the same tokens: logits rows and the test's own
 * argmax, moq_batch_step_greedy (next aliasing tokens), and runs that mix rows wanting logits,
 * ids or both. */
static void test_greedy_paths(void **st) {
    (void)st;
    enum { B = 5, STEPS = 6 };
    char *dir = synth("batchgreedy", "--algo BF16 --layers 2 --vocab 512 --hidden 128 --inter 256");
    moq_model *m = open_model(dir, 64);
    const int64_t V = moq_model_vocab_size(m);
    float *lg = malloc((size_t)(B * V) * sizeof(float));
    int32_t ids[3][STEPS][B];
    for (int way = 0; way < 3; way++) {
        moq_batch_opts bo = moq_batch_opts_default();
        moq_batch *b = NULL;
        TU_OK(moq_batch_create(&b, m, &bo, err_));
        moq_seq *seq[B];
        int32_t tok[B];
        for (int s = 0; s < B; s++) {
            const int32_t prompt[3] = {(int32_t)(11 * s + 1), (int32_t)(7 * s + 3), (int32_t)(5 * s + 2)};
            TU_OK(moq_seq_create(&seq[s], b, err_));
            TU_OK(moq_seq_prefill(b, seq[s], prompt, 1 + s % 3, lg, err_));
            tok[s] = argmax(lg, V);
        }
        for (int k = 0; k < STEPS; k++) {
            if (way == 0) {
                TU_OK(moq_batch_step(b, seq, tok, B, lg, err_));
                for (int s = 0; s < B; s++) tok[s] = argmax(lg + s * V, V);
            } else if (way == 1) {
                TU_OK(moq_batch_step_greedy(b, seq, tok, B, tok, err_));
            } else {
                moq_batch_item it[B];
                int32_t got[B] = {-1, -1, -1, -1, -1};
                for (int s = 0; s < B; s++) {
                    const int w = (s + k) % 3; /* 0: logits, 1: ids, 2: both */
                    it[s] = (moq_batch_item){seq[s], &tok[s], 1, w != 1 ? lg + s * V : NULL, w != 0 ? &got[s] : NULL};
                }
                TU_OK(moq_batch_run(b, it, B, err_));
                for (int s = 0; s < B; s++) {
                    const int w = (s + k) % 3;
                    if (w == 2) assert_int_equal(got[s], argmax(lg + s * V, V));
                    tok[s] = w == 0 ? argmax(lg + s * V, V) : got[s];
                }
            }
            memcpy(ids[way][k], tok, sizeof tok);
        }
        for (int s = 0; s < B; s++) moq_seq_free(seq[s]);
        moq_batch_free(b);
    }
    for (int k = 0; k < STEPS; k++)
        for (int s = 0; s < B; s++)
            if (ids[1][k][s] != ids[0][k][s] || ids[2][k][s] != ids[0][k][s])
                fail_msg("step %d sequence %d: logits + argmax %d, greedy step %d, mixed run %d", k, s, ids[0][k][s], ids[1][k][s], ids[2][k][s]);
    moq_error e;
    TU_ERR(&e, moq_batch_step_greedy(NULL, NULL, NULL, 1, NULL, &e), MOQ_ERR_INVALID_ARG, "moq_batch_step_greedy", "must not be NULL");
    moq_model_free(m);
    free(lg);
    tu_rmtree(dir);
    free(dir);
}

/* Pool accounting and argument checks: each failure leaves pages and positions as they were. */
static void test_pool_rules(void **st) {
    (void)st;
    char *dir = synth("batchpool", "--algo BF16 --layers 1 --vocab 256 --hidden 64 --inter 128");
    moq_model *m = open_model(dir, 64);
    moq_batch_opts bo = moq_batch_opts_default();
    bo.page_tokens = 16;
    moq_batch *b = NULL;
    moq_error e;
    bo.kv_bytes = 1000; /* less than one full context */
    TU_ERR(&e, moq_batch_create(&b, m, &bo, &e), MOQ_ERR_INVALID_ARG, "kv_bytes", "needs 4 pages");
    assert_null(b);
    moq_batch_opts tmp = bo;
    tmp.kv_bytes = 0;
    TU_OK(moq_batch_create(&b, m, &tmp, err_));
    const uint64_t pb = moq_batch_page_bytes(b);
    moq_batch_free(b);
    bo.kv_bytes = 6 * pb; /* 6 pages of 16 positions */
    TU_OK(moq_batch_create(&b, m, &bo, err_));
    assert_int_equal(moq_batch_pages_total(b), 6);
    moq_seq *a = NULL, *c = NULL;
    TU_OK(moq_seq_create(&a, b, err_));
    TU_OK(moq_seq_create(&c, b, err_));
    TU_OK(moq_seq_reserve(a, 64, err_)); /* 4 pages */
    assert_int_equal(moq_seq_pages(a), 4);
    TU_ERR(&e, moq_seq_reserve(c, 40, &e), MOQ_ERR_NOMEM, "kv pool", "3 more pages needed, 2 of 6 free");
    assert_int_equal(moq_seq_pages(c), 0);
    TU_ERR(&e, moq_seq_reserve(c, 65, &e), MOQ_ERR_INVALID_ARG, "", "65 positions, the context holds 64");
    int32_t toks[40] = {0};
    float *lg = malloc(256 * sizeof(float));
    TU_ERR(&e, moq_seq_prefill(b, c, toks, 40, lg, &e), MOQ_ERR_NOMEM, "kv pool", "needs 3 more pages");
    assert_int_equal(moq_seq_pos(c), 0);
    assert_int_equal(moq_batch_pages_free(b), 2);
    toks[3] = 256;
    TU_ERR(&e, moq_seq_prefill(b, a, toks, 5, lg, &e), MOQ_ERR_INVALID_ARG, "", "token 256 at index 3, expected [0, 256)");
    toks[3] = 0;
    moq_batch_item dup[2] = {{a, toks, 1, NULL, NULL}, {a, toks, 1, NULL, NULL}};
    TU_ERR(&e, moq_batch_run(b, dup, 2, &e), MOQ_ERR_INVALID_ARG, "moq_batch_run", "same sequence");
    TU_OK(moq_seq_prefill(b, a, toks, 40, lg, err_));
    TU_ERR(&e, moq_seq_prefill(b, a, toks, 25, lg, &e), MOQ_ERR_INVALID_ARG, "", "40 cached + 25 new tokens exceed the context of 64");
    assert_int_equal(moq_seq_pos(a), 40);
    TU_OK(moq_seq_prefill(b, c, toks, 20, lg, err_)); /* 2 pages taken on the run */
    assert_int_equal(moq_batch_pages_free(b), 0);
    moq_seq_free(a);
    assert_int_equal(moq_batch_pages_free(b), 4);
    moq_seq_free(c);
    assert_int_equal(moq_batch_pages_free(b), 6);
    moq_batch_free(b);
    moq_model_free(m);
    free(lg);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_bf16),  cmocka_unit_test(test_llama_nvfp4),    cmocka_unit_test(test_llama_fp8),
        cmocka_unit_test(test_llama_w4a16), cmocka_unit_test(test_qwen3moe_nvfp4), cmocka_unit_test(test_pool_rules), cmocka_unit_test(test_greedy_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
