/* sampler.h — token sampling (the API is in moq.h: moq_sampler_*). Internal: the PRNG, exposed
 * for tests/model/test_sampler.c, which checks it against the published xoshiro256** and
 * splitmix64 reference outputs.
 */
#ifndef MOQ_MODEL_SAMPLER_H
#define MOQ_MODEL_SAMPLER_H

#include <stdint.h>

typedef struct moq_xoshiro { uint64_t s[4]; } moq_xoshiro;

/* splitmix64 step: advances *state and returns the next output (Vigna's splitmix64.c). */
uint64_t moq_splitmix64(uint64_t *state);
/* Seeds the four words with four splitmix64 outputs of seed. */
void     moq_xoshiro_seed(moq_xoshiro *x, uint64_t seed);
/* xoshiro256** 1.0 next() (Blackman & Vigna). */
uint64_t moq_xoshiro_next(moq_xoshiro *x);
/* Uniform double in [0, 1): the top 53 bits. */
double   moq_xoshiro_uniform(moq_xoshiro *x);

#endif
