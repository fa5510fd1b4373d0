#!/usr/bin/env bash
# Prepare .device/loader/ for scripts/device/loader-h200.sh (run here, on the build machine):
# a build dir with sm_80, sm_89, sm_90, sm_90a and compute_90 from CUDA 13.5 (every kernel,
# the GDN engine's among them), the release kbuild binary, the release end-to-end test binary (as loader_gpu),
# the C example and the loader cdylib. Ignore .device/ first (`echo /.device/ >>
# "$(git rev-parse --git-common-dir)/info/exclude"`): it travels as `carry: [".device/loader"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.device/loader
rm -rf "$D" && mkdir -p "$D"
cargo build --release -p kbuild --bin kbuild
cargo build --release -p kbuild-capi
bin=$(cargo test --release -p kbuild --test e2e --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="e2e": print(m["executable"])')
cp "$bin" "$D/loader_gpu"
cp target/release/kbuild target/release/libkbuild_capi.so "$D/"
gcc -O2 -Wall -Wextra -Werror -I loader/include examples/c/explain.c -L target/release -lkbuild_capi -o "$D/explain_c"
target/release/kbuild --targets sm_80,sm_89,sm_90,sm_90a,compute_90 --out "$D/kb-h200"
find "$D/kb-h200" -name '*.log' -delete
# Line tables are not needed there; the working tree that travels is limited to 64 MiB.
strip "$D/kbuild" "$D/loader_gpu" "$D/libkbuild_capi.so" "$D/explain_c"
du -sh "$D"
