#!/usr/bin/env python3
"""scripts/port-coverage's table: built/total units per target and the failures grouped by
first error (from init's kbuild.init/v1 document and the build's --json events).

    port-coverage-report.py NAME PROJECT_DIR INIT_JSON BUILD_JSONL TARGETS
"""
import collections
import json
import os
import re
import sys

name, proj, init_path, build_path, targets = sys.argv[1:]
targets = targets.split(",")
units = sorted(
    os.path.relpath(os.path.join(d, f), proj)
    for d, _, fs in os.walk(proj)
    for f in fs
    if f.endswith(".cu")
)


def first_error(text):
    """The first compiler error of a log, without its file:line: prefix."""
    for line in (text or "").splitlines():
        m = re.search(r"(?:fatal )?error: (.*)", line)
        if m:
            msg = m.group(1).strip()
            # Identifiers stay, numbers and paths do not: one group per cause.
            return re.sub(r"'[^']*/([^/']+)'", r"'\1'", msg)
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return lines[0][:120] if lines else "(no log)"


init = json.load(open(init_path)) if os.path.getsize(init_path) else {}
by_kernel = {u["kernel"]: u for u in init.get("units", [])}
source_of = {u["kernel"]: u["source"] for u in init.get("units", [])}
built = {t: set() for t in targets}
failed = {t: {} for t in targets}
for line in open(build_path):
    if not line.strip():
        continue
    e = json.loads(line)
    if e.get("event") != "job" or e.get("target") not in built:
        continue
    src = source_of.get(e["kernel"], e["kernel"])
    if e.get("status") in ("compiled", "cached", "ok"):
        built[e["target"]].add(src)
    elif e.get("status") == "failed":
        failed[e["target"]][src] = first_error(e.get("error"))
# A unit init could not build at all is not in the build: its discovery error counts for
# every target.
for u in init.get("units", []):
    if u.get("status") != "ok":
        for t in targets:
            if u["source"] not in built[t] and u["source"] not in failed[t]:
                errs = u.get("errors") or {}
                text = errs.get(t) or next(iter(errs.values()), "") if errs else u.get("status")
                failed[t][u["source"]] = first_error(text)

print(f"### {name}: {len(units)} translation units\n")
print("| target | built | total | share |\n|---|---|---|---|")
for t in targets:
    n = len(built[t])
    print(f"| {t} | {n} | {len(units)} | {100 * n / max(len(units), 1):.0f}% |")
print()
groups = collections.defaultdict(set)
for t in targets:
    for src, err in failed[t].items():
        groups[err].add(src)
missing = {t: set(units) - built[t] - set(failed[t]) for t in targets}
for t, m in missing.items():
    for src in m:
        groups["(no job: restricted or not planned)"].add(src)
if groups:
    print("| first error | units |\n|---|---|")
    for err, srcs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(sorted(os.path.basename(s) for s in srcs)[:6])
        more = f", +{len(srcs) - 6}" if len(srcs) > 6 else ""
        print(f"| `{err}` | {len(srcs)}: {names}{more} |")
