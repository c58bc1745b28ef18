/* error.h — the two macros that fill a moq_error, and nothing more (STYLE.md §4).
 *
 *   if (t->dtype != want)
 *       return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected %s", ...);
 *   MOQ_TRY(st_parse(...));
 *
 * `where` is always a name from the checkpoint (file, tensor, layer, JSON key), never one moq made up.
 */
#ifndef MOQ_CORE_ERROR_H
#define MOQ_CORE_ERROR_H

#include "moq.h"

/* Fills err (if not NULL) and returns code. printf-style message. */
moq_status moq_fail(moq_error *err, moq_status code, const char *where, const char *src_file,
                    int src_line, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Evaluates to `code` itself (not moq_fail's return) so static analyzers see which status a path
 * returns; `code` must be a constant or a side-effect-free expression. */
static inline moq_status moq_fail_code(moq_status code, moq_status filled) {
    (void)filled;
    return code;
}
#define MOQ_FAIL(err, code, where, ...) \
    moq_fail_code((code), moq_fail((err), (code), (where), __FILE__, __LINE__, __VA_ARGS__))
#define MOQ_TRY(expr)                      \
    do {                                   \
        moq_status moq_try_st_ = (expr);   \
        if (moq_try_st_ != MOQ_OK) return moq_try_st_; \
    } while (0)

/* Invariants moq itself guarantees. No byte read from a file may reach one. */
#define MOQ_ASSERT(cond)                                                            \
    do {                                                                            \
        if (!(cond)) moq_assert_fail(#cond, __FILE__, __LINE__);                    \
    } while (0)
_Noreturn void moq_assert_fail(const char *cond, const char *file, int line);

/* Prefixes err->where with "prefix: " context is NOT done: where stays one name. Use this to
 * replace an empty where with a better one on the way up. */
void moq_error_set_where_if_empty(moq_error *err, const char *where);

#endif
