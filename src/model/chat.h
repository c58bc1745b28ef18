/* chat.h — chat formats (the API is in moq.h: moq_chat_*). Internal: format detection from template
 * text, used by tokenizer.c for tokenizer_config.json and chat_template.jinja.
 * Tested by tests/model/test_chat.c.
 */
#ifndef MOQ_MODEL_CHAT_H
#define MOQ_MODEL_CHAT_H

#include "moq.h"

/* Picks the format from template text `tmpl` (named `what` in errors) and reads its default system
 * prompt; bos is the bos_token text (NULL if none). MOQ_ERR_UNSUPPORTED for other families. */
moq_status moq_chat_template_detect(moq_chat_template *out, const char *tmpl, const char *bos, const char *what,
                                    moq_error *err);

#endif
