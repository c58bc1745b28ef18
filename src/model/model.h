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

/* Observation points of the forward pass, for max calibration (quant/calibrate.c): the input of
 * each linear (q/k/v share one, gate/up share one) and the K (after RoPE and q/k norm, as the
 * attention reads it) and V rows written to the cache. */
typedef enum moq_model_tap {
    MOQ_TAP_QKV_IN = 0,  /* [M, H]      input of q_proj, k_proj, v_proj        */
    MOQ_TAP_O_IN,        /* [M, A D]    input of o_proj                        */
    MOQ_TAP_GATE_UP_IN,  /* [M, H]      input of gate_proj/up_proj (dense MLP)  */
    MOQ_TAP_DOWN_IN,     /* [M, I]      input of down_proj (dense MLP)          */
    MOQ_TAP_K,           /* [1, KV D]   one token's keys                        */
    MOQ_TAP_V,           /* [1, KV D]   one token's values                      */
    MOQ_TAP_MOE_IN,      /* [M, H]      input of a routed-expert block          */
    MOQ_TAP_COUNT
} moq_model_tap;

/* Called with rows x cols f32 values (row-major, contiguous) at each tap of layer `layer`. Runs on
 * the forwarding thread; x is borrowed for the call. */
typedef void (*moq_model_observer)(void *user, int64_t layer, moq_model_tap tap, const float *x, int64_t rows,
                                   int64_t cols);
/* Sets (fn != NULL) or clears the observer. Caller-owned: the model keeps only the pointers; when
 * unset the forward pass tests one pointer per tap and does nothing else. */
void moq_model_set_observer(moq_model *m, moq_model_observer fn, void *user);

#endif
