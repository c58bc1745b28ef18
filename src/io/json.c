/* json.c — see json.h. */
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/mmap.h"

moq_status moq_json_parse(cJSON **out, const char *text, size_t len, const char *file, moq_error *err) {
    *out = NULL;
    const char *end = NULL;
    errno = 0; /* malloc sets ENOMEM (POSIX): tells out-of-memory from a syntax error, which cJSON does not */
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j && errno == ENOMEM)
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, file, "out of memory building the JSON tree of %zu bytes", len);
    if (!j) {
        size_t off = (end && end >= text && end <= text + len) ? (size_t)(end - text) : 0;
        if (!end) {
            const char *e = cJSON_GetErrorPtr();
            if (e && e >= text && e <= text + len) off = (size_t)(e - text);
        }
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, file, "not valid JSON (parse error at byte %zu of %zu)", off, len);
    }
    /* cJSON stops after the first value; only whitespace may follow it (RFC 8259 §2). */
    size_t at = (end && end >= text && end <= text + len) ? (size_t)(end - text) : len;
    while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
    if (at < len) {
        cJSON_Delete(j);
        return MOQ_FAIL(err, MOQ_ERR_FORMAT, file, "not valid JSON (bytes after the JSON value at byte %zu of %zu)", at, len);
    }
    *out = j;
    return MOQ_OK;
}

moq_status moq_json_read(cJSON **out, char **text_out, const char *path, const char *file, moq_error *err) {
    *out = NULL;
    if (text_out) *text_out = NULL;
    char *text;
    uint64_t len;
    MOQ_TRY(moq_read_file(path, file, MOQ_JSON_MAX_BYTES, &text, &len, err));
    moq_status st = moq_json_parse(out, text, (size_t)len, file, err);
    if (st == MOQ_OK && text_out) *text_out = text;
    else free(text);
    return st;
}

/* ---- float literals ---------------------------------------------------------------------------- */

typedef struct jwalk { const char *p, *end; } jwalk;

static void jw_ws(jwalk *w) {
    while (w->p < w->end && (*w->p == ' ' || *w->p == '\t' || *w->p == '\n' || *w->p == '\r')) w->p++;
}

static void jw_string(jwalk *w) { /* at '"' */
    for (w->p++; w->p < w->end && *w->p != '"'; w->p++)
        if (*w->p == '\\' && w->p + 1 < w->end) w->p++;
    if (w->p < w->end) w->p++;
}

/* The text is valid JSON (cJSON accepted it), and cJSON keeps members and elements in document
 * order, duplicates included: one value of text per node. Stops quietly on any surprise. */
static bool jw_value(jwalk *w, cJSON *node, int depth) {
    jw_ws(w);
    if (w->p >= w->end || !node || depth > 1000) return false;
    const char c = *w->p;
    if (c == '{' || c == '[') {
        w->p++;
        for (cJSON *ch = node->child; ch; ch = ch->next) {
            jw_ws(w);
            if (c == '{') {
                if (w->p >= w->end || *w->p != '"') return false;
                jw_string(w);
                jw_ws(w);
                if (w->p >= w->end || *w->p != ':') return false;
                w->p++;
            }
            if (!jw_value(w, ch, depth + 1)) return false;
            jw_ws(w);
            if (w->p < w->end && *w->p == ',') w->p++;
        }
        jw_ws(w);
        if (w->p >= w->end || *w->p != (c == '{' ? '}' : ']')) return false;
        w->p++;
        return true;
    }
    if (c == '"') return jw_string(w), true;
    if (c == '-' || (c >= '0' && c <= '9')) {
        bool fl = false;
        for (; w->p < w->end && strchr("+-0123456789.eE", *w->p) && *w->p; w->p++) fl |= *w->p == '.' || *w->p == 'e' || *w->p == 'E';
        if (fl && cJSON_IsNumber(node)) node->type |= MOQ_JSON_FLOAT_LITERAL;
        return true;
    }
    while (w->p < w->end && *w->p >= 'a' && *w->p <= 'z') w->p++; /* true, false, null */
    return true;
}

void moq_json_mark_floats(cJSON *root, const char *text, size_t len) {
    jwalk w = {text, text + len};
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) w.p += 3; /* cJSON skips a UTF-8 BOM too */
    (void)jw_value(&w, root, 0);
}

bool moq_json_is_float_literal(const cJSON *j) { return cJSON_IsNumber(j) && (j->type & MOQ_JSON_FLOAT_LITERAL); }

const char *moq_json_type(const cJSON *j) {
    if (!j) return "absent";
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    return "invalid";
}

bool moq_json_is_int(const cJSON *j, double lo, double hi) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    return isfinite(v) && v == floor(v) && v >= lo && v <= hi && fabs(v) <= 9007199254740992.0;
}

static const cJSON *get(const cJSON *obj, const char *key, bool *present) {
    const cJSON *j = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    bool p = j && !cJSON_IsNull(j);
    if (present) *present = p;
    return p ? j : NULL;
}

#define KEYFMT "%s%s%s"
#define KEYARG(path, key) (path) ? (path) : "", (path) ? "." : "", (key)

moq_status moq_json_int(const cJSON *obj, const char *key, int64_t *out, bool *present,
                        const char *file, const char *path, moq_error *err) {
    const cJSON *j = get(obj, key, present);
    if (!j) return MOQ_OK;
    if (!moq_json_is_int(j, -9007199254740992.0, 9007199254740992.0))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, KEYFMT " is %s, expected an integer", KEYARG(path, key),
                        cJSON_IsNumber(j) ? "a non-integer number" : moq_json_type(j));
    *out = (int64_t)j->valuedouble;
    return MOQ_OK;
}

moq_status moq_json_num(const cJSON *obj, const char *key, double *out, bool *present,
                        const char *file, const char *path, moq_error *err) {
    const cJSON *j = get(obj, key, present);
    if (!j) return MOQ_OK;
    if (!cJSON_IsNumber(j))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, KEYFMT " is %s, expected a number", KEYARG(path, key), moq_json_type(j));
    *out = j->valuedouble;
    return MOQ_OK;
}

moq_status moq_json_str(const cJSON *obj, const char *key, const char **out, bool *present,
                        const char *file, const char *path, moq_error *err) {
    const cJSON *j = get(obj, key, present);
    if (!j) return MOQ_OK;
    if (!cJSON_IsString(j))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, KEYFMT " is %s, expected a string", KEYARG(path, key), moq_json_type(j));
    *out = j->valuestring;
    return MOQ_OK;
}

moq_status moq_json_bool(const cJSON *obj, const char *key, bool *out, bool *present,
                         const char *file, const char *path, moq_error *err) {
    const cJSON *j = get(obj, key, present);
    if (!j) return MOQ_OK;
    if (!cJSON_IsBool(j))
        return MOQ_FAIL(err, MOQ_ERR_CONFIG, file, KEYFMT " is %s, expected true or false", KEYARG(path, key), moq_json_type(j));
    *out = cJSON_IsTrue(j);
    return MOQ_OK;
}
