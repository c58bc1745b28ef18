#!/usr/bin/env bash
# test.sh — run the whole test suite: ctest on the Release build, then the same tests built with
# AddressSanitizer + UndefinedBehaviorSanitizer. Any failure or sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
status=0
if [ "${1:-}" != "--asan-only" ]; then
  echo "== ctest (Release)"
  (cd build && ctest --output-on-failure -j "$JOBS") || status=1
fi
echo "== ctest (AddressSanitizer + UndefinedBehaviorSanitizer)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOQ_SANITIZE="address;undefined" >/dev/null
cmake --build build-asan -j "$JOBS" >/dev/null
(cd build-asan && ctest --output-on-failure -j "$JOBS") || status=1
# Hardening (issue #7, docs/RELIABILITY.md): static analysis once, then each libFuzzer target for
# FUZZ_SECONDS (default 60) in build-fuzz/ (its own build directory: build/ and build-asan/ are
# untouched). Skipped with --asan-only, with MOQ_SKIP_HARDENING=1, and (fuzzing) without clang.
if [ "${1:-}" != "--asan-only" ] && [ "${MOQ_SKIP_HARDENING:-0}" != 1 ]; then
  echo "== static analysis (scripts/lint.sh: clang-tidy + cppcheck)"
  JOBS=$JOBS scripts/lint.sh build || status=1
  if command -v clang >/dev/null; then
    echo "== fuzz: each target ${FUZZ_SECONDS:-60} s (scripts/fuzz.sh)"
    scripts/fuzz.sh "${FUZZ_SECONDS:-60}" || status=1
  else
    echo "== fuzz: clang not installed, skipped"
  fi
fi
exit $status
