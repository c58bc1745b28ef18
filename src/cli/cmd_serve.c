/* cmd_serve.c — `moq serve DIR ...`: parses the flags and hands over to src/serve (serve.c).
 * Tested by tests/e2e/serve.sh, serve_openai.sh, serve_soak.sh.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve/serve.h"

void cmd_serve_help(FILE *out) {
    fprintf(out,
            "usage: moq serve DIR [--host ADDR] [--port N] [--device cpu|cuda|auto] [--max-batch B] [--ctx N]\n"
            "                 [--kv-cache-mem BYTES] [--api-key KEY] [--threads N] [--max-body BYTES]\n"
            "                 [--prefill-chunk N] [--model-name NAME] [--port-file PATH] [--kv-cache f32|bf16]\n"
            "                 [--compat moq|vllm|sglang]\n\n"
            "Serves the checkpoint over an OpenAI-compatible HTTP API: POST /v1/chat/completions and\n"
            "/v1/completions (\"stream\": true for server-sent events), GET /v1/models, /health, /metrics\n"
            "(Prometheus text). Requests are batched continuously: up to --max-batch (default 8) sequences\n"
            "decode together, new ones join between steps, prompts are prefilled --prefill-chunk (default\n"
            "32) tokens per step. The KV cache is a pool of pages under --kv-cache-mem (default: --max-batch\n"
            "full contexts; K, M, G suffixes); a request waits when the pool is full and gets a 400 when it\n"
            "could never fit. Binds to --host 127.0.0.1 (loopback) and --port 8080 unless told otherwise\n"
            "(--port 0: any free port, written to --port-file). --api-key (or MOQ_API_KEY) requires\n"
            "\"Authorization: Bearer KEY\" on /v1/. --max-body (default 1M) limits request bodies.\n"
            "--device cuda runs the model and the KV pool on the GPU (Llama/Mistral/Qwen dense, Qwen3-MoE, Mixtral; decode steps replay\n"
            "CUDA graphs); auto picks the GPU when one is usable. SIGINT/SIGTERM cancel what is in flight and\n"
            "exit 0. Set OMP_WAIT_POLICY=passive on a shared machine. Details: docs/SERVE.md.\n");
}

static int parse_bytes(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return -1;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024, end++;
    else if (*end == 'M' || *end == 'm') mul = 1048576, end++;
    else if (*end == 'G' || *end == 'g') mul = 1073741824.0, end++;
    if (*end == 'i') end++;
    if (*end == 'B') end++;
    if (*end || v * mul > 1.8e19) return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    static const struct option lo[] = {
        {"host", 1, 0, 'h'},       {"port", 1, 0, 'p'},          {"device", 1, 0, 'd'},      {"max-batch", 1, 0, 'b'},
        {"ctx", 1, 0, 'C'},        {"kv-cache-mem", 1, 0, 'm'},  {"api-key", 1, 0, 'a'},     {"threads", 1, 0, 'T'},
        {"max-body", 1, 0, 'B'},   {"prefill-chunk", 1, 0, 'c'}, {"model-name", 1, 0, 'n'},  {"port-file", 1, 0, 'f'},
        {"kv-cache", 1, 0, 'V'},   {"compat", 1, 0, 'P'},        {0, 0, 0, 0}};
    serve_opts o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1", o.port = 8080, o.max_batch = 8, o.prefill_chunk = 32, o.max_body = 1 << 20;
    o.mo = moq_model_opts_default();
    o.api_key = getenv("MOQ_API_KEY");
    if (o.api_key && !o.api_key[0]) o.api_key = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        long v = 0;
        uint64_t bytes = 0;
        switch (ch) {
        case 'h': o.host = optarg; break;
        case 'p':
            v = strtol(optarg, &end, 10);
            if (*end || errno || v < 0 || v > 65535) return cli_usage_error("serve", "--port %s, expected 0..65535", optarg);
            o.port = (int)v;
            break;
        case 'd': {
            int rc = cli_parse_model_opt('G', optarg, &o.mo, "serve"); /* --device: as `moq run` takes it */
            if (rc) return rc;
            break;
        }
        case 'b':
            v = strtol(optarg, &end, 10);
            if (*end || errno || v < 1 || v > 256) return cli_usage_error("serve", "--max-batch %s, expected 1..256", optarg);
            o.max_batch = (int)v;
            break;
        case 'c':
            v = strtol(optarg, &end, 10);
            if (*end || errno || v < 1 || v > 4096) return cli_usage_error("serve", "--prefill-chunk %s, expected 1..4096", optarg);
            o.prefill_chunk = v;
            break;
        case 'm':
            if (parse_bytes(optarg, &bytes)) return cli_usage_error("serve", "--kv-cache-mem %s, expected a byte count (K, M, G suffixes)", optarg);
            o.kv_bytes = bytes;
            break;
        case 'B':
            if (parse_bytes(optarg, &bytes) || bytes > (1ull << 30)) return cli_usage_error("serve", "--max-body %s, expected 1..1G bytes", optarg);
            o.max_body = (size_t)bytes;
            break;
        case 'a': o.api_key = optarg[0] ? optarg : NULL; break;
        case 'n': o.model_name = optarg; break;
        case 'f': o.port_file = optarg; break;
        case 'T': case 'C': case 'V': case 'P': {
            int rc = cli_parse_model_opt(ch, optarg, &o.mo, "serve");
            if (rc) return rc;
            break;
        }
        default: return cli_usage_error("serve", "unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("serve", "expected one DIR");
    o.dir = argv[optind];
    return serve_run(&o);
}
