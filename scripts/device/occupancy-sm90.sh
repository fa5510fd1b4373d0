#!/usr/bin/env bash
# The H200 (sm_90) occupancy oracle: build the probe, run it on the GPU machine, compare the
# CUDA runtime's answers with kbuild's model.
#
#   scripts/device/occupancy-sm90.sh build            # here: nvcc -> .device/occupancy_sm90
#   scripts/device/occupancy-sm90.sh run [OUT]        # on the GPU machine: JSON lines -> OUT
#                                                     #   (default: $OUT/occ.jsonl, else .device/occ.jsonl)
#   scripts/device/occupancy-sm90.sh compare [FILE]   # here: model vs FILE
#                                                     #   (default: docs/occupancy-sm90.jsonl)
#
# The probe is built with static cudart and sm_90 SASS, so the GPU machine needs only a
# driver (CUDA 13.0's is enough for a CUDA 13.5 build). Nothing is launched on the GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."

NV="${KBUILD_CUDA:-$HOME/.local/share/kbuild/toolchains/cuda-13.5.37/nvidia/cu13}"
BIN=.device/occupancy_sm90

case "${1:-}" in
build)
    if [ ! -x "$NV/bin/nvcc" ]; then
        echo "error: no nvcc under $NV: run \`cargo run -p kbuild -- toolchain install cuda\`" >&2
        exit 1
    fi
    mkdir -p .device
    # -Xptxas -v: the log shows the register and barrier counts the probe's table assumes.
    "$NV/bin/nvcc" -arch=sm_90 -cudart static -Xptxas -v -o "$BIN" \
        tests/device/occupancy_sm90.cu 2> .device/occupancy_sm90.ptxas.log
    echo "built $BIN (ptxas log: .device/occupancy_sm90.ptxas.log)"
    ;;
run)
    out="${2:-${OUT:-.device}/occ.jsonl}"
    if [ ! -x "$BIN" ]; then
        echo "error: $BIN missing: run \`$0 build\` first (and carry .device to the GPU machine)" >&2
        exit 1
    fi
    "$BIN" > "$out"
    echo "wrote $(wc -l < "$out") lines to $out"
    ;;
compare)
    file="$(realpath "${2:-docs/occupancy-sm90.jsonl}")"
    KBUILD_OCC_SM90_JSON="$file" cargo test -p kbuild-manifest --test readers \
        -- --ignored occupancy_cuda_device::model_equals_device_output --nocapture
    ;;
*)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
