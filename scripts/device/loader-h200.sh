#!/usr/bin/env bash
# Loader acceptance on an NVIDIA GPU (issues 6 and 13), one call of the device tool. Builds nothing
# there: everything runs from .device/loader/, prepared here by
#   scripts/device/loader-prepare.sh
# and carried (`carry: [".device/loader"]`). Prints the report; copies it to $OUT.
set -u -o pipefail
D=.device/loader
OUT=${OUT:-/tmp/kbuild-loader-out}
mkdir -p "$OUT"
chmod +x "$D/kbuild" "$D/loader_gpu" "$D/explain_c" 2>/dev/null
{
  echo "## machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  echo
  echo "## \$ kbuild devices"
  "$D/kbuild" devices
  "$D/kbuild" devices --json
  echo
  echo "## \$ kbuild explain .device/loader/kb-h200 --kernel rmsnorm   (device auto-detected)"
  "$D/kbuild" explain "$D/kb-h200" --kernel rmsnorm
  echo "exit $?"
  echo
  echo "## \$ kbuild explain .device/loader/kb-h200 --kernel rmsnorm --json"
  "$D/kbuild" explain "$D/kb-h200" --kernel rmsnorm --json
  echo "exit $?"
  echo
  echo "## C ABI example (examples/c/explain.c, gcc) on the detected GPU"
  LD_LIBRARY_PATH="$D" "$D/explain_c" "$D/kb-h200" auto | tail -n 4
  echo "exit $?"
  echo
  echo "## loader_gpu test (tests/tests/loader_gpu.rs, release)"
  KBUILD_GPU_BUILD="$D/kb-h200" timeout 120 "$D/loader_gpu" loader_gpu:: --ignored --nocapture --test-threads=1
  echo "exit $?"
  echo
  echo "## GDN benchmark again (same binary, same run), then with eager module loading"
  # The bench and the swapped-object check only: open once, then select, verify and load
  # every kernel the GDN engine uses, against raw cuModuleLoadData + cuModuleGetFunction.
  for mode in default EAGER; do
    if [ "$mode" = EAGER ]; then export CUDA_MODULE_LOADING=EAGER; fi
    KBUILD_GPU_BENCH_ONLY=1 KBUILD_GPU_BUILD="$D/kb-h200" timeout 150 "$D/loader_gpu" loader_gpu:: --ignored --nocapture --test-threads=1 \
      | grep -E '^(CUDA_|\||goal|stages|===|.*←)'
    echo "exit ${PIPESTATUS[0]}"
  done
} 2>&1 | tee "$OUT/loader-h200.txt"
