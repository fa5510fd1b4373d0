#!/usr/bin/env bash
# The GDN engine on the H200 (issue 7): parity against the fp64 reference, bitwise path
# checks, the 256-step trajectory, the benchmark, and FLA's fused_recurrent_gated_delta_rule
# side by side on the same data, in one run.
#
#   scripts/device/gdn-h200.sh build       # here: release kbuild (stripped) + the sm_90 kernels
#                                          #   -> .device/gdn/{kbuild,kernels/}; checks .whl/fla_core-0.6*
#   scripts/device/gdn-h200.sh run [OUT]   # on the GPU machine (carry .device/gdn and .whl):
#                                          #   $OUT/{bench.txt,fla.json,fla.txt,check.txt,env.txt,
#                                          #   check-portable.txt}
#
# Device call (from the repository root, one run):
#   run(carry=[".device/gdn", ".whl"], command="scripts/device/gdn-h200.sh run")
# Nothing is built on the GPU machine: kbuild and the cubins are built here (CUDA 13.5 cubins
# load on the 13.0 driver there; PTX 9.5 would not), FLA comes as its wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEV=.device/gdn
TOKENS=1,2,3,4,5,6,7,8

case "${1:-}" in
build)
    cargo build --release -q -p kbuild
    mkdir -p "$DEV"
    rm -rf "$DEV/kernels"
    target/release/kbuild --targets sm_90 --out "$DEV/kernels"
    # The portable paths (the fused norm without clusters, the commit without cp.async: what
    # HIP and sm < 80 run) forced on sm_90, so that the H200 checks them too.
    src=$(mktemp -d)
    cp -r kernels "$src/kernels"
    sed -i 's|cuda = \["--fmad=false"\]|cuda = ["--fmad=false", "-DGDN_NO_CLUSTER", "-DKC_NO_COPY_ASYNC"]|' "$src/kernels/Kbuild.toml"
    grep -q GDN_NO_CLUSTER "$src/kernels/Kbuild.toml" || { echo "error: could not set the portable defines" >&2; exit 1; }
    rm -rf "$DEV/portable"
    target/release/kbuild --manifest-path "$src/kernels/Kbuild.toml" --targets sm_90 --out "$PWD/$DEV/portable"
    rm -rf "$src"
    # The release binary carries line tables (74 MB): strip the copy to fit the carry limit.
    strip -o "$DEV/kbuild" target/release/kbuild
    ls .whl/fla_core-0.6*.whl >/dev/null 2>&1 || {
        echo "error: no .whl/fla_core-0.6*.whl; see docs/BENCHMARKS.md (GDN engine) for the pip download" >&2
        exit 1
    }
    du -sh "$DEV" .whl
    ;;
run)
    out="${2:-${OUT:-$DEV/out}}"
    mkdir -p "$out"
    {
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu --format=csv
        python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    } 2>&1 | tee "$out/env.txt"
    # 1. The benchmark (36 layers; fast), then 2. FLA on the same data, then 3. the parity suite
    # (3 seeds x T=1..8, bitwise paths, 256-step trajectory), streamed line by line: whatever a
    # time limit cuts, what ran is in $out.
    "$DEV/kbuild" run gdn --bundle "$DEV/kernels" --tokens "$TOKENS" --bench 2>&1 | tee "$out/bench.txt" \
        || echo "bench failed (see bench.txt)"
    "$DEV/kbuild" run gdn --dump-inputs /tmp/gdn-anchor.safetensors --seeds 1 || echo "dump failed"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-120}" \
        python3 scripts/device/gdn-fla.py /tmp/gdn-anchor.safetensors "$out/fla.json" 2>&1 | tee "$out/fla.txt" \
        || echo "FLA anchor failed (see fla.txt)"
    set +e
    timeout "${CHECK_TIMEOUT:-200}" "$DEV/kbuild" run gdn --bundle "$DEV/kernels" --tokens "$TOKENS" --check 2>&1 | tee "$out/check.txt"
    rc=${PIPESTATUS[0]}
    set -e
    grep -c PASS "$out/check.txt" | sed 's/^/PASS lines: /'
    grep FAIL "$out/check.txt" | head -20 || true
    # 4. The portable paths on the same GPU (one seed, a shorter trajectory).
    prc=0
    if [ -d "$DEV/portable" ]; then
        timeout "${CHECK_TIMEOUT:-200}" "$DEV/kbuild" run gdn --bundle "$DEV/portable" --tokens "$TOKENS" \
            --seeds 1 --trajectory 32 --check > "$out/check-portable.txt" 2>&1
        prc=$?
        tail -1 "$out/check-portable.txt"
        grep FAIL "$out/check-portable.txt" | head -20 || true
    fi
    [ "$rc" -ne 0 ] && exit "$rc"
    exit "$prc"
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
