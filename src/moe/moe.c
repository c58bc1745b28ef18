/* moe.c — one mixture-of-experts layer on CPU: expert loading from a checkpoint prefix in every
 * ModelOpt format, and execution grouped by expert on the linear registry's rows.
 *
 * Load (moq_moe_create), per local expert e (global id g):
 *   w13  [N13, H]  = [gate; up] with gate rows [0, I) and up rows [I', I' + I), I' = I rounded up to
 *                    the pair's K multiple (zero rows between; NUMERICS §6.1's order, gate first).
 *                    Non-gated (relu²): the up projection alone, rows [0, I). Two shards (gated):
 *                    shard 0 = gate with w1's weight_scale / weight_scale_2, shard 1 = up with w3's
 *                    — kept separately (each half its own alpha) unless the compat profile merges them.
 *   w2   [H, I']   = down_proj with zero columns [I, I').
 *   Checkpoint names: experts.<g>.{gate_proj,up_proj,down_proj} or experts.<g>.{w1,w3,w2}
 *   (non-gated: up_proj or w1, and down_proj or w2); per projection the format row's tensors.
 *   Input scales (FP8, NVFP4): read for all E global experts, so that the default "one max over
 *   experts" is the same whichever slice of experts this process holds (the seeds size these
 *   parameters by the global expert count). Default MAX (both seeds' FP8 MoE and their FlashInfer
 *   NVFP4 paths, NUMERICS §6.2/§6.3): it is what every served ModelOpt MoE does today, and the
 *   per-expert variant exists for the "else" branches (MOQ_MOE_INPUT_SCALE_PER_EXPERT).
 *
 * Run (moq_moe_run), T tokens, k per token, A = T·k assignments:
 *   1. router logits f32 [T, E] (caller's, or the checkpoint router as a moq_linear)
 *   2. top-k per token (routing.c) -> ids, weights
 *   3. counting sort of the assignments by local expert -> contiguous rows per expert, tokens
 *      ascending inside each expert; experts held elsewhere (map -1) are skipped
 *   4. gather x rows (Llama-4: x·w in f32) into [A, H]
 *   5. each expert with >= 1 token: h = w13·xg [c, N13] f32 -> act [c, I'] (x's dtype) -> w2 ->
 *      its rows of o f32 [A, H]. Experts in parallel (one thread each, dynamic schedule) when at
 *      least as many experts as threads are active, else one after another with each GEMM split
 *      by rows over the threads. Only the selected experts' weights are read.
 *   6. y[t] = Σ_j w_j · o[pos(t, j)] (+ shared expert) summed in slot order j: the result does not
 *      depend on the thread count.
 * Workspace: caller-owned, sized by moq_moe_workspace_size(T); run never allocates.
 * Tests: tests/moe/test_moe.c (every format and routing mode vs an fp64 reference MoE).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/format.h"
#include "io/mmap.h"
#include "kernels/kernels.h"
#include "moe/moe.h"
#include "moe/routing.h"
#include "scheme/load.h"

/* ---- format rows --------------------------------------------------------------------------- */
typedef enum { SC_NONE, SC_TENSOR, SC_BLK128, SC_GROUP, SC_ROW } moe_scale_kind; /* SC_ROW: f32 [N] per output channel */

typedef struct moe_fmt {
    const char    *name;     /* ModelOpt quant_algo                                             */
    const char    *method;   /* the config resolver's method name for these experts             */
    moq_pair_id    pair;     /* MOQ_PAIR_COUNT: unquantized, the pair follows the weight dtype    */
    moq_dtype      wdt;      /* weight dtype on disk (MOQ_DT_COUNT: F32, BF16 or F16)             */
    int            per_byte; /* weight elements per stored element along K (2: packed e2m1)       */
    moe_scale_kind scale;
    moq_dtype      sdt, sdt2;/* weight_scale dtype (and an accepted alias)                        */
    int            group;    /* K columns per weight_scale entry (SC_GROUP, SC_BLK128)            */
    bool           ws2;      /* weight_scale_2 f32 scalar                                         */
    bool           in_scale; /* input_scale f32 scalar                                            */
    bool           pqs;      /* AWQ pre_quant_scale bf16|f16 [K] accepted (multiplied into x)        */
} moe_fmt;

/*                              name           method              pair                   wdt            /B  scale      sdt             alias          grp  ws2    in     */
static const moe_fmt moe_fmts[MOQ_MOE_FMT_COUNT] = {
    [MOQ_MOE_FMT_UNQUANTIZED] = {"unquantized", "none",             MOQ_PAIR_COUNT,        MOQ_DT_COUNT,   1, SC_NONE,   MOQ_DT_COUNT,   MOQ_DT_COUNT,  0,   false, false, false},
    [MOQ_MOE_FMT_FP8]         = {"FP8",         "fp8_moe",          MOQ_PAIR_FP8_TENSOR,   MOQ_DT_F8_E4M3, 1, SC_TENSOR, MOQ_DT_F32,     MOQ_DT_COUNT,  0,   false, true, false},
    [MOQ_MOE_FMT_FP8_PB_WO]   = {"FP8_PB_WO",   "fp8_block_moe",    MOQ_PAIR_FP8_BLK128,   MOQ_DT_F8_E4M3, 1, SC_BLK128, MOQ_DT_F32,     MOQ_DT_COUNT,  128, false, false, false},
    [MOQ_MOE_FMT_NVFP4]       = {"NVFP4",       "nvfp4_moe",        MOQ_PAIR_NVFP4,        MOQ_DT_U8,      2, SC_GROUP,  MOQ_DT_F8_E4M3, MOQ_DT_COUNT,  16,  true,  true, false},
    [MOQ_MOE_FMT_W4A16_NVFP4] = {"W4A16_NVFP4", "w4a16_nvfp4_moe",  MOQ_PAIR_NVFP4_W4A16,  MOQ_DT_U8,      2, SC_GROUP,  MOQ_DT_F8_E4M3, MOQ_DT_COUNT,  16,  true,  false, false},
    [MOQ_MOE_FMT_MXFP8]       = {"MXFP8",       "mxfp8_moe",        MOQ_PAIR_MXFP8,        MOQ_DT_F8_E4M3, 1, SC_GROUP,  MOQ_DT_F8_E8M0, MOQ_DT_U8,     32,  false, false, false},
    [MOQ_MOE_FMT_FP8_PER_CHANNEL] = {"FP8_PER_CHANNEL_PER_TOKEN", "fp8_pcpt_moe", MOQ_PAIR_FP8_ROW, MOQ_DT_F8_E4M3, 1, SC_ROW, MOQ_DT_F32, MOQ_DT_COUNT, 0, false, false, false},
    [MOQ_MOE_FMT_NVFP4_AWQ]   = {"NVFP4_AWQ",   "nvfp4_awq_moe",    MOQ_PAIR_NVFP4,        MOQ_DT_U8,      2, SC_GROUP,  MOQ_DT_F8_E4M3, MOQ_DT_COUNT,  16,  true,  true,  true},
};

/* Checkpoint names of an expert's projections, one row per layout. [0] gate, [1] up, [2] down. */
static const char *const moe_layouts[][3] = {
    {"gate_proj", "up_proj", "down_proj"}, /* Qwen, DeepSeek, Llama                           */
    {"w1", "w3", "w2"},                    /* Mixtral (non-gated experts use w1 as the up one) */
};
enum { N_LAYOUTS = sizeof moe_layouts / sizeof moe_layouts[0] };

/* ---- the layer ----------------------------------------------------------------------------- */
typedef struct moe_expert {
    moq_weight  w13, w2;
    void       *q13, *s13, *q2, *s2; /* owned canonical buffers the weights point into */
    float      *p13, *p2;            /* AWQ pre_quant_scale f32 [2H] (gate, up) / [Ip], or NULL */
    float      *b13, *b2;            /* bias f32 [N13] (gate, up rows as w13) / [H], or NULL    */
    moq_linear *l13, *l2;
} moe_expert;

#define MOE_MAX_WARN 4
#define MOE_WARN_LEN 512
struct moq_moe {
    char                name[192];
    const moe_fmt      *fmt;
    moq_moe_act         act;
    moq_moe_act_params  ap;
    moq_moe_routing     routing;     /* correction_bias points at bias when read from the file */
    float              *bias;        /* f32 [E] owned, or NULL                                  */
    float              *escale;      /* f32 [E] owned copy of routing.expert_scale, or NULL      */
    int64_t             E, H, I, Ip, N13, n_local;
    int64_t             If;          /* the checkpoint's intermediate (I is the slice's under inter_slice) */
    moq_slice           sl;          /* opts.inter_slice as rows of w1/w3 (dim NONE: whole)      */
    bool                stacked;     /* unquantized experts as transformers' stacked parameters  */
    bool                interleaved; /* stacked gate_up_proj: gate and up in alternating columns */
    int32_t            *local_of;    /* i32 [E]: local id or -1                                 */
    moe_expert         *ex;          /* [n_local]                                               */
    moe_expert          shared;
    bool                has_shared;
    moq_linear         *router;
    moq_weight          router_w;    /* the router's canonical weight (the GPU layer reads it)    */
    bool                rcpa;        /* opts.rcpa_corr was given                                  */
    void               *router_q;    /* owned copy of the router weight                         */
    float              *router_b;    /* f32 [E] router bias (gpt-oss), or NULL                    */
    int                 n_threads;
    moq_moe_observer    obs;         /* calibration hook (moe.h), NULL when unset                */
    void               *obs_user;
    int64_t             obs_tag;
    int64_t            *global_of;   /* i64 [n_local]: global id of each local expert            */
    int                 n_warn;
    char                warn[MOE_MAX_WARN][MOE_WARN_LEN];
};

moq_moe_opts moq_moe_opts_default(void) {
    moq_moe_opts o = {0};
    o.format = MOQ_MOE_FMT_UNQUANTIZED;
    o.act = MOQ_MOE_ACT_SILU;
    o.swiglu_limit = 7.0f, o.swiglu_alpha = 1.702f, o.swiglu_beta = 1.0f; /* gpt-oss */
    o.routing.scoring = MOQ_MOE_SCORE_SOFTMAX;
    o.routing.top_k = 2;
    o.routing.renormalize = true;
    o.routing.routed_scaling_factor = 1.0f;
    o.router = "gate";
    o.cpu_mask = ~0u;
    return o;
}

/* ---- tensor checks ------------------------------------------------------------------------- */
static moq_status get_tensor(const moq_checkpoint *ck, const char *name, const char *what, const moq_tensor **out, moq_error *err) {
    *out = moq_checkpoint_tensor(ck, name);
    if (!*out) return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "tensor missing (%s)", what);
    return MOQ_OK;
}

static moq_status want_dtype(const moq_tensor *t, moq_dtype a, moq_dtype b, const char *what, moq_error *err) {
    if (t->dtype == a || (b != MOQ_DT_COUNT && t->dtype == b)) return MOQ_OK;
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected %s%s%s (%s)", moq_dtype_name(t->dtype), moq_dtype_name(a),
                    b != MOQ_DT_COUNT ? " or " : "", b != MOQ_DT_COUNT ? moq_dtype_name(b) : "", what);
}

static void shape_str(const int64_t *d, int n, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && o < len; i++) o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Shape must equal want[0..n) exactly; ones lists dims allowed to be squeezed (FP8_PB_WO [a,1,b,1]). */
static moq_status want_shape(const moq_tensor *t, int n, const int64_t *want, const char *what, moq_error *err) {
    bool ok = t->ndim == n;
    for (int i = 0; ok && i < n; i++) ok = t->shape[i] == want[i];
    if (ok) return MOQ_OK;
    char f[96], w[96];
    shape_str(t->shape, t->ndim, f, sizeof f);
    shape_str(want, n, w, sizeof w);
    return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "shape %s, expected %s (%s)", f, w, what);
}

/* A positive finite f32 scalar (shape [] or [1]). */
static moq_status read_scalar(const moq_checkpoint *ck, const char *name, const char *what, float *v, moq_error *err) {
    const moq_tensor *t;
    MOQ_TRY(get_tensor(ck, name, what, &t, err));
    MOQ_TRY(want_dtype(t, MOQ_DT_F32, MOQ_DT_COUNT, what, err));
    if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1))) {
        char f[96];
        shape_str(t->shape, t->ndim, f, sizeof f);
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "shape %s, expected a scalar [] (%s)", f, what);
    }
    memcpy(v, t->data, 4);
    if (!(*v > 0.0f) || !isfinite(*v)) return MOQ_FAIL(err, MOQ_ERR_TENSOR, name, "value %g, expected a finite value > 0 (%s)", (double)*v, what);
    return MOQ_OK;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static moq_elem elem_of_dtype(moq_dtype d) {
    switch (d) {
    case MOQ_DT_F32: return MOQ_ELEM_F32;
    case MOQ_DT_BF16: return MOQ_ELEM_BF16;
    case MOQ_DT_F16: return MOQ_ELEM_F16;
    default: return MOQ_ELEM_NONE;
    }
}
static moq_pair_id pair_of_elem(moq_elem e) {
    return e == MOQ_ELEM_F32 ? MOQ_PAIR_F32 : e == MOQ_ELEM_BF16 ? MOQ_PAIR_BF16 : MOQ_PAIR_F16;
}

/* Destination of one projection inside a canonical weight: rows [row0, row0 + N) of a buffer
 * with Kp columns. Buffers are zeroed at allocation, so padding stays zero. */
typedef struct proj_dst {
    uint8_t *q;          /* row-major, qrow bytes per row            */
    size_t   qrow;
    uint8_t *s;          /* SC_GROUP: u8 [rows, Kp/group]; SC_BLK128: f32 [rows/128, Kp/128] */
    int64_t  Kp, row0;
    float    wscale;     /* out: weight_scale (SC_TENSOR) or weight_scale_2 */
    float   *pqs;        /* f32 [Kp] for an AWQ pre_quant_scale (format pqs), else NULL   */
    bool     has_pqs;    /* out: the projection has one (else pqs is left as it was)      */
} proj_dst;

/* Tensor-parallel experts (opts.inter_slice): t is replaced by the view of its slice (scheme/slice.h);
 * columns go to a buffer kept in *buf until the projection is copied. */
static moq_status cut(const moq_tensor **t, moq_slice_role role, moq_pair_id p, int64_t N, int64_t K, const moq_slice *sl, moq_tensor *view,
                      void **buf, moq_error *err) {
    if (!sl) return MOQ_OK;
    const size_t b = moq_slice_view_bytes(*t, role, moq_pairs[p].w, N, K, sl);
    if (b && !(*buf = malloc(b))) return MOQ_FAIL(err, MOQ_ERR_NOMEM, (*t)->name, "out of memory for %zu bytes of its slice", b);
    bool keep;
    MOQ_TRY(moq_slice_view(*t, role, moq_pairs[p].w, N, K, sl, *buf, view, &keep, err));
    *t = view;
    return MOQ_OK;
}

/* Loads <base>.weight (+ scales) of shape [N, K] into d, or its slice sl (NULL: whole; then N, K
 * are the checkpoint's and the rows / columns copied are the slice's). `elem` receives the weight's
 * element encoding (unquantized: from its dtype) so the caller can check all projections agree. */
static moq_status load_proj_in(const moq_checkpoint *ck, const moe_fmt *f, const char *base, int64_t N, int64_t K, const moq_slice *sl,
                               proj_dst *d, moq_dtype *dt, void **bufs, moq_error *err) {
    char nm[320], what[96];
    const moq_tensor *t;
    moq_tensor view[3];
    const int64_t Nf = N, Kf = K; /* the checkpoint's shape; N, K become the slice's */
    snprintf(nm, sizeof nm, "%s.weight", base);
    snprintf(what, sizeof what, "%s expert weight", f->name);
    MOQ_TRY(get_tensor(ck, nm, what, &t, err));
    const moq_tensor *const t_file = t; /* the mapped tensor (t may become a slice's copy) */
    if (f->wdt == MOQ_DT_COUNT) {
        if (elem_of_dtype(t->dtype) == MOQ_ELEM_NONE)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "dtype %s, expected F32, BF16 or F16 (unquantized experts)", moq_dtype_name(t->dtype));
        if (*dt != MOQ_DT_COUNT && t->dtype != *dt)
            return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "dtype %s, expected %s like the layer's other experts", moq_dtype_name(t->dtype),
                            moq_dtype_name(*dt));
        *dt = t->dtype;
    } else {
        MOQ_TRY(want_dtype(t, f->wdt, MOQ_DT_COUNT, what, err));
    }
    MOQ_TRY(want_shape(t, 2, (int64_t[]){N, cdiv(K, f->per_byte)}, f->per_byte == 2 ? "[N, K/2]: two e2m1 per byte" : "[N, K]", err));
    const moq_pair_id pr = f->pair == MOQ_PAIR_COUNT ? pair_of_elem(elem_of_dtype(t->dtype)) : f->pair;
    if (sl) {
        MOQ_TRY(moq_slice_check(sl, moq_pairs[pr].w, moq_pairs[pr].a, Nf, Kf, t->name, err));
        MOQ_TRY(cut(&t, MOQ_ROLE_WEIGHT, pr, Nf, Kf, sl, &view[0], &bufs[0], err));
        if (sl->dim == MOQ_SLICE_ROWS) N = sl->count;
        else K = sl->count;
    }
    const int64_t Ks = cdiv(K, f->per_byte);
    snprintf(nm, sizeof nm, "%s.pre_quant_scale", base);
    const moq_tensor *pq = moq_checkpoint_tensor(ck, nm);
    if (pq && !f->pqs) /* never dropped silently */
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "extra tensor: AWQ pre_quant_scale on a %s expert, expected none (only NVFP4_AWQ applies it)", f->name);
    if (pq) {
        MOQ_TRY(want_dtype(pq, MOQ_DT_BF16, MOQ_DT_F16, "AWQ scale per input channel", err));
        MOQ_TRY(want_shape(pq, 1, (int64_t[]){Kf}, "AWQ scale per input channel [K]", err));
        MOQ_TRY(cut(&pq, MOQ_ROLE_VEC_K, pr, Nf, Kf, sl, &view[1], &bufs[1], err));
        for (int64_t k = 0; k < K; k++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)pq->data + 2 * k, 2);
            d->pqs[k] = pq->dtype == MOQ_DT_BF16 ? moq_bf16_decode(h) : moq_f16_decode(h);
        }
        d->has_pqs = true;
    }
    snprintf(nm, sizeof nm, "%s.weight", base);
    const size_t eb = (size_t)moq_dtype_bits(t->dtype) / 8, srow = (size_t)Ks * eb;
    for (int64_t n = 0; n < N; n++) memcpy(d->q + (size_t)(d->row0 + n) * d->qrow, (const uint8_t *)t->data + (size_t)n * srow, srow);
    moq_map_release(t_file->data, t_file->nbytes); /* copied: the mapped pages leave the resident set */

    snprintf(nm, sizeof nm, "%s.weight_scale", base);
    if (f->scale == SC_TENSOR) {
        MOQ_TRY(read_scalar(ck, nm, "FP8 per-tensor weight scale", &d->wscale, err));
    } else if ((f->scale == SC_GROUP || f->scale == SC_BLK128 || f->scale == SC_ROW) && !d->s) {
        return MOQ_FAIL(err, MOQ_ERR_INTERNAL, nm, "no scale buffer for format %s", f->name);
    } else if (f->scale == SC_GROUP) {
        snprintf(what, sizeof what, "%s: one %s scale per %d weights", f->name, moq_dtype_name(f->sdt), f->group);
        MOQ_TRY(get_tensor(ck, nm, what, &t, err));
        MOQ_TRY(want_dtype(t, f->sdt, f->sdt2, what, err));
        const int64_t G = cdiv(K, f->group), Gp = d->Kp / f->group;
        MOQ_TRY(want_shape(t, 2, (int64_t[]){Nf, cdiv(Kf, f->group)}, what, err));
        const moq_tensor *const s_file = t;
        MOQ_TRY(cut(&t, MOQ_ROLE_SCALE, pr, Nf, Kf, sl, &view[2], &bufs[2], err));
        for (int64_t n = 0; n < N; n++) memcpy(d->s + (size_t)((d->row0 + n) * Gp), (const uint8_t *)t->data + (size_t)(n * G), (size_t)G);
        moq_map_release(s_file->data, s_file->nbytes);
    } else if (f->scale == SC_ROW) {
        const char *why = "FP8_PER_CHANNEL_PER_TOKEN: one f32 scale per output channel";
        MOQ_TRY(get_tensor(ck, nm, why, &t, err));
        MOQ_TRY(want_dtype(t, MOQ_DT_F32, MOQ_DT_COUNT, why, err));
        if (t->ndim == 2) MOQ_TRY(want_shape(t, 2, (int64_t[]){Nf, 1}, why, err)); /* [N] as written; [N, 1] accepted */
        else MOQ_TRY(want_shape(t, 1, (int64_t[]){Nf}, why, err));
        MOQ_TRY(cut(&t, MOQ_ROLE_SCALE, pr, Nf, Kf, sl, &view[2], &bufs[2], err));
        memcpy((float *)d->s + d->row0, t->data, (size_t)N * sizeof(float));
    } else if (f->scale == SC_BLK128) {
        const char *why = "FP8_PB_WO: one f32 scale per 128x128 block";
        MOQ_TRY(get_tensor(ck, nm, why, &t, err));
        MOQ_TRY(want_dtype(t, MOQ_DT_F32, MOQ_DT_COUNT, why, err));
        const int64_t bn = cdiv(N, 128), bk = cdiv(K, 128), bkp = d->Kp / 128, fbn = cdiv(Nf, 128), fbk = cdiv(Kf, 128);
        /* [bn, 1, bk, 1], [bn, bk], or 0-d for a single block (ModelOpt 0.47, NUMERICS §12) */
        if (t->ndim == 4) MOQ_TRY(want_shape(t, 4, (int64_t[]){fbn, 1, fbk, 1}, why, err));
        else if (t->ndim != 0 || fbn * fbk != 1) MOQ_TRY(want_shape(t, 2, (int64_t[]){fbn, fbk}, why, err));
        MOQ_TRY(cut(&t, MOQ_ROLE_SCALE, pr, Nf, Kf, sl, &view[2], &bufs[2], err));
        float *dst = (float *)d->s;
        for (int64_t i = 0; i < bn; i++)
            for (int64_t j = 0; j < bkp; j++) {
                float v = 1.0f; /* padded K blocks multiply zero weights */
                if (j < bk) memcpy(&v, (const uint8_t *)t->data + (size_t)(i * bk + j) * 4, 4);
                dst[(d->row0 / 128 + i) * bkp + j] = v;
            }
    }
    if (f->ws2) {
        snprintf(nm, sizeof nm, "%s.weight_scale_2", base);
        MOQ_TRY(read_scalar(ck, nm, "NVFP4 global weight scale", &d->wscale, err));
    }
    return MOQ_OK;
}

static moq_status load_proj(const moq_checkpoint *ck, const moe_fmt *f, const char *base, int64_t N, int64_t K, const moq_slice *sl,
                            proj_dst *d, moq_dtype *dt, moq_error *err) {
    void *bufs[3] = {NULL, NULL, NULL};
    const moq_status st = load_proj_in(ck, f, base, N, K, sl, d, dt, bufs, err);
    free(bufs[0]), free(bufs[1]), free(bufs[2]);
    return st;
}

/* FP8 per-tensor requantization of rows [r0, r0+n) from scale s to s_max: the seeds' rule
 * (NUMERICS §5.1), one code at a time by the same function the linear loader uses. */
static void fp8_requant(uint8_t *q, int64_t r0, int64_t n, int64_t K, float s, float s_max) {
    const float inv = 1.0f / s_max;
    for (int64_t i = r0 * K; i < (r0 + n) * K; i++) q[i] = moq_fp8_requant_code(q[i], s, inv);
}

/* Allocates the canonical buffers of a weight with N rows, Kp columns. */
static moq_status alloc_weight(const moe_fmt *f, moq_pair_id p, int64_t N, int64_t Kp, void **q, void **s, const char *where, moq_error *err) {
    const size_t qb = moq_elem_bytes(moq_pairs[p].w->elem, (size_t)(N * Kp));
    size_t sb = 0;
    if (f->scale == SC_GROUP) sb = (size_t)(N * (Kp / f->group));
    if (f->scale == SC_BLK128) sb = (size_t)(cdiv(N, 128) * (Kp / 128)) * 4;
    if (f->scale == SC_ROW) sb = (size_t)N * 4;
    *q = calloc(1, qb ? qb : 1);
    *s = sb ? calloc(1, sb) : NULL;
    if (!*q || (sb && !*s)) return MOQ_FAIL(err, MOQ_ERR_NOMEM, where, "out of memory for %zu weight bytes", qb + sb);
    if (f->scale == SC_ROW && *s) /* padding rows (zero weights) between gate and up keep a valid scale */
        for (int64_t n = 0; n < N; n++) ((float *)*s)[n] = 1.0f;
    return MOQ_OK;
}

static void weight_init(moq_weight *w, moq_pair_id p, int64_t N, int64_t K, void *q, void *s) {
    memset(w, 0, sizeof *w);
    w->w = *moq_pairs[p].w, w->a = *moq_pairs[p].a;
    w->N = N, w->K = K, w->q = q, w->scale = s;
    w->n_shards = 1, w->row0[1] = N;
    w->shard_scale[0] = 1.0f, w->shard_in_scale[0] = 1.0f;
}

/* Kernel rows of an expert's two weights, then one copy of each (issue 14): when a row packed its
 * weight, the canonical codes (and u8 block scales) are freed (moq_linear_forget_canonical). */
static moq_status expert_bind(moe_expert *ex, moq_linear_opts *lo, const char *name13, const char *name2, bool keep, moq_error *err) {
    lo->name = name13;
    MOQ_TRY(moq_linear_create_from_weight(&ex->l13, &ex->w13, lo, err));
    lo->name = name2;
    MOQ_TRY(moq_linear_create_from_weight(&ex->l2, &ex->w2, lo, err));
    if (keep) return MOQ_OK;
    moq_linear *const l[2] = {ex->l13, ex->l2};
    moq_weight *const w[2] = {&ex->w13, &ex->w2};
    void **const q[2] = {&ex->q13, &ex->q2}, **const s[2] = {&ex->s13, &ex->s2};
    for (int i = 0; i < 2; i++) {
        const unsigned gone = moq_linear_forget_canonical(l[i]);
        if (gone & MOQ_CANON_CODES) free(*q[i]), *q[i] = NULL, w[i]->q = NULL;
        if (gone & MOQ_CANON_BLOCK_SCALES) free(*s[i]), *s[i] = NULL, w[i]->scale = NULL;
    }
    return MOQ_OK;
}

/* Name of projection j (0 gate, 1 up, 2 down) in layout l; non-gated Mixtral names up "w1". */
static const char *proj_name(int l, int j, bool gated) { return (!gated && l == 1 && j == 1) ? "w1" : moe_layouts[l][j]; }

/* Which layout row names this expert's tensors (the first whose first projection exists). */
static int find_layout(const moq_checkpoint *ck, const char *ebase, bool gated) {
    char nm[320];
    for (int l = 0; l < N_LAYOUTS; l++) {
        snprintf(nm, sizeof nm, "%s.%s.weight", ebase, proj_name(l, gated ? 0 : 1, gated));
        if (moq_checkpoint_tensor(ck, nm)) return l;
    }
    return -1;
}

typedef struct in_scales { float a13[2], a2; bool have; } in_scales;

/* Stacked experts, as transformers' Llama4TextExperts / GptOssExperts hold them and save_pretrained and
 * ModelOpt 0.47's export_hf_checkpoint write them: <prefix>.experts.gate_up_proj [E, H/b, 2I] and
 * .down_proj [E, I/b, H], both applied as x · W (so the codes are transposed here into the canonical
 * [N, K] rows; b = 2 for packed e2m1, whose byte (k/2, n) holds k even in the low nibble, as a row of
 * the canonical layout does). Quantized, ModelOpt writes beside each <proj>: <proj>_weight_scale
 * (FP8: one scalar for all experts; NVFP4: e4m3 [E, K/16, N]), <proj>_weight_scale_2 and
 * <proj>_input_scale (one scalar each for all experts), and gpt-oss's <proj>_bias [E, N].
 * gate_up's columns are [gate | up] (Llama 4: chunk(2)) or alternate gate, up (gpt-oss: [..., ::2],
 * [..., 1::2]). MXFP8 (whose stacked scales ModelOpt writes per 32 output columns, measured) and formats
 * whose stacked scales no export has shown (block, per-channel) are refused. */
static moq_status stacked_tensor(const moq_moe *m, const moq_checkpoint *ck, const char *what, int64_t d1, int64_t d2,
                                 const moq_tensor **out, moq_error *err) {
    char nm[300], shp[64];
    const moe_fmt *f = m->fmt;
    snprintf(nm, sizeof nm, "%s.experts.%s", m->name, what);
    MOQ_TRY(get_tensor(ck, nm, "stacked expert weight", out, err));
    if (f->wdt == MOQ_DT_COUNT && elem_of_dtype((*out)->dtype) == MOQ_ELEM_NONE)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "dtype %s, expected F32, BF16 or F16 (unquantized experts)", moq_dtype_name((*out)->dtype));
    if (f->wdt != MOQ_DT_COUNT) MOQ_TRY(want_dtype(*out, f->wdt, MOQ_DT_COUNT, f->name, err));
    snprintf(shp, sizeof shp, "%s (x · W)%s", strncmp(what, "gate", 4) == 0 ? "[E, H, 2I]" : "[E, I, H]", f->per_byte == 2 ? ", K packed in halves" : "");
    return want_shape(*out, 3, (int64_t[]){m->E, d1 / f->per_byte, d2}, shp, err);
}

/* Row r of a [rows, n] F32 / BF16 / F16 tensor into f32 out. */
static moq_status bias_row(const moq_tensor *t, int64_t r, int64_t n, float *out, moq_error *err) {
    if (elem_of_dtype(t->dtype) == MOQ_ELEM_NONE)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, t->name, "dtype %s, expected F32, BF16 or F16 (bias)", moq_dtype_name(t->dtype));
    for (int64_t i = 0; i < n; i++) {
        const size_t at = (size_t)(r * n + i);
        uint16_t h;
        if (t->dtype == MOQ_DT_F32) memcpy(&out[i], (const uint8_t *)t->data + 4 * at, 4);
        else memcpy(&h, (const uint8_t *)t->data + 2 * at, 2), out[i] = t->dtype == MOQ_DT_BF16 ? moq_bf16_decode(h) : moq_f16_decode(h);
    }
    return MOQ_OK;
}

/* <prefix>.experts.<proj><suffix>: an f32 scalar for all experts, or f32 [E] (expert gl's). */
static moq_status stacked_scalar(const moq_moe *m, const moq_checkpoint *ck, const char *proj, const char *suffix, int64_t gl, float *v,
                                 moq_error *err) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s.experts.%s%s", m->name, proj, suffix);
    const moq_tensor *t;
    MOQ_TRY(get_tensor(ck, nm, "stacked experts' scale", &t, err));
    MOQ_TRY(want_dtype(t, MOQ_DT_F32, MOQ_DT_COUNT, "stacked experts' scale", err));
    if (t->nelem != 1 && !(t->ndim == 1 && t->shape[0] == m->E))
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "%llu elements, expected a scalar (all experts) or [%lld] (one per expert)",
                        (unsigned long long)t->nelem, (long long)m->E);
    memcpy(v, (const uint8_t *)t->data + (t->nelem == 1 ? 0 : 4 * (size_t)gl), 4);
    if (!(*v > 0.0f) || !isfinite(*v)) return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "value %g, expected a finite value > 0", (double)*v);
    return MOQ_OK;
}

/* dst row (row0 + n) of a canonical buffer (rowb bytes per row) = column col(n) of the [rows, cols]
 * matrix of eb-byte elements at src. */
static void transpose_cols(uint8_t *dst, size_t rowb, int64_t row0, int64_t n_rows, const uint8_t *src, int64_t rows, int64_t cols,
                           size_t eb, bool interleaved, int s, int64_t half) {
    for (int64_t n = 0; n < n_rows; n++) {
        const int64_t col = interleaved ? 2 * n + s : s * half + n;
        for (int64_t k = 0; k < rows; k++) memcpy(dst + (size_t)(row0 + n) * rowb + (size_t)k * eb, src + ((size_t)k * (size_t)cols + (size_t)col) * eb, eb);
    }
}

static moq_status load_stacked(moq_moe *m, const moq_checkpoint *ck, moe_expert *ex, const in_scales *a, const moq_moe_opts *o, moq_error *err) {
    const moe_fmt *f = m->fmt;
    const int64_t gl = m->global_of[ex - m->ex], H = m->H, I = m->I, pb = f->per_byte;
    if (f->pair == MOQ_PAIR_MXFP8) /* measured: gate_up_proj_weight_scale U8 [E, H, 2I/32] */
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, m->name, "stacked experts (experts.gate_up_proj [E, H, 2I]) in format MXFP8: ModelOpt 0.47 "
                        "writes their e8m0 scales in blocks of 32 along the output dimension, and MXFP8 kernels scale blocks of 32 along K; "
                        "expected FP8, NVFP4, W4A16_NVFP4 or unquantized stacked experts");
    if (f->scale != SC_NONE && f->scale != SC_TENSOR && f->scale != SC_GROUP)
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, m->name, "stacked experts (experts.gate_up_proj [E, H, 2I]) in format %s: no ModelOpt export of this "
                        "layout has been seen, expected FP8, NVFP4, W4A16_NVFP4 or unquantized", f->name);
    const moq_tensor *gu, *dn;
    MOQ_TRY(stacked_tensor(m, ck, "gate_up_proj", H, 2 * I, &gu, err));
    MOQ_TRY(stacked_tensor(m, ck, "down_proj", I, H, &dn, err));
    if (gu->dtype != dn->dtype)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, m->name, "stacked experts: gate_up_proj %s, down_proj %s; expected one dtype",
                        moq_dtype_name(gu->dtype), moq_dtype_name(dn->dtype));
    const moq_pair_id p = f->pair != MOQ_PAIR_COUNT ? f->pair : pair_of_elem(elem_of_dtype(gu->dtype));
    MOQ_TRY(alloc_weight(f, p, m->N13, H, &ex->q13, &ex->s13, m->name, err));
    MOQ_TRY(alloc_weight(f, p, H, m->Ip, &ex->q2, &ex->s2, m->name, err));
    weight_init(&ex->w13, p, m->N13, H, ex->q13, ex->s13);
    weight_init(&ex->w2, p, H, m->Ip, ex->q2, ex->s2);
    const size_t eb = (size_t)moq_dtype_bits(gu->dtype) / 8;
    const size_t row13 = moq_elem_bytes(moq_pairs[p].w->elem, (size_t)H), row2 = moq_elem_bytes(moq_pairs[p].w->elem, (size_t)m->Ip);
    const int64_t K13 = H / pb, K2 = I / pb; /* stored elements along K */
    const uint8_t *s13 = (const uint8_t *)gu->data + (size_t)gl * (size_t)(K13 * 2 * I) * eb, *s2 = (const uint8_t *)dn->data + (size_t)gl * (size_t)(K2 * H) * eb;
    for (int s = 0; s < 2; s++) transpose_cols(ex->q13, row13, s * m->Ip, I, s13, K13, 2 * I, eb, m->interleaved, s, I);
    transpose_cols(ex->q2, row2, 0, H, s2, K2, H, eb, false, 0, 0);
    moq_map_release(s13, (uint64_t)(K13 * 2 * I) * eb), moq_map_release(s2, (uint64_t)(K2 * H) * eb); /* this expert's slices, copied */
    ex->w13.n_shards = 2, ex->w13.row0[1] = m->Ip, ex->w13.row0[2] = m->N13;
    ex->w13.shard_scale[1] = ex->w13.shard_in_scale[1] = 1.0f;
    char nm[300];
    if (f->scale == SC_GROUP) { /* <proj>_weight_scale [E, K/group, N], one byte each (e4m3 / e8m0) */
        const moq_tensor *t;
        const int64_t G13 = H / f->group, G2 = cdiv(I, f->group), Gp2 = m->Ip / f->group;
        snprintf(nm, sizeof nm, "%s.experts.gate_up_proj_weight_scale", m->name);
        MOQ_TRY(get_tensor(ck, nm, "stacked block scales", &t, err));
        MOQ_TRY(want_dtype(t, f->sdt, f->sdt2, "stacked block scales", err));
        MOQ_TRY(want_shape(t, 3, (int64_t[]){m->E, G13, 2 * I}, "[E, H/group, 2I]", err));
        for (int s = 0; s < 2; s++) transpose_cols(ex->s13, (size_t)G13, s * m->Ip, I, (const uint8_t *)t->data + (size_t)(gl * G13 * 2 * I), G13, 2 * I, 1, m->interleaved, s, I);
        snprintf(nm, sizeof nm, "%s.experts.down_proj_weight_scale", m->name);
        MOQ_TRY(get_tensor(ck, nm, "stacked block scales", &t, err));
        MOQ_TRY(want_dtype(t, f->sdt, f->sdt2, "stacked block scales", err));
        MOQ_TRY(want_shape(t, 3, (int64_t[]){m->E, G2, H}, "[E, I/group, H]", err));
        transpose_cols(ex->s2, (size_t)Gp2, 0, H, (const uint8_t *)t->data + (size_t)(gl * G2 * H), G2, H, 1, false, 0, 0);
    }
    float w13s = 1.0f, w2s = 1.0f;
    if (f->scale == SC_TENSOR) {
        MOQ_TRY(stacked_scalar(m, ck, "gate_up_proj", "_weight_scale", gl, &w13s, err));
        MOQ_TRY(stacked_scalar(m, ck, "down_proj", "_weight_scale", gl, &w2s, err));
    }
    if (f->ws2) {
        MOQ_TRY(stacked_scalar(m, ck, "gate_up_proj", "_weight_scale_2", gl, &w13s, err));
        MOQ_TRY(stacked_scalar(m, ck, "down_proj", "_weight_scale_2", gl, &w2s, err));
    }
    for (int s = 0; s < 2; s++) ex->w13.shard_scale[s] = w13s, ex->w13.shard_in_scale[s] = a->have ? a->a13[s] : 1.0f;
    ex->w2.shard_scale[0] = w2s, ex->w2.shard_in_scale[0] = a->have ? a->a2 : 1.0f;
    /* gpt-oss: gate_up_proj_bias [E, 2I] (columns as gate_up_proj) and down_proj_bias [E, H] */
    snprintf(nm, sizeof nm, "%s.experts.gate_up_proj_bias", m->name);
    const moq_tensor *bgu = moq_checkpoint_tensor(ck, nm);
    snprintf(nm, sizeof nm, "%s.experts.down_proj_bias", m->name);
    const moq_tensor *bdn = moq_checkpoint_tensor(ck, nm);
    if (!bgu != !bdn)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, bgu ? nm : m->name, "%s; expected both stacked expert biases (gate_up_proj_bias, down_proj_bias) or neither",
                        bgu ? "tensor missing" : "down_proj_bias without gate_up_proj_bias");
    if (bgu) {
        ex->b13 = calloc((size_t)m->N13, sizeof(float));
        ex->b2 = calloc((size_t)H, sizeof(float));
        float *tmp = malloc((size_t)(2 * I + H) * sizeof(float));
        moq_status st = !ex->b13 || !ex->b2 || !tmp ? MOQ_FAIL(err, MOQ_ERR_NOMEM, m->name, "out of memory") : MOQ_OK;
        if (st == MOQ_OK) st = want_shape(bgu, 2, (int64_t[]){m->E, 2 * I}, "stacked expert bias [E, 2I]", err);
        if (st == MOQ_OK) st = want_shape(bdn, 2, (int64_t[]){m->E, H}, "stacked expert bias [E, H]", err);
        if (st == MOQ_OK) st = bias_row(bgu, gl, 2 * I, tmp, err);
        if (st == MOQ_OK) st = bias_row(bdn, gl, H, tmp + 2 * I, err);
        for (int s = 0; st == MOQ_OK && s < 2; s++)
            for (int64_t n = 0; n < I; n++) ex->b13[s * m->Ip + n] = tmp[m->interleaved ? 2 * n + s : s * I + n];
        if (st == MOQ_OK) memcpy(ex->b2, tmp + 2 * I, (size_t)H * sizeof(float));
        free(tmp);
        MOQ_TRY(st);
        ex->w13.bias = ex->b13, ex->w2.bias = ex->b2;
    }
    moq_linear_opts lo = moq_linear_opts_default();
    lo.n_threads = m->n_threads, lo.cpu_mask = o->cpu_mask, lo.rcpa_corr = o->rcpa_corr;
    return expert_bind(ex, &lo, m->name, m->name, o->keep_canonical, err);
}

/* Loads one expert (or the shared expert) at ebase into ex. a: the input scales to use. */
static moq_status load_expert(moq_moe *m, const moq_checkpoint *ck, const char *ebase, moe_expert *ex, const in_scales *a,
                              const moq_moe_opts *o, int *n_diff, float diff_ex[2], moq_dtype *dt, moq_error *err) {
    const moe_fmt *f = m->fmt;
    const bool gated = moq_moe_act_table[m->act].gated;
    if (m->stacked && ex != &m->shared) return load_stacked(m, ck, ex, a, o, err);
    const int lay = find_layout(ck, ebase, gated);
    char nm[320];
    if (lay < 0) {
        snprintf(nm, sizeof nm, "%s.%s.weight", ebase, gated ? "gate_proj" : "up_proj");
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "tensor missing (expert layout %s.{gate_proj,up_proj,down_proj} or %s.{w1,w3,w2})", ebase, ebase);
    }
    moq_pair_id p = f->pair;
    if (p == MOQ_PAIR_COUNT) { /* unquantized: the dtype decides */
        snprintf(nm, sizeof nm, "%s.%s.weight", ebase, proj_name(lay, gated ? 0 : 1, gated));
        const moq_tensor *t = moq_checkpoint_tensor(ck, nm);
        const moq_elem e = elem_of_dtype(t->dtype);
        if (e == MOQ_ELEM_NONE) return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "dtype %s, expected F32, BF16 or F16 (unquantized experts)", moq_dtype_name(t->dtype));
        p = pair_of_elem(e);
    }
    MOQ_TRY(alloc_weight(f, p, m->N13, m->H, &ex->q13, &ex->s13, ebase, err));
    MOQ_TRY(alloc_weight(f, p, m->H, m->Ip, &ex->q2, &ex->s2, ebase, err));
    weight_init(&ex->w13, p, m->N13, m->H, ex->q13, ex->s13);
    weight_init(&ex->w2, p, m->H, m->Ip, ex->q2, ex->s2);
    const size_t row13 = moq_elem_bytes(moq_pairs[p].w->elem, (size_t)m->H), row2 = moq_elem_bytes(moq_pairs[p].w->elem, (size_t)m->Ip);
    const int nsh = gated ? 2 : 1;
    float ws[2] = {1.0f, 1.0f};
    float *pq[2] = {NULL, NULL}; /* AWQ: gate's and up's pre_quant_scale (they read one input) */
    if (f->pqs) {
        ex->p13 = malloc((size_t)(2 * m->H + 1) * sizeof(float)); /* H, Ip >= 1 (checked at create) */
        ex->p2 = malloc((size_t)(m->Ip + 1) * sizeof(float));
        if (!ex->p13 || !ex->p2) return MOQ_FAIL(err, MOQ_ERR_NOMEM, ebase, "out of memory");
        pq[0] = ex->p13, pq[1] = ex->p13 + m->H;
        for (int64_t k = 0; k < m->Ip; k++) ex->p2[k] = 1.0f; /* padded columns multiply zero weights */
    }
    bool has_pq[2] = {false, false};
    char pq_name[2][352];
    for (int s = 0; s < nsh; s++) {
        proj_dst d = {ex->q13, row13, ex->s13, m->H, s * m->Ip, 1.0f, pq[s], false};
        snprintf(nm, sizeof nm, "%s.%s", ebase, proj_name(lay, gated ? s : 1, gated));
        MOQ_TRY(load_proj(ck, f, nm, m->sl.dim ? m->If : m->I, m->H, m->sl.dim ? &m->sl : NULL, &d, dt, err));
        ws[s] = d.wscale, has_pq[s] = d.has_pqs;
        snprintf(pq_name[s], sizeof pq_name[s], "%s.pre_quant_scale", nm);
    }
    if (nsh == 2 && has_pq[0] != has_pq[1])
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, pq_name[has_pq[0] ? 1 : 0], "tensor missing while %s has one; gate and up read one input and need one AWQ scale",
                        pq_name[has_pq[0] ? 0 : 1]);
    if (nsh == 2 && has_pq[0] && memcmp(pq[0], pq[1], (size_t)m->H * sizeof(float)) != 0)
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, pq_name[1], "differs from %s; gate and up read one input and need one AWQ scale", pq_name[0]);
    ex->w13.pre_scale = has_pq[0] ? pq[0] : NULL;
    proj_dst d2 = {ex->q2, row2, ex->s2, m->Ip, 0, 1.0f, ex->p2, false};
    snprintf(nm, sizeof nm, "%s.%s", ebase, proj_name(lay, 2, gated));
    moq_slice s2 = m->sl; /* down_proj: the same intermediate, its input columns; rank 0 keeps the bias */
    s2.dim = m->sl.dim ? MOQ_SLICE_COLS : MOQ_SLICE_NONE;
    MOQ_TRY(load_proj(ck, f, nm, m->H, m->sl.dim ? m->If : m->I, m->sl.dim ? &s2 : NULL, &d2, dt, err));
    ex->w2.pre_scale = d2.has_pqs ? ex->p2 : NULL;

    ex->w13.n_shards = nsh;
    for (int s = 0; s < nsh; s++) ex->w13.row0[s] = s * m->Ip;
    ex->w13.row0[nsh] = m->N13;
    if (nsh == 2 && ws[0] != ws[1]) {
        if (*n_diff == 0) diff_ex[0] = ws[0], diff_ex[1] = ws[1];
        (*n_diff)++;
        if (f->scale == SC_TENSOR && (o->compat == MOQ_MOE_COMPAT_VLLM || o->compat == MOQ_MOE_COMPAT_SGLANG)) {
            const float smax = fmaxf(ws[0], ws[1]);
            for (int s = 0; s < 2; s++) fp8_requant(ex->q13, s * m->Ip, m->I, m->H, ws[s], smax), ws[s] = smax;
        } else if (f->ws2 && o->compat == MOQ_MOE_COMPAT_VLLM) {
            ws[1] = ws[0]; /* vLLM: the gate's weight_scale_2 for both halves (NUMERICS §6.3) */
        }
    } else if (nsh == 2 && f->scale == SC_TENSOR && o->compat == MOQ_MOE_COMPAT_SGLANG) {
        for (int s = 0; s < 2; s++) fp8_requant(ex->q13, s * m->Ip, m->I, m->H, ws[s], ws[s]); /* SGLang requantizes always */
    }
    for (int s = 0; s < nsh; s++) {
        ex->w13.shard_scale[s] = ws[s];
        ex->w13.shard_in_scale[s] = a->have ? a->a13[s] : 1.0f;
    }
    ex->w2.shard_scale[0] = d2.wscale;
    ex->w2.shard_in_scale[0] = a->have ? a->a2 : 1.0f;

    moq_linear_opts lo = moq_linear_opts_default();
    lo.n_threads = m->n_threads, lo.cpu_mask = o->cpu_mask, lo.rcpa_corr = o->rcpa_corr;
    return expert_bind(ex, &lo, ebase, nm, o->keep_canonical, err); /* nm: the down projection's checkpoint name */
}

/* Host bytes of an expert: packed layouts and the canonical buffers still held. */
static void expert_memory(const moe_expert *ex, uint64_t *packed, uint64_t *owned) {
    *packed += moq_linear_packed_bytes(ex->l13) + moq_linear_packed_bytes(ex->l2);
    const moq_weight *w[2] = {&ex->w13, &ex->w2};
    for (int i = 0; i < 2; i++) {
        if (!ex->l13) break;
        const uint64_t nk = (uint64_t)w[i]->N * (uint64_t)w[i]->K;
        if (w[i]->q) *owned += nk * (uint64_t)moq_elem_bits(w[i]->w.elem) / 8;
        if (w[i]->scale && w[i]->w.group_cols > 0)
            *owned += nk / (uint64_t)w[i]->w.group_cols / (uint64_t)(w[i]->w.group_rows > 0 ? w[i]->w.group_rows : 1) * (uint64_t)moq_elem_bits(w[i]->w.scale_elem) / 8;
    }
}

void moq_moe_memory(const moq_moe *m, uint64_t *packed, uint64_t *owned) {
    *packed = *owned = 0;
    if (!m) return;
    for (int64_t i = 0; m->ex && i < m->n_local; i++) expert_memory(&m->ex[i], packed, owned);
    if (m->has_shared) expert_memory(&m->shared, packed, owned);
    *packed += moq_linear_packed_bytes(m->router);
    if (m->router_q) *owned += (uint64_t)m->E * (uint64_t)m->H * 4; /* an upper bound: f32 */
}

static void expert_free(moe_expert *ex) {
    moq_linear_free(ex->l13), moq_linear_free(ex->l2);
    free(ex->q13), free(ex->s13), free(ex->q2), free(ex->s2), free(ex->p13), free(ex->p2), free(ex->b13), free(ex->b2);
}

void moq_moe_free(moq_moe *m) {
    if (!m) return;
    for (int64_t i = 0; m->ex && i < m->n_local; i++) expert_free(&m->ex[i]);
    if (m->has_shared) expert_free(&m->shared);
    moq_linear_free(m->router);
    free(m->router_b);
    free(m->router_q), free(m->bias), free(m->escale), free(m->local_of), free(m->global_of), free(m->ex), free(m);
}

/* Input scales of expert g: {w13 gate, w13 up, w2}. Missing and g not local: *present = false. */
static moq_status read_in_scales(const moq_checkpoint *ck, const char *prefix, int64_t g, bool gated, bool local, float v[3], bool *present,
                                 moq_error *err) {
    char eb[256], nm[320];
    snprintf(eb, sizeof eb, "%s.experts.%lld", prefix, (long long)g);
    const int lay = find_layout(ck, eb, gated);
    *present = lay >= 0;
    if (!*present) {
        if (!local) return MOQ_OK;
        snprintf(nm, sizeof nm, "%s.%s.weight", eb, gated ? "gate_proj" : "up_proj");
        return MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "tensor missing (expert %lld is local; layouts %s.{gate_proj,up_proj,down_proj} or %s.{w1,w3,w2})",
                        (long long)g, eb, eb);
    }
    const int js[3] = {gated ? 0 : 1, 1, 2};
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !gated) { v[1] = v[0]; continue; }
        snprintf(nm, sizeof nm, "%s.%s.input_scale", eb, proj_name(lay, js[i], gated));
        MOQ_TRY(read_scalar(ck, nm, "static activation scale", &v[i], err));
    }
    return MOQ_OK;
}

moq_status moq_moe_create(moq_moe **out, const moq_checkpoint *ck, const char *prefix, const moq_moe_opts *opts, moq_error *err) {
    if (!out || !ck || !prefix) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix ? prefix : "", "out, ck and prefix must not be NULL");
    *out = NULL;
    const moq_moe_opts o = opts ? *opts : moq_moe_opts_default();
    if ((unsigned)o.format >= MOQ_MOE_FMT_COUNT || (unsigned)o.act >= MOQ_MOE_ACT_COUNT || (unsigned)o.compat >= MOQ_MOE_COMPAT_COUNT ||
        (unsigned)o.input_scale > MOQ_MOE_INPUT_SCALE_PER_EXPERT)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "format %d, act %d, compat %d or input_scale %d out of range", (int)o.format, (int)o.act,
                        (int)o.compat, (int)o.input_scale);
    MOQ_TRY(moq_moe_routing_check(&o.routing, o.num_experts, prefix, err));
    moq_moe *m = calloc(1, sizeof *m);
    if (!m) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory");
    moq_status st = MOQ_OK;
    snprintf(m->name, sizeof m->name, "%s", prefix);
    m->fmt = &moe_fmts[o.format];
    m->act = o.act;
    m->ap = (moq_moe_act_params){o.swiglu_limit, o.swiglu_alpha, o.swiglu_beta};
    m->routing = o.routing;
    m->E = o.num_experts;
    m->rcpa = o.rcpa_corr != NULL;
    m->n_threads = o.n_threads > 0 ? o.n_threads : omp_get_max_threads();
    const bool gated = moq_moe_act_table[o.act].gated;
    const moe_fmt *f = m->fmt;
    char nm[320], eb[256];

    m->local_of = malloc((m->E > 0 ? (size_t)m->E : 1) * sizeof(int32_t));
    if (!m->local_of) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
    int64_t first = -1;
    for (int64_t g = 0; g < m->E; g++) {
        const int32_t l = o.expert_map ? o.expert_map[g] : (int32_t)g;
        if (l < -1 || l >= m->E) { st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "expert_map[%lld] = %d, expected -1..%lld", (long long)g, l, (long long)(m->E - 1)); goto fail; }
        m->local_of[g] = l;
        if (l >= 0) { m->n_local = m->n_local > l + 1 ? m->n_local : l + 1; if (first < 0) first = g; }
    }
    {   /* local ids must be 0..n_local-1, each once */
        int64_t cnt = 0;
        for (int64_t g = 0; g < m->E; g++) cnt += m->local_of[g] >= 0;
        if (cnt != m->n_local) { st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "expert_map holds %lld experts but local ids reach %lld; expected 0..n-1 each once", (long long)cnt, (long long)m->n_local); goto fail; }
        m->global_of = malloc((m->n_local > 0 ? (size_t)m->n_local : 1) * sizeof(int64_t));
        if (!m->global_of) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
        for (int64_t g = 0; g < m->E; g++)
            if (m->local_of[g] >= 0) m->global_of[m->local_of[g]] = g;
    }
    if (first < 0) { st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "expert_map holds none of the %lld experts, expected at least one local", (long long)m->E); goto fail; }
    /* Sizes from the first local expert's first projection: [I, H]. */
    {
        snprintf(eb, sizeof eb, "%s.experts.%lld", prefix, (long long)first);
        const int lay = find_layout(ck, eb, gated);
        snprintf(nm, sizeof nm, "%s.%s.weight", eb, lay < 0 ? (gated ? "gate_proj" : "up_proj") : proj_name(lay, gated ? 0 : 1, gated));
        const moq_tensor *t = moq_checkpoint_tensor(ck, nm);
        char snm[300];
        snprintf(snm, sizeof snm, "%s.experts.gate_up_proj", prefix);
        const moq_tensor *st3 = lay < 0 && gated ? moq_checkpoint_tensor(ck, snm) : NULL;
        if (st3) { /* stacked experts (transformers' own layout, unquantized only) */
            if (st3->ndim != 3 || st3->shape[2] % 2) { st = MOQ_FAIL(err, MOQ_ERR_TENSOR, snm, "%d dimensions, expected [E, H, 2I]", st3->ndim); goto fail; }
            m->stacked = true, m->interleaved = o.interleaved_gate_up;
            m->I = st3->shape[2] / 2, m->H = st3->shape[1] * f->per_byte;
        } else if (!t || t->ndim != 2) {
            st = t ? MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "%d dimensions, expected 2 [I, H]", t->ndim)
                   : MOQ_FAIL(err, MOQ_ERR_TENSOR, nm, "tensor missing (expert layout %s.{gate_proj,up_proj,down_proj}, %s.{w1,w3,w2} or stacked %s.experts.{gate_up_proj,down_proj})", eb, eb, prefix);
            goto fail;
        } else {
            if (f->wdt != MOQ_DT_COUNT && (st = want_dtype(t, f->wdt, MOQ_DT_COUNT, f->name, err)) != MOQ_OK) goto fail;
            m->I = t->shape[0];
            m->H = t->shape[1] * f->per_byte;
        }
    }
    m->If = m->I;
    if (o.inter_slice.count > 0) { /* tensor-parallel experts: rows of w1/w3, columns of w2 */
        const moq_moe_slice *is = &o.inter_slice;
        if (m->stacked || o.shared_expert) {
            st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, prefix, "%s experts split over ranks; stacked experts and an in-layer shared expert are "
                          "held whole (expert parallelism, --ep)", m->stacked ? "stacked" : "shared");
            goto fail;
        }
        if (is->start < 0 || is->start + is->count > m->I) {
            st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "inter_slice [%lld, %lld) outside the experts' intermediate size %lld",
                          (long long)is->start, (long long)(is->start + is->count), (long long)m->I);
            goto fail;
        }
        m->sl = (moq_slice){MOQ_SLICE_ROWS, is->start, is->count, is->bias};
        m->I = is->count;
    }
    const int kmul = f->pair == MOQ_PAIR_COUNT ? 1 : moq_pairs[f->pair].k_multiple;
    if ((m->I < 1 || m->H < 1 || m->H % kmul)) {
        st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, nm, "hidden size %lld is not a multiple of %d (%s groups along K)", (long long)m->H, kmul, f->name);
        goto fail;
    }
    m->Ip = (m->I + kmul - 1) / kmul * kmul;
    m->N13 = gated ? 2 * m->Ip : m->Ip;

    /* Input scales over all E experts (default: the max; NUMERICS §6.2, §6.3). */
    in_scales amax = {{0, 0}, 0, f->in_scale};
    float *per = NULL;
    if (f->in_scale) {
        per = calloc((size_t)m->E * 3, sizeof(float));
        if (!per) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
        for (int64_t g = 0; g < m->E && st == MOQ_OK; g++) {
            bool present = true;
            if (m->stacked) { /* <proj>_input_scale: one for all experts, or one each */
                st = stacked_scalar(m, ck, "gate_up_proj", "_input_scale", g, per + 3 * g, err);
                if (st == MOQ_OK) st = stacked_scalar(m, ck, "down_proj", "_input_scale", g, per + 3 * g + 2, err);
                per[3 * g + 1] = per[3 * g];
            } else
                st = read_in_scales(ck, prefix, g, gated, m->local_of[g] >= 0, per + 3 * g, &present, err);
            if (st == MOQ_OK && present) {
                const float a13 = fmaxf(per[3 * g], per[3 * g + 1]);
                amax.a13[0] = amax.a13[1] = fmaxf(amax.a13[0], a13);
                amax.a2 = fmaxf(amax.a2, per[3 * g + 2]);
            }
        }
        if (st != MOQ_OK) { free(per); goto fail; }
    }
    m->ex = calloc((size_t)(m->n_local ? m->n_local : 1), sizeof *m->ex);
    if (!m->ex) { free(per); st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
    int n_diff = 0;
    float diff_ex[2] = {0, 0};
    int64_t diff_g = -1;
    moq_dtype dt = MOQ_DT_COUNT;
    for (int64_t g = 0; g < m->E && st == MOQ_OK; g++) {
        const int32_t l = m->local_of[g];
        if (l < 0) continue;
        in_scales a = amax;
        if (per && o.input_scale == MOQ_MOE_INPUT_SCALE_PER_EXPERT) { /* per: read when the format has input scales */
            a.a13[0] = a.a13[1] = fmaxf(per[3 * g], per[3 * g + 1]);
            a.a2 = per[3 * g + 2];
        }
        snprintf(eb, sizeof eb, "%s.experts.%lld", prefix, (long long)g);
        const int before = n_diff;
        st = load_expert(m, ck, eb, &m->ex[l], &a, &o, &n_diff, diff_ex, &dt, err);
        if (n_diff == 1 && before == 0) diff_g = g;
    }
    free(per);
    if (st != MOQ_OK) goto fail;
    if (n_diff && m->n_warn < MOE_MAX_WARN) {
        /* Said once per layer, naming it (STYLE.md §13: no silent merges). */
        const char *how = f->scale == SC_TENSOR
            ? (o.compat == MOQ_MOE_COMPAT_EXACT ? "each half keeps its own scale" : "requantized both halves to the max (compat profile)")
            : (o.compat == MOQ_MOE_COMPAT_VLLM ? "vLLM profile: the gate's weight_scale_2 is used for both halves (up half mis-scaled)"
                                               : "gate and up use separate alphas");
        snprintf(m->warn[m->n_warn++], sizeof m->warn[0], "%.150s.experts.%lld: w1/w3 %s differ (%g vs %g; %d experts in this layer); %s",
                 prefix, (long long)diff_g, f->ws2 ? "weight_scale_2" : "weight_scale", (double)diff_ex[0], (double)diff_ex[1], n_diff, how);
    }
    if (o.shared_expert) {
        snprintf(eb, sizeof eb, "%s.%s", prefix, o.shared_expert);
        in_scales a = {{1, 1}, 1, f->in_scale};
        if (f->in_scale) {
            bool present = false;
            float v[3];
            const int lay = find_layout(ck, eb, gated);
            present = lay >= 0;
            for (int i = 0; present && i < 3 && st == MOQ_OK; i++) {
                if (i == 1 && !gated) { v[1] = v[0]; continue; }
                snprintf(nm, sizeof nm, "%s.%s.input_scale", eb, proj_name(lay, i == 0 ? (gated ? 0 : 1) : i, gated));
                st = read_scalar(ck, nm, "static activation scale", &v[i], err);
            }
            if (st != MOQ_OK) goto fail;
            if (present) a.a13[0] = a.a13[1] = fmaxf(v[0], v[1]), a.a2 = v[2];
        }
        int nd = 0;
        float dx[2];
        m->has_shared = true;
        st = load_expert(m, ck, eb, &m->shared, &a, &o, &nd, dx, &dt, err);
        if (st != MOQ_OK) goto fail;
    }
    if (o.router) {
        snprintf(nm, sizeof nm, "%s.%s.weight", prefix, o.router);
        const moq_tensor *t = moq_checkpoint_tensor(ck, nm);
        if (t) {
            const moq_elem e = elem_of_dtype(t->dtype);
            if (e == MOQ_ELEM_NONE) { st = MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, nm, "dtype %s, expected F32, BF16 or F16 (routers stay unquantized)", moq_dtype_name(t->dtype)); goto fail; }
            if ((st = want_shape(t, 2, (int64_t[]){m->E, m->H}, "router [E, H]", err)) != MOQ_OK) goto fail;
            m->router_q = malloc(t->nbytes);
            if (!m->router_q) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "out of memory"); goto fail; }
            memcpy(m->router_q, t->data, t->nbytes);
            moq_weight rw;
            weight_init(&rw, pair_of_elem(e), m->E, m->H, m->router_q, NULL);
            snprintf(nm, sizeof nm, "%s.%s.bias", prefix, o.router);
            const moq_tensor *rb = o.routing.use_correction_bias ? NULL : moq_checkpoint_tensor(ck, nm); /* else it is the selection bias */
            if (rb) { /* gpt-oss: logits = W x + b */
                m->router_b = malloc((size_t)m->E * sizeof(float));
                if (!m->router_b) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "out of memory"); goto fail; }
                if ((st = want_shape(rb, 1, (int64_t[]){m->E}, "router bias [E]", err)) != MOQ_OK) goto fail;
                if ((st = bias_row(rb, 0, m->E, m->router_b, err)) != MOQ_OK) goto fail;
                rw.bias = m->router_b;
            }
            snprintf(nm, sizeof nm, "%s.%s.weight", prefix, o.router);
            moq_linear_opts lo = moq_linear_opts_default();
            lo.n_threads = m->n_threads, lo.cpu_mask = o.cpu_mask, lo.name = nm;
            if ((st = moq_linear_create_from_weight(&m->router, &rw, &lo, err)) != MOQ_OK) goto fail;
            m->router_w = rw; /* canonical kept: the GPU layer reads it (small: E x H) */
        }
        if (o.routing.use_correction_bias && !o.routing.correction_bias) {
            snprintf(nm, sizeof nm, "%s.%s.e_score_correction_bias", prefix, o.router);
            if (!moq_checkpoint_tensor(ck, nm)) snprintf(nm, sizeof nm, "%s.%s.bias", prefix, o.router); /* DeepSeek-V4's name */
            if (!moq_checkpoint_tensor(ck, nm)) { /* MiniMax-M2: beside the router, <block>.e_score_correction_bias */
                snprintf(nm, sizeof nm, "%s.e_score_correction_bias", prefix);
                if (!moq_checkpoint_tensor(ck, nm)) snprintf(nm, sizeof nm, "%s.%s.e_score_correction_bias", prefix, o.router);
            }
            const moq_tensor *b;
            if ((st = get_tensor(ck, nm, "router selection bias (DeepSeek-V3, MiniMax-M2)", &b, err)) != MOQ_OK) goto fail;
            if ((st = want_dtype(b, MOQ_DT_F32, MOQ_DT_BF16, "selection bias", err)) != MOQ_OK) goto fail;
            if ((st = want_shape(b, 1, (int64_t[]){m->E}, "selection bias [E]", err)) != MOQ_OK) goto fail;
            m->bias = malloc((size_t)m->E * sizeof(float));
            if (!m->bias) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, nm, "out of memory"); goto fail; }
            for (int64_t e = 0; e < m->E; e++) {
                if (b->dtype == MOQ_DT_F32) memcpy(&m->bias[e], (const uint8_t *)b->data + 4 * e, 4);
                else { uint16_t h; memcpy(&h, (const uint8_t *)b->data + 2 * e, 2); m->bias[e] = moq_bf16_decode(h); }
            }
        }
    }
    if (o.routing.use_correction_bias && !o.routing.correction_bias && !m->bias) {
        st = MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "use_correction_bias needs routing.correction_bias or a router name");
        goto fail;
    }
    if (m->bias) m->routing.correction_bias = m->bias;
    else if (!o.routing.use_correction_bias) m->routing.correction_bias = o.routing.correction_bias;
    if (m->routing.correction_bias && !m->bias) { /* copy the caller's: it is borrowed only during create */
        m->bias = malloc((size_t)m->E * sizeof(float));
        if (!m->bias) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
        memcpy(m->bias, m->routing.correction_bias, (size_t)m->E * sizeof(float));
        m->routing.correction_bias = m->bias;
    }
    if (o.routing.expert_scale) { /* borrowed only during create */
        m->escale = malloc((size_t)m->E * sizeof(float));
        if (!m->escale) { st = MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory"); goto fail; }
        memcpy(m->escale, o.routing.expert_scale, (size_t)m->E * sizeof(float));
        m->routing.expert_scale = m->escale;
    }
    *out = m;
    return MOQ_OK;
fail:
    moq_moe_free(m);
    return st;
}

/* ---- run ----------------------------------------------------------------------------------- */
static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct moe_ws {
    float   *logits;   /* f32 [T, E]           */
    void    *rws;      /* router linear ws      */
    size_t   rws_size;
    float   *rscr;     /* f32 [nt, scratch]     */
    int32_t *ids;      /* i32 [A]               */
    float   *wts;      /* f32 [A]               */
    int32_t *pos;      /* i32 [A] -> row in o or -1 */
    int64_t *off;      /* i64 [L + 1]           */
    int64_t *fill;     /* i64 [L]               */
    int32_t *tok;      /* i32 [A] token of row  */
    float   *rw;       /* f32 [A] weight of row */
    void    *xg;       /* [A, H] gathered x     */
    float   *o;        /* f32 [A, H]            */
    float   *so;       /* f32 [T, H] shared out */
    uint8_t *thr;      /* nt slots              */
    size_t   slot, lin_ws;
} moe_ws;

static size_t lin_ws_max(const moq_moe *m, int64_t M) {
    size_t w = 0;
    for (int64_t i = 0; i < m->n_local; i++) {
        const size_t a = moq_linear_workspace_size(m->ex[i].l13, M), b = moq_linear_workspace_size(m->ex[i].l2, M);
        w = a > w ? a : w, w = b > w ? b : w;
    }
    if (m->has_shared) {
        const size_t a = moq_linear_workspace_size(m->shared.l13, M), b = moq_linear_workspace_size(m->shared.l2, M);
        w = a > w ? a : w, w = b > w ? b : w;
    }
    return al64(w);
}

/* Lays the workspace out (base NULL: just sizes). Returns bytes. */
static size_t ws_layout(const moq_moe *m, int64_t T, uint8_t *base, moe_ws *w) {
    const size_t A = (size_t)T * (size_t)m->routing.top_k, H = (size_t)m->H, nt = (size_t)m->n_threads, L = (size_t)m->n_local;
    size_t o = 0;
#define TAKE(ptr, type, bytes) (w->ptr = (type)(void *)(base ? base + o : NULL), o += al64(bytes))
    TAKE(logits, float *, (size_t)T * (size_t)m->E * 4);
    w->rws_size = m->router ? moq_linear_workspace_size(m->router, T) : 0;
    TAKE(rws, void *, w->rws_size);
    TAKE(rscr, float *, nt * moq_moe_route_scratch(m->E) * 4);
    TAKE(ids, int32_t *, A * 4);
    TAKE(wts, float *, A * 4);
    TAKE(pos, int32_t *, A * 4);
    TAKE(off, int64_t *, (L + 1) * 8);
    TAKE(fill, int64_t *, (L + 1) * 8);
    TAKE(tok, int32_t *, A * 4);
    TAKE(rw, float *, A * 4);
    TAKE(xg, void *, A * H * 4);
    TAKE(o, float *, A * H * 4);
    TAKE(so, float *, m->has_shared ? (size_t)T * H * 4 : 0);
    w->lin_ws = lin_ws_max(m, T);
    w->slot = al64((size_t)T * (size_t)m->N13 * 4) + al64((size_t)T * (size_t)m->Ip * 4) + al64((size_t)T * (size_t)m->Ip * 2) + w->lin_ws;
    TAKE(thr, uint8_t *, nt * w->slot);
#undef TAKE
    return o + 64;
}

size_t moq_moe_workspace_size(const moq_moe *m, int64_t T) {
    if (!m || T < 1) return 0;
    moe_ws w;
    return ws_layout(m, T, NULL, &w);
}

/* One expert over its c gathered rows: h = w13·x, a = act(h), out = w2·a. slot: this thread's. */
void moq_moe_set_observer(moq_moe *m, moq_moe_observer fn, void *user, int64_t tag) {
    if (!m) return;
    m->obs = fn, m->obs_user = user, m->obs_tag = tag;
}

/* The observer, one call at a time (experts run on several threads). */
static void observe(const moq_moe *m, int64_t g, int which, const float *x, int64_t rows, int64_t cols) {
#pragma omp critical /* unnamed: a named one exports a .gomp_critical_user_ symbol */
    m->obs(m->obs_user, m->obs_tag, g, which, x, rows, cols);
}

/* g: the expert's global id for the observer (-1: the shared expert, not observed). */
static moq_status run_expert(const moq_moe *m, const moe_expert *ex, int64_t g, const void *x, moq_elem xe, int64_t c, float *out,
                             uint8_t *slot, size_t lin_ws, moq_error *err) {
    float *h = (float *)(void *)slot;
    float *a = (float *)(void *)(slot + al64((size_t)c * (size_t)m->N13 * 4));
    uint16_t *ab = (uint16_t *)(void *)((uint8_t *)a + al64((size_t)c * (size_t)m->Ip * 4));
    void *lws = (uint8_t *)ab + al64((size_t)c * (size_t)m->Ip * 2);
    const bool obs = m->obs && g >= 0 && xe == MOQ_ELEM_F32;
    if (obs) observe(m, g, 0, x, c, m->H);
    MOQ_TRY(moq_linear_run(ex->l13, x, xe, c, h, MOQ_ELEM_F32, lws, lin_ws, err));
    const int64_t Ip = m->Ip;
    for (int64_t r = 0; r < c; r++) moq_moe_act_ref(m->act, &m->ap, h + r * m->N13, Ip, a + r * Ip);
    if (obs) observe(m, g, 1, a, c, Ip);
    if (xe == MOQ_ELEM_BF16) /* the engines hand the second GEMM activations in the model dtype */
        for (int64_t i = 0; i < c * Ip; i++) ab[i] = moq_bf16_encode_rne(a[i]);
    const void *a_in = xe == MOQ_ELEM_BF16 ? (const void *)ab : (const void *)a;
    return moq_linear_run(ex->l2, a_in, xe, c, out, MOQ_ELEM_F32, lws, lin_ws, err);
}

static moq_status moe_run(const moq_moe *m, const void *x, moq_elem x_elem, int64_t T, const float *router_logits, const int32_t *fixed,
                          void *y, moq_elem y_elem, void *ws, size_t ws_size, moq_error *err) {
    if (!m || !x || !y || T < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m ? m->name : "", "m, x, y must not be NULL and T >= 1 (T=%lld)", (long long)T);
    if ((x_elem != MOQ_ELEM_F32 && x_elem != MOQ_ELEM_BF16) || (y_elem != MOQ_ELEM_F32 && y_elem != MOQ_ELEM_BF16))
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m->name, "x %s, y %s, expected f32 or bf16 for each", moq_elem_name(x_elem), moq_elem_name(y_elem));
    if (!router_logits && !m->router)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m->name, "no router logits given and the layer has no router weight");
    const size_t need = moq_moe_workspace_size(m, T);
    if (!ws || ws_size < need) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m->name, "workspace %zu bytes, expected >= %zu for T=%lld", ws_size, need, (long long)T);
    moe_ws w;
    ws_layout(m, T, (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), &w);
    const int64_t E = m->E, H = m->H, k = m->routing.top_k, A = T * k, L = m->n_local;
    const int nt = m->n_threads;

    const float *logits = router_logits;
    if (!logits) {
        MOQ_TRY(moq_linear_run(m->router, x, x_elem, T, w.logits, MOQ_ELEM_F32, w.rws, w.rws_size, err));
        logits = w.logits;
    }
    /* Small steps stay on one thread: at decode a parallel region costs more than the work. */
    const bool par_tok = T * E >= 4096, par_rows = T * k * H >= 65536;
#pragma omp parallel for num_threads(nt) schedule(static) if (par_tok)
    for (int64_t t = 0; t < T; t++) {
        float *scr = w.rscr + (size_t)omp_get_thread_num() * moq_moe_route_scratch(E);
        if (fixed) moq_moe_route_fixed(&m->routing, E, logits + t * E, fixed + t * k, w.ids + t * k, w.wts + t * k, scr);
        else moq_moe_route_ref(&m->routing, E, logits + t * E, w.ids + t * k, w.wts + t * k, scr);
    }

    /* Counting sort by local expert: rows of one expert contiguous, tokens ascending. */
    memset(w.off, 0, (size_t)(L + 1) * 8);
    for (int64_t a = 0; a < A; a++) {
        const int32_t l = m->local_of[w.ids[a]];
        if (l >= 0) w.off[l + 1]++;
    }
    for (int64_t l = 0; l < L; l++) w.off[l + 1] += w.off[l], w.fill[l] = w.off[l];
    for (int64_t a = 0; a < A; a++) {
        const int32_t l = m->local_of[w.ids[a]];
        w.pos[a] = -1;
        if (l < 0) continue;
        const int64_t r = w.fill[l]++;
        w.pos[a] = (int32_t)r;
        w.tok[r] = (int32_t)(a / k);
        w.rw[r] = w.wts[a];
    }
    const int64_t rows = w.off[L];
    const bool on_in = m->routing.weight_on_input;
    const moq_elem ge = on_in ? MOQ_ELEM_F32 : x_elem; /* Llama-4 scales x in f32 */
#pragma omp parallel for num_threads(nt) schedule(static) if (par_rows)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t t = w.tok[r];
        if (ge == MOQ_ELEM_BF16) {
            memcpy((uint16_t *)w.xg + r * H, (const uint16_t *)x + t * H, (size_t)H * 2);
        } else {
            float *d = (float *)w.xg + r * H;
            moq_x_row_f32(x, x_elem, H, t, d);
            if (on_in) for (int64_t i = 0; i < H; i++) d[i] *= w.rw[r];
        }
    }

    /* Experts: in parallel when enough are active, else each GEMM split by rows. */
    int64_t nact = 0;
    for (int64_t l = 0; l < L; l++) nact += w.off[l + 1] > w.off[l];
    const bool by_expert = nt > 1 && nact >= nt;
    moq_status st = MOQ_OK;
    moq_error first = {0};
    const size_t eb = ge == MOQ_ELEM_BF16 ? 2 : 4;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (by_expert)
    for (int64_t l = 0; l < L; l++) {
        const int64_t c = w.off[l + 1] - w.off[l];
        if (c == 0) continue;
        moq_error e = {0};
        const moq_status s = run_expert(m, &m->ex[l], m->global_of ? m->global_of[l] : -1, (const uint8_t *)w.xg + (size_t)w.off[l] * (size_t)H * eb, ge, c, w.o + w.off[l] * H,
                                        w.thr + (size_t)omp_get_thread_num() * w.slot, w.lin_ws, &e);
        if (s != MOQ_OK) {
#pragma omp critical
            if (st == MOQ_OK) st = s, first = e;
        }
    }
    if (st != MOQ_OK) { if (err) *err = first; return st; }
    if (m->has_shared) MOQ_TRY(run_expert(m, &m->shared, -1, x, x_elem, T, w.so, w.thr, w.lin_ws, err));

    /* Combine in slot order. */
#pragma omp parallel for num_threads(nt) schedule(static) if (par_rows)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < H; i++) {
            float v = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                const int32_t r = w.pos[t * k + j];
                if (r >= 0) v += (on_in ? 1.0f : w.wts[t * k + j]) * w.o[(int64_t)r * H + i];
            }
            if (m->has_shared) v += w.so[t * H + i];
            moq_y_store(y, y_elem, H, t, i, v);
        }
    }
    return MOQ_OK;
}

int64_t     moq_moe_inter_padded(const moq_moe *m) { return m ? m->Ip : 0; }
int64_t     moq_moe_local_experts(const moq_moe *m) { return m ? m->n_local : 0; }
const char *moq_moe_kernel_name(const moq_moe *m, int which) {
    if (!m) return "";
    const moe_expert *ex = m->n_local ? &m->ex[0] : m->has_shared ? &m->shared : NULL;
    return ex ? moq_linear_kernel_name(which ? ex->l2 : ex->l13) : "";
}
int         moq_moe_warning_count(const moq_moe *m) { return m ? m->n_warn : 0; }
const char *moq_moe_warning(const moq_moe *m, int i) { return m && i >= 0 && i < m->n_warn ? m->warn[i] : NULL; }

/* ---- synthetic experts (bench) ------------------------------------------------------------- */
moq_status moq_moe_run(const moq_moe *m, const void *x, moq_elem x_elem, int64_t T, const float *router_logits, void *y, moq_elem y_elem,
                       void *ws, size_t ws_size, moq_error *err) {
    return moe_run(m, x, x_elem, T, router_logits, NULL, y, y_elem, ws, ws_size, err);
}

moq_status moq_moe_run_fixed(const moq_moe *m, const void *x, moq_elem x_elem, int64_t T, const int32_t *ids, void *y, moq_elem y_elem,
                             void *ws, size_t ws_size, moq_error *err) {
    if (!m || !ids) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m ? m->name : "moq_moe_run_fixed", "m and ids must not be NULL");
    for (int64_t a = 0; a < T * m->routing.top_k; a++)
        if (ids[a] < 0 || ids[a] >= m->E)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, m->name, "fixed expert id %d at token %lld, expected 0..%lld", ids[a],
                            (long long)(a / m->routing.top_k), (long long)m->E - 1);
    return moe_run(m, x, x_elem, T, NULL, ids, y, y_elem, ws, ws_size, err);
}

static uint64_t synth_next(uint64_t *s) { *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17; return *s; }

/* Bytes of one projection [N, K]: weight, block scales (SC_GROUP / SC_BLK128); scalars apart. */
static uint64_t synth_proj_bytes(const moe_fmt *f, int64_t N, int64_t K, uint64_t *wb, uint64_t *sb) {
    const int bits = f->wdt == MOQ_DT_COUNT ? 16 : moq_dtype_bits(f->wdt);
    *wb = (uint64_t)(N * cdiv(K, f->per_byte)) * (uint64_t)bits / 8;
    *sb = f->scale == SC_GROUP ? (uint64_t)(N * cdiv(K, f->group)) : f->scale == SC_BLK128 ? (uint64_t)(cdiv(N, 128) * cdiv(K, 128)) * 4
        : f->scale == SC_ROW ? (uint64_t)N * 4 : 0;
    return *wb + *sb + (f->scale == SC_TENSOR ? 4u : 0u) + (f->ws2 ? 4u : 0u) + (f->in_scale ? 4u : 0u);
}

uint64_t moq_moe_expert_bytes(moq_moe_format fmt, int64_t H, int64_t I) {
    if ((unsigned)fmt >= MOQ_MOE_FMT_COUNT) return 0;
    uint64_t wb, sb;
    return 2 * synth_proj_bytes(&moe_fmts[fmt], I, H, &wb, &sb) + synth_proj_bytes(&moe_fmts[fmt], H, I, &wb, &sb);
}

moq_status moq_moe_synth(moq_writer *w, const char *prefix, moq_moe_format fmt, int64_t E, int64_t H, int64_t I, uint64_t seed, void **keep,
                         moq_error *err) {
    *keep = NULL;
    if ((unsigned)fmt >= MOQ_MOE_FMT_COUNT || E < 1 || H < 1 || I < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, prefix, "synthetic MoE format %d, E=%lld, H=%lld, I=%lld; expected a format < %d and E, H, I >= 1",
                        (int)fmt, (long long)E, (long long)H, (long long)I, (int)MOQ_MOE_FMT_COUNT);
    const moe_fmt *f = &moe_fmts[fmt];
    const uint64_t per = moq_moe_expert_bytes(fmt, H, I);
    uint8_t *blk = malloc((size_t)(per * (uint64_t)E) + 64);
    if (!blk) return MOQ_FAIL(err, MOQ_ERR_NOMEM, prefix, "out of memory for %llu bytes of synthetic experts", (unsigned long long)(per * (uint64_t)E));
    *keep = blk;
    uint64_t s = seed | 1, off = 0;
    char nm[320];
    const moq_dtype wdt = f->wdt == MOQ_DT_COUNT ? MOQ_DT_BF16 : f->wdt;
    for (int64_t e = 0; e < E; e++)
        for (int j = 0; j < 3; j++) {
            const int64_t N = j == 2 ? H : I, K = j == 2 ? I : H;
            uint64_t wb, sb;
            synth_proj_bytes(f, N, K, &wb, &sb);
            uint8_t *q = blk + off;
            for (uint64_t i = 0; i < wb; i += 8) { const uint64_t r = synth_next(&s); memcpy(q + i, &r, wb - i < 8 ? wb - i : 8); }
            if (wdt == MOQ_DT_F8_E4M3)
                for (uint64_t i = 0; i < wb; i++) if ((q[i] & 0x7F) == 0x7F) q[i] = 0x38;
            if (wdt == MOQ_DT_BF16) /* |w| in [2^-8, 2^-1): a plausible weight range */
                for (uint64_t i = 0; i < wb; i += 2) { const uint16_t h = (uint16_t)(0x3B80 + (q[i] | (q[i + 1] & 0x3) << 8) + ((q[i + 1] & 0x80) << 8)); memcpy(q + i, &h, 2); }
            snprintf(nm, sizeof nm, "%s.experts.%lld.%s.weight", prefix, (long long)e, moe_layouts[0][j]);
            MOQ_TRY(moq_writer_add(w, nm, wdt, 2, (int64_t[]){N, cdiv(K, f->per_byte)}, q, wb, err));
            off += wb;
            uint8_t *sc = blk + off;
            snprintf(nm, sizeof nm, "%s.experts.%lld.%s.weight_scale", prefix, (long long)e, moe_layouts[0][j]);
            if (f->scale == SC_GROUP) {
                for (uint64_t i = 0; i < sb; i++) sc[i] = f->sdt == MOQ_DT_F8_E8M0 ? (uint8_t)(120 + synth_next(&s) % 8) : (uint8_t)(0x30 + synth_next(&s) % 0x40);
                MOQ_TRY(moq_writer_add(w, nm, f->sdt, 2, (int64_t[]){N, cdiv(K, f->group)}, sc, sb, err));
            } else if (f->scale == SC_BLK128) {
                for (uint64_t i = 0; i < sb / 4; i++) { const float v = 1e-3f + 1e-5f * (float)(synth_next(&s) % 900); memcpy(sc + 4 * i, &v, 4); }
                MOQ_TRY(moq_writer_add(w, nm, MOQ_DT_F32, 4, (int64_t[]){cdiv(N, 128), 1, cdiv(K, 128), 1}, sc, sb, err));
            } else if (f->scale == SC_ROW) {
                for (uint64_t i = 0; i < sb / 4; i++) { const float v = 1e-3f + 1e-5f * (float)(synth_next(&s) % 900); memcpy(sc + 4 * i, &v, 4); }
                MOQ_TRY(moq_writer_add(w, nm, MOQ_DT_F32, 1, (int64_t[]){N}, sc, sb, err));
            }
            off += sb;
            static const float scal[3] = {2e-3f, 1e-3f, 3e-3f}; /* weight_scale, weight_scale_2, input_scale */
            static const char *const suf[3] = {"weight_scale", "weight_scale_2", "input_scale"};
            const bool has[3] = {f->scale == SC_TENSOR, f->ws2, f->in_scale};
            for (int i = 0; i < 3; i++) {
                if (!has[i]) continue;
                memcpy(blk + off, &scal[i], 4);
                snprintf(nm, sizeof nm, "%s.experts.%lld.%s.%s", prefix, (long long)e, moe_layouts[0][j], suf[i]);
                MOQ_TRY(moq_writer_add(w, nm, MOQ_DT_F32, 0, NULL, blk + off, 4, err));
                off += 4;
            }
        }
    return MOQ_OK;
}

void moq_moe_get_view(const moq_moe *m, moq_moe_view *v) {
    *v = (moq_moe_view){.name = m->name, .E = m->E, .H = m->H, .I = m->I, .Ip = m->Ip, .N13 = m->N13, .n_local = m->n_local, .local_of = m->local_of,
                        .routing = &m->routing, .act = m->act, .act_limit = m->ap.limit, .act_alpha = m->ap.alpha, .act_beta = m->ap.beta,
                        .has_shared = m->has_shared, .rcpa = m->rcpa, .pre_scale = m->fmt->pqs, .router = m->router ? &m->router_w : NULL};
}

const moq_weight *moq_moe_expert_weight(const moq_moe *m, int64_t l, int which) {
    if (!m || l < 0 || l >= m->n_local) return NULL;
    return which ? &m->ex[l].w2 : &m->ex[l].w13;
}

const moq_linear *moq_moe_expert_linear(const moq_moe *m, int64_t l, int which) {
    if (!m || l < 0 || l >= m->n_local) return NULL;
    return which ? m->ex[l].l2 : m->ex[l].l13;
}

moq_status moq_moe_format_from_method(const char *method, moq_moe_format *out, moq_error *err) {
    for (int f = 0; method && f < MOQ_MOE_FMT_COUNT; f++)
        if (strcmp(method, moe_fmts[f].method) == 0 || (f == MOQ_MOE_FMT_UNQUANTIZED && strcmp(method, "unquantized_linear") == 0)) {
            *out = (moq_moe_format)f;
            return MOQ_OK;
        }
    char list[256] = "";
    for (int f = 0; f < MOQ_MOE_FMT_COUNT; f++) /* the accepted names come from the format table */
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", f ? ", " : "", moe_fmts[f].method);
    return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, "moq_moe_format_from_method", "method \"%s\" is not an expert method (%s)",
                    method ? method : "(null)", list);
}
