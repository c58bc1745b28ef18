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
exit $status
