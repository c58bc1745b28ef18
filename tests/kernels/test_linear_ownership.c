/* test_linear_ownership.c — one copy of each weight (issue 14): the contract in kernels.h that a
 * row with a packed layout never reads the canonical codes or u8 block scales in run(), so the
 * loader may free them after create (moq_linear_forget_canonical).
 *
 * For every CPU row of the registry this machine can run: create the layer on a random canonical
 * weight, run it (y1), then overwrite what moq_linear_forget_canonical says the row no longer reads
 * with zeros (a zero code or a zero block scale changes every output a read of it feeds) and run
 * again (y2): y2 must equal y1 bit for bit. Then the buffers are freed and the layer runs a third
 * time, which the ASan build turns into a use-after-free report if any row still reads them.
 * The oracle is the row's own first output: what is tested is that nothing changes. `_ref` rows
 * run on the canonical weight and must say so (0). */
#include "tu.h"

#include <time.h>

#include "klin.h"

static const int64_t N_ = 40, K_ = 256, M_ = 3;

static void run_once(const moq_linear *l, const float *x, float *y, int64_t N) {
    for (int64_t i = 0; i < M_ * N; i++) y[i] = NAN;
    const size_t wsz = moq_linear_workspace_size(l, M_);
    void *ws = malloc(wsz);
    TU_OK(moq_linear_run(l, x, MOQ_ELEM_F32, M_, y, MOQ_ELEM_F32, ws, wsz, err_));
    free(ws);
}

static void test_packed_rows_never_read_canonical(void **state) {
    (void)state;
    const uint32_t feat = moq_cpu_features();
    int checked = 0;
    for (size_t i = 0; i < moq_kernel_table_len; i++) {
        const moq_kernel *k = &moq_kernel_table[i];
        if (k->target == MOQ_TARGET_CUDA_SM90 || (k->need & feat) != k->need) continue;
        static const tpair map[MOQ_PAIR_COUNT] = {
            [MOQ_PAIR_F32] = TP_F32, [MOQ_PAIR_BF16] = TP_BF16, [MOQ_PAIR_F16] = TP_F16, [MOQ_PAIR_FP8_TENSOR] = TP_FP8_TENSOR,
            [MOQ_PAIR_FP8_ROW] = TP_FP8_ROW, [MOQ_PAIR_FP8_BLK128] = TP_FP8_BLK128, [MOQ_PAIR_NVFP4] = TP_NVFP4,
            [MOQ_PAIR_NVFP4_W4A16] = TP_NVFP4_W4A16, [MOQ_PAIR_MXFP8] = TP_MXFP8,
        };
        const int64_t N = k->pair == MOQ_PAIR_FP8_BLK128 ? 130 : N_; /* a partial last 128-row block */
        tw t = tw_make(map[k->pair], N, K_, 2, 1);
        char why[160];
        if (k->supports && !k->supports(&t.w, why, sizeof why)) { tw_free(&t); continue; }
        moq_linear_opts o = moq_linear_opts_default();
        o.name = k->name, o.kernel = k->name, o.n_threads = 2;
        moq_linear *l = NULL;
        TU_OK(moq_linear_create_from_weight(&l, &t.w, &o, err_));
        float *x = malloc((size_t)(M_ * K_) * 4), *y1 = malloc((size_t)(M_ * N) * 4), *y2 = malloc((size_t)(M_ * N) * 4);
        fill(x, (size_t)(M_ * K_), urand(0.1f, 10.0f));
        run_once(l, x, y1, N);
        const unsigned gone = moq_linear_forget_canonical(l);
        if (k->target == MOQ_TARGET_CPU_REF) {
            if (gone) fail_msg("%s runs on the canonical weight, but forget_canonical returned %u", k->name, gone);
        } else {
            if (!(gone & MOQ_CANON_CODES)) fail_msg("%s packs its weight, but forget_canonical kept the codes (%u)", k->name, gone);
            const bool u8_scales = t.w.w.scale_elem == MOQ_ELEM_E4M3 || t.w.w.scale_elem == MOQ_ELEM_E8M0;
            if (u8_scales != !!(gone & MOQ_CANON_BLOCK_SCALES))
                fail_msg("%s: forget_canonical returned %u for a weight %s u8 block scales", k->name, gone, u8_scales ? "with" : "without");
            const size_t nk = (size_t)(N * K_);
            memset(t.q, 0, t.w.w.elem == MOQ_ELEM_E2M1 ? nk / 2 : nk * moq_elem_bytes(t.w.w.elem, 1));
            if (gone & MOQ_CANON_BLOCK_SCALES) memset(t.scale, 0, nk / (size_t)t.w.w.group_cols);
            run_once(l, x, y2, N);
            if (memcmp(y1, y2, (size_t)(M_ * N) * 4) != 0)
                fail_msg("%s: output changed after its canonical codes/block scales were zeroed: run() still reads them", k->name);
            free(t.q), t.q = NULL;
            if (gone & MOQ_CANON_BLOCK_SCALES) free(t.scale), t.scale = NULL;
            run_once(l, x, y2, N); /* ASan: a read of the freed buffers is reported here */
            checked++;
        }
        moq_linear_free(l);
        free(x), free(y1), free(y2);
        tw_free(&t);
    }
    print_message("%d packed rows hold everything they read\n", checked);
    assert_true(checked > 0);
}

int main(void) {
    g_seed = (unsigned)time(NULL);
    g_rng = g_seed;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_rows_never_read_canonical),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r) fprintf(stderr, "seed %u\n", g_seed);
    return r;
}
