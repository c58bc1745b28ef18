#!/usr/bin/env bash
# device_tp_stage.sh — on the dev machine, before the device call of scripts/device_tp.sh (issue 16):
# copy into DEST (default .devtp/, git-ignored as .dev*) the script, the Release binaries built with
# CUDA and NCCL (moq, test_comm, test_tp) with libcjson and libcmocka under .devbin/, and a short
# text for `moq eval`. Then, on nvidia-h200-x2 or -x4:
#   run(kind="nvidia-h200-x2", carry=[DEST], command="cd DEST && OUT=$OUT scripts/device_tp.sh")
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
D=${2:-.devtp}
grep -q "MOQ_NCCL_LIB:FILEPATH=.*nccl" "$B/CMakeCache.txt" || { echo "$B was configured without NCCL (cmake found no libnccl)"; exit 1; }
rm -rf "$D" && mkdir -p "$D/.devbin/lib" "$D/scripts" "$D/tests/data/text"
cp "$B"/moq "$B"/test_comm "$B"/test_tp "$D/.devbin/"
cp scripts/device_tp.sh "$D/scripts/"
head -c 6000 tests/data/text/pride_and_prejudice_ch3-4.txt > "$D/tests/data/text/short.txt"
for so in libcjson.so.1 libcmocka.so.0; do cp -L "$(ldconfig -p | awk -v n="$so" '$1 == n {print $NF; exit}')" "$D/.devbin/lib/"; done
du -sh "$D"
