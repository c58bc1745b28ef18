/* json.h — thin wrapper over cJSON (Debian libcjson-dev) that turns parse failures and type
 * mismatches into "file: key.path: found X, expected Y" errors. */
#ifndef MOQ_IO_JSON_H
#define MOQ_IO_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "moq.h"

/* Largest JSON side file moq reads (tokenizer.json of large vocabularies is ~20 MB). */
#define MOQ_JSON_MAX_BYTES (256u << 20)

/* Parses text[0..len) as JSON; on failure names `file` and the byte offset. */
moq_status moq_json_parse(cJSON **out, const char *text, size_t len, const char *file, moq_error *err);
/* Reads and parses a file (bounded by MOQ_JSON_MAX_BYTES); *text_out (optional) keeps the text. */
moq_status moq_json_read(cJSON **out, char **text_out, const char *path, const char *file, moq_error *err);

/* "object", "string", "number", "array", "boolean", "null" */
const char *moq_json_type(const cJSON *j);

/* Typed optional getters: absent or null -> *present = false and MOQ_OK; a wrong type is an error
 * naming `file` and `key` (prefixed by `path` when not NULL, e.g. "text_config.hidden_size"). */
moq_status moq_json_int(const cJSON *obj, const char *key, int64_t *out, bool *present,
                        const char *file, const char *path, moq_error *err);
moq_status moq_json_num(const cJSON *obj, const char *key, double *out, bool *present,
                        const char *file, const char *path, moq_error *err);
moq_status moq_json_str(const cJSON *obj, const char *key, const char **out, bool *present,
                        const char *file, const char *path, moq_error *err);
moq_status moq_json_bool(const cJSON *obj, const char *key, bool *out, bool *present,
                         const char *file, const char *path, moq_error *err);

/* Python's json module reads a number written with a fraction or an exponent ("16.0", "1e1") as a
 * float and any other as an int; cJSON keeps only the value. moq_json_mark_floats walks `text` (the
 * document `root` was parsed from) alongside the tree and flags every number written as a float;
 * moq_json_is_float_literal reads the flag (false for documents never marked). The flag is a bit of
 * cJSON's `type` above the bits cJSON uses (cJSON_IsNumber and printing mask them off). */
#define MOQ_JSON_FLOAT_LITERAL (1 << 14)
void moq_json_mark_floats(cJSON *root, const char *text, size_t len);
bool moq_json_is_float_literal(const cJSON *j);

/* True when j is a number holding an integer in [lo, hi] exactly (|x| <= 2^53). */
bool moq_json_is_int(const cJSON *j, double lo, double hi);

#endif
