#!/usr/bin/env bash
# device_model_cuda_stage.sh — on the dev machine, before the device call of scripts/device_model_cuda.sh:
# copy into DEST (default .devmodel/, git-ignored as .dev*) what that script needs, and nothing else:
# the scripts, the Release binaries (moq, test_model_cuda) with libcjson and libcmocka under
# .devbin/, tests/data/modelopt_real + tests/data/text, and tests/e2e/serve.sh with its tokenizer. Then:
#   run(carry=[DEST], command="cd DEST && OUT=$OUT scripts/device_model_cuda.sh") (or device_gpu_speed.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
D=${2:-.devmodel}
rm -rf "$D" && mkdir -p "$D/.devbin/lib" "$D/.devbin/lib_fb" "$D/scripts" "$D/tests/data" "$D/tests/e2e" "$D/tests/golden/tokenizer"
cp "$B"/moq "$B"/test_model_cuda "$D/.devbin/"
cp scripts/device_model_cuda.sh scripts/device_gpu_speed.sh "$D/scripts/"
cp -r tests/data/modelopt_real tests/data/text "$D/tests/data/"
cp tests/e2e/serve.sh "$D/tests/e2e/" && cp -r tests/golden/tokenizer/smollm2 "$D/tests/golden/tokenizer/" # serve.sh --device cuda
# every other shared library moq needs, as a fallback the device scripts take only where the image lacks it
for so in $(ldd "$B"/moq | awk '$3 ~ /^\// {print $3}'); do
  case "$(basename "$so")" in libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s.so*|libstdc++.so*|libgomp.so*|ld-linux*) ;;
  *) cp -L "$so" "$D/.devbin/lib_fb/" ;; esac
done
for so in $(ldd "$(ldconfig -p | awk '$1 == "libmicrohttpd.so.12" {print $NF; exit}')" | awk '$3 ~ /^\// {print $3}'); do
  case "$(basename "$so")" in libc.so*|ld-linux*) ;; *) cp -L "$so" "$D/.devbin/lib_fb/" ;; esac
done
head -c 4000 tests/data/text/pride_and_prejudice_ch1-2.txt > "$D/tests/data/text/short.txt" # eval's CPU reference in seconds
for so in libcjson.so.1 libcmocka.so.0; do cp -L "$(ldconfig -p | awk -v n="$so" '$1 == n {print $NF; exit}')" "$D/.devbin/lib/"; done
du -sh "$D"
