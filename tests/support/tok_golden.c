/* tok_golden.c — see tok_golden.h. Moved from tests/model/test_tokenizer*.c and test_chat.c. */
#include "tu.h"
#include "tok_golden.h"

cJSON *tu_load_tokenizer_golden(const char *rel, const char *magic) {
    char *p = tu_golden_tokenizer_path(rel);
    size_t len;
    char *text = tu_read_file(p, &len);
    free(p);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "magic")->valuestring, magic);
    assert_int_equal(cJSON_GetObjectItem(j, "version")->valueint, 1);
    return j;
}

size_t tu_unhex(const char *h, uint8_t **out) {
    size_t n = strlen(h) / 2;
    *out = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        (*out)[i] = (uint8_t)v;
    }
    (*out)[n] = 0;
    return n;
}

void tu_check_chat_row(const cJSON *r) {
    const char *cfg = cJSON_GetObjectItem(r, "config")->valuestring;
    moq_chat_template ct;
    TU_OK(moq_chat_template_from_config(&ct, cfg, strlen(cfg), err_));
    moq_chat_message msgs[8];
    size_t n = 0;
    for (const cJSON *m = cJSON_GetObjectItem(r, "messages")->child; m; m = m->next, n++) {
        msgs[n].role = cJSON_GetObjectItem(m, "role")->valuestring;
        msgs[n].content = cJSON_GetObjectItem(m, "content")->valuestring;
    }
    char out[2048];
    size_t ol;
    TU_OK(moq_chat_render(&ct, msgs, n, cJSON_IsTrue(cJSON_GetObjectItem(r, "add_generation_prompt")), out, sizeof out, &ol, err_));
    const char *want = cJSON_GetObjectItem(r, "text")->valuestring;
    if (strcmp(out, want) != 0)
        fail_msg("%s (%s): rendered\n[%s]\nexpected (jinja2)\n[%s]", cJSON_GetObjectItem(r, "template")->valuestring,
                 moq_chat_format_name(ct.format), out, want);
}
