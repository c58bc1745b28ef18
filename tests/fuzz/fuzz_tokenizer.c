/* fuzz_tokenizer.c — libFuzzer target: encode arbitrary bytes with each generated tokenizer in
 * tests/golden/tokenizer (GPT-2, Llama-3, Qwen2, SmolLM2 and tiny styles; families/ DeepSeek-V3, o200k and
 * Qwen3.5 shapes, whose Split regexes run through PCRE2) and decode them back.
 * Input: byte 0 picks the tokenizer and the flags, the rest is the text (an input starting with '{'
 * is instead loaded as a tokenizer.json, which must fail with a message or load). Checks: the byte-level
 * round trip is exact (decode(encode(x)) == x; with the NFC tokenizer y = decode(encode(x)) may differ
 * from x, and then y must round-trip exactly, with the same ids), the needed count is the same with a
 * too small buffer, and the streaming
 * UTF-8 decoder gives the same text whatever the chunking. Built by `make fuzz` /
 * `scripts/fuzz.sh SECONDS fuzz_tokenizer`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_styles[] = { "gpt2", "llama3", "qwen2", "smollm2", "tiny", "tiny_llama3", "tiny_qwen2", "tiny_digits",
                                        "families/deepseek", "families/o200k", "families/qwen35" };
#define N_STYLES (sizeof k_styles / sizeof k_styles[0])
static moq_tokenizer *g_tok[N_STYLES];

static void setup(void) {
    if (g_tok[0]) return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (!slash) abort();
    *slash = '\0';
    for (size_t i = 0; i < N_STYLES; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/../golden/tokenizer/%s", dir, k_styles[i]);
        moq_error err;
        if (moq_tokenizer_open(&g_tok[i], path, &err) != MOQ_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s\n", err.where, err.msg);
            abort();
        }
    }
}

/* Lossy UTF-8 of in[0..n) pushed in chunks of `step`; returns the length written to out. */
static size_t lossy(const uint8_t *in, size_t n, size_t step, char *out) {
    moq_utf8_stream s;
    moq_utf8_stream_reset(&s);
    size_t o = 0;
    for (size_t i = 0; i < n; i += step) {
        size_t m = n - i < step ? n - i : step, cl;
        if (moq_utf8_stream_push(&s, in + i, m, out + o, MOQ_UTF8_STREAM_OUT_MAX(m), &cl, NULL) != MOQ_OK) __builtin_trap();
        o += cl;
    }
    return o + moq_utf8_stream_flush(&s, out + o, 3);
}

/* Concatenated token bytes (malloc'd). */
static uint8_t *decode(const moq_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, o = 0;
    uint8_t *buf = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b;
        size_t bl;
        if (moq_tokenizer_decode_token(t, ids[i], &b, &bl, NULL) != MOQ_OK) __builtin_trap();
        while (o + bl > cap) buf = realloc(buf, cap *= 2);
        memcpy(buf + o, b, bl);
        o += bl;
    }
    *len = o;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 1 || size > 4096) return 0; /* larger inputs only slow the search down */
    if (data[0] == '{') { /* the input is a tokenizer.json: loading must fail cleanly or succeed */
        moq_tokenizer *t = NULL;
        moq_error err;
        if (moq_tokenizer_open_text(&t, (const char *)data, size, NULL, &err) == MOQ_OK) {
            int32_t ids[64];
            size_t n;
            (void)moq_tokenizer_encode(t, "Hello world 123 'll", 19, 0, ids, 64, &n, &err);
            moq_tokenizer_free(t);
        } else if (err.msg[0] == '\0' || t) {
            __builtin_trap();
        }
        return 0;
    }
    moq_tokenizer *t = g_tok[data[0] % N_STYLES];
    uint32_t flags = (data[0] & 0x80) ? MOQ_ENCODE_SPECIAL_AS_TEXT : 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1, n = 0, n_small = 0;
    int32_t *ids = malloc((3 * len + 4) * sizeof *ids);
    moq_error err;
    moq_status st = moq_tokenizer_encode(t, text, len, flags, ids, 3 * len + 4, &n, &err);
    if (st != MOQ_OK) __builtin_trap();
    if (n > len * 3 + 3) __builtin_trap(); /* byte-level BPE: one id per byte at most (NFC may grow the text 3x) */
    if (n > 1) {
        int32_t small[1];
        if (moq_tokenizer_encode(t, text, len, flags, small, 1, &n_small, &err) != MOQ_ERR_NOMEM || n_small != n || small[0] != ids[0])
            __builtin_trap();
    }
    size_t dl = 0;
    uint8_t *dec = decode(t, ids, n, &dl);
    if (dl != len || memcmp(dec, text, len) != 0) {
        /* only NFC may change the text, and NFC(x) must then come back exactly */
        const char *style = k_styles[data[0] % N_STYLES];
        if (strcmp(style, "qwen2") != 0 && strcmp(style, "families/qwen35") != 0) __builtin_trap();
        int32_t *ids2 = malloc((dl + 1) * sizeof *ids2);
        size_t n2 = 0, dl2 = 0;
        if (moq_tokenizer_encode(t, (const char *)dec, dl, flags, ids2, dl + 1, &n2, &err) != MOQ_OK) __builtin_trap();
        uint8_t *dec2 = decode(t, ids2, n2, &dl2);
        if (dl2 != dl || memcmp(dec2, dec, dl) != 0 || n2 != n || memcmp(ids2, ids, n * sizeof *ids) != 0) __builtin_trap();
        free(dec2); free(ids2);
    }
    char *a = malloc(MOQ_UTF8_STREAM_OUT_MAX(dl) + 16), *b = malloc(MOQ_UTF8_STREAM_OUT_MAX(dl) + 16);
    size_t la = lossy(dec, dl, dl ? dl : 1, a), lb = lossy(dec, dl, 1 + (data[0] & 3), b);
    if (la != lb || memcmp(a, b, la) != 0) __builtin_trap();
    free(a); free(b); free(dec); free(ids);
    return 0;
}
