/* cmd_check.c — `moq check DIR [--values] [--compat P] [--json]`: validates every module against its
 * scheme's tensor contract in one pass and lists every problem: missing or extra tensors, wrong
 * dtype or shape, config and tensors that disagree, fused shards with different algos or global
 * scales; --values also scans every scale tensor for NaN, Inf, zero and negative values. Exit 0
 * only when clean, else the status of the first problem. Tested by tests/config/test_check.c. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

#include "cli.h"
#include "config/modules.h"

void cmd_check_help(FILE *out) {
    fprintf(out,
            "usage: moq check DIR [--values] [--compat moq|vllm|sglang] [--json]\n\n"
            "Resolves every module of the checkpoint DIR (docs/COMPAT.md) and checks its tensors against\n"
            "the scheme's contract: names, dtypes, shapes in N, K and group size; config and tensors that\n"
            "disagree; fused shards (q/k/v, gate/up, w1/w3) with different schemes or global scales.\n"
            "Lists every problem as \"where: message\". Exit 0 only when clean.\n\n"
            "  --values    also scan every scale tensor for NaN, Inf, zero and negative values\n"
            "  --compat P  rules to follow: moq (default), vllm, sglang\n"
            "  --json      {\"path\", \"modules\", \"problems\": [{\"where\", \"message\", \"code\"}], \"clean\"}\n");
}

int cmd_check(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {"values", no_argument, NULL, 'v'},
                                         {"compat", required_argument, NULL, 'c'}, {NULL, 0, NULL, 0}};
    int json = 0, values = 0, ch;
    moq_compat prof = MOQ_COMPAT_MOQ;
    moq_error err = {0};
    optind = 1;
    while ((ch = getopt_long(argc, argv, "jvc:", opts, NULL)) != -1) {
        if (ch == 'j') json = 1;
        else if (ch == 'v') values = 1;
        else if (ch == 'c') {
            if (moq_compat_parse(optarg, &prof, &err) != MOQ_OK) return cli_report(&err);
        } else return cli_usage_error("check", "unknown option");
    }
    if (optind != argc - 1) return cli_usage_error("check", "expected one DIR");
    const char *path = argv[optind];
    moq_checkpoint *c = NULL;
    if (moq_checkpoint_open(&c, path, NULL, &err) != MOQ_OK) return cli_report(&err);
    moq_qconfig *q = NULL; /* no quantization config: every module is checked as unquantized */
    if (moq_checkpoint_has_qconfig(c) && moq_qconfig_open(&q, path, prof, &err) != MOQ_OK) {
        moq_checkpoint_free(c);
        return cli_report(&err);
    }
    moq_modules m;
    int rc = 0;
    if (moq_modules_build(&m, c, q, &err) != MOQ_OK || moq_modules_check(&m, c, q, values, &err) != MOQ_OK) {
        rc = cli_report(&err);
    } else {
        int layers = 0;
        for (int k = 0; k < m.n; k++) layers += m.mods[k].kind != MOQ_MOD_OTHER;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", path);
            cJSON_AddStringToObject(o, "compat", moq_compat_name(prof));
            cJSON_AddNumberToObject(o, "modules", layers);
            cJSON *ps = cJSON_AddArrayToObject(o, "problems");
            for (int i = 0; i < m.n_probs; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "where", m.probs[i].where);
                cJSON_AddStringToObject(p, "message", m.probs[i].msg);
                cJSON_AddStringToObject(p, "code", moq_status_str(m.probs[i].code));
                cJSON_AddItemToArray(ps, p);
            }
            cJSON_AddBoolToObject(o, "clean", m.n_probs == 0);
            char *s = cJSON_Print(o);
            printf("%s\n", s);
            cJSON_free(s);
            cJSON_Delete(o);
        } else {
            for (int i = 0; i < m.n_probs; i++) printf("%s: %s\n", m.probs[i].where, m.probs[i].msg);
            printf("%s: %d modules checked%s (%s), %d problem%s\n", path, layers, values ? " with values" : "",
                   q ? moq_qconfig_source(q) : "no quantization config", m.n_probs, m.n_probs == 1 ? "" : "s");
        }
        if (m.n_probs) rc = (int)m.probs[0].code;
    }
    moq_modules_free(&m);
    moq_qconfig_free(q);
    moq_checkpoint_free(c);
    return rc;
}
