/* tokenizer.h — internals of the byte-level BPE tokenizer (the API is in moq.h) shared with the
 * chat formatter and the tests: UTF-8 stepping and Unicode classes.
 * Tested by tests/model/test_tokenizer.c.
 */
#ifndef MOQ_MODEL_TOKENIZER_H
#define MOQ_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moq.h"

/* Sentinel code point for a byte that does not start a valid UTF-8 sequence. */
#define MOQ_UTF8_INVALID 0xFFFFFFFFu

/* Decodes one character of s[i..n) (i < n): returns its length in bytes (1..4) and its code point
 * in *cp, or 1 and MOQ_UTF8_INVALID for a byte that does not start a valid, complete sequence
 * (overlong forms, surrogates and values above U+10FFFF are invalid). */
size_t moq_utf8_next(const uint8_t *s, size_t n, size_t i, uint32_t *cp);

/* The Unicode White_Space property (25 code points; Rust's char::is_whitespace). */
bool moq_unicode_is_white_space(uint32_t cp);

#endif
