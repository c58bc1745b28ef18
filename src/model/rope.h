/* rope.h — rotary position embedding frequencies for the rope_scaling types of the supported
 * architectures (Hugging Face transformers' modeling_rope_utils.py): default, linear, llama3, yarn,
 * proportional (Gemma 4's global layers).
 * One table row per type (rope.c). Rotation is the "rotate_half" (GPT-NeoX) pairing that the
 * Llama/Mistral/Qwen HF checkpoints use: element i pairs with i + D/2.
 * Tested by tests/model/test_model.c (an independent fp64 formula per type).
 */
#ifndef MOQ_MODEL_ROPE_H
#define MOQ_MODEL_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "moq.h"

typedef struct moq_rope_params {
    char   type[32];              /* "" / "default", "linear", "llama3", "yarn"            */
    double theta;                 /* rope_theta                                            */
    double factor;                /* rope_scaling.factor                                   */
    double low_freq_factor;       /* llama3 (default 1)                                    */
    double high_freq_factor;      /* llama3 (default 4)                                    */
    double original_max_pos;      /* llama3 / yarn original_max_position_embeddings        */
    double beta_fast, beta_slow;  /* yarn (defaults 32, 1)                                 */
    double attention_factor;      /* yarn cos/sin factor; 0 = derived from factor (below)  */
    double mscale, mscale_all_dim; /* yarn (DeepSeek): when both are set and attention_factor
                                     is not, the factor is m(mscale) / m(mscale_all_dim) with
                                     m(s) = 0.1 s ln(factor) + 1; else m(1)                  */
    bool   no_truncate;           /* yarn truncate: false (gpt-oss): the correction range is not
                                     rounded to whole dimensions                             */
    double partial_rotary_factor; /* proportional: the first floor(f D / 2) frequencies rotate
                                     (exponent 2i / D over the whole head), the rest are 0
                                     (identity); 0 = 1                                      */
} moq_rope_params;

/* inv_freq f32 [D/2] and the cos/sin multiplier (yarn attention factor, else 1). Errors name
 * config.json when the type is unknown or a parameter is out of range. */
moq_status moq_rope_inv_freq(const moq_rope_params *p, int64_t D, float *inv_freq, float *mscale, moq_error *err);
/* Rotates x f32 [D] in place for position pos. */
void moq_rope_apply(float *x, int64_t D, int64_t pos, const float *inv_freq, float mscale);
/* The same rotation over the pairs (2i, 2i + 1) (Llama 4's view_as_complex form; HF Llama 4
 * checkpoints keep Meta's row order, so q and k rows are not permuted to rotate_half's). */
void moq_rope_apply_pairs(float *x, int64_t D, int64_t pos, const float *inv_freq, float mscale);
/* The same two rotations with the angles' cos/sin (× mscale) computed once for a position and
 * reused by every head (issue 15: a batched step computed them per head and row, 6× the trig of a
 * layer's work): moq_rope_angles fills cs, sn [D/2] with exactly the values moq_rope_apply uses, so
 * the results are bit-identical. */
void moq_rope_angles(int64_t D, int64_t pos, const float *inv_freq, float mscale, float *cs, float *sn);
void moq_rope_apply_cs(float *x, int64_t D, const float *cs, const float *sn);
void moq_rope_apply_pairs_cs(float *x, int64_t D, const float *cs, const float *sn);

#endif
