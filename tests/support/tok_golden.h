/* tok_golden.h — what the tokenizer and chat tests (tests/model/test_tokenizer.c, test_chat.c,
 * test_tokenizer_families.c) share to read their golden files under tests/golden/tokenizer/:
 * the expected.json loader, hex strings, and one chat row rendered against jinja2's text. */
#ifndef MOQ_TEST_TOK_GOLDEN_H
#define MOQ_TEST_TOK_GOLDEN_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* tests/golden/tokenizer/<rel> parsed; its "magic" must be `magic` and "version" 1. Caller deletes. */
cJSON *tu_load_tokenizer_golden(const char *rel, const char *magic);
/* Hex text -> bytes (*out malloc'd, NUL-terminated); returns the byte count. */
size_t tu_unhex(const char *h, uint8_t **out);
/* One chat row {config, messages, add_generation_prompt, text, template}: the template read from the
 * config text alone must render the messages to exactly `text` (fails the test otherwise). */
void tu_check_chat_row(const cJSON *r);

#endif
