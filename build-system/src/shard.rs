//! `kbuild build --shard I/N`: split a build's resolved target list into N disjoint shards of
//! about equal estimated cost, so that N CI runners each build one and `kbuild package
//! --merge` joins their bundles into the release.
//!
//! The estimate is a pure function of the project and the target list (never of the cache,
//! of timings or of the machine), so every runner computes the same assignment: a target
//! costs its number of (kernel, variant) jobs times the weight of its object kind
//! ([`WEIGHTS`]). Targets are assigned longest-processing-time first (heaviest first, each to
//! the least loaded shard), ties broken by target order and then by shard number.

use std::path::{Path, PathBuf};

use kbuild_manifest::target::Target;

use crate::config::Project;
use crate::plan::plan;

/// The weights and the assignment live with the manifest, where `kbuild package --merge`
/// checks each shard's targets against the same function.
pub use kbuild_manifest::shard::{assign, weight, WEIGHTS};

/// `I/N` of `--shard I/N`: shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
}

/// A `--shard` value that is not `I/N` with 1 ≤ I ≤ N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard `{given}`: {why} (expected I/N, 1-based, with 1 <= I <= N, e.g. --shard 2/3)")]
pub struct ShardSpecError {
    pub given: String,
    pub why: &'static str,
}

impl std::str::FromStr for ShardSpec {
    type Err = ShardSpecError;

    fn from_str(s: &str) -> Result<ShardSpec, ShardSpecError> {
        let err = |why| ShardSpecError {
            given: s.to_string(),
            why,
        };
        let (i, n) = s.trim().split_once('/').ok_or_else(|| err("no `/`"))?;
        let index: u32 = i.trim().parse().map_err(|_| err("I is not a number"))?;
        let count: u32 = n.trim().parse().map_err(|_| err("N is not a number"))?;
        if count == 0 {
            return Err(err("N must be at least 1"));
        }
        if index == 0 {
            return Err(err("shards are numbered from 1"));
        }
        if index > count {
            return Err(err("I is greater than N"));
        }
        Ok(ShardSpec { index, count })
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One shard of an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub index: u32,
    /// Its targets, in the order of the whole list.
    pub targets: Vec<Target>,
    /// The sum of its targets' estimated costs.
    pub cost: u64,
}

/// Each target's estimated cost: its jobs in `project` times [`weight`].
pub fn estimate(project: &Project, targets: &[Target]) -> Vec<u64> {
    let jobs = plan(project, targets);
    targets
        .iter()
        .map(|t| jobs.iter().filter(|j| j.target == *t).count() as u64 * weight(t))
        .collect()
}

/// `targets` split into `count` shards of `project`'s jobs (see [`assign`]); a shard may be
/// empty when there are fewer targets than shards.
pub fn split(project: &Project, targets: &[Target], count: u32) -> Vec<Shard> {
    let costs = estimate(project, targets);
    let of = assign(&costs, count);
    (0..count.max(1))
        .map(|s| {
            let mine: Vec<usize> = (0..targets.len())
                .filter(|&i| of[i] == s as usize)
                .collect();
            Shard {
                index: s + 1,
                targets: mine.iter().map(|&i| targets[i]).collect(),
                cost: mine.iter().map(|&i| costs[i]).sum(),
            }
        })
        .collect()
}

/// blake3 (hex) of the project's declared inputs: Kbuild.toml, every kernel's source, and the
/// files with a source or header extension directly in a kernel source's directory or an
/// include dir (not below), each as its path relative to the project root and its bytes, in
/// path order. Shards built from different sources differ here even when their targets do
/// not overlap. A file that cannot be read counts as absent.
pub fn sources_digest(project: &Project) -> String {
    const EXTS: [&str; 9] = ["cu", "cuh", "hip", "h", "hh", "hpp", "hxx", "inc", "cpp"];
    let mut files: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    files.insert(project.file.clone());
    let mut dirs: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    for k in &project.kernels {
        let src = project.root.join(&k.source);
        if let Some(d) = src.parent() {
            dirs.insert(d.to_path_buf());
        }
        files.insert(src);
        for inc in &k.include_dirs {
            dirs.insert(project.root.join(inc));
        }
    }
    for d in &dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let ext_ok = p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| EXTS.contains(&x));
            if ext_ok && p.is_file() {
                files.insert(p);
            }
        }
    }
    let mut h = blake3::Hasher::new();
    for f in &files {
        let rel = relative(&project.root, f);
        h.update(rel.as_bytes());
        h.update(&[0]);
        match std::fs::read(f) {
            Ok(b) => {
                h.update(&(b.len() as u64).to_le_bytes());
                h.update(&b);
            }
            Err(_) => {
                h.update(b"absent");
            }
        }
    }
    h.finalize().to_hex().to_string()
}

fn relative(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .replace('\\', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shard_specs_and_names_the_flag_in_errors() {
        assert_eq!(
            "2/3".parse::<ShardSpec>().unwrap(),
            ShardSpec { index: 2, count: 3 }
        );
        assert_eq!("1/1".parse::<ShardSpec>().unwrap().to_string(), "1/1");
        for bad in ["0/3", "4/3", "1/0", "3", "a/3", "1/b", "", "-1/3"] {
            let e = bad.parse::<ShardSpec>().unwrap_err().to_string();
            assert!(e.starts_with("--shard"), "{bad}: {e}");
            assert!(e.contains("I/N"), "{bad}: {e}");
        }
    }

    #[test]
    fn longest_first_balances_and_breaks_ties_by_order() {
        // 7 5 4 3 3 → LPT over 2: [7, 3] vs [5, 4, 3]... step by step:
        // 7→s0 (7), 5→s1 (5), 4→s1 (9), 3(idx3)→s0 (10), 3(idx4)→s1 (12).
        assert_eq!(assign(&[7, 5, 4, 3, 3], 2), vec![0, 1, 1, 0, 1]);
        // Equal costs go round-robin in order.
        assert_eq!(assign(&[1, 1, 1, 1], 2), vec![0, 1, 0, 1]);
        // More shards than items: the later shards are empty.
        assert_eq!(assign(&[5, 9], 4), vec![1, 0]);
        assert_eq!(assign(&[], 3), Vec::<usize>::new());
    }

    /// Deterministic, disjoint, covering, and within one item of the lower bound.
    fn check_assignment(costs: &[u64], count: u32) {
        let a = assign(costs, count);
        assert_eq!(a, assign(costs, count), "deterministic");
        assert_eq!(a.len(), costs.len(), "every item assigned exactly once");
        assert!(a.iter().all(|&s| s < count as usize));
        let mut load = vec![0u64; count as usize];
        for (i, &s) in a.iter().enumerate() {
            load[s] += costs[i];
        }
        let total: u64 = costs.iter().sum();
        let max_item = costs.iter().copied().max().unwrap_or(0);
        let heaviest = load.iter().copied().max().unwrap_or(0);
        // LPT's guarantee: the heaviest shard is at most the average plus the largest item.
        assert!(
            heaviest <= total / count as u64 + max_item,
            "{costs:?} over {count}: {load:?}"
        );
    }

    #[test]
    fn assignment_of_the_default_shape_is_balanced() {
        // The repository's default list: 8 cubin, 1 PTX, 9 hsaco targets of 26 jobs each.
        let mut costs = vec![26 * 54; 8];
        costs.push(26 * 56);
        costs.extend(vec![26 * 48; 9]);
        check_assignment(&costs, 3);
        let a = assign(&costs, 3);
        let n: Vec<usize> = (0..3)
            .map(|s| a.iter().filter(|&&x| x == s).count())
            .collect();
        assert_eq!(n, vec![6, 6, 6]);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn assignment_is_deterministic_disjoint_covering_and_balanced(
                costs in proptest::collection::vec(0u64..10_000, 0..40),
                count in 1u32..9,
            ) {
                check_assignment(&costs, count);
            }
        }
    }
}
