/* test_weight_memory.c — one resident copy of each weight after a model load (issue 14).
 *
 * Checkpoints come from `moq synth` (the CLI, tu_moq_bin()): dense Llama in NVFP4 (fused q/k/v and
 * gate/up: the loader concatenates their shards into a buffer of its own), FP8, MXFP8 and BF16, and a
 * Qwen3-MoE in NVFP4 (experts copied into per-expert buffers). After moq_model_open:
 *   1. the kernel's own view: /proc/self/smaps gives the resident pages of the checkpoint mapping.
 *      Packing reads every weight page; once packed, the loader releases them, so at most the pages
 *      that straddle two tensors (2 per tensor) and the header may stay. Without the release the
 *      whole file is resident (measured: 100 %).
 *   2. the library's accounting (moq_model_memory_usage): the canonical codes of packed weights
 *      are neither owned nor read from the mapping: owned stays below 5 % of the file (f32 scales,
 *      norms) and everything held is at most 1.1x the file. A surviving concatenated copy of the
 *      fused shards (more than half of the weights here) or an expert's canonical buffers fail it.
 *   3. the weights still run: the logits equal those of the same checkpoint opened on the `_ref`
 *      rows (cpu_mask 0: they run on the canonical weight, read in place from the mapping) within
 *      2e-3 of the largest logit (test_model.c explains that limit: a flipped activation code).
 * No timing is asserted.
 */
#include "tu.h"

#include <math.h>
#include <unistd.h>

enum { LAYERS = 2, HIDDEN = 512, INTER = 512, VOCAB = 300, NTOK = 4 };

static char *synth(const char *tag, const char *algo, const char *arch) {
    char *dir = tu_tmpdir(tag);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' synth '%s' --algo %s --layers %d --hidden %d --inter %d --heads 4 --kv-heads 2 --vocab %d%s%s >/dev/null 2>&1",
             tu_moq_bin(), dir, algo, LAYERS, HIDDEN, INTER, VOCAB, arch ? " --arch " : "", arch ? arch : "");
    const int rc = tu_run(cmd, NULL, 0);
    if (rc != 0) fail_msg("%s -> %d", cmd, rc);
    return dir;
}

/* Resident bytes of this process's mappings of files under dir (the checkpoint shards). */
static uint64_t mapped_rss(const char *dir) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return UINT64_MAX;
    char line[4096];
    bool in = false;
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2) in = strstr(line, dir) != NULL && strstr(line, ".safetensors") != NULL;
        else if (in && strncmp(line, "Rss:", 4) == 0) kb += strtoull(line + 4, NULL, 10);
    }
    fclose(f);
    return kb * 1024;
}

static void logits(const char *dir, uint32_t cpu_mask, float *out) {
    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 2, o.cpu_mask = cpu_mask, o.ctx = NTOK;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    static const int32_t tok[NTOK] = {5, 77, 140, 299};
    TU_OK(moq_model_prefill(m, tok, NTOK, NULL, err_));
    memcpy(out, moq_model_logits(m), VOCAB * sizeof(float));
    moq_model_free(m);
}

static void check(const char *algo, const char *arch) {
    char tag[64];
    snprintf(tag, sizeof tag, "wmem_%s_%s", algo, arch ? arch : "llama");
    char *dir = synth(tag, algo, arch);
    moq_checkpoint *c = NULL;
    TU_OK(moq_checkpoint_open(&c, dir, NULL, err_));
    const uint64_t n_tensors = moq_checkpoint_tensor_count(c);
    moq_checkpoint_free(c);

    moq_model_opts o = moq_model_opts_default();
    o.n_threads = 2, o.ctx = NTOK;
    moq_model *m = NULL;
    TU_OK(moq_model_open(&m, dir, &o, err_));
    const moq_model_memory mm = moq_model_memory_usage(m);
    const long pg = sysconf(_SC_PAGESIZE);
    const uint64_t rss = mapped_rss(dir), rss_max = (2 * n_tensors + 8) * (uint64_t)pg;
    print_message("%-6s %-9s file %8llu B; held packed %llu, owned %llu, mapped %llu; mapping resident %llu B (limit %llu, %llu tensors)\n",
                  algo, arch ? arch : "llama", (unsigned long long)mm.file, (unsigned long long)mm.packed, (unsigned long long)mm.owned,
                  (unsigned long long)mm.mapped, (unsigned long long)rss, (unsigned long long)rss_max, (unsigned long long)n_tensors);
    if (rss > rss_max)
        fail_msg("%s: %llu bytes of the checkpoint mapping stay resident after load, expected <= %llu (pages shared by two tensors): "
                 "the packed weights' mapped pages were not released", tag, (unsigned long long)rss, (unsigned long long)rss_max);
    if (mm.owned * 20 > mm.file)
        fail_msg("%s: the model owns %llu bytes of canonical data, expected <= 5 %% of the %llu-byte file: a canonical copy survived packing",
                 tag, (unsigned long long)mm.owned, (unsigned long long)mm.file);
    if ((mm.packed + mm.owned + mm.mapped) * 10 > mm.file * 11)
        fail_msg("%s: %llu weight bytes held for a %llu-byte file, expected <= 1.1x", tag,
                 (unsigned long long)(mm.packed + mm.owned + mm.mapped), (unsigned long long)mm.file);
    if (mm.packed * 10 < mm.file * 8)
        fail_msg("%s: only %llu of %llu bytes packed: the weights did not take the packed rows", tag, (unsigned long long)mm.packed,
                 (unsigned long long)mm.file);
    moq_model_free(m);

    float fast[VOCAB], ref[VOCAB];
    logits(dir, ~0u, fast);
    logits(dir, 0u, ref);
    double mx = 0, d = 0;
    for (int v = 0; v < VOCAB; v++) {
        if (!isfinite(fast[v])) fail_msg("%s: logit %d is %g", tag, v, (double)fast[v]);
        mx = fmax(mx, fabs((double)ref[v]));
        d = fmax(d, fabs((double)fast[v] - (double)ref[v]));
    }
    print_message("%-6s %-9s logits vs _ref rows: max |diff| / max |ref| = %.3g\n", algo, arch ? arch : "llama", d / mx);
    if (!(d <= 2e-3 * mx)) fail_msg("%s: logits differ from the _ref rows' by %.3g of the largest, expected <= 2e-3", tag, d / mx);
    tu_rmtree(dir);
    free(dir);
}

static void test_nvfp4_fused(void **state) { (void)state; check("NVFP4", NULL); }
static void test_fp8(void **state) { (void)state; check("FP8", NULL); }
static void test_mxfp8(void **state) { (void)state; check("MXFP8", NULL); }
static void test_bf16(void **state) { (void)state; check("BF16", NULL); }
static void test_moe_nvfp4(void **state) { (void)state; check("NVFP4", "qwen3moe"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvfp4_fused), cmocka_unit_test(test_fp8), cmocka_unit_test(test_mxfp8),
        cmocka_unit_test(test_bf16), cmocka_unit_test(test_moe_nvfp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
