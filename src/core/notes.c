/* notes.c — see notes.h. Covered by tests/io/test_checkpoint.c (index warnings) and
 * tests/config/test_modelopt.c (config notes). */
#include "core/notes.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool moq_notes_add(moq_notes *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const bool ok = moq_notes_addv(l, fmt, ap);
    va_end(ap);
    return ok;
}

bool moq_notes_addv(moq_notes *l, const char *fmt, va_list ap) {
    char buf[768];
    vsnprintf(buf, sizeof buf, fmt, ap);
    char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
    if (!v) return false;
    l->v = v;
    if (!(v[l->n] = strdup(buf))) return false;
    l->n++;
    return true;
}

const char *moq_notes_at(const moq_notes *l, int i) { return (i >= 0 && i < l->n) ? l->v[i] : NULL; }

void moq_notes_free(moq_notes *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}
