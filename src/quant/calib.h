/* calib.h — what max calibration records (NUMERICS.md §9.1): per decoder layer, the amax at each
 * observation point of the forward pass. Filled by moq_calibrate (model/calibrate.c, which runs the
 * model with an observer on these taps), read by the quantizer (quant/quantize.c) for static input
 * scales and FP8 KV scales. */
#ifndef MOQ_QUANT_CALIB_H
#define MOQ_QUANT_CALIB_H

#include <stdint.h>

/* Observation points of the forward pass: the input of each linear (q/k/v share one, gate/up share
 * one) and the K (after q/k norm and RoPE, as the attention reads it) and V rows written to the
 * cache. */
typedef enum moq_model_tap {
    MOQ_TAP_QKV_IN = 0,  /* [M, H]      input of q_proj, k_proj, v_proj; MLA's q_a_proj / q_proj and
                          *             kv_a_proj_with_mqa; Gated DeltaNet's in_proj_qkv/z/b/a */
    MOQ_TAP_O_IN,        /* [M, A D]    input of o_proj (GQA, MLA), Gated DeltaNet's out_proj  */
    MOQ_TAP_GATE_UP_IN,  /* [M, H]      input of gate_proj/up_proj (dense MLP, or the shared expert
                          *             of an MoE layer: a layer has one or the other)     */
    MOQ_TAP_DOWN_IN,     /* [M, I]      input of down_proj (dense MLP or shared expert)   */
    MOQ_TAP_K,           /* [1, KV D]   one token's keys                        */
    MOQ_TAP_V,           /* [1, KV D]   one token's values                      */
    MOQ_TAP_MOE_IN,      /* [M, H]      input of a routed-expert block          */
    MOQ_TAP_Q_B_IN,      /* [M, q_lora] input of MLA's q_b_proj (q_a_proj's output, normed) */
    MOQ_TAP_COUNT,
    MOQ_TAP_EXPERT_IN = MOQ_TAP_COUNT, /* [c, H]  the rows routed to one expert (its gate/up input)   */
    MOQ_TAP_EXPERT_DOWN_IN,            /* [c, I]  that expert's down_proj input (the activation)   */
    MOQ_TAP_NONE = -1
} moq_model_tap;

/* amax per (layer, tap) over the calibration tokens; -1 where nothing was seen. Routed experts:
 * per (layer, expert, 0 = gate/up input | 1 = down input), over the tokens routed to each. */
typedef struct moq_calib {
    int64_t n_layers;
    float  *amax;        /* [n_layers][MOQ_TAP_COUNT], malloc'ed             */
    int64_t n_tokens;    /* tokens run                                       */
    int64_t n_experts;   /* 0 when the model has no routed experts          */
    float  *expert_amax; /* [n_layers][n_experts][2], malloc'ed, or NULL    */
} moq_calib;

void moq_calib_free(moq_calib *c);

#endif
