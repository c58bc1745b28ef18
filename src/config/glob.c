/* glob.c — see glob.h. Backtracking matchers over bytes; patterns and names come from config files
 * and model prefixes, both short, so the O(|p|·|s|) worst case of the single-star backtrack is fine. */
#include "config/glob.h"

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

bool moq_glob_dotstar_n(const char *p, const char *s, unsigned long len) {
    const char *end = s + len, *star_p = NULL, *star_s = NULL;
    while (s < end) {
        if (*p == '*') {
            star_p = ++p;
            star_s = s;
            continue;
        }
        if (*p && *p == *s) {
            p++, s++;
            continue;
        }
        if (!star_p) return false;
        p = star_p;
        s = ++star_s;
    }
    while (*p == '*') p++;
    return *p == 0;
}

bool moq_glob_dotstar(const char *p, const char *s) { return moq_glob_dotstar_n(p, s, strlen(s)); }
