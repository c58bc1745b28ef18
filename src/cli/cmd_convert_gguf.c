/* cmd_convert_gguf.c — `moq convert-gguf FILE.gguf OUT_DIR [--dtype bf16|f32]`: write a Hugging Face
 * checkpoint (safetensors, config.json, tokenizer files) from a llama.cpp GGUF model
 * (io/gguf_convert.c). Progress bar on a TTY; phase timings on stderr. Covered by
 * tests/io/test_gguf.c (test_convert_cli) and tests/e2e/smollm2.sh. */
#include <getopt.h>
#include <string.h>

#include "cli.h"
#include "io/gguf_convert.h"

void cmd_convert_gguf_help(FILE *out) {
    fprintf(out,
            "usage: moq convert-gguf FILE.gguf OUT_DIR [--dtype bf16|f32] [--quiet]\n\n"
            "Converts a llama.cpp GGUF model (architecture llama; tensors F32, F16, BF16, Q8_0, Q4_0 or\n"
            "Q4_1; a gpt2-style byte-level BPE tokenizer) into a Hugging Face checkpoint in OUT_DIR, which\n"
            "must not exist or be empty: model.safetensors (Hugging Face tensor names, llama.cpp's Q/K row\n"
            "permutation undone, values dequantized as ggml does and stored as bf16 (default, rounded to\n"
            "nearest even) or f32), config.json (LlamaForCausalLM; tied embeddings when the file has no\n"
            "output.weight), generation_config.json, tokenizer.json and tokenizer_config.json (chat\n"
            "template, bos/eos). Nothing is left behind when it fails.\n"
            "  --dtype bf16|f32   element type of the written tensors (default bf16)\n"
            "  --quiet            no progress bar and no summary\n");
}

static void progress(void *ctx, uint64_t done, uint64_t total) {
    (void)ctx;
    const int w = 40, f = total ? (int)(40u * done / total) : w;
    fprintf(stderr, "\rconvert [%.*s%*s] %3d%%", f, "========================================", w - f, "",
            total ? (int)(100u * done / total) : 100);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

int cmd_convert_gguf(int argc, char **argv) {
    static const struct option longopts[] = {
        {"dtype", required_argument, 0, 'd'}, {"quiet", no_argument, 0, 'q'}, {0, 0, 0, 0}};
    moq_gguf_convert_opts o = moq_gguf_convert_opts_default();
    int quiet = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "d:q", longopts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            if (strcmp(optarg, "bf16") == 0) o.dtype = MOQ_DT_BF16;
            else if (strcmp(optarg, "f32") == 0) o.dtype = MOQ_DT_F32;
            else return cli_usage_error("convert-gguf", "--dtype %s: expected bf16 or f32", optarg);
            break;
        case 'q': quiet = 1; break;
        default: return cli_usage_error("convert-gguf", "unknown option");
        }
    }
    if (argc - optind != 2) return cli_usage_error("convert-gguf", "expected FILE.gguf and OUT_DIR");
    const char *in = argv[optind], *out = argv[optind + 1];
    if (!quiet && cli_stderr_is_tty()) o.progress = progress;
    moq_gguf_convert_info info;
    moq_error err;
    if (moq_gguf_convert(in, out, &o, &info, &err) != MOQ_OK) return cli_report(&err);
    if (!quiet) {
        char b[32];
        fprintf(stderr, "moq: %s -> %s: %llu tensors (%s), %d layers%s, %s of %s\n", in, out,
                (unsigned long long)info.n_tensors, info.gguf_types, info.n_layers, info.tied ? ", tied embeddings" : "",
                cli_bytes(info.tensor_bytes, b, sizeof b), o.dtype == MOQ_DT_BF16 ? "bf16" : "f32");
        fprintf(stderr, "moq: convert %.3f s (read %.3f, tensors %.3f, tokenizer %.3f, write %.3f)\n",
                info.read_s + info.tensors_s + info.tokenizer_s + info.write_s, info.read_s, info.tensors_s,
                info.tokenizer_s, info.write_s);
    }
    return 0;
}
