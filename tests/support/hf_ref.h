/* hf_ref.h — the transformers reference of a tiny model under tests/data/hf_tiny/<model>/ref.safetensors
 * (scripts/gen_arch_fixtures.py writes it: 20 token ids, transformers' logits at each of them, and 8
 * greedy ids after the first 12 tokens), and the two measures the architecture tests apply to it. */
#ifndef MOQ_TESTS_HF_REF_H
#define MOQ_TESTS_HF_REF_H

#include <stdint.h>

#include "io/checkpoint.h"

enum { NT = 20, NP = 12, NG = 8 }; /* tokens, prompt length, greedy steps */

typedef struct ref {
    moq_checkpoint *ck;
    int32_t         tokens[NT], greedy[NG];
    const float    *logits; /* [NT, V], in the mapping */
    int64_t         V;
} ref;

/* Opens hf_tiny/<model>/ref.safetensors from the source tree (fails the test when it is missing or malformed). */
void   hf_ref_load(ref *r, const char *model);
/* max |got - want| / max |want| (NaN in got gives NaN). */
double hf_rel_err(const float *got, const float *want, int64_t n);
/* index of the largest value, the lowest on ties */
int    hf_argmax(const float *x, int64_t n);
/* the same with id `never` left out: transformers' greedy step under generate(min_new_tokens) with
 * `never` = eos_token_id */
int    hf_argmax_except(const float *x, int64_t n, int64_t never);

/* The architecture tests' check of a checkpoint folder `dir` against hf_tiny/<model>'s reference:
 * prefill of all NT tokens, then the NP-token prompt and NG greedy steps (ids must be transformers'),
 * logits within 1e-3 of max |ref| both ways, decode within 1e-5 of prefill; `arch` is what moq must
 * name the model. Prints the three errors. */
void hf_ref_check_dir(const char *model, const char *dir, const char *arch, int threads);

#endif
