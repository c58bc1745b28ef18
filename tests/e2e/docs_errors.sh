#!/usr/bin/env bash
# docs/ERRORS.md must be exactly what `moq errors --markdown` prints (the table in src/core/error.c).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! diff -u "$root/docs/ERRORS.md" <("$MOQ_BIN" errors --markdown); then
  echo "HINT: regenerate with: build/moq errors --markdown > docs/ERRORS.md" >&2
  exit 1
fi
