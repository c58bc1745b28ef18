/* notes.h — a growable list of one-line messages kept on a handle (warnings and notes: the library
 * never prints; the CLI shows them). Used by checkpoints and quantization configs. */
#ifndef MOQ_CORE_NOTES_H
#define MOQ_CORE_NOTES_H

#include <stdarg.h>
#include <stdbool.h>

typedef struct moq_notes {
    char **v;
    int    n;
} moq_notes;

/* Appends a formatted line (truncated to 767 bytes). Returns false when out of memory. */
bool moq_notes_add(moq_notes *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool moq_notes_addv(moq_notes *l, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Line i or NULL when out of range. */
const char *moq_notes_at(const moq_notes *l, int i);
void moq_notes_free(moq_notes *l);

#endif
