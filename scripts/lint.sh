#!/usr/bin/env bash
# lint.sh — static analysis of src/: clang-tidy with the checked-in .clang-tidy (bug-finding checks,
# warnings are errors) over the compile commands of a build directory, then cppcheck with the
# options below. Usage: scripts/lint.sh [BUILD_DIR] [--changed]
#   BUILD_DIR  a configured build with compile_commands.json (default: build)
#   --changed  only the src/ files changed against main (default: every src/**/*.c)
# Exit 0 only when both are clean. Run by ctest in the Release build (lint/static_analysis).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build; changed=0
for a in "$@"; do case "$a" in --changed) changed=1 ;; *) build=$a ;; esac; done
[ -f "$build/compile_commands.json" ] || { echo "lint: $build/compile_commands.json missing (configure first)"; exit 2; }
if [ "$changed" = 1 ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d main -- 'src/*.c' 'src/**/*.c' | sort -u)
else
  mapfile -t files < <(find src -name '*.c' | sort)
fi
[ ${#files[@]} -eq 0 ] && { echo "lint: no files"; exit 0; }
jobs=${JOBS:-2}
status=0
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
if [ -n "$tidy" ]; then
  # One clang-tidy per file, $jobs at a time; its output only when it finds something.
  printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} sh -c \
    'out=$("$0" -p "$1" --quiet "{}" 2>&1) || { echo "$out" | grep -av "warnings generated"; echo "clang-tidy: {} has findings"; exit 1; }' "$tidy" "$build" \
    || status=1
  echo "clang-tidy: ${#files[@]} files, $([ $status = 0 ] && echo clean || echo FINDINGS)"
else
  echo "clang-tidy: not installed, skipped"
fi
if command -v cppcheck >/dev/null; then
  # Bug classes only (style is the compiler's and the reviewers' job): warning and
  # performance; cJSON and libc headers are not analysed (system includes are not passed).
  if cppcheck --quiet --error-exitcode=1 --enable=warning,performance --std=c11 \
       --inline-suppr --suppress=missingIncludeSystem -j "$jobs" -I include -I src -D__GNUC__ -D_GNU_SOURCE \
       "${files[@]}"; then
    echo "cppcheck: ${#files[@]} files, clean"
  else
    echo "cppcheck: FINDINGS"; status=1
  fi
else
  echo "cppcheck: not installed, skipped"
fi
exit $status
