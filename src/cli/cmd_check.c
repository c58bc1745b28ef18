/* cmd_check.c — placeholder until the checker lands (next commit). */
#include "cli.h"

void cmd_check_help(FILE *out) { fprintf(out, "usage: moq check DIR [--values] [--json]\n"); }
int cmd_check(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "moq check: not implemented yet\n");
    return MOQ_ERR_UNSUPPORTED;
}
