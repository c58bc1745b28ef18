/* cmd_check.c — `moq check DIR [--values] [--compat P] [--json]`: validates every module against its
 * scheme's tensor contract in one pass and lists every problem: missing or extra tensors, wrong
 * dtype or shape, config and tensors that disagree, fused shards with different algos or global
 * scales; --values also scans every scale tensor for NaN, Inf, zero and negative values and every
 * other tensor's payload for NaN and Inf (e4m3 0x7F/0xFF, e8m0 0xFF, bf16/f16/f32). Exit 0
 * only when clean, else the status of the first problem. Tested by tests/config/test_check.c. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

#include "cli.h"
#include "config/modules.h"
#include "model/model.h"

int cli_arch_unsupported(const moq_checkpoint *c, char *msg, size_t n) {
    const moq_arch *a = moq_checkpoint_arch(c);
    if (a && moq_model_architecture_supported(a->architecture)) { /* and what run refuses in its config fields */
        moq_error e = {0};
        if (moq_model_config_check(c, &e) == MOQ_OK) return 0;
        const bool cfg = strcmp(e.where, "config.json") == 0; /* the callers print "config.json: " first */
        snprintf(msg, n, "%s%s%s (`moq run` refuses it)", cfg ? "" : e.where, cfg ? "" : ": ", e.msg);
        return 1;
    }
    if (!a) return 0;
    /* The same words as `moq run`'s refusal (model.c), plus where the name comes from. */
    char head[256];
    snprintf(head, sizeof head, MOQ_ARCH_UNSUPPORTED_FMT, a->architecture, moq_model_arch_count());
    snprintf(msg, n, "%s (architectures[0]%s; `moq run` refuses it)", head, a->architecture[0] ? "" : " is missing");
    return 1;
}

void cmd_check_help(FILE *out) {
    fprintf(out,
            "usage: moq check DIR [--values] [--compat moq|vllm|sglang] [--json]\n\n"
            "Resolves every module of the checkpoint DIR (docs/COMPAT.md) and checks its tensors against\n"
            "the scheme's contract: names, dtypes, shapes in N, K and group size; config and tensors that\n"
            "disagree; fused shards (q/k/v, gate/up, w1/w3) with different schemes or global scales.\n"
            "Lists every problem as \"where: message\". Exit 0 only when clean.\n\n"
            "  --values    also scan every scale tensor for NaN, Inf, zero and negative values, and every\n"
            "              weight payload for NaN and Inf (e4m3 codes 0x7F/0xFF, e8m0 0xFF, bf16/f16/f32);\n"
            "              names the tensor and the first index (progress and timings on a TTY)\n"
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
    const double t0 = cli_now_s();
    if (moq_modules_build(&m, c, q, &err) != MOQ_OK || moq_modules_check(&m, c, q, values, &err) != MOQ_OK) {
        rc = cli_report(&err);
    } else {
        const double t1 = cli_now_s();
        if (values) { /* progress and timings on a TTY only: stderr stays empty for scripts */
            const int tty = cli_stderr_is_tty();
            moq_modules_check_payloads(&m, c, tty ? cli_progress_bar : NULL, NULL);
            if (tty) fprintf(stderr, "moq: check %.3f s (contracts and scales %.3f, weight values %.3f)\n", cli_now_s() - t0, t1 - t0, cli_now_s() - t1);
        }
        /* An architecture `moq run` refuses is one more problem (listed first); the tensors are
         * still checked, as inspect does. */
        char arch_msg[768];
        const int arch_bad = cli_arch_unsupported(c, arch_msg, sizeof arch_msg), n_probs = m.n_probs + arch_bad;
        int layers = 0;
        for (int k = 0; k < m.n; k++) layers += m.mods[k].kind != MOQ_MOD_OTHER;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", path);
            cJSON_AddStringToObject(o, "compat", moq_compat_name(prof));
            cJSON_AddNumberToObject(o, "modules", layers);
            cJSON *ps = cJSON_AddArrayToObject(o, "problems");
            if (arch_bad) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "where", "config.json");
                cJSON_AddStringToObject(p, "message", arch_msg);
                cJSON_AddStringToObject(p, "code", moq_status_str(MOQ_ERR_UNSUPPORTED));
                cJSON_AddItemToArray(ps, p);
            }
            for (int i = 0; i < m.n_probs; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "where", m.probs[i].where);
                cJSON_AddStringToObject(p, "message", m.probs[i].msg);
                cJSON_AddStringToObject(p, "code", moq_status_str(m.probs[i].code));
                cJSON_AddItemToArray(ps, p);
            }
            cJSON *ns = cJSON_AddArrayToObject(o, "notes");
            for (int i = 0; i < m.notes.n; i++) cJSON_AddItemToArray(ns, cJSON_CreateString(moq_notes_at(&m.notes, i)));
            cJSON_AddBoolToObject(o, "clean", n_probs == 0);
            char *s = cJSON_Print(o);
            printf("%s\n", s);
            cJSON_free(s);
            cJSON_Delete(o);
        } else {
            if (arch_bad) printf("config.json: %s\n", arch_msg);
            for (int i = 0; i < m.n_probs; i++) printf("%s: %s\n", m.probs[i].where, m.probs[i].msg);
            for (int i = 0; i < m.notes.n; i++) printf("note: %s\n", moq_notes_at(&m.notes, i));
            printf("%s: %d modules checked%s (%s), %d problem%s\n", path, layers, values ? " with values" : "",
                   q ? moq_qconfig_source(q) : "no quantization config", n_probs, n_probs == 1 ? "" : "s");
        }
        if (n_probs) rc = arch_bad ? (int)MOQ_ERR_UNSUPPORTED : (int)m.probs[0].code;
    }
    moq_modules_free(&m);
    moq_qconfig_free(q);
    moq_checkpoint_free(c);
    return rc;
}
