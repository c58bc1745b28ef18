/* bench_batch.c — decode steps of the batched decode API (moq_batch_step) at B = 1, 2, 4, 8, 16:
 * milliseconds per step and total tokens/s, the engine's share of `moq serve` throughput without
 * HTTP (docs/PERFORMANCE.md "moq serve"); also process CPU ms per step and tokens per CPU-second
 * (the columns that survive a shared machine).
 *
 *   usage: bench_batch DIR [--threads T] [--steps S] [--prompt P] [--batch B1,B2,...]
 *          defaults: --threads 0 (OpenMP's default) --steps 16 --prompt 32 --batch 1,2,4,8,16
 *
 * Each sequence is prefilled with P tokens (ids 1..P), then S steps are timed, each feeding every
 * sequence its greedy token. The last column is the prefill's process CPU ms per prompt token (all
 * B sequences' prefills: the cost of a prompt row, which `moq serve` pays at every concurrency).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moq.h"

static double clock_s(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_batch DIR [--threads T] [--steps S] [--prompt P] [--batch B1,B2,...]\n");
        return 2;
    }
    enum { BMAX = 16 };
    int threads = 0, steps = 16, prompt = 32, nb = 0, blist[BMAX];
    const char *batches = "1,2,4,8,16";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batches = argv[i + 1];
    }
    for (const char *c = batches; *c && nb < BMAX; c = strchr(c, ',') ? strchr(c, ',') + 1 : c + strlen(c)) {
        blist[nb] = atoi(c);
        if (blist[nb] < 1 || blist[nb] > BMAX) {
            fprintf(stderr, "bench_batch: --batch %s: size %d, expected each size in 1..%d\n", batches, blist[nb], BMAX);
            return 2;
        }
        nb++;
    }
    if (steps < 1 || prompt < 1 || nb < 1) {
        fprintf(stderr, "bench_batch: --steps %d, --prompt %d, %d batch sizes: expected each >= 1\n", steps, prompt, nb);
        return 2;
    }
    moq_error e;
    moq_model_opts mo = moq_model_opts_default();
    mo.n_threads = threads, mo.ctx = prompt + steps + 1;
    moq_model *m = NULL;
    if (moq_model_open(&m, argv[1], &mo, &e) != MOQ_OK) {
        fprintf(stderr, "bench_batch: %s: %s\n", e.where, e.msg);
        return 1;
    }
    const int64_t V = moq_model_vocab_size(m);
    moq_batch_opts bo = moq_batch_opts_default();
    bo.max_rows = BMAX;
    moq_batch *b = NULL;
    moq_batch_opts probe = bo;
    if (moq_batch_create(&b, m, &probe, &e) != MOQ_OK) {
        fprintf(stderr, "bench_batch: %s: %s\n", e.where, e.msg);
        return 1;
    }
    bo.kv_bytes = (uint64_t)BMAX * (uint64_t)moq_batch_pages_for(b, moq_model_ctx(m)) * moq_batch_page_bytes(b);
    moq_batch_free(b);
    if (moq_batch_create(&b, m, &bo, &e) != MOQ_OK) return 1;
    float *lg = malloc((size_t)BMAX * (size_t)V * sizeof(float));
    int32_t *ids = malloc((size_t)prompt * sizeof *ids), tok[BMAX];
    for (int i = 0; i < prompt; i++) ids[i] = (int32_t)(1 + i % (V - 1));
    char vs[16];
    snprintf(vs, sizeof vs, "vs B=%d", blist[0]);
    printf("%4s %10s %10s %8s %12s %10s %8s %18s\n", "B", "ms/step", "tok/s", vs, "cpu ms/step", "tok/cpu-s", vs, "prefill cpu ms/tok");
    double base = 0, cbase = 0;
    for (int bi = 0; bi < nb; bi++) {
        const int B = blist[bi];
        moq_seq *seq[BMAX];
        const double p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int s = 0; s < B; s++) {
            if (moq_seq_create(&seq[s], b, &e) != MOQ_OK || moq_seq_prefill(b, seq[s], ids, prompt, lg + (size_t)s * (size_t)V, &e) != MOQ_OK) {
                fprintf(stderr, "bench_batch: %s: %s\n", e.where, e.msg);
                return 1;
            }
        }
        const double pt = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0) / ((double)B * prompt);
        for (int s = 0; s < B; s++) tok[s] = 1;
        const double t0 = now_s(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int k = 0; k < steps; k++) {
            if (moq_batch_step(b, seq, tok, B, lg, &e) != MOQ_OK) {
                fprintf(stderr, "bench_batch: %s: %s\n", e.where, e.msg);
                return 1;
            }
            for (int s = 0; s < B; s++) { /* greedy */
                const float *x = lg + (size_t)s * (size_t)V;
                int32_t best = 0;
                for (int64_t i = 1; i < V; i++) best = x[i] > x[best] ? (int32_t)i : best;
                tok[s] = best;
            }
        }
        const double dt = (now_s() - t0) / steps, tps = B / dt, ct = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / steps, cps = B / ct;
        if (bi == 0) base = tps, cbase = cps;
        printf("%4d %10.2f %10.1f %7.2fx %12.2f %10.1f %7.2fx %18.3f\n", B, 1e3 * dt, tps, tps / base, 1e3 * ct, cps, cps / cbase, 1e3 * pt);
        for (int s = 0; s < B; s++) moq_seq_free(seq[s]);
    }
    free(lg);
    free(ids);
    moq_batch_free(b);
    moq_model_free(m);
    return 0;
}
