#!/bin/sh
# cpu_vs_ggml.sh — moq vs ggml's CPU MUL_MAT on the shape of issue 14 (N = 4096, K = 14336), run
# back to back and interleaved R times so both see the same machine load; prints each run and the
# medians (docs/PERFORMANCE.md, "AVX2 and AVX-512 decode vs ggml").
#
#   usage: bench/cpu_vs_ggml.sh MOQ_BIN GGML_TEST_BACKEND_OPS [M] [R]
#   GGML_TEST_BACKEND_OPS: ggml's tests/test-backend-ops built from source in a scratch folder
#   (never committed). MOQ_CPU_MASK=1 in the environment forces moq's AVX2 tier; build ggml with
#   -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF for the matching ggml tier.
#   THREADS (environment, default 2) threads for both: moq --threads, and GGML_NT for ggml, which
#   needs a one-line change in the scratch copy of tests/test-backend-ops.cpp (N_THREADS reads
#   getenv("GGML_NT"), else hardware_concurrency()); an unchanged ggml uses all CPUs.
set -eu
MOQ=$1 GGML=$2 M=${3:-1} R=${4:-3} T=${THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$R"); do
  for a in nvfp4_w4a4 fp8_tensor fp8_row bf16; do
    "$MOQ" bench linear --algo $a --m "$M" --n 4096 --k 14336 --threads "$T" --hot-only --json |
      sed -n 's/.*"kernel":"\([^"]*\)".*"hot_us":\([0-9.]*\).*"hot_cpu_us":\([0-9.]*\).*/\1 \2 \3/p' >> "$tmp/moq_$a"
  done
  GGML_NT=$T "$GGML" perf -o MUL_MAT -b CPU -p "type_a=(nvfp4|q4_0|q8_0|mxfp4|bf16),type_b=f32,m=4096,n=$M,k=14336,bs=\[1,1\]" 2>/dev/null |
    sed -n 's/.*type_a=\([a-z0-9_]*\),.* - *\([0-9.]*\) us\/run.*/\1 \2/p' >> "$tmp/ggml"
done
med() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "M=$M, $R interleaved runs, $T threads, medians (us): load average $(cut -d' ' -f1-3 /proc/loadavg)"
for a in nvfp4_w4a4 fp8_tensor fp8_row bf16; do
  printf 'moq  %-12s %-34s wall %10s  cpu/thread %10s\n' $a "$(head -1 "$tmp/moq_$a" | cut -d' ' -f1)" \
    "$(cut -d' ' -f2 "$tmp/moq_$a" | med)" "$(cut -d' ' -f3 "$tmp/moq_$a" | med)"
done
for t in nvfp4 q4_0 mxfp4 q8_0 bf16; do
  printf 'ggml %-12s %-34s wall %10s\n' $t "" "$(awk -v t=$t '$1 == t {print $2}' "$tmp/ggml" | med)"
done
