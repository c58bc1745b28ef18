/* cmd_run.c — `moq run DIR ...`: generate text with a checkpoint. Tokens stream to stdout as they
 * are produced; load time per phase, prefill and decode tokens/s go to stderr (a progress bar
 * while loading, on a TTY only). Also holds the helpers `moq eval` and `moq bench model` share:
 * opening a model with the progress bar and reporting load timings.
 * Tested by tests/e2e/model_cli.sh.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

void cmd_run_help(FILE *out) {
    fprintf(out,
            "usage: moq run DIR [-p PROMPT | -f FILE] [-n MAX_TOKENS] [--chat] [--system TEXT] [--temp T]\n"
            "               [--top-k K] [--top-p P] [--seed S] [--threads N] [--ctx N] [--json]\n"
            "               [--kv-scales-default S] [--kv-cache f32|bf16] [--compat moq|vllm|sglang]\n"
            "               [--device cpu|cuda|auto] [--nvfp4-as nvfp4|fp8|fp8-channel]\n"
            "               [--tp G [--ep] [--tp-backend cpu|nccl]]\n\n"
            "Generates up to MAX_TOKENS (default 64) tokens after PROMPT (or FILE's text, or standard input)\n"
            "and streams them to stdout; stops early at an end-of-sequence token. --chat wraps the prompt as a\n"
            "user message (after --system TEXT) in the chat format tokenizer_config.json selects. Sampling:\n"
            "--temp 0 (the default) is greedy; else softmax(logits / T) limited to --top-k and --top-p, drawn\n"
            "with --seed (same seed, same text). --ctx N preallocates N positions (default: the model's,\n"
            "at most 4096). A checkpoint declaring an FP8 KV cache with no k_scale/v_scale tensor in any layer\n"
            "runs with scale 1.0 (ModelOpt's default export means that) and says so; scales in some layers\n"
            "only is an error. --kv-scales-default 1.0 is accepted for old scripts and changes nothing.\n"
            "--kv-cache picks the cache encoding when the checkpoint declares no KV quantization (default f32).\n"
            "--device cuda runs the whole forward on the GPU (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral;\n"
            "bf16 KV cache, or FP8 as the checkpoint declares); auto picks the GPU when one is usable.\n"
            "--nvfp4-as fp8 re-quantizes every NVFP4 linear to FP8 at load with dynamic FP8 activations: 128x128\n"
            "weight blocks where K %% 128 == 0 (else per channel), as vLLM does on Hopper; fp8-channel: one scale\n"
            "per output channel and per-token activations everywhere (faster on moq's CUDA rows); docs/ACCURACY.md.\n"
            "--tp G splits the model over G ranks (threads of this process, the cores shared): attention heads,\n"
            "MLP and vocabulary, each rank loading only its part; MoE experts are split G ways, or spread whole\n"
            "over the ranks with --ep. --tp-backend nccl sums through NCCL, one GPU per rank (G <= GPUs).\n"
            "Threads: on a shared or oversubscribed machine set OMP_WAIT_POLICY=passive (spinning OpenMP\n"
            "threads measured 20x slower decode there); libgomp reads it at program start.\n"
            "stderr: load time per phase (open, validate, pack), prefill and decode tokens per second.\n"
            "--json prints one JSON object (text, ids, timings) instead of streaming.\n");
}

double cli_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cli_progress_bar(void *user, const char *phase, uint64_t done, uint64_t total) {
    (void)user;
    const int w = 40, f = total ? (int)(40u * done / total) : w;
    fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu", phase, f, "========================================", w - f, "",
            (unsigned long long)done, (unsigned long long)total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

int cli_model_open(moq_model **m, const char *dir, moq_model_opts *o, int quiet) {
    moq_error err;
    if (!quiet && cli_stderr_is_tty()) o->progress = cli_progress_bar;
    if (moq_model_open(m, dir, o, &err) != MOQ_OK) return cli_report(&err);
    if (!quiet) {
        for (int i = 0; i < moq_model_warning_count(*m); i++) fprintf(stderr, "moq: warning: %s\n", moq_model_warning(*m, i));
        const moq_model_timings t = moq_model_load_timings(*m);
        fprintf(stderr, "moq: %s, %lld positions; load %.3f s (open %.3f, validate %.3f, pack %.3f), cpu %.3f s (open %.3f, validate %.3f, pack %.3f)\n",
                moq_model_architecture(*m), (long long)moq_model_ctx(*m), t.open_s + t.validate_s + t.pack_s, t.open_s, t.validate_s, t.pack_s,
                t.open_cpu_s + t.validate_cpu_s + t.pack_cpu_s, t.open_cpu_s, t.validate_cpu_s, t.pack_cpu_s);
        const moq_model_memory mm = moq_model_memory_usage(*m);
        char b[5][32];
        fprintf(stderr, "moq: weights %s in the checkpoint; held %s (packed %s, own %s, read in place from the mapping %s)\n",
                cli_bytes(mm.file, b[0], sizeof b[0]), cli_bytes(mm.packed + mm.owned + mm.mapped, b[1], sizeof b[1]),
                cli_bytes(mm.packed, b[2], sizeof b[2]), cli_bytes(mm.owned, b[3], sizeof b[3]), cli_bytes(mm.mapped, b[4], sizeof b[4]));
    }
    return 0;
}

int cli_parse_model_opt(int ch, const char *arg, moq_model_opts *o, const char *cmd) {
    char *end = NULL;
    errno = 0;
    switch (ch) {
    case 'T': {
        long v = strtol(arg, &end, 10);
        if (*end || errno || v < 1 || v > 1024) return cli_usage_error(cmd, "--threads %s, expected 1..1024", arg);
        o->n_threads = (int)v;
        return 0;
    }
    case 'C': {
        long long v = strtoll(arg, &end, 10);
        if (*end || errno || v < 1 || v > (1LL << 24)) return cli_usage_error(cmd, "--ctx %s, expected 1..16777216", arg);
        o->ctx = v;
        return 0;
    }
    case 'K': {
        float v = strtof(arg, &end);
        /* A no-op alias kept for scripts: 1.0 is what a missing scale means (ModelOpt's fp8_cast). */
        if (*end || v != 1.0f)
            return cli_usage_error(cmd, "--kv-scales-default %s: only 1.0 is accepted, and it is the default now (a file without KV scales means 1.0)", arg);
        return 0;
    }
    case 'V':
        if (strcmp(arg, "f32") != 0 && strcmp(arg, "bf16") != 0) return cli_usage_error(cmd, "--kv-cache %s, expected f32 or bf16", arg);
        o->kv_elem = strcmp(arg, "bf16") == 0 ? MOQ_ELEM_BF16 : MOQ_ELEM_F32;
        return 0;
    case 'P': {
        moq_error err;
        if (moq_compat_parse(arg, &o->compat, &err) != MOQ_OK) return cli_report(&err);
        return 0;
    }
    case 'G': /* --device cpu|cuda|auto (auto: the GPU when moq_device_check accepts one) */
        if (strcmp(arg, "cpu") != 0 && strcmp(arg, "cuda") != 0 && strcmp(arg, "auto") != 0)
            return cli_usage_error(cmd, "--device %s, expected cpu, cuda or auto", arg);
        o->device = strcmp(arg, "cuda") == 0 || (strcmp(arg, "auto") == 0 && moq_device_check(MOQ_DEVICE_CUDA, NULL, 0, NULL) == MOQ_OK)
                        ? MOQ_DEVICE_CUDA
                        : MOQ_DEVICE_CPU;
        return 0;
    case CLI_OPT_NVFP4_AS: {
        static const struct { const char *name; moq_nvfp4_as as; } as_rows[] = {
            {"nvfp4", MOQ_NVFP4_AS_NVFP4}, {"fp8", MOQ_NVFP4_AS_FP8}, {"fp8-channel", MOQ_NVFP4_AS_FP8_CHANNEL}};
        for (size_t i = 0; i < sizeof as_rows / sizeof as_rows[0]; i++)
            if (strcmp(arg, as_rows[i].name) == 0) return o->nvfp4_as = as_rows[i].as, 0;
        return cli_usage_error(cmd, "--nvfp4-as %s, expected nvfp4 (as stored), fp8 or fp8-channel (re-quantized to FP8 at load)", arg);
    }
    case CLI_OPT_TP: {
        long v = strtol(arg, &end, 10);
        if (*end || v < 1 || v > 64) return cli_usage_error(cmd, "--tp %s, expected 1..64 ranks", arg);
        o->tp = (int)v;
        return 0;
    }
    case CLI_OPT_EP: o->tp_ep = 1; return 0;
    case CLI_OPT_TP_BACKEND:
        if (strcmp(arg, "cpu") != 0 && strcmp(arg, "nccl") != 0) return cli_usage_error(cmd, "--tp-backend %s, expected cpu or nccl", arg);
        o->tp_backend = strcmp(arg, "nccl") == 0;
        return 0;
    default: return cli_usage_error(cmd, "unknown option");
    }
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
    }
    if (f != stdin) fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Encodes the prompt (rendered as a chat when asked) into a malloc'ed id list. */
static int encode_prompt(moq_tokenizer *t, const char *text, size_t len, bool chat, const char *system, int32_t **ids, size_t *n) {
    moq_error err;
    char *rendered = NULL;
    uint32_t flags = MOQ_ENCODE_ADD_SPECIAL;
    if (chat) {
        moq_chat_message m[2] = {{"system", system ? system : ""}, {"user", text}};
        const moq_chat_template *ct = moq_tokenizer_chat_template(t);
        size_t need = 0;
        moq_status st = moq_chat_render(ct, system ? m : m + 1, system ? 2 : 1, true, NULL, 0, &need, &err);
        if (st != MOQ_OK && st != MOQ_ERR_NOMEM) return cli_report(&err);
        rendered = malloc(need + 1);
        if (!rendered) return MOQ_ERR_NOMEM;
        if (moq_chat_render(ct, system ? m : m + 1, system ? 2 : 1, true, rendered, need + 1, &need, &err) != MOQ_OK) {
            free(rendered);
            return cli_report(&err);
        }
        text = rendered, len = need, flags = 0;
    }
    *ids = malloc((len + 8) * sizeof **ids); /* byte-level BPE: at most one id per byte, plus specials */
    int rc = 0;
    if (!*ids) rc = MOQ_ERR_NOMEM;
    else if (moq_tokenizer_encode(t, text, len, flags, *ids, len + 8, n, &err) != MOQ_OK) rc = cli_report(&err);
    free(rendered);
    return rc;
}

int cmd_run(int argc, char **argv) {
    static const struct option lo[] = {
        {"prompt", 1, 0, 'p'}, {"file", 1, 0, 'f'}, {"max-tokens", 1, 0, 'n'}, {"chat", 0, 0, 'c'}, {"system", 1, 0, 's'},
        {"temp", 1, 0, 't'}, {"top-k", 1, 0, 'k'}, {"top-p", 1, 0, 'q'}, {"seed", 1, 0, 'S'}, {"threads", 1, 0, 'T'},
        {"ctx", 1, 0, 'C'}, {"json", 0, 0, 'j'}, {"kv-scales-default", 1, 0, 'K'}, {"compat", 1, 0, 'P'}, {"kv-cache", 1, 0, 'V'}, {"device", 1, 0, 'G'},
        {"nvfp4-as", 1, 0, CLI_OPT_NVFP4_AS}, CLI_TP_OPTIONS, {0, 0, 0, 0}};
    const char *prompt = NULL, *file = NULL, *system = NULL;
    long max_tokens = 64;
    bool chat = false, json = false;
    moq_sampler_opts so = moq_sampler_opts_default();
    moq_model_opts mo = moq_model_opts_default();
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "p:f:n:", lo, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (ch) {
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 'c': chat = true; break;
        case 's': system = optarg; break;
        case 'j': json = true; break;
        case 'n':
            max_tokens = strtol(optarg, &end, 10);
            if (*end || errno || max_tokens < 0 || max_tokens > (1L << 24)) return cli_usage_error("run", "-n %s, expected 0..16777216", optarg);
            break;
        case 't':
            so.temperature = strtof(optarg, &end);
            if (*end || !(so.temperature >= 0) || !isfinite(so.temperature)) return cli_usage_error("run", "--temp %s, expected a finite value >= 0", optarg);
            break;
        case 'k': {
            long v = strtol(optarg, &end, 10);
            if (*end || errno || v < 0 || v > INT32_MAX) return cli_usage_error("run", "--top-k %s, expected an integer >= 0", optarg);
            so.top_k = (int32_t)v;
            break;
        }
        case 'q':
            so.top_p = strtof(optarg, &end);
            if (*end || !(so.top_p > 0 && so.top_p <= 1)) return cli_usage_error("run", "--top-p %s, expected (0, 1]", optarg);
            break;
        case 'S':
            so.seed = strtoull(optarg, &end, 10);
            if (*end || errno) return cli_usage_error("run", "--seed %s, expected an unsigned integer", optarg);
            break;
        case 'T': case 'C': case 'K': case 'P': case 'V': case 'G': case CLI_OPT_NVFP4_AS: case CLI_OPT_TP: case CLI_OPT_EP: case CLI_OPT_TP_BACKEND: {
            int rc = cli_parse_model_opt(ch, optarg, &mo, "run");
            if (rc) return rc;
            break;
        }
        default: return cli_usage_error("run", "unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("run", "expected one DIR");
    if (prompt && file) return cli_usage_error("run", "-p and -f exclude each other");
    if (system && !chat) return cli_usage_error("run", "--system needs --chat");
    const char *dir = argv[optind];
    moq_error err;
    moq_tokenizer *tok = NULL;
    moq_model *m = NULL;
    moq_sampler *smp = NULL;
    char *text = NULL, *out = NULL;
    int32_t *ids = NULL;
    void *scratch = NULL;
    size_t len = 0, n_ids = 0, out_len = 0, out_cap = 0;
    int rc = 0;
    if (prompt) len = strlen(prompt);
    else if (!(text = cli_read_file(file ? file : "-", &len))) return cli_usage_error("run", "cannot read %s", file ? file : "standard input");
    if (moq_tokenizer_open(&tok, dir, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    if ((rc = encode_prompt(tok, prompt ? prompt : text, len, chat, system, &ids, &n_ids))) goto done;
    if (n_ids == 0) { rc = cli_usage_error("run", "the prompt encodes to no tokens"); goto done; }
    if ((rc = cli_model_open(&m, dir, &mo, json))) goto done;
    const int64_t V = moq_model_vocab_size(m);
    if (moq_tokenizer_vocab_size(tok) > V) {
        fprintf(stderr, "moq: warning: tokenizer has %d ids, the model's vocab_size is %lld\n", moq_tokenizer_vocab_size(tok), (long long)V);
    }
    if ((int64_t)n_ids + max_tokens > moq_model_ctx(m)) {
        rc = cli_usage_error("run", "%zu prompt + %ld new tokens exceed --ctx %lld", n_ids, max_tokens, (long long)moq_model_ctx(m));
        goto done;
    }
    if (moq_sampler_create(&smp, &so, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const size_t ss = moq_sampler_scratch_size((size_t)V);
    scratch = malloc(ss ? ss : 1);
    out_cap = 1024;
    out = malloc(out_cap);
    if (!scratch || !out) { rc = MOQ_ERR_NOMEM; goto done; }

    const double t0 = cli_now_s();
    if (moq_model_prefill(m, ids, (int64_t)n_ids, NULL, &err) != MOQ_OK) { rc = cli_report(&err); goto done; }
    const double t1 = cli_now_s();
    moq_utf8_stream us;
    moq_utf8_stream_reset(&us);
    long produced = 0, n_dec = 0;
    char piece[MOQ_UTF8_STREAM_OUT_MAX(256)];
    int32_t *gen = malloc(((size_t)max_tokens + 1) * sizeof *gen);
    if (!gen) { rc = MOQ_ERR_NOMEM; goto done; }
    for (; produced < max_tokens; produced++) {
        int32_t id;
        if (moq_sampler_sample(smp, moq_model_logits(m), (size_t)V, scratch, ss, &id, &err) != MOQ_OK) { rc = cli_report(&err); break; }
        gen[produced] = id;
        if (moq_tokenizer_is_eos(tok, id)) break;
        const uint8_t *b = NULL;
        size_t bl = 0, pl = 0;
        if (id < moq_tokenizer_vocab_size(tok) && moq_tokenizer_decode_token(tok, id, &b, &bl, &err) == MOQ_OK) {
            for (size_t i = 0; i < bl; i += 256) {
                const size_t c = bl - i < 256 ? bl - i : 256;
                if (moq_utf8_stream_push(&us, b + i, c, piece, sizeof piece, &pl, &err) != MOQ_OK) break;
                if (json) {
                    if (out_len + pl + 1 > out_cap) {
                        char *nb = realloc(out, out_cap = (out_len + pl + 1) * 2);
                        if (!nb) { rc = MOQ_ERR_NOMEM; goto done_gen; }
                        out = nb;
                    }
                    memcpy(out + out_len, piece, pl);
                    out_len += pl;
                } else {
                    fwrite(piece, 1, pl, stdout);
                    fflush(stdout);
                }
            }
        }
        if (produced + 1 < max_tokens) {
            if (moq_model_decode(m, id, &err) != MOQ_OK) { rc = cli_report(&err); break; }
            n_dec++;
        }
    }
    {
        size_t pl = moq_utf8_stream_flush(&us, piece, sizeof piece);
        const double t2 = cli_now_s();
        const double pre_tps = (double)n_ids / (t1 - t0), dec_tps = n_dec ? (double)n_dec / (t2 - t1) : 0;
        const moq_model_timings lt = moq_model_load_timings(m);
        if (json) {
            memcpy(out + out_len, piece, pl < out_cap - out_len ? pl : 0);
            out_len += pl < out_cap - out_len ? pl : 0;
            printf("{\"architecture\":\"%s\",\"prompt_tokens\":%zu,\"generated_tokens\":%ld,\"text\":", moq_model_architecture(m), n_ids, produced);
            json_str(stdout, out, out_len);
            printf(",\"ids\":[");
            for (long i = 0; i < produced; i++) printf(i ? ",%d" : "%d", gen[i]);
            printf("],\"load_s\":{\"open\":%.4f,\"validate\":%.4f,\"pack\":%.4f},\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f}\n", lt.open_s,
                   lt.validate_s, lt.pack_s, pre_tps, dec_tps);
        } else {
            /* End the streamed text with its own line before the stats: stdout is buffered when it
             * is a pipe while stderr is not, so flush, or the stats line lands after "Paris." */
            fwrite(piece, 1, pl, stdout);
            putchar('\n');
            fflush(stdout);
            fprintf(stderr, "moq: prefill %zu tokens %.2f tok/s; decode %ld tokens %.2f tok/s\n", n_ids, pre_tps, n_dec, dec_tps);
        }
    }
done_gen:
    free(gen);
done:
    free(scratch), free(out), free(ids), free(text);
    moq_sampler_free(smp);
    moq_model_free(m);
    moq_tokenizer_free(tok);
    return rc;
}
