#!/usr/bin/env python3
"""Compare `kbuild inspect --json` with `cuobjdump -res-usage` on a sample of cubins.

usage: inspect-vs-cuobjdump.py INSPECT_JSON CUOBJDUMP [SAMPLE]

Per kernel: registers = REG, scratch_bytes (the stack frame) = STACK, lds_bytes +
reserved_shared_bytes = SHARED, spill bytes are local memory and LOCAL counts only what is not
spilled or stacked, so LOCAL is not compared. SAMPLE cubins are taken evenly over the set
(default 12). Exit 1 on the first mismatch, 0 with a one-line summary otherwise; "skipped" when
there is no cuobjdump.
"""
import json
import os
import re
import subprocess
import sys

inspect_json, cuobjdump = sys.argv[1], sys.argv[2]
want_n = int(sys.argv[3]) if len(sys.argv) > 3 else 12
if not os.path.exists(cuobjdump) and "/" in cuobjdump:
    print("skipped (no cuobjdump)")
    sys.exit(0)
objs = [o for o in json.load(open(inspect_json)).get("objects", []) if o.get("path", "").endswith(".cubin")]
sample = objs[:: max(1, len(objs) // want_n)][:want_n]
pattern = re.compile(r"Function ([^\s:]+):\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:\d+")
checked = 0
for o in sample:
    text = subprocess.run([cuobjdump, "-res-usage", o["path"]], capture_output=True, text=True, check=True).stdout
    found = {m.group(1): tuple(int(m.group(i)) for i in (2, 3, 4)) for m in pattern.finditer(text)}
    for k in o.get("kernels", []):
        want = (k["registers"], k["scratch_bytes"], k["lds_bytes"] + k.get("reserved_shared_bytes", 0))
        if found.get(k["name"]) != want:
            print(f"MISMATCH {o['path']} {k['name']}: cuobjdump (REG, STACK, SHARED) {found.get(k['name'])}, kbuild {want}")
            sys.exit(1)
        checked += 1
print(f"{checked} kernels of {len(sample)} cubins (of {len(objs)}): registers, stack and shared bytes equal")
