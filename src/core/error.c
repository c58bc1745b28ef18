/* error.c — status names, their meanings (docs/ERRORS.md is generated from this table), and the
 * function behind MOQ_FAIL. Tested by tests/unit/test_error.c. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct status_row {
    const char *name;
    const char *meaning;
    const char *example;
} status_row;

/* One row per status, in enum order. */
static const status_row status_table[MOQ_STATUS_COUNT] = {
    [MOQ_OK]              = {"MOQ_OK", "success", ""},
    [MOQ_ERR_INVALID_ARG] = {"MOQ_ERR_INVALID_ARG", "the caller passed an impossible argument",
                             "moq_elem_encode_f32: mode UP_SAT is not defined for e4m3"},
    [MOQ_ERR_IO]          = {"MOQ_ERR_IO", "a file could not be opened, mapped, read or written",
                             "model-00001-of-00002.safetensors: cannot open: No such file or directory"},
    [MOQ_ERR_FORMAT]      = {"MOQ_ERR_FORMAT", "a file is malformed (safetensors header, JSON)",
                             "model.safetensors: header length 5000 needs 8 + 5000 bytes, file is 4096 bytes"},
    [MOQ_ERR_CONFIG]      = {"MOQ_ERR_CONFIG", "valid JSON that says something inconsistent or unsupported",
                             "hf_quant_config.json: quantization.quant_algo \"NVFP5\" is not one of FP8, NVFP4, ..."},
    [MOQ_ERR_TENSOR]      = {"MOQ_ERR_TENSOR", "a tensor is missing, or has the wrong dtype, shape or values",
                             "model.layers.7.mlp.down_proj.weight_scale: dtype BF16, expected F8_E4M3"},
    [MOQ_ERR_UNSUPPORTED] = {"MOQ_ERR_UNSUPPORTED", "valid input that no kernel or device here can run",
                             "config.json: architecture \"FooForCausalLM\" is not supported"},
    [MOQ_ERR_NOMEM]       = {"MOQ_ERR_NOMEM", "an allocation failed or a resource bound was reached",
                             "tokenizer.json: file is 300000000 bytes, more than the 268435456-byte limit"},
    [MOQ_ERR_DEVICE]      = {"MOQ_ERR_DEVICE", "the GPU runtime reported an error", "cuda_sm90_fp8_row_cublaslt: gemv kernel launch: cudaErrorLaunchFailure (unspecified launch failure)"},
    [MOQ_ERR_INTERNAL]    = {"MOQ_ERR_INTERNAL", "a bug in moq; please report it with the source location", ""},
};

const char *moq_status_str(moq_status s) {
    if ((unsigned)s >= MOQ_STATUS_COUNT) return "MOQ_ERR_UNKNOWN";
    return status_table[s].name;
}

const char *moq_status_meaning(moq_status s) {
    if ((unsigned)s >= MOQ_STATUS_COUNT) return "unknown status";
    return status_table[s].meaning;
}

moq_status moq_fail(moq_error *err, moq_status code, const char *where, const char *src_file,
                    int src_line, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    snprintf(err->where, sizeof err->where, "%s", where ? where : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->src_file = src_file;
    err->src_line = src_line;
    return code;
}

void moq_error_set_where_if_empty(moq_error *err, const char *where) {
    if (err && err->where[0] == '\0' && where) snprintf(err->where, sizeof err->where, "%s", where);
}

int moq_error_format(const moq_error *e, char *buf, size_t n) {
    if (!e) return snprintf(buf, n, "(no error)");
    if (e->where[0]) return snprintf(buf, n, "%s: %s", e->where, e->msg);
    return snprintf(buf, n, "%s", e->msg);
}

_Noreturn void moq_assert_fail(const char *cond, const char *file, int line) {
    /* The one place the library writes to stderr: an internal invariant broke (a moq bug). */
    fprintf(stderr, "moq: internal error: %s (%s:%d)\n", cond, file, line);
    abort();
}

uint32_t moq_version(void) {
    return (uint32_t)MOQ_VERSION_MAJOR << 16 | (uint32_t)MOQ_VERSION_MINOR << 8 | MOQ_VERSION_PATCH;
}

#define MOQ_STR2(x) #x
#define MOQ_STR(x) MOQ_STR2(x)
const char *moq_version_string(void) {
    return MOQ_STR(MOQ_VERSION_MAJOR) "." MOQ_STR(MOQ_VERSION_MINOR) "." MOQ_STR(MOQ_VERSION_PATCH);
}

/* For docs/ERRORS.md generation (`moq errors --markdown`). */
const char *moq_status_example(moq_status s);
const char *moq_status_example(moq_status s) {
    if ((unsigned)s >= MOQ_STATUS_COUNT) return "";
    return status_table[s].example;
}
