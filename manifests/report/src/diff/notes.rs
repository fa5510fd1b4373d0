//! Release notes: what a release changes against the previous one, in markdown. Pure: made
//! from the two sides' [`Snapshot`]s and their [`Diff`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::render::size_delta;
use super::{Class, Diff, Snapshot, TargetStatus};

/// The markdown release notes of `next` against `prev`: added and removed targets and kernels,
/// resource regressions and improvements, launch-ABI changes where the manifests carry them,
/// and object and bundle sizes per target.
pub fn release_notes(d: &Diff, prev: &Snapshot, next: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} — release notes\n\n{} against {}.\n",
        next.package, d.head_label, d.base_label
    );

    let kernels =
        |s: &Snapshot| -> BTreeSet<String> { s.objects.iter().map(|o| o.kernel.clone()).collect() };
    let (kp, kn) = (kernels(prev), kernels(next));
    let added_targets: Vec<&str> = d
        .targets
        .iter()
        .filter(|t| t.status == TargetStatus::Added)
        .map(|t| t.target.as_str())
        .collect();
    let removed_targets: Vec<&str> = d
        .targets
        .iter()
        .filter(|t| t.status == TargetStatus::Removed)
        .map(|t| t.target.as_str())
        .collect();
    let list = |v: Vec<&str>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(out, "## Targets and kernels\n");
    let _ = writeln!(out, "- Targets added: {}", list(added_targets));
    let _ = writeln!(out, "- Targets removed: {}", list(removed_targets));
    let _ = writeln!(
        out,
        "- Kernels added: {}",
        list(kn.difference(&kp).map(String::as_str).collect())
    );
    let _ = writeln!(
        out,
        "- Kernels removed: {}",
        list(kp.difference(&kn).map(String::as_str).collect())
    );
    // Entries that came or went within kernels present in both.
    let mut entries_added: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut entries_removed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for t in d.targets.iter().filter(|t| t.status == TargetStatus::Both) {
        for e in t.added.iter().filter(|e| kp.contains(&e.object)) {
            entries_added
                .entry(e.kernel.clone())
                .or_default()
                .insert(t.target.clone());
        }
        for e in t.removed.iter().filter(|e| kn.contains(&e.object)) {
            entries_removed
                .entry(e.kernel.clone())
                .or_default()
                .insert(t.target.clone());
        }
    }
    for (what, m) in [("added", &entries_added), ("removed", &entries_removed)] {
        for (entry, targets) in m {
            let t: Vec<&str> = targets.iter().map(String::as_str).collect();
            let _ = writeln!(out, "- Entry {what}: `{entry}` ({})", t.join(", "));
        }
    }

    for (title, class) in [
        ("Resource regressions", Class::Regression),
        ("Resource improvements", Class::Improvement),
    ] {
        let _ = writeln!(out, "\n## {title}\n");
        let mut any = false;
        for t in &d.targets {
            for r in t
                .rows
                .iter()
                .filter(|r| !r.changes.is_empty() && r.resource_class == class)
            {
                any = true;
                let changes: Vec<String> = r
                    .changes
                    .iter()
                    .filter(|c| c.better.is_some())
                    .map(|c| format!("{} {} → {}", c.field.name, c.base.show(), c.head.show()))
                    .collect();
                let _ = writeln!(
                    out,
                    "- `{}` {}: {}",
                    t.target,
                    r.entry.kernel,
                    changes.join(", ")
                );
            }
        }
        if !any {
            let _ = writeln!(out, "None.");
        }
    }

    let _ = writeln!(out, "\n## Launch ABI\n");
    let recorded = |s: &Snapshot| s.objects.iter().any(|o| !o.params.is_empty());
    if !recorded(prev) || !recorded(next) {
        let _ = writeln!(
            out,
            "The {} manifest carries no launch parameters; no ABI change can be reported.",
            if recorded(prev) { "new" } else { "previous" }
        );
    } else {
        let mut any = false;
        for t in &d.targets {
            for r in t.rows.iter().filter(|r| !r.abi.is_empty()) {
                any = true;
                let what: Vec<String> = r.abi.iter().map(|a| a.describe()).collect();
                let _ = writeln!(
                    out,
                    "- `{}` {}: {} (breaking: callers must be rebuilt)",
                    t.target,
                    r.entry.kernel,
                    what.join(", ")
                );
            }
        }
        if !any {
            let _ = writeln!(
                out,
                "None: every kernel present in both launches as before."
            );
        }
    }

    let _ = writeln!(out, "\n## Sizes\n");
    let _ = writeln!(
        out,
        "| target | objects | previous | this release | change |\n|---|---|---|---|---|"
    );
    let count = |s: &Snapshot, t: &str| s.objects.iter().filter(|o| o.target == t).count();
    let (mut base, mut head) = (0u64, 0u64);
    for t in &d.targets {
        base += t.base_bytes;
        head += t.head_bytes;
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            t.target,
            count(next, &t.target).max(count(prev, &t.target)),
            t.base_bytes,
            t.head_bytes,
            size_delta(t.base_bytes, t.head_bytes)
        );
    }
    let _ = writeln!(
        out,
        "| all (the bundle's objects) | {} | {base} | {head} | {} |",
        next.objects.len(),
        size_delta(base, head)
    );
    out
}
