/* load.h — the glue of "checkpoint module -> config resolution -> contract check -> canonical
 * moq_weight -> kernel" (public entry: moq_linear_layer_open in moq.h, section "loading layers from
 * a checkpoint"). Internal: the load context the canonicalize hooks (fp8.c, nvfp4.c, mxfp8.c) fill.
 *
 * Memory (docs/ARCHITECTURE.md "Weight memory"): a single-shard layer borrows its codes (and u8
 * block scales) from the checkpoint's mmap. Codes and u8 block scales a hook must build (fused
 * shards concatenated along N, the MXFP8 row-block scales expanded, FP8 codes requantized under a
 * compat profile, NVFP4 re-canonicalized to FP8) come from the layer's codes region
 * (moq_load_take_codes); f32 scales, bias and the AWQ scale from its arena (moq_load_take). Both
 * are one allocation each, owned by the layer. Fused shards are concatenated (one moq_weight,
 * row0[] marks each shard's rows), never kept as separate tensors: moq_weight has one q pointer.
 * Once a packed kernel row holds the codes, moq_linear_layer_drop_canonical frees the codes region
 * and releases the mapped pages of the layer's tensors: one resident copy of each weight.
 *
 * A hook turns checkpoint tensors into the canonical weight of its scheme (scheme/quant_key.h) and
 * never touches a kernel layout (STYLE.md §6). Tested by tests/scheme/test_load.c.
 */
#ifndef MOQ_SCHEME_LOAD_H
#define MOQ_SCHEME_LOAD_H

#include "config/modelopt.h"
#include "moq.h"
#include "scheme/quant_key.h"
#include "scheme/scheme.h"
#include "scheme/slice.h"

/* One checkpoint module feeding rows [row0, row0 + N) of the layer. */
typedef struct moq_load_shard {
    char              name[256];  /* "model.layers.0.self_attn.q_proj"                        */
    const moq_tensor *weight;     /* codes or model-dtype weight                               */
    const moq_tensor *scale;      /* weight_scale or NULL                                      */
    const moq_tensor *scale2;     /* weight_scale_2 or NULL                                    */
    const moq_tensor *in_scale;   /* input_scale or NULL                                       */
    const moq_tensor *bias;       /* bias or NULL                                              */
    const moq_tensor *pqs;        /* pre_quant_scale or NULL                                   */
    int64_t           N;          /* rows of this shard (of its slice, when sliced)            */
    moq_tensor        view[5];    /* the slice's views of weight, scale, bias, pqs (slice.h)   */
} moq_load_shard;

#define MOQ_LOAD_MAX_NOTES 4

typedef struct moq_load_ctx {
    const moq_checkpoint   *c;
    const moq_compat_rules *rules;     /* the config's profile (moq's when there is no config) */
    const moq_scheme       *scheme;    /* NULL: unquantized                                    */
    const char             *layer;     /* the module prefix being loaded                       */
    int64_t                 N, K, G;   /* G: group size of the resolution (0 = none)           */
    moq_load_shard          sh[MOQ_MAX_SHARDS];
    int                     n;
    moq_weight             *w;         /* filled by the hook (keys, N, K, q, scale, shards)    */
    uint8_t                *arena;     /* the layer's allocation for f32 scales, bias, AWQ scale */
    size_t                  arena_size, arena_used;
    uint8_t                *codes;     /* the layer's allocation for built codes + u8 block scales */
    size_t                  codes_size, codes_used;
    char                    notes[MOQ_LOAD_MAX_NOTES][320];
    int                     n_notes;
} moq_load_ctx;

typedef moq_status (*moq_canon_fn)(moq_load_ctx *x, moq_error *err);

/* `bytes` from the layer's allocation, 64-byte aligned; NULL when the bound load.c computed is
 * too small (a moq bug: callers turn it into MOQ_ERR_INTERNAL). */
void *moq_load_take(moq_load_ctx *x, size_t bytes);
/* Keeps a one-line note on the layer (the library never prints). */
void  moq_load_note(moq_load_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Value of an f32 scalar (or [1]) tensor: the contract check guarantees dtype and size. */
float moq_load_scalar(const moq_tensor *t);
/* `bytes` from the layer's codes region (codes and u8 block scales only: what every packed kernel
 * row holds in its own layout, so the region is freed once the layer is packed); NULL when the
 * bound is too small (MOQ_ERR_INTERNAL). */
void *moq_load_take_codes(moq_load_ctx *x, size_t bytes);
/* Codes (or u8 block scales) of the shards concatenated along N (row_bytes per row) in the codes
 * region, borrowed from the mapping when there is one shard. */
const void *moq_load_concat_codes(moq_load_ctx *x, const moq_tensor *const *t, const int64_t *rows, size_t row_bytes,
                                  moq_error *err);
/* "q_proj=0.01, k_proj=0.02": one value per shard, for notes. */
const char *moq_load_shard_values(const moq_load_ctx *x, const float *v, char *buf, size_t n);
/* Last dotted part of a module name ("q_proj"), for notes. */
const char *moq_load_short(const char *module);

/* The canonicalize hooks, one per linear method (table in load.c). */
moq_status moq_canon_fp8_tensor(moq_load_ctx *x, moq_error *err);  /* fp8.c   */
moq_status moq_canon_fp8_row(moq_load_ctx *x, moq_error *err);     /* fp8.c   */
moq_status moq_canon_fp8_block(moq_load_ctx *x, moq_error *err);   /* fp8.c   */
moq_status moq_canon_nvfp4(moq_load_ctx *x, moq_error *err);       /* nvfp4.c */
moq_status moq_canon_mxfp8(moq_load_ctx *x, moq_error *err);       /* mxfp8.c */
/* Load-time re-canonicalization of an already canonical weight (table in load.c): NVFP4 -> FP8
 * (moq_linear_opts.nvfp4_as = MOQ_NVFP4_AS_FP8). */
moq_status moq_recanon_nvfp4_fp8(moq_load_ctx *x, moq_error *err);         /* nvfp4.c: vLLM's blocks */
moq_status moq_recanon_nvfp4_fp8_channel(moq_load_ctx *x, moq_error *err); /* nvfp4.c: per channel    */

/* NUMERICS §5.1 requantize_with_max_scale for one code: e4m3 q with scale s -> e4m3 code under
 * s_max: E4s(clamp(f32(f16(f32(D4(q) * s)) * f32(1 / s_max)), +-448)). Exposed for the tests. */
uint8_t moq_fp8_requant_code(uint8_t q, float s, float inv_s_max);

/* moq_linear_layer_open with one slice per shard (slices[s] for packed shard s; NULL or
 * MOQ_SLICE_NONE = whole): the tensors are validated whole, then each shard's tensors are replaced by
 * views of its slice (scheme/slice.h) before the hook runs, so the layer holds only this rank's part.
 * A slice that cuts a quantization block is MOQ_ERR_UNSUPPORTED naming the shard. */
moq_status moq_linear_layer_open_sliced(moq_linear_layer **out, const moq_checkpoint *c, const moq_qconfig *q, const char *prefix,
                                        moq_layer_kind kind, const moq_packed *packed, int n_packed, const moq_linear_opts *opts,
                                        const moq_slice *slices, moq_error *err);

/* Resolution and loading details of a loaded layer (used by `moq inspect`). */
const moq_weight *moq_linear_layer_weight(const moq_linear_layer *l);

/* One copy of each weight (issue 14): when the layer's kernel row packed the weight, frees the
 * codes region, forgets q (and u8 block scales) in the layer's weight (NULL) and tells the kernel
 * the pages of the layer's checkpoint tensors are not needed (moq_map_release: they leave the
 * resident set; read back from the page cache if touched). keep_codes: an embedding table whose
 * rows are gathered from the canonical weight keeps it (its mapped pages are still released and
 * come back one row at a time). Returns true when the canonical codes were dropped. */
bool moq_linear_layer_drop_canonical(moq_linear_layer *l, bool keep_codes);
/* Resident weight bytes of a layer: `packed` the kernel's layout (host or device), `owned` the
 * layer's allocations still held (arena, codes region), `mapped` checkpoint bytes the layer still
 * reads from the mapping (codes or block scales borrowed and not dropped). */
void moq_linear_layer_memory(const moq_linear_layer *l, uint64_t *packed, uint64_t *owned, uint64_t *mapped);

#endif
