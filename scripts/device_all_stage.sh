#!/usr/bin/env bash
# device_all_stage.sh — on the dev machine, before the device call of scripts/device_all.sh: copy into
# .devbin/ (git-ignored) the Release binaries that script runs (moq and the CUDA test programs), every
# shared library they load beyond glibc, the C++/OpenMP runtimes and CUDA (the device image lacks
# cJSON, cmocka, utf8proc, pcre2, libmicrohttpd and its TLS chain), and the tests' unpacked reference
# data (testdata/golden/rcp), compressed (a call carries 64 MiB at most). The checkout that travels
# holds tests/data (real exports, text) and tests/e2e/serve.sh. Then:
#   run(carry=[".devbin"], command="OUT=$OUT LIMIT=360 scripts/device_all.sh")
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BINS="moq test_linear_cuda test_moe_cuda test_model_cuda test_attn_cuda test_comm"
rm -rf .devbin .devstage && mkdir -p .devstage/.devbin/lib .devstage/.devbin/testdata/golden .devbin
for b in $BINS; do cp "$B/$b" .devstage/.devbin/; done
cp -r "$B"/testdata/golden/rcp .devstage/.devbin/testdata/golden/
libs=$(for b in $BINS; do ldd "$B/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u)
mhd=$(ldconfig -p | awk '$1 == "libmicrohttpd.so.12" {print $NF; exit}')
[ -n "$mhd" ] && libs="$libs $(ldd "$mhd" | awk '$3 ~ /^\// {print $3}')"
for so in $libs; do
  case "$(basename "$so")" in libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libgomp.so*|libcudart.so*) ;;
  *) cp -L "$so" .devstage/.devbin/lib/ ;; esac
done
tar -C .devstage -cJf .devbin/devbin.tar.xz .devbin && rm -rf .devstage
du -sh .devbin
