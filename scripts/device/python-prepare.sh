#!/usr/bin/env bash
# Prepare .device/python/ for scripts/device/python-h200.sh (run here, on the build machine):
# the release abi3 wheel of the `kbuild` Python package (loader/python), every kernel for
# sm_90 from CUDA 13.5 as a build dir (kb-h200/) and as a bundle, and the launch-overhead
# example (raw cuLaunchKernel from Rust), stripped. FLA comes as its wheel in .whl/ (see
# scripts/device/gdn-h200.sh). Carry: [".device/python", ".whl"]; .device/ is ignored through
# .git/info/exclude (`echo /.device/ >> "$(git rev-parse --git-common-dir)/info/exclude"`).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/python
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
rm -rf "$D" && mkdir -p "$D"
venv=$CARGO_TARGET_DIR/python-venv
[ -x "$venv/bin/maturin" ] || {
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check maturin==1.16.0 pytest==9.0.3
}
start=$(date +%s)
"$venv/bin/maturin" build -q --release --strip -m loader/python/Cargo.toml -o "$D"
echo "wheel: $(basename "$D"/kbuild-*.whl), $(du -h "$D"/kbuild-*.whl | cut -f1), built in $(( $(date +%s) - start )) s"
cargo build --release -q -p kbuild --bin kbuild
cargo build --release -q -p kbuild-loader --example launch_overhead
strip -o "$D/launch_overhead" "$CARGO_TARGET_DIR/release/examples/launch_overhead"
"$CARGO_TARGET_DIR/release/kbuild" --targets sm_90 --out "$PWD/$D/kb-h200"
find "$D/kb-h200" -name '*.log' -delete
"$CARGO_TARGET_DIR/release/kbuild" package "$D/kb-h200" --out "$D"
ls .whl/fla_core-0.6*.whl >/dev/null 2>&1 ||
  echo "warning: no .whl/fla_core-0.6*.whl: the GDN comparison with FLA will be skipped (docs/BENCHMARKS.md, GDN engine)" >&2
du -sh "$D"
