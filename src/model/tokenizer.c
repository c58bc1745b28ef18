/* tokenizer.c — byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
 *
 * What a tokenizer.json must say (everything else is MOQ_ERR_UNSUPPORTED naming the key):
 *
 *   model          {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] | [["a", "b"], ...],
 *                   "ignore_merges": bool, dropout/unk_token/continuing_subword_prefix/
 *                   end_of_word_suffix null, byte_fallback false}
 *   added_tokens   [{"id", "content", "special", "normalized", lstrip/rstrip/single_word false}]
 *   normalizer     null | {"type": "NFC"}
 *   pre_tokenizer  ByteLevel | Sequence of Split(pattern row in k_patterns, "Isolated"),
 *                  Digits, and exactly one ByteLevel (add_prefix_space false)
 *   decoder        ByteLevel
 *   post_processor null | ByteLevel | TemplateProcessing | Sequence of those (ADD_SPECIAL only)
 *
 * Encoding follows the `tokenizers` library step by step:
 *   1. added tokens with normalized=false are cut out of the text, leftmost-longest match first;
 *   2. NFC (if declared; see below), then added tokens with normalized=true are cut out of the rest;
 *   3. each pre-tokenizer step splits each piece (the Split regexes are matched by hand: one
 *      function per pattern, match_gpt2 / match_llama3, written from the regex text);
 *   4. each piece's bytes become byte-level symbols and are merged lowest rank first, leftmost
 *      first on equal ranks (a binary heap: O(n log n) per piece); with ignore_merges a piece that
 *      is itself in the vocabulary is emitted whole first.
 * Bytes that are not valid UTF-8 are classed "other" one byte at a time and encoded as bytes, so
 * decode(encode(x)) == x for every byte string x whose byte symbols are all in the vocabulary (a
 * byte without one is dropped, as `tokenizers` does with unk_token null) (without NFC; added tokens decode to their own
 * text unless it holds byte-level symbols such as 'Ġ', which the ByteLevel decoder maps to bytes).
 *
 * NFC: the quick check (UAX #15 §9) passes most text unchanged without copying it; otherwise the
 * text is decomposed (tables + Hangul arithmetic), reordered by combining class and composed
 * (UAX #15 §1.3), with the tables in unicode_tables.c. Then decode(encode(x)) == NFC(x).
 *
 * Byte-level mapping (GPT-2): bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF are the code points of the same
 * value; the other 68 bytes, in increasing order, are U+0100, U+0101, ... (space = U+0120 'Ġ').
 *
 * Tested by tests/model/test_tokenizer.c against ids from the Hugging Face `tokenizers` package
 * (tests/golden/tokenizer/gen.py); fuzzed by tests/fuzz/fuzz_tokenizer.c.
 */
#include "model/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/strmap.h"
#include "io/json.h"
#include "io/mmap.h"
#include "model/chat.h"

#define TOK_FILE "tokenizer.json"
#define TOK_MAX_ID (1 << 22)      /* ids above this are refused: no real vocabulary comes close */
#define TOK_MAX_AFFIX 4           /* post-processor tokens before / after the text              */
#define TOK_MAX_EOS 16

enum { TF_PRESENT = 1, TF_SPECIAL = 2, TF_ADDED = 4 };

/* Pre-tokenizer steps. */
typedef enum pretok_step {
    STEP_SPLIT_GPT2,     /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    STEP_SPLIT_LLAMA3,   /* (?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
                            \s*[\r\n]+|\s+(?!\S)|\s+                                                   */
    STEP_SPLIT_QWEN2,    /* as Llama-3 with \p{N} (one digit)                                           */
    STEP_DIGITS_ISOLATED,   /* Digits individual_digits=true: each \p{N} alone                          */
    STEP_DIGITS_CONTIGUOUS, /* Digits individual_digits=false: runs of \p{N}                            */
} pretok_step;

/* The Split patterns moq recognises, exactly as tokenizer.json spells them. */
static const struct { const char *regex; pretok_step step; const char *family; } k_patterns[] = {
    { "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
      STEP_SPLIT_GPT2, "GPT-2" },
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", STEP_SPLIT_LLAMA3, "Llama-3" },
    { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", STEP_SPLIT_QWEN2, "Qwen2" },
};

typedef struct added_tok {
    int32_t  id;
    uint32_t off, len;    /* content in pool */
    bool     special, normalized;
} added_tok;

struct moq_tokenizer {
    int32_t   n_vocab;
    uint8_t  *pool;       /* token bytes (decoded) and added-token contents */
    size_t    pool_len, pool_cap;
    uint32_t *tok_off, *tok_len; /* [n_vocab] decoded bytes of each id */
    uint8_t  *tok_flags;  /* [n_vocab] TF_* */
    int32_t   byte_id[256];
    /* merges: open addressing, key = left << 32 | right */
    uint64_t *m_key;
    uint32_t *m_rank;
    int32_t  *m_out;
    size_t    m_cap;
    /* model vocab by decoded bytes (byte-level tokens only), open addressing of ids */
    int32_t  *v_slot;
    size_t    v_cap;
    bool      ignore_merges, nfc;
    int       n_steps;
    pretok_step steps[8];
    added_tok *added;
    size_t     n_added;
    uint32_t   added_first[257]; /* added_by_first[added_first[b] .. added_first[b+1]) start with b */
    uint32_t  *added_by_first;
    int32_t    prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];
    int        n_prefix, n_suffix;
    int32_t    bos;
    int32_t    eos[TOK_MAX_EOS];
    int        n_eos;
    moq_chat_template chat;
};

/* ---- UTF-8 and classes -------------------------------------------------------------------------- */

size_t moq_utf8_next(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b = s[i];
    if (b < 0x80) { *cp = b; return 1; }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (b >= 0xC2 && b <= 0xDF) { need = 1; v = b & 0x1Fu; }
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 2; v = b & 0x0Fu;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3; v = b & 0x07u;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else { *cp = MOQ_UTF8_INVALID; return 1; }
    if (n - i <= need) { *cp = MOQ_UTF8_INVALID; return 1; }
    for (size_t j = 1; j <= need; j++) {
        uint8_t c = s[i + j];
        if (c < (j == 1 ? lo : 0x80) || c > (j == 1 ? hi : 0xBF)) { *cp = MOQ_UTF8_INVALID; return 1; }
        v = (v << 6) | (c & 0x3Fu);
    }
    *cp = v;
    return need + 1;
}

static int range_find(const moq_urange *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return (int)mid;
    }
    return -1;
}

moq_ucls moq_ucls_of(uint32_t cp) {
    if (cp == MOQ_UTF8_INVALID) return MOQ_UCLS_OTHER;
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return MOQ_UCLS_L;
        if (cp >= '0' && cp <= '9') return MOQ_UCLS_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return MOQ_UCLS_WS;
        return MOQ_UCLS_OTHER;
    }
    int k = range_find(moq_uclass_ranges, moq_uclass_range_count, cp);
    return k < 0 ? MOQ_UCLS_OTHER : (moq_ucls)moq_uclass_ranges[k].cls;
}

/* NFC quick check: 0 when the text is certainly NFC, else the offending code point. */
static uint32_t nfc_quick_check(const uint8_t *s, size_t n) {
    uint8_t last_ccc = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = moq_utf8_next(s, n, i, &cp);
        i += l;
        if (cp < 0x300 || cp == MOQ_UTF8_INVALID) { last_ccc = 0; continue; }
        if (range_find(moq_nfc_unsafe_ranges, moq_nfc_unsafe_range_count, cp) >= 0) return cp;
        int k = range_find(moq_ccc_ranges, moq_ccc_range_count, cp);
        uint8_t ccc = k < 0 ? 0 : moq_ccc_ranges[k].cls;
        if (ccc != 0 && last_ccc > ccc) return cp;
        last_ccc = ccc;
    }
    return 0;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* ---- NFC (UAX #15): decompose, reorder, compose ------------------------------------------------- */

#define INVALID_MARK 0x80000000u /* a byte that is not valid UTF-8, kept as itself */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static uint8_t ccc_of(uint32_t cp) {
    if (cp < 0x300 || (cp & INVALID_MARK)) return 0;
    int k = range_find(moq_ccc_ranges, moq_ccc_range_count, cp);
    return k < 0 ? 0 : moq_ccc_ranges[k].cls;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a - L_BASE < L_COUNT && b - V_BASE < V_COUNT) return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a - S_BASE < S_COUNT && (a - S_BASE) % T_COUNT == 0 && b - T_BASE - 1 < T_COUNT - 1) return a + (b - T_BASE);
    size_t lo = 0, hi = moq_nfc_compose_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const moq_ucompose *e = &moq_nfc_compose[mid];
        if (e->first < a || (e->first == a && e->second < b)) lo = mid + 1;
        else if (e->first == a && e->second == b) return e->composite;
        else hi = mid;
    }
    return 0;
}

/* Appends the full canonical decomposition of cp to out; returns the count (<= 4). */
static size_t decompose(uint32_t cp, uint32_t *out) {
    if (cp - S_BASE < S_COUNT) {
        uint32_t si = cp - S_BASE, t = si % T_COUNT;
        out[0] = L_BASE + si / N_COUNT;
        out[1] = V_BASE + (si % N_COUNT) / T_COUNT;
        if (!t) return 2;
        out[2] = T_BASE + t;
        return 3;
    }
    if (cp >= 0xC0 && !(cp & INVALID_MARK)) {
        size_t lo = 0, hi = moq_nfd_count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (moq_nfd_table[mid].cp < cp) lo = mid + 1;
            else if (moq_nfd_table[mid].cp > cp) hi = mid;
            else {
                const moq_udecomp *d = &moq_nfd_table[mid];
                memcpy(out, moq_nfd_pool + d->off, d->len * sizeof *out);
                return d->len;
            }
        }
    }
    out[0] = cp;
    return 1;
}

/* NFC of s[0..n) into a malloc'd *out. Bytes that are not valid UTF-8 pass through unchanged and
 * act as starters that compose with nothing. */
static moq_status nfc_normalize(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len, moq_error *err) {
    *out = NULL;
    uint32_t *cp = malloc(n * 4 * sizeof *cp), *tmp = malloc(n * 4 * sizeof *tmp);
    uint8_t *o = malloc(n * 16 + 1);
    if (!cp || !tmp || !o) {
        free(cp); free(tmp); free(o);
        (void)MOQ_FAIL(err, MOQ_ERR_NOMEM, "tokenizer.json", "out of memory for the NFC normalization of %zu input bytes", n);
        return MOQ_ERR_NOMEM;
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t l = moq_utf8_next(s, n, i, &c);
        if (c == MOQ_UTF8_INVALID) cp[m++] = INVALID_MARK | s[i];
        else m += decompose(c, cp + m);
        i += l;
    }
    /* canonical ordering: stable sort of each run of non-starters by combining class */
    for (size_t a = 0; a < m;) {
        if (!ccc_of(cp[a])) { a++; continue; }
        size_t b = a;
        while (b < m && ccc_of(cp[b])) b++;
        size_t count[257] = {0};
        for (size_t i = a; i < b; i++) count[ccc_of(cp[i]) + 1]++;
        for (int k = 0; k < 256; k++) count[k + 1] += count[k];
        for (size_t i = a; i < b; i++) tmp[count[ccc_of(cp[i])]++] = cp[i];
        memcpy(cp + a, tmp, (b - a) * sizeof *cp);
        a = b;
    }
    /* composition: each char joins the last starter unless a char of equal or higher class
     * (or a starter) stands between them */
    size_t w = 0, starter = SIZE_MAX;
    int last = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = cp[i];
        int cc = ccc_of(c);
        if (starter != SIZE_MAX && (last < cc || (last == 0 && w == starter + 1))) {
            uint32_t comp = compose_pair(cp[starter], c);
            if (comp) { cp[starter] = comp; continue; }
        }
        if (cc == 0) { starter = w; last = 0; }
        else last = cc;
        cp[w++] = c;
    }
    size_t ol = 0;
    for (size_t i = 0; i < w; i++) {
        if (cp[i] & INVALID_MARK) o[ol++] = (uint8_t)cp[i];
        else ol += utf8_put(cp[i], (char *)o + ol);
    }
    free(cp); free(tmp);
    *out = o;
    *out_len = ol;
    return MOQ_OK;
}

/* ---- byte-level mapping ------------------------------------------------------------------------- */

static bool byte_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t byte_to_cp(unsigned b) {
    if (byte_is_self(b)) return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++) k += !byte_is_self(c);
    return 256 + k;
}

/* Byte of a byte-level code point, or -1. */
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_self(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_self(b) && k-- == 0) return (int)b;
    return -1;
}

/* Decodes a token's text as the ByteLevel decoder does: every char mapped to its byte, or, when
 * some char has no byte, the text's own UTF-8 bytes. Writes at most strlen(s) bytes. */
static size_t byte_level_decode(const char *s, size_t n, uint8_t *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += moq_utf8_next(u, n, i, &cp);
        int b = cp == MOQ_UTF8_INVALID ? -1 : cp_to_byte(cp);
        if (b < 0) { memcpy(out, s, n); return n; }
        out[k++] = (uint8_t)b;
    }
    return k;
}

/* ---- hash tables -------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* Merge (left, right) -> rank and result, or false. */
static bool merge_get(const moq_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *out) {
    if (!t->m_cap) return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(key) & (t->m_cap - 1);; i = (i + 1) & (t->m_cap - 1)) {
        if (t->m_out[i] < 0) return false;
        if (t->m_key[i] == key) { *rank = t->m_rank[i]; *out = t->m_out[i]; return true; }
    }
}

/* Later duplicates overwrite earlier ones, as the `tokenizers` library's merge map does. */
static void merge_put(moq_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t out) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = hash_u64(key) & (t->m_cap - 1);
    while (t->m_out[i] >= 0 && t->m_key[i] != key) i = (i + 1) & (t->m_cap - 1);
    t->m_key[i] = key; t->m_rank[i] = rank; t->m_out[i] = out;
}

static int32_t vocab_get(const moq_tokenizer *t, const uint8_t *p, size_t n) {
    if (!t->v_cap) return -1;
    for (size_t i = hash_bytes(p, n) & (t->v_cap - 1);; i = (i + 1) & (t->v_cap - 1)) {
        int32_t id = t->v_slot[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && memcmp(t->pool + t->tok_off[id], p, n) == 0) return id;
    }
}

static void vocab_put(moq_tokenizer *t, int32_t id) {
    const uint8_t *p = t->pool + t->tok_off[id];
    size_t n = t->tok_len[id];
    if (vocab_get(t, p, n) >= 0) return; /* first wins */
    size_t i = hash_bytes(p, n) & (t->v_cap - 1);
    while (t->v_slot[i] >= 0) i = (i + 1) & (t->v_cap - 1);
    t->v_slot[i] = id;
}

/* ---- loading ------------------------------------------------------------------------------------ */

static moq_status pool_add(moq_tokenizer *t, const void *p, size_t n, uint32_t *off, moq_error *err) {
    if (t->pool_len + n > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap * 2 : 4096;
        while (cap < t->pool_len + n) cap *= 2;
        if (cap > UINT32_MAX) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "token text exceeds 4 GiB");
        uint8_t *np = realloc(t->pool, cap);
        if (!np) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory for token text (%zu bytes)", cap);
        t->pool = np; t->pool_cap = cap;
    }
    if (n) memcpy(t->pool + t->pool_len, p, n);
    *off = (uint32_t)t->pool_len;
    t->pool_len += n;
    return MOQ_OK;
}

static bool is_absent(const cJSON *j) { return !j || cJSON_IsNull(j); }

/* A BPE option moq does not implement must be absent, null, false or the neutral value. */
static moq_status check_bpe_options(const cJSON *model, moq_error *err) {
    static const char *const must_be_null[] = { "dropout", "unk_token", "continuing_subword_prefix",
                                                "end_of_word_suffix" };
    for (size_t i = 0; i < sizeof must_be_null / sizeof must_be_null[0]; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, must_be_null[i]);
        if (is_absent(j) || (cJSON_IsString(j) && j->valuestring[0] == '\0' && i >= 2)) continue;
        if (i == 0 && cJSON_IsNumber(j) && j->valuedouble == 0.0) continue;
        if (i == 1 && cJSON_IsString(j)) continue; /* byte-level vocabularies never reach unk */
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.%s is %s; moq supports only null",
                        must_be_null[i], moq_json_type(j));
    }
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    if (cJSON_IsTrue(bf))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE,
                        "model.byte_fallback is true (SentencePiece-style BPE); moq supports byte-level BPE only");
    return MOQ_OK;
}

static moq_status add_step(moq_tokenizer *t, pretok_step s, moq_error *err) {
    if (t->n_steps >= (int)(sizeof t->steps / sizeof t->steps[0]))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "pre_tokenizer has more than %d steps",
                        (int)(sizeof t->steps / sizeof t->steps[0]));
    t->steps[t->n_steps++] = s;
    return MOQ_OK;
}

static moq_status parse_pretok_one(moq_tokenizer *t, const cJSON *p, const char *key, int *n_bytelevel,
                                   moq_error *err) {
    const char *type = NULL;
    MOQ_TRY(moq_json_str(p, "type", &type, NULL, TOK_FILE, key, err));
    if (!type) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.type is absent", key);
    if (strcmp(type, "ByteLevel") == 0) {
        bool aps = false, use_regex = true;
        MOQ_TRY(moq_json_bool(p, "add_prefix_space", &aps, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(p, "use_regex", &use_regex, NULL, TOK_FILE, key, err));
        if (aps) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.add_prefix_space is true; moq supports false", key);
        (*n_bytelevel)++;
        if (use_regex) MOQ_TRY(add_step(t, STEP_SPLIT_GPT2, err));
        return MOQ_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        bool ind = false;
        MOQ_TRY(moq_json_bool(p, "individual_digits", &ind, NULL, TOK_FILE, key, err));
        return add_step(t, ind ? STEP_DIGITS_ISOLATED : STEP_DIGITS_CONTIGUOUS, err);
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *re = NULL, *behavior = NULL;
        bool invert = false;
        if (!cJSON_IsObject(pat)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.pattern is %s, expected an object", key, moq_json_type(pat));
        MOQ_TRY(moq_json_str(pat, "Regex", &re, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_str(p, "behavior", &behavior, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(p, "invert", &invert, NULL, TOK_FILE, key, err));
        if (!re) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.pattern has no \"Regex\"; moq supports the GPT-2, Llama-3 and Qwen2 regexes", key);
        if (!behavior || strcmp(behavior, "Isolated") != 0 || invert)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s: behavior \"%s\" invert %s; moq supports \"Isolated\" without invert",
                            key, behavior ? behavior : "(absent)", invert ? "true" : "false");
        for (size_t i = 0; i < sizeof k_patterns / sizeof k_patterns[0]; i++)
            if (strcmp(re, k_patterns[i].regex) == 0) return add_step(t, k_patterns[i].step, err);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE,
                        "%s.pattern.Regex \"%.300s\" is not one of the GPT-2, Llama-3 or Qwen2 patterns moq matches", key, re);
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.type \"%s\" is not one of ByteLevel, Split, Digits, Sequence", key, type);
}

static moq_status parse_pretok(moq_tokenizer *t, const cJSON *root, moq_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!cJSON_IsObject(p))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "pre_tokenizer is %s; moq needs a ByteLevel pre-tokenizer", moq_json_type(p));
    const char *type = NULL;
    MOQ_TRY(moq_json_str(p, "type", &type, NULL, TOK_FILE, "pre_tokenizer", err));
    int n_bl = 0;
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "pre_tokenizer.pretokenizers is %s, expected an array", moq_json_type(list));
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char key[64];
            snprintf(key, sizeof key, "pre_tokenizer.pretokenizers[%d]", i);
            MOQ_TRY(parse_pretok_one(t, e, key, &n_bl, err));
        }
    } else {
        MOQ_TRY(parse_pretok_one(t, p, "pre_tokenizer", &n_bl, err));
    }
    if (n_bl != 1)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "pre_tokenizer has %d ByteLevel steps, expected exactly 1 (moq supports byte-level BPE only)", n_bl);
    return MOQ_OK;
}

static moq_status parse_normalizer(moq_tokenizer *t, const cJSON *root, moq_error *err) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (is_absent(n)) return MOQ_OK;
    const char *type = NULL;
    MOQ_TRY(moq_json_str(n, "type", &type, NULL, TOK_FILE, "normalizer", err));
    if (type && strcmp(type, "NFC") == 0) { t->nfc = true; return MOQ_OK; }
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0) return MOQ_OK;
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "normalizer.type \"%s\"; moq supports none or NFC", type ? type : "(absent)");
}

static moq_status parse_decoder(const cJSON *root, moq_error *err) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const char *type = NULL;
    if (cJSON_IsObject(d)) MOQ_TRY(moq_json_str(d, "type", &type, NULL, TOK_FILE, "decoder", err));
    if (!type || strcmp(type, "ByteLevel") != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "decoder.type is \"%s\", expected \"ByteLevel\"", type ? type : "(absent)");
    return MOQ_OK;
}

static int32_t find_token(const moq_tokenizer *t, const char *text);

/* TemplateProcessing "single": [{"SpecialToken": {"id": name}}..., {"Sequence": {"id": "A"}}, ...]. */
static moq_status parse_template(moq_tokenizer *t, const cJSON *pp, const char *key, moq_error *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    if (!cJSON_IsArray(single)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.single is %s, expected an array", key, moq_json_type(single));
    bool after = false;
    t->n_prefix = t->n_suffix = 0;
    for (const cJSON *e = single->child; e; e = e->next) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (seq) { after = true; continue; }
        const char *name = NULL;
        if (sp) MOQ_TRY(moq_json_str(sp, "id", &name, NULL, TOK_FILE, key, err));
        if (!name) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.single has an item that is neither Sequence nor SpecialToken", key);
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(specials, name);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(spec, "ids");
        if (!cJSON_IsArray(ids)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.special_tokens has no ids for \"%.100s\"", key, name);
        for (const cJSON *id = ids->child; id; id = id->next) {
            if (!moq_json_is_int(id, 0, t->n_vocab - 1))
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.special_tokens.%.100s.ids holds %s, expected an id below %d", key, name,
                                cJSON_IsNumber(id) ? "a number out of range" : moq_json_type(id), t->n_vocab);
            int *n = after ? &t->n_suffix : &t->n_prefix;
            if (*n >= TOK_MAX_AFFIX) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.single adds more than %d tokens on one side", key, TOK_MAX_AFFIX);
            (after ? t->suffix : t->prefix)[(*n)++] = (int32_t)id->valuedouble;
        }
    }
    return MOQ_OK;
}

static moq_status parse_post(moq_tokenizer *t, const cJSON *pp, const char *key, int depth, moq_error *err) {
    if (is_absent(pp)) return MOQ_OK;
    const char *type = NULL;
    MOQ_TRY(moq_json_str(pp, "type", &type, NULL, TOK_FILE, key, err));
    if (type && strcmp(type, "ByteLevel") == 0) return MOQ_OK; /* offsets only */
    if (type && strcmp(type, "TemplateProcessing") == 0) return parse_template(t, pp, key, err);
    if (type && strcmp(type, "Sequence") == 0 && depth == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next, i++) {
            char k[64];
            snprintf(k, sizeof k, "%s.processors[%d]", key, i);
            MOQ_TRY(parse_post(t, e, k, 1, err));
        }
        return MOQ_OK;
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.type \"%s\" is not one of ByteLevel, TemplateProcessing, Sequence",
                    key, type ? type : "(absent)");
}

/* One merge: "a b" or ["a", "b"]; a, b and a+b must be vocabulary tokens. */
static moq_status parse_merge(moq_tokenizer *t, const moq_strmap *vmap, const cJSON *m, int idx, char **buf,
                              size_t *buf_cap, moq_error *err) {
    const char *a, *b;
    size_t la, lb;
    char *tmp = NULL;
    if (cJSON_IsString(m)) {
        const char *sp = strchr(m->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' ') || sp == m->valuestring || sp[1] == '\0')
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges[%d] is \"%.100s\", expected two tokens separated by one space", idx, m->valuestring);
        a = m->valuestring; la = (size_t)(sp - a); b = sp + 1; lb = strlen(b);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
        a = m->child->valuestring; la = strlen(a); b = m->child->next->valuestring; lb = strlen(b);
    } else {
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges[%d] is %s, expected \"a b\" or [\"a\", \"b\"]", idx, moq_json_type(m));
    }
    if (la + lb + 2 > *buf_cap) {
        size_t cap = (la + lb + 2) * 2;
        tmp = realloc(*buf, cap);
        if (!tmp) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
        *buf = tmp; *buf_cap = cap;
    }
    char *s = *buf;
    size_t ia, ib, io;
    memcpy(s, a, la); s[la] = '\0';
    if (!moq_strmap_get(vmap, s, &ia))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges[%d]: token \"%.100s\" is not in model.vocab", idx, s);
    memcpy(s, b, lb); s[lb] = '\0';
    if (!moq_strmap_get(vmap, s, &ib))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges[%d]: token \"%.100s\" is not in model.vocab", idx, s);
    memcpy(s, a, la); memcpy(s + la, b, lb); s[la + lb] = '\0';
    if (!moq_strmap_get(vmap, s, &io))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges[%d]: the merged token \"%.200s\" is not in model.vocab", idx, s);
    merge_put(t, (int32_t)ia, (int32_t)ib, (uint32_t)idx, (int32_t)io);
    return MOQ_OK;
}

static moq_status parse_model(moq_tokenizer *t, const cJSON *root, moq_strmap *vmap, moq_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model is %s, expected an object", moq_json_type(model));
    const char *type = NULL;
    MOQ_TRY(moq_json_str(model, "type", &type, NULL, TOK_FILE, "model", err));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.type is \"%.64s\"; moq supports \"BPE\"", type);
    if (!type && !(cJSON_IsObject(vocab) && merges)) /* the library infers BPE from vocab + merges */
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.type is absent and model is not vocab + merges; moq supports BPE");
    if (!cJSON_IsObject(vocab)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab is %s, expected an object of token: id", moq_json_type(vocab));
    if (!cJSON_IsArray(merges)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges is %s, expected an array", moq_json_type(merges));
    MOQ_TRY(check_bpe_options(model, err));
    MOQ_TRY(moq_json_bool(model, "ignore_merges", &t->ignore_merges, NULL, TOK_FILE, "model", err));

    /* ids: the largest of vocab and added_tokens decides n_vocab */
    int32_t max_id = -1;
    size_t n_tok = 0;
    for (const cJSON *e = vocab->child; e; e = e->next, n_tok++) {
        if (!moq_json_is_int(e, 0, TOK_MAX_ID - 1))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab[\"%.100s\"] is %s, expected an id in [0, %d)", e->string,
                            cJSON_IsNumber(e) ? "a number out of range" : moq_json_type(e), TOK_MAX_ID);
        if ((int32_t)e->valuedouble > max_id) max_id = (int32_t)e->valuedouble;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!is_absent(added) && !cJSON_IsArray(added))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "added_tokens is %s, expected an array", moq_json_type(added));
    int ai = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, ai++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!moq_json_is_int(id, 0, TOK_MAX_ID - 1))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "added_tokens[%d].id is %s, expected an id in [0, %d)", ai,
                            cJSON_IsNumber(id) ? "a number out of range" : moq_json_type(id), TOK_MAX_ID);
        if ((int32_t)id->valuedouble > max_id) max_id = (int32_t)id->valuedouble;
    }
    if (max_id < 0) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab is empty");
    t->n_vocab = max_id + 1;
    size_t nv = (size_t)t->n_vocab;
    t->tok_off = calloc(nv, sizeof *t->tok_off);
    t->tok_len = calloc(nv, sizeof *t->tok_len);
    t->tok_flags = calloc(nv, 1);
    if (!t->tok_off || !t->tok_len || !t->tok_flags || !moq_strmap_init(vmap, n_tok))
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory for %d tokens", t->n_vocab);

    /* vocab */
    uint8_t *dec = NULL;
    size_t dec_cap = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        size_t old, n = strlen(e->string);
        if (!moq_strmap_put(vmap, e->string, (size_t)id, &old)) {
            free(dec);
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab has token \"%.100s\" twice (ids %zu and %d)", e->string, old, id);
        }
        if (t->tok_flags[id] & TF_PRESENT) {
            free(dec);
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab gives id %d to two tokens (\"%.100s\" and another)", id, e->string);
        }
        if (n > dec_cap) {
            uint8_t *nd = realloc(dec, n * 2);
            if (!nd) { free(dec); return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory"); }
            dec = nd; dec_cap = n * 2;
        }
        size_t dn = byte_level_decode(e->string, n, dec);
        moq_status st = pool_add(t, dec, dn, &t->tok_off[id], err);
        if (st != MOQ_OK) { free(dec); return st; }
        t->tok_len[id] = (uint32_t)dn;
        t->tok_flags[id] = TF_PRESENT;
    }
    free(dec);

    /* the 256 byte symbols (a vocabulary may lack some) */
    for (unsigned b = 0; b < 256; b++) {
        char s[5];
        uint32_t cp = byte_to_cp(b);
        s[utf8_put(cp, s)] = '\0';
        size_t id;
        t->byte_id[b] = moq_strmap_get(vmap, s, &id) ? (int32_t)id : -1; /* missing: dropped (bpe) */
    }

    /* byte-level vocab by bytes (for ignore_merges and moq_tokenizer_token_id) */
    t->v_cap = pow2_at_least(n_tok * 2);
    t->v_slot = malloc(t->v_cap * sizeof *t->v_slot);
    if (!t->v_slot) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
    memset(t->v_slot, 0xff, t->v_cap * sizeof *t->v_slot);
    for (const cJSON *e = vocab->child; e; e = e->next) vocab_put(t, (int32_t)e->valuedouble);

    /* merges */
    size_t n_m = (size_t)cJSON_GetArraySize(merges);
    t->m_cap = pow2_at_least(n_m * 2);
    t->m_key = malloc(t->m_cap * sizeof *t->m_key);
    t->m_rank = malloc(t->m_cap * sizeof *t->m_rank);
    t->m_out = malloc(t->m_cap * sizeof *t->m_out);
    if (!t->m_key || !t->m_rank || !t->m_out) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory for %zu merges", n_m);
    memset(t->m_out, 0xff, t->m_cap * sizeof *t->m_out);
    char *buf = NULL;
    size_t buf_cap = 0;
    int idx = 0;
    for (const cJSON *m = merges->child; m; m = m->next, idx++) {
        moq_status st = parse_merge(t, vmap, m, idx, &buf, &buf_cap, err);
        if (st != MOQ_OK) { free(buf); return st; }
    }
    free(buf);

    /* added tokens */
    size_t n_added = (size_t)ai;
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    t->added_by_first = calloc(n_added ? n_added : 1, sizeof *t->added_by_first);
    if (!t->added || !t->added_by_first) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
    ai = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, ai++) {
        char key[48];
        snprintf(key, sizeof key, "added_tokens[%d]", ai);
        const char *content = NULL;
        bool special = false, normalized = true, flag = false;
        MOQ_TRY(moq_json_str(e, "content", &content, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(e, "special", &special, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(e, "normalized", &normalized, NULL, TOK_FILE, key, err));
        if (!content || !content[0]) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.content is %s, expected a non-empty string", key, content ? "empty" : "absent");
        static const char *const unsupported[] = { "single_word", "lstrip", "rstrip" };
        for (size_t k = 0; k < 3; k++) {
            flag = false;
            MOQ_TRY(moq_json_bool(e, unsupported[k], &flag, NULL, TOK_FILE, key, err));
            if (flag) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.%s is true (token \"%.100s\"); moq supports false", key, unsupported[k], content);
        }
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        size_t cl = strlen(content);
        for (size_t k = 0; k < t->n_added; k++) {
            const added_tok *o = &t->added[k];
            if (o->id == id) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.id %d is also the id of added_tokens[%zu]", key, id, k);
            if (o->len == cl && memcmp(t->pool + o->off, content, cl) == 0)
                return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.content \"%.100s\" repeats added_tokens[%zu]", key, content, k);
        }
        added_tok *a = &t->added[t->n_added++];
        a->id = id; a->special = special; a->normalized = normalized; a->len = (uint32_t)cl;
        MOQ_TRY(pool_add(t, content, cl, &a->off, err));
        /* decoding an added token: its text through the ByteLevel decoder, as for vocab tokens */
        uint8_t *d = malloc(cl);
        if (!d) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
        size_t dn = byte_level_decode(content, cl, d);
        moq_status st = pool_add(t, d, dn, &t->tok_off[id], err);
        free(d);
        MOQ_TRY(st);
        t->tok_len[id] = (uint32_t)dn;
        t->tok_flags[id] = (uint8_t)(TF_PRESENT | TF_ADDED | (special ? TF_SPECIAL : 0));
    }
    /* index added tokens by first byte */
    uint32_t cnt[257] = {0};
    for (size_t k = 0; k < t->n_added; k++) cnt[t->pool[t->added[k].off] + 1]++;
    for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
    memcpy(t->added_first, cnt, sizeof cnt);
    for (size_t k = 0; k < t->n_added; k++) t->added_by_first[cnt[t->pool[t->added[k].off]]++] = (uint32_t)k;
    return MOQ_OK;
}

static int32_t find_token(const moq_tokenizer *t, const char *text) {
    size_t n = strlen(text);
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].len == n && memcmp(t->pool + t->added[k].off, text, n) == 0) return t->added[k].id;
    return vocab_get(t, (const uint8_t *)text, n);
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": string}. */
static moq_status config_token(const moq_tokenizer *t, const cJSON *cfg, const char *key, int32_t *id, moq_error *err) {
    *id = -1;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (is_absent(j)) return MOQ_OK;
    const char *s = NULL;
    if (cJSON_IsObject(j)) MOQ_TRY(moq_json_str(j, "content", &s, NULL, "tokenizer_config.json", key, err));
    else if (cJSON_IsString(j)) s = j->valuestring;
    if (!s) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "tokenizer_config.json", "%s is %s, expected a string or {\"content\": string}", key, moq_json_type(j));
    *id = find_token(t, s);
    if (*id < 0) return MOQ_FAIL(err, MOQ_ERR_CONFIG, "tokenizer_config.json", "%s \"%.100s\" is not a token of tokenizer.json", key, s);
    return MOQ_OK;
}

static void add_eos(moq_tokenizer *t, int32_t id) {
    if (id < 0 || moq_tokenizer_is_eos(t, id) || t->n_eos >= TOK_MAX_EOS) return;
    t->eos[t->n_eos++] = id;
}

/* bos_token_id / eos_token_id in config.json or generation_config.json: an id or a list of ids. */
static moq_status config_ids(moq_tokenizer *t, const cJSON *cfg, const char *file, const char *key, bool is_bos, moq_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (is_absent(j)) return MOQ_OK;
    const cJSON *one = cJSON_IsArray(j) ? j->child : j;
    for (; one; one = cJSON_IsArray(j) ? one->next : NULL) {
        if (!moq_json_is_int(one, 0, t->n_vocab - 1))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, "%s is %s, expected an id below the vocabulary size %d", key,
                            cJSON_IsNumber(one) ? "out of range" : moq_json_type(one), t->n_vocab);
        if (is_bos) { t->bos = (int32_t)one->valuedouble; break; }
        add_eos(t, (int32_t)one->valuedouble);
    }
    return MOQ_OK;
}

static moq_status parse_tokenizer_config(moq_tokenizer *t, const char *text, size_t len, moq_error *err) {
    cJSON *cfg = NULL;
    MOQ_TRY(moq_json_parse(&cfg, text, len, "tokenizer_config.json", err));
    int32_t bos = -1, eos = -1;
    moq_status st = config_token(t, cfg, "bos_token", &bos, err);
    if (st == MOQ_OK) st = config_token(t, cfg, "eos_token", &eos, err);
    cJSON_Delete(cfg);
    MOQ_TRY(st);
    if (t->bos < 0) t->bos = bos;
    add_eos(t, eos);
    st = moq_chat_template_from_config(&t->chat, text, len, err);
    if (st == MOQ_ERR_UNSUPPORTED) { memset(&t->chat, 0, sizeof t->chat); st = MOQ_OK; } /* plain prompts still work */
    return st;
}

static moq_status open_json(moq_tokenizer **out, const char *json, size_t len, moq_error *err) {
    *out = NULL;
    if (len > MOQ_JSON_MAX_BYTES)
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, TOK_FILE, "%zu bytes, larger than the %u bytes moq reads", len, MOQ_JSON_MAX_BYTES);
    cJSON *root = NULL;
    MOQ_TRY(moq_json_parse(&root, json, len, TOK_FILE, err));
    moq_tokenizer *t = calloc(1, sizeof *t);
    moq_strmap vmap = {0};
    if (!t) {
        cJSON_Delete(root);
        (void)MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
        return MOQ_ERR_NOMEM; /* spelled out: the analyzer cannot see that MOQ_FAIL returns its code */
    }
    t->bos = -1;
    moq_status st = MOQ_OK;
    if (!cJSON_IsObject(root)) st = MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "top level is %s, expected an object", moq_json_type(root));
    if (st == MOQ_OK) st = parse_model(t, root, &vmap, err);
    if (st == MOQ_OK) st = parse_normalizer(t, root, err);
    if (st == MOQ_OK) st = parse_pretok(t, root, err);
    if (st == MOQ_OK) st = parse_decoder(root, err);
    if (st == MOQ_OK) st = parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor", 0, err);
    moq_strmap_free(&vmap);
    cJSON_Delete(root);
    if (st != MOQ_OK) { moq_tokenizer_free(t); return st; }
    *out = t;
    return MOQ_OK;
}

moq_status moq_tokenizer_open_text(moq_tokenizer **out, const char *json, size_t len, const char *config_json,
                                   moq_error *err) {
    if (!out || !json) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_open_text", "out and json must not be NULL");
    MOQ_TRY(open_json(out, json, len, err));
    if (config_json) {
        moq_status st = parse_tokenizer_config(*out, config_json, strlen(config_json), err);
        if (st != MOQ_OK) { moq_tokenizer_free(*out); *out = NULL; return st; }
    }
    return MOQ_OK;
}

/* Reads dir/name when it exists: *text NULL when absent. */
static moq_status read_side(const char *dir, const char *name, char **text, uint64_t *len, moq_error *err) {
    *text = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, name, "directory path too long");
    struct stat sb;
    if (stat(path, &sb) != 0) return MOQ_OK;
    return moq_read_file(path, name, MOQ_JSON_MAX_BYTES, text, len, err);
}

moq_status moq_tokenizer_open(moq_tokenizer **out, const char *path, moq_error *err) {
    if (!out || !path) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_open", "out and path must not be NULL");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return MOQ_FAIL(err, MOQ_ERR_IO, path, "cannot open: no such file or directory");
    char dir[4096];
    const char *file = TOK_FILE;
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_open", "path of %zu bytes is too long", strlen(path));
    if (!S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(path, '/');
        file = slash ? slash + 1 : path;
        if (slash) dir[slash - path] = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    char *text = NULL;
    uint64_t len = 0;
    MOQ_TRY(read_side(dir, file, &text, &len, err));
    if (!text) return MOQ_FAIL(err, MOQ_ERR_IO, TOK_FILE, "not found in %.200s", dir);
    moq_tokenizer *t = NULL;
    moq_status st = open_json(&t, text, (size_t)len, err);
    free(text);
    MOQ_TRY(st);
    /* config.json and generation_config.json ids first, then tokenizer_config.json's tokens */
    static const char *const id_files[] = { "config.json", "generation_config.json" };
    for (size_t i = 0; i < 2 && st == MOQ_OK; i++) {
        st = read_side(dir, id_files[i], &text, &len, err);
        if (st != MOQ_OK || !text) continue;
        cJSON *cfg = NULL;
        st = moq_json_parse(&cfg, text, (size_t)len, id_files[i], err);
        if (st == MOQ_OK) st = config_ids(t, cfg, id_files[i], "bos_token_id", true, err);
        if (st == MOQ_OK) st = config_ids(t, cfg, id_files[i], "eos_token_id", false, err);
        cJSON_Delete(cfg);
        free(text);
    }
    if (st == MOQ_OK) st = read_side(dir, "tokenizer_config.json", &text, &len, err);
    if (st == MOQ_OK && text) {
        st = parse_tokenizer_config(t, text, (size_t)len, err);
        free(text);
    }
    /* newer snapshots keep the template in its own file */
    if (st == MOQ_OK && t->chat.format == MOQ_CHAT_NONE) st = read_side(dir, "chat_template.jinja", &text, &len, err);
    if (st == MOQ_OK && t->chat.format == MOQ_CHAT_NONE && text) {
        const char *bos = NULL;
        const uint8_t *b = NULL;
        size_t bl = 0;
        char bos_text[64] = "";
        if (t->bos >= 0 && moq_tokenizer_decode_token(t, t->bos, &b, &bl, NULL) == MOQ_OK && bl < sizeof bos_text) {
            memcpy(bos_text, b, bl);
            bos = bos_text;
        }
        if (moq_chat_template_detect(&t->chat, text, bos, "chat_template.jinja", err) != MOQ_OK)
            memset(&t->chat, 0, sizeof t->chat); /* plain prompts still work */
        free(text);
    }
    if (st != MOQ_OK) { moq_tokenizer_free(t); return st; }
    *out = t;
    return MOQ_OK;
}

void moq_tokenizer_free(moq_tokenizer *t) {
    if (!t) return;
    free(t->pool); free(t->tok_off); free(t->tok_len); free(t->tok_flags);
    free(t->m_key); free(t->m_rank); free(t->m_out); free(t->v_slot);
    free(t->added); free(t->added_by_first);
    free(t);
}

int32_t moq_tokenizer_vocab_size(const moq_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t moq_tokenizer_bos(const moq_tokenizer *t) { return t ? t->bos : -1; }
int moq_tokenizer_eos(const moq_tokenizer *t, const int32_t **ids) {
    if (ids) *ids = t ? t->eos : NULL;
    return t ? t->n_eos : 0;
}
bool moq_tokenizer_is_eos(const moq_tokenizer *t, int32_t id) {
    for (int i = 0; t && i < t->n_eos; i++)
        if (t->eos[i] == id) return true;
    return false;
}
bool moq_tokenizer_is_special(const moq_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && (t->tok_flags[id] & TF_SPECIAL);
}
int32_t moq_tokenizer_token_id(const moq_tokenizer *t, const char *text) { return t && text ? find_token(t, text) : -1; }
const moq_chat_template *moq_tokenizer_chat_template(const moq_tokenizer *t) { return t ? &t->chat : NULL; }

/* ---- pre-tokenizer matchers --------------------------------------------------------------------- */
/* Each returns the length (> 0) of the match at s[i..n); the patterns match every character, so
 * pieces tile the input. Regex semantics: alternatives tried in order, quantifiers greedy. */

typedef struct uch { uint32_t cp; size_t len; moq_ucls cls; } uch;

static uch char_at(const uint8_t *s, size_t n, size_t i) {
    uch c = { MOQ_UTF8_INVALID, 0, MOQ_UCLS_OTHER };
    if (i >= n) return c; /* len 0 = end */
    c.len = moq_utf8_next(s, n, i, &c.cp);
    c.cls = moq_ucls_of(c.cp);
    return c;
}

/* End of the run of chars of class cls starting at i. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, moq_ucls cls) {
    for (;;) {
        uch c = char_at(s, n, i);
        if (!c.len || c.cls != cls) return i;
        i += c.len;
    }
}

static size_t run_crlf(const uint8_t *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d at s[i] == '\'': length or 0. Case-insensitive as (?i:) does:
 * ASCII letters of either case, and U+017F LATIN SMALL LETTER LONG S folds to 's'. */
static size_t contraction(const uint8_t *s, size_t n, size_t i, bool icase) {
    static const char *const sfx[] = { "s", "t", "re", "ve", "m", "ll", "d" };
    for (size_t k = 0; k < sizeof sfx / sizeof sfx[0]; k++) {
        size_t j = i + 1;
        const char *p = sfx[k];
        for (; *p; p++) {
            if (j < n && (s[j] == (uint8_t)*p || (icase && s[j] == (uint8_t)(*p - 32)))) { j++; continue; }
            if (icase && *p == 's' && j + 1 < n && s[j] == 0xC5 && s[j + 1] == 0xBF) { j += 2; continue; }
            break;
        }
        if (!*p) return j - i;
    }
    return 0;
}

/* \s+(?!\S)|\s+ at a whitespace char: the run, less its last char when a non-space follows. */
static size_t ws_tail(const uint8_t *s, size_t n, size_t i) {
    size_t j = i, last = i;
    for (;;) {
        uch c = char_at(s, n, j);
        if (!c.len || c.cls != MOQ_UCLS_WS) break;
        last = j;
        j += c.len;
    }
    if (j < n && last > i) return last - i;
    return j - i;
}

static size_t match_gpt2(const uint8_t *s, size_t n, size_t i) {
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i, false);
        if (k) return k;
    }
    uch c0 = char_at(s, n, i);
    size_t start = i;
    if (c0.cp == ' ') {
        uch c1 = char_at(s, n, i + 1);
        if (c1.len && c1.cls != MOQ_UCLS_WS) return run_of(s, n, i + 1, c1.cls) - start;
    }
    if (c0.cls != MOQ_UCLS_WS) return run_of(s, n, i, c0.cls) - start;
    return ws_tail(s, n, i);
}

static size_t match_llama3(const uint8_t *s, size_t n, size_t i, size_t max_digits) {
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i, true);
        if (k) return k;
    }
    uch c0 = char_at(s, n, i);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0.cls == MOQ_UCLS_L) return run_of(s, n, i, MOQ_UCLS_L) - i;
    if (c0.cls != MOQ_UCLS_N && c0.cp != '\r' && c0.cp != '\n') {
        uch c1 = char_at(s, n, i + c0.len);
        if (c1.len && c1.cls == MOQ_UCLS_L) return run_of(s, n, i + c0.len, MOQ_UCLS_L) - i;
    }
    /* \p{N}{1,max} */
    if (c0.cls == MOQ_UCLS_N) {
        size_t j = i;
        for (size_t k = 0; k < max_digits; k++) {
            uch c = char_at(s, n, j);
            if (!c.len || c.cls != MOQ_UCLS_N) break;
            j += c.len;
        }
        return j - i;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (c0.cls == MOQ_UCLS_OTHER) return run_crlf(s, n, run_of(s, n, i, MOQ_UCLS_OTHER)) - i;
    if (c0.cp == ' ') {
        uch c1 = char_at(s, n, i + 1);
        if (c1.len && c1.cls == MOQ_UCLS_OTHER) return run_crlf(s, n, run_of(s, n, i + 1, MOQ_UCLS_OTHER)) - i;
    }
    /* \s*[\r\n]+ : the whitespace run up to and including its last \r or \n */
    size_t j = i, last_nl = SIZE_MAX;
    for (;;) {
        uch c = char_at(s, n, j);
        if (!c.len || c.cls != MOQ_UCLS_WS) break;
        if (c.cp == '\r' || c.cp == '\n') last_nl = j;
        j += c.len;
    }
    if (last_nl != SIZE_MAX) return last_nl + 1 - i;
    return ws_tail(s, n, i);
}

static size_t match_digits(const uint8_t *s, size_t n, size_t i, bool isolated) {
    uch c0 = char_at(s, n, i);
    if (c0.cls == MOQ_UCLS_N) return isolated ? c0.len : run_of(s, n, i, MOQ_UCLS_N) - i;
    size_t j = i;
    for (;;) {
        uch c = char_at(s, n, j);
        if (!c.len || c.cls == MOQ_UCLS_N) return j - i;
        j += c.len;
    }
}

static size_t step_match(pretok_step st, const uint8_t *s, size_t n, size_t i) {
    switch (st) {
    case STEP_SPLIT_GPT2: return match_gpt2(s, n, i);
    case STEP_SPLIT_LLAMA3: return match_llama3(s, n, i, 3);
    case STEP_SPLIT_QWEN2: return match_llama3(s, n, i, 1);
    case STEP_DIGITS_ISOLATED: return match_digits(s, n, i, true);
    case STEP_DIGITS_CONTIGUOUS: return match_digits(s, n, i, false);
    }
    return n - i;
}

/* ---- encoding ----------------------------------------------------------------------------------- */

typedef struct enc_ctx {
    const moq_tokenizer *t;
    uint32_t flags;
    int32_t *ids;
    size_t   cap, n;
    void    *mem;               /* the scratch below, for pieces of up to mem_len bytes */
    size_t   mem_len;
    int32_t *sym, *prev, *next; /* [len] BPE symbols of the current piece */
    uint64_t *heap;             /* [3 len] (rank << 32 | pos), min-heap    */
    moq_error *err;
} enc_ctx;

static void emit(enc_ctx *c, int32_t id) {
    if (c->n < c->cap) c->ids[c->n] = id;
    c->n++;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mv = v;
        if (l < *n && h[l] < mv) { m = l; mv = h[l]; }
        if (r < *n && h[r] < mv) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = v;
    return top;
}

static void push_pair(enc_ctx *c, size_t *hn, int32_t pos) {
    uint32_t rank;
    int32_t out;
    int32_t q = c->next[pos];
    if (q >= 0 && merge_get(c->t, c->sym[pos], c->sym[q], &rank, &out))
        heap_push(c->heap, hn, ((uint64_t)rank << 32) | (uint32_t)pos);
}

/* BPE of one piece: merges lowest rank first, leftmost first among equal ranks. */
static void bpe(enc_ctx *c, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    if (t->ignore_merges) {
        int32_t id = vocab_get(t, s, n);
        if (id >= 0) { emit(c, id); return; }
    }
    /* A byte whose symbol the vocabulary lacks is dropped, and its neighbours become adjacent:
     * `tokenizers` does so when unk_token is null (SmolLM2's vocabulary lacks 21 byte symbols). */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->byte_id[s[i]] < 0) continue;
        c->sym[k] = t->byte_id[s[i]];
        c->prev[k] = (int32_t)k - 1;
        k++;
    }
    if (k == 0) return;
    for (size_t i = 0; i < k; i++) c->next[i] = i + 1 < k ? (int32_t)i + 1 : -1;
    n = k;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(c, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = heap_pop(c->heap, &hn);
        int32_t pos = (int32_t)(uint32_t)top, q = c->next[pos];
        uint32_t rank;
        int32_t out;
        if (c->sym[pos] < 0 || q < 0) continue;
        if (!merge_get(t, c->sym[pos], c->sym[q], &rank, &out) || rank != (uint32_t)(top >> 32)) continue;
        c->sym[pos] = out;
        c->sym[q] = -1;
        c->next[pos] = c->next[q];
        if (c->next[q] >= 0) c->prev[c->next[q]] = pos;
        if (c->prev[pos] >= 0) push_pair(c, &hn, c->prev[pos]);
        push_pair(c, &hn, pos);
    }
    for (int32_t i = 0; i >= 0; i = c->next[i]) emit(c, c->sym[i]);
}

static void pretok(enc_ctx *c, int step, const uint8_t *s, size_t n) {
    if (step == c->t->n_steps) { bpe(c, s, n); return; }
    for (size_t i = 0; i < n;) {
        size_t m = step_match(c->t->steps[step], s, n, i);
        pretok(c, step + 1, s + i, m);
        i += m;
    }
}

/* Makes the BPE scratch hold pieces of n bytes. */
static moq_status scratch_reserve(enc_ctx *c, size_t n) {
    if (n <= c->mem_len) return MOQ_OK;
    void *mem = malloc(n * (3 * sizeof(int32_t) + 3 * sizeof(uint64_t)));
    if (!mem) return MOQ_FAIL(c->err, MOQ_ERR_NOMEM, "moq_tokenizer_encode", "out of memory for encoding %zu bytes", n);
    free(c->mem);
    c->mem = mem;
    c->mem_len = n;
    c->heap = mem;
    c->sym = (int32_t *)(c->heap + 3 * n);
    c->prev = c->sym + n;
    c->next = c->prev + n;
    return MOQ_OK;
}

static moq_status split_added(enc_ctx *c, int pass, const uint8_t *s, size_t n);

/* NFC of a segment (when the quick check cannot prove it unchanged), then pass 1 on the result. */
static moq_status split_normalized(enc_ctx *c, const uint8_t *s, size_t n) {
    uint8_t *norm;
    size_t nl;
    MOQ_TRY(nfc_normalize(s, n, &norm, &nl, c->err));
    moq_status st = scratch_reserve(c, nl);
    if (st == MOQ_OK) st = split_added(c, 2, norm, nl);
    free(norm);
    return st;
}

/* Cuts added tokens out of s (pass 0: normalized=false ones; pass 1: normalized=true ones, after
 * NFC when the tokenizer declares it; pass 2: pass 1 on text already normalized), leftmost-longest,
 * and passes the text between them on. */
static moq_status split_added(enc_ctx *c, int pass, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    if (pass == 1 && t->nfc && nfc_quick_check(s, n)) return split_normalized(c, s, n);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        const added_tok *best = NULL;
        for (uint32_t k = t->added_first[s[i]]; k < t->added_first[s[i] + 1]; k++) {
            const added_tok *a = &t->added[t->added_by_first[k]];
            if (a->normalized != (pass >= 1)) continue;
            if (a->special && (c->flags & MOQ_ENCODE_SPECIAL_AS_TEXT)) continue;
            if (a->len <= n - i && (!best || a->len > best->len) && memcmp(t->pool + a->off, s + i, a->len) == 0) best = a;
        }
        if (!best) continue;
        if (i > start) {
            if (pass == 0) MOQ_TRY(split_added(c, 1, s + start, i - start));
            else pretok(c, 0, s + start, i - start);
        }
        emit(c, best->id);
        i += best->len - 1;
        start = i + 1;
    }
    if (start < n) {
        if (pass == 0) return split_added(c, 1, s + start, n - start);
        pretok(c, 0, s + start, n - start);
    }
    return MOQ_OK;
}

moq_status moq_tokenizer_encode(const moq_tokenizer *t, const char *text, size_t len, uint32_t flags, int32_t *ids,
                                size_t cap, size_t *n_ids, moq_error *err) {
    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || (!ids && cap) || !n_ids)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_encode", "t, text, ids and n_ids must not be NULL");
    if (len > (size_t)INT32_MAX / 2)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_encode", "text of %zu bytes is longer than moq encodes at once (%d)", len, INT32_MAX / 2);
    enc_ctx c = { .t = t, .flags = flags, .ids = ids, .cap = cap, .err = err };
    if (flags & MOQ_ENCODE_ADD_SPECIAL)
        for (int i = 0; i < t->n_prefix; i++) emit(&c, t->prefix[i]);
    moq_status st = MOQ_OK;
    if (len) {
        st = scratch_reserve(&c, len);
        if (st == MOQ_OK) st = split_added(&c, 0, (const uint8_t *)text, len);
        free(c.mem);
    }
    if (st != MOQ_OK) return st;
    if (flags & MOQ_ENCODE_ADD_SPECIAL)
        for (int i = 0; i < t->n_suffix; i++) emit(&c, t->suffix[i]);
    *n_ids = c.n;
    if (c.n > cap) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_encode", "output holds %zu ids, the text needs %zu", cap, c.n);
    return MOQ_OK;
}

/* ---- decoding ----------------------------------------------------------------------------------- */

moq_status moq_tokenizer_decode_token(const moq_tokenizer *t, int32_t id, const uint8_t **bytes, size_t *len,
                                      moq_error *err) {
    if (!t || !bytes || !len) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_decode_token", "NULL argument");
    if (id < 0 || id >= t->n_vocab || !(t->tok_flags[id] & TF_PRESENT))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, TOK_FILE, "token id %d is not in the vocabulary (size %d)", (int)id, (int)t->n_vocab);
    *bytes = t->pool + t->tok_off[id];
    *len = t->tok_len[id];
    return MOQ_OK;
}

void moq_utf8_stream_reset(moq_utf8_stream *s) { memset(s, 0, sizeof *s); }

static const char k_fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

moq_status moq_utf8_stream_push(moq_utf8_stream *s, const uint8_t *in, size_t n, char *out, size_t cap,
                                size_t *out_len, moq_error *err) {
    if (!s || (!in && n) || !out || !out_len) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_utf8_stream_push", "NULL argument");
    *out_len = 0;
    if (cap < MOQ_UTF8_STREAM_OUT_MAX(n))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_utf8_stream_push", "output of %zu bytes, expected at least %zu for %zu input bytes", cap,
                        MOQ_UTF8_STREAM_OUT_MAX(n), n);
    if (s->n_pend > 3) s->n_pend = 0; /* a corrupted state cannot overrun pend */
    size_t np = s->n_pend, total = np + n, k = 0, o = 0;
#define BYTE_AT(x) ((x) < np ? s->pend[(x)] : in[(x) - np])
    while (k < total) {
        uint8_t b = BYTE_AT(k);
        if (b < 0x80) { out[o++] = (char)b; k++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
        else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
        else { memcpy(out + o, k_fffd, 3); o += 3; k++; continue; }
        size_t j = 1;
        for (; j <= need; j++) {
            if (k + j >= total) { /* a valid start of a character: hold it back */
                uint8_t tmp[4] = {0};
                for (size_t x = 0; x < j; x++) tmp[x] = BYTE_AT(k + x);
                memcpy(s->pend, tmp, j);
                s->n_pend = (uint8_t)j;
                *out_len = o;
                return MOQ_OK;
            }
            uint8_t cb = BYTE_AT(k + j);
            if (cb < (j == 1 ? lo : 0x80) || cb > (j == 1 ? hi : 0xBF)) break;
        }
        if (j > need) {
            for (size_t x = 0; x <= need; x++) out[o++] = (char)BYTE_AT(k + x);
            k += need + 1;
        } else {
            memcpy(out + o, k_fffd, 3); o += 3;
            k += j; /* the maximal invalid subpart; the byte that broke it starts again */
        }
    }
#undef BYTE_AT
    s->n_pend = 0;
    *out_len = o;
    return MOQ_OK;
}

size_t moq_utf8_stream_flush(moq_utf8_stream *s, char *out, size_t cap) {
    if (!s || !s->n_pend) return 0;
    s->n_pend = 0;
    if (!out || cap < 3) return 0;
    memcpy(out, k_fffd, 3);
    return 3;
}
