#!/usr/bin/env bash
# The whole of ggml-cuda through kbuild on the device machine (16 cores; its CUDA 13.0 nvcc),
# in three calls that each fit the device tool's 10-minute limit:
#   bash scripts/device/realworld-h200.sh init      # kbuild init (discovery build for sm_89)
#   bash scripts/device/realworld-h200.sh build     # cold build for sm_89,sm_90
#   bash scripts/device/realworld-h200.sh rebuild   # second build, inspect vs cuobjdump, diff
# Several steps in one call run in order (`init build`).
# Prepare here: `scripts/realworld --stage --work .device/realworld/work`, then copy
# target/release/kbuild to .device/realworld/ (carry: [".device/realworld"]). State between the
# calls lives in target/rw-device, which is not carried (kept while the machine stays warm).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/realworld
W=target/rw-device
KB=$PWD/$D/kbuild
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
echo "nproc $(nproc); $(nvcc --version 2>/dev/null | tail -1 || echo 'no nvcc on PATH')"
for step in "$@"; do
case $step in
  init)
    rm -rf "$W" && mkdir -p "$W" && cp -r "$D/work/ggml" "$W/ggml"
    t0=$(now)
    mapfile -t init_args <"$W/ggml/init-args"
    KBUILD_CACHE_DIR=$PWD/$W/cache-init timeout "${INIT_TIMEOUT:-560}" "$KB" init "$W/ggml" --targets sm_89,sm_90 \
      "${init_args[@]}" --json >"$W/init.json" || echo "init exit $?"
    echo "init: $(secs "$t0" "$(now)") s"
    if [ -n "${OUT:-}" ]; then cp "$W/ggml/Kbuild.toml" "$W/init.json" "$OUT/" || true; fi
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ("kernels","entries","failures","host_only")}); [print(" ", u["source"], u["status"], list(u["errors"].values())[:1]) for u in r["units"] if u["status"] != "ok"]' "$W/init.json" || true
    ;;
  build)
    t0=$(now)
    KBUILD_CACHE_DIR=$PWD/$W/cache timeout "${BUILD_TIMEOUT:-570}" "$KB" build --keep-going --manifest-path "$W/ggml/Kbuild.toml" --out "$W/out" --json >"$W/build1.jsonl" || echo "build exit $?"
    echo "cold build: $(secs "$t0" "$(now)") s"
    python3 - "$W/build1.jsonl" <<'PY'
import json, sys, os
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
jobs = [e for e in ev if e.get("event") == "job"]
s = next((e for e in ev if e.get("event") == "summary"), {})
busy = [e.get("seconds", 0.0) for e in jobs]
cores = os.cpu_count() or 1
print(f"jobs {len(jobs)}; summary {s}; sum of job seconds {sum(busy):.0f}; longest {max(busy, default=0):.1f} s; ideal on {cores} cores {max(sum(busy)/cores, max(busy, default=0)):.1f} s")
for e in jobs:
    if e.get("status") == "failed":
        print("  failed:", e.get("kernel"), e.get("target"), str(e.get("error", ""))[:300])
PY
    ;;
  rebuild)
    t0=$(now)
    KBUILD_CACHE_DIR=$PWD/$W/cache "$KB" build --manifest-path "$W/ggml/Kbuild.toml" --out "$W/out" --json >"$W/build2.jsonl"
    echo "second build: $(secs "$t0" "$(now)") s; $(tail -1 "$W/build2.jsonl")"
    echo "manifest.json: $(stat -c %s "$W/out/manifest.json") bytes; objects $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(len(m["objects"]), "entries", sum(len(o["entries"]) for o in m["objects"]), "kernels", len(m["kernels"]))' "$W/out/manifest.json")"
    t0=$(now)
    "$KB" diff "$W/out" "$W/out" --format md >"$W/diff.md"
    echo "diff --format md over the whole set: $(secs "$t0" "$(now)") s"
    "$KB" inspect "$W/out" --json >"$W/inspect.json"
    echo "inspect vs cuobjdump -res-usage: $(python3 scripts/inspect-vs-cuobjdump.py "$W/inspect.json" cuobjdump 12)"
    ;;
  *) echo "usage: $0 init|build|rebuild..." >&2; exit 2 ;;
esac
done
