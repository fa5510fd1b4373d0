#!/usr/bin/env bash
# Prepare .device/triton/ for scripts/device/triton-h200.sh (run here, on a machine with no
# GPU), built by kbuild's Triton workers pinned to the H200's Triton (3.6.0) for sm_90a: FLA
# 0.6.0's fused recurrent GDN forward and chunked state kernel (its 12 configs) from FLA's
# pinned wheel, and kernels whose launches need scratch memory and clusters
# (tests/tests/triton/features.py); the `kbuild` Python wheel that launches them, and FLA's
# wheel for the JIT side. Carry: [".device/triton"] (.device/ is ignored through
# .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/triton
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
rm -rf "$D" && mkdir -p "$D/fla"
venv=$CARGO_TARGET_DIR/python-venv
[ -x "$venv/bin/maturin" ] || {
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check maturin==1.16.0 pytest==9.0.3
}
"$venv/bin/maturin" build -q --profile "${KBUILD_PY_PROFILE:-release}" --strip -m loader/python/Cargo.toml -o "$D"
cargo build -q -p kbuild --bin kbuild
kbuild=$CARGO_TARGET_DIR/debug/kbuild
"$kbuild" toolchain install triton
echo "fla-core==0.6.0 --hash=sha256:b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd" >"$D/fla-req.txt"
python3 -I -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$D/fla-req.txt" -d "$D"
python3 -I -m zipfile -e "$D"/fla_core-0.6.0-py3-none-any.whl "$D/fla"
# Both kernels (the chunk kernel's 12 configs) for the H200.
sed 's/^targets = TARGETS/targets = ["sm_90a"]/' tests/tests/triton/fla.toml >"$D/fla/Kbuild.toml"
(cd "$D/fla" && KBUILD_CACHE_DIR=$PWD/../cache "$kbuild" && rm -rf ../cache)
find "$D/fla/out" -name '*.log' -delete
# Launches with global scratch and clusters (tests/tests/triton/features.py).
mkdir -p "$D/features"
cp tests/tests/triton/features.py "$D/features/"
sed 's/^targets = TARGETS/targets = ["sm_90a"]/' tests/tests/triton/features.toml >"$D/features/Kbuild.toml"
(cd "$D/features" && KBUILD_CACHE_DIR=$PWD/../cache "$kbuild" && rm -rf ../cache)
find "$D/features/out" -name '*.log' -delete
du -sh "$D"
