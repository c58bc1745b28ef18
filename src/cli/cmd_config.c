/* cmd_config.c — `moq config PATH [--compat P] [--json]`: the normalized quantization config.
 * PATH is a checkpoint directory or one JSON file. Output keys (a contract; scripts use them):
 * source, quant_method, quant_algo, kv_cache_quant_algo, group_size, exclude_modules,
 * quantized_layers, moe_quant_algo (plus compat and notes). Exit 0, or the moq_status with
 * "moq: where: message" on stderr. Tested by tests/config/test_cli_config.c. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

#include "cli.h"

void cmd_config_help(FILE *out) {
    fprintf(out,
            "usage: moq config PATH [--compat moq|vllm|sglang] [--json]\n\n"
            "Reads the ModelOpt quantization config of PATH (a checkpoint directory: config.json's\n"
            "quantization_config, else hf_quant_config.json; or one JSON file) the way the chosen engine\n"
            "does (docs/COMPAT.md) and prints it normalized: source, quant_method, quant_algo,\n"
            "kv_cache_quant_algo, group_size, exclude_modules, quantized_layers, moe_quant_algo. When both\n"
            "files exist, says which one was used and every disagreement.\n\n"
            "  --compat P  rules to follow: moq (default), vllm, sglang\n"
            "  --json      one JSON object on stdout\n");
}

static cJSON *str_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

int cmd_config(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {"compat", required_argument, NULL, 'c'}, {NULL, 0, NULL, 0}};
    int json = 0, ch;
    moq_compat prof = MOQ_COMPAT_MOQ;
    moq_error err = {0};
    optind = 1;
    while ((ch = getopt_long(argc, argv, "jc:", opts, NULL)) != -1) {
        if (ch == 'j') json = 1;
        else if (ch == 'c') {
            if (moq_compat_parse(optarg, &prof, &err) != MOQ_OK) return cli_report(&err);
        } else return cli_usage_error("config", "unknown option");
    }
    if (optind != argc - 1) return cli_usage_error("config", "expected one PATH");
    moq_qconfig *q = NULL;
    if (moq_qconfig_open(&q, argv[optind], prof, &err) != MOQ_OK) return cli_report(&err);

    const int64_t gs = moq_qconfig_group_size(q);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "source", moq_qconfig_source(q));
        cJSON_AddStringToObject(o, "compat", moq_compat_name(prof));
        cJSON_AddStringToObject(o, "quant_method", moq_qconfig_quant_method(q));
        cJSON_AddStringToObject(o, "quant_algo", moq_qconfig_quant_algo(q));
        cJSON_AddItemToObject(o, "kv_cache_quant_algo", str_or_null(moq_qconfig_kv_cache_quant_algo(q)));
        if (gs) cJSON_AddNumberToObject(o, "group_size", (double)gs);
        else cJSON_AddNullToObject(o, "group_size");
        cJSON *ex = cJSON_AddArrayToObject(o, "exclude_modules");
        for (int i = 0; i < moq_qconfig_exclude_count(q); i++) cJSON_AddItemToArray(ex, cJSON_CreateString(moq_qconfig_exclude_at(q, i)));
        cJSON *ql = cJSON_AddObjectToObject(o, "quantized_layers");
        for (int i = 0; i < moq_qconfig_layer_count(q); i++) {
            const char *name, *algo;
            int64_t g;
            moq_qconfig_layer_at(q, i, &name, &algo, &g);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "quant_algo", algo);
            if (g) cJSON_AddNumberToObject(e, "group_size", (double)g);
            cJSON_AddItemToObject(ql, name, e);
        }
        cJSON_AddItemToObject(o, "moe_quant_algo", str_or_null(moq_qconfig_moe_quant_algo(q)));
        cJSON *notes = cJSON_AddArrayToObject(o, "notes");
        for (int i = 0; i < moq_qconfig_note_count(q); i++) cJSON_AddItemToArray(notes, cJSON_CreateString(moq_qconfig_note_at(q, i)));
        char *s = cJSON_Print(o);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        const char *kv = moq_qconfig_kv_cache_quant_algo(q), *moe = moq_qconfig_moe_quant_algo(q);
        printf("source               %s\n", moq_qconfig_source(q));
        printf("compat               %s\n", moq_compat_name(prof));
        printf("quant_method         %s\n", moq_qconfig_quant_method(q));
        printf("quant_algo           %s\n", moq_qconfig_quant_algo(q));
        printf("kv_cache_quant_algo  %s\n", kv ? kv : "null");
        if (gs) printf("group_size           %lld\n", (long long)gs);
        else printf("group_size           null\n");
        printf("moe_quant_algo       %s\n", moe ? moe : "null");
        printf("exclude_modules      %d\n", moq_qconfig_exclude_count(q));
        for (int i = 0; i < moq_qconfig_exclude_count(q); i++) printf("  %s\n", moq_qconfig_exclude_at(q, i));
        const int nl = moq_qconfig_layer_count(q);
        printf("quantized_layers     %d\n", nl);
        /* Counts per algo (files list up to tens of thousands of layers; --json has them all). */
        const char *algos[16];
        int counts[16] = {0}, na = 0;
        for (int i = 0; i < nl; i++) {
            const char *algo;
            moq_qconfig_layer_at(q, i, NULL, &algo, NULL);
            int k = 0;
            while (k < na && strcmp(algos[k], algo) != 0) k++;
            if (k == na && na < 16) algos[na++] = algo;
            if (k < 16) counts[k]++;
        }
        for (int k = 0; k < na; k++) printf("  %-20s %d\n", algos[k], counts[k]);
        for (int i = 0; i < moq_qconfig_note_count(q); i++) printf("note: %s\n", moq_qconfig_note_at(q, i));
    }
    moq_qconfig_free(q);
    return 0;
}
