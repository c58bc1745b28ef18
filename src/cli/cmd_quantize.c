/* cmd_quantize.c — `moq quantize SRC DST --algo A ...`: calibrate (when --calib is given) and write a
 * ModelOpt checkpoint (quant/quantize.c, model/calibrate.c). Progress bar with ETA on a TTY,
 * per-phase timings on stderr, --json summary on stdout. Ctrl-C removes the partial output.
 * Covered by tests/quant/test_quantize.c and docs/QUANTIZE.md. */
#include <getopt.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "model/model.h"
#include "quant/export_linear.h"
#include "quant/quantize.h"

void cmd_quantize_help(FILE *out) {
    fprintf(out,
            "usage: moq quantize SRC_DIR DST_DIR --algo A [--recipe FILE] [--exclude PATTERN]...\n"
            "                    [--kv-cache fp8] [--calib FILE] [--calib-tokens N] [--shard-size BYTES]\n"
            "                    [--threads N] [--json]\n\n"
            "Writes DST_DIR (which must not exist) as ModelOpt 0.47's export_hf_checkpoint would: quantized\n"
            "linears, hf_quant_config.json, config.json with quantization_config, sharded safetensors with an\n"
            "index, and the source's tokenizer and generation files. SRC_DIR is an unquantized Hugging Face\n"
            "checkpoint (BF16, F16 or F32). A: FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4,\n"
            "MXFP8, or MIXED_PRECISION with --recipe FILE ({\"default\": ALGO, \"layers\": {PATTERN: ALGO}},\n"
            "first matching pattern wins; ALGO may be BF16 to keep a module unquantized).\n"
            "lm_head, the embeddings and MoE routers stay unquantized and are listed as excluded;\n"
            "--exclude PATTERN (fnmatch on module names, repeatable) keeps more.\n"
            "--calib FILE: text to calibrate static input scales (FP8, NVFP4 input_scale) and, with\n"
            "--kv-cache fp8, k_scale/v_scale on (max calibration over the model's forward pass, tokenized\n"
            "with SRC's tokenizer; --calib-tokens N keeps the first N tokens, default 4096). FP8, NVFP4 and\n"
            "--kv-cache fp8 refuse to run without it.\n"
            "--shard-size BYTES (suffixes K, M, G; default 5G): shards at most this big.\n"
            "--threads N: threads for calibration and the exporters (default: OpenMP's, OMP_NUM_THREADS);\n"
            "the bytes written do not depend on it.\n"
            "The output is written to DST_DIR.moq-partial and renamed when complete; an interrupted run\n"
            "leaves nothing at DST_DIR. Details: docs/QUANTIZE.md.\n");
}

static volatile int g_cancel;
static void on_signal(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct bar {
    double t0;
    double last;
    int    shown;
} bar;

static void progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    bar *b = user;
    const double now = cli_now_s();
    if (done < total && now - b->last < 0.1) return;
    b->last = now;
    const int w = 30, f = total ? (int)((uint64_t)w * done / total) : w;
    const double el = now - b->t0, eta = done ? el * (double)(total - done) / (double)done : 0;
    char d[32], t[32];
    fprintf(stderr, "\r%s [%.*s%*s] %s / %s  %3.0f%%  ETA %4.0f s ", phase, f, "==============================", w - f, "",
            cli_bytes(done, d, sizeof d), cli_bytes(total, t, sizeof t), total ? 100.0 * (double)done / (double)total : 100.0, eta);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
    b->shown = 1;
}

static int parse_size(const char *s, uint64_t *out) {
    char *end = NULL;
    const double v = strtod(s, &end);
    if (!end || end == s || v <= 0) return 0;
    double m = 1;
    if (*end == 'K' || *end == 'k') m = 1e3, end++;
    else if (*end == 'M' || *end == 'm') m = 1e6, end++;
    else if (*end == 'G' || *end == 'g') m = 1e9, end++;
    if (*end == 'B') end++;
    if (*end) return 0;
    *out = (uint64_t)(v * m);
    return *out > 0;
}

int cmd_quantize(int argc, char **argv) {
    static const struct option opts[] = {
        {"algo", required_argument, NULL, 'a'},       {"recipe", required_argument, NULL, 'r'},
        {"exclude", required_argument, NULL, 'x'},    {"kv-cache", required_argument, NULL, 'k'},
        {"calib", required_argument, NULL, 'c'},      {"calib-tokens", required_argument, NULL, 'n'},
        {"shard-size", required_argument, NULL, 's'}, {"threads", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},             {NULL, 0, NULL, 0}};
    moq_quantize_opts o = moq_quantize_opts_default();
    o.algo = NULL;
    const char *recipe_path = NULL, *calib_path = NULL;
    const char **excl = calloc((size_t)argc + 1, sizeof *excl);
    long calib_tokens = 4096, threads = 0;
    int json = 0, ch;
    if (!excl) return MOQ_ERR_NOMEM;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (ch) {
        case 'a': o.algo = optarg; break;
        case 'r': recipe_path = optarg; break;
        case 'x': excl[o.n_exclude++] = optarg; break;
        case 'k':
            if (strcasecmp(optarg, "fp8") != 0) {
                free(excl);
                return cli_usage_error("quantize", "--kv-cache \"%s\", expected fp8 (the only KV cache encoding ModelOpt writes)", optarg);
            }
            o.kv_fp8 = true;
            break;
        case 'c': calib_path = optarg; break;
        case 'n': case 't': {
            const long v = strtol(optarg, &end, 10);
            if (!end || *end || v < 1 || v > (1L << 30)) {
                free(excl);
                return cli_usage_error("quantize", "--%s needs a positive integer, got \"%s\"", ch == 'n' ? "calib-tokens" : "threads", optarg);
            }
            if (ch == 'n') calib_tokens = v; else threads = v;
            break;
        }
        case 's':
            if (!parse_size(optarg, &o.shard_size)) {
                free(excl);
                return cli_usage_error("quantize", "--shard-size \"%s\": expected a byte count like 2000000000 or 2G", optarg);
            }
            break;
        case 'j': json = 1; break;
        default: free(excl); return cli_usage_error("quantize", "unknown option");
        }
    }
    o.exclude = excl;
    if (optind != argc - 2) {
        free(excl);
        return cli_usage_error("quantize", "expected SRC_DIR and DST_DIR");
    }
    if (!o.algo) {
        free(excl);
        return cli_usage_error("quantize", "--algo is required (FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION)");
    }
    const char *src = argv[optind], *dst = argv[optind + 1];
    /* the command, recorded in __metadata__ */
    size_t cl = 16;
    for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 1;
    char *cmdline = malloc(cl);
    char *recipe = NULL, *calib_text = NULL;
    int rc = 0;
    if (!cmdline) { free(excl); return MOQ_ERR_NOMEM; }
    snprintf(cmdline, cl, "moq");
    for (int i = 0; i < argc; i++) strcat(strcat(cmdline, " "), argv[i]);
    o.command = cmdline;
    if (recipe_path) {
        size_t n = 0;
        if (!(recipe = cli_read_file(recipe_path, &n))) {
            moq_error e = {.code = MOQ_ERR_IO};
            snprintf(e.where, sizeof e.where, "%s", recipe_path);
            snprintf(e.msg, sizeof e.msg, "cannot read the recipe");
            rc = cli_report(&e);
            goto done;
        }
        o.recipe = recipe, o.recipe_name = recipe_path;
    }
    moq_error err = {0};
    moq_calib calib = {0};
    const double t0 = cli_now_s();
    double calib_s = 0;
    if (calib_path) {
        size_t n = 0;
        if (!(calib_text = cli_read_file(calib_path, &n))) {
            moq_error e = {.code = MOQ_ERR_IO};
            snprintf(e.where, sizeof e.where, "%s", calib_path);
            snprintf(e.msg, sizeof e.msg, "cannot read the calibration text");
            rc = cli_report(&e);
            goto done;
        }
        if (!json) fprintf(stderr, "moq: calibrating on %s (up to %ld tokens)\n", calib_path, calib_tokens);
        if (moq_calibrate_text(&calib, src, calib_text, n, calib_tokens, (int)threads, &err) != MOQ_OK) {
            rc = cli_report(&err);
            goto done;
        }
        o.calib = &calib;
        calib_s = cli_now_s() - t0;
    }
    if (threads > 0) omp_set_num_threads((int)threads);   /* the exporters' row loops */
    bar b = {.t0 = cli_now_s()};
    if (cli_stderr_is_tty()) o.progress = progress, o.progress_user = &b;
    g_cancel = 0;
    o.cancel = &g_cancel;
    void (*old_int)(int) = signal(SIGINT, on_signal), (*old_term)(int) = signal(SIGTERM, on_signal);
    moq_quantize_report rep;
    const moq_status st = moq_quantize(src, dst, &o, &rep, &err);
    signal(SIGINT, old_int);
    signal(SIGTERM, old_term);
    if (b.shown && st != MOQ_OK) fputc('\n', stderr);
    if (st != MOQ_OK) {
        rc = cli_report(&err);
        moq_calib_free(&calib);
        goto done;
    }
    char bi[32], bo[32], bl[32];
    if (json) {
        printf("{\"src\": \"%s\", \"dst\": \"%s\", \"algo\": \"%s\", \"linears\": %zu, \"quantized\": %zu, \"tensors\": %zu, "
               "\"shards\": %d, \"bytes_in\": %llu, \"bytes_out\": %llu, \"calib_tokens\": %lld, \"kv_cache\": %s, "
               "\"seconds\": {\"calibrate\": %.3f, \"plan\": %.3f, \"amax\": %.3f, \"write\": %.3f}}\n",
               src, dst, o.algo, rep.n_linears, rep.n_quantized, rep.n_tensors_out, rep.n_shards, (unsigned long long)rep.bytes_in,
               (unsigned long long)rep.bytes_out, (long long)calib.n_tokens, o.kv_fp8 ? "\"fp8\"" : "null", calib_s, rep.plan_s,
               rep.amax_s, rep.write_s);
    } else {
        printf("%s: %s, %zu of %zu linears quantized, %zu tensors in %d shard%s, %s -> %s\n", dst, o.algo, rep.n_quantized, rep.n_linears,
               rep.n_tensors_out, rep.n_shards, rep.n_shards == 1 ? "" : "s", cli_bytes(rep.bytes_in, bi, sizeof bi),
               cli_bytes(rep.bytes_out, bo, sizeof bo));
        fprintf(stderr, "moq: calibrate %.3f s (%lld tokens), plan %.3f s, amax %.3f s, write %.3f s; largest tensor %s\n", calib_s,
                (long long)calib.n_tokens, rep.plan_s, rep.amax_s, rep.write_s, cli_bytes(rep.largest_tensor, bl, sizeof bl));
    }
    moq_calib_free(&calib);
done:
    free(recipe);
    free(calib_text);
    free(cmdline);
    free(excl);
    return rc;
}
