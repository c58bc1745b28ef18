/* main.c — `moq COMMAND ...`: dispatch over the command table. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "model/model.h"

/* One row per command, in the order `moq --help` lists them. */
static const cli_cmd commands[] = {
    {"inspect", "show a checkpoint: architecture, shards, tensors by dtype, quantization", cmd_inspect, cmd_inspect_help, NULL},
    {"convert-gguf", "convert a llama.cpp GGUF model into a Hugging Face checkpoint (bf16 or f32)", cmd_convert_gguf, cmd_convert_gguf_help, NULL},
    {"synth",   "write a small synthetic ModelOpt checkpoint (demo and tests)", cmd_synth, cmd_synth_help, NULL},
    {"quantize", "write a ModelOpt checkpoint from a BF16/F16/F32 one (calibrated static scales)", cmd_quantize, cmd_quantize_help, NULL},
    {"tokenize", "encode text (or a chat) with a tokenizer.json, or decode ids", cmd_tokenize, cmd_tokenize_help, NULL},
    {"errors",  "list exit codes and what they mean (--markdown for docs/ERRORS.md)", cmd_errors, cmd_errors_help, NULL},
    {"config",  "print the normalized ModelOpt quantization config (--compat vllm|sglang)", cmd_config, cmd_config_help, NULL},
    {"resolve", "which scheme one module gets, and the rule that decided", cmd_resolve, cmd_resolve_help, NULL},
    {"check",   "validate every module against its scheme's tensor contract", cmd_check, cmd_check_help, NULL},
    {"bench",   "measure a linear layer, a MoE layer or a whole model against the bandwidth bound", cmd_bench, cmd_bench_help, cmd_bench_help_sub},
    {"run",     "generate text with a checkpoint (streams tokens; load and tok/s on stderr)", cmd_run, cmd_run_help, NULL},
    {"serve",   "serve a checkpoint over an OpenAI-compatible HTTP API (continuous batching)", cmd_serve, cmd_serve_help, NULL},
    {"eval",    "perplexity over a text; with --ref, KL divergence and top-1 agreement", cmd_eval, cmd_eval_help, NULL},
};
static const size_t n_commands = sizeof commands / sizeof commands[0];

static void usage(FILE *out) {
    fprintf(out, "moq %s — load NVIDIA ModelOpt quantized checkpoints and run them\n\n", moq_version_string());
    fprintf(out, "usage: moq [--version] [--help] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < n_commands; i++) fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`moq COMMAND --help` shows a command's options. Exit status: 0 on success, else the\n"
                 "moq_status code of the error (`moq errors`). `moq help archs` lists the supported\n"
                 "architectures (config.json architectures[0]).\n");
}

int cli_report(const moq_error *e) {
    char buf[1024];
    moq_error_format(e, buf, sizeof buf);
    fprintf(stderr, "moq: %s\n", buf);
    return e->code ? (int)e->code : 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moq %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see `moq %s --help`)\n", cmd);
    va_end(ap);
    return MOQ_ERR_INVALID_ARG;
}

const char *cli_bytes(unsigned long long n, char *buf, size_t len) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, len, "%llu B", n);
    else snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

int cli_stderr_is_tty(void) { return isatty(2); }

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return MOQ_ERR_INVALID_ARG;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("moq %s (cpu: %s)\n", moq_version_string(), moq_cpu_features_str());
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        if (argc > 2 && strcmp(argv[2], "archs") == 0) { /* every config.json architectures[0] that `moq run` accepts */
            for (size_t i = 0; moq_model_arch_name(i); i++) printf("%s\n", moq_model_arch_name(i));
            return 0;
        }
        if (argc > 2)
            for (size_t i = 0; i < n_commands; i++)
                if (strcmp(argv[2], commands[i].name) == 0) {
                    if (commands[i].help_sub && argc > 3) commands[i].help_sub(stdout, argv[3]);
                    else commands[i].help(stdout);
                    return 0;
                }
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < n_commands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        for (int a = 2; a < argc; a++) {
            if (strcmp(argv[a], "--") == 0) break;
            if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
                /* `moq bench moe --help`: the subcommand's own usage */
                if (commands[i].help_sub && a > 2 && argv[2][0] != '-') commands[i].help_sub(stdout, argv[2]);
                else commands[i].help(stdout);
                return 0;
            }
        }
        return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "moq: unknown command \"%s\"; commands are:", argv[1]);
    for (size_t i = 0; i < n_commands; i++) fprintf(stderr, " %s", commands[i].name);
    fprintf(stderr, "\n");
    return MOQ_ERR_INVALID_ARG;
}
