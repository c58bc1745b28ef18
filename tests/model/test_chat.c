/* test_chat.c — ChatML and Llama-3 chat formatting against jinja2.
 *
 * Oracle: tests/golden/tokenizer/expected.json "chat" rows, written by gen.py: jinja2 renders each
 * model's own chat template (as transformers' apply_chat_template does) and the `tokenizers`
 * package encodes the result. moq must produce the same text and the same ids, picking the format
 * and the default system prompt from tokenizer_config.json alone. Also: format detection, the
 * list form of chat_template, unknown templates, buffer too small.
 */
#include "tu.h"
#include "tok_golden.h"

#include <cjson/cJSON.h>



static void test_golden_chats(void **state) {
    (void)state;
    char *p = tu_golden_tokenizer_path("expected.json");
    size_t len;
    char *text = tu_read_file(p, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    assert_non_null(j);
    int n_rows = 0;
    for (const cJSON *r = cJSON_GetObjectItem(j, "chat")->child; r; r = r->next, n_rows++) {
        const char *style = cJSON_GetObjectItem(r, "tokenizer")->valuestring;
        moq_tokenizer *t = tu_open_golden_tokenizer(style);
        const moq_chat_template *ct = moq_tokenizer_chat_template(t);
        assert_int_not_equal(ct->format, MOQ_CHAT_NONE);
        moq_chat_message msgs[8];
        size_t n = 0;
        for (const cJSON *m = cJSON_GetObjectItem(r, "messages")->child; m; m = m->next, n++) {
            msgs[n].role = cJSON_GetObjectItem(m, "role")->valuestring;
            msgs[n].content = cJSON_GetObjectItem(m, "content")->valuestring;
        }
        bool gen = cJSON_IsTrue(cJSON_GetObjectItem(r, "add_generation_prompt"));
        char out[2048];
        size_t ol;
        TU_OK(moq_chat_render(ct, msgs, n, gen, out, sizeof out, &ol, err_));
        const char *want = cJSON_GetObjectItem(r, "text")->valuestring;
        if (strcmp(out, want) != 0)
            fail_msg("%s (%s): rendered\n[%s]\nexpected (jinja2)\n[%s]\nHINT: re-run python3 tests/golden/tokenizer/gen.py if the "
                     "golden files changed", style, moq_chat_format_name(ct->format), out, want);
        assert_int_equal(ol, strlen(want));
        int32_t ids[1024];
        size_t ni;
        TU_OK(moq_tokenizer_encode(t, out, ol, 0, ids, 1024, &ni, err_));
        const cJSON *wids = cJSON_GetObjectItem(r, "ids");
        assert_int_equal(ni, (size_t)cJSON_GetArraySize(wids));
        size_t i = 0;
        for (const cJSON *w = wids->child; w; w = w->next, i++) assert_int_equal(ids[i], w->valueint);
        moq_tokenizer_free(t);
    }
    assert_int_equal(n_rows, 18); /* 3 styles x 3 conversations x add_generation_prompt */
    cJSON_Delete(j);
    free(text);
    free(p);
}

/* Templates of other models (Qwen2.5), from the config text alone, against jinja2. */
static void test_golden_extra_templates(void **state) {
    (void)state;
    cJSON *j = tu_load_tokenizer_golden("expected.json", "moq-tokenizer-golden");
    int n_rows = 0;
    for (const cJSON *r = cJSON_GetObjectItem(j, "chat_extra")->child; r; r = r->next, n_rows++) tu_check_chat_row(r);
    assert_int_equal(n_rows, 6);
    cJSON_Delete(j);
}

/* Gemma 4 and Qwen3.5 (tests/golden/tokenizer/chat_templates.json, gen_chat_templates.py): jinja2
 * renderings of templates written to do what the published ones do for text conversations (the
 * Gemma 4 one checked there against google's chat_template.jinja: the same text for every row).
 * Gemma 4: system turn, <|turn>/<turn|>, "model", trimmed content, <|channel>..<channel|> thoughts
 * dropped from assistant turns, the empty thought channel after the generation prompt. Qwen3.5:
 * ChatML, assistant text before the last user turn cut after its last </think> (leading newlines
 * dropped), later assistant turns as given, generation prompt opening <think>. */
static void test_golden_gemma4_qwen35(void **state) {
    (void)state;
    char *p = tu_golden_tokenizer_path("chat_templates.json");
    size_t len;
    char *text = tu_read_file(p, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "magic")->valuestring, "moq-chat-templates");
    int n_rows = 0;
    for (const cJSON *r = cJSON_GetObjectItem(j, "chat")->child; r; r = r->next, n_rows++) {
        const char *cfg = cJSON_GetObjectItem(r, "config")->valuestring, *name = cJSON_GetObjectItem(r, "template")->valuestring;
        moq_chat_template ct;
        TU_OK(moq_chat_template_from_config(&ct, cfg, strlen(cfg), err_));
        assert_int_equal(ct.format, strcmp(name, "gemma4") == 0 ? MOQ_CHAT_GEMMA4 : MOQ_CHAT_CHATML_THINK);
        tu_check_chat_row(r);
    }
    assert_int_equal(n_rows, 24); /* 2 templates x 6 conversations x add_generation_prompt */
    assert_string_equal(moq_chat_format_name(MOQ_CHAT_GEMMA4), "gemma4");
    assert_string_equal(moq_chat_format_name(MOQ_CHAT_CHATML_THINK), "chatml-think");
    /* a plain Qwen3 template (no <think> in its generation prompt) stays ChatML */
    const char *qwen3 = "{\"chat_template\": \"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\\\n' }}{%- if enable_thinking is "
                        "defined and enable_thinking is false %}{{- '<think>\\\\n\\\\n</think>\\\\n\\\\n' }}{%- endif %}{%- endif %}\"}";
    moq_chat_template ct;
    TU_OK(moq_chat_template_from_config(&ct, qwen3, strlen(qwen3), err_));
    assert_int_equal(ct.format, MOQ_CHAT_CHATML);
    cJSON_Delete(j);
    free(text);
    free(p);
}

static void test_detection(void **state) {
    (void)state;
    static const struct { const char *style; moq_chat_format f; const char *sys; const char *bos; } want[] = {
        { "gpt2", MOQ_CHAT_NONE, "", "" },
        { "llama3", MOQ_CHAT_LLAMA3, "", "<|begin_of_text|>" },
        { "qwen2", MOQ_CHAT_CHATML, "You are a helpful assistant.", "" },
        { "smollm2", MOQ_CHAT_CHATML, "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        moq_tokenizer *t = tu_open_golden_tokenizer(want[i].style);
        const moq_chat_template *ct = moq_tokenizer_chat_template(t);
        assert_int_equal(ct->format, want[i].f);
        assert_string_equal(ct->default_system, want[i].sys);
        assert_string_equal(ct->bos, want[i].bos);
        moq_tokenizer_free(t);
    }
    assert_string_equal(moq_chat_format_name(MOQ_CHAT_CHATML), "chatml");
    assert_string_equal(moq_chat_format_name(MOQ_CHAT_LLAMA3), "llama3");
}

static void test_config_forms(void **state) {
    (void)state;
    moq_chat_template ct;
    moq_error e = {0};
    /* list form (e.g. Hermes/Qwen tool-use configs): "default" is used; backslash-n literal in the text */
    const char *list = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{ x }}\"},"
                       " {\"name\": \"default\", \"template\": \"{{ '<|im_start|>system\\\\nBe brief.<|im_end|>\\\\n' }}"
                       "{% for m in messages %}<|im_start|>{% endfor %}\"}]}";
    TU_OK(moq_chat_template_from_config(&ct, list, strlen(list), err_));
    assert_int_equal(ct.format, MOQ_CHAT_CHATML);
    assert_string_equal(ct.default_system, "Be brief.");
    /* no template: NONE, not an error */
    TU_OK(moq_chat_template_from_config(&ct, "{\"bos_token\": \"<s>\"}", 20, err_));
    assert_int_equal(ct.format, MOQ_CHAT_NONE);
    /* a known family beyond the table (Mistral's [INST]) is refused by name */
    const char *mistral = "{\"chat_template\": \"{{ bos_token }}{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}\"}";
    TU_ERR(&e, moq_chat_template_from_config(&ct, mistral, strlen(mistral), &e), MOQ_ERR_UNSUPPORTED, "tokenizer_config.json",
           "chat_template is a Mistral [INST] format");
    assert_int_equal(ct.format, MOQ_CHAT_NONE);
    /* an unknown one is refused quoting the template */
    const char *other = "{\"chat_template\": \"{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }}{% endfor %}\"}";
    TU_ERR(&e, moq_chat_template_from_config(&ct, other, strlen(other), &e), MOQ_ERR_UNSUPPORTED, "tokenizer_config.json",
           "chat_template \"{% for m in messages %}<<");
    assert_int_equal(ct.format, MOQ_CHAT_NONE);
    TU_ERR(&e, moq_chat_template_from_config(&ct, "{\"chat_template\": 7}", 20, &e), MOQ_ERR_CONFIG, "tokenizer_config.json", "chat_template is a number");
    /* Llama-3 template without a bos_token string */
    const char *l3 = "{\"chat_template\": \"{{ bos_token }}<|start_header_id|>\"}";
    TU_ERR(&e, moq_chat_template_from_config(&ct, l3, strlen(l3), &e), MOQ_ERR_CONFIG, "tokenizer_config.json", "bos_token is absent");
    /* rendering without a format */
    moq_chat_message m = { "user", "hi" };
    char out[64];
    size_t ol;
    memset(&ct, 0, sizeof ct);
    TU_ERR(&e, moq_chat_render(&ct, &m, 1, true, out, sizeof out, &ol, &e), MOQ_ERR_UNSUPPORTED, "", "no chat format");
}

static void test_render_edges(void **state) {
    (void)state;
    moq_chat_template ct = { .format = MOQ_CHAT_LLAMA3 };
    snprintf(ct.bos, sizeof ct.bos, "<|begin_of_text|>");
    char out[256];
    size_t ol;
    moq_error e = {0};
    /* no messages: only the generation header (the template emits bos with the first message) */
    TU_OK(moq_chat_render(&ct, NULL, 0, true, out, sizeof out, &ol, err_));
    assert_string_equal(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    moq_chat_message m[2] = { { "user", "  hello \t\n" }, { "assistant", " \x1f " } };
    TU_OK(moq_chat_render(&ct, m, 2, false, out, sizeof out, &ol, err_));
    assert_string_equal(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>");
    /* too small: NOMEM with the needed length */
    size_t need = ol;
    TU_ERR(&e, moq_chat_render(&ct, m, 2, false, out, 10, &ol, &e), MOQ_ERR_NOMEM, "", "needs");
    assert_int_equal(ol, need);
    moq_chat_message bad = { NULL, "x" };
    TU_ERR(&e, moq_chat_render(&ct, &bad, 1, false, out, sizeof out, &ol, &e), MOQ_ERR_INVALID_ARG, "", "message 0");
}

/* Newer snapshots keep the template in chat_template.jinja instead of tokenizer_config.json. */
static void test_jinja_file(void **state) {
    (void)state;
    char *src = tu_golden_tokenizer_path("llama3/tokenizer.json"), *cfgp = tu_golden_tokenizer_path("llama3/tokenizer_config.json");
    size_t len, clen;
    char *tok = tu_read_file(src, &len), *cfg_text = tu_read_file(cfgp, &clen);
    cJSON *cfg = cJSON_ParseWithLength(cfg_text, clen);
    char *tmpl = strdup(cJSON_GetObjectItem(cfg, "chat_template")->valuestring);
    cJSON_DeleteItemFromObject(cfg, "chat_template");
    char *cfg_out = cJSON_PrintUnformatted(cfg);
    char *dir = tu_tmpdir("chat_jinja");
    free(tu_write_file(dir, "tokenizer.json", tok, len));
    free(tu_write_file(dir, "tokenizer_config.json", cfg_out, strlen(cfg_out)));
    free(tu_write_file(dir, "chat_template.jinja", tmpl, strlen(tmpl)));
    moq_tokenizer *t = NULL;
    TU_OK(moq_tokenizer_open(&t, dir, err_));
    const moq_chat_template *ct = moq_tokenizer_chat_template(t);
    assert_int_equal(ct->format, MOQ_CHAT_LLAMA3);
    assert_string_equal(ct->bos, "<|begin_of_text|>");
    moq_tokenizer_free(t);
    tu_rmtree(dir);
    free(dir); free(cfg_out); free(tmpl); cJSON_Delete(cfg); free(tok); free(cfg_text); free(src); free(cfgp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_chats),
        cmocka_unit_test(test_golden_extra_templates),
        cmocka_unit_test(test_golden_gemma4_qwen35),
        cmocka_unit_test(test_detection),
        cmocka_unit_test(test_config_forms),
        cmocka_unit_test(test_render_edges),
        cmocka_unit_test(test_jinja_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
