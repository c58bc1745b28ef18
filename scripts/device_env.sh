# device_env.sh — sourced by the device-call scripts (device_all.sh, device_diag.sh, device_lt.sh):
# OUT (created), ROOT (the checkout; the working directory after), BIN (.devbin, unpacked from the
# archive scripts/device_all_stage.sh wrote, unless BIN is set), the library path for its .so files,
# the CUDA runtime and the image's NCCL wheel, and the tests' data variables.
set -u
OUT=${OUT:-/tmp/moq_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [ -z "${BIN:-}" ]; then
  [ -x .devbin/moq ] || tar -C "$ROOT" -xJf .devbin/devbin.tar.xz
  BIN=$ROOT/.devbin
fi
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# libnccl.so.2 is dlopen'ed (comm_nccl.cu): the toolkit's, or the image's PyTorch wheel (nvidia-nccl-cu13)
ncl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ncl
export MOQ_TESTDATA=${MOQ_TESTDATA:-$BIN/testdata} MOQ_TEST_SRCDATA=$ROOT/tests/data MOQ_TMP=/tmp/moq_tmp TMPDIR=/tmp
mkdir -p "$MOQ_TMP"
# For the timed scripts (device_batch64.sh, device_fa2.sh): left() of LIMIT seconds in all (540
# unless set; scripts with their own default set LIMIT after sourcing this), S the synthetic
# checkpoints, log() into $OUT/summary.log, and the GPU's name and clocks first.
left() { echo $((${LIMIT:-540} - SECONDS)); }
S=/tmp/moq_synth
mkdir -p "$S"
log() { echo "== $(date -u +%H:%M:%S) +${SECONDS}s $*" | tee -a "$OUT/summary.log"; }
device_header() {
  log "device"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$OUT/summary.log"
}
