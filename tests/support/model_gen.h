/* model_gen.h — what the model tests share to write tiny checkpoints and run an fp64 oracle over
 * them: the oracle's own bit formats (NUMERICS §1), a deterministic generator that writes bf16 or
 * ModelOpt-exported tensors per quant_algo (quant/export_ref.c) through moq_writer, and the oracle
 * linear that dequantizes the written codes and restates each runtime activation quantizer
 * (§2.4, §4.3, §5.1-§5.3). No expected value comes from moq's runtime code.
 * Used by tests/model/test_model.c and tests/model/test_arch.c. */
#ifndef MOQ_TEST_MODEL_GEN_H
#define MOQ_TEST_MODEL_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moq.h"

typedef enum act { ACT_NONE, ACT_FP8_STATIC, ACT_FP8_TOKEN, ACT_FP8_G128, ACT_NVFP4, ACT_MXFP8 } act;

typedef struct olin {            /* oracle linear                                   */
    double *W;                   /* [N, K] dequantized                              */
    double *bias;                /* [N] or NULL                                     */
    int64_t N, K;
    act     a;
    double  in_scale;            /* FP8 static: s_in; NVFP4: input_scale            */
    double *pqs;                 /* [K] AWQ pre_quant_scale (x * pqs first) or NULL */
} olin;

typedef struct gen {
    moq_writer *w;
    void      **bufs;
    size_t      n_bufs;
    uint64_t    rng;
    char        layers_json[8192]; /* MIXED_PRECISION quantized_layers entries        */
} gen;

extern const double TG_ACT_AMAX; /* "calibrated" activation amax used for static scales */

double  tg_d_e4m3(uint8_t c);
double  tg_d_e2m1(uint8_t c);
double  tg_q_e4m3(double x);   /* round to e4m3 (RNE, saturating), as a double */
double  tg_q_e2m1(double x);
void   *tg_keep(gen *g, size_t n);                 /* zeroed buffer freed with the generator   */
double  tg_uni(uint64_t *st);                     /* splitmix64 -> [0, 1)                     */
float   tg_bf16r(double x);                       /* round to bf16                            */
void    tg_fill(gen *g, float *x, size_t n, double std, double mean);
void    tg_add(gen *g, const char *name, moq_dtype dt, int ndim, const int64_t *shape, const void *data, size_t nbytes);
void    tg_add_scalar(gen *g, const char *name, float v);
double *tg_add_bf16(gen *g, const char *name, int64_t n0, int64_t n1, double std, double mean);
/* The same as an F32 tensor of full-precision values (norm weights whose products with bf16
 * activations are no short binary fractions, so dynamic quantizers meet no exact ties). */
double *tg_add_f32(gen *g, const char *name, int64_t n0, int64_t n1, double std, double mean);
/* One module (or the shards of one fused module) in quant_algo `algo` ("BF16" = unquantized);
 * fills the oracle linears out[cnt] and appends MIXED_PRECISION entries to g->layers_json. */
void    tg_add_linears(gen *g, const char *prefix, const char *const *names, const int64_t *ns, int cnt, int64_t K,
                       const char *algo, bool bias, olin *out);
void    tg_olin_free(olin *l);
/* The runtime activation quantizer of `a`, restated: x [K] -> out [K]. */
void    tg_act_quant(act a, double in_scale, const double *x, int64_t K, double *out);
/* y [N] = W · quant(x) (+ bias). */
void    tg_lin(const olin *l, const double *x, double *y);
/* Frees the generator's buffers (after moq_writer_finish). */
void    tg_gen_free(gen *g);

#endif
