//! The `kbuild.diff/v1` JSON report. Field names are the manifest's resource-record names.
//!
//! ```json
//! {"schema": "kbuild.diff/v1", "base": "...", "head": "...", "passed": true,
//!  "summary": {"abi", "regressions", "improvements", "changed", "unchanged", "added", "removed"},
//!  "targets": [{"target", "status", "line", "summary", "base_bytes", "head_bytes"}],
//!  "changes": [{"target", "kernel", "entry", "object", "variant", "class", "field",
//!               "base", "head", "delta", "unit"}],
//!   (ABI changes first: class "abi", field "params", plus "param" (the index) and "change"
//!   (added, removed, resized, moved, rekinded); base/head are the parameter records or null)
//!  "added": [{"target", "kernel", "entry", "object", "variant"}], "removed": [...],
//!  "sizes": [{"target", "object", "base", "head", "delta"}],
//!  "ambiguous": [{"target", "object", "variant", "unhashed", "base": [entries], "head": [...]}],
//!   (entries whose names differ only in compiler-made hashes, left unpaired)
//!  "gates": [{"rule", "tripped", "kernel", "target", "allowed_by", "message"}],
//!  "warnings": [...]}
//! ```

use serde::Serialize;

use super::fields;
use super::gate::GateReport;
use super::{Class, Counts, Diff, Entry, TargetStatus, SCHEMA};

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    base: &'a str,
    head: &'a str,
    /// False when a gate tripped.
    passed: bool,
    summary: Summary,
    targets: Vec<TargetJson<'a>>,
    /// One per changed field, rows in significance order.
    changes: Vec<Change<'a>>,
    added: Vec<EntryJson<'a>>,
    removed: Vec<EntryJson<'a>>,
    sizes: Vec<Size<'a>>,
    /// Entries that only a compiler-made hash tells apart, more than one candidate: unpaired.
    ambiguous: Vec<AmbiguousJson<'a>>,
    gates: Vec<Gate<'a>>,
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Summary {
    abi: usize,
    regressions: usize,
    improvements: usize,
    changed: usize,
    unchanged: usize,
    added: usize,
    removed: usize,
}

impl From<Counts> for Summary {
    fn from(c: Counts) -> Summary {
        Summary {
            abi: c.abi,
            regressions: c.regressions,
            improvements: c.improvements,
            changed: c.changed,
            unchanged: c.unchanged,
            added: c.added,
            removed: c.removed,
        }
    }
}

#[derive(Serialize)]
struct TargetJson<'a> {
    target: &'a str,
    /// `both`, `added` or `removed`.
    status: &'static str,
    line: String,
    summary: Summary,
    base_bytes: u64,
    head_bytes: u64,
}

#[derive(Serialize)]
struct Change<'a> {
    target: &'a str,
    kernel: &'a str,
    entry: &'a str,
    object: &'a str,
    variant: Option<&'a str>,
    /// `abi` for a parameter change; else the row's resource class: `regression`,
    /// `improvement` or `changed`.
    class: &'static str,
    field: &'static str,
    /// ABI changes: the parameter's index among the caller-visible ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<u32>,
    /// ABI changes: `added`, `removed`, `resized`, `moved`, `rekinded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    change: Option<&'static str>,
    base: serde_json::Value,
    head: serde_json::Value,
    delta: Option<i64>,
    unit: String,
}

fn class_name(c: Class) -> &'static str {
    match c {
        Class::Abi => "abi",
        Class::Regression => "regression",
        Class::Improvement => "improvement",
        Class::Changed => "changed",
    }
}

#[derive(Serialize)]
struct EntryJson<'a> {
    target: &'a str,
    kernel: &'a str,
    entry: &'a str,
    object: &'a str,
    variant: Option<&'a str>,
}

impl<'a> EntryJson<'a> {
    fn new(target: &'a str, e: &'a Entry) -> EntryJson<'a> {
        EntryJson {
            target,
            kernel: &e.kernel,
            entry: &e.entry,
            object: &e.object,
            variant: e.variant.as_deref(),
        }
    }
}

#[derive(Serialize)]
struct Size<'a> {
    target: &'a str,
    object: &'a str,
    base: Option<u64>,
    head: Option<u64>,
    delta: i64,
}

#[derive(Serialize)]
struct AmbiguousJson<'a> {
    target: &'a str,
    object: &'a str,
    variant: Option<&'a str>,
    unhashed: &'a str,
    base: &'a [String],
    head: &'a [String],
}

#[derive(Serialize)]
struct Gate<'a> {
    rule: &'a str,
    tripped: bool,
    kernel: Option<&'a str>,
    target: Option<&'a str>,
    allowed_by: Option<Allowed<'a>>,
    message: &'a str,
}

#[derive(Serialize)]
struct Allowed<'a> {
    origin: &'a str,
    justification: &'a str,
    expires: String,
}

/// The report as pretty JSON with a trailing newline.
pub fn to_json(diff: &Diff, gates: Option<&GateReport>) -> String {
    let mut report = Report {
        schema: SCHEMA,
        base: &diff.base_label,
        head: &diff.head_label,
        passed: !gates.is_some_and(GateReport::tripped),
        summary: diff.counts().into(),
        targets: Vec::new(),
        changes: Vec::new(),
        added: Vec::new(),
        removed: Vec::new(),
        sizes: Vec::new(),
        ambiguous: Vec::new(),
        gates: Vec::new(),
        warnings: gates.map_or(&[], |g| &g.warnings),
    };
    // ABI changes first (breaking), of every target, then the resource changes.
    for t in &diff.targets {
        for r in &t.rows {
            for a in &r.abi {
                let param = |p: &Option<kbuild_manifest::params::Param>| {
                    p.as_ref()
                        .and_then(|p| serde_json::to_value(p).ok())
                        .unwrap_or(serde_json::Value::Null)
                };
                report.changes.push(Change {
                    target: &t.target,
                    kernel: &r.entry.kernel,
                    entry: &r.entry.entry,
                    object: &r.entry.object,
                    variant: r.entry.variant.as_deref(),
                    class: class_name(Class::Abi),
                    field: "params",
                    param: Some(a.index),
                    change: Some(a.kind.as_str()),
                    base: param(&a.base),
                    head: param(&a.head),
                    delta: Some(super::signed_delta(
                        a.base.as_ref().map_or(0, |p| p.size),
                        a.head.as_ref().map_or(0, |p| p.size),
                    )),
                    unit: "bytes".into(),
                });
            }
        }
    }
    for t in &diff.targets {
        report.targets.push(TargetJson {
            target: &t.target,
            status: match t.status {
                TargetStatus::Both => "both",
                TargetStatus::Added => "added",
                TargetStatus::Removed => "removed",
            },
            line: t.summary_line(),
            summary: t.counts().into(),
            base_bytes: t.base_bytes,
            head_bytes: t.head_bytes,
        });
        for r in &t.rows {
            for c in &r.changes {
                report.changes.push(Change {
                    target: &t.target,
                    kernel: &r.entry.kernel,
                    entry: &r.entry.entry,
                    object: &r.entry.object,
                    variant: r.entry.variant.as_deref(),
                    class: class_name(r.resource_class),
                    field: c.field.name,
                    param: None,
                    change: None,
                    base: c.base.to_json(),
                    head: c.head.to_json(),
                    delta: c.delta,
                    unit: fields::unit_label(&c.field, &r.entry.resources),
                });
            }
        }
        report
            .added
            .extend(t.added.iter().map(|e| EntryJson::new(&t.target, e)));
        report
            .removed
            .extend(t.removed.iter().map(|e| EntryJson::new(&t.target, e)));
        report.sizes.extend(t.sizes.iter().map(|s| Size {
            target: &t.target,
            object: &s.object,
            base: s.base,
            head: s.head,
            delta: super::signed_delta(s.base.unwrap_or(0), s.head.unwrap_or(0)),
        }));
        report
            .ambiguous
            .extend(t.ambiguous.iter().map(|a| AmbiguousJson {
                target: &t.target,
                object: &a.object,
                variant: a.variant.as_deref(),
                unhashed: &a.unhashed,
                base: &a.base,
                head: &a.head,
            }));
    }
    if let Some(g) = gates {
        report.gates = g
            .results
            .iter()
            .map(|r| Gate {
                rule: &r.rule,
                tripped: r.tripped,
                kernel: r.kernel.as_deref(),
                target: r.target.as_deref(),
                allowed_by: r.allowed_by.as_ref().map(|a| Allowed {
                    origin: &a.origin,
                    justification: &a.justification,
                    expires: a.expires.to_string(),
                }),
                message: &r.message,
            })
            .collect();
    }
    let mut s = serde_json::to_string_pretty(&report).unwrap_or_default();
    s.push('\n');
    s
}
