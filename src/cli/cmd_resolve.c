/* cmd_resolve.c — `moq resolve PATH PREFIX --kind K [--packed NAME=S1,S2]... [--compat P] [--json]`:
 * prints {"prefix", "kind", "method", "algo", "excluded", "rule"} (a contract). A config error (such
 * as fused shards with different algos) exits non-zero with the message. Tested by
 * tests/config/test_cli_config.c. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cmd_resolve_help(FILE *out) {
    fprintf(out,
            "usage: moq resolve PATH PREFIX --kind linear|lm_head|moe|attention|embedding\n"
            "                   [--packed NAME=SHARD,SHARD]... [--compat moq|vllm|sglang] [--json]\n\n"
            "Decides which scheme the module PREFIX (runtime name, e.g. model.layers.0.self_attn.qkv_proj)\n"
            "gets under the config of PATH, and names the rule that decided (docs/COMPAT.md).\n\n"
            "  --kind K        layer kind (required)\n"
            "  --packed M=S,.. packed-modules mapping entry, e.g. qkv_proj=q_proj,k_proj,v_proj (repeatable)\n"
            "  --compat P      rules to follow: moq (default), vllm, sglang\n"
            "  --json          {\"prefix\", \"kind\", \"method\", \"algo\", \"excluded\", \"rule\"}\n");
}

#define MAX_PACKED 16
#define MAX_SHARDS 8

int cmd_resolve(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},         {"compat", required_argument, NULL, 'c'},
                                         {"kind", required_argument, NULL, 'k'},   {"packed", required_argument, NULL, 'p'},
                                         {NULL, 0, NULL, 0}};
    int json = 0, ch, n_packed = 0, rc = 0;
    bool have_kind = false;
    moq_compat prof = MOQ_COMPAT_MOQ;
    moq_layer_kind kind = MOQ_KIND_LINEAR;
    moq_error err = {0};
    moq_packed packed[MAX_PACKED];
    char *packed_text[MAX_PACKED];
    const char *shard_ptrs[MAX_PACKED][MAX_SHARDS];
    optind = 1;
    while ((ch = getopt_long(argc, argv, "jc:k:p:", opts, NULL)) != -1) {
        if (ch == 'j') json = 1;
        else if (ch == 'c') {
            if (moq_compat_parse(optarg, &prof, &err) != MOQ_OK) rc = cli_report(&err);
        } else if (ch == 'k') {
            if (moq_layer_kind_parse(optarg, &kind, &err) != MOQ_OK) rc = cli_report(&err);
            have_kind = true;
        } else if (ch == 'p') {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1] || n_packed == MAX_PACKED) {
                rc = cli_usage_error("resolve", "--packed expects NAME=SHARD,SHARD (at most %d)", MAX_PACKED);
                break;
            }
            char *t = strdup(optarg);
            if (!t) return MOQ_ERR_NOMEM;
            packed_text[n_packed] = t;
            t[eq - optarg] = 0;
            moq_packed *p = &packed[n_packed++];
            p->name = t;
            p->n_shards = 0;
            for (char *s = strtok(t + (eq - optarg) + 1, ","); s && p->n_shards < MAX_SHARDS; s = strtok(NULL, ","))
                shard_ptrs[n_packed - 1][p->n_shards++] = s;
            p->shards = shard_ptrs[n_packed - 1];
        } else rc = cli_usage_error("resolve", "unknown option");
        if (rc) break;
    }
    if (!rc && optind != argc - 2) rc = cli_usage_error("resolve", "expected PATH and PREFIX");
    if (!rc && !have_kind) rc = cli_usage_error("resolve", "--kind is required");
    moq_qconfig *q = NULL;
    moq_resolution res;
    if (!rc && moq_qconfig_open(&q, argv[optind], prof, &err) != MOQ_OK) rc = cli_report(&err);
    if (!rc && moq_resolve(q, argv[optind + 1], kind, packed, n_packed, &res, &err) != MOQ_OK) rc = cli_report(&err);
    if (!rc) {
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prefix", argv[optind + 1]);
            cJSON_AddStringToObject(o, "kind", moq_layer_kind_name(kind));
            cJSON_AddStringToObject(o, "method", res.method);
            if (res.algo) cJSON_AddStringToObject(o, "algo", res.algo);
            else cJSON_AddNullToObject(o, "algo");
            cJSON_AddBoolToObject(o, "excluded", res.excluded);
            cJSON_AddStringToObject(o, "rule", res.rule);
            char *s = cJSON_Print(o);
            printf("%s\n", s);
            cJSON_free(s);
            cJSON_Delete(o);
        } else {
            printf("prefix    %s\nkind      %s\nmethod    %s\nalgo      %s\nexcluded  %s\nrule      %s\n", argv[optind + 1],
                   moq_layer_kind_name(kind), res.method, res.algo ? res.algo : "null", res.excluded ? "true" : "false", res.rule);
        }
    }
    moq_qconfig_free(q);
    for (int i = 0; i < n_packed; i++) free(packed_text[i]);
    return rc;
}
