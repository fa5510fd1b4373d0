#!/usr/bin/env bash
# The `kbuild` Python package's tests, from the installed wheel (scripts/test runs this last):
# a venv under the target dir with maturin and pytest pinned from PyPI, one wheel build
# (dev profile, stripped: it reuses what `cargo test --workspace` compiled), installed into
# the venv, then pytest from outside the source tree against a real build of
# kernels/rmsnorm.cu for sm_90 and gfx1100 made with the repository's kbuild ($KBUILD_BIN).
#   KBUILD_PY_PROFILE=release loader/python/test.sh   # the wheel as pip builds it
#   loader/python/test.sh --build | --test             # one half: build and install the wheel,
#                                                      # or test the one installed
set -euo pipefail
phase=${1:-all}
case $phase in
  all|--build|--test) ;;
  *) echo "usage: loader/python/test.sh [--build|--test]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
root=$PWD
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
venv=$CARGO_TARGET_DIR/python-venv
py=$venv/bin/python
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -c 'import importlib.metadata as m, sys; sys.exit(m.version("maturin") != "1.16.0" or m.version("pytest") != "9.0.3")' 2>/dev/null ||
  "$py" -m pip install -q --disable-pip-version-check maturin==1.16.0 pytest==9.0.3
kbuild_bin=${KBUILD_BIN:-$CARGO_TARGET_DIR/debug/kbuild}
[ -x "$kbuild_bin" ] || cargo build -q -p kbuild --bin kbuild
# Absolute before the cd below: the tests run from a temp dir.
kbuild_bin=$(realpath "$kbuild_bin")
if [ "$phase" != --test ]; then
wheels=$CARGO_TARGET_DIR/python-wheels
rm -rf "$wheels"
start=$(date +%s)
log=$CARGO_TARGET_DIR/python-wheel.log
if ! "$venv/bin/maturin" build --profile "${KBUILD_PY_PROFILE:-dev}" --strip \
    -m loader/python/Cargo.toml -o "$wheels" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
echo "wheel: $(ls "$wheels") ($(du -h "$wheels"/*.whl | cut -f1), built in $(( $(date +%s) - start )) s)"
# After `cargo test --workspace` only PyO3 and the binding should compile here (loader/python's
# Cargo.toml keeps the features equal); anything else is compile time spent twice.
echo "compiled: $(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' "$log" | tr '\n' ' ')"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/kbuild-*.whl
fi
[ "$phase" = --build ] && exit 0
# Outside the source tree, so that `import kbuild` is the installed wheel.
cd "$(mktemp -d)"
KBUILD_BIN=$kbuild_bin KBUILD_REPO=$root "$py" -m pytest -q -p no:cacheprovider "$root/loader/python/tests"
