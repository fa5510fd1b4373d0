#!/usr/bin/env bash
# The GDN engine on the H200 (issue 7): parity against the fp64 reference, bitwise path
# checks, the 256-step trajectory, the benchmark, and FLA's fused_recurrent_gated_delta_rule
# side by side on the same data, in one run.
#
#   scripts/device/gdn-h200.sh build       # here: release kbuild (stripped) + the sm_90 kernels
#                                          #   -> .device/gdn/{kbuild,kernels/}; checks .whl/fla_core-0.6*
#   scripts/device/gdn-h200.sh run [OUT]   # on the GPU machine (carry .device/gdn and .whl):
#                                          #   $OUT/{gdn.json,gdn.txt,fla.json,fla.txt,env.txt}
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
    # 1. kbuild: parity (3 seeds x T=1..8, bitwise paths, 256-step trajectory) + bench, 36 layers.
    set +e
    "$DEV/kbuild" run gdn --bundle "$DEV/kernels" --tokens "$TOKENS" --check --bench --json \
        > "$out/gdn.json" 2> "$out/gdn.err"
    rc=$?
    set -e
    python3 - "$out/gdn.json" <<'EOF' | tee "$out/gdn.txt"
import json, sys
r = json.load(open(sys.argv[1]))
p, b = r.get("parity") or {}, r.get("bench") or {}
print("device:", r.get("device"))
fails = [c for c in p.get("checks", []) if not c["pass"]]
print("parity: %d checks, %d failed" % (len(p.get("checks", [])), len(fails)))
worst = {}
for c in p.get("checks", []):
    key = c["name"].split(" ", 3)[-1] if c["name"].startswith("seed") else c["name"]
    if c["kind"] == "rel-l2":
        worst[key] = max(worst.get(key, 0.0), c["value"])
    else:
        worst[key] = max(worst.get(key, 0.0), c["value"])
for k, v in sorted(worst.items()):
    print("  worst %-70s %.3g" % (k, v))
for c in fails[:40]:
    print("  FAIL", c["name"], c["value"], c["detail"])
print("bench: copy %.1f us %.0f GB/s" % (b.get("copy_us", 0), b.get("copy_gb_per_s", 0)))
for row in b.get("rows", []):
    print("  %-17s %2s %4d launches  median %8.1f us  min %8.1f  %6.0f GB/s  %.2fx copy" % (
        row["op"], row["tokens"] or "-", row["launches"], row["median_us"], row["min_us"], row["gb_per_s"], row["vs_copy"]))
EOF
    tail -5 "$out/gdn.err" || true
    # 2. FLA on the same data.
    "$DEV/kbuild" run gdn --dump-inputs /tmp/gdn-anchor.safetensors --seeds 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 scripts/device/gdn-fla.py /tmp/gdn-anchor.safetensors "$out/fla.json" \
        2>&1 | tee "$out/fla.txt" || echo "FLA anchor failed (see fla.txt)"
    exit "$rc"
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
