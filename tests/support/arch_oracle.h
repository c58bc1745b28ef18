/* arch_oracle.h — what the generated-checkpoint architecture tests (tests/model/test_arch.c,
 * test_arch_llama4.c, test_arch_gpt_oss.c) share around their fp64 oracles: one linear or one
 * gate/up/down MLP written through tg_add_linears, the fp64 RMSNorm and SiLU-gated MLP of those
 * forwards, the check of moq's logits (prefill, then 4 decode steps) against the oracle's, and the
 * config.json refusal check. Built on model_gen.h; no expected value comes from moq's runtime code. */
#ifndef MOQ_TEST_ARCH_ORACLE_H
#define MOQ_TEST_ARCH_ORACLE_H

#include "model_gen.h"

/* One module `pre`.`name` [N, K] in quant_algo `algo`, its oracle linear in *out. */
void ao_lin1(gen *g, const char *pre, const char *name, int64_t N, int64_t K, const char *algo, bool bias, olin *out);
/* `pre`.{gate_proj, up_proj} [I, H] (fused) and `pre`.down_proj [H, I], without bias. */
void ao_mlp(gen *g, const char *pre, int64_t H, int64_t I, const char *algo, olin *gt, olin *up, olin *dn);
/* x · rsqrt(mean(x²) + 1e-5) · w (w NULL: · 1, an L2Norm without weight), in place. */
void ao_rms(double *x, const double *w, int n);
/* out = down(silu(gate(h)) · up(h)), I the intermediate size. */
void ao_mlp_run(const olin *g, const olin *u, const olin *d, int I, const double *h, double *out);
/* Opens `dir` (2 threads, context ctx), prefills nt - 4 tokens of prompt and decodes the other 4;
 * the logits [nt, V] must satisfy max|got - want| / max|want| <= tol (fails the test otherwise). */
void ao_check_logits(const char *name, const char *dir, const int32_t *prompt, int nt, int V, int ctx, const double *want,
                     double tol);
/* A checkpoint of one tensor and this config.json must be refused with `code`, naming config.json
 * and saying `msg`; `tag` names the temporary directory. */
void ao_open_cfg_err(const char *tag, const char *cfg, moq_status code, const char *msg);

#endif
