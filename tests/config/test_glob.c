/* test_glob.c — the two exclude-pattern languages against Python's documented behaviour:
 * fnmatch.fnmatchcase (vLLM) and SGLang's `.`->`\.`, `*`->`.*` full match. Expected values are
 * what Python returns for each pair (fnmatch: `*` crosses dots, `?` one char, [seq], [!seq]). */
#include "tu.h"

#include "config/glob.h"

static void test_fnmatch(void **state) {
    (void)state;
    static const struct { const char *p, *s; bool want; } rows[] = {
        {"lm_head", "lm_head", true},
        {"lm_head", "model.lm_head", false},                 /* full match, not search      */
        {"*lm_head", "model.lm_head", true},
        {"model.layers.0*", "model.layers.0.mlp", true},
        {"model.layers.0*", "model.layers.05.mlp", true},    /* `*` takes any run            */
        {"model.layers.1.*", "model.layers.12.mlp", false},
        {"*.attn.*", "layers.3.attn.wq_a", true},
        {"*.attn.*", "layers.3.attn", false},
        {"mtp*", "mtp", true},
        {"mtp.*", "mtp", false},
        {"model.layers.?.mlp", "model.layers.7.mlp", true},
        {"model.layers.?.mlp", "model.layers.17.mlp", false},
        {"model.layers.[0-2].mlp", "model.layers.1.mlp", true},
        {"model.layers.[!0-2].mlp", "model.layers.1.mlp", false},
        {"model.layers.[!0-2].mlp", "model.layers.5.mlp", true},
        {"a[b", "a[b", true},                                /* unterminated class: literal  */
        {"LM_HEAD", "lm_head", false},                       /* case-sensitive (POSIX)       */
        {"**", "", true},
        {"", "", true},
        {"", "x", false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (moq_glob_fnmatch(rows[i].p, rows[i].s) != rows[i].want)
            fail_msg("fnmatch(%s, %s) != %d", rows[i].s, rows[i].p, rows[i].want);
}

static void test_dotstar(void **state) {
    (void)state;
    static const struct { const char *p, *s; bool want; } rows[] = {
        {"mtp*", "mtp_layers", true},
        {"mtp*", "model", false},
        {"model.layers.0.mlp", "model.layers.0.mlp", true},
        {"model.layers.0.mlp", "model.layers.0Xmlp", false}, /* `.` is escaped: literal dot   */
        {"*.attn.*", "layers.3.attn.wq", true},
        {"head", "head", true},
        {"head", "lm_head", false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (moq_glob_dotstar(rows[i].p, rows[i].s) != rows[i].want) fail_msg("dotstar(%s, %s) != %d", rows[i].s, rows[i].p, rows[i].want);
    assert_true(moq_glob_dotstar_n("mtp*", "mtp_layers.0", 10));
    assert_false(moq_glob_dotstar_n("mtp", "mtp_layers", 3) == false);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fnmatch), cmocka_unit_test(test_dotstar)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
