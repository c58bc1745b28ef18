#!/usr/bin/env bash
# tsan.sh — ThreadSanitizer run (issue #7): builds the library, the CLI and the tests that share
# state between threads with clang -fsanitize=thread into build-tsan/ (never touches build/ or
# build-asan/), then runs tests/threads/test_threads (one moq_linear run from 4 threads; checkpoint
# and config opened from 4 threads) and the checkpoint/config tests. Any TSan report fails it.
#
# OpenMP: clang links LLVM's libomp (libgomp is not instrumented and reports false races in its
# barriers). libomp is not built with TSan either: its internal free lists, reused by the caller
# threads that each open a parallel region, look like races, so interceptors called from inside
# libomp are suppressed (tests/threads/tsan.supp); moq's own code, including the OpenMP loop
# bodies, stays checked. Inner parallelism is 2 threads per caller (OMP_NUM_THREADS=2).
# Usage: scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang >/dev/null || { echo "tsan: clang not installed, skipped"; exit 0; }
# configuring unpacks tests/data/*.tar.xz into build-tsan/testdata (real configs: test_check reads them)
CC=clang cmake -S . -B build-tsan -DMOQ_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOQ_SANITIZE=thread >/dev/null
tests=(test_threads test_checkpoint test_safetensors test_modelopt test_resolve test_check test_comm test_tp)
cmake --build build-tsan -j "${JOBS:-2}" --target moq "${tests[@]}" >/dev/null
export OMP_NUM_THREADS=2 MOQ_TEST_INNER_THREADS=2
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/threads/tsan.supp"
export MOQ_BIN=$PWD/build-tsan/moq MOQ_TESTDATA=$PWD/build-tsan/testdata MOQ_TMP=$PWD/build-tsan/testtmp
status=0
for t in "${tests[@]}"; do
  if (cd build-tsan && "./$t" >"$t.log" 2>&1); then echo "tsan: $t clean"
  else status=1; echo "tsan: $t FAILED (build-tsan/$t.log)"; grep -A30 -m1 "WARNING: ThreadSanitizer" "build-tsan/$t.log" || tail -20 "build-tsan/$t.log"; fi
done
exit $status
