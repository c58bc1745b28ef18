/* cmd_inspect.c — `moq inspect PATH [--json]`: architecture, shards, tensors by dtype, and the
 * quantization sections found (raw, as written). PATH is a checkpoint directory or one
 * .safetensors file. On a bad checkpoint: one "moq: where: message" line, exit = status; on a
 * checkpoint that opens but breaks a scheme contract: the report, then that line for the first
 * problem (tests/e2e/test_malformed.c). */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "config/modules.h"
#include "model/model.h"
#include "scheme/load.h"

void cmd_inspect_help(FILE *out) {
    fprintf(out,
            "usage: moq inspect PATH [--compat moq|vllm|sglang] [--kernels [--nvfp4-as fp8|fp8-channel]] [--json]\n\n"
            "Opens a checkpoint directory (config.json, hf_quant_config.json, safetensors shards) or a single\n"
            ".safetensors file, validates every header, and prints: the architecture from config.json, the\n"
            "shards, the tensor count and bytes per dtype, and the quantization sections found (raw values).\n"
            "Then one row per module (tensors grouped by name up to the last dot): kind, method and the rule\n"
            "that decided it (docs/COMPAT.md), tensors found against the scheme's contract, bytes; then the\n"
            "excluded modules and the count per method. No tensor data is read.\n\n"
            "  --compat P  resolution rules: moq (default), vllm, sglang\n"
            "  --kernels   also load every linear module (fused q/k/v and gate/up shards together) as moq run\n"
            "              would and print the kernel chosen and the loader's notes (\"keeps per-shard scales\",\n"
            "              \"requantized ...\"), or the error; validates each layer's scales and chooses its kernel\n"
            "              without packing (one layer at a time: memory stays near one layer's weights)\n"
            "  --nvfp4-as A  with --kernels: load NVFP4 linears re-quantized to FP8 as `moq run --nvfp4-as A` does\n"
            "  --json      print the same as one JSON object on stdout\n");
}

/* The raw quantization fields of hf_quant_config.json ("quantization" object) and of config.json's
 * quantization_config, as written; NULL when absent or not an object. */
static cJSON *quant_sections(const moq_checkpoint *c) {
    cJSON *out = cJSON_CreateObject();
    static const char *const keys[] = {"quant_method", "quant_algo", "kv_cache_quant_algo", "moe_quant_algo", "group_size"};
    const char *text = moq_checkpoint_json_text(c, "hf_quant_config.json");
    if (text) {
        cJSON *j = cJSON_Parse(text);
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quantization");
        cJSON *o = cJSON_AddObjectToObject(out, "hf_quant_config.json");
        const cJSON *prod = cJSON_GetObjectItemCaseSensitive(j, "producer");
        const cJSON *pn = cJSON_GetObjectItemCaseSensitive(prod, "name"), *pv = cJSON_GetObjectItemCaseSensitive(prod, "version");
        if (cJSON_IsString(pn)) cJSON_AddStringToObject(o, "producer", pn->valuestring);
        if (cJSON_IsString(pv)) cJSON_AddStringToObject(o, "producer_version", pv->valuestring);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, keys[i]);
            if (v) cJSON_AddItemToObject(o, keys[i], cJSON_Duplicate(v, 1));
        }
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(q, "exclude_modules");
        if (cJSON_IsArray(ex)) cJSON_AddNumberToObject(o, "exclude_modules", cJSON_GetArraySize(ex));
        const cJSON *ql = cJSON_GetObjectItemCaseSensitive(q, "quantized_layers");
        if (cJSON_IsObject(ql)) cJSON_AddNumberToObject(o, "quantized_layers", cJSON_GetArraySize(ql));
        cJSON_Delete(j);
    }
    text = moq_checkpoint_json_text(c, "config.json");
    if (text) {
        cJSON *j = cJSON_Parse(text);
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
        if (cJSON_IsObject(q)) {
            cJSON *o = cJSON_AddObjectToObject(out, "config.json");
            for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, keys[i]);
                if (v) cJSON_AddItemToObject(o, keys[i], cJSON_Duplicate(v, 1));
            }
            const cJSON *kv = cJSON_GetObjectItemCaseSensitive(q, "kv_cache_scheme");
            if (kv) cJSON_AddItemToObject(o, "kv_cache_scheme", cJSON_Duplicate(kv, 1));
            const cJSON *ig = cJSON_GetObjectItemCaseSensitive(q, "ignore");
            if (cJSON_IsArray(ig)) cJSON_AddNumberToObject(o, "ignore", cJSON_GetArraySize(ig));
        }
        cJSON_Delete(j);
    }
    return out;
}

/* --kernels: the kernel and loader notes (or the error) of one module, loaded through
 * moq_linear_layer_open with plan_only (the kernel is chosen as `moq run` chooses it, no layout is
 * built); the shards of a fused projection are loaded together and share the result. */
typedef struct mod_kernel {
    char kernel[96];
    char notes[1024];
} mod_kernel;

static void load_kernel(const moq_checkpoint *c, const moq_qconfig *q, const moq_module *md, const moq_linear_opts *lo, mod_kernel *out) {
    int n_groups;
    const moq_packed *groups = moq_modules_fused_groups(&n_groups);
    const char *dot = strrchr(md->name, '.'), *last = dot ? dot + 1 : md->name;
    const size_t plen = (size_t)(last - md->name);
    char prefix[600], nm[700];
    snprintf(prefix, sizeof prefix, "%s", md->name);
    for (int g = 0; g < n_groups; g++) {
        bool member = false, all = true;
        for (int s = 0; s < groups[g].n_shards; s++) {
            member |= strcmp(groups[g].shards[s], last) == 0;
            snprintf(nm, sizeof nm, "%.*s%s.weight", (int)plen, md->name, groups[g].shards[s]);
            all &= moq_checkpoint_tensor(c, nm) != NULL;
        }
        if (member && all) snprintf(prefix, sizeof prefix, "%.*s%s", (int)plen, md->name, groups[g].name);
    }
    static char cached[600];
    static mod_kernel cached_k;
    if (strcmp(prefix, md->name) != 0 && strcmp(prefix, cached) == 0) {
        *out = cached_k;
        return;
    }
    moq_error e = {0};
    moq_linear_layer *l = NULL;
    const moq_layer_kind kind = md->kind == MOQ_MOD_LM_HEAD ? MOQ_KIND_LM_HEAD : MOQ_KIND_LINEAR;
    out->notes[0] = 0;
    if (moq_linear_layer_open(&l, c, q, prefix, kind, groups, n_groups, lo, &e) != MOQ_OK) {
        snprintf(out->kernel, sizeof out->kernel, "error");
        moq_error_format(&e, out->notes, sizeof out->notes);
    } else {
        snprintf(out->kernel, sizeof out->kernel, "%s", moq_linear_layer_kernel_name(l));
        size_t o = 0;
        for (int i = 0; i < moq_linear_layer_warning_count(l) && o < sizeof out->notes; i++)
            o += (size_t)snprintf(out->notes + o, sizeof out->notes - o, "%s%s", i ? "; " : "", moq_linear_layer_warning(l, i));
    }
    moq_linear_layer_drop_canonical(l, true); /* the pages this layer read leave the resident set */
    moq_linear_layer_free(l);
    snprintf(cached, sizeof cached, "%s", prefix);
    cached_k = *out;
}

/* Which config.json keys hold the dense MLP's and a routed expert's intermediate size, per
 * model_type (top level, else text_config): one row per family whose names differ from the
 * Qwen/DeepSeek pair, which the last row is. A family without moe_intermediate_size sizes its
 * experts by intermediate_size (model.c reads it so). */
typedef struct inter_row {
    const char *model_type, *dense, *expert;
} inter_row;
static const inter_row inter_rows[] = {
    {"llama4",      "intermediate_size_mlp", "intermediate_size"}, /* Llama4ForConditionalGeneration */
    {"llama4_text", "intermediate_size_mlp", "intermediate_size"},
    {"gpt_oss",     "intermediate_size",     "intermediate_size"},
    {"mixtral",     "intermediate_size",     "intermediate_size"},
    {NULL,          "intermediate_size",     "moe_intermediate_size"},
};

static int64_t config_int(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v) v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "text_config"), key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* The dense MLP and routed expert intermediate sizes by the table above. */
static void intermediate_sizes(const moq_checkpoint *c, const moq_arch *a, int64_t *dense, int64_t *expert) {
    const inter_row *r = inter_rows;
    while (r->model_type && strcmp(r->model_type, a->model_type) != 0) r++;
    const char *text = moq_checkpoint_json_text(c, "config.json");
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    *dense = config_int(cfg, r->dense);
    *expert = config_int(cfg, r->expert);
    if (!*expert) *expert = config_int(cfg, "intermediate_size");
    cJSON_Delete(cfg);
}

static cJSON *arch_json(const moq_checkpoint *c, const moq_arch *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "architecture", a->architecture);
    cJSON_AddStringToObject(o, "model_type", a->model_type);
    cJSON_AddStringToObject(o, "dtype", a->torch_dtype);
#define I(k) cJSON_AddNumberToObject(o, #k, (double)a->k)
    I(hidden_size); I(num_hidden_layers); I(num_attention_heads); I(num_key_value_heads); I(head_dim);
    I(intermediate_size); I(moe_intermediate_size); I(num_experts); I(num_experts_per_tok); I(vocab_size);
    I(max_position_embeddings); I(rope_theta); I(rms_norm_eps);
#undef I
    cJSON_AddStringToObject(o, "rope_theta_key", a->rope_theta_key);
    double td;
    const char *cls;
    if (!a->rope_theta_key[0] && moq_model_rope_theta_default(a->architecture, &td, &cls)) {
        cJSON_AddNumberToObject(o, "rope_theta_default", td);
        cJSON_AddStringToObject(o, "rope_theta_default_from", cls);
    }
    cJSON_AddStringToObject(o, "rope_scaling_type", a->rope_scaling_type);
    cJSON_AddNumberToObject(o, "rope_scaling_factor", a->rope_scaling_factor);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", a->tie_word_embeddings);
    int64_t dense, expert;
    intermediate_sizes(c, a, &dense, &expert);
    cJSON_AddNumberToObject(o, "dense_intermediate", (double)dense);
    if (a->num_experts) cJSON_AddNumberToObject(o, "expert_intermediate", (double)expert);
    return o;
}

int cmd_inspect(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {"compat", required_argument, NULL, 'c'},
                                         {"kernels", no_argument, NULL, 'k'}, {"nvfp4-as", required_argument, NULL, CLI_OPT_NVFP4_AS},
                                         {NULL, 0, NULL, 0}};
    int json = 0, kernels = 0, ch;
    moq_model_opts as_opts = moq_model_opts_default(); /* only nvfp4_as is used */
    moq_compat prof = MOQ_COMPAT_MOQ;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "jc:", opts, NULL)) != -1) {
        if (ch == 'j') json = 1;
        else if (ch == 'k') kernels = 1;
        else if (ch == CLI_OPT_NVFP4_AS) {
            const int rc = cli_parse_model_opt(ch, optarg, &as_opts, "inspect");
            if (rc) return rc;
        }
        else if (ch == 'c') {
            moq_error e = {0};
            if (moq_compat_parse(optarg, &prof, &e) != MOQ_OK) return cli_report(&e);
        } else return cli_usage_error("inspect", "unknown option");
    }
    if (optind != argc - 1) return cli_usage_error("inspect", "expected one PATH");
    const char *path = argv[optind];

    moq_error err = {0};
    moq_checkpoint *c = NULL;
    if (moq_checkpoint_open(&c, path, NULL, &err) != MOQ_OK) return cli_report(&err);

    unsigned long long dt_bytes[MOQ_DT_COUNT] = {0}, total = 0;
    size_t dt_count[MOQ_DT_COUNT] = {0};
    const size_t nt = moq_checkpoint_tensor_count(c);
    for (size_t i = 0; i < nt; i++) {
        const moq_tensor *t = moq_checkpoint_tensor_at(c, i);
        dt_bytes[t->dtype] += t->nbytes;
        dt_count[t->dtype]++;
        total += t->nbytes;
    }
    const moq_arch *a = moq_checkpoint_arch(c);
    cJSON *quant = quant_sections(c);
    /* Per-module rows (the config resolved with the chosen rules). */
    moq_qconfig *q = NULL;
    moq_modules mods = {0};
    if (moq_checkpoint_has_qconfig(c) && moq_qconfig_open(&q, path, prof, &err) != MOQ_OK) {
        cJSON_Delete(quant);
        moq_checkpoint_free(c);
        return cli_report(&err);
    }
    if (moq_modules_build(&mods, c, q, &err) != MOQ_OK || moq_modules_check(&mods, c, q, false, &err) != MOQ_OK) {
        cJSON_Delete(quant);
        moq_modules_free(&mods);
        moq_qconfig_free(q);
        moq_checkpoint_free(c);
        return cli_report(&err);
    }
    const char *mnames[32];
    int mcount[32] = {0}, nm = 0, n_excl = 0;
    for (int k = 0; k < mods.n; k++) {
        const moq_module *md = &mods.mods[k];
        if (md->kind == MOQ_MOD_OTHER) continue;
        n_excl += md->res.excluded;
        int i = 0;
        while (i < nm && strcmp(mnames[i], md->res.method) != 0) i++;
        if (i == nm && nm < 32) mnames[nm++] = md->res.method;
        if (i < 32) mcount[i]++;
    }
    char b1[32], arch_msg[768];
    /* Informational: inspect reads any architecture, but says when `moq run` would refuse it. */
    const int arch_bad = cli_arch_unsupported(c, arch_msg, sizeof arch_msg);
    mod_kernel *mk = kernels ? calloc((size_t)mods.n + 1, sizeof *mk) : NULL;
    moq_linear_opts lo = moq_linear_opts_default();
    lo.nvfp4_as = as_opts.nvfp4_as;
    lo.plan_only = true; /* choose, never pack (issue 14) */
    for (int k = 0; mk && k < mods.n; k++) {
        const moq_module *md = &mods.mods[k];
        if (md->kind == MOQ_MOD_LINEAR || md->kind == MOQ_MOD_LM_HEAD) load_kernel(c, q, md, &lo, &mk[k]);
    }

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", path);
        if (a) cJSON_AddItemToObject(o, "architecture", arch_json(c, a));
        cJSON *sh = cJSON_AddArrayToObject(o, "shards");
        for (int i = 0; i < moq_checkpoint_shard_count(c); i++) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddStringToObject(s, "name", moq_checkpoint_shard_name(c, i));
            cJSON_AddNumberToObject(s, "tensors", moq_checkpoint_shard_tensor_count(c, i));
            cJSON_AddNumberToObject(s, "bytes", (double)moq_checkpoint_shard_size(c, i));
            cJSON_AddItemToArray(sh, s);
        }
        cJSON_AddNumberToObject(o, "tensors", (double)nt);
        cJSON_AddNumberToObject(o, "tensor_bytes", (double)total);
        cJSON *dts = cJSON_AddObjectToObject(o, "dtypes");
        for (int d = 0; d < MOQ_DT_COUNT; d++) {
            if (!dt_count[d]) continue;
            cJSON *e = cJSON_AddObjectToObject(dts, moq_dtype_name((moq_dtype)d));
            cJSON_AddNumberToObject(e, "tensors", (double)dt_count[d]);
            cJSON_AddNumberToObject(e, "bytes", (double)dt_bytes[d]);
        }
        cJSON_AddItemToObject(o, "quantization", quant);
        quant = NULL;
        cJSON *ms = cJSON_AddArrayToObject(o, "modules");
        cJSON *ex = cJSON_AddArrayToObject(o, "excluded");
        for (int k = 0; k < mods.n; k++) {
            const moq_module *md = &mods.mods[k];
            if (md->kind == MOQ_MOD_OTHER) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", md->name);
            cJSON_AddStringToObject(e, "kind", moq_module_kind_name(md->kind));
            cJSON_AddStringToObject(e, "method", md->res.method);
            if (md->res.algo) cJSON_AddStringToObject(e, "algo", md->res.algo);
            else cJSON_AddNullToObject(e, "algo");
            cJSON_AddBoolToObject(e, "excluded", md->res.excluded);
            cJSON_AddStringToObject(e, "rule", md->res.rule);
            cJSON_AddNumberToObject(e, "tensors", md->n_tensors);
            cJSON_AddNumberToObject(e, "contract_found", md->n_found);
            cJSON_AddNumberToObject(e, "contract_expected", md->n_expected);
            cJSON_AddNumberToObject(e, "bytes", (double)md->bytes);
            if (mk && mk[k].kernel[0]) {
                cJSON_AddStringToObject(e, "kernel", mk[k].kernel);
                cJSON_AddStringToObject(e, "notes", mk[k].notes);
            }
            cJSON_AddItemToArray(ms, e);
            if (md->res.excluded) cJSON_AddItemToArray(ex, cJSON_CreateString(md->name));
        }
        cJSON *mc = cJSON_AddObjectToObject(o, "methods");
        for (int i = 0; i < nm; i++) cJSON_AddNumberToObject(mc, mnames[i], mcount[i]);
        cJSON_AddNumberToObject(o, "problems", mods.n_probs);
        cJSON *w = cJSON_AddArrayToObject(o, "warnings");
        if (arch_bad) {
            char line[800];
            snprintf(line, sizeof line, "config.json: %s", arch_msg);
            cJSON_AddItemToArray(w, cJSON_CreateString(line));
        }
        for (int i = 0; i < moq_checkpoint_warning_count(c); i++)
            cJSON_AddItemToArray(w, cJSON_CreateString(moq_checkpoint_warning(c, i)));
        cJSON *ns = cJSON_AddArrayToObject(o, "notes");
        for (int i = 0; i < mods.notes.n; i++) cJSON_AddItemToArray(ns, cJSON_CreateString(moq_notes_at(&mods.notes, i)));
        char *s = cJSON_Print(o);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("checkpoint   %s  (%d shard%s, %zu tensors, %s)\n", path, moq_checkpoint_shard_count(c),
               moq_checkpoint_shard_count(c) == 1 ? "" : "s", nt, cli_bytes(total, b1, sizeof b1));
        if (a) {
            printf("architecture %s (%s), dtype %s\n", a->architecture[0] ? a->architecture : "(none)",
                   a->model_type[0] ? a->model_type : "?", a->torch_dtype[0] ? a->torch_dtype : "?");
            int64_t dense, expert;
            intermediate_sizes(c, a, &dense, &expert);
            printf("             hidden %lld, layers %lld, heads %lld (kv %lld, head_dim %lld), intermediate %lld, vocab %lld\n",
                   (long long)a->hidden_size, (long long)a->num_hidden_layers, (long long)a->num_attention_heads,
                   (long long)a->num_key_value_heads, (long long)a->head_dim, (long long)dense, (long long)a->vocab_size);
            if (a->num_experts)
                printf("             experts %lld (top-%lld, moe intermediate %lld)\n", (long long)a->num_experts,
                       (long long)a->num_experts_per_tok, (long long)expert);
            char theta[160];
            double td;
            const char *cls;
            if (a->rope_theta_key[0]) snprintf(theta, sizeof theta, "%g (%s)", a->rope_theta, a->rope_theta_key);
            else if (moq_model_rope_theta_default(a->architecture, &td, &cls))
                snprintf(theta, sizeof theta, "%g (%s default: config.json has no rope_theta)", td, cls);
            else snprintf(theta, sizeof theta, "missing (config.json has no rope_theta and the architecture no default; `moq run` refuses)");
            printf("             rope theta %s%s%s, context %lld, tied embeddings %s\n", theta,
                   a->rope_scaling_type[0] ? ", scaling " : "", a->rope_scaling_type, (long long)a->max_position_embeddings,
                   a->tie_word_embeddings ? "yes" : "no");
        }
        if (!quant->child) printf("quantization none found (no hf_quant_config.json, no quantization_config)\n");
        for (const cJSON *s = quant->child; s; s = s->next) {
            printf("quantization %-22s", s->string);
            for (const cJSON *f = s->child; f; f = f->next) {
                char *v = cJSON_PrintUnformatted(f);
                printf(" %s=%s", f->string, v);
                cJSON_free(v);
            }
            printf("\n");
        }
        printf("shards\n");
        for (int i = 0; i < moq_checkpoint_shard_count(c); i++)
            printf("  %-40s %6d tensors  %s\n", moq_checkpoint_shard_name(c, i), moq_checkpoint_shard_tensor_count(c, i),
                   cli_bytes(moq_checkpoint_shard_size(c, i), b1, sizeof b1));
        printf("tensors by dtype\n");
        for (int d = 0; d < MOQ_DT_COUNT; d++)
            if (dt_count[d])
                printf("  %-8s %6zu tensors  %s\n", moq_dtype_name((moq_dtype)d), dt_count[d], cli_bytes(dt_bytes[d], b1, sizeof b1));
        printf("modules      (%s, compat %s)\n", q ? moq_qconfig_source(q) : "no quantization config", moq_compat_name(prof));
        printf("  %-52s %-9s %-19s %-26s %-7s %s\n", "module", "kind", "method", "rule", "tensors", "bytes");
        for (int k = 0; k < mods.n; k++) {
            const moq_module *md = &mods.mods[k];
            if (md->kind == MOQ_MOD_OTHER) continue;
            char tn[32];
            snprintf(tn, sizeof tn, "%d/%d", md->n_found, md->n_expected);
            printf("  %-52s %-9s %-19s %-26s %-7s %s", md->name, moq_module_kind_name(md->kind), md->res.method, md->res.rule, tn,
                   cli_bytes(md->bytes, b1, sizeof b1));
            if (mk && mk[k].kernel[0]) printf("  kernel %s%s%s", mk[k].kernel, mk[k].notes[0] ? "  note: " : "", mk[k].notes);
            printf("\n");
        }
        printf("excluded     %d module%s\n", n_excl, n_excl == 1 ? "" : "s");
        for (int k = 0; k < mods.n; k++)
            if (mods.mods[k].kind != MOQ_MOD_OTHER && mods.mods[k].res.excluded) printf("  %s (%s)\n", mods.mods[k].name, mods.mods[k].res.rule);
        printf("methods\n");
        for (int i = 0; i < nm; i++) printf("  %-19s %d\n", mnames[i], mcount[i]);
        for (int i = 0; i < mods.notes.n; i++) printf("note         %s\n", moq_notes_at(&mods.notes, i));
        if (mods.n_probs) printf("problems     %d (run `moq check %s`)\n", mods.n_probs, path);
        if (arch_bad) fprintf(stderr, "moq: warning: config.json: %s\n", arch_msg);
        for (int i = 0; i < moq_checkpoint_warning_count(c); i++) fprintf(stderr, "moq: warning: %s\n", moq_checkpoint_warning(c, i));
    }
    free(mk);
    /* A contract problem makes inspect fail too (issue #7): the report above, then one
     * "moq: where: message" line naming the first problem; `moq check` lists them all. A lone
     * .safetensors file has no config to break, so its rows are informational only. */
    int rc = 0;
    struct stat sb;
    if (mods.n_probs && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "moq: %s: %s (problem 1 of %d; `moq check` lists all)\n", mods.probs[0].where, mods.probs[0].msg, mods.n_probs);
        rc = (int)mods.probs[0].code;
    }
    moq_modules_free(&mods);
    moq_qconfig_free(q);
    cJSON_Delete(quant);
    moq_checkpoint_free(c);
    return rc;
}
