#!/usr/bin/env bash
# Triton ahead of time on the H200 (issue 28), one call of the device tool; nothing is built
# there. FLA's own call (Triton 3.6.0's JIT, in one process) and the same kernel built ahead of
# time by kbuild and launched through `import kbuild` (in another process that never imports
# triton) on the same tensors: outputs compared bitwise, cold start and host time per launch
# side by side; then, in one process, host time per launch of Triton's `kernel[grid](...)`,
# FLA's call and kbuild's launches; then launches with global scratch and clusters against
# Triton's JIT (scripts/device/triton-features.py). Prepared by scripts/device/triton-prepare.sh.
#
#   run(carry=[".device/triton"], command="scripts/device/triton-h200.sh")
set -u -o pipefail
cd "$(dirname "$0")/../.."
D=.device/triton
OUT=${OUT:-/tmp/kbuild-triton-out}
mkdir -p "$OUT"
site=/tmp/kbuild-triton-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$site" "$D"/kbuild-*.whl "$D"/fla_core-*.whl
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  export PYTHONPATH=$site PYTHONUNBUFFERED=1
  t0=$(date +%s.%N)
  timeout 300 python3 scripts/device/triton-fla.py jit /tmp/fla-cases.pt
  t1=$(date +%s.%N)
  timeout 300 python3 scripts/device/triton-fla.py aot /tmp/fla-cases.pt "$D/fla/out"
  t2=$(date +%s.%N)
  python3 -c "print(f'process wall: JIT {${t1}-${t0}:.2f} s, kbuild {${t2}-${t1}:.2f} s')"
  timeout 300 python3 scripts/device/triton-fla.py bench "$D/fla/out"
  timeout 300 python3 scripts/device/triton-features.py jit /tmp/features-cases.pt "$D/features"
  timeout 300 python3 scripts/device/triton-features.py aot /tmp/features-cases.pt "$D/features/out"
} 2>&1 | tee "$OUT/triton-h200.txt"
