/* chat.h — chat formats (the API is in moq.h: moq_chat_*). Internal: nothing beyond the API yet;
 * included by tokenizer.c, which reads the template from tokenizer_config.json.
 * Tested by tests/model/test_chat.c.
 */
#ifndef MOQ_MODEL_CHAT_H
#define MOQ_MODEL_CHAT_H

#include "moq.h"

#endif
