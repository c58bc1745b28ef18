/* test_glob.c — the two exclude-pattern languages against Python: fnmatch.fnmatchcase (vLLM; the
 * expected values are what Python returns for each pair: `*` crosses dots, `?` one char, [seq],
 * [!seq]) and SGLang's regular expressions (`.`->`\.`, `*`->`.*`, then re.fullmatch), whose expected
 * values Python computed: tests/golden/exclude/expected.json, written by gen.py there. */
#include <cjson/cJSON.h>

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

/* SGLang's patterns: every (pattern, name) of tests/golden/exclude/expected.json, whose results
 * are Python's re.fullmatch of the converted pattern (or re.error: "invalid"), written by gen.py. */
static cJSON *load_golden(void) {
    char *p = tu_golden_path("exclude/expected.json");
    size_t len = 0;
    char *text = tu_read_file(p, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) fail_msg("%s: not JSON", p);
    const cJSON *magic = cJSON_GetObjectItemCaseSensitive(j, "magic");
    if (!cJSON_IsString(magic) || strcmp(magic->valuestring, "moq-exclude-golden") != 0) fail_msg("%s: wrong magic", p);
    free(text);
    free(p);
    return j;
}

static void test_sglang_regex_vs_python(void **state) {
    (void)state;
    cJSON *j = load_golden();
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "regex");
    int n = 0, hits = 0, invalid = 0;
    const char *compiled_for = NULL;
    moq_glob_regex re = {0};
    int rc = -1;
    char why[160];
    for (const cJSON *r = rows->child; r; r = r->next, n++) {
        const char *pat = cJSON_GetArrayItem(r, 0)->valuestring, *name = cJSON_GetArrayItem(r, 1)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(r, 2);
        if (!compiled_for || strcmp(compiled_for, pat) != 0) {
            moq_glob_regex_free(&re);
            rc = moq_glob_regex_compile(&re, pat, why, sizeof why);
            compiled_for = pat;
        }
        if (cJSON_IsString(want)) { /* "invalid": Python's re.compile raises */
            if (rc != MOQ_GLOB_RE_INVALID) fail_msg("pattern \"%s\": Python rejects it, moq gave rc %d (%s)", pat, rc, why);
            invalid++;
            continue;
        }
        if (rc != MOQ_GLOB_RE_OK) fail_msg("pattern \"%s\": Python compiles it, moq refused it: %s", pat, why);
        const bool got = moq_glob_regex_full(&re, name, strlen(name));
        if (got != cJSON_IsTrue(want)) {
            char ere[4096], w2[160];
            moq_glob_regex_translate(pat, ere, sizeof ere, w2, sizeof w2);
            fail_msg("fullmatch(\"%s\" -> POSIX %s, \"%s\") = %d, Python says %d", pat, ere, name, got, cJSON_IsTrue(want));
        }
        hits += got;
    }
    moq_glob_regex_free(&re);
    assert_true(n > 3000 && hits > 200 && invalid > 8); /* the file is the one gen.py writes */
    const cJSON *uns = cJSON_GetObjectItemCaseSensitive(j, "unsupported");
    for (const cJSON *u = uns->child; u; u = u->next) {
        moq_glob_regex r2;
        rc = moq_glob_regex_compile(&r2, u->valuestring, why, sizeof why);
        if (rc != MOQ_GLOB_RE_UNSUPPORTED) fail_msg("pattern \"%s\": expected refused as unsupported, rc %d", u->valuestring, rc);
        if (!why[0]) fail_msg("pattern \"%s\": refused without a reason", u->valuestring);
    }
    cJSON_Delete(j);
}

/* A few translations spelled out (the POSIX text is moq's own choice; what it matches is checked
 * against Python above): classes become explicit lists, `{,n}` gets its 0, `(?:` loses `?:`. */
static void test_sglang_regex_forms(void **state) {
    (void)state;
    static const struct { const char *p, *ere; } rows[] = {
        {"mtp*", "^(mtp.*)$"},
        {"model.layers.[0-2].mlp", "^(model\\.layers\\.[012]\\.mlp)$"},
        {"ab{,2}", "^(ab{0,2})$"},
        {"(?:a|b)c", "^((a|b)c)$"},
        {"[]a-]", "^([]a-])$"},
        {"a{", "^(a\\{)$"},
        {"x*?", "^(x.*)$"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char ere[256], why[160];
        assert_int_equal(moq_glob_regex_translate(rows[i].p, ere, sizeof ere, why, sizeof why), MOQ_GLOB_RE_OK);
        assert_string_equal(ere, rows[i].ere);
    }
    char small[16], why[160];
    assert_int_equal(moq_glob_regex_translate("model.layers.0.mlp", small, sizeof small, why, sizeof why), MOQ_GLOB_RE_UNSUPPORTED);
    assert_non_null(strstr(why, "longer than"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fnmatch), cmocka_unit_test(test_sglang_regex_vs_python),
                                       cmocka_unit_test(test_sglang_regex_forms)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
