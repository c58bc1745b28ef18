#!/usr/bin/env bash
# setup.sh — install what building and testing moq needs, only what is missing (Debian, as root).
#
#   build:  gcc, make, cmake (>= 3.25), pkg-config, libcjson-dev, libpcre2-dev, libutf8proc-dev,
#           libmicrohttpd-dev (moq serve), libgomp (gcc), libcmocka-dev
#   bench:  libopenblas-dev (baseline sgemm only; moq itself never links it)
#   checks: clang + libclang-rt-14-dev + libomp-dev (fuzzing, ThreadSanitizer), clang-tidy, cppcheck,
#           valgrind (scripts/test.sh runs all of them)
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in gcc make cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libcmocka-dev libopenblas-dev \
         clang libclang-rt-14-dev libomp-dev clang-tidy cppcheck valgrind "$@"; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null || true
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Python: the official openai client for tests/e2e/serve_openai.sh, only when missing (that test
# skips with a message when it cannot be installed).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import openai' >/dev/null 2>&1; then
  python3 -m pip install -q openai >/dev/null 2>&1 || echo "setup: pip could not install openai; tests/e2e/serve_openai.sh will skip" >&2
fi
