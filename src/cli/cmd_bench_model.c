/* cmd_bench_model.c — `moq bench model DIR`: whole-model speed. Prefill tokens/s over a prompt of
 * deterministic pseudo-random ids, decode tokens/s over N greedy steps, and the decode roofline:
 * bytes of weights one decode step reads (moq_model_decode_bytes: every linear's codes and scales,
 * one embedding row) against the DRAM read bandwidth measured in the same run
 * (cli_dram_read_gbs). bound = bandwidth / bytes per token; the report gives decode as % of it.
 */
#include <getopt.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_bench_model(int argc, char **argv) {
    static const struct option lo[] = {{"prompt", 1, 0, 'p'}, {"decode", 1, 0, 'd'}, {"threads", 1, 0, 'T'}, {"ctx", 1, 0, 'C'},
                                       {"json", 0, 0, 'j'}, {"kv-scales-default", 1, 0, 'K'}, {"compat", 1, 0, 'P'}, {"kv-cache", 1, 0, 'V'},
                                       {"nvfp4-as", 1, 0, CLI_OPT_NVFP4_AS}, {0, 0, 0, 0}};
    long P = 128, N = 32;
    bool json = false;
    moq_model_opts mo = moq_model_opts_default();
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': P = atol(optarg); break;
        case 'd': N = atol(optarg); break;
        case 'j': json = true; break;
        default: {
            int rc = cli_parse_model_opt(ch, optarg, &mo, "bench model");
            if (rc) return rc;
        }
        }
    }
    if (optind != argc - 1) return cli_usage_error("bench model", "expected one DIR");
    if (P < 1 || N < 1 || P > (1L << 20) || N > (1L << 20)) return cli_usage_error("bench model", "--prompt and --decode must be in 1..1048576");
    if (mo.ctx <= 0) mo.ctx = P + N;
    const int threads = mo.n_threads > 0 ? mo.n_threads : omp_get_max_threads();
    moq_model *m = NULL;
    int rc = cli_model_open(&m, argv[optind], &mo, json);
    if (rc) return rc;
    moq_error err;
    const int64_t V = moq_model_vocab_size(m);
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    if (!ids) { moq_model_free(m); return MOQ_ERR_NOMEM; }
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (long i = 0; i < P; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        ids[i] = (int32_t)(st % (uint64_t)V);
    }
    if (P + N > moq_model_ctx(m)) { rc = cli_usage_error("bench model", "--prompt + --decode = %ld exceed --ctx %lld", P + N, (long long)moq_model_ctx(m)); goto done; }
    const double t0 = cli_now_s();
    if (moq_model_prefill(m, ids, P, NULL, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const double t1 = cli_now_s();
    for (long i = 0; i < N; i++) {
        const float *lg = moq_model_logits(m);
        int32_t b = 0;
        for (int64_t v = 1; v < V; v++)
            if (lg[v] > lg[b]) b = (int32_t)v;
        if (moq_model_decode(m, b, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    }
    const double t2 = cli_now_s();
    const double bw = cli_dram_read_gbs(threads), bytes = (double)moq_model_decode_bytes(m);
    const double pre = (double)P / (t1 - t0), dec = (double)N / (t2 - t1), bound = bw * 1e9 / bytes;
    if (json) {
        printf("{\"architecture\":\"%s\",\"threads\":%d,\"prompt\":%ld,\"decode\":%ld,\"prefill_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
               "\"decode_bytes_per_token\":%.0f,\"dram_read_gbs\":%.2f,\"decode_bound_tok_s\":%.3f,\"decode_of_bound\":%.4f}\n",
               moq_model_architecture(m), threads, P, N, pre, dec, bytes, bw, bound, dec / bound);
    } else {
        char b1[32];
        printf("moq bench model: %s, %d threads, cpu: %s\n", moq_model_architecture(m), threads, moq_cpu_features_str());
        printf("prefill  %6ld tokens  %10.2f tok/s\n", P, pre);
        printf("decode   %6ld tokens  %10.2f tok/s\n", N, dec);
        printf("decode reads %s per token; DRAM read %.2f GB/s -> bound %.2f tok/s; decode at %.1f %% of it\n",
               cli_bytes((unsigned long long)bytes, b1, sizeof b1), bw, bound, 100.0 * dec / bound);
    }
done:
    free(ids);
    moq_model_free(m);
    return rc;
}
