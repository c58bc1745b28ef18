#!/usr/bin/env bash
# device_cuda_stage.sh — on the dev machine, before a device call: copy what scripts/device_cuda.sh
# runs when the device image cannot build (no cJSON/cmocka there) into .devbin/ (git-ignored):
# the Release binaries, libcjson and libcmocka, and the tests' reference data (testdata/golden/rcp).
# Then: run(carry=[".devbin"], command="OUT=$OUT scripts/device_cuda.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
rm -rf .devbin && mkdir -p .devbin/lib .devbin/testdata/golden
cp "$B"/moq "$B"/test_linear "$B"/test_linear_cuda .devbin/
cp -r "$B"/testdata/golden/rcp .devbin/testdata/golden/
for so in libcjson.so.1 libcmocka.so.0; do cp -L "$(ldconfig -p | awk -v n="$so" '$1 == n {print $NF; exit}')" .devbin/lib/; done
du -sh .devbin
