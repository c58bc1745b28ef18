/* glob.c — see glob.h. fnmatch: a backtracking matcher over bytes (patterns and names are short, so
 * the O(|p|·|s|) worst case of the single-star backtrack is fine). SGLang's patterns: Python `re`
 * syntax read token by token (the grammar of CPython 3.11 Lib/re/_parser.py, restated) and written
 * out as a POSIX extended regular expression for libc's regcomp. */
#include "config/glob.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Matches one fnmatch class at p (p points after '['); returns the position after ']' and sets *ok,
 * or NULL when the class is unterminated (then '[' is a literal, as in Python). */
static const char *class_match(const char *p, char c, bool *ok) {
    bool neg = false, hit = false;
    if (*p == '!') neg = true, p++;
    const char *start = p;
    while (*p && (*p != ']' || p == start)) {
        if (p[1] == '-' && p[2] && p[2] != ']') {
            if ((unsigned char)c >= (unsigned char)p[0] && (unsigned char)c <= (unsigned char)p[2]) hit = true;
            p += 3;
        } else {
            if (*p == c) hit = true;
            p++;
        }
    }
    if (*p != ']') return NULL;
    *ok = hit != neg;
    return p + 1;
}

bool moq_glob_fnmatch(const char *p, const char *s) {
    const char *star_p = NULL, *star_s = NULL;
    while (*s) {
        if (*p == '*') {
            star_p = ++p;
            star_s = s;
            continue;
        }
        if (*p == '?') {
            p++, s++;
            continue;
        }
        if (*p == '[') {
            bool ok = false;
            const char *after = class_match(p + 1, *s, &ok);
            if (after) {
                if (ok) {
                    p = after, s++;
                    continue;
                }
                goto backtrack;
            }
        }
        if (*p && *p == *s) {
            p++, s++;
            continue;
        }
    backtrack:
        if (!star_p) return false;
        p = star_p;
        s = ++star_s;
    }
    while (*p == '*') p++;
    return *p == 0;
}

/* ---- SGLang: Python regular expression -> POSIX ERE -------------------------------------------
 *
 * Every Python construct is either written as a POSIX ERE construct that full-matches the same
 * ASCII strings, or refused (MOQ_GLOB_RE_UNSUPPORTED), or an error where Python's re.compile raises
 * (MOQ_GLOB_RE_INVALID). Choices that keep the meaning:
 *   - literals that are special in an ERE are escaped or put in a bracket; a non-ASCII character
 *     (its UTF-8 bytes) is grouped so that a quantifier applies to all of it;
 *   - a character class is evaluated to its set of ASCII characters and written as an explicit list
 *     (no ranges: their meaning depends on the locale in POSIX);
 *   - \d \w \s (and \D \W \S outside a class) become their ASCII sets (Python's str patterns add
 *     non-ASCII characters, which module names do not contain);
 *   - lazy quantifiers lose the `?` (laziness never changes whether a full match exists);
 *   - `(?:` becomes `(`; `(?#...)` is dropped; \A, \Z become ^, $; \b, \B stay (glibc regex).
 * Refused: lookaround, backreferences, named groups, inline flags, conditionals, atomic groups,
 * possessive quantifiers, \x escapes above 0x7F, \u \U \N, octal escapes, non-ASCII characters
 * inside a class, counted repeats above 1000, patterns whose expansion (repeat counts multiplied
 * through nesting) exceeds 10000 atoms or nest deeper than 32 groups. */

#define RE_MAX_REPEAT 1000
#define RE_MAX_WEIGHT 10000.0
#define RE_MAX_DEPTH  32

typedef struct re_out {
    char  *b;
    size_t n, cap;
    int    rc;       /* first failure (MOQ_GLOB_RE_*)                              */
    char  *why;
    size_t nwhy;
} re_out;

static void re_fail(re_out *o, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void re_fail(re_out *o, int rc, const char *fmt, ...) {
    if (o->rc) return;
    o->rc = rc;
    if (o->why && o->nwhy) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(o->why, o->nwhy, fmt, ap);
        va_end(ap);
    }
}

static void re_put(re_out *o, const char *s, size_t n) {
    if (o->rc) return;
    if (o->n + n + 1 > o->cap) {
        re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "the POSIX form is longer than %zu bytes", o->cap);
        return;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    o->b[o->n] = 0;
}
static void re_puts(re_out *o, const char *s) { re_put(o, s, strlen(s)); }

/* One ASCII literal outside a bracket. */
static void re_lit(re_out *o, unsigned char c) {
    char t[4];
    if (strchr(".[\\()*+?{|^$", c) && c) snprintf(t, sizeof t, "\\%c", c);
    else t[0] = (char)c, t[1] = 0;
    re_puts(o, t);
}

typedef struct cset { uint8_t bit[16]; } cset; /* ASCII 0..127 */

static void cset_add(cset *s, unsigned c) { s->bit[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static bool cset_has(const cset *s, unsigned c) { return (s->bit[c >> 3] >> (c & 7)) & 1; }
static void cset_range(cset *s, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) cset_add(s, c);
}
static void cset_digit(cset *s) { cset_range(s, '0', '9'); }
static void cset_word(cset *s) { cset_range(s, 'a', 'z'), cset_range(s, 'A', 'Z'), cset_digit(s), cset_add(s, '_'); }
static void cset_space(cset *s) { /* str.isspace() over ASCII */
    cset_range(s, 9, 13), cset_range(s, 0x1c, 0x1f), cset_add(s, ' ');
}

/* A bracket expression listing every member (NUL excluded). `]` first, `-` last (or first when
 * there is no `]`), `^` never first; no ranges. */
static void re_set(re_out *o, const cset *s, bool neg) {
    char b[300];
    size_t n = 0;
    const bool close = cset_has(s, ']'), dash = cset_has(s, '-'), hat = cset_has(s, '^');
    int others = 0;
    for (unsigned c = 1; c < 128; c++) others += cset_has(s, c) && c != ']' && c != '-' && c != '^';
    if (!neg && !close && !dash && !others) {
        if (hat) re_puts(o, "\\^");
        else re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "a character class that matches nothing");
        return;
    }
    b[n++] = '[';
    if (neg) b[n++] = '^';
    if (close) b[n++] = ']';
    else if (dash) b[n++] = '-';
    for (unsigned c = 1; c < 128; c++)
        if (cset_has(s, c) && c != ']' && c != '-' && c != '^') b[n++] = (char)c;
    if (hat) b[n++] = '^'; /* never first: a member precedes it, or it follows the negating `^` */
    if (dash && close) b[n++] = '-';
    b[n++] = ']';
    re_put(o, b, n);
}

/* Length of the UTF-8 sequence starting with byte c (1 for ASCII and stray bytes). */
static size_t utf8_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Escapes that stand for one character in both places: \a \f \n \r \t \v (and \b in a class), \\,
 * \xHH (ASCII only), an escaped non-letter non-digit. Returns the character, -1 when the escape is
 * something else (handled by the caller), -2 after a failure. p points after the backslash; *adv
 * receives the number of pattern bytes consumed after it. */
static int re_char_escape(re_out *o, const char *p, bool in_class, size_t *adv) {
    const unsigned char c = (unsigned char)*p;
    *adv = 1;
    switch (c) {
    case 'a': return 7;
    case 'f': return 12;
    case 'n': return 10;
    case 'r': return 13;
    case 't': return 9;
    case 'v': return 11;
    case 'b': return in_class ? 8 : -1;
    case 'x': {
        const int h = p[1] ? hexval(p[1]) : -1, l = h >= 0 && p[2] ? hexval(p[2]) : -1;
        if (h < 0 || l < 0) return re_fail(o, MOQ_GLOB_RE_INVALID, "incomplete escape \\x"), -2;
        const int v = h * 16 + l;
        if (v == 0 || v >= 0x80) return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "escape \\x%c%c (only ASCII 1..127 is translated)", p[1], p[2]), -2;
        *adv = 3;
        return v;
    }
    case 'u': case 'U': case 'N':
        return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "escape \\%c", c), -2;
    case 0:
        return re_fail(o, MOQ_GLOB_RE_INVALID, "bad escape (end of pattern)"), -2;
    default: break;
    }
    if (c >= '0' && c <= '9') {
        if (!in_class && c != '0') return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "backreference \\%c", c), -2;
        if (c >= '8') return re_fail(o, MOQ_GLOB_RE_INVALID, "bad escape \\%c", c), -2;
        return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "octal escape \\%c", c), -2;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        if (strchr("dDsSwW", c) || (!in_class && strchr("AZbB", c))) return -1;
        return re_fail(o, MOQ_GLOB_RE_INVALID, "bad escape \\%c", c), -2;
    }
    if (c >= 0x80) return -1; /* an escaped non-ASCII character: the caller copies it */
    return c;
}

/* Python character class; p points after '['. Returns the position after ']' or NULL. */
static const char *re_class(re_out *o, const char *p) {
    cset s;
    memset(&s, 0, sizeof s);
    const bool neg = *p == '^';
    if (neg) p++;
    const char *start = p;
    for (;;) {
        if (!*p) return re_fail(o, MOQ_GLOB_RE_INVALID, "unterminated character set"), NULL;
        if (*p == ']' && p != start) break;
        /* item 1 */
        int c1;
        bool cat = false;
        if ((unsigned char)*p >= 0x80) return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "a non-ASCII character inside a character class"), NULL;
        if (*p == '\\') {
            size_t adv;
            c1 = re_char_escape(o, p + 1, true, &adv);
            if (c1 == -2) return NULL;
            if (c1 == -1) {
                const char e = p[1];
                if ((unsigned char)e >= 0x80) return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "a non-ASCII character inside a character class"), NULL;
                if (e == 'd') cset_digit(&s);
                else if (e == 'w') cset_word(&s);
                else if (e == 's') cset_space(&s);
                else return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "\\%c inside a character class (it includes non-ASCII characters)", e), NULL;
                cat = true;
            }
            p += 1 + adv;
        } else {
            c1 = (unsigned char)*p++;
        }
        if (*p == '-') {
            const char *q = p + 1;
            if (!*q) return re_fail(o, MOQ_GLOB_RE_INVALID, "unterminated character set"), NULL;
            if (*q == ']') { /* trailing '-': literal */
                if (!cat) cset_add(&s, (unsigned)c1);
                cset_add(&s, '-');
                p = q + 1;
                goto done;
            }
            int c2;
            if ((unsigned char)*q >= 0x80) return re_fail(o, MOQ_GLOB_RE_UNSUPPORTED, "a non-ASCII character inside a character class"), NULL;
            if (*q == '\\') {
                size_t adv;
                c2 = re_char_escape(o, q + 1, true, &adv);
                if (c2 == -2) return NULL;
                if (c2 == -1) return re_fail(o, MOQ_GLOB_RE_INVALID, "bad character range %c-\\%c", c1 > 0 ? c1 : '?', q[1]), NULL;
                q += 1 + adv;
            } else {
                c2 = (unsigned char)*q++;
            }
            if (cat || c2 < c1) return re_fail(o, MOQ_GLOB_RE_INVALID, "bad character range"), NULL;
            cset_range(&s, (unsigned)c1, (unsigned)c2);
            p = q;
        } else if (!cat) {
            cset_add(&s, (unsigned)c1);
        }
    }
    p++; /* ']' */
done:
    re_set(o, &s, neg);
    return p;
}

typedef enum { LAST_NONE, LAST_ANCHOR, LAST_ATOM, LAST_REPEAT } re_last;

/* Python's `{m}`, `{m,}`, `{,n}`, `{m,n}`, `{,}` at p; false when the brace is a literal. */
static bool re_brace(const char *p, long *lo, long *hi, const char **after) {
    const char *d = p + 1;
    if (*d == '}') return false;
    long a = 0, b = 0;
    bool have_a = false, have_b = false, comma = false;
    for (; *d >= '0' && *d <= '9'; d++) a = a < 100000000 ? a * 10 + (*d - '0') : a, have_a = true;
    if (*d == ',') {
        comma = true;
        for (d++; *d >= '0' && *d <= '9'; d++) b = b < 100000000 ? b * 10 + (*d - '0') : b, have_b = true;
    }
    if (*d != '}') return false;
    *lo = have_a ? a : 0;
    *hi = comma ? (have_b ? b : -1) : *lo;
    *after = d + 1;
    return true;
}

int moq_glob_regex_translate(const char *pattern, char *out, size_t n, char *why, size_t nwhy) {
    re_out o = {.b = out, .cap = n, .why = why, .nwhy = nwhy};
    if (why && nwhy) why[0] = 0;
    if (!out || n < 8) return MOQ_GLOB_RE_UNSUPPORTED;
    out[0] = 0;
    /* SGLang: pattern.replace(".", r"\.").replace("*", r".*") */
    size_t len = strlen(pattern), k = 0;
    char *py = malloc(len * 3 + 1);
    if (!py) return re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "out of memory"), o.rc;
    for (const char *s = pattern; *s; s++) {
        if (*s == '.') py[k++] = '\\', py[k++] = '.';
        else if (*s == '*') py[k++] = '.', py[k++] = '*';
        else py[k++] = *s;
    }
    py[k] = 0;

    double sum[RE_MAX_DEPTH + 1] = {0}, last_w = 0;
    int depth = 0;
    re_last last = LAST_NONE;
    re_puts(&o, "^(");
    const char *p = py;
#define COMMIT() (sum[depth] += last_w, last_w = 0)
    while (*p && !o.rc) {
        const unsigned char c = (unsigned char)*p;
        long lo = 0, hi = -1; /* repeat bounds; -1: unbounded */
        const char *q = p + 1;
        if (c == '{' && !re_brace(p, &lo, &hi, &q)) { /* Python: such a `{` is a literal */
            COMMIT();
            last_w = 1, last = LAST_ATOM;
            re_lit(&o, '{');
            p++;
            continue;
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (hi >= 0 && hi < lo) { re_fail(&o, MOQ_GLOB_RE_INVALID, "min repeat greater than max repeat"); break; }
            if (last == LAST_NONE || last == LAST_ANCHOR) { re_fail(&o, MOQ_GLOB_RE_INVALID, "nothing to repeat at position %ld", (long)(p - py)); break; }
            if (last == LAST_REPEAT) { re_fail(&o, MOQ_GLOB_RE_INVALID, "multiple repeat at position %ld", (long)(p - py)); break; }
            if (lo > RE_MAX_REPEAT || hi > RE_MAX_REPEAT) { re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "repeat count above %d", RE_MAX_REPEAT); break; }
            char t[32];
            if (c != '{') snprintf(t, sizeof t, "%c", c);
            else if (hi < 0 && lo == 0) snprintf(t, sizeof t, "*");
            else if (hi < 0) snprintf(t, sizeof t, "{%ld,}", lo);
            else if (hi == lo) snprintf(t, sizeof t, "{%ld}", lo);
            else snprintf(t, sizeof t, "{%ld,%ld}", lo, hi);
            re_puts(&o, t);
            last_w *= (double)(hi >= 0 ? (hi > 1 ? hi : 1) : lo + 1);
            if (sum[depth] + last_w > RE_MAX_WEIGHT) { re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "the expression expands to more than %.0f atoms", RE_MAX_WEIGHT); break; }
            last = LAST_REPEAT;
            p = q;
            if (*p == '?') p++; /* lazy: same set of full matches */
            else if (*p == '+') { re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "possessive quantifier"); break; }
            continue;
        }
        COMMIT();
        if (c == '(') {
            if (p[1] == '?') {
                if (p[2] == ':') p += 3;
                else if (p[2] == '#') {
                    const char *e = strchr(p, ')');
                    if (!e) { re_fail(&o, MOQ_GLOB_RE_INVALID, "missing ), unterminated comment"); break; }
                    p = e + 1;
                    continue; /* a comment is no item: `last` unchanged */
                } else {
                    re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "group extension (?%.2s", p + 2);
                    break;
                }
            } else {
                p++;
            }
            if (depth == RE_MAX_DEPTH) { re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "groups nested deeper than %d", RE_MAX_DEPTH); break; }
            sum[++depth] = 0;
            re_puts(&o, "(");
            last = LAST_NONE;
            continue;
        }
        if (c == ')') {
            if (depth == 0) { re_fail(&o, MOQ_GLOB_RE_INVALID, "unbalanced parenthesis at position %ld", (long)(p - py)); break; }
            last_w = sum[depth] > 1 ? sum[depth] : 1;
            depth--;
            re_puts(&o, ")");
            last = LAST_ATOM;
            p++;
            continue;
        }
        if (c == '|') {
            re_puts(&o, "|");
            last = LAST_NONE;
            p++;
            continue;
        }
        if (c == '^' || c == '$') {
            re_puts(&o, c == '^' ? "^" : "$");
            last = LAST_ANCHOR;
            p++;
            continue;
        }
        last_w = 1;
        last = LAST_ATOM;
        if (c == '.') {
            re_puts(&o, ".");
            p++;
        } else if (c == '[') {
            p = re_class(&o, p + 1);
            if (!p) break;
        } else if (c == '\\') {
            size_t adv;
            const int ch = re_char_escape(&o, p + 1, false, &adv);
            if (ch == -2) break;
            if (ch >= 0) {
                if (ch < 0x20 || ch == 0x7F) {
                    cset s;
                    memset(&s, 0, sizeof s);
                    cset_add(&s, (unsigned)ch);
                    re_set(&o, &s, false);
                } else {
                    re_lit(&o, (unsigned char)ch);
                }
                p += 1 + adv;
                continue;
            }
            const char e = p[1];
            cset s;
            memset(&s, 0, sizeof s);
            switch (e) {
            case 'A': re_puts(&o, "^"), last = LAST_ANCHOR; break;
            case 'Z': re_puts(&o, "$"), last = LAST_ANCHOR; break;
            case 'b': re_puts(&o, "\\b"), last = LAST_ANCHOR; break;
            case 'B': re_puts(&o, "\\B"), last = LAST_ANCHOR; break;
            case 'd': case 'D': cset_digit(&s), re_set(&o, &s, e == 'D'); break;
            case 'w': case 'W': cset_word(&s), re_set(&o, &s, e == 'W'); break;
            case 's': case 'S': cset_space(&s), re_set(&o, &s, e == 'S'); break;
            default: { /* an escaped non-ASCII character: literal */
                const size_t ul = utf8_len((unsigned char)e);
                re_puts(&o, "("), re_put(&o, p + 1, strnlen(p + 1, ul)), re_puts(&o, ")");
                p += 1 + strnlen(p + 1, ul);
                continue;
            }
            }
            if (last == LAST_ANCHOR) last_w = 0;
            p += 2;
        } else if (*p & 0x80) {
            const size_t ul = strnlen(p, utf8_len((unsigned char)*p));
            re_puts(&o, "("), re_put(&o, p, ul), re_puts(&o, ")");
            p += ul;
        } else {
            re_lit(&o, (unsigned char)*p++);
        }
    }
#undef COMMIT
    if (!o.rc && depth > 0) re_fail(&o, MOQ_GLOB_RE_INVALID, "missing ), unterminated subpattern");
    if (!o.rc && sum[0] + last_w > RE_MAX_WEIGHT) re_fail(&o, MOQ_GLOB_RE_UNSUPPORTED, "the expression expands to more than %.0f atoms", RE_MAX_WEIGHT);
    re_puts(&o, ")$");
    free(py);
    return o.rc;
}

int moq_glob_regex_compile(moq_glob_regex *out, const char *pattern, char *why, size_t nwhy) {
    char ere[4096];
    memset(out, 0, sizeof *out);
    const int rc = moq_glob_regex_translate(pattern, ere, sizeof ere, why, nwhy);
    if (rc) return rc;
    const int e = regcomp(&out->re, ere, REG_EXTENDED | REG_NOSUB);
    if (e) {
        char msg[128];
        regerror(e, &out->re, msg, sizeof msg);
        if (why && nwhy) snprintf(why, nwhy, "libc regcomp refused \"%s\": %s", ere, msg);
        return MOQ_GLOB_RE_UNSUPPORTED;
    }
    out->ok = true;
    return MOQ_GLOB_RE_OK;
}

bool moq_glob_regex_full(const moq_glob_regex *r, const char *s, size_t len) {
    if (!r->ok) return false;
    char small[256], *b = len < sizeof small ? small : malloc(len + 1);
    if (!b) return false;
    memcpy(b, s, len);
    b[len] = 0;
    const bool hit = regexec(&r->re, b, 0, NULL, 0) == 0;
    if (b != small) free(b);
    return hit;
}

void moq_glob_regex_free(moq_glob_regex *r) {
    if (r && r->ok) regfree(&r->re), r->ok = false;
}
