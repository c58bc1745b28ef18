/* tile_prefetch.h — software prefetch of a packed weight stream that the threads of a decode
 * kernel take in chunks of 16-row tiles (linear_nvfp4_avx2.c, linear_nvfp4_avx512.c, linear_fp8_avx2.c,
 * linear_fp8_avx512.c, linear_dequant_panel_avx2.c, linear_dequant_panel_avx512.c).
 *
 * A thread claims its next chunk before it starts the current one; a prefetch MOQ_PF_BYTES past
 * the end of the current chunk then lands at the same distance into the chunk it will run next,
 * so two threads never fetch each other's tiles and with one thread the stream runs on without a
 * gap at chunk ends. Portable (__builtin_prefetch): prefetches change no result.
 * Measured distance and gains: docs/PERFORMANCE.md "AVX2 NVFP4 decode at the DRAM bound" and
 * "FP8-family and BF16 decode at the DRAM bound". */
#ifndef MOQ_KERNELS_CPU_TILE_PREFETCH_H
#define MOQ_KERNELS_CPU_TILE_PREFETCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MOQ_PF_BYTES 16384 /* bytes ahead of the loads: ~0.6 us of one core's DRAM stream */
#define MOQ_PF_CHUNK 4     /* tiles per claim: a descheduled thread (shared VM) holds 4, not half */

/* The current chunk ends at tile t1; the claimed next chunk is tiles [n0, n1) (empty at the end). */
typedef struct moq_pf_chunks { int64_t t1, n0, n1; } moq_pf_chunks;

static inline moq_pf_chunks moq_pf_chunks_make(int64_t c, int64_t cn, int64_t tiles) {
    const int64_t nchunks = (tiles + MOQ_PF_CHUNK - 1) / MOQ_PF_CHUNK;
    moq_pf_chunks p = {(c + 1) * MOQ_PF_CHUNK < tiles ? (c + 1) * MOQ_PF_CHUNK : tiles, 0, 0};
    if (cn < nchunks) p.n0 = cn * MOQ_PF_CHUNK, p.n1 = (cn + 1) * MOQ_PF_CHUNK < tiles ? (cn + 1) * MOQ_PF_CHUNK : tiles;
    return p;
}

/* One thread's walk over the chunks of `tiles` tiles that the team claims from a shared counter
 * (0 before the parallel region): each step claims the thread's following chunk before it hands
 * out the current one, so the prefetches of the current chunk can run on into it.
 *     moq_pf_walk wk = moq_pf_walk_start(&next_chunk, tiles);
 *     moq_pf_chunks pc; int64_t t0;
 *     while (moq_pf_walk_next(&wk, &t0, &pc)) for (int64_t t = t0; t < pc.t1; t++) ... */
typedef struct moq_pf_walk {
    _Atomic int64_t *next;
    int64_t          tiles, nchunks, c;
} moq_pf_walk;

static inline moq_pf_walk moq_pf_walk_start(_Atomic int64_t *next, int64_t tiles) {
    const moq_pf_walk w = {next, tiles, (tiles + MOQ_PF_CHUNK - 1) / MOQ_PF_CHUNK, atomic_fetch_add_explicit(next, 1, memory_order_relaxed)};
    return w;
}

/* The thread's next chunk: its first tile in *t0, its end and the chunk claimed after it in *pc;
 * false when the tiles are all taken. */
static inline bool moq_pf_walk_next(moq_pf_walk *w, int64_t *t0, moq_pf_chunks *pc) {
    if (w->c >= w->nchunks) return false;
    const int64_t cn = atomic_fetch_add_explicit(w->next, 1, memory_order_relaxed);
    *pc = moq_pf_chunks_make(w->c, cn, w->tiles);
    *t0 = w->c * MOQ_PF_CHUNK;
    w->c = cn;
    return true;
}

/* Prefetch the line at byte offset off of a region of `unit` bytes per tile, off counted as if
 * the next chunk followed the current one. always_inline: GCC marks a small function around
 * __builtin_prefetch const and drops its calls otherwise (measured: no prefetch emitted). */
static inline __attribute__((always_inline)) void moq_pf_line(const uint8_t *region, int64_t unit, const moq_pf_chunks *c, int64_t off) {
    if (off < c->t1 * unit) {
        __builtin_prefetch(region + off, 0, 3);
        return;
    }
    off += (c->n0 - c->t1) * unit;
    if (off < c->n1 * unit) __builtin_prefetch(region + off, 0, 3);
}

#endif
