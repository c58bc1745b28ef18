/* glob.h — the two pattern languages of exclude_modules / ignore lists.
 *
 *   moq_glob_fnmatch   Python fnmatch (vLLM): `*` any run (dots included), `?` one character,
 *                      `[seq]` / `[!seq]` classes with a-z ranges; case-sensitive (POSIX normcase).
 *   moq_glob_dotstar   SGLang's conversion: `.` is literal and `*` becomes `.*`, then a full match;
 *                      every other character is taken literally (SGLang would hand `?`, `[`, `+` to
 *                      the regex engine: no real ModelOpt config uses them, docs/COMPAT.md).
 * Tested by tests/config/test_glob.c.
 */
#ifndef MOQ_CONFIG_GLOB_H
#define MOQ_CONFIG_GLOB_H

#include <stdbool.h>

bool moq_glob_fnmatch(const char *pattern, const char *name);
bool moq_glob_dotstar(const char *pattern, const char *name);
/* Same as above on name[0..len). */
bool moq_glob_dotstar_n(const char *pattern, const char *name, unsigned long len);

#endif
