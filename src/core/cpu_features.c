/* cpu_features.c — run-time ISA detection: cpuid for what the CPU has, xgetbv for what the OS
 * saves on context switch. AVX-512 needs XCR0 bits 1,2 (SSE/AVX) and 5,6,7 (opmask, ZMM_Hi256,
 * Hi16_ZMM); AVX2 needs bits 1,2. Checking cpuid alone is the gap ggml's FIXME admits.
 *
 * MOQ_CPU_MASK (environment, decimal or 0x hex) masks the result so tests can force each path:
 *   MOQ_CPU_MASK=0 -> portable C only; =1 -> AVX2 at most.
 * Tested by tests/unit/test_cpu_features.c and by every vector-vs-scalar test. */
#include "core/cpu_features.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static uint32_t detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    const uint64_t xcr0 = xgetbv0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;
    const bool os_zmm = os_ymm && (xcr0 & 0xE0) == 0xE0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const bool avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
    const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    const bool vnni = (c >> 11) & 1;
    unsigned a1 = 0, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    const bool bf16 = (a1 >> 5) & 1;
    uint32_t f = 0;
    if (os_ymm && avx2 && fma && f16c && bmi2) f |= MOQ_CPU_AVX2;
    if ((f & MOQ_CPU_AVX2) && os_zmm && f512 && dq && bw && vl) {
        f |= MOQ_CPU_AVX512;
        if (vnni) f |= MOQ_CPU_AVX512VNNI;
        if (bf16) f |= MOQ_CPU_AVX512BF16;
    }
    return f;
}
#else
static uint32_t detect(void) { return 0; }
#endif

static uint32_t g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_str[96];

static void init(void) {
    uint32_t f = detect();
    const char *m = getenv("MOQ_CPU_MASK");
    if (m && *m) f &= (uint32_t)strtoul(m, NULL, 0);
    g_features = f;
    snprintf(g_str, sizeof g_str, "%s%s%s%s", (f & MOQ_CPU_AVX2) ? "avx2 " : "",
             (f & MOQ_CPU_AVX512) ? "avx512 " : "", (f & MOQ_CPU_AVX512VNNI) ? "avx512vnni " : "",
             (f & MOQ_CPU_AVX512BF16) ? "avx512bf16 " : "");
    size_t n = strlen(g_str);
    if (n) g_str[n - 1] = '\0';
    else snprintf(g_str, sizeof g_str, "portable");
}

uint32_t moq_cpu_features(void) {
    pthread_once(&g_once, init);
    return g_features;
}

const char *moq_cpu_features_str(void) {
    pthread_once(&g_once, init);
    return g_str;
}
