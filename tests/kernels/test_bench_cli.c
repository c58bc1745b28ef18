/* test_bench_cli.c — `moq bench linear` runs for every format on a small shape and prints one
 * JSON object naming a registry row; bad arguments and a K the format cannot take give the
 * documented exit codes and messages. No timing is asserted (STYLE.md §10). */
#include "tu.h"

static void test_every_algo_json(void **state) {
    (void)state;
    static const char *const algos[] = {"nvfp4_w4a4", "nvfp4_w4a16", "fp8_tensor", "fp8_row", "fp8_blk128", "mxfp8", "bf16", "f16", "f32"};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        char cmd[512], out[4096];
        snprintf(cmd, sizeof cmd, "%s bench linear --algo %s --m 3 --n 40 --k 256 --threads 1 --hot-only --json", tu_moq_bin(), algos[i]);
        const int rc = tu_run(cmd, out, sizeof out);
        if (rc != 0) fail_msg("%s -> %d: %s", cmd, rc, out);
        char want[96];
        snprintf(want, sizeof want, "\"algo\":\"%s\"", algos[i]);
        assert_non_null(strstr(out, want));
        assert_non_null(strstr(out, "\"kernel\":\"cpu_"));
        assert_null(strstr(out, "nan")); /* JSON has no NaN: missing measurements are null */
    }
}

/* --device cuda: a bad device name is a usage error; without a usable GPU (or without CUDA in the
 * build) the bench stops with one "moq: moq_device: ..." line and MOQ_ERR_UNSUPPORTED; with one,
 * a small layer runs on a CUDA row. */
static void test_device_cuda(void **state) {
    (void)state;
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "%s bench linear --algo fp8_row --device tpu", tu_moq_bin());
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_INVALID_ARG);
    assert_non_null(strstr(out, "--device tpu, expected cpu or cuda"));
    snprintf(cmd, sizeof cmd, "%s bench linear --algo fp8_row --m 2 --n 64 --k 128 --device cuda --json", tu_moq_bin());
    const int rc = tu_run(cmd, out, sizeof out);
    moq_error e = {0};
    if (moq_device_check(MOQ_DEVICE_CUDA, NULL, 0, &e) == MOQ_OK) {
        if (rc != 0) fail_msg("%s -> %d: %s", cmd, rc, out);
        assert_non_null(strstr(out, "\"kernel\":\"cuda_sm90_"));
    } else {
        assert_int_equal(rc, MOQ_ERR_UNSUPPORTED);
        assert_non_null(strstr(out, "moq: moq_device: "));
        print_message("no GPU here: %s", out);
    }
}

static void test_errors(void **state) {
    (void)state;
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "%s bench linear --algo nvfp5 --hot-only", tu_moq_bin());
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_INVALID_ARG);
    assert_non_null(strstr(out, "nvfp5"));
    snprintf(cmd, sizeof cmd, "%s bench linear --algo mxfp8 --m 1 --n 16 --k 48 --hot-only", tu_moq_bin());
    assert_int_equal(tu_run(cmd, out, sizeof out), MOQ_ERR_TENSOR);
    assert_non_null(strstr(out, "not a multiple of 32"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_algo_json), cmocka_unit_test(test_errors),
                                       cmocka_unit_test(test_device_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
