/* test_tokenizer.c — byte-level BPE against the Hugging Face `tokenizers` package.
 *
 * Oracle: tests/golden/tokenizer/expected.json, written by tests/golden/tokenizer/gen.py with the
 * `tokenizers` package (ids, and decode() text) and Python's bytes.decode(errors="replace") (lossy
 * UTF-8). Each row is encoded with the same flags and must give exactly the same ids; the decoded
 * bytes must equal both the reference decode and the input (byte round trip). Also: output buffer
 * too small, invalid UTF-8 input, streaming UTF-8 decode split at every byte, special ids from the
 * side files, and one error case per tokenizer.json rule (code + "tokenizer.json" + the key).
 */
#include "tu.h"
#include "tok_golden.h"

#include <cjson/cJSON.h>



static cJSON *load_expected(void) { return tu_load_tokenizer_golden("expected.json", "moq-tokenizer-golden"); }


static const char *k_styles[] = { "gpt2", "llama3", "qwen2", "smollm2", "tiny", "tiny_llama3", "tiny_qwen2", "tiny_digits" };
#define N_STYLES (sizeof k_styles / sizeof k_styles[0])

/* Concatenated token bytes of ids[0..n). */
static uint8_t *decode_all(const moq_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, o = 0;
    uint8_t *buf = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b;
        size_t bl;
        TU_OK(moq_tokenizer_decode_token(t, ids[i], &b, &bl, err_));
        while (o + bl > cap) buf = realloc(buf, cap *= 2);
        memcpy(buf + o, b, bl);
        o += bl;
    }
    *len = o;
    return buf;
}

/* Lossy UTF-8 of in[0..n) through the streaming decoder, pushed in chunks of `step` bytes. */
static char *stream_lossy(const uint8_t *in, size_t n, size_t step, size_t *len) {
    char *out = malloc(MOQ_UTF8_STREAM_OUT_MAX(n) + 16);
    char *chunk = malloc(MOQ_UTF8_STREAM_OUT_MAX(step) + 16);
    moq_utf8_stream s;
    moq_utf8_stream_reset(&s);
    size_t o = 0;
    for (size_t i = 0; i < n; i += step) {
        size_t m = n - i < step ? n - i : step, cl;
        TU_OK(moq_utf8_stream_push(&s, in + i, m, chunk, MOQ_UTF8_STREAM_OUT_MAX(m), &cl, err_));
        memcpy(out + o, chunk, cl);
        o += cl;
    }
    o += moq_utf8_stream_flush(&s, out + o, 3);
    free(chunk);
    *len = o;
    return out;
}

static void test_golden_encodings(void **state) {
    (void)state;
    cJSON *j = load_expected();
    moq_tokenizer *toks[N_STYLES];
    for (size_t s = 0; s < N_STYLES; s++) toks[s] = tu_open_golden_tokenizer(k_styles[s]);
    const cJSON *rows = cJSON_GetObjectItem(j, "encode");
    int n_rows = 0, n_round = 0, n_changed = 0;
    for (const cJSON *r = rows->child; r; r = r->next, n_rows++) {
        const char *style = cJSON_GetObjectItem(r, "tokenizer")->valuestring;
        moq_tokenizer *t = NULL;
        for (size_t s = 0; s < N_STYLES; s++)
            if (strcmp(style, k_styles[s]) == 0) t = toks[s];
        assert_non_null(t);
        uint32_t flags = 0;
        const char *fl = cJSON_GetObjectItem(r, "flags")->child->valuestring;
        if (strcmp(fl, "add_special") == 0) flags = MOQ_ENCODE_ADD_SPECIAL;
        if (strcmp(fl, "special_as_text") == 0) flags = MOQ_ENCODE_SPECIAL_AS_TEXT;
        uint8_t *text;
        size_t len = tu_unhex(cJSON_GetObjectItem(r, "text_hex")->valuestring, &text);
        const cJSON *want = cJSON_GetObjectItem(r, "ids");
        size_t n_want = (size_t)cJSON_GetArraySize(want), cap = len + 8, n_got = 0;
        int32_t *ids = malloc(cap * sizeof *ids);
        moq_error e = {0};
        moq_status st = moq_tokenizer_encode(t, (const char *)text, len, flags, ids, cap, &n_got, &e);
        if (st != MOQ_OK) {
            char b[1024];
            moq_error_format(&e, b, sizeof b);
            fail_msg("%s %s \"%s\": %s", style, fl, cJSON_GetObjectItem(r, "text")->valuestring, b);
        }
        size_t i = 0;
        const cJSON *w = want->child;
        for (; i < n_got && w; i++, w = w->next)
            if (ids[i] != w->valueint) break;
        if (i != n_got || n_got != n_want) {
            fprintf(stderr, "%s %s \"%s\": first mismatch at %zu (got %zu ids, want %zu)\n  got:  ", style, fl,
                    cJSON_GetObjectItem(r, "text")->valuestring, i, n_got, n_want);
            for (size_t k = i; k < n_got && k < i + 8; k++) fprintf(stderr, "%d ", ids[k]);
            fprintf(stderr, "\n  want: ");
            for (size_t k = 0; w && k < 8; k++, w = w->next) fprintf(stderr, "%d ", w->valueint);
            fprintf(stderr, "\nHINT: if tests/golden/tokenizer changed, re-run python3 tests/golden/tokenizer/gen.py\n");
            fail();
        }
        /* decode: lossy text == the reference decode, and bytes == input (round trip) whenever the
         * reference gives the input back (not so with bos added, or when NFC changed the text) */
        size_t dl, ll;
        uint8_t *dec = decode_all(t, ids, n_got, &dl);
        uint8_t *ref; /* the reference decode; absent when it is the text itself */
        const cJSON *dh = cJSON_GetObjectItem(r, "decoded_hex");
        size_t rl = tu_unhex(dh ? dh->valuestring : cJSON_GetObjectItem(r, "text_hex")->valuestring, &ref);
        if (rl == len && memcmp(ref, text, len) == 0) {
            assert_int_equal(dl, len);
            assert_memory_equal(dec, text, len);
            n_round++;
        } else {
            n_changed++;
        }
        char *lossy = stream_lossy(dec, dl, 1, &ll);
        assert_int_equal(ll, rl);
        assert_memory_equal(lossy, ref, rl);
        free(lossy); free(ref); free(dec); free(ids); free(text);
    }
    assert_true(n_rows > 100);
    assert_true(n_round > 100);
    assert_int_equal(n_changed, 63); /* 50 rows with the bos added (llama3) + 13 changed by NFC (qwen2) */
    for (size_t s = 0; s < N_STYLES; s++) moq_tokenizer_free(toks[s]);
    cJSON_Delete(j);
}

static void test_lossy_utf8(void **state) {
    (void)state;
    cJSON *j = load_expected();
    for (const cJSON *r = cJSON_GetObjectItem(j, "lossy")->child; r; r = r->next) {
        uint8_t *in, *want;
        size_t n = tu_unhex(cJSON_GetObjectItem(r, "in_hex")->valuestring, &in);
        size_t wn = tu_unhex(cJSON_GetObjectItem(r, "out_hex")->valuestring, &want);
        for (size_t step = 1; step <= n + 1; step++) { /* every chunking gives the same text */
            size_t on;
            char *out = stream_lossy(in, n, step, &on);
            if (on != wn || memcmp(out, want, wn) != 0)
                fail_msg("lossy %s step %zu: got %zu bytes, want %zu", cJSON_GetObjectItem(r, "in_hex")->valuestring, step, on, wn);
            free(out);
        }
        free(in); free(want);
    }
    cJSON_Delete(j);
    /* the output buffer bound is enforced */
    moq_utf8_stream s = {0};
    char out[8];
    size_t ol;
    moq_error e;
    TU_ERR(&e, moq_utf8_stream_push(&s, (const uint8_t *)"ab", 2, out, sizeof out, &ol, &e), MOQ_ERR_INVALID_ARG, "", "expected at least");
}

/* A character split over tokens comes out whole, in one chunk, never as a part. */
static void test_stream_tokens(void **state) {
    (void)state;
    moq_tokenizer *t = tu_open_golden_tokenizer("gpt2");
    const char *text = "emoji 😀👍🏽 日本語 \xff end";
    int32_t ids[128];
    size_t n;
    TU_OK(moq_tokenizer_encode(t, text, strlen(text), 0, ids, 128, &n, err_));
    moq_utf8_stream s;
    moq_utf8_stream_reset(&s);
    char all[256], chunk[64];
    size_t o = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b;
        size_t bl, cl;
        TU_OK(moq_tokenizer_decode_token(t, ids[i], &b, &bl, err_));
        assert_true(MOQ_UTF8_STREAM_OUT_MAX(bl) <= sizeof chunk);
        TU_OK(moq_utf8_stream_push(&s, b, bl, chunk, sizeof chunk, &cl, err_));
        if (s.n_pend) held++;
        /* each chunk is valid UTF-8 on its own: Python-independent check by re-decoding it */
        size_t rl;
        char *re = stream_lossy((const uint8_t *)chunk, cl, cl ? cl : 1, &rl);
        assert_int_equal(rl, cl);
        assert_memory_equal(re, chunk, cl);
        free(re);
        memcpy(all + o, chunk, cl);
        o += cl;
    }
    o += moq_utf8_stream_flush(&s, all + o, 3);
    assert_true(held > 0); /* the tokenizer did split a character */
    const char *want = "emoji 😀👍🏽 日本語 \xef\xbf\xbd end";
    assert_int_equal(o, strlen(want));
    assert_memory_equal(all, want, o);
    moq_tokenizer_free(t);
}

static void test_invalid_utf8_round_trip(void **state) {
    (void)state;
    static const uint8_t in[] = { 0xff, 0xfe, ' ', 'a', 0xc3, 0x28, 0xe2, 0x82, ' ', 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80,
                                  '\'', 's', 0xc5, 0xbf, 0x00, '1', '2', '3', '4', 0xc0, 0xaf, 0xc3 };
    for (size_t s = 0; s < N_STYLES; s++) {
        moq_tokenizer *t = tu_open_golden_tokenizer(k_styles[s]);
        int32_t ids[64];
        size_t n, dl;
        moq_error e = {0};
        moq_status st = moq_tokenizer_encode(t, (const char *)in, sizeof in, 0, ids, 64, &n, &e);
        assert_int_equal(st, MOQ_OK);
        uint8_t *dec = decode_all(t, ids, n, &dl);
        assert_int_equal(dl, sizeof in);
        assert_memory_equal(dec, in, sizeof in);
        free(dec);
        moq_tokenizer_free(t);
    }
}

/* NFC next to invalid bytes: they pass through untouched while e + U+0301 composes to U+00E9. */
static void test_nfc_with_invalid_bytes(void **state) {
    (void)state;
    static const uint8_t in[] = { 0xff, 'e', 0xcc, 0x81, 0xc3, ' ', 0xcc, 0x81, 'x' };
    static const uint8_t want[] = { 0xff, 0xc3, 0xa9, 0xc3, ' ', 0xcc, 0x81, 'x' }; /* a space does not compose */
    moq_tokenizer *t = tu_open_golden_tokenizer("qwen2");
    int32_t ids[32];
    size_t n, dl;
    TU_OK(moq_tokenizer_encode(t, (const char *)in, sizeof in, 0, ids, 32, &n, err_));
    uint8_t *dec = decode_all(t, ids, n, &dl);
    assert_int_equal(dl, sizeof want);
    assert_memory_equal(dec, want, sizeof want);
    free(dec);
    moq_tokenizer_free(t);
}

static void test_capacity_and_empty(void **state) {
    (void)state;
    moq_tokenizer *t = tu_open_golden_tokenizer("llama3");
    const char *text = "Hello world, 1234567 times!";
    int32_t full[64], part[3];
    size_t n, m;
    TU_OK(moq_tokenizer_encode(t, text, strlen(text), 0, full, 64, &n, err_));
    assert_true(n > 3);
    moq_error e = {0};
    TU_ERR(&e, moq_tokenizer_encode(t, text, strlen(text), 0, part, 3, &m, &e), MOQ_ERR_NOMEM, "", "needs");
    assert_int_equal(m, n);
    assert_memory_equal(part, full, sizeof part);
    TU_OK(moq_tokenizer_encode(t, "", 0, 0, NULL, 0, &m, err_));
    assert_int_equal(m, 0);
    TU_OK(moq_tokenizer_encode(t, "", 0, MOQ_ENCODE_ADD_SPECIAL, full, 64, &m, err_));
    assert_int_equal(m, 1);
    assert_int_equal(full[0], moq_tokenizer_bos(t));
    const uint8_t *b;
    size_t bl;
    TU_ERR(&e, moq_tokenizer_decode_token(t, moq_tokenizer_vocab_size(t), &b, &bl, &e), MOQ_ERR_INVALID_ARG, "tokenizer.json", "not in the vocabulary");
    TU_ERR(&e, moq_tokenizer_decode_token(t, -1, &b, &bl, &e), MOQ_ERR_INVALID_ARG, "tokenizer.json", "not in the vocabulary");
    moq_tokenizer_free(t);
}

/* bos/eos/special ids agree with the side files, read here with cJSON. */
static void test_special_ids(void **state) {
    (void)state;
    for (size_t s = 0; s < N_STYLES; s++) {
        char rel[64];
        snprintf(rel, sizeof rel, "%s/config.json", k_styles[s]);
        char *p = tu_golden_tokenizer_path(rel);
        size_t len;
        char *text = tu_read_file(p, &len);
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        moq_tokenizer *t = tu_open_golden_tokenizer(k_styles[s]);
        const cJSON *bos = cJSON_GetObjectItem(cfg, "bos_token_id"), *eos = cJSON_GetObjectItem(cfg, "eos_token_id");
        assert_int_equal(moq_tokenizer_bos(t), cJSON_IsNumber(bos) ? bos->valueint : -1);
        const int32_t *eids;
        int ne = moq_tokenizer_eos(t, &eids);
        if (cJSON_IsNumber(eos)) {
            assert_int_equal(ne, 1);
            assert_int_equal(eids[0], eos->valueint);
            assert_true(moq_tokenizer_is_eos(t, eos->valueint));
            assert_true(moq_tokenizer_is_special(t, eos->valueint));
        } else {
            assert_int_equal(ne, 0);
        }
        assert_int_equal(moq_tokenizer_vocab_size(t), cJSON_GetObjectItem(cfg, "vocab_size")->valueint);
        free(p); free(text); cJSON_Delete(cfg);
        moq_tokenizer_free(t);
    }
    moq_tokenizer *t = tu_open_golden_tokenizer("qwen2");
    assert_int_equal(moq_tokenizer_token_id(t, "<|im_start|>"), 1); /* trained with the specials first */
    assert_int_equal(moq_tokenizer_token_id(t, "no such token at all"), -1);
    assert_int_equal(moq_tokenizer_token_id(t, " "), moq_tokenizer_token_id(t, " ")); /* byte symbol found */
    assert_true(moq_tokenizer_token_id(t, " ") >= 0);
    assert_false(moq_tokenizer_is_special(t, moq_tokenizer_token_id(t, " ")));
    moq_tokenizer_free(t);
    /* a tokenizer.json file path works as well as its directory */
    char *p = tu_golden_tokenizer_path("gpt2/tokenizer.json");
    TU_OK(moq_tokenizer_open(&t, p, err_));
    assert_int_equal(moq_tokenizer_bos(t), 0);
    moq_tokenizer_free(t);
    free(p);
}

/* ---- error paths: each bad tokenizer.json names the file and the key ------------------------------ */

static cJSON *gpt2_json(void) {
    char *p = tu_golden_tokenizer_path("gpt2/tokenizer.json");
    size_t len;
    char *text = tu_read_file(p, &len);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(p); free(text);
    assert_non_null(j);
    return j;
}

static void expect_open_error(cJSON *j, moq_status code, const char *msg_sub) {
    char *text = cJSON_PrintUnformatted(j);
    moq_tokenizer *t = (moq_tokenizer *)1;
    moq_error e = {0};
    moq_status st = moq_tokenizer_open_text(&t, text, strlen(text), NULL, &e);
    assert_null(t);
    TU_ERR(&e, st, code, "tokenizer.json", msg_sub);
    free(text);
    cJSON_Delete(j);
}

#define MODEL(j) cJSON_GetObjectItem((j), "model")

/* A vocabulary may lack byte symbols (SmolLM2's lacks 21). `tokenizers` (0.23, unk_token null) drops
 * such a byte and merges across it: on SmolLM2 "!\x04!" -> ["!!"], "(\x04)" -> ["()"], "\x04" -> [].
 * Same relations here with byte 0x00 ("Ā") removed from the golden GPT-2 vocabulary. */
static void test_missing_byte_symbol(void **state) {
    (void)state;
    cJSON *j = gpt2_json();
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(MODEL(j), "vocab"), "Ā");
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    moq_tokenizer *t;
    TU_OK(moq_tokenizer_open_text(&t, text, strlen(text), NULL, err_));
    free(text);
    static const struct { const char *with, *without; size_t n; } cases[] = {
        { "!\0!", "!!", 3 }, { "((\0))", "(())", 5 }, { "\0", "", 1 }, { "ab\0", "ab", 3 }, { "x \0\0 y", "x  y", 6 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t a[16], b[16];
        size_t na, nb;
        TU_OK(moq_tokenizer_encode(t, cases[c].with, cases[c].n, 0, a, 16, &na, err_));
        TU_OK(moq_tokenizer_encode(t, cases[c].without, strlen(cases[c].without), 0, b, 16, &nb, err_));
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof a[0]);
    }
    moq_tokenizer_free(t);
}

static void test_bad_tokenizer_json(void **state) {
    (void)state;
    cJSON *j;
    j = gpt2_json(); cJSON_DeleteItemFromObject(MODEL(j), "vocab");
    expect_open_error(j, MOQ_ERR_CONFIG, "model.vocab is absent");
    j = gpt2_json(); cJSON_DeleteItemFromObject(MODEL(j), "merges");
    expect_open_error(j, MOQ_ERR_CONFIG, "model.merges is absent");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "type", cJSON_CreateString("WordPiece"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "model.type is \"WordPiece\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "type", cJSON_CreateString("Unigram"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "model.type Unigram with a ByteLevel pre-tokenizer");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "type", cJSON_CreateString("Unigram"));
    cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_CreateNull());
    expect_open_error(j, MOQ_ERR_CONFIG, "model.vocab is an object, expected [[piece, score], ...]");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "type", cJSON_CreateString("Unigram"));
    cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(MODEL(j), "vocab", cJSON_Parse("[[\"a\", -1.0], [\"b\"]]"));
    expect_open_error(j, MOQ_ERR_CONFIG, "model.vocab[1] is not [piece, score]");
    j = gpt2_json(); cJSON_AddItemToArray(cJSON_GetObjectItem(MODEL(j), "merges"), cJSON_CreateString("Ġ nosuchtoken"));
    expect_open_error(j, MOQ_ERR_CONFIG, "token \"nosuchtoken\" is not in model.vocab");
    j = gpt2_json(); cJSON_AddItemToArray(cJSON_GetObjectItem(MODEL(j), "merges"), cJSON_CreateString("q z"));
    expect_open_error(j, MOQ_ERR_CONFIG, "the merged token \"qz\" is not in model.vocab");
    j = gpt2_json(); cJSON_AddItemToArray(cJSON_GetObjectItem(MODEL(j), "merges"), cJSON_CreateString("abc"));
    expect_open_error(j, MOQ_ERR_CONFIG, "model.merges[");
    j = gpt2_json(); cJSON_AddItemToObject(cJSON_GetObjectItem(MODEL(j), "vocab"), "zzzz", cJSON_CreateNumber(5));
    expect_open_error(j, MOQ_ERR_CONFIG, "gives id 5 to two tokens");
    j = gpt2_json(); cJSON_AddItemToObject(cJSON_GetObjectItem(MODEL(j), "vocab"), "zzzz", cJSON_CreateNumber(-3));
    expect_open_error(j, MOQ_ERR_CONFIG, "model.vocab[\"zzzz\"]");
    j = gpt2_json(); cJSON_AddItemToObject(cJSON_GetObjectItem(MODEL(j), "vocab"), "zzzz", cJSON_CreateNumber(1e9));
    expect_open_error(j, MOQ_ERR_CONFIG, "out of range");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "dropout", cJSON_CreateNumber(0.1));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "model.dropout");
    j = gpt2_json(); cJSON_ReplaceItemInObject(MODEL(j), "continuing_subword_prefix", cJSON_CreateString("##"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "model.continuing_subword_prefix");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "decoder", cJSON_Parse("{\"type\":\"CTC\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "decoder.type \"CTC\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "decoder", cJSON_Parse("{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"ByteLevel\"}]}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "decoder.decoders[1] (ByteLevel) follows Fuse");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "normalizer", cJSON_Parse("{\"type\":\"Precompiled\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "normalizer.type \"Precompiled\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Split\",\"pattern\":{\"String\":\"\"},\"behavior\":\"Isolated\"}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "pre_tokenizer.pattern.String is empty");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"BertPreTokenizer\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "pre_tokenizer.type \"BertPreTokenizer\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},{\"type\":\"Digits\"}]}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1] (Digits) follows a ByteLevel");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Metaspace\",\"prepend_scheme\":\"sometimes\"}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "pre_tokenizer.prepend_scheme \"sometimes\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Bogus\"}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "pre_tokenizer.behavior \"Bogus\"");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?<=a+)b\"},\"behavior\":\"Isolated\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "is not a regex PCRE2 compiles");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[^\\\\S]\"},\"behavior\":\"Isolated\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "\\S or \\W inside a character class");
    j = gpt2_json();
    cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"), cJSON_Parse("{\"id\":0,\"content\":\"<x>\",\"special\":true}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "also the id of added_tokens[0]");
    j = gpt2_json();
    cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"), cJSON_Parse("{\"id\":900,\"content\":\"\"}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "added_tokens[2].content is empty");
    j = gpt2_json();
    cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"), cJSON_Parse("{\"id\":900,\"content\":\"<m>\",\"lstrip\":\"yes\"}"));
    expect_open_error(j, MOQ_ERR_CONFIG, "added_tokens[2]");
    j = gpt2_json(); cJSON_ReplaceItemInObject(j, "post_processor", cJSON_Parse("{\"type\":\"BertProcessing\"}"));
    expect_open_error(j, MOQ_ERR_UNSUPPORTED, "post_processor.type \"BertProcessing\"");
    j = cJSON_Parse("[1, 2]");
    expect_open_error(j, MOQ_ERR_CONFIG, "top level is an array");
    /* not JSON at all */
    moq_tokenizer *t = NULL;
    moq_error e = {0};
    TU_ERR(&e, moq_tokenizer_open_text(&t, "{\"model\": ", 10, NULL, &e), MOQ_ERR_FORMAT, "tokenizer.json", "not valid JSON");
    /* a missing file names it */
    TU_ERR(&e, moq_tokenizer_open(&t, "/nonexistent/dir", &e), MOQ_ERR_IO, "/nonexistent/dir", "cannot open");
    /* tokenizer_config.json naming an unknown bos token */
    char *text = cJSON_PrintUnformatted((j = gpt2_json()));
    TU_ERR(&e, moq_tokenizer_open_text(&t, text, strlen(text), "{\"bos_token\": \"<nope>\"}", &e), MOQ_ERR_CONFIG,
           "tokenizer_config.json", "bos_token \"<nope>\"");
    assert_null(t);
    free(text);
    cJSON_Delete(j);
}

/* Long inputs stay O(n log n): 400k bytes of one letter is a single piece. No timing asserted. */
static void test_long_piece(void **state) {
    (void)state;
    moq_tokenizer *t = tu_open_golden_tokenizer("tiny");
    size_t n = 400000;
    char *text = malloc(n);
    memset(text, 'a', n);
    int32_t *ids = malloc(n * sizeof *ids);
    size_t m, dl;
    TU_OK(moq_tokenizer_encode(t, text, n, 0, ids, n, &m, err_));
    /* merges a+a (rank 2) then aa+a (rank 3): "aaaa" -> aa aa; so n/2 tokens "aa" */
    int32_t aa = moq_tokenizer_token_id(t, "aa");
    assert_int_equal(m, n / 2);
    for (size_t i = 0; i < m; i++) assert_int_equal(ids[i], aa);
    uint8_t *dec = decode_all(t, ids, m, &dl);
    assert_int_equal(dl, n);
    free(dec); free(ids); free(text);
    moq_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_encodings),
        cmocka_unit_test(test_lossy_utf8),
        cmocka_unit_test(test_stream_tokens),
        cmocka_unit_test(test_invalid_utf8_round_trip),
        cmocka_unit_test(test_nfc_with_invalid_bytes),
        cmocka_unit_test(test_capacity_and_empty),
        cmocka_unit_test(test_special_ids),
        cmocka_unit_test(test_bad_tokenizer_json),
        cmocka_unit_test(test_missing_byte_symbol),
        cmocka_unit_test(test_long_piece),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
