#!/usr/bin/env bash
# device_cuda_stage.sh — on the dev machine, before a device call: copy what scripts/device_cuda.sh
# runs when the device image cannot build (no cJSON/cmocka there) into .devbin/ (git-ignored):
# the Release binaries, the shared libraries they need beyond a CUDA image's, and the tests' reference data (testdata/golden/rcp).
# Then: run(carry=[".devbin"], command="OUT=$OUT scripts/device_cuda.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
rm -rf .devbin && mkdir -p .devbin/lib .devbin/testdata/golden
cp "$B"/moq "$B"/test_linear "$B"/test_linear_cuda .devbin/
cp -r "$B"/testdata/golden/rcp .devbin/testdata/golden/
# every shared library of the three binaries that a bare CUDA image may lack (libc, libstdc++, libgomp
# and the CUDA runtime are there): cJSON, cmocka, utf8proc, pcre2, libmicrohttpd and its TLS stack
for so in $(ldd "$B"/moq "$B"/test_linear "$B"/test_linear_cuda | awk '/=>/ {print $1}' | sort -u); do
  case $so in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libgomp.so*|libcudart.so*|ld-linux*) continue ;; esac
  cp -L "$(ldconfig -p | awk -v n="$so" '$1 == n {print $NF; exit}')" .devbin/lib/
done
du -sh .devbin
