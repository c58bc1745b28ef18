/* tokenizer.c — BPE tokenizer loaded from a Hugging Face tokenizer.json.
 *
 * What a tokenizer.json may say (everything else is MOQ_ERR_UNSUPPORTED naming the key; the full list
 * is docs/COMPAT.md "Tokenizers"):
 *
 *   model          {"type": "BPE", "vocab", "merges": ["a b", ...] | [["a", "b"], ...], ignore_merges,
 *                   byte_fallback, unk_token, fuse_unk; dropout null; no subword prefix / suffix}
 *                  | {"type": "Unigram", "vocab": [[piece, score], ...], unk_id, byte_fallback}
 *   added_tokens   [{"id", "content", "special", "normalized", "lstrip", "rstrip", "single_word"}]
 *   normalizer     rows: NFC NFD NFKC NFKD (utf8proc), Lowercase, StripAccents, Prepend, Replace, Strip
 *   pre_tokenizer  rows: Split (PCRE2 regex or literal, behaviour, invert) — also Digits, Punctuation,
 *                  Whitespace(Split) and ByteLevel's regex —, Metaspace, ByteLevel's prefix space;
 *                  a ByteLevel pre-tokenizer must come last and makes the model byte-level
 *   decoder        rows: ByteLevel, ByteFallback, Replace, Metaspace, Strip; Fuse (Strip after it acts on
 *                  the whole text)
 *   post_processor null | ByteLevel | TemplateProcessing | Sequence of those (ADD_SPECIAL only)
 *
 * Encoding follows the `tokenizers` library step by step:
 *   1. added tokens with normalized=false are cut out of the text, leftmost-longest first, with
 *      single_word (skip a match inside a word), lstrip / rstrip (the token takes the white space);
 *   2. each segment between them runs through the normalizer rows, then normalized added tokens;
 *   3. each pre-tokenizer row splits each piece (NormalizedString::split's behaviours);
 *   4. each piece becomes symbols — its bytes (byte-level: vocab keys are token bytes) or its
 *      characters (else: vocab keys are token texts; a character not in the vocabulary takes its
 *      <0xNN> tokens with byte_fallback, else unk, fused with fuse_unk, else nothing) — merged lowest
 *      rank first, leftmost first on equal ranks (a binary heap: O(n log n) per piece); with
 *      ignore_merges a piece that is itself in the vocabulary is emitted whole first.
 * Bytes that are not valid UTF-8 match no regex (PCRE2_MATCH_INVALID_UTF), normalize to themselves
 * and are encoded as bytes, so the token bytes give them back.
 *
 * Decoding: each token's bytes through the decoder rows are computed once at load (dec_off/dec_len);
 * moq_tokenizer_decode adds what depends on the position (see there).
 *
 * Byte-level mapping (GPT-2): bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF are the code points of the same
 * value; the other 68 bytes, in increasing order, are U+0100, U+0101, ... (space = U+0120 'Ġ').
 *
 * Tested by tests/model/test_tokenizer.c and test_tokenizer_families.c against ids from the Hugging
 * Face `tokenizers` package (tests/golden/tokenizer/gen.py, gen_families.py, real/trim.py); fuzzed by
 * tests/fuzz/fuzz_tokenizer.c.
 */
#include "model/tokenizer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/strmap.h"
#include "io/json.h"
#include "io/mmap.h"
#include "model/chat.h"

#define TOK_FILE "tokenizer.json"
#define TOK_MAX_ID (1 << 22)      /* ids above this are refused: no real vocabulary comes close */
#define TOK_MAX_AFFIX 4           /* post-processor tokens before / after the text              */
#define TOK_MAX_EOS 16
#define TOK_MAX_STEPS 16          /* normalizer / pre-tokenizer / decoder steps                 */

enum { TF_PRESENT = 1, TF_SPECIAL = 2, TF_ADDED = 4, TF_BYTE = 8 /* a ByteFallback <0xNN> token */ };

/* Split behaviours, as tokenizers' SplitDelimiterBehavior. */
typedef enum split_behavior { SB_REMOVED, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS } split_behavior;
static const char *const k_behaviors[] = { "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" };

/* Pre-tokenizer steps: every pre-tokenizer of tokenizer.json becomes one or two of these rows. */
typedef enum pretok_kind {
    PT_SPLIT,        /* a regex (PCRE2) with a behaviour: Split, Digits, Punctuation, Whitespace[Split], ByteLevel's regex */
    PT_PREFIX,       /* ByteLevel add_prefix_space: prepend " " unless the piece starts with one                     */
    PT_METASPACE,    /* replace " " by the replacement, prepend it (prepend_scheme), optionally split before it      */
} pretok_kind;

typedef struct pretok_step {
    pretok_kind    kind;
    pcre2_code    *re;         /* PT_SPLIT */
    split_behavior behavior;
    bool           invert;
    int            prepend;    /* PT_METASPACE: 0 never, 1 first, 2 always */
    bool           split;      /* PT_METASPACE: split before each replacement */
    char           rep[8];     /* PT_METASPACE replacement (UTF-8)            */
    size_t         rep_len;
} pretok_step;

typedef enum norm_kind { NM_NFC, NM_NFD, NM_NFKC, NM_NFKD, NM_LOWERCASE, NM_STRIP_ACCENTS, NM_PREPEND, NM_REPLACE, NM_STRIP } norm_kind;

typedef struct norm_step {
    norm_kind   kind;
    pcre2_code *re;            /* NM_REPLACE (a String pattern is compiled as a literal) */
    char       *text;          /* NM_PREPEND / NM_REPLACE content (malloc'd)             */
    size_t      text_len;
    bool        left, right;   /* NM_STRIP                                               */
} norm_step;

/* Decoder rows applied to each token at load time (its bytes in the middle of a sequence), plus
 * what decode() does to the whole sequence. */
typedef enum dec_kind { DK_BYTE_LEVEL, DK_BYTE_FALLBACK, DK_REPLACE, DK_METASPACE, DK_STRIP } dec_kind;
typedef struct dec_step {
    dec_kind kind;
    char    *from, *to;        /* DK_REPLACE; DK_METASPACE: from = replacement (malloc'd) */
    size_t   from_len, to_len;
    uint32_t strip_cp;         /* DK_STRIP */
    int      strip_start, strip_stop;
} dec_step;

typedef struct added_tok {
    int32_t  id;
    uint32_t off, len;    /* content in pool */
    uint32_t moff, mlen;  /* what is matched: the content, normalized for normalized=true tokens */
    bool     special, normalized, lstrip, rstrip, single_word;
} added_tok;

struct moq_tokenizer {
    int32_t   n_vocab;
    uint8_t  *pool;       /* token keys, decoded bytes and added-token contents */
    size_t    pool_len, pool_cap;
    uint32_t *tok_off, *tok_len; /* [n_vocab] the token in model space: its bytes (byte-level) or its text */
    uint32_t *dec_off, *dec_len; /* [n_vocab] the token's bytes through the decoder, mid-sequence          */
    uint8_t  *tok_flags;  /* [n_vocab] TF_* */
    bool      byte_level; /* ByteLevel pre-tokenizer: the model sees bytes, vocab keys are bytes        */
    int32_t   byte_id[256];  /* byte-level: the id of each byte's symbol; else ByteFallback <0xNN> ids */
    bool      byte_fallback, fuse_unk;
    int32_t   unk;
    bool      unigram;    /* model.type Unigram: pieces scored, best segmentation by Viterbi */
    double   *u_score;    /* [n_pieces] */
    size_t    n_pieces;
    double    u_min;      /* the lowest score; an unknown character costs u_min - 10 */
    size_t    u_maxlen;   /* the longest piece, in bytes */
    /* merges: open addressing, key = left << 32 | right */
    uint64_t *m_key;
    uint32_t *m_rank;
    int32_t  *m_out;
    size_t    m_cap;
    /* model vocab by key, open addressing of ids */
    int32_t  *v_slot;
    size_t    v_cap;
    bool      ignore_merges;
    int       n_norm, n_steps, n_dec;
    norm_step   norm[TOK_MAX_STEPS];
    pretok_step steps[TOK_MAX_STEPS];
    dec_step    dec[TOK_MAX_STEPS];
    bool      dec_drop_first_meta; /* Metaspace decoder (prepend_scheme not never): the first token loses its replacement chars */
    uint32_t  dec_strip_cp;        /* Strip after Fuse: on the whole text */
    int       dec_strip_start, dec_strip_stop;
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

/* ---- UTF-8 and Unicode ---------------------------------------------------------------------------- */

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

/* The White_Space property (Rust's char::is_whitespace, Oniguruma's \s): 25 code points. */
bool moq_unicode_is_white_space(uint32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return true;
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
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

/* A growable byte buffer for the text a normalizer or pre-tokenizer writes. */
typedef struct tbuf { uint8_t *p; size_t n, cap; bool oom; } tbuf;

static void tb_put(tbuf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np; b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void tb_cp(tbuf *b, uint32_t cp) {
    char u[4];
    tb_put(b, u, utf8_put(cp, u));
}

/* ---- regular expressions (PCRE2) ------------------------------------------------------------------ */
/* tokenizer.json patterns are Oniguruma regexes (the `tokenizers` library's engine). PCRE2 with UTF
 * and UCP reads the same syntax and Unicode properties; some escapes differ and are rewritten:
 * \s and \S (PCRE2 adds U+180E; Oniguruma's is White_Space), \w / \W (Oniguruma's Word class also
 * holds marks and connector punctuation) and \h / \H (Oniguruma: hexadecimal digits). Invalid UTF-8 in the subject never matches anything
 * (PCRE2_MATCH_INVALID_UTF), so such bytes fall between matches. */

#define WS_CLASS "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
/* Oniguruma's Word class, checked code point by code point against `tokenizers` (Unicode 14 part):
 * letters, letter numbers, marks, decimal digits, connector punctuation, the alphabetic symbols
 * (circled / squared letters) and Latin-1's superscripts and fractions. */
#define WORD_CLASS "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}\\x{24b6}-\\x{24e9}" \
                   "\\x{1f130}-\\x{1f149}\\x{1f150}-\\x{1f169}\\x{1f170}-\\x{1f189}"

/* Oniguruma pattern → PCRE2 pattern (malloc'd), or NULL with *why set. */
static char *regex_translate(const char *re, const char **why) {
    tbuf b = {0};
    int in_class = 0;
    for (const char *p = re; *p; p++) {
        if (p[0] == '\\' && p[1]) {
            char e = p[1];
            if (e == 's' || e == 'w') {
                const char *set = e == 's' ? WS_CLASS : WORD_CLASS;
                if (!in_class) tb_put(&b, "[", 1);
                tb_put(&b, set, strlen(set));
                if (!in_class) tb_put(&b, "]", 1);
            } else if (e == 'h' || e == 'H') { /* Oniguruma: a hexadecimal digit (PCRE2: horizontal space) */
                const char *set = e == 'h' ? "0-9a-fA-F" : "^0-9a-fA-F";
                if (in_class && e == 'H') { free(b.p); *why = "\\H inside a character class"; return NULL; }
                if (!in_class) tb_put(&b, "[", 1);
                tb_put(&b, set, strlen(set));
                if (!in_class) tb_put(&b, "]", 1);
            } else if (e == 'S' || e == 'W') {
                if (in_class) { free(b.p); *why = "\\S or \\W inside a character class"; return NULL; }
                const char *set = e == 'S' ? WS_CLASS : WORD_CLASS;
                tb_put(&b, "[^", 2);
                tb_put(&b, set, strlen(set));
                tb_put(&b, "]", 1);
            } else {
                tb_put(&b, p, 2);
            }
            p++;
            continue;
        }
        if (p[0] == '[') {
            if (in_class && p[1] == ':') { /* POSIX class [:alpha:] inside a class */
                const char *q = strstr(p + 2, ":]");
                if (q) { tb_put(&b, p, (size_t)(q + 2 - p)); p = q + 1; continue; }
            }
            if (!in_class) {
                in_class = 1;
                tb_put(&b, p, 1);
                if (p[1] == '^') { tb_put(&b, "^", 1); p++; }
                if (p[1] == ']') { tb_put(&b, "]", 1); p++; } /* a leading ] is literal */
                continue;
            }
            in_class++; /* Oniguruma's nested class: PCRE2 rejects it at compile time */
        } else if (p[0] == ']' && in_class) {
            in_class--;
        }
        tb_put(&b, p, 1);
    }
    tb_put(&b, "", 1);
    if (b.oom) { free(b.p); *why = "out of memory"; return NULL; }
    return (char *)b.p;
}

/* Compiles a tokenizer.json pattern: {"Regex": "..."} or {"String": "..."} (a literal). */
static moq_status regex_compile(const cJSON *pat, const char *key, pcre2_code **out, moq_error *err) {
    *out = NULL;
    const char *re = NULL, *lit = NULL;
    if (!cJSON_IsObject(pat)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.pattern is %s, expected {\"Regex\": ...} or {\"String\": ...}", key, moq_json_type(pat));
    MOQ_TRY(moq_json_str(pat, "Regex", &re, NULL, TOK_FILE, key, err));
    MOQ_TRY(moq_json_str(pat, "String", &lit, NULL, TOK_FILE, key, err));
    if (!re && !lit) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.pattern has neither \"Regex\" nor \"String\"", key);
    if (lit && !lit[0]) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.pattern.String is empty", key);
    char *pcre = NULL;
    const char *why = NULL;
    if (re && !(pcre = regex_translate(re, &why)))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.pattern.Regex \"%.200s\": %s", key, re, why);
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (re ? PCRE2_UCP : PCRE2_LITERAL);
    *out = pcre2_compile((PCRE2_SPTR)(re ? pcre : lit), PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    free(pcre);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s.pattern \"%.200s\" is not a regex PCRE2 compiles: %s at offset %zu",
                        key, re ? re : lit, (const char *)msg, (size_t)at);
    }
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* the interpreter serves when JIT is unavailable */
    return MOQ_OK;
}

/* Non-empty matches of re in s[0..n), left to right (after an empty match the search moves on one
 * character, as Oniguruma's find_iter does): calls fn(ctx, start, end) for each. Returns false when
 * PCRE2 fails (only on resource limits). */
typedef bool (*match_fn)(void *ctx, size_t start, size_t end);
static bool regex_each(const pcre2_code *re, pcre2_match_data *md, const uint8_t *s, size_t n, match_fn fn, void *ctx) {
    size_t pos = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, s, n, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return true;
        if (rc < 0) return false;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], e = ov[1];
        if (e > a) {
            if (!fn(ctx, a, e)) return false;
            pos = e;
        } else {
            if (a >= n) return true;
            uint32_t cp;
            pos = a + moq_utf8_next(s, n, a, &cp);
        }
    }
    return true;
}

/* ---- normalizers (utf8proc) ------------------------------------------------------------------------ */

/* utf8proc's option set for a Unicode normal form. */
static utf8proc_option_t nf_options(norm_kind k) {
    switch (k) {
    case NM_NFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case NM_NFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case NM_NFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case NM_NFKD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    default: return 0;
    }
}

typedef struct repl_ctx { tbuf *b; const uint8_t *s; size_t last; const norm_step *st; } repl_ctx;
static bool repl_one(void *vc, size_t a, size_t e) {
    repl_ctx *c = vc;
    tb_put(c->b, c->s + c->last, a - c->last);
    tb_put(c->b, c->st->text, c->st->text_len);
    c->last = e;
    return true;
}

/* One normalizer over s[0..n) into b. Bytes that are not valid UTF-8 pass through unchanged and
 * split the text into runs normalized apart. */
static bool normalize_one(const norm_step *st, pcre2_match_data *md, const uint8_t *s, size_t n, tbuf *b) {
    switch (st->kind) {
    case NM_NFC: case NM_NFD: case NM_NFKC: case NM_NFKD:
        for (size_t i = 0; i < n;) {
            size_t j = i;
            uint32_t cp;
            size_t l = 0;
            while (j < n && (l = moq_utf8_next(s, n, j, &cp), cp != MOQ_UTF8_INVALID)) j += l;
            if (j > i) {
                utf8proc_uint8_t *o = NULL;
                utf8proc_ssize_t r = utf8proc_map(s + i, (utf8proc_ssize_t)(j - i), &o, nf_options(st->kind));
                if (r < 0) { free(o); return false; }
                tb_put(b, o, (size_t)r);
                free(o);
            }
            if (j < n) { tb_put(b, s + j, 1); j++; }
            i = j;
        }
        return true;
    case NM_LOWERCASE: case NM_STRIP_ACCENTS:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = moq_utf8_next(s, n, i, &cp);
            if (cp == MOQ_UTF8_INVALID) tb_put(b, s + i, 1);
            else if (st->kind == NM_STRIP_ACCENTS) {
                utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
                if (c != UTF8PROC_CATEGORY_MN && c != UTF8PROC_CATEGORY_MC && c != UTF8PROC_CATEGORY_ME) tb_put(b, s + i, l);
            } else if (cp == 0x130) { /* the one code point whose lowercase is two: i + combining dot above */
                tb_cp(b, 'i'); tb_cp(b, 0x307);
            } else {
                tb_cp(b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            }
            i += l;
        }
        return true;
    case NM_PREPEND:
        if (n) tb_put(b, st->text, st->text_len);
        tb_put(b, s, n);
        return true;
    case NM_REPLACE: {
        repl_ctx c = { b, s, 0, st };
        if (!regex_each(st->re, md, s, n, repl_one, &c)) return false;
        tb_put(b, s + c.last, n - c.last);
        return true;
    }
    case NM_STRIP: {
        size_t a = 0, e = n;
        while (st->left && a < e) {
            uint32_t cp;
            size_t l = moq_utf8_next(s, n, a, &cp);
            if (cp == MOQ_UTF8_INVALID || !moq_unicode_is_white_space(cp)) break;
            a += l;
        }
        while (st->right && e > a) { /* step back one character */
            size_t k = e - 1;
            while (k > a && (s[k] & 0xC0) == 0x80 && e - k < 4) k--;
            uint32_t cp;
            size_t l = moq_utf8_next(s, n, k, &cp);
            if (k + l != e || cp == MOQ_UTF8_INVALID || !moq_unicode_is_white_space(cp)) break;
            e = k;
        }
        tb_put(b, s + a, e - a);
        return true;
    }
    }
    return false;
}

/* All normalizer rows over s[0..n) into *out (malloc'd; the caller frees out->p). */
static bool normalize_all(const moq_tokenizer *t, pcre2_match_data *md, const uint8_t *s, size_t n, tbuf *out) {
    tbuf cur = {0}, nxt = {0};
    tb_put(&cur, s, n);
    for (int k = 0; k < t->n_norm && !cur.oom; k++) {
        nxt.n = 0;
        if (!normalize_one(&t->norm[k], md, cur.p, cur.n, &nxt)) nxt.oom = true;
        tbuf sw = cur; cur = nxt; nxt = sw;
    }
    free(nxt.p);
    *out = cur;
    return !cur.oom;
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

/* A BPE option moq does not implement must be absent, null, or the neutral value. */
static moq_status check_bpe_options(moq_tokenizer *t, const cJSON *model, moq_error *err) {
    static const char *const must_be_null[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (size_t i = 0; i < sizeof must_be_null / sizeof must_be_null[0]; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, must_be_null[i]);
        if (is_absent(j) || (cJSON_IsString(j) && j->valuestring[0] == '\0')) continue;
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.%s is %s; moq supports only null",
                        must_be_null[i], moq_json_type(j));
    }
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_absent(dr) && !(cJSON_IsNumber(dr) && (dr->valuedouble == 0.0 || dr->valuedouble == 1.0)))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.dropout is %s; moq supports null (dropout is for training)", moq_json_type(dr));
    MOQ_TRY(moq_json_bool(model, "byte_fallback", &t->byte_fallback, NULL, TOK_FILE, "model", err));
    MOQ_TRY(moq_json_bool(model, "fuse_unk", &t->fuse_unk, NULL, TOK_FILE, "model", err));
    return MOQ_OK;
}

static moq_status add_step(moq_tokenizer *t, pretok_step s, moq_error *err) {
    if (t->n_steps >= TOK_MAX_STEPS) {
        if (s.re) pcre2_code_free(s.re);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "pre_tokenizer has more than %d steps", TOK_MAX_STEPS);
    }
    t->steps[t->n_steps++] = s;
    return MOQ_OK;
}

/* A pre-tokenizer that is a fixed regex split: Digits, Punctuation, Whitespace, WhitespaceSplit,
 * ByteLevel's GPT-2 regex. */
static moq_status add_fixed_split(moq_tokenizer *t, const char *re, split_behavior b, bool invert, const char *key, moq_error *err) {
    cJSON *pat = cJSON_CreateObject();
    if (!pat || !cJSON_AddStringToObject(pat, "Regex", re)) { cJSON_Delete(pat); return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory"); }
    pretok_step s = { .kind = PT_SPLIT, .behavior = b, .invert = invert };
    moq_status st = regex_compile(pat, key, &s.re, err);
    cJSON_Delete(pat);
    MOQ_TRY(st);
    return add_step(t, s, err);
}

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* prepend_scheme "always" | "first" | "never", or the older add_prefix_space bool. */
static moq_status read_prepend(const cJSON *p, const char *key, int *out, moq_error *err) {
    const char *ps = NULL;
    bool aps = true;
    MOQ_TRY(moq_json_str(p, "prepend_scheme", &ps, NULL, TOK_FILE, key, err));
    MOQ_TRY(moq_json_bool(p, "add_prefix_space", &aps, NULL, TOK_FILE, key, err));
    static const char *const schemes[] = { "never", "first", "always" };
    if (!ps) { *out = aps ? 2 : 0; return MOQ_OK; }
    for (int i = 0; i < 3; i++)
        if (strcmp(ps, schemes[i]) == 0) { *out = i; return MOQ_OK; }
    return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.prepend_scheme \"%.40s\" is not one of always, first, never", key, ps);
}

static moq_status read_replacement(const cJSON *p, const char *key, char *rep, size_t cap, size_t *len, moq_error *err) {
    const char *r = NULL;
    MOQ_TRY(moq_json_str(p, "replacement", &r, NULL, TOK_FILE, key, err));
    if (!r) r = "\xe2\x96\x81"; /* U+2581 */
    uint32_t cp;
    size_t l = strlen(r);
    if (!l || l >= cap || moq_utf8_next((const uint8_t *)r, l, 0, &cp) != l)
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.replacement \"%.20s\" is not one character", key, r);
    memcpy(rep, r, l + 1);
    *len = l;
    return MOQ_OK;
}

static moq_status parse_pretok_one(moq_tokenizer *t, const cJSON *p, const char *key, int depth, int *n_bytelevel,
                                   moq_error *err) {
    const char *type = NULL;
    MOQ_TRY(moq_json_str(p, "type", &type, NULL, TOK_FILE, key, err));
    if (!type) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.type is absent", key);
    if (*n_bytelevel)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s (%s) follows a ByteLevel pre-tokenizer; moq needs ByteLevel last", key, type);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.pretokenizers is %s, expected an array", key, moq_json_type(list));
        if (depth > 2) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s nests Sequences more than 3 deep", key);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char k[160];
            snprintf(k, sizeof k, "%s.pretokenizers[%d]", key, i);
            MOQ_TRY(parse_pretok_one(t, e, k, depth + 1, n_bytelevel, err));
        }
        return MOQ_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        bool aps = false, use_regex = true;
        MOQ_TRY(moq_json_bool(p, "add_prefix_space", &aps, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(p, "use_regex", &use_regex, NULL, TOK_FILE, key, err));
        (*n_bytelevel)++;
        if (aps) MOQ_TRY(add_step(t, (pretok_step){ .kind = PT_PREFIX }, err));
        if (use_regex) MOQ_TRY(add_fixed_split(t, GPT2_REGEX, SB_ISOLATED, false, key, err));
        return MOQ_OK;
    }
    if (strcmp(type, "Digits") == 0) { /* Rust's char::is_numeric is \p{N} */
        bool ind = false;
        MOQ_TRY(moq_json_bool(p, "individual_digits", &ind, NULL, TOK_FILE, key, err));
        return add_fixed_split(t, ind ? "\\p{N}" : "\\p{N}+", SB_ISOLATED, false, key, err);
    }
    if (strcmp(type, "Punctuation") == 0 || strcmp(type, "Split") == 0) {
        const char *behavior = NULL;
        MOQ_TRY(moq_json_str(p, "behavior", &behavior, NULL, TOK_FILE, key, err));
        pretok_step s = { .kind = PT_SPLIT, .behavior = SB_ISOLATED };
        if (behavior) {
            size_t b = 0;
            while (b < 5 && strcmp(behavior, k_behaviors[b]) != 0) b++;
            if (b == 5) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.behavior \"%.40s\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", key, behavior);
            s.behavior = (split_behavior)b;
        } else if (type[0] == 'S') {
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.behavior is absent", key);
        }
        if (type[0] == 'P') /* ASCII punctuation or general category P */
            return add_fixed_split(t, "[\\p{P}!-/:-@\\[-`{-~]", s.behavior, false, key, err);
        MOQ_TRY(moq_json_bool(p, "invert", &s.invert, NULL, TOK_FILE, key, err));
        MOQ_TRY(regex_compile(cJSON_GetObjectItemCaseSensitive(p, "pattern"), key, &s.re, err));
        return add_step(t, s, err);
    }
    if (strcmp(type, "Whitespace") == 0) return add_fixed_split(t, "\\w+|[^\\w\\s]+", SB_REMOVED, true, key, err);
    if (strcmp(type, "WhitespaceSplit") == 0) return add_fixed_split(t, "\\s+", SB_REMOVED, false, key, err);
    if (strcmp(type, "Metaspace") == 0) {
        pretok_step s = { .kind = PT_METASPACE, .split = true };
        MOQ_TRY(read_replacement(p, key, s.rep, sizeof s.rep, &s.rep_len, err));
        MOQ_TRY(read_prepend(p, key, &s.prepend, err));
        MOQ_TRY(moq_json_bool(p, "split", &s.split, NULL, TOK_FILE, key, err));
        return add_step(t, s, err);
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE,
                    "%s.type \"%.64s\" is not one of ByteLevel, Split, Digits, Metaspace, Punctuation, Whitespace, WhitespaceSplit, Sequence", key, type);
}

static moq_status parse_pretok(moq_tokenizer *t, const cJSON *root, moq_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (is_absent(p)) return MOQ_OK;
    if (!cJSON_IsObject(p)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "pre_tokenizer is %s, expected an object or null", moq_json_type(p));
    int n_bl = 0;
    MOQ_TRY(parse_pretok_one(t, p, "pre_tokenizer", 0, &n_bl, err));
    t->byte_level = n_bl > 0;
    return MOQ_OK;
}

static moq_status add_norm(moq_tokenizer *t, norm_step s, moq_error *err) {
    if (t->n_norm >= TOK_MAX_STEPS) {
        if (s.re) pcre2_code_free(s.re);
        free(s.text);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "normalizer has more than %d steps", TOK_MAX_STEPS);
    }
    t->norm[t->n_norm++] = s;
    return MOQ_OK;
}

static moq_status dup_text(const char *s, char **out, size_t *len, moq_error *err) {
    *len = strlen(s);
    *out = malloc(*len + 1);
    if (!*out) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
    memcpy(*out, s, *len + 1);
    return MOQ_OK;
}

static moq_status parse_normalizer_one(moq_tokenizer *t, const cJSON *n, const char *key, int depth, moq_error *err) {
    const char *type = NULL;
    MOQ_TRY(moq_json_str(n, "type", &type, NULL, TOK_FILE, key, err));
    if (!type) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.type is absent", key);
    static const struct { const char *name; norm_kind kind; } simple[] = {
        { "NFC", NM_NFC }, { "NFD", NM_NFD }, { "NFKC", NM_NFKC }, { "NFKD", NM_NFKD },
        { "Lowercase", NM_LOWERCASE }, { "StripAccents", NM_STRIP_ACCENTS },
    };
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (strcmp(type, simple[i].name) == 0) return add_norm(t, (norm_step){ .kind = simple[i].kind }, err);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.normalizers is %s, expected an array", key, moq_json_type(list));
        if (depth > 2) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s nests Sequences more than 3 deep", key);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char k[160];
            snprintf(k, sizeof k, "%s.normalizers[%d]", key, i);
            MOQ_TRY(parse_normalizer_one(t, e, k, depth + 1, err));
        }
        return MOQ_OK;
    }
    if (strcmp(type, "Prepend") == 0 || strcmp(type, "Replace") == 0) {
        const char *text = NULL;
        bool prepend = type[0] == 'P';
        MOQ_TRY(moq_json_str(n, prepend ? "prepend" : "content", &text, NULL, TOK_FILE, key, err));
        if (!text) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.%s is absent", key, prepend ? "prepend" : "content");
        norm_step s = { .kind = prepend ? NM_PREPEND : NM_REPLACE };
        if (!prepend) MOQ_TRY(regex_compile(cJSON_GetObjectItemCaseSensitive(n, "pattern"), key, &s.re, err));
        moq_status st = dup_text(text, &s.text, &s.text_len, err);
        if (st != MOQ_OK) { if (s.re) pcre2_code_free(s.re); return st; }
        return add_norm(t, s, err);
    }
    if (strcmp(type, "Strip") == 0) {
        norm_step s = { .kind = NM_STRIP, .left = true, .right = true };
        MOQ_TRY(moq_json_bool(n, "strip_left", &s.left, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(n, "strip_right", &s.right, NULL, TOK_FILE, key, err));
        return add_norm(t, s, err);
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE,
                    "%s.type \"%.64s\" is not one of NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Prepend, Replace, Strip, Sequence", key, type);
}

static moq_status parse_normalizer(moq_tokenizer *t, const cJSON *root, moq_error *err) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (is_absent(n)) return MOQ_OK;
    return parse_normalizer_one(t, n, "normalizer", 0, err);
}

static moq_status add_dec(moq_tokenizer *t, dec_step s, moq_error *err) {
    if (t->n_dec >= TOK_MAX_STEPS) {
        free(s.from); free(s.to);
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "decoder has more than %d steps", TOK_MAX_STEPS);
    }
    t->dec[t->n_dec++] = s;
    return MOQ_OK;
}

/* *fused: a Fuse decoder came before (Strip then acts on the whole text). */
static moq_status parse_decoder_one(moq_tokenizer *t, const cJSON *d, const char *key, int depth, bool *fused, moq_error *err) {
    const char *type = NULL;
    MOQ_TRY(moq_json_str(d, "type", &type, NULL, TOK_FILE, key, err));
    if (!type) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.type is absent", key);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(list)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.decoders is %s, expected an array", key, moq_json_type(list));
        if (depth > 2) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s nests Sequences more than 3 deep", key);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char k[160];
            snprintf(k, sizeof k, "%s.decoders[%d]", key, i);
            MOQ_TRY(parse_decoder_one(t, e, k, depth + 1, fused, err));
        }
        return MOQ_OK;
    }
    if (*fused && strcmp(type, "Strip") != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s (%s) follows Fuse; moq supports only Strip there", key, type);
    if (strcmp(type, "ByteLevel") == 0) return add_dec(t, (dec_step){ .kind = DK_BYTE_LEVEL }, err);
    if (strcmp(type, "ByteFallback") == 0) return add_dec(t, (dec_step){ .kind = DK_BYTE_FALLBACK }, err);
    if (strcmp(type, "Fuse") == 0) { *fused = true; return MOQ_OK; }
    if (strcmp(type, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "pattern");
        const char *from = NULL, *to = NULL;
        if (cJSON_IsObject(pat)) MOQ_TRY(moq_json_str(pat, "String", &from, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_str(d, "content", &to, NULL, TOK_FILE, key, err));
        if (!from || !from[0] || !to)
            return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "%s: moq supports a Replace decoder with a non-empty String pattern and a content", key);
        dec_step s = { .kind = DK_REPLACE };
        MOQ_TRY(dup_text(from, &s.from, &s.from_len, err));
        moq_status st = dup_text(to, &s.to, &s.to_len, err);
        if (st != MOQ_OK) { free(s.from); return st; }
        return add_dec(t, s, err);
    }
    if (strcmp(type, "Metaspace") == 0) {
        char rep[8];
        int prepend;
        dec_step s = { .kind = DK_METASPACE };
        MOQ_TRY(read_replacement(d, key, rep, sizeof rep, &s.from_len, err));
        MOQ_TRY(read_prepend(d, key, &prepend, err));
        MOQ_TRY(dup_text(rep, &s.from, &s.from_len, err));
        t->dec_drop_first_meta = prepend != 0;
        return add_dec(t, s, err);
    }
    if (strcmp(type, "Strip") == 0) {
        const char *content = NULL;
        double a = 0, b = 0;
        MOQ_TRY(moq_json_str(d, "content", &content, NULL, TOK_FILE, key, err));
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(d, "start"), *je = cJSON_GetObjectItemCaseSensitive(d, "stop");
        if (!moq_json_is_int(js, 0, 64) || !moq_json_is_int(je, 0, 64))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.start / stop are not counts in [0, 64]", key);
        a = js->valuedouble; b = je->valuedouble;
        uint32_t cp = ' ';
        if (content && (!content[0] || moq_utf8_next((const uint8_t *)content, strlen(content), 0, &cp) != strlen(content)))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "%s.content \"%.20s\" is not one character", key, content);
        if (*fused) { t->dec_strip_cp = cp; t->dec_strip_start = (int)a; t->dec_strip_stop = (int)b; return MOQ_OK; }
        return add_dec(t, (dec_step){ .kind = DK_STRIP, .strip_cp = cp, .strip_start = (int)a, .strip_stop = (int)b }, err);
    }
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE,
                    "%s.type \"%.64s\" is not one of ByteLevel, ByteFallback, Fuse, Replace, Metaspace, Strip, Sequence", key, type);
}

static moq_status parse_decoder(moq_tokenizer *t, const cJSON *root, moq_error *err) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (is_absent(d)) return MOQ_OK;
    bool fused = false;
    return parse_decoder_one(t, d, "decoder", 0, &fused, err);
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

/* Replaces every `from` in s[0..n) by `to` into b. */
static void replace_all(tbuf *b, const uint8_t *s, size_t n, const char *from, size_t fl, const char *to, size_t tl) {
    size_t last = 0;
    for (size_t i = 0; fl && i + fl <= n;) {
        if (memcmp(s + i, from, fl) == 0) {
            tb_put(b, s + last, i - last);
            tb_put(b, to, tl);
            i += fl;
            last = i;
        } else {
            i++;
        }
    }
    tb_put(b, s + last, n - last);
}

/* A token's text through the decoder rows (each token alone, as in the middle of a sequence); with
 * first, the Metaspace decoder's rule for the first token (its replacement chars dropped). Sets
 * *is_byte for a ByteFallback <0xNN> token. */
static bool token_decode(const moq_tokenizer *t, const char *raw, size_t n, bool first, tbuf *out, bool *is_byte) {
    tbuf cur = {0}, nxt = {0};
    tb_put(&cur, raw, n);
    *is_byte = false;
    for (int k = 0; k < t->n_dec && !cur.oom; k++) {
        const dec_step *d = &t->dec[k];
        nxt.n = 0;
        switch (d->kind) {
        case DK_BYTE_LEVEL: {
            uint8_t *tmp = malloc(cur.n ? cur.n : 1);
            if (!tmp) { cur.oom = true; break; }
            size_t dn = byte_level_decode((const char *)cur.p, cur.n, tmp);
            tb_put(&nxt, tmp, dn);
            free(tmp);
            break;
        }
        case DK_BYTE_FALLBACK: {
            unsigned v;
            char hex[3] = {0};
            if (cur.n == 6 && memcmp(cur.p, "<0x", 3) == 0 && cur.p[5] == '>' && isxdigit(cur.p[3]) && isxdigit(cur.p[4])) {
                memcpy(hex, cur.p + 3, 2);
                v = (unsigned)strtoul(hex, NULL, 16);
                uint8_t byte = (uint8_t)v;
                tb_put(&nxt, &byte, 1);
                *is_byte = true;
            } else {
                tb_put(&nxt, cur.p, cur.n);
            }
            break;
        }
        case DK_REPLACE: replace_all(&nxt, cur.p, cur.n, d->from, d->from_len, d->to, d->to_len); break;
        case DK_METASPACE: replace_all(&nxt, cur.p, cur.n, d->from, d->from_len, first && t->dec_drop_first_meta ? "" : " ", first && t->dec_drop_first_meta ? 0 : 1); break;
        case DK_STRIP: {
            size_t a = 0, e = cur.n;
            for (int i = 0; i < d->strip_start && a < e; i++) {
                uint32_t cp;
                size_t l = moq_utf8_next(cur.p, cur.n, a, &cp);
                if (cp != d->strip_cp) break;
                a += l;
            }
            char u[4];
            size_t ul = utf8_put(d->strip_cp, u);
            for (int i = 0; i < d->strip_stop && e >= a + ul && memcmp(cur.p + e - ul, u, ul) == 0; i++) e -= ul;
            tb_put(&nxt, cur.p + a, e - a);
            break;
        }
        }
        tbuf sw = cur; cur = nxt; nxt = sw;
    }
    free(nxt.p);
    if (cur.oom) { free(cur.p); return false; }
    tb_put(out, cur.p, cur.n);
    free(cur.p);
    return !out->oom;
}

/* Sets token id's key (its bytes for byte-level models, else its text) and decoded bytes. */
static moq_status set_token(moq_tokenizer *t, int32_t id, const char *raw, bool byte_level, moq_error *err) {
    size_t n = strlen(raw);
    tbuf d = {0};
    bool is_byte;
    if (byte_level) {
        uint8_t *k = malloc(n ? n : 1);
        if (!k) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
        size_t kn = byte_level_decode(raw, n, k);
        moq_status st = pool_add(t, k, kn, &t->tok_off[id], err);
        free(k);
        MOQ_TRY(st);
        t->tok_len[id] = (uint32_t)kn;
    } else {
        MOQ_TRY(pool_add(t, raw, n, &t->tok_off[id], err));
        t->tok_len[id] = (uint32_t)n;
    }
    if (!token_decode(t, raw, n, false, &d, &is_byte)) { free(d.p); return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory"); }
    moq_status st = pool_add(t, d.p, d.n, &t->dec_off[id], err);
    free(d.p);
    MOQ_TRY(st);
    t->dec_len[id] = (uint32_t)d.n;
    if (is_byte) t->tok_flags[id] |= TF_BYTE;
    return MOQ_OK;
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

/* A BPE model (vocab {token: id} + merges); a Unigram model comes here as its vocabulary with ids
 * by position and no merges. */
static moq_status parse_model_vocab(moq_tokenizer *t, const cJSON *root, const cJSON *model, const cJSON *vocab,
                                    const cJSON *merges, moq_strmap *vmap, moq_error *err) {
    if (!cJSON_IsObject(vocab)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab is %s, expected an object of token: id", moq_json_type(vocab));
    if (!cJSON_IsArray(merges)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.merges is %s, expected an array", moq_json_type(merges));
    MOQ_TRY(check_bpe_options(t, model, err));
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

    t->dec_off = calloc(nv, sizeof *t->dec_off);
    t->dec_len = calloc(nv, sizeof *t->dec_len);
    if (!t->dec_off || !t->dec_len) return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory for %d tokens", t->n_vocab);
    /* vocab: the key (bytes for byte-level models, else the text) and the decoded bytes */
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        size_t old;
        if (!moq_strmap_put(vmap, e->string, (size_t)id, &old))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab has token \"%.100s\" twice (ids %zu and %d)", e->string, old, id);
        if (t->tok_flags[id] & TF_PRESENT)
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab gives id %d to two tokens (\"%.100s\" and another)", id, e->string);
        MOQ_TRY(set_token(t, id, e->string, t->byte_level, err));
        t->tok_flags[id] |= TF_PRESENT;
    }

    /* byte-level: the 256 byte symbols (a vocabulary may lack some); else ByteFallback's <0xNN> */
    for (unsigned b = 0; b < 256; b++) {
        char s[8];
        if (t->byte_level) s[utf8_put(byte_to_cp(b), s)] = '\0';
        else snprintf(s, sizeof s, "<0x%02X>", b);
        size_t id;
        t->byte_id[b] = (t->byte_level || t->byte_fallback) && moq_strmap_get(vmap, s, &id) ? (int32_t)id : -1;
    }
    const char *unk = NULL;
    size_t uid;
    MOQ_TRY(moq_json_str(model, "unk_token", &unk, NULL, TOK_FILE, "model", err));
    t->unk = unk && moq_strmap_get(vmap, unk, &uid) ? (int32_t)uid : -1; /* absent from vocab: as null */

    /* vocab by key (for ignore_merges and moq_tokenizer_token_id) */
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
        bool lstrip = false, rstrip = false, single_word = false;
        MOQ_TRY(moq_json_bool(e, "lstrip", &lstrip, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(e, "rstrip", &rstrip, NULL, TOK_FILE, key, err));
        MOQ_TRY(moq_json_bool(e, "single_word", &single_word, NULL, TOK_FILE, key, err));
        (void)flag;
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
        a->lstrip = lstrip; a->rstrip = rstrip; a->single_word = single_word;
        MOQ_TRY(pool_add(t, content, cl, &a->off, err));
        a->moff = a->off; a->mlen = a->len;
        /* `tokenizers` matches, and decodes, a normalized=true token by the normalized form of its content */
        tbuf nb = {0};
        if (normalized && t->n_norm) {
            pcre2_match_data *md = pcre2_match_data_create(16, NULL);
            bool ok = md && normalize_all(t, md, (const uint8_t *)content, cl, &nb);
            pcre2_match_data_free(md);
            if (ok) tb_put(&nb, "", 1);
            moq_status st = ok && !nb.oom ? pool_add(t, nb.p, nb.n - 1, &a->moff, err) : MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
            if (st != MOQ_OK) { free(nb.p); return st; }
            a->mlen = (uint32_t)(nb.n - 1);
        }
        moq_status st = set_token(t, id, nb.p ? (const char *)nb.p : content, t->byte_level, err);
        free(nb.p);
        MOQ_TRY(st);
        t->tok_flags[id] = (uint8_t)(t->tok_flags[id] | TF_PRESENT | TF_ADDED | (special ? TF_SPECIAL : 0));
    }
    /* index added tokens by first byte */
    uint32_t cnt[257] = {0};
    for (size_t k = 0; k < t->n_added; k++) /* an empty match text (normalized away) never matches */
        if (t->added[k].mlen) cnt[t->pool[t->added[k].moff] + 1]++;
    for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
    memcpy(t->added_first, cnt, sizeof cnt);
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].mlen) t->added_by_first[cnt[t->pool[t->added[k].moff]]++] = (uint32_t)k;
    return MOQ_OK;
}

/* Unigram: vocab [[piece, score], ...] (ids by position), unk_id, byte_fallback. */
static moq_status parse_unigram(moq_tokenizer *t, const cJSON *root, const cJSON *model, const cJSON *vocab, moq_strmap *vmap,
                                moq_error *err) {
    if (t->byte_level) return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.type Unigram with a ByteLevel pre-tokenizer");
    if (!cJSON_IsArray(vocab)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab is %s, expected [[piece, score], ...]", moq_json_type(vocab));
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    if (!n || n > TOK_MAX_ID) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab has %zu pieces, expected 1 to %d", n, TOK_MAX_ID);
    t->u_score = malloc(n * sizeof *t->u_score);
    cJSON *obj = cJSON_CreateObject(), *none = cJSON_CreateArray();
    if (!t->u_score || !obj || !none) { cJSON_Delete(obj); cJSON_Delete(none); return MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory"); }
    t->n_pieces = n;
    t->u_min = 0;
    size_t i = 0;
    moq_status st = MOQ_OK;
    for (const cJSON *e = vocab->child; e && st == MOQ_OK; e = e->next, i++) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(e->child) || !cJSON_IsNumber(e->child->next)) {
            st = MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.vocab[%zu] is not [piece, score]", i);
            break;
        }
        t->u_score[i] = e->child->next->valuedouble;
        if (i == 0 || t->u_score[i] < t->u_min) t->u_min = t->u_score[i];
        if (!cJSON_AddItemToObject(obj, e->child->valuestring, cJSON_CreateNumber((double)i)))
            st = MOQ_FAIL(err, MOQ_ERR_NOMEM, TOK_FILE, "out of memory");
    }
    if (st == MOQ_OK) st = parse_model_vocab(t, root, model, obj, none, vmap, err);
    cJSON_Delete(obj);
    cJSON_Delete(none);
    MOQ_TRY(st);
    t->unigram = true;
    for (size_t k = 0; k < n; k++)
        if (t->tok_len[k] > t->u_maxlen) t->u_maxlen = t->tok_len[k];
    const cJSON *uid = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
    t->unk = -1;
    if (!is_absent(uid)) {
        if (!moq_json_is_int(uid, 0, (double)n - 1))
            return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model.unk_id is %s, expected a piece index below %zu", moq_json_type(uid), n);
        t->unk = (int32_t)uid->valuedouble;
    }
    return MOQ_OK;
}

static moq_status parse_model(moq_tokenizer *t, const cJSON *root, moq_strmap *vmap, moq_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return MOQ_FAIL(err, MOQ_ERR_CONFIG, TOK_FILE, "model is %s, expected an object", moq_json_type(model));
    const char *type = NULL;
    MOQ_TRY(moq_json_str(model, "type", &type, NULL, TOK_FILE, "model", err));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type && strcmp(type, "Unigram") == 0) return parse_unigram(t, root, model, vocab, vmap, err);
    if (type && strcmp(type, "BPE") != 0)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.type is \"%.64s\"; moq supports \"BPE\" and \"Unigram\"", type);
    if (!type && !(cJSON_IsObject(vocab) && merges)) /* the library infers BPE from vocab + merges */
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "model.type is absent and model is not vocab + merges; moq supports BPE");
    return parse_model_vocab(t, root, model, vocab, merges, vmap, err);
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
    moq_error ce = {0};
    st = moq_chat_template_from_config(&t->chat, text, len, &ce);
    if (st == MOQ_ERR_UNSUPPORTED) { /* plain prompts still work; rendering a chat says why not */
        memset(&t->chat, 0, sizeof t->chat);
        moq_error_format(&ce, t->chat.why_none, sizeof t->chat.why_none);
        st = MOQ_OK;
    } else if (st != MOQ_OK && err) {
        *err = ce;
    }
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
    if (st == MOQ_OK) st = parse_normalizer(t, root, err);
    if (st == MOQ_OK) st = parse_pretok(t, root, err);
    if (st == MOQ_OK) st = parse_decoder(t, root, err);
    if (st == MOQ_OK) st = parse_model(t, root, &vmap, err);
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
        moq_error ce = {0};
        if (moq_chat_template_detect(&t->chat, text, bos, "chat_template.jinja", &ce) != MOQ_OK) {
            memset(&t->chat, 0, sizeof t->chat); /* plain prompts still work; rendering a chat says why not */
            moq_error_format(&ce, t->chat.why_none, sizeof t->chat.why_none);
        }
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
    free(t->added); free(t->added_by_first); free(t->dec_off); free(t->dec_len); free(t->u_score);
    for (int i = 0; i < t->n_steps; i++) pcre2_code_free(t->steps[i].re);
    for (int i = 0; i < t->n_norm; i++) { pcre2_code_free(t->norm[i].re); free(t->norm[i].text); }
    for (int i = 0; i < t->n_dec; i++) { free(t->dec[i].from); free(t->dec[i].to); }
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
    pcre2_match_data *md;
    moq_status st;              /* the first failure (out of memory, regex resource limit) */
    moq_error *err;
} enc_ctx;

static void emit(enc_ctx *c, int32_t id) {
    if (c->n < c->cap) c->ids[c->n] = id;
    c->n++;
}

static void fail_oom(enc_ctx *c, const char *what) {
    if (c->st == MOQ_OK) c->st = MOQ_FAIL(c->err, MOQ_ERR_NOMEM, "moq_tokenizer_encode", "out of memory (%s)", what);
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

/* Makes the BPE scratch hold pieces of n bytes. */
static bool scratch_reserve(enc_ctx *c, size_t n) {
    if (n <= c->mem_len) return true;
    void *mem = malloc(n * (3 * sizeof(int32_t) + 3 * sizeof(uint64_t)));
    if (!mem) { fail_oom(c, "BPE scratch"); return false; }
    free(c->mem);
    c->mem = mem;
    c->mem_len = n;
    c->heap = mem;
    c->sym = (int32_t *)(c->heap + 3 * n);
    c->prev = c->sym + n;
    c->next = c->prev + n;
    return true;
}

/* The symbols of a piece before any merge, as the `tokenizers` BPE model makes them: one per byte
 * (byte-level) or per character; a character not in the vocabulary becomes its <0xNN> byte tokens
 * (byte_fallback, when all exist), else unk (consecutive ones fused with fuse_unk), else nothing. */
static size_t initial_symbols(enc_ctx *c, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    size_t k = 0;
    int32_t pending_unk = -1;
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        int32_t id;
        if (t->byte_level) {
            id = t->byte_id[s[i]];
        } else {
            uint32_t cp;
            l = moq_utf8_next(s, n, i, &cp);
            id = vocab_get(t, s + i, l);
            if (id < 0 && t->byte_fallback) {
                bool all = true;
                for (size_t j = i; j < i + l; j++) all = all && t->byte_id[s[j]] >= 0;
                if (all) {
                    for (size_t j = i; j < i + l; j++) c->sym[k++] = t->byte_id[s[j]];
                    i += l;
                    continue;
                }
            }
        }
        if (id >= 0) {
            if (pending_unk >= 0) { c->sym[k++] = pending_unk; pending_unk = -1; }
            c->sym[k++] = id;
        } else if (t->unk >= 0) {
            if (pending_unk >= 0 && !t->fuse_unk) c->sym[k++] = pending_unk;
            pending_unk = t->unk;
        }
        i += l;
    }
    if (pending_unk >= 0) c->sym[k++] = pending_unk;
    return k;
}

/* Emits a Unigram segment: its piece id, else its <0xNN> tokens (byte_fallback, when all exist),
 * else unk. */
static void unigram_emit(enc_ctx *c, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    int32_t id = vocab_get(t, s, n);
    if (id >= 0 && (size_t)id < t->n_pieces) { emit(c, id); return; }
    if (t->byte_fallback) {
        bool all = true;
        for (size_t j = 0; j < n; j++) all = all && t->byte_id[s[j]] >= 0;
        if (all) {
            for (size_t j = 0; j < n; j++) emit(c, t->byte_id[s[j]]);
            return;
        }
    }
    if (t->unk < 0) {
        if (c->st == MOQ_OK) c->st = MOQ_FAIL(c->err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "a character is in no Unigram piece and model.unk_id is null");
        return;
    }
    emit(c, t->unk);
}

/* Unigram (the `tokenizers` library's encode_optimized): the segmentation of highest total score by
 * Viterbi over byte positions, pieces tried shortest first and replaced only by a strictly better
 * score; a character no piece starts with costs u_min - 10 as unk. Walking back, consecutive unk
 * segments fuse into one. */
static void unigram(enc_ctx *c, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    if (!scratch_reserve(c, n + 1)) return;
    double *score = (double *)c->heap;   /* [n + 1] best score of a path ending here           */
    int32_t *from = c->sym, *id = c->prev; /* [n + 1] where that path's last piece starts; its id */
    for (size_t i = 0; i <= n; i++) { from[i] = -1; id[i] = -1; score[i] = 0; }
    const double unk_score = t->u_min - 10.0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t ml = moq_utf8_next(s, n, i, &cp);
        bool single = false;
        for (size_t l = 1; l <= t->u_maxlen && i + l <= n; l++) {
            int32_t k = vocab_get(t, s + i, l);
            if (k < 0 || (size_t)k >= t->n_pieces) continue;
            double cand = score[i] + t->u_score[k];
            if (from[i + l] < 0 || cand > score[i + l]) { score[i + l] = cand; from[i + l] = (int32_t)i; id[i + l] = k; }
            if (l == ml) single = true;
        }
        if (!single) {
            double cand = score[i] + unk_score;
            if (from[i + ml] < 0 || cand > score[i + ml]) { score[i + ml] = cand; from[i + ml] = (int32_t)i; id[i + ml] = -2; /* unk */ }
        }
        i += ml;
    }
    /* back from the end: (end, start) pairs, reversed, unk runs fused (start stored as -start - 1);
     * at most 2n values, in the heap scratch after score[] (3 (n + 1) u64 in all) */
    int32_t *ends = (int32_t *)(score + n + 1);
    size_t m = 0;
    for (size_t e = n; e > 0;) {
        size_t a = (size_t)from[e];
        bool is_unk = id[e] == -2 || (t->unk >= 0 && id[e] == t->unk);
        if (is_unk && m && ends[m - 1] < 0) { ends[m - 1] = -(int32_t)a - 1; } /* extend the unk run down to a */
        else if (is_unk) { ends[m++] = (int32_t)e; ends[m++] = -(int32_t)a - 1; }
        else { ends[m++] = (int32_t)e; ends[m++] = (int32_t)a; }
        e = a;
    }
    for (size_t k = m; k >= 2; k -= 2) {
        int32_t a = ends[k - 1], e = ends[k - 2];
        size_t start = (size_t)(a < 0 ? -a - 1 : a);
        unigram_emit(c, s + start, (size_t)e - start);
    }
}

/* BPE of one piece: merges lowest rank first, leftmost first among equal ranks. */
static void bpe(enc_ctx *c, const uint8_t *s, size_t n) {
    const moq_tokenizer *t = c->t;
    if (t->unigram) { unigram(c, s, n); return; }
    if (t->ignore_merges) {
        int32_t id = vocab_get(t, s, n);
        if (id >= 0) { emit(c, id); return; }
    }
    if (!scratch_reserve(c, n)) return;
    size_t k = initial_symbols(c, s, n);
    if (k == 0) return;
    for (size_t i = 0; i < k; i++) {
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < k; i++) push_pair(c, &hn, (int32_t)i);
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

/* ---- pre-tokenizers ----------------------------------------------------------------------------- */

typedef struct span { size_t a, e; bool match; } span;
typedef struct span_list { span *v; size_t n, cap; bool oom; } span_list;

static void span_push(span_list *l, size_t a, size_t e, bool match) {
    if (l->oom) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        span *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) { l->oom = true; return; }
        l->v = nv; l->cap = cap;
    }
    l->v[l->n++] = (span){ a, e, match };
}

typedef struct split_ctx { span_list *l; size_t last; } split_ctx;
static bool split_on_match(void *vc, size_t a, size_t e) {
    split_ctx *c = vc;
    if (a > c->last) span_push(c->l, c->last, a, false);
    span_push(c->l, a, e, true);
    c->last = e;
    return !c->l->oom;
}

/* Pieces of s[0..n) by a Split step, as NormalizedString::split does: the text cut into matches and
 * the gaps between them (flags flipped with invert), then the behaviour. */
static bool split_pieces(enc_ctx *c, const pretok_step *ps, const uint8_t *s, size_t n, span_list *out) {
    span_list m = {0};
    split_ctx sc = { &m, 0 };
    if (!regex_each(ps->re, c->md, s, n, split_on_match, &sc)) {
        free(m.v);
        if (m.oom) fail_oom(c, "split pieces");
        else if (c->st == MOQ_OK) c->st = MOQ_FAIL(c->err, MOQ_ERR_UNSUPPORTED, TOK_FILE, "a pre-tokenizer regex hit a PCRE2 resource limit on %zu bytes", n);
        return false;
    }
    if (sc.last < n) span_push(&m, sc.last, n, false);
    for (size_t i = 0; i < m.n; i++) m.v[i].match ^= ps->invert;
    bool prev = false;
    switch (ps->behavior) {
    case SB_ISOLATED:
        for (size_t i = 0; i < m.n; i++) span_push(out, m.v[i].a, m.v[i].e, false);
        break;
    case SB_REMOVED:
        for (size_t i = 0; i < m.n; i++) if (!m.v[i].match) span_push(out, m.v[i].a, m.v[i].e, false);
        break;
    case SB_MERGED_PREV:
        for (size_t i = 0; i < m.n; i++) {
            if (m.v[i].match && !prev && out->n) out->v[out->n - 1].e = m.v[i].e;
            else span_push(out, m.v[i].a, m.v[i].e, false);
            prev = m.v[i].match;
        }
        break;
    case SB_MERGED_NEXT: /* right to left, then reversed */
        for (size_t i = m.n; i-- > 0;) {
            if (m.v[i].match && !prev && out->n) out->v[out->n - 1].a = m.v[i].a;
            else span_push(out, m.v[i].a, m.v[i].e, false);
            prev = m.v[i].match;
        }
        for (size_t i = 0; i < out->n / 2; i++) { span tmp = out->v[i]; out->v[i] = out->v[out->n - 1 - i]; out->v[out->n - 1 - i] = tmp; }
        break;
    case SB_CONTIGUOUS:
        for (size_t i = 0; i < m.n; i++) {
            if (m.v[i].match == prev && out->n) out->v[out->n - 1].e = m.v[i].e;
            else span_push(out, m.v[i].a, m.v[i].e, false);
            prev = m.v[i].match;
        }
        break;
    }
    free(m.v);
    if (out->oom) { fail_oom(c, "split pieces"); return false; }
    return true;
}

/* Pre-tokenizer step `step` on a piece, then the rest of the steps, then BPE. origin: the piece
 * starts at offset 0 of the input (Metaspace's prepend_scheme "first"). */
static void pretok(enc_ctx *c, int step, const uint8_t *s, size_t n, bool origin) {
    const moq_tokenizer *t = c->t;
    if (c->st != MOQ_OK || n == 0) return;
    if (step == t->n_steps) { bpe(c, s, n); return; }
    const pretok_step *ps = &t->steps[step];
    if (ps->kind == PT_PREFIX) {
        if (s[0] == ' ') { pretok(c, step + 1, s, n, origin); return; }
        tbuf b = {0};
        tb_put(&b, " ", 1);
        tb_put(&b, s, n);
        if (b.oom) fail_oom(c, "prefix space");
        else pretok(c, step + 1, b.p, b.n, origin);
        free(b.p);
        return;
    }
    if (ps->kind == PT_METASPACE) {
        tbuf b = {0};
        bool starts = n >= ps->rep_len && memcmp(s, ps->rep, ps->rep_len) == 0;
        if (!starts && (ps->prepend == 2 || (ps->prepend == 1 && origin)) && s[0] != ' ') tb_put(&b, ps->rep, ps->rep_len);
        replace_all(&b, s, n, " ", 1, ps->rep, ps->rep_len);
        if (b.oom) { fail_oom(c, "Metaspace"); free(b.p); return; }
        size_t a = 0;
        if (ps->split) /* MergedWithNext on the replacement: a piece starts at each one */
            for (size_t i = 1; i + ps->rep_len <= b.n; i++)
                if (memcmp(b.p + i, ps->rep, ps->rep_len) == 0) {
                    pretok(c, step + 1, b.p + a, i - a, origin && a == 0);
                    a = i;
                    i += ps->rep_len - 1;
                }
        pretok(c, step + 1, b.p + a, b.n - a, origin && a == 0);
        free(b.p);
        return;
    }
    span_list l = {0};
    if (split_pieces(c, ps, s, n, &l))
        for (size_t i = 0; i < l.n; i++) pretok(c, step + 1, s + l.v[i].a, l.v[i].e - l.v[i].a, origin && l.v[i].a == 0);
    free(l.v);
}

/* ---- added tokens and normalization ------------------------------------------------------------- */

/* single_word's word characters: the Rust regex crate's \w (UTS #18 Word: Alphabetic, marks, decimal
 * digits, connector punctuation, joiners), which `tokenizers` uses there. */
static bool is_word_char(uint32_t cp) {
    if (cp == MOQ_UTF8_INVALID) return false;
    if (cp == '_' || cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
        (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
        return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* The character ending at s[e) (e > 0): its start. */
static size_t char_before(const uint8_t *s, size_t e) {
    size_t k = e - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80 && e - k < 4) k--;
    uint32_t cp;
    if (k + moq_utf8_next(s, e, k, &cp) != e) return e - 1;
    return k;
}

static void split_added(enc_ctx *c, int pass, const uint8_t *s, size_t n, bool origin);

/* The normalizers on a segment between non-normalized added tokens, then the normalized ones. */
static void normalize_segment(enc_ctx *c, const uint8_t *s, size_t n, bool origin) {
    const moq_tokenizer *t = c->t;
    if (!t->n_norm) { split_added(c, 1, s, n, origin); return; }
    tbuf b;
    if (!normalize_all(t, c->md, s, n, &b)) fail_oom(c, "normalizer");
    else split_added(c, 1, b.p, b.n, origin);
    free(b.p);
}

/* Cuts added tokens out of s (pass 0: normalized=false ones, on the input; pass 1: normalized=true
 * ones, on the normalized text), leftmost-longest, with their single_word / lstrip / rstrip rules,
 * and passes the text between them on. */
static void split_added(enc_ctx *c, int pass, const uint8_t *s, size_t n, bool origin) {
    const moq_tokenizer *t = c->t;
    size_t start = 0;
    for (size_t i = 0; i < n && c->st == MOQ_OK; i++) {
        const added_tok *best = NULL;
        for (uint32_t k = t->added_first[s[i]]; k < t->added_first[s[i] + 1]; k++) {
            const added_tok *a = &t->added[t->added_by_first[k]];
            if (a->normalized != (pass == 1)) continue;
            if (a->special && (c->flags & MOQ_ENCODE_SPECIAL_AS_TEXT)) continue;
            if (a->mlen <= n - i && (!best || a->mlen > best->mlen) && memcmp(t->pool + a->moff, s + i, a->mlen) == 0) best = a;
        }
        if (!best) continue;
        size_t a = i, e = i + best->mlen;
        uint32_t cp;
        if (best->single_word) {
            bool before = i > 0 && (moq_utf8_next(s, i, char_before(s, i), &cp), is_word_char(cp));
            bool after = e < n && (moq_utf8_next(s, n, e, &cp), is_word_char(cp));
            if (before || after) { i = e - 1; continue; } /* the match stays text */
        }
        if (best->lstrip)
            while (a > start) {
                size_t k = char_before(s, a);
                moq_utf8_next(s, a, k, &cp);
                if (!moq_unicode_is_white_space(cp)) break;
                a = k;
            }
        if (best->rstrip)
            while (e < n) {
                size_t l = moq_utf8_next(s, n, e, &cp);
                if (!moq_unicode_is_white_space(cp)) break;
                e += l;
            }
        if (a > start) {
            if (pass == 0) normalize_segment(c, s + start, a - start, origin && start == 0);
            else pretok(c, 0, s + start, a - start, origin && start == 0);
        }
        emit(c, best->id);
        start = e;
        i = e - 1;
    }
    if (start < n) {
        if (pass == 0) normalize_segment(c, s + start, n - start, origin && start == 0);
        else pretok(c, 0, s + start, n - start, origin && start == 0);
    }
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
    if (len) {
        c.md = pcre2_match_data_create(16, NULL);
        if (!c.md) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_encode", "out of memory (regex match data)");
        split_added(&c, 0, (const uint8_t *)text, len, true);
        pcre2_match_data_free(c.md);
        free(c.mem);
    }
    if (c.st != MOQ_OK) return c.st;
    if (flags & MOQ_ENCODE_ADD_SPECIAL)
        for (int i = 0; i < t->n_suffix; i++) emit(&c, t->suffix[i]);
    *n_ids = c.n;
    if (c.n > cap) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_encode", "output holds %zu ids, the text needs %zu", cap, c.n);
    return MOQ_OK;
}

static const char k_fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

/* ---- decoding ----------------------------------------------------------------------------------- */

moq_status moq_tokenizer_decode_token(const moq_tokenizer *t, int32_t id, const uint8_t **bytes, size_t *len,
                                      moq_error *err) {
    if (!t || !bytes || !len) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_decode_token", "NULL argument");
    if (id < 0 || id >= t->n_vocab || !(t->tok_flags[id] & TF_PRESENT))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, TOK_FILE, "token id %d is not in the vocabulary (size %d)", (int)id, (int)t->n_vocab);
    *bytes = t->pool + t->dec_off[id];
    *len = t->dec_len[id];
    return MOQ_OK;
}

/* The text `tokenizers` decode() gives: each token through the decoder (the first one with the
 * Metaspace first-token rule), a run of ByteFallback tokens that is not valid UTF-8 as one U+FFFD
 * per byte, Strip after Fuse on the whole text, no decoder: tokens joined by " "; then lossy UTF-8. */
moq_status moq_tokenizer_decode(const moq_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap,
                                size_t *out_len, moq_error *err) {
    if (out_len) *out_len = 0;
    if (!t || (!ids && n) || !out_len || (!out && cap))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_tokenizer_decode", "t, ids and out_len must not be NULL");
    tbuf raw = {0};
    size_t run = 0; /* start in raw of the current run of byte tokens */
    bool in_run = false;
    for (size_t i = 0; i <= n; i++) {
        bool is_byte = i < n && ids[i] >= 0 && ids[i] < t->n_vocab && (t->tok_flags[ids[i]] & TF_BYTE);
        if (in_run && !is_byte) { /* close the run */
            uint32_t cp;
            bool ok = true;
            for (size_t k = run; k < raw.n && ok;) {
                size_t l = moq_utf8_next(raw.p, raw.n, k, &cp);
                ok = cp != MOQ_UTF8_INVALID;
                k += l;
            }
            if (!ok) {
                size_t nb = raw.n - run;
                raw.n = run;
                for (size_t k = 0; k < nb; k++) tb_put(&raw, k_fffd, 3);
            }
            in_run = false;
        }
        if (i == n) break;
        const uint8_t *b;
        size_t bl;
        moq_status st = moq_tokenizer_decode_token(t, ids[i], &b, &bl, err);
        if (st != MOQ_OK) { free(raw.p); return st; }
        if (is_byte && !in_run) { in_run = true; run = raw.n; }
        if (!t->n_dec && i > 0) tb_put(&raw, " ", 1);
        if (i == 0 && t->dec_drop_first_meta) {
            bool dummy;
            if (!token_decode(t, (const char *)t->pool + t->tok_off[ids[i]], t->tok_len[ids[i]], true, &raw, &dummy)) raw.oom = true;
        } else {
            tb_put(&raw, b, bl);
        }
    }
    if (raw.oom) { free(raw.p); return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_decode", "out of memory for %zu ids", n); }
    size_t a = 0, e = raw.n;
    if (t->dec_strip_start || t->dec_strip_stop) {
        char u[4];
        size_t ul = utf8_put(t->dec_strip_cp, u);
        for (int k = 0; k < t->dec_strip_start && a + ul <= e && memcmp(raw.p + a, u, ul) == 0; k++) a += ul;
        for (int k = 0; k < t->dec_strip_stop && e >= a + ul && memcmp(raw.p + e - ul, u, ul) == 0; k++) e -= ul;
    }
    /* lossy UTF-8 of raw[a..e) */
    moq_utf8_stream us = {0};
    size_t need = MOQ_UTF8_STREAM_OUT_MAX(e - a);
    char *tmp = malloc(need);
    if (!tmp) { free(raw.p); return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_decode", "out of memory"); }
    size_t ol = 0;
    moq_status st = moq_utf8_stream_push(&us, raw.p ? raw.p + a : (const uint8_t *)"", e - a, tmp, need, &ol, err);
    free(raw.p);
    if (st == MOQ_OK) ol += moq_utf8_stream_flush(&us, tmp + ol, need - ol);
    if (st == MOQ_OK) {
        *out_len = ol;
        if (ol > cap) st = MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_tokenizer_decode", "output holds %zu bytes, the text needs %zu", cap, ol);
        else if (ol) memcpy(out, tmp, ol);
    }
    free(tmp);
    return st;
}

void moq_utf8_stream_reset(moq_utf8_stream *s) { memset(s, 0, sizeof *s); }


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
