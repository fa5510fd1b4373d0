//! `kbuild package --merge`: join the bundles of a sharded build (`kbuild build --shard I/N`
//! on N machines) into the one release bundle a single machine would have packaged.
//!
//! The inputs must be of one source: same package name and version, kernels, declared target
//! list (a shard's `shard.targets`, else the manifest's `targets`), provenance (git commit and
//! dirty flag, toolchains, flags, host) and, between shards, the same source digest and kbuild
//! version. Where two inputs hold the same (kernel, variant, target), their objects must be
//! byte-identical. Every declared target must come from some input, with no failed or
//! missing record, unless partial merges are allowed.
//!
//! Bundles of other target lists of the same sources (a vendor-split release: one runner
//! builds `--targets gfx1100`, another `--targets sm_89,sm_90`, each whole or in shards) merge
//! into the bundle one machine builds from the union of the lists, in the order the inputs
//! give them; they may differ only in the toolchain of a vendor one of them holds no target
//! of, and a target two of them hold must have the same jobs and bytes.
//!
//! The result is the single-machine manifest exactly: targets in declared order, records
//! sorted as a build sorts them (target, kernel, variant), no `shard` field, the same JSON
//! serialisation; its archive comes from the same [`Bundle::to_bytes`], so a merge is
//! byte-identical to `kbuild package` of a full build of the same sources.

use std::collections::{BTreeMap, BTreeSet};

use kbuild_manifest::manifest::{Manifest, ObjectRecord, ToolchainIdentity, UnbuiltObject, SCHEMA};
use kbuild_manifest::shard;
use kbuild_manifest::target::Target;

use crate::bundle::{Bundle, BundleError};

/// Why bundles could not be merged. Every variant names the bundle files involved.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge: give the shard bundles (`kbuild package --merge A.kbundle B.kbundle ...`)")]
    NoInputs,
    /// Two inputs disagree on a field that says which sources they were built from.
    #[error("{} and {} are not of the same sources: {} differs ({}: {}; {}: {}); rebuild every shard from one checkout with one kbuild and toolchain", .0.a, .0.b, .0.field, .0.a, .0.va, .0.b, .0.vb)]
    Mismatch(Box<Mismatch>),
    /// Two inputs hold different bytes for one (kernel, variant, target).
    #[error("{} and {} both hold {} for {} with different bytes ({}: sha256 {}; {}: sha256 {}); the builds are not reproducible or not of the same sources", .0.a, .0.b, .0.kernel, .0.target, .0.a, .0.sa, .0.b, .0.sb)]
    Conflict(Box<Conflict>),
    /// Declared targets no input holds, or failed/missing records, without `allow_partial`.
    #[error("the merge of {inputs} is incomplete: {what}; refusing to package it (build the missing shards, or pass --allow-partial to package it marked partial)")]
    Incomplete { inputs: String, what: String },
    /// A shard holds other targets than its I/N gets from the declared list and costs.
    #[error("{file}: shard {index}/{count} {what}; a shard holds exactly the targets its I/N is assigned (`kbuild build --print-shards {count}`)")]
    Assignment {
        file: String,
        index: u32,
        count: u32,
        what: String,
    },
    /// Two inputs holding one target disagree on its (kernel, variant) jobs, or a shard's
    /// jobs for a target do not add up to the cost it declared.
    #[error("{file}: target {target} has {key}, {why}")]
    Keys {
        file: String,
        target: String,
        key: String,
        why: String,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
}

/// Bundles `a` and `b` differ in `field`: `va` and `vb`.
#[derive(Debug)]
pub struct Mismatch {
    pub a: String,
    pub b: String,
    pub field: String,
    pub va: String,
    pub vb: String,
}

/// Bundles `a` and `b` hold `kernel[.variant]` for `target` as objects `sa` and `sb`.
#[derive(Debug)]
pub struct Conflict {
    pub a: String,
    pub b: String,
    pub kernel: String,
    pub target: String,
    pub sa: String,
    pub sb: String,
}

/// What went into a merge, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    /// Declared targets held by no input (only with `allow_partial`).
    pub missing_targets: Vec<String>,
    /// Object records that more than one input held, identical.
    pub overlapping: usize,
}

/// The declared target list of a bundle: the whole list a shard was split from, else its
/// manifest's targets.
fn declared(m: &Manifest) -> &[String] {
    match &m.shard {
        Some(s) => &s.targets,
        None => &m.targets,
    }
}

fn label(kernel: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{kernel}.{v}"),
        None => kernel.to_string(),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// One field of a toolchain identity, as text.
type ToolchainField = fn(&ToolchainIdentity) -> String;

/// How two inputs relate: parts of one build of one target list (a full bundle and its
/// shards), or builds of other target lists (a vendor-split release: one runner's
/// `--targets gfx1100`, another's `--targets sm_89,sm_90`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    SameBuild,
    OtherTargets,
}

/// The toolchain kinds (`cuda`, `hip`) of the vendors whose targets `b` holds.
fn held_toolchains(b: &Bundle) -> BTreeSet<&'static str> {
    b.targets()
        .iter()
        .filter_map(|t| t.parse::<Target>().ok())
        .map(|t| t.vendor().toolchain())
        .collect()
}

/// The first field on which `a` and `b` say they come from different sources. Builds of
/// other target lists may differ in their declared list and shard costs, and in the
/// toolchains of a vendor that one of them holds no target of (a CUDA runner need not have
/// ROCm); a toolchain both use must be the same.
fn first_difference(
    a: &Bundle,
    b: &Bundle,
    relation: Relation,
) -> Option<(String, String, String)> {
    let same_build = relation == Relation::SameBuild;
    let both_use: BTreeSet<&str> = held_toolchains(a)
        .intersection(&held_toolchains(b))
        .copied()
        .collect();
    let (a, b) = (a.manifest(), b.manifest());
    let diff =
        |field: &str, va: String, vb: String| (va != vb).then(|| (field.to_string(), va, vb));
    let pa = &a.provenance;
    let pb = &b.provenance;
    let mut checks = vec![
        diff("schema", json(&a.schema), json(&b.schema)),
        diff("package.name", json(&a.package.name), json(&b.package.name)),
        diff(
            "package.version",
            json(&a.package.version),
            json(&b.package.version),
        ),
        diff("kernels", json(&a.kernels), json(&b.kernels)),
        same_build
            .then(|| diff("declared targets", json(&declared(a)), json(&declared(b))))
            .flatten(),
        diff(
            "provenance.git_commit",
            json(&pa.git_commit),
            json(&pb.git_commit),
        ),
        diff(
            "provenance.git_dirty",
            json(&pa.git_dirty),
            json(&pb.git_dirty),
        ),
    ];
    let tcs_a: BTreeMap<&str, _> = pa.toolchains.iter().map(|t| (t.kind.as_str(), t)).collect();
    let tcs_b: BTreeMap<&str, _> = pb.toolchains.iter().map(|t| (t.kind.as_str(), t)).collect();
    let kinds: BTreeSet<&str> = tcs_a.keys().chain(tcs_b.keys()).copied().collect();
    for k in kinds
        .into_iter()
        .filter(|k| same_build || both_use.contains(k))
    {
        let (ta, tb) = (tcs_a.get(k), tcs_b.get(k));
        let or_absent = |t: Option<&&ToolchainIdentity>, f: fn(&ToolchainIdentity) -> String| {
            t.map(|t| f(t)).unwrap_or_else(|| "absent".to_string())
        };
        let fields: [(&str, ToolchainField); 3] = [
            ("version", |t| t.version.clone()),
            ("identity", |t| t.identity.clone()),
            ("path", |t| t.path.clone()),
        ];
        for (name, f) in fields {
            checks.push(diff(
                &format!("provenance.toolchains[{k}].{name}"),
                or_absent(ta, f),
                or_absent(tb, f),
            ));
        }
    }
    if same_build {
        checks.push(diff(
            "provenance.toolchains",
            json(&pa.toolchains),
            json(&pb.toolchains),
        ));
    }
    let vendors: BTreeSet<&String> = pa.flags.keys().chain(pb.flags.keys()).collect();
    for v in vendors {
        checks.push(diff(
            &format!("provenance.flags.{v}"),
            json(&pa.flags.get(v)),
            json(&pb.flags.get(v)),
        ));
    }
    checks.push(diff("provenance.host", json(&pa.host), json(&pb.host)));
    if let (Some(sa), Some(sb)) = (&a.shard, &b.shard) {
        if same_build {
            checks.push(diff(
                "shard.costs (the estimate the shards were assigned by)",
                json(&sa.costs),
                json(&sb.costs),
            ));
        }
        checks.push(diff(
            "shard.sources (digest of Kbuild.toml and the kernel sources)",
            sa.sources.clone(),
            sb.sources.clone(),
        ));
        checks.push(diff(
            "shard.kbuild (kbuild version)",
            sa.kbuild.clone(),
            sb.kbuild.clone(),
        ));
    }
    checks.into_iter().flatten().next()
}

/// Each shard holds exactly the targets its I/N is assigned: [`shard::assign`] (the build's
/// own function) over the declared list and the costs the shard records. A shard's own claim
/// of what it holds is not trusted: a forged shard listing another shard's target is refused.
fn check_assignments(inputs: &[(String, Bundle)]) -> Result<(), MergeError> {
    for (file, b) in inputs {
        let Some(s) = &b.manifest().shard else {
            continue;
        };
        let err = |what: String| MergeError::Assignment {
            file: file.clone(),
            index: s.index,
            count: s.count,
            what,
        };
        if s.index == 0 || s.index > s.count {
            return Err(err("is not a shard number (I must be 1..=N)".into()));
        }
        if s.costs.len() != s.targets.len() {
            return Err(err(format!(
                "records {} costs for {} declared targets (a shard of an older kbuild? rebuild it)",
                s.costs.len(),
                s.targets.len()
            )));
        }
        let of = shard::assign(&s.costs, s.count);
        let expected: BTreeSet<&str> = s
            .targets
            .iter()
            .zip(&of)
            .filter(|(_, &i)| i + 1 == s.index as usize)
            .map(|(t, _)| t.as_str())
            .collect();
        let listed: BTreeSet<&str> = b.manifest().targets.iter().map(String::as_str).collect();
        if let Some(t) = listed.difference(&expected).next() {
            let owner = s
                .targets
                .iter()
                .position(|d| d == t)
                .map(|i| format!("shard {}/{}", of[i] + 1, s.count))
                .unwrap_or_else(|| "no shard (it is not a declared target)".into());
            return Err(err(format!(
                "holds target {t}, which the assignment gives to {owner}"
            )));
        }
        if let Some(t) = expected.difference(&listed).next() {
            return Err(err(format!(
                "lacks target {t}, which the assignment gives to it"
            )));
        }
    }
    Ok(())
}

/// (kernel, variant) of a record.
type JobKey = (String, Option<String>);

/// The (kernel, variant) jobs of each target `b` holds: built, failed or never run.
fn jobs_by_target(b: &Bundle) -> BTreeMap<String, BTreeSet<JobKey>> {
    let m = b.manifest();
    let mut out: BTreeMap<String, BTreeSet<JobKey>> = b
        .targets()
        .into_iter()
        .map(|t| (t, BTreeSet::new()))
        .collect();
    let records = m
        .objects
        .iter()
        .map(|o| (&o.target, &o.kernel, &o.variant))
        .chain(
            m.failed
                .iter()
                .chain(&m.missing)
                .map(|u| (&u.target, &u.kernel, &u.variant)),
        );
    for (t, k, v) in records {
        if let Some(set) = out.get_mut(t) {
            set.insert((k.clone(), v.clone()));
        }
    }
    out
}

/// Every input holding a target has the same (kernel, variant) jobs for it, and a shard's
/// jobs for each of its targets are what its recorded cost says: a forged shard cannot add a
/// (kernel, variant) the honest one lacks.
fn check_keys(inputs: &[(String, Bundle)]) -> Result<(), MergeError> {
    let mut first: BTreeMap<String, (&str, BTreeSet<JobKey>)> = BTreeMap::new();
    for (file, b) in inputs {
        let jobs = jobs_by_target(b);
        if let Some(s) = &b.manifest().shard {
            for (t, keys) in &jobs {
                let Some(i) = s.targets.iter().position(|d| d == t) else {
                    continue;
                };
                let w = t.parse::<Target>().map(|t| shard::weight(&t)).unwrap_or(1);
                let cost = s.costs.get(i).copied().unwrap_or(0);
                if keys.len() as u64 * w != cost {
                    let key = keys
                        .iter()
                        .next_back()
                        .map(|(k, v)| label(k, v.as_deref()))
                        .unwrap_or_else(|| "no job".into());
                    return Err(MergeError::Keys {
                        file: file.clone(),
                        target: t.clone(),
                        key: format!("{} (kernel, variant) jobs, among them {key}", keys.len()),
                        why: format!(
                            "but the shard's recorded cost {cost} is {} jobs of weight {w}",
                            cost / w.max(1)
                        ),
                    });
                }
            }
        }
        for (t, keys) in jobs {
            let Some((a, seen)) = first.get(&t) else {
                first.insert(t, (file.as_str(), keys));
                continue;
            };
            if let Some((k, v)) = keys.difference(seen).next() {
                return Err(MergeError::Keys {
                    file: file.clone(),
                    target: t.clone(),
                    key: label(k, v.as_deref()),
                    why: format!("which {a} (also holding {t}) does not have"),
                });
            }
            if let Some((k, v)) = seen.difference(&keys).next() {
                return Err(MergeError::Keys {
                    file: (*a).to_string(),
                    target: t.clone(),
                    key: label(k, v.as_deref()),
                    why: format!("which {file} (also holding {t}) does not have"),
                });
            }
        }
    }
    Ok(())
}

/// The inputs by build: each distinct declared target list (a full bundle's `targets`, a
/// shard's `shard.targets`) with the indices of its inputs, in the order the inputs first
/// name it.
fn builds(inputs: &[(String, Bundle)]) -> Vec<(Vec<String>, Vec<usize>)> {
    let mut out: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    for (i, (_, b)) in inputs.iter().enumerate() {
        let list = declared(b.manifest());
        match out.iter_mut().find(|(l, _)| l.as_slice() == list) {
            Some((_, members)) => members.push(i),
            None => out.push((list.to_vec(), vec![i])),
        }
    }
    out
}

/// The toolchains of a merge of several builds, as one machine holding them all records
/// them (by kind, in the order a build writes them): each kind from the first input holding a
/// target of its vendor, else from the first recording it.
fn union_toolchains(inputs: &[(String, Bundle)]) -> Vec<ToolchainIdentity> {
    let mut by_kind: BTreeMap<String, ToolchainIdentity> = BTreeMap::new();
    for (_, b) in inputs {
        let held = held_toolchains(b);
        for t in &b.manifest().provenance.toolchains {
            if held.contains(t.kind.as_str()) {
                by_kind.entry(t.kind.clone()).or_insert_with(|| t.clone());
            }
        }
    }
    for (_, b) in inputs {
        for t in &b.manifest().provenance.toolchains {
            by_kind.entry(t.kind.clone()).or_insert_with(|| t.clone());
        }
    }
    // `cuda` before `hip`, as a build writes them.
    by_kind.into_values().collect()
}

/// Merge `inputs` (each a name for messages, e.g. its file, and the bundle) into the release
/// bundle. With `allow_partial`, declared targets no input holds and failed or missing
/// records are kept as `missing`/`failed` and the manifest is marked `partial`.
pub fn merge(
    inputs: &[(String, Bundle)],
    allow_partial: bool,
) -> Result<(Bundle, MergeReport), MergeError> {
    let Some((first_name, first)) = inputs.first() else {
        return Err(MergeError::NoInputs);
    };
    let base = first.manifest();
    let mismatch = |a: &String, b: &String, (field, va, vb): (String, String, String)| {
        MergeError::Mismatch(Box::new(Mismatch {
            a: a.clone(),
            b: b.clone(),
            field,
            va,
            vb,
        }))
    };
    let builds = builds(inputs);
    for (name, b) in &inputs[1..] {
        let relation = if declared(b.manifest()) == declared(base) {
            Relation::SameBuild
        } else {
            Relation::OtherTargets
        };
        if let Some(d) = first_difference(first, b, relation) {
            return Err(mismatch(first_name, name, d));
        }
    }
    for (_, members) in &builds {
        // Shards must agree with each other on what only shards record, not just with the
        // first input.
        let shards: Vec<&(String, Bundle)> = members
            .iter()
            .map(|&i| &inputs[i])
            .filter(|(_, b)| b.is_shard())
            .collect();
        if let Some((sa, a)) = shards.first() {
            for (sb, b) in &shards[1..] {
                if let Some(d) = first_difference(a, b, Relation::SameBuild) {
                    return Err(mismatch(sa, sb, d));
                }
            }
        }
        // The builds of other target lists, each against the first of this one.
        let (na, a) = &inputs[members[0]];
        for (_, others) in builds.iter().filter(|(_, m)| m[0] > members[0]) {
            let (nb, b) = &inputs[others[0]];
            if let Some(d) = first_difference(a, b, Relation::OtherTargets) {
                return Err(mismatch(na, nb, d));
            }
        }
    }

    check_assignments(inputs)?;
    check_keys(inputs)?;

    type Key = (String, String, Option<String>);
    let key = |target: &str, kernel: &str, variant: &Option<String>| -> Key {
        (target.to_string(), kernel.to_string(), variant.clone())
    };
    // (target, kernel, variant) → (input index, record).
    let mut records: BTreeMap<Key, (usize, ObjectRecord)> = BTreeMap::new();
    let mut objects: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut failed: BTreeMap<Key, UnbuiltObject> = BTreeMap::new();
    let mut missing: BTreeMap<Key, UnbuiltObject> = BTreeMap::new();
    let mut present: BTreeSet<String> = BTreeSet::new();
    let mut restricted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut overlapping = 0;
    for (i, (name, b)) in inputs.iter().enumerate() {
        let m = b.manifest();
        let held: BTreeSet<String> = b.targets().into_iter().collect();
        for o in m.objects.iter().filter(|o| held.contains(&o.target)) {
            let k = key(&o.target, &o.kernel, &o.variant);
            if let Some((j, prev)) = records.get(&k) {
                if prev.sha256 != o.sha256 {
                    return Err(MergeError::Conflict(Box::new(Conflict {
                        a: inputs[*j].0.clone(),
                        b: name.clone(),
                        kernel: label(&o.kernel, o.variant.as_deref()),
                        target: o.target.clone(),
                        sa: prev.sha256.clone(),
                        sb: o.sha256.clone(),
                    })));
                }
                overlapping += 1;
                continue;
            }
            if let Some(data) = b.object(&o.sha256) {
                objects
                    .entry(o.sha256.clone())
                    .or_insert_with(|| data.to_vec());
            }
            records.insert(k, (i, o.clone()));
        }
        for u in m.failed.iter().filter(|u| held.contains(&u.target)) {
            failed
                .entry(key(&u.target, &u.kernel, &u.variant))
                .or_insert_with(|| u.clone());
        }
        for u in m.missing.iter().filter(|u| held.contains(&u.target)) {
            missing
                .entry(key(&u.target, &u.kernel, &u.variant))
                .or_insert_with(|| u.clone());
        }
        for (t, ks) in m.restricted.iter().filter(|(t, _)| held.contains(*t)) {
            restricted.entry(t.clone()).or_insert_with(|| ks.clone());
        }
        present.extend(held);
    }
    // A job that failed or never ran on one runner but built on another is built.
    failed.retain(|k, _| !records.contains_key(k));
    missing.retain(|k, _| !records.contains_key(k) && !failed.contains_key(k));

    // The union of the builds' declared lists, in the order the inputs name them.
    let mut targets: Vec<String> = Vec::new();
    for (list, _) in &builds {
        for t in list {
            if !targets.contains(t) {
                targets.push(t.clone());
            }
        }
    }
    let missing_targets: Vec<String> = targets
        .iter()
        .filter(|t| !present.contains(*t))
        .cloned()
        .collect();
    for t in &missing_targets {
        for k in &base.kernels {
            missing
                .entry(key(t, k, &None))
                .or_insert_with(|| UnbuiltObject {
                    kernel: k.clone(),
                    variant: None,
                    target: t.clone(),
                    error: None,
                });
        }
    }
    // Held, yet no object: every kernel failed there or Kbuild.toml kept it off.
    let empty_targets: Vec<&String> = targets
        .iter()
        .filter(|t| present.contains(*t) && !records.keys().any(|k| k.0 == **t))
        .collect();
    let incomplete = !missing_targets.is_empty()
        || !failed.is_empty()
        || !missing.is_empty()
        || !empty_targets.is_empty();
    if incomplete && !allow_partial {
        let mut what = Vec::new();
        if !empty_targets.is_empty() {
            what.push(format!(
                "target(s) without objects: {}",
                empty_targets
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !missing_targets.is_empty() {
            what.push(format!(
                "no bundle holds target(s) {}",
                missing_targets.join(", ")
            ));
        }
        let list = |v: Vec<&UnbuiltObject>| -> String {
            let names: Vec<String> = v.iter().map(|u| u.label()).collect();
            kbuild_base::list::short_list(&names, 5)
        };
        if !failed.is_empty() {
            what.push(format!(
                "{} failed ({})",
                failed.len(),
                list(failed.values().collect())
            ));
        }
        let unbuilt: Vec<&UnbuiltObject> = missing
            .values()
            .filter(|u| !missing_targets.contains(&u.target))
            .collect();
        if !unbuilt.is_empty() {
            what.push(format!("{} missing ({})", unbuilt.len(), list(unbuilt)));
        }
        return Err(MergeError::Incomplete {
            inputs: inputs
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            what: what.join("; "),
        });
    }

    // As `build` writes them: records and unbuilt jobs sorted by (target, kernel, variant).
    let mut provenance = base.provenance.clone();
    if builds.len() > 1 {
        provenance.toolchains = union_toolchains(inputs);
    }
    let merged = Manifest {
        schema: SCHEMA.to_string(),
        package: base.package.clone(),
        provenance,
        targets,
        kernels: base.kernels.clone(),
        objects: records.into_values().map(|(_, o)| o).collect(),
        containers: Vec::new(),
        failed: failed.into_values().collect(),
        missing: missing.into_values().collect(),
        restricted,
        partial: incomplete || inputs.iter().any(|(_, b)| b.manifest().partial),
        shard: None,
    };
    let bundle = Bundle::from_parts(merged.to_json().into_bytes(), objects, None)?;
    Ok((
        bundle,
        MergeReport {
            missing_targets,
            overlapping,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::ArchiveLimits;
    use kbuild_manifest::fixtures;
    use kbuild_manifest::manifest::Shard;

    /// A full bundle of `targets` and its `n` shards as a build assigns them: the manifest
    /// restricted to each part, marked as shard i of n of the whole list with its costs.
    fn full_and_shards(targets: &[&str], n: u32) -> (Bundle, Vec<(String, Bundle)>) {
        let (m, o) = fixtures::bundle_parts(targets);
        let mut whole = Manifest::from_json(&m).unwrap();
        // As a build sorts its records.
        whole
            .objects
            .sort_by(|a, b| (&a.target, &a.kernel).cmp(&(&b.target, &b.kernel)));
        let full = Bundle::from_parts(whole.to_json().into_bytes(), o.clone(), None).unwrap();
        // One job (kernel `k`) per target.
        let costs: Vec<u64> = targets
            .iter()
            .map(|t| shard::weight(&t.parse::<Target>().unwrap()))
            .collect();
        let of = shard::assign(&costs, n);
        let mut shards = Vec::new();
        for i in 0..n as usize {
            let part: Vec<&str> = (0..targets.len())
                .filter(|&j| of[j] == i)
                .map(|j| targets[j])
                .collect();
            let mut s = whole.clone();
            s.targets.retain(|t| part.contains(&t.as_str()));
            s.objects.retain(|r| part.contains(&r.target.as_str()));
            s.shard = Some(Shard {
                index: i as u32 + 1,
                count: n,
                targets: whole.targets.clone(),
                sources: "s".repeat(64),
                kbuild: "0.1.0".into(),
                costs: costs.clone(),
            });
            let keep: BTreeSet<&str> = s.objects.iter().map(|r| r.sha256.as_str()).collect();
            let objs = o
                .iter()
                .filter(|(k, _)| keep.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let b = Bundle::from_parts(s.to_json().into_bytes(), objs, None).unwrap();
            shards.push((format!("s{}.kbundle", i + 1), b));
        }
        (full, shards)
    }

    #[test]
    fn shards_merge_to_the_full_bundle_byte_for_byte() {
        // 54, 48, 54: sm_89 and gfx1100 to shard 1, sm_80 to shard 2.
        let (full, shards) = full_and_shards(&["sm_89", "gfx1100", "sm_80"], 2);
        assert_eq!(shards[0].1.manifest().targets, ["sm_89", "gfx1100"]);
        assert_eq!(shards[0].1.file_name(), "pkg-1.2.3.shard-1-of-2.kbundle");
        let (merged, report) = merge(&shards, false).unwrap();
        assert_eq!(merged.to_bytes(7).unwrap(), full.to_bytes(7).unwrap());
        assert_eq!(merged.file_name(), "pkg-1.2.3.kbundle");
        assert_eq!(report.overlapping, 0);
        // Inputs in another order, and a full bundle with a shard (identical overlap).
        let rev: Vec<_> = shards.iter().rev().cloned().collect();
        assert_eq!(merge(&rev, false).unwrap().0, merged);
        let with_full = vec![
            ("full.kbundle".to_string(), full.clone()),
            shards[0].clone(),
        ];
        let (m2, r2) = merge(&with_full, false).unwrap();
        assert_eq!(m2.to_bytes(0).unwrap(), full.to_bytes(0).unwrap());
        assert_eq!(r2.overlapping, 2);
        let back =
            Bundle::from_bytes(&merged.to_bytes(0).unwrap(), ArchiveLimits::default()).unwrap();
        assert!(!back.is_shard());
    }

    #[test]
    fn refuses_other_sources_conflicts_and_gaps_naming_files() {
        let (_, shards) = full_and_shards(&["sm_89", "gfx1100"], 2);
        // Another version.
        let mut other = shards[1].1.manifest().clone();
        other.package.version = "1.2.4".into();
        let objs = shards[1].1.objects().clone();
        let b = Bundle::from_parts(other.to_json().into_bytes(), objs, None).unwrap();
        let e = merge(&[shards[0].clone(), ("v.kbundle".into(), b)], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("s1.kbundle") && e.contains("v.kbundle"), "{e}");
        assert!(e.contains("package.version") && e.contains("1.2.4"), "{e}");
        // Other sources.
        let mut other = shards[1].1.manifest().clone();
        if let Some(s) = other.shard.as_mut() {
            s.sources = "t".repeat(64);
        }
        let objs = shards[1].1.objects().clone();
        let b = Bundle::from_parts(other.to_json().into_bytes(), objs, None).unwrap();
        let e = merge(&[shards[0].clone(), ("src.kbundle".into(), b)], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shard.sources"), "{e}");
        // Other bytes for one target.
        let mut m = shards[0].1.manifest().clone();
        let data = b"other bytes".to_vec();
        let sha = crate::digest::sha256_hex(&data);
        m.objects[0].sha256 = sha.clone();
        m.objects[0].size = data.len() as u64;
        let b = Bundle::from_parts(m.to_json().into_bytes(), [(sha.clone(), data)].into(), None)
            .unwrap();
        let e = merge(&[shards[0].clone(), ("x.kbundle".into(), b)], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("k for sm_89") && e.contains(&sha), "{e}");
        // A missing shard.
        let e = merge(&shards[..1], false).unwrap_err().to_string();
        assert!(
            e.contains("gfx1100") && e.contains("--allow-partial"),
            "{e}"
        );
        let (p, r) = merge(&shards[..1], true).unwrap();
        assert!(p.manifest().partial);
        assert_eq!(r.missing_targets, vec!["gfx1100".to_string()]);
        assert_eq!(p.manifest().missing[0].label(), "k for gfx1100");
        assert!(matches!(merge(&[], false), Err(MergeError::NoInputs)));
    }

    /// `m` with an extra record for `target`: kernel `k` variant `evil`, forged bytes.
    fn with_forged_record(m: &mut Manifest, objs: &mut BTreeMap<String, Vec<u8>>, target: &str) {
        let data = b"forged object".to_vec();
        let sha = crate::digest::sha256_hex(&data);
        let mut o = m.objects[0].clone();
        o.target = target.into();
        o.variant = Some("evil".into());
        o.path = format!("{target}/k.evil.cubin");
        o.sha256 = sha.clone();
        o.size = data.len() as u64;
        m.objects.push(o);
        objs.insert(sha, data);
    }

    #[test]
    fn refuses_a_shard_holding_other_targets_or_other_jobs() {
        // sm_89 to shard 1, gfx1100 to shard 2.
        let (full, shards) = full_and_shards(&["sm_89", "gfx1100"], 2);
        let refused = |inputs: &[(String, Bundle)]| merge(inputs, false).unwrap_err().to_string();
        // Shard 2 also lists shard 1's target, with a (kernel, variant) shard 1 lacks.
        let mut m = shards[1].1.manifest().clone();
        let mut objs = shards[1].1.objects().clone();
        m.targets.push("sm_89".into());
        with_forged_record(&mut m, &mut objs, "sm_89");
        let forged = Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap();
        let e = refused(&[shards[0].clone(), ("forged.kbundle".into(), forged)]);
        assert!(
            e.starts_with("forged.kbundle: shard 2/2 holds target sm_89")
                && e.contains("gives to shard 1/2"),
            "{e}"
        );
        // The right targets, but an extra job for its own target: more than its cost says.
        let mut m = shards[1].1.manifest().clone();
        let mut objs = shards[1].1.objects().clone();
        with_forged_record(&mut m, &mut objs, "gfx1100");
        let forged = Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap();
        let e = refused(&[shards[0].clone(), ("forged.kbundle".into(), forged)]);
        assert!(
            e.starts_with("forged.kbundle: target gfx1100 has 2 (kernel, variant) jobs")
                && e.contains("k.evil")
                && e.contains("recorded cost 48 is 1 jobs"),
            "{e}"
        );
        // A full bundle adding a job to a target a shard also holds.
        let mut m = full.manifest().clone();
        let mut objs = full.objects().clone();
        with_forged_record(&mut m, &mut objs, "sm_89");
        let forged = Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap();
        for inputs in [
            vec![shards[0].clone(), ("full.kbundle".into(), forged.clone())],
            vec![("full.kbundle".into(), forged), shards[0].clone()],
        ] {
            let e = refused(&inputs);
            assert!(
                e.starts_with("full.kbundle: target sm_89 has k.evil")
                    && e.contains("s1.kbundle (also holding sm_89) does not have"),
                "{e}"
            );
        }
        // A shard without costs (an older kbuild) cannot be checked: refused.
        let mut m = shards[1].1.manifest().clone();
        if let Some(s) = m.shard.as_mut() {
            s.costs.clear();
        }
        let old = Bundle::from_parts(
            m.to_json().into_bytes(),
            shards[1].1.objects().clone(),
            None,
        )
        .unwrap();
        let e = refused(&[("old.kbundle".into(), old)]);
        assert!(e.contains("old.kbundle") && e.contains("0 costs"), "{e}");
    }

    fn toolchain(kind: &str, identity: &str) -> ToolchainIdentity {
        ToolchainIdentity {
            kind: kind.into(),
            version: format!("{kind} 1.0"),
            path: format!("/opt/{kind}/bin/cc"),
            identity: identity.into(),
        }
    }

    /// The single machine of a vendor-split release: `targets`, both toolchains recorded.
    fn single_machine(targets: &[&str]) -> Manifest {
        let (m, _) = fixtures::bundle_parts(targets);
        let mut m = Manifest::from_json(&m).unwrap();
        m.objects
            .sort_by(|a, b| (&a.target, &a.kernel).cmp(&(&b.target, &b.kernel)));
        m.provenance.toolchains = vec![toolchain("cuda", "c1"), toolchain("hip", "h1")];
        m
    }

    /// One runner's build of `targets` (a subset of `whole`'s), recording `toolchains`.
    fn runner(whole: &Manifest, targets: &[&str], toolchains: Vec<ToolchainIdentity>) -> Bundle {
        let (_, objects) =
            fixtures::bundle_parts(&whole.targets.iter().map(String::as_str).collect::<Vec<_>>());
        let mut m = whole.clone();
        m.targets = targets.iter().map(|t| t.to_string()).collect();
        m.objects.retain(|o| targets.contains(&o.target.as_str()));
        m.provenance.toolchains = toolchains;
        let keep: BTreeSet<&str> = m.objects.iter().map(|o| o.sha256.as_str()).collect();
        let objects = objects
            .into_iter()
            .filter(|(k, _)| keep.contains(k.as_str()))
            .collect();
        Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap()
    }

    /// Issue 27, item 12: a ROCm runner's `--targets gfx1100` and a CUDA runner's
    /// `--targets sm_89,sm_90` (whole or in shards) merge into the bundle of one machine
    /// building `--targets gfx1100,sm_89,sm_90`, byte for byte; each runner records only its
    /// own toolchain.
    #[test]
    fn vendor_split_builds_merge_to_the_union_byte_for_byte() {
        let whole = single_machine(&["gfx1100", "sm_89", "sm_90"]);
        let (_, objects) = fixtures::bundle_parts(&["gfx1100", "sm_89", "sm_90"]);
        let single = Bundle::from_parts(whole.to_json().into_bytes(), objects, None).unwrap();
        let amd = runner(&whole, &["gfx1100"], vec![toolchain("hip", "h1")]);
        // The CUDA runner has an old ROCm it does not use: not the release's.
        let nv = runner(
            &whole,
            &["sm_89", "sm_90"],
            vec![toolchain("cuda", "c1"), toolchain("hip", "old")],
        );
        let inputs = vec![
            ("amd.kbundle".to_string(), amd.clone()),
            ("nv.kbundle".to_string(), nv.clone()),
        ];
        let (merged, report) = merge(&inputs, false).unwrap();
        assert_eq!(merged.to_bytes(3).unwrap(), single.to_bytes(3).unwrap());
        assert_eq!(report.overlapping, 0);
        // The union in the order the inputs give it: the other order is another release.
        let rev: Vec<_> = inputs.iter().rev().cloned().collect();
        assert_eq!(
            merge(&rev, false).unwrap().0.manifest().targets,
            ["sm_89", "sm_90", "gfx1100"]
        );
        // The CUDA runner's list in two shards.
        let (_, shards) = {
            let mut nv_only = whole.clone();
            nv_only.targets = vec!["sm_89".into(), "sm_90".into()];
            nv_only.objects.retain(|o| o.target != "gfx1100");
            let (_, objs) = fixtures::bundle_parts(&["sm_89", "sm_90"]);
            let costs: Vec<u64> = ["sm_89", "sm_90"]
                .iter()
                .map(|t| shard::weight(&t.parse::<Target>().unwrap()))
                .collect();
            let of = shard::assign(&costs, 2);
            let mut out = Vec::new();
            for i in 0..2usize {
                let mut m = nv_only.clone();
                let mine: Vec<String> = nv_only
                    .targets
                    .iter()
                    .zip(&of)
                    .filter(|(_, &s)| s == i)
                    .map(|(t, _)| t.clone())
                    .collect();
                m.targets = mine.clone();
                m.objects.retain(|o| mine.contains(&o.target));
                m.provenance.toolchains = vec![toolchain("cuda", "c1")];
                m.shard = Some(Shard {
                    index: i as u32 + 1,
                    count: 2,
                    targets: nv_only.targets.clone(),
                    sources: "s".repeat(64),
                    kbuild: "0.1.0".into(),
                    costs: costs.clone(),
                });
                let keep: BTreeSet<&str> = m.objects.iter().map(|o| o.sha256.as_str()).collect();
                let o = objs
                    .iter()
                    .filter(|(k, _)| keep.contains(k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let b = Bundle::from_parts(m.to_json().into_bytes(), o, None).unwrap();
                out.push((format!("nv{}.kbundle", i + 1), b));
            }
            ((), out)
        };
        let mut sharded = vec![("amd.kbundle".to_string(), amd.clone())];
        sharded.extend(shards.iter().cloned());
        let (m2, _) = merge(&sharded, false).unwrap();
        assert_eq!(m2.to_bytes(0).unwrap(), single.to_bytes(0).unwrap());
        // A missing shard of the CUDA runner is a gap, as for any shard.
        let e = merge(&sharded[..2], false).unwrap_err().to_string();
        assert!(
            e.contains("no bundle holds target(s)") && e.contains("--allow-partial"),
            "{e}"
        );
    }

    /// Issue 27, item 12: builds of other target lists still must be of one source, hold the
    /// same bytes where they overlap, and use one toolchain for a vendor both hold.
    #[test]
    fn vendor_split_builds_refuse_other_sources_bytes_and_toolchains() {
        let whole = single_machine(&["gfx1100", "sm_89", "sm_90"]);
        let amd = || {
            (
                "amd.kbundle".to_string(),
                runner(&whole, &["gfx1100"], vec![toolchain("hip", "h1")]),
            )
        };
        let nv = runner(&whole, &["sm_89", "sm_90"], vec![toolchain("cuda", "c1")]);
        let refused = |b: Bundle| {
            merge(&[amd(), ("nv.kbundle".to_string(), b)], false)
                .unwrap_err()
                .to_string()
        };
        let edit = |f: &dyn Fn(&mut Manifest)| {
            let mut m = nv.manifest().clone();
            f(&mut m);
            Bundle::from_parts(m.to_json().into_bytes(), nv.objects().clone(), None).unwrap()
        };
        let e = refused(edit(&|m| m.provenance.git_commit = Some("abc".into())));
        assert!(
            e.contains("not of the same sources") && e.contains("provenance.git_commit"),
            "{e}"
        );
        let e = refused(edit(&|m| m.kernels.push("extra".into())));
        assert!(e.contains("kernels differs"), "{e}");
        // Overlap on gfx1100 with other bytes.
        let mut m = nv.manifest().clone();
        let mut objs = nv.objects().clone();
        let data = b"other gfx1100 bytes".to_vec();
        let sha = crate::digest::sha256_hex(&data);
        let mut o = whole
            .objects
            .iter()
            .find(|o| o.target == "gfx1100")
            .unwrap()
            .clone();
        o.sha256 = sha.clone();
        o.size = data.len() as u64;
        objs.insert(sha.clone(), data);
        m.objects.insert(0, o);
        m.targets.insert(0, "gfx1100".into());
        m.provenance.toolchains.push(toolchain("hip", "h1"));
        let e = refused(Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap());
        assert!(
            e.contains("both hold k for gfx1100 with different bytes") && e.contains(&sha),
            "{e}"
        );
        // The same overlap, identical bytes, merges.
        let mut m = nv.manifest().clone();
        let mut objs = nv.objects().clone();
        let amd_b = amd().1;
        let o = amd_b.manifest().objects[0].clone();
        objs.insert(o.sha256.clone(), amd_b.object(&o.sha256).unwrap().to_vec());
        m.objects.insert(0, o);
        m.targets.insert(0, "gfx1100".into());
        m.provenance.toolchains.push(toolchain("hip", "h1"));
        let overlap = Bundle::from_parts(m.to_json().into_bytes(), objs.clone(), None).unwrap();
        let (_, r) = merge(&[amd(), ("nv.kbundle".to_string(), overlap)], false).unwrap();
        assert_eq!(r.overlapping, 1);
        // Both hold an AMD target, built with other hip-clangs: refused.
        m.provenance.toolchains[1].identity = "h2".into();
        let e = refused(Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap());
        assert!(e.contains("provenance.toolchains[hip].identity"), "{e}");
    }

    #[test]
    fn a_shard_is_not_publishable() {
        let (_, shards) = full_and_shards(&["sm_89", "gfx1100"], 2);
        let e = shards[0]
            .1
            .check_publishable("s1.kbundle", false)
            .unwrap_err();
        assert!(e.to_string().contains("merge the shards first"), "{e}");
        assert!(shards[0].1.check_publishable("s1.kbundle", true).is_ok());
    }
}
