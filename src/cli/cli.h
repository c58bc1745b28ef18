/* cli.h — the command table and the few helpers every command shares. src/cli/ is the only place
 * that prints or exits (STYLE.md §12). Exit codes are moq_status values (docs/ERRORS.md). */
#ifndef MOQ_CLI_H
#define MOQ_CLI_H

#include <stdio.h>

#include "kernels/kernels.h"
#include "moq.h"

typedef struct cli_cmd {
    const char *name;
    const char *summary;                 /* one line for `moq --help`           */
    int (*run)(int argc, char **argv);   /* argv[0] is the command name          */
    void (*help)(FILE *out);             /* full usage for `moq CMD --help`      */
    void (*help_sub)(FILE *out, const char *sub); /* `moq CMD SUB --help`, or NULL     */
} cli_cmd;

/* Prints "moq: where: msg" on stderr and returns the exit code (the status). */
int cli_report(const moq_error *e);
/* Prints "moq CMD: message" on stderr for usage errors; returns MOQ_ERR_INVALID_ARG. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Human-readable byte count ("1.50 GiB") into buf. */
const char *cli_bytes(unsigned long long n, char *buf, size_t len);
/* True when stderr is a terminal (progress bars only then). */
int cli_stderr_is_tty(void);

int  cmd_inspect(int argc, char **argv);
void cmd_inspect_help(FILE *out);
int  cmd_convert_gguf(int argc, char **argv);
void cmd_convert_gguf_help(FILE *out);
int  cmd_synth(int argc, char **argv);
void cmd_synth_help(FILE *out);
int  cmd_quantize(int argc, char **argv);
void cmd_quantize_help(FILE *out);
int  cmd_tokenize(int argc, char **argv);
void cmd_tokenize_help(FILE *out);
int  cmd_errors(int argc, char **argv);
void cmd_errors_help(FILE *out);
/* quantization config, resolution and checks (tests/config) */
int  cmd_config(int argc, char **argv);
void cmd_config_help(FILE *out);
int  cmd_resolve(int argc, char **argv);
void cmd_resolve_help(FILE *out);
int  cmd_check(int argc, char **argv);
void cmd_check_help(FILE *out);
/* 1 when config.json names an architecture `moq run` refuses; msg gets "architecture ... supported: ..."
 * (where: config.json). 0 when supported or when there is no config.json. (cmd_check.c) */
int  cli_arch_unsupported(const moq_checkpoint *c, char *msg, size_t n);
int  cmd_bench(int argc, char **argv);
void cmd_bench_help(FILE *out);
/* `moq bench SUB --help`: the usage of linear, moe or model alone (all three for anything else). */
void cmd_bench_help_sub(FILE *out, const char *sub);
/* --algo of `moq bench linear|moe`: a kernel pair name or a ModelOpt quant_algo, any case; sets the
 * pair and (moe != NULL) the expert format (MOQ_MOE_FMT_COUNT when the pair has none). -1 when
 * unknown. cli_bench_algo_list: "nvfp4_w4a4 (NVFP4), ..." (moe_only: pairs with an expert format). */
int  cli_bench_algo(const char *name, moq_pair_id *pair, moq_moe_format *moe);
const char *cli_bench_algo_list(char *buf, size_t n, int moe_only);
/* models: run, eval, bench model (src/cli/cmd_run.c, cmd_eval.c, cmd_bench_model.c) */
int  cmd_run(int argc, char **argv);
void cmd_run_help(FILE *out);
int  cmd_serve(int argc, char **argv);
void cmd_serve_help(FILE *out);
int  cmd_eval(int argc, char **argv);
void cmd_eval_help(FILE *out);
int  cmd_bench_model(int argc, char **argv);   /* `moq bench model DIR`, dispatched by cmd_bench */
double cli_now_s(void);
/* moq_progress_fn drawing "phase [====    ] done/total" on stderr (call it only on a TTY). */
void cli_progress_bar(void *user, const char *phase, uint64_t done, uint64_t total);
/* Opens a model (progress bar on a TTY, load timings on stderr unless quiet); 0 or an exit code. */
int  cli_model_open(moq_model **m, const char *dir, moq_model_opts *o, int quiet);
/* The model options run, eval and bench share: ch 'T' --threads, 'C' --ctx, 'K' --kv-scales-default,
 * 'P' --compat, 'V' --kv-cache, CLI_OPT_NVFP4_AS --nvfp4-as. 0 or an exit code. */
#define CLI_OPT_NVFP4_AS 0x100
/* --tp G, --ep, --tp-backend cpu|nccl (tensor / expert parallelism), also parsed by cli_parse_model_opt */
#define CLI_OPT_TP 0x101
#define CLI_OPT_EP 0x102
#define CLI_OPT_TP_BACKEND 0x103
#define CLI_TP_OPTIONS {"tp", 1, 0, CLI_OPT_TP}, {"ep", 0, 0, CLI_OPT_EP}, {"tp-backend", 1, 0, CLI_OPT_TP_BACKEND}
int  cli_parse_model_opt(int ch, const char *arg, moq_model_opts *o, const char *cmd);
/* Whole file (or "-" = standard input), NUL-terminated; NULL when unreadable. Caller frees. */
char *cli_read_file(const char *path, size_t *len);
/* DRAM read bandwidth in GB/s (cmd_bench.c). */
double cli_dram_read_gbs(int threads);
/* `moq bench moe` (cmd_bench_moe.c), reached through cmd_bench. */
int  cmd_bench_moe(int argc, char **argv);
void cmd_bench_moe_help(FILE *out);
/* DRAM read bandwidth in GB/s: threads sum a 1 GiB buffer, best of 3 (cmd_bench.c). */
double dram_read_gbs(int threads);

#endif
