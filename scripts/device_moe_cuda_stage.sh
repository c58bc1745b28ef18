#!/usr/bin/env bash
# device_moe_cuda_stage.sh — on the dev machine, before the device call of scripts/device_moe_cuda.sh:
# copy into DEST (default .devmoe/, git-ignored as .dev*) the script, the Release binaries (moq,
# test_moe_cuda, test_model_cuda) with libcjson and libcmocka under .devbin/, and tests/data/text (the
# device script links tests/data/modelopt_real from the checkout DEST sits in). Then: run(carry=[DEST], command="cd DEST && OUT=$OUT scripts/device_moe_cuda.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
D=${2:-.devmoe}
rm -rf "$D" && mkdir -p "$D/.devbin/lib" "$D/scripts" "$D/tests/data"
cp "$B"/moq "$B"/test_moe_cuda "$B"/test_model_cuda "$D/.devbin/"
cp scripts/device_moe_cuda.sh scripts/device_moe_decode.sh "$D/scripts/"
cp -r tests/data/text "$D/tests/data/"
head -c 4000 tests/data/text/pride_and_prejudice_ch1-2.txt > "$D/tests/data/text/short.txt" # eval's CPU reference in seconds
# every shared library the binaries load beyond glibc, the C++/OpenMP runtimes and CUDA (the device image
# lacks cJSON, cmocka, utf8proc, libmicrohttpd and its GnuTLS chain), resolved here by ldd
for lib in $(ldd "$B"/moq "$B"/test_moe_cuda "$B"/test_model_cuda | awk '$3 ~ /^\// {print $3}' | sort -u); do
  case "$(basename "$lib")" in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libgomp.so*|libcudart.so*) ;;
  *) cp -L "$lib" "$D/.devbin/lib/" ;; esac
done
tar -C "$D" -cJf "$D/devbin.tar.xz" .devbin && rm -rf "$D/.devbin" # the call carries 64 MiB at most
du -sh "$D"
