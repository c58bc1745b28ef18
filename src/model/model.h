/* model.h — the decoder runner behind moq.h "models" (model.c). Shape letters used in model.c:
 *   M tokens in a step, H hidden, A attention heads, KV key/value heads, D head dim,
 *   I intermediate, V vocabulary, T cache positions (ctx), L layers.
 * The architecture table (one row per config.json `architectures` value) is in model.c.
 * Tested by tests/model/test_model.c.
 */
#ifndef MOQ_MODEL_MODEL_H
#define MOQ_MODEL_MODEL_H

#include "moq.h"

/* "LlamaForCausalLM, MistralForCausalLM, ..." (for messages). */
const char *moq_model_supported_list(char *buf, size_t n);
/* True when config.json architectures[0] == name is a row of the architecture table (moq run
 * accepts it); inspect and check use it to warn before run refuses. */
bool moq_model_architecture_supported(const char *name);
/* The rope_theta an architecture's transformers config class uses when config.json has none
 * (its documented default); false when the architecture has none here. */
bool moq_model_rope_theta_default(const char *architecture, double *theta, const char **config_class);

#endif
