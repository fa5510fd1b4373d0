#!/usr/bin/env bash
# The `kbuild` Python package on an NVIDIA GPU with torch (issue 16), one call of the device
# tool. Builds nothing there (no cargo, no internet): the wheel and kernels come prepared by
#   scripts/device/python-prepare.sh
# and carried (`carry: [".device/python", ".whl"]`). In one run: rmsnorm from the bundle on
# torch tensors against torch.nn.functional.rms_norm, a wrong-argument launch refused, a
# CUDA-graph-captured launch replayed, kbuild.torch.register_op under torch.compile, the GDN
# verify step of one layer against FLA's fused_recurrent_gated_delta_rule on the same tensors
# (rel-L2 <= 1e-5, times side by side), and the Python launch overhead against a raw
# cuLaunchKernel from Rust. Prints the report; copies it to $OUT/python-h200.txt.
#
#   run(carry=[".device/python", ".whl"], command="scripts/device/python-h200.sh")
set -u -o pipefail
cd "$(dirname "$0")/../.."
D=.device/python
OUT=${OUT:-/tmp/kbuild-python-out}
mkdir -p "$OUT"
site=/tmp/kbuild-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$site" "$D"/kbuild-*.whl
if ls .whl/fla_core-0.6*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$site" .whl/*.whl
fi
chmod +x "$D/launch_overhead" 2>/dev/null
{
  echo "## machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
  echo
  PYTHONPATH=$site PYTHONUNBUFFERED=1 timeout 300 python3 scripts/device/python-h200.py "$D"
  echo "exit $?"
  echo
  echo "## raw cuLaunchKernel from Rust (loader/examples/launch_overhead.rs), same kernel and sizes"
  timeout 60 "$D/launch_overhead" "$D/kb-h200" 20000
  echo "exit $?"
} 2>&1 | tee "$OUT/python-h200.txt"
