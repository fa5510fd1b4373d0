//! Resource-usage diffs between two builds (`kbuild diff`), CI gates over them, and their
//! rendering as GitHub markdown, terminal text and `kbuild.diff/v1` JSON.
//!
//! Pure: both sides come in as [`Snapshot`]s (from a manifest, a bundle's manifest or a
//! baseline file, read by the caller), demangled names as a map, today's date as a value.
//!
//! Rows are per (target, kernel entry); a variant is part of the row's name. A row is a
//! regression when any judged field got worse (more registers, LDS, scratch or spills, less
//! occupancy), an improvement when the judged fields only got better, and "changed" when only
//! unjudged fields (kernarg size, PTX ISA, ...) moved. A row whose launch parameters changed
//! (one added, removed, resized, moved, or turned from pointer to value) is an ABI change: a
//! caller built against the base launches the head wrongly. ABI rows come first everywhere.
//!
//! Entries are matched by object, variant and symbol; those left over on both sides are then
//! matched by their symbol less its compiler-made hashes ([`hashed::unhashed`]: nvcc's
//! anonymous namespaces and internal names change with the file's contents). Where that still
//! leaves more than one candidate, nothing is paired and the target lists them as [`Ambiguous`].

mod abi;
pub mod allow;
pub mod fields;
pub mod gate;
pub mod hashed;
mod json;
pub mod notes;
mod render;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet};

pub use abi::{kind_label, param_changes, ParamChange, ParamChangeKind};
pub use allow::{load_allowlist, parse_allowlist, AllowError};
pub use json::to_json;
pub use render::{markdown, markdown_full, text, COMMENT_MAX_CHARS};
pub use snapshot::{Snapshot, SnapshotError, SnapshotObject, BASELINE_SCHEMA};

use fields::{Better, Column, Field, Value};
use kbuild_manifest::params::Param;
use kbuild_manifest::resources::Resources;

/// The schema tag of the JSON report.
pub const SCHEMA: &str = "kbuild.diff/v1";

/// One kernel entry of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// What a reader sees: the demangled entry name, then ` [variant]`.
    pub kernel: String,
    /// The entry symbol as the object exports it.
    pub entry: String,
    /// The Kbuild.toml kernel the object belongs to.
    pub object: String,
    pub variant: Option<String>,
    pub resources: Resources,
    /// The launch parameters, when the side records them.
    pub params: Option<Vec<Param>>,
}

/// A field that differs between base and head.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange {
    pub field: Field,
    pub base: Value,
    pub head: Value,
    /// `head - base` when both are numbers.
    pub delta: Option<i64>,
    /// `Some(true)` better, `Some(false)` worse, `None` not judged.
    pub better: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// The launch parameters changed (breaking, whatever the resources did).
    Abi,
    Regression,
    Improvement,
    /// Only unjudged fields changed.
    Changed,
}

/// An entry present on both sides whose resources or launch parameters differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The head side (names and resources).
    pub entry: Entry,
    pub base: Resources,
    pub changes: Vec<FieldChange>,
    /// Launch-parameter changes (only when both sides record the parameters).
    pub abi: Vec<ParamChange>,
    /// [`Class::Abi`] when `abi` is not empty, else [`Row::resource_class`].
    pub class: Class,
    /// What the resource `changes` alone make the row (`Changed` when there are none).
    pub resource_class: Class,
    /// Sort tier: new spills, more spills, occupancy drops, occupancy gains, fewer spills,
    /// other regressions, other improvements, the rest.
    pub tier: u8,
    /// The largest relative change of a judged numeric field (for ordering within a tier).
    pub magnitude: f64,
}

impl Row {
    pub fn change(&self, name: &str) -> Option<&FieldChange> {
        self.changes.iter().find(|c| c.field.name == name)
    }
}

/// An object whose size differs (absent on a side: `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeChange {
    /// `kernel` or `kernel.variant`, as the object files are named.
    pub object: String,
    pub base: Option<u64>,
    pub head: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetStatus {
    Both,
    /// Only in head.
    Added,
    /// Only in base.
    Removed,
}

/// The diff of one target.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetDiff {
    pub target: String,
    pub status: TargetStatus,
    /// Changed rows, most significant first.
    pub rows: Vec<Row>,
    pub unchanged: usize,
    /// Entries only in head (with head's resources), by name.
    pub added: Vec<Entry>,
    /// Entries only in base (with base's resources), by name.
    pub removed: Vec<Entry>,
    pub sizes: Vec<SizeChange>,
    pub base_bytes: u64,
    pub head_bytes: u64,
    /// Entries whose names differ only in compiler-made hashes with more than one candidate:
    /// left unpaired (they stay in `added` and `removed`) and reported.
    pub ambiguous: Vec<Ambiguous>,
}

/// Entries of one object that only a compiler-made hash tells apart, more than one on a side:
/// which base entry became which head entry is not known, so none is paired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    /// The Kbuild.toml kernel and variant of the object.
    pub object: String,
    pub variant: Option<String>,
    /// The symbol with its hashes blanked (`#`).
    pub unhashed: String,
    /// The entry symbols of each side.
    pub base: Vec<String>,
    pub head: Vec<String>,
}

/// Counts of one target or of the whole diff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Rows with launch-parameter changes (counted there only).
    pub abi: usize,
    pub regressions: usize,
    pub improvements: usize,
    pub changed: usize,
    pub unchanged: usize,
    pub added: usize,
    pub removed: usize,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.abi += o.abi;
        self.regressions += o.regressions;
        self.improvements += o.improvements;
        self.changed += o.changed;
        self.unchanged += o.unchanged;
        self.added += o.added;
        self.removed += o.removed;
    }
}

impl TargetDiff {
    pub fn counts(&self) -> Counts {
        let n = |c: Class| self.rows.iter().filter(|r| r.class == c).count();
        Counts {
            abi: n(Class::Abi),
            regressions: n(Class::Regression),
            improvements: n(Class::Improvement),
            changed: n(Class::Changed),
            unchanged: self.unchanged,
            added: self.added.len(),
            removed: self.removed.len(),
        }
    }

    /// Whether anything at all differs (rows, entries, object sizes).
    pub fn differs(&self) -> bool {
        !(self.rows.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.sizes.is_empty()
            && self.ambiguous.is_empty())
    }

    /// The one-line summary: `gfx1201: 2 regressions, 4 improvements, 31 unchanged`.
    pub fn summary_line(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let size = render::size_delta(self.base_bytes, self.head_bytes);
        match self.status {
            TargetStatus::Added => format!(
                "{}: new target, {} ({})",
                self.target,
                plural(self.added.len(), "kernel", "kernels"),
                size
            ),
            TargetStatus::Removed => format!(
                "{}: target removed, {} ({})",
                self.target,
                plural(self.removed.len(), "kernel", "kernels"),
                size
            ),
            TargetStatus::Both => {
                let c = self.counts();
                let mut parts = Vec::new();
                if c.abi > 0 {
                    parts.push(plural(c.abi, "ABI change", "ABI changes"));
                }
                parts.push(plural(c.regressions, "regression", "regressions"));
                parts.push(plural(c.improvements, "improvement", "improvements"));
                if c.changed > 0 {
                    parts.push(plural(c.changed, "other change", "other changes"));
                }
                parts.push(format!("{} unchanged", c.unchanged));
                if c.added > 0 {
                    parts.push(format!("{} added", c.added));
                }
                if c.removed > 0 {
                    parts.push(format!("{} removed", c.removed));
                }
                let mut line = format!("{}: {}", self.target, parts.join(", "));
                if self.base_bytes != self.head_bytes {
                    line.push_str(&format!("; objects {size}"));
                }
                line
            }
        }
    }
}

/// A whole diff.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// How the caller names the sides (`base/out`, `HEAD~1`, `kernels/resources.json`).
    pub base_label: String,
    pub head_label: String,
    /// Head's targets in its order, then those only base has.
    pub targets: Vec<TargetDiff>,
}

type Key = (String, Option<String>, String);

impl Diff {
    /// Compare `base` with `head`. `names` maps mangled entry symbols to demangled names.
    pub fn new(
        base: &Snapshot,
        head: &Snapshot,
        base_label: &str,
        head_label: &str,
        names: &BTreeMap<String, String>,
    ) -> Diff {
        let mut order: Vec<String> = Vec::new();
        let targets_of = |s: &Snapshot| {
            let mut t = s.targets.clone();
            for o in &s.objects {
                if !t.contains(&o.target) {
                    t.push(o.target.clone());
                }
            }
            t
        };
        let (base_targets, head_targets) = (targets_of(base), targets_of(head));
        for t in head_targets.iter().chain(&base_targets) {
            if !order.contains(t) {
                order.push(t.clone());
            }
        }
        let targets = order
            .into_iter()
            .map(|t| {
                let status = match (base_targets.contains(&t), head_targets.contains(&t)) {
                    (true, false) => TargetStatus::Removed,
                    (false, true) => TargetStatus::Added,
                    _ => TargetStatus::Both,
                };
                target_diff(&t, status, base, head, names)
            })
            .collect();
        Diff {
            base_label: base_label.to_string(),
            head_label: head_label.to_string(),
            targets,
        }
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for t in &self.targets {
            c += t.counts();
        }
        c
    }

    /// Whether anything differs anywhere (what a baseline check calls drift).
    pub fn differs(&self) -> bool {
        self.targets.iter().any(TargetDiff::differs)
    }
}

/// `head - base`, saturated to the `i64` range (a hostile record cannot overflow it).
pub fn signed_delta(base: u64, head: u64) -> i64 {
    (i128::from(head) - i128::from(base)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The display name of an entry: demangled (without a leading `void `), then ` [variant]`.
pub fn display_name(
    entry: &str,
    variant: Option<&str>,
    names: &BTreeMap<String, String>,
) -> String {
    let base = names
        .get(entry)
        .map(|d| d.strip_prefix("void ").unwrap_or(d).to_string())
        .unwrap_or_else(|| entry.to_string());
    match variant {
        Some(v) => format!("{base} [{v}]"),
        None => base,
    }
}

fn entries_of(
    s: &Snapshot,
    target: &str,
    names: &BTreeMap<String, String>,
) -> BTreeMap<Key, Entry> {
    let mut out = BTreeMap::new();
    for o in s.objects.iter().filter(|o| o.target == target) {
        for (entry, r) in &o.resources {
            let params = o.params.get(entry).cloned();
            out.insert(
                (o.kernel.clone(), o.variant.clone(), entry.clone()),
                Entry {
                    kernel: display_name(entry, o.variant.as_deref(), names),
                    entry: entry.clone(),
                    object: o.kernel.clone(),
                    variant: o.variant.clone(),
                    resources: r.clone(),
                    params,
                },
            );
        }
    }
    out
}

fn sizes_of(s: &Snapshot, target: &str) -> BTreeMap<(String, Option<String>), u64> {
    s.objects
        .iter()
        .filter(|o| o.target == target)
        .map(|o| ((o.kernel.clone(), o.variant.clone()), o.size))
        .collect()
}

fn target_diff(
    target: &str,
    status: TargetStatus,
    base: &Snapshot,
    head: &Snapshot,
    names: &BTreeMap<String, String>,
) -> TargetDiff {
    let (b, h) = (
        entries_of(base, target, names),
        entries_of(head, target, names),
    );
    let mut rows = Vec::new();
    let mut unchanged = 0;
    let matched = match_entries(&b, &h);
    for (be, he) in &matched.pairs {
        match compare(be, he) {
            Some(row) => rows.push(row),
            None => unchanged += 1,
        }
    }
    let (mut added, mut removed) = (matched.added, matched.removed);
    rows.sort_by(|x, y| {
        (x.class != Class::Abi)
            .cmp(&(y.class != Class::Abi))
            .then(x.tier.cmp(&y.tier))
            .then(y.magnitude.total_cmp(&x.magnitude))
            .then_with(|| x.entry.kernel.cmp(&y.entry.kernel))
    });
    added.sort_by(|x, y| x.kernel.cmp(&y.kernel));
    removed.sort_by(|x, y| x.kernel.cmp(&y.kernel));

    let (bs, hs) = (sizes_of(base, target), sizes_of(head, target));
    let keys: BTreeSet<_> = bs.keys().chain(hs.keys()).cloned().collect();
    let sizes = keys
        .into_iter()
        .filter_map(|k| {
            let (x, y) = (bs.get(&k).copied(), hs.get(&k).copied());
            (x != y).then(|| SizeChange {
                object: match &k.1 {
                    Some(v) => format!("{}.{v}", k.0),
                    None => k.0.clone(),
                },
                base: x,
                head: y,
            })
        })
        .collect();
    TargetDiff {
        target: target.to_string(),
        status,
        rows,
        unchanged,
        added,
        removed,
        sizes,
        base_bytes: bs.values().fold(0, |a, b| a.saturating_add(*b)),
        head_bytes: hs.values().fold(0, |a, b| a.saturating_add(*b)),
        ambiguous: matched.ambiguous,
    }
}

/// Base and head entries of one target, paired.
struct Matched<'a> {
    pairs: Vec<(&'a Entry, &'a Entry)>,
    added: Vec<Entry>,
    removed: Vec<Entry>,
    ambiguous: Vec<Ambiguous>,
}

/// Pair entries by key; then those left on both sides by key with the symbol's compiler-made
/// hashes blanked, where exactly one is left on each side.
fn match_entries<'a>(b: &'a BTreeMap<Key, Entry>, h: &'a BTreeMap<Key, Entry>) -> Matched<'a> {
    let mut pairs = Vec::new();
    // Per unhashed key: the leftover entries of each side.
    type Leftovers<'a> = BTreeMap<Key, (Vec<&'a Entry>, Vec<&'a Entry>)>;
    let mut by_unhashed: Leftovers = BTreeMap::new();
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let unhashed_key = |k: &Key| hashed::unhashed(&k.2).map(|u| (k.0.clone(), k.1.clone(), u));
    for (key, he) in h {
        match b.get(key) {
            Some(be) => pairs.push((be, he)),
            None => match unhashed_key(key) {
                Some(u) => by_unhashed.entry(u).or_default().1.push(he),
                None => added.push(he.clone()),
            },
        }
    }
    for (key, be) in b {
        if !h.contains_key(key) {
            match unhashed_key(key) {
                Some(u) => by_unhashed.entry(u).or_default().0.push(be),
                None => removed.push(be.clone()),
            }
        }
    }
    let mut ambiguous = Vec::new();
    for ((object, variant, unhashed), (bs, hs)) in by_unhashed {
        match (bs.as_slice(), hs.as_slice()) {
            ([be], [he]) => pairs.push((be, he)),
            _ => {
                if !bs.is_empty() && !hs.is_empty() {
                    ambiguous.push(Ambiguous {
                        object,
                        variant,
                        unhashed,
                        base: bs.iter().map(|e| e.entry.clone()).collect(),
                        head: hs.iter().map(|e| e.entry.clone()).collect(),
                    });
                }
                removed.extend(bs.into_iter().cloned());
                added.extend(hs.into_iter().cloned());
            }
        }
    }
    Matched {
        pairs,
        added,
        removed,
        ambiguous,
    }
}

/// The changed fields of an entry, classified; `None` when nothing differs.
fn compare(base: &Entry, head: &Entry) -> Option<Row> {
    let (br, hr) = (&base.resources, &head.resources);
    let mut changes = Vec::new();
    if fields::kind(br) != fields::kind(hr) {
        // A record of another vendor under the same target and name: every field of both
        // kinds is reported, none judged.
        let kinds = fields::fields_of(br).iter().chain(fields::fields_of(hr));
        for f in kinds {
            let (x, y) = (fields::value(br, f.name), fields::value(hr, f.name));
            if x != y && !changes.iter().any(|c: &FieldChange| c.field.name == f.name) {
                changes.push(FieldChange {
                    field: Field {
                        better: Better::Neutral,
                        ..*f
                    },
                    base: x,
                    head: y,
                    delta: None,
                    better: None,
                });
            }
        }
    } else {
        for f in fields::fields_of(hr) {
            let (x, y) = (fields::value(br, f.name), fields::value(hr, f.name));
            let limiter_moved = f.column == Column::Occupancy
                && fields::occupancy(br).map(|o| (&o.limiter, o.max))
                    != fields::occupancy(hr).map(|o| (&o.limiter, o.max));
            if x == y && !limiter_moved {
                continue;
            }
            let delta = match (&x, &y) {
                (Value::Num(a), Value::Num(b)) => Some(signed_delta(*a, *b)),
                _ => None,
            };
            let better = match (f.better, delta) {
                (_, None) | (_, Some(0)) | (Better::Neutral, _) => None,
                (Better::Lower, Some(d)) => Some(d < 0),
                (Better::Higher, Some(d)) => Some(d > 0),
            };
            changes.push(FieldChange {
                field: *f,
                base: x,
                head: y,
                delta,
                better,
            });
        }
    }
    let abi = match (&base.params, &head.params) {
        (Some(b), Some(h)) => param_changes(b, h),
        _ => Vec::new(),
    };
    if changes.is_empty() && abi.is_empty() {
        return None;
    }
    let worse = changes.iter().any(|c| c.better == Some(false));
    let better = changes.iter().any(|c| c.better == Some(true));
    let resource_class = match (worse, better) {
        (true, _) => Class::Regression,
        (false, true) => Class::Improvement,
        _ => Class::Changed,
    };
    let class = if abi.is_empty() {
        resource_class
    } else {
        Class::Abi
    };
    let spills = |r: &Resources| -> Option<u64> {
        let vals: Vec<Value> = fields::fields_of(r)
            .iter()
            .filter(|f| f.column == Column::Spills)
            .map(|f| fields::value(r, f.name))
            .collect();
        vals.iter()
            .map(Value::num)
            .try_fold(0u64, |acc, v| v.map(|v| acc.saturating_add(v)))
    };
    let spill_delta = changes
        .iter()
        .filter(|c| c.field.column == Column::Spills)
        .filter_map(|c| c.delta)
        .fold(0i64, i64::saturating_add);
    let occ_delta = changes
        .iter()
        .find(|c| c.field.column == Column::Occupancy)
        .and_then(|c| c.delta)
        .unwrap_or(0);
    let tier = if spill_delta > 0 && spills(br) == Some(0) {
        0
    } else if spill_delta > 0 {
        1
    } else if occ_delta < 0 {
        2
    } else if occ_delta > 0 {
        3
    } else if spill_delta < 0 {
        4
    } else {
        match resource_class {
            Class::Regression => 5,
            Class::Improvement => 6,
            Class::Changed | Class::Abi => 7,
        }
    };
    let magnitude = changes
        .iter()
        .filter(|c| c.better.is_some())
        .filter_map(|c| {
            let d = c.delta?.unsigned_abs() as f64;
            Some(d / (c.base.num().unwrap_or(0).max(1) as f64))
        })
        .fold(0.0, f64::max);
    Some(Row {
        entry: head.clone(),
        base: br.clone(),
        changes,
        abi,
        class,
        resource_class,
        tier,
        magnitude,
    })
}

#[cfg(test)]
pub(crate) mod tests;
