/* bench_formats.c — throughput of every converter row of moq_conv_table (portable `_ref` and
 * vector rows), on 1 and 2 threads.
 *
 *   usage: bench_formats [MiB] [reps]     defaults: 64 MiB of f32 (16 Mi elements), best of 5
 *
 * Every row converts the same element count N (encoders read N f32 = MiB, decoders write N f32).
 * GB/s counts input + output bytes (e2m1: half a byte per element); Gelem/s counts elements.
 * Threads split the work the way moq_elem_encode_f32 does (OpenMP, static chunks of 4096
 * elements). Inputs are random: encoders get values spread over the format's range (sum of three
 * uniforms times max/2, plus some beyond max), decoders random codes. Each timing is the best of
 * `reps` after one untimed pass (page faults). Rows the CPU lacks are listed as skipped.
 * Results and the command line are recorded in docs/FORMATS.md.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/format.h"

#define CHUNK 4096

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(void) { return (float)(next_u32() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

static void run_row(const moq_conv_row *r, const float *fin, const uint8_t *cin, float *fout, uint8_t *cout,
                    size_t n, int nt) {
    const size_t nchunks = (n + CHUNK - 1) / CHUNK, cb = moq_elem_bytes(r->elem, CHUNK);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        const size_t lo = c * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        if (r->encode) r->encode(fin + lo, cout + c * cb, len);
        else r->decode(cin + c * cb, fout + lo, len);
    }
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const size_t n = mib * (1u << 20) / 4;
    if (n == 0 || reps < 1) {
        fprintf(stderr, "usage: %s [MiB >= 1] [reps >= 1]\n", argv[0]);
        return 2;
    }
    float *fin = aligned_alloc(64, n * 4), *fout = aligned_alloc(64, n * 4);
    uint8_t *cin = aligned_alloc(64, n * 4), *cout = aligned_alloc(64, n * 4);
    if (!fin || !fout || !cin || !cout) {
        fprintf(stderr, "out of memory for %zu MiB buffers\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n * 4; i++) cin[i] = (uint8_t)next_u32();
    memset(fout, 0, n * 4);
    memset(cout, 0, n * 4);

    printf("bench_formats: %zu elements (%zu MiB of f32), best of %d; CPU features: %s\n", n, mib, reps,
           moq_cpu_features_str());
    printf("%-22s %-7s %3s %9s %9s\n", "row", "target", "thr", "GB/s", "Gelem/s");
    static const char *const target_names[] = {"ref", "avx2", "avx512"};
    for (size_t i = 0; i < moq_conv_table_len; i++) {
        const moq_conv_row *r = &moq_conv_table[i];
        if ((r->need & moq_cpu_features()) != r->need) {
            printf("%-22s %-7s   skipped: CPU lacks the features this row needs\n", r->name, target_names[r->target]);
            continue;
        }
        if (r->encode) { /* values spread over the format's range, some beyond it */
            const float half = 0.5f * (moq_elem_table[r->elem].max > 1e6f ? 1e3f : moq_elem_table[r->elem].max);
            for (size_t k = 0; k < n; k++) fin[k] = (uniform() + uniform() + uniform()) * half;
        }
        const double bytes = (double)n * 4 + (double)moq_elem_bytes(r->elem, n);
        for (int nt = 1; nt <= 2; nt++) {
            run_row(r, fin, cin, fout, cout, n, nt);
            double best = 1e30;
            for (int k = 0; k < reps; k++) {
                const double t0 = now_s();
                run_row(r, fin, cin, fout, cout, n, nt);
                const double dt = now_s() - t0;
                if (dt < best) best = dt;
            }
            printf("%-22s %-7s %3d %9.2f %9.3f\n", r->name, target_names[r->target], nt, bytes / best * 1e-9,
                   (double)n / best * 1e-9);
            fflush(stdout);
        }
    }
    free(fin);
    free(fout);
    free(cin);
    free(cout);
    return 0;
}
