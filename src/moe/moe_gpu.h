/* moe_gpu.h — one mixture-of-experts layer on the GPU, built from a layer moq_moe_create opened on the
 * CPU (its canonical expert weights are packed with part 1's layout and uploaded once, all experts of
 * a projection stacked in one buffer), run by the grouped kernels of src/kernels/cuda/moe.cu:
 *
 *   router logits (the layer's router weight, or the caller's) -> route + group rows by expert
 *   (one launch) -> gather -> act_quant (part 1) -> grouped w13 (one launch) -> activation ->
 *   act_quant -> grouped w2 (one launch) -> combine into y
 *
 * or, for T <= 16 tokens (decode; weights not on the input), the same arithmetic in 3 launches:
 *   router + x quantizer + route + group -> grouped w13 + activation -> grouped w2 (quantizing its
 *   rows itself) + combine into y   (MOQ_CUDA_MOE_UNFUSED=1 at open: the chain, for measurements)
 *
 * Every buffer a step needs is allocated at open for up to max_tokens tokens (workspace from
 * max_tokens × top_k rows); run only enqueues work on `stream` (a cudaStream_t, NULL: the default) (no allocation, no host
 * synchronisation). Gate and up keep their own alphas (per-row scales of the packed w13, as the CPU's
 * shards). Refused at open (MOQ_ERR_UNSUPPORTED, naming the reason): experts without a CUDA pair
 * (F32 / F16), AWQ pre_quant_scale, a shared expert inside the layer, per-expert activation scales
 * that differ (the rows of all experts are quantized in one pass), per-expert weight scales (Gemma
 * 4), scores other than softmax / sigmoid, E > 1024, top_k > 32, max_tokens·k > 8192; and
 * (MOQ_ERR_INVALID_ARG) a layer created without moq_moe_opts.keep_canonical, whose CPU packing
 * dropped the canonical expert weights this layer packs.
 * Tests: tests/moe/test_moe_cuda.c (against moq_moe_run and moq_moe_route_ref).
 */
#ifndef MOQ_MOE_MOE_GPU_H
#define MOQ_MOE_MOE_GPU_H

#include "moe/moe.h"

typedef struct moq_moe_gpu moq_moe_gpu;

moq_status moq_moe_gpu_open(moq_moe_gpu **out, const moq_moe *m, int64_t max_tokens, moq_error *err);
void       moq_moe_gpu_free(moq_moe_gpu *g);
/* Device bytes the layer holds (weights and workspace). */
uint64_t   moq_moe_gpu_bytes(const moq_moe_gpu *g);
/* Bytes of one local expert's packed w13 + w2 on the GPU (what a decode step reads per selected expert). */
uint64_t   moq_moe_gpu_expert_bytes(const moq_moe_gpu *g);

/* y_d f32 [T, H] = the layer on x_d f32 [T, H] (device pointers, T <= max_tokens). logits_d: device
 * router logits f32 [T, E], or NULL to run the layer's router. stream: cudaStream_t or NULL. */
moq_status moq_moe_gpu_run(moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, float *y_d, void *stream, moq_error *err);

/* For benchmarks (`moq bench moe --device cuda --graph`): n calls of moq_moe_gpu_run captured into one
 * CUDA graph on a stream of the graph's own, as a model's decode step is (call i with the router
 * logits logits_d + i·T·E, or the layer's router when logits_d is NULL). replay launches the graph
 * and waits for it. */
typedef struct moq_moe_gpu_graph moq_moe_gpu_graph;
moq_status moq_moe_gpu_graph_create(moq_moe_gpu_graph **out, moq_moe_gpu *g, const float *x_d, int64_t T, const float *logits_d, int n, float *y_d,
                                    moq_error *err);
moq_status moq_moe_gpu_graph_replay(moq_moe_gpu_graph *gr, moq_error *err);
void       moq_moe_gpu_graph_free(moq_moe_gpu_graph *gr);

/* Routing alone on the GPU for host logits [T, E] -> ids [T, k], weights [T, k] (host). Allocates
 * and frees device memory per call: for tests, not the forward path. */
moq_status moq_moe_gpu_route(const moq_moe_routing *r, int64_t E, const float *logits, int64_t T, int32_t *ids, float *weights,
                             moq_error *err);

#endif
