/* tu.h — shared helpers for the cmocka tests: reference paths, temporary directories,
 * whole-file reads, and error assertions that print the error on failure. */
#ifndef MOQ_TU_H
#define MOQ_TU_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* cmocka needs the above first */
#include <cmocka.h>

#include "moq.h"

/* The unpacked test data (MOQ_TESTDATA, set by ctest: build/testdata, made by CMake from
 * tests/data/<name>.tar.xz) joined with rel, e.g. "golden/formats/inputs_f32.bin". Caller frees. */
char *tu_data_path(const char *rel);
/* A fresh empty directory under MOQ_TMP (or /tmp) named after `tag`; caller frees the string. */
char *tu_tmpdir(const char *tag);
/* Removes a directory tree (best effort). */
void tu_rmtree(const char *dir);
/* Reads a whole file; returns NULL (and fails the test) when unreadable. *len receives the size. */
void *tu_read_file(const char *path, size_t *len);
/* Writes bytes to dir/name. Returns the full path (caller frees). */
char *tu_write_file(const char *dir, const char *name, const void *data, size_t len);
/* Writes a safetensors file: the header text as given (no padding added), then `data_len` bytes of
 * data (pattern-filled). Returns the full path (caller frees). */
char *tu_write_st(const char *dir, const char *name, const char *header, size_t data_len);
/* Runs a shell command, returns its exit status (-1 on failure to run); captures stdout+stderr
 * into out (NUL-terminated, truncated to n) when out != NULL. */
int tu_run(const char *cmd, char *out, size_t n);
/* tests/golden/<rel> in the source tree (caller frees). */
char *tu_golden_path(const char *rel);
/* tests/golden/tokenizer/<rel> (caller frees), and the golden tokenizer of one style ("gpt2",
 * "llama3", "qwen2", "smollm2", ...) opened (fails the test when it cannot be). */
char *tu_golden_tokenizer_path(const char *rel);
moq_tokenizer *tu_open_golden_tokenizer(const char *style);
/* tests/data/<rel> of this source tree, as committed (caller frees): fixtures kept unpacked. */
char *tu_src_data_path(const char *rel);
/* Path of the moq CLI (MOQ_BIN). */
const char *tu_moq_bin(void);

/* A usable CUDA GPU (moq_device_check, asked once per process); *info: its description, or why not. */
bool tu_have_gpu(const char **info);
/* In a test: skip it with the reason when there is no usable GPU (the CUDA tests' rule). */
#define TU_NEED_GPU()                                                      \
    do {                                                                   \
        const char *tu_gi_;                                                \
        if (!tu_have_gpu(&tu_gi_)) {                                       \
            print_message("skipped: no usable GPU (%s)\n", tu_gi_);       \
            skip();                                                        \
        }                                                                  \
    } while (0)

/* Fails with the formatted error when st != MOQ_OK. */
#define TU_OK(expr)                                                                                \
    do {                                                                                           \
        moq_error tu_e_ = {0};                                                                     \
        moq_error *err_ = &tu_e_;                                                                  \
        (void)err_;                                                                                \
        moq_status tu_s_ = (expr);                                                                 \
        if (tu_s_ != MOQ_OK) {                                                                     \
            char b_[1024];                                                                         \
            moq_error_format(&tu_e_, b_, sizeof b_);                                               \
            fail_msg("%s -> %s: %s", #expr, moq_status_str(tu_s_), b_);                            \
        }                                                                                          \
    } while (0)

/* Asserts an error: status `code`, where containing `where_sub`, msg containing `msg_sub`. */
void tu_assert_error(const moq_error *e, moq_status got, moq_status code, const char *where_sub,
                     const char *msg_sub, const char *file, int line);
#define TU_ERR(e, got, code, where_sub, msg_sub) tu_assert_error((e), (got), (code), (where_sub), (msg_sub), __FILE__, __LINE__)

#endif
