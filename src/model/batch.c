/* batch.c — batched decode over a paged KV pool (moq.h "batched decode"; the contract is in
 * docs/ARCHITECTURE.md "Batched decode").
 *
 *   pool    a moq_kv_cache whose "positions" are slots: n_pages * page_tokens of them,
 *           [attention layers, slots, KV heads * D] for K and V, the model's encoding and scales
 *   page    page_tokens consecutive slots; page id g holds slots g*P .. g*P + P-1
 *   seq     pos (tokens cached) and a block table tab[ctx / P] of page ids: position p of the
 *           sequence lives in slot tab[p / P] * P + p % P
 *   free    a stack of page ids not held by any sequence
 *
 * A run flattens its items into rows (item order, then token order), fills the row plan (token,
 * position, block table) and calls moq_model_forward_rows per chunk of the model's 32-row
 * workspace, so every linear runs once over all rows of a chunk. On a model opened on the GPU the
 * pool is in GPU memory (moq_gpu_kv, model_gpu.c: bf16 or e4m3 pages) and a chunk is up to 256
 * rows through moq_gpu_forward_rows, whose decode steps replay CUDA graphs; the page accounting
 * here is the same. Nothing here allocates after create except moq_seq_create (the handle and its
 * table).
 * Tested by tests/model/test_batch.c.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rowscan.h"
#include "model/model.h"
#include "model/model_priv.h"

struct moq_batch {
    moq_model   *m;
    moq_kv_cache pool;         /* the CPU's pool; unused (empty) on the GPU */
    moq_gpu_kv  *gkv;          /* the GPU's pool, or NULL                   */
    uint64_t     page_bytes;
    int64_t      P, n_pages, n_free, n_seqs, max_pages_seq, chunk, V;
    int32_t     *free_pages;   /* [n_pages], the first n_free are free */
    /* row plan scratch for one chunk */
    int32_t        *tok;       /* [chunk] */
    int64_t        *pos;       /* [chunk] */
    const int32_t **tabs;      /* [chunk] */
    int64_t        *lrows;     /* [chunk] */
    float         **ldst;      /* [chunk] where each logits row goes (or NULL) */
    int32_t       **lids;      /* [chunk] where each row's argmax goes (or NULL) */
    int64_t        *need;      /* [max_rows] pages each item must take */
    int64_t         max_items;
};

struct moq_seq {
    moq_batch *b;
    int64_t    pos, n_pages;
    int32_t   *tab;            /* [max_pages_seq] */
};

moq_batch_opts moq_batch_opts_default(void) {
    moq_batch_opts o;
    memset(&o, 0, sizeof o);
    o.page_tokens = 16;
    o.max_rows = 64;
    return o;
}

void moq_batch_free(moq_batch *b) {
    if (!b) return;
    moq_gpu_kv_free(b->m, b->gkv);
    moq_kv_cache_free(&b->pool);
    free(b->free_pages);
    free(b->tok);
    free(b->pos);
    free(b->tabs);
    free(b->lrows);
    free(b->ldst);
    free(b->lids);
    free(b->need);
    free(b);
}

moq_status moq_batch_create(moq_batch **out, moq_model *m, const moq_batch_opts *opts, moq_error *err) {
    if (!out || !m) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_create", "out and model must not be NULL");
    *out = NULL;
    const moq_batch_opts o = opts ? *opts : moq_batch_opts_default();
    if (!moq_model_batchable(m))
        return MOQ_FAIL(err, MOQ_ERR_UNSUPPORTED, moq_model_path(m),
                        "%s: batched decode takes GQA models (not multi-head latent attention, recurrent DeltaNet layers, DeepSeek-V4's "
                        "compressed attention, or a model opened with --tp)",
                        moq_model_architecture(m));
    if (o.page_tokens < 1 || o.page_tokens > 4096)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_opts.page_tokens", "%lld, expected 1..4096", (long long)o.page_tokens);
    if (o.max_rows < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_opts.max_rows", "%lld, expected >= 1", (long long)o.max_rows);
    const moq_kv_cache *kv = moq_model_kv(m);
    const int64_t P = o.page_tokens, T = moq_model_ctx(m), per_seq = (T + P - 1) / P;
    const bool gpu = m->gpu != NULL;
    const uint64_t eb = gpu ? (uint64_t)moq_gpu_kv_elem_bytes(m) : (uint64_t)kv->elem_bytes;
    const uint64_t page_bytes = 2ull * (uint64_t)kv->n_layers * (uint64_t)P * (uint64_t)kv->row * eb;
    const uint64_t budget = o.kv_bytes ? o.kv_bytes : 4ull * (uint64_t)per_seq * page_bytes;
    const int64_t n_pages = (int64_t)(budget / page_bytes);
    if (n_pages < per_seq)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "kv_bytes",
                        "%llu bytes hold %lld pages of %lld positions; one sequence of the full context (%lld positions) needs %lld pages = %llu bytes",
                        (unsigned long long)budget, (long long)n_pages, (long long)P, (long long)T, (long long)per_seq,
                        (unsigned long long)((uint64_t)per_seq * page_bytes));
    moq_batch *b = calloc(1, sizeof *b);
    if (!b) return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_batch_create", "out of memory");
    b->m = m, b->P = P, b->n_pages = n_pages, b->n_free = n_pages, b->max_pages_seq = per_seq, b->page_bytes = page_bytes;
    b->chunk = gpu ? moq_gpu_batch_chunk(m) : moq_model_chunk(m), b->V = moq_model_vocab_size(m), b->max_items = o.max_rows;
    moq_status st = gpu ? moq_gpu_kv_create(m, n_pages, P, &b->gkv, err) : moq_kv_cache_create(&b->pool, kv->elem, kv->n_layers, n_pages * P, kv->row, err);
    if (st != MOQ_OK) {
        moq_batch_free(b);
        return st;
    }
    if (!gpu) {
        memcpy(b->pool.k_scale, kv->k_scale, (size_t)kv->n_layers * sizeof(float));
        memcpy(b->pool.v_scale, kv->v_scale, (size_t)kv->n_layers * sizeof(float));
    }
    b->free_pages = malloc((size_t)n_pages * sizeof *b->free_pages);
    b->tok = malloc((size_t)b->chunk * sizeof *b->tok);
    b->pos = malloc((size_t)b->chunk * sizeof *b->pos);
    b->tabs = malloc((size_t)b->chunk * sizeof *b->tabs);
    b->lrows = malloc((size_t)b->chunk * sizeof *b->lrows);
    b->ldst = malloc((size_t)b->chunk * sizeof *b->ldst);
    b->lids = malloc((size_t)b->chunk * sizeof *b->lids);
    b->need = malloc((size_t)o.max_rows * sizeof *b->need);
    if (!b->free_pages || !b->tok || !b->pos || !b->tabs || !b->lrows || !b->ldst || !b->lids || !b->need) {
        moq_batch_free(b);
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_batch_create", "out of memory for %lld page ids", (long long)n_pages);
    }
    for (int64_t g = 0; g < n_pages; g++) b->free_pages[g] = (int32_t)(n_pages - 1 - g); /* page 0 taken first */
    *out = b;
    return MOQ_OK;
}

int64_t moq_batch_page_tokens(const moq_batch *b) { return b ? b->P : 0; }
int64_t moq_batch_pages_total(const moq_batch *b) { return b ? b->n_pages : 0; }
int64_t moq_batch_pages_free(const moq_batch *b) { return b ? b->n_free : 0; }
int64_t moq_batch_seq_count(const moq_batch *b) { return b ? b->n_seqs : 0; }
int64_t moq_batch_rows_per_forward(const moq_batch *b) { return b ? b->chunk : 0; }
uint64_t moq_batch_page_bytes(const moq_batch *b) { return b ? b->page_bytes : 0; }
int64_t moq_batch_pages_for(const moq_batch *b, int64_t positions) { return b && positions > 0 ? (positions + b->P - 1) / b->P : 0; }

moq_status moq_seq_create(moq_seq **out, moq_batch *b, moq_error *err) {
    if (!out || !b) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_seq_create", "out and batch must not be NULL");
    moq_seq *s = calloc(1, sizeof *s);
    int32_t *tab = malloc((size_t)b->max_pages_seq * sizeof *tab);
    if (!s || !tab) {
        free(s);
        free(tab);
        *out = NULL;
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "moq_seq_create", "out of memory");
    }
    s->b = b, s->tab = tab;
    b->n_seqs++;
    *out = s;
    return MOQ_OK;
}

void moq_seq_free(moq_seq *s) {
    if (!s) return;
    moq_batch *b = s->b;
    for (int64_t i = s->n_pages - 1; i >= 0; i--) b->free_pages[b->n_free++] = s->tab[i];
    b->n_seqs--;
    free(s->tab);
    free(s);
}

int64_t moq_seq_pos(const moq_seq *s) { return s ? s->pos : 0; }
int64_t moq_seq_pages(const moq_seq *s) { return s ? s->n_pages : 0; }

static void take_pages(moq_seq *s, int64_t want) {
    moq_batch *b = s->b;
    while (s->n_pages < want) s->tab[s->n_pages++] = b->free_pages[--b->n_free];
}

moq_status moq_seq_reserve(moq_seq *s, int64_t positions, moq_error *err) {
    if (!s) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_seq_reserve", "sequence must not be NULL");
    moq_batch *b = s->b;
    const int64_t T = moq_model_ctx(b->m);
    if (positions < 0 || positions > T)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_model_path(b->m), "%lld positions, the context holds %lld", (long long)positions, (long long)T);
    const int64_t want = moq_batch_pages_for(b, positions), more = want - s->n_pages;
    if (more > b->n_free)
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "kv pool", "%lld more pages needed, %lld of %lld free", (long long)more, (long long)b->n_free,
                        (long long)b->n_pages);
    take_pages(s, want);
    return MOQ_OK;
}

/* Runs the rows gathered so far (r of them) and sends their logits rows and argmax ids where they
 * go (the CPU forward has checked the rows finite). */
static moq_status flush(moq_batch *b, int64_t r, int64_t nl, moq_error *err) {
    if (b->gkv) return moq_gpu_forward_rows(b->m, b->gkv, b->tok, b->pos, b->tabs, r, b->lrows, nl, b->ldst, b->lids, err);
    MOQ_TRY(moq_model_forward_rows(b->m, &b->pool, b->P, b->tok, b->pos, b->tabs, r, b->lrows, nl, err));
    const float *lg = moq_model_step_logits(b->m);
    for (int64_t j = 0; j < nl; j++) {
        if (b->ldst[j]) memcpy(b->ldst[j], lg + j * b->V, (size_t)b->V * sizeof(float));
        if (b->lids[j]) *b->lids[j] = (int32_t)moq_f32_argmax_first(lg + j * b->V, b->V);
    }
    return MOQ_OK;
}

moq_status moq_batch_run(moq_batch *b, const moq_batch_item *items, int64_t n_items, moq_error *err) {
    if (!b || !items || n_items < 1) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_run", "batch and items must not be NULL and n_items >= 1");
    if (n_items > b->max_items)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_run", "%lld items, the batch was created for at most %lld (max_rows)",
                        (long long)n_items, (long long)b->max_items);
    const int64_t T = moq_model_ctx(b->m);
    int64_t pages = 0;
    for (int64_t i = 0; i < n_items; i++) { /* every check first: a failure changes nothing */
        const moq_batch_item *it = &items[i];
        if (!it->seq || it->seq->b != b || !it->tokens || it->n < 1)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_run", "item %lld: a sequence of this batch and n >= 1 tokens expected", (long long)i);
        for (int64_t j = 0; j < i; j++)
            if (items[j].seq == it->seq) return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_run", "items %lld and %lld name the same sequence", (long long)j, (long long)i);
        if (it->seq->pos + it->n > T)
            return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_model_path(b->m), "item %lld: %lld cached + %lld new tokens exceed the context of %lld positions",
                            (long long)i, (long long)it->seq->pos, (long long)it->n, (long long)T);
        for (int64_t t = 0; t < it->n; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= b->V)
                return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, moq_model_path(b->m), "item %lld: token %d at index %lld, expected [0, %lld)", (long long)i,
                                it->tokens[t], (long long)t, (long long)b->V);
        const int64_t want = moq_batch_pages_for(b, it->seq->pos + it->n);
        b->need[i] = want > it->seq->n_pages ? want : it->seq->n_pages;
        pages += b->need[i] - it->seq->n_pages;
    }
    if (pages > b->n_free)
        return MOQ_FAIL(err, MOQ_ERR_NOMEM, "kv pool", "the run needs %lld more pages, %lld of %lld free (reserve pages when admitting sequences)",
                        (long long)pages, (long long)b->n_free, (long long)b->n_pages);
    for (int64_t i = 0; i < n_items; i++) take_pages(items[i].seq, b->need[i]);
    int64_t r = 0, nl = 0;
    for (int64_t i = 0; i < n_items; i++) {
        const moq_batch_item *it = &items[i];
        for (int64_t t = 0; t < it->n; t++) {
            b->tok[r] = it->tokens[t], b->pos[r] = it->seq->pos + t, b->tabs[r] = it->seq->tab;
            if (t == it->n - 1 && (it->logits || it->argmax)) b->lrows[nl] = r, b->ldst[nl] = it->logits, b->lids[nl++] = it->argmax;
            if (++r == b->chunk) {
                MOQ_TRY(flush(b, r, nl, err));
                r = nl = 0;
            }
        }
    }
    if (r > 0) MOQ_TRY(flush(b, r, nl, err));
    for (int64_t i = 0; i < n_items; i++) items[i].seq->pos += items[i].n;
    return MOQ_OK;
}

moq_status moq_seq_prefill(moq_batch *b, moq_seq *s, const int32_t *tokens, int64_t n, float *logits, moq_error *err) {
    const moq_batch_item it = {s, tokens, n, logits, NULL};
    return moq_batch_run(b, &it, 1, err);
}

moq_status moq_batch_step(moq_batch *b, moq_seq *const *seqs, const int32_t *tokens, int64_t B, float *logits, moq_error *err) {
    if (!b || !seqs || !tokens || B < 1 || B > b->max_items)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_step", "batch, sequences and tokens must not be NULL and 1 <= B <= %lld (B=%lld)",
                        b ? (long long)b->max_items : 0LL, (long long)B);
    moq_batch_item items[256];
    for (int64_t i0 = 0; i0 < B; i0 += 256) { /* items on the stack, 256 at a time */
        const int64_t n = B - i0 < 256 ? B - i0 : 256;
        for (int64_t i = 0; i < n; i++) items[i] = (moq_batch_item){seqs[i0 + i], &tokens[i0 + i], 1, logits ? logits + (i0 + i) * b->V : NULL, NULL};
        MOQ_TRY(moq_batch_run(b, items, n, err));
    }
    return MOQ_OK;
}

moq_status moq_batch_step_greedy(moq_batch *b, moq_seq *const *seqs, const int32_t *tokens, int64_t B, int32_t *next, moq_error *err) {
    if (!b || !seqs || !tokens || !next || B < 1 || B > b->max_items)
        return MOQ_FAIL(err, MOQ_ERR_INVALID_ARG, "moq_batch_step_greedy",
                        "batch, sequences, tokens and next must not be NULL and 1 <= B <= %lld (B=%lld)", b ? (long long)b->max_items : 0LL,
                        (long long)B);
    moq_batch_item items[256];
    for (int64_t i0 = 0; i0 < B; i0 += 256) {
        const int64_t n = B - i0 < 256 ? B - i0 : 256;
        for (int64_t i = 0; i < n; i++) items[i] = (moq_batch_item){seqs[i0 + i], &tokens[i0 + i], 1, NULL, &next[i0 + i]};
        MOQ_TRY(moq_batch_run(b, items, n, err));
    }
    return MOQ_OK;
}
