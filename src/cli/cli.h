/* cli.h — the command table and the few helpers every command shares. src/cli/ is the only place
 * that prints or exits (STYLE.md §12). Exit codes are moq_status values (docs/ERRORS.md). */
#ifndef MOQ_CLI_H
#define MOQ_CLI_H

#include <stdio.h>

#include "moq.h"

typedef struct cli_cmd {
    const char *name;
    const char *summary;                 /* one line for `moq --help`           */
    int (*run)(int argc, char **argv);   /* argv[0] is the command name          */
    void (*help)(FILE *out);             /* full usage for `moq CMD --help`      */
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
int  cmd_synth(int argc, char **argv);
void cmd_synth_help(FILE *out);
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
int  cmd_bench(int argc, char **argv);
void cmd_bench_help(FILE *out);

#endif
