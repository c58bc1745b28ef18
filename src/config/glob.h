/* glob.h — the two pattern languages of exclude_modules / ignore lists.
 *
 *   moq_glob_fnmatch   Python fnmatch (vLLM): `*` any run (dots included), `?` one character,
 *                      `[seq]` / `[!seq]` classes with a-z ranges; case-sensitive (POSIX normcase).
 *   moq_glob_regex_*   SGLang's is_layer_excluded: `.` becomes `\.` and `*` becomes `.*`, and the
 *                      result is a Python regular expression, full-matched. moq reads it with
 *                      Python's syntax and compiles the POSIX extended equivalent (regcomp); what
 *                      POSIX cannot express is refused by name (glob.c lists the rules).
 * Tested by tests/config/test_glob.c (expected values from Python's fnmatch and re, written by
 * tests/golden/exclude_regex/gen.py).
 */
#ifndef MOQ_CONFIG_GLOB_H
#define MOQ_CONFIG_GLOB_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

bool moq_glob_fnmatch(const char *pattern, const char *name);

enum {
    MOQ_GLOB_RE_OK = 0,
    MOQ_GLOB_RE_INVALID,     /* Python's re would raise re.error for the converted pattern        */
    MOQ_GLOB_RE_UNSUPPORTED, /* valid in Python, but not translated (glob.c says which constructs) */
};

typedef struct moq_glob_regex {
    regex_t re;
    bool    ok;
} moq_glob_regex;

/* SGLang's conversion of `pattern`, as a POSIX ERE anchored at both ends, into out[0..n).
 * Returns MOQ_GLOB_RE_*; on failure why[0..nwhy) says what (Python's wording where it raises). */
int  moq_glob_regex_translate(const char *pattern, char *out, size_t n, char *why, size_t nwhy);
/* Translates and compiles. On failure `out` needs no free. */
int  moq_glob_regex_compile(moq_glob_regex *out, const char *pattern, char *why, size_t nwhy);
/* re.fullmatch of the compiled pattern against s[0..len). */
bool moq_glob_regex_full(const moq_glob_regex *r, const char *s, size_t len);
void moq_glob_regex_free(moq_glob_regex *r);

#endif
