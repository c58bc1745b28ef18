/* test_error.c — status names, "where: msg" formatting, MOQ_FAIL filling the source location. */
#include "tu.h"

#include "core/error.h"
#include "core/strmap.h"

static moq_status fail_here(moq_error *err) {
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, "model.layers.0.mlp.down_proj.weight_scale", "dtype %s, expected %s", "BF16", "F8_E4M3");
}

static void test_fail_fills_error(void **state) {
    (void)state;
    moq_error e = {0};
    assert_int_equal(fail_here(&e), MOQ_ERR_TENSOR);
    char buf[512];
    moq_error_format(&e, buf, sizeof buf);
    assert_string_equal(buf, "model.layers.0.mlp.down_proj.weight_scale: dtype BF16, expected F8_E4M3");
    assert_non_null(strstr(e.src_file, "test_error.c"));
    assert_true(e.src_line > 0);
    assert_int_equal(fail_here(NULL), MOQ_ERR_TENSOR); /* NULL err is allowed */
}

static void test_format_without_where(void **state) {
    (void)state;
    moq_error e = {0};
    MOQ_FAIL(&e, MOQ_ERR_IO, "", "plain message");
    char buf[64];
    moq_error_format(&e, buf, sizeof buf);
    assert_string_equal(buf, "plain message");
}

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(moq_status_str(MOQ_OK), "MOQ_OK");
    assert_string_equal(moq_status_str(MOQ_ERR_FORMAT), "MOQ_ERR_FORMAT");
    assert_string_equal(moq_status_str((moq_status)999), "MOQ_ERR_UNKNOWN");
    for (int s = 0; s < MOQ_STATUS_COUNT; s++) assert_true(strlen(moq_status_meaning((moq_status)s)) > 0);
    /* Exit codes are part of the CLI contract: the numbers never change. */
    assert_int_equal(MOQ_ERR_FORMAT, 3);
    assert_int_equal(MOQ_ERR_TENSOR, 5);
    assert_int_equal(MOQ_ERR_INTERNAL, 9);
}

static void test_version(void **state) {
    (void)state;
    assert_int_equal(moq_version(), (MOQ_VERSION_MAJOR << 16) | (MOQ_VERSION_MINOR << 8) | MOQ_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", MOQ_VERSION_MAJOR, MOQ_VERSION_MINOR, MOQ_VERSION_PATCH);
    assert_string_equal(moq_version_string(), want);
}

static void test_strmap(void **state) {
    (void)state;
    moq_strmap m;
    assert_true(moq_strmap_init(&m, 1000));
    char names[1000][16];
    for (int i = 0; i < 1000; i++) {
        snprintf(names[i], sizeof names[i], "t.%d", i);
        assert_true(moq_strmap_put(&m, names[i], (size_t)i, NULL));
    }
    size_t old = 0, v = 0;
    assert_false(moq_strmap_put(&m, "t.17", 5, &old));
    assert_int_equal(old, 17);
    for (int i = 0; i < 1000; i++) {
        assert_true(moq_strmap_get(&m, names[i], &v));
        assert_int_equal(v, (size_t)i);
    }
    assert_false(moq_strmap_get(&m, "t.1000", &v));
    moq_strmap_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_fills_error), cmocka_unit_test(test_format_without_where),
        cmocka_unit_test(test_status_names),     cmocka_unit_test(test_version),
        cmocka_unit_test(test_strmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
