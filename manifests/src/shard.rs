//! How a sharded build's targets are split (`kbuild build --shard I/N`): the one assignment
//! function the build uses to pick a shard's targets and `kbuild package --merge` uses to
//! check them, so a shard cannot hold targets its I/N does not give it.
//!
//! A target costs its number of (kernel, variant) jobs times the weight of its object kind
//! ([`WEIGHTS`]). Targets are assigned longest-processing-time first (heaviest first, each to
//! the least loaded shard), ties broken by target order and then by shard number.

use crate::target::{ObjectKind, Target};

/// Estimated cost of one job by the kind of object it makes: the mean compile seconds per job
/// (× 10) of a default-target build of the repository's kernels (kernels/Kbuild.toml, 26 jobs
/// per target, cold cache, `timings.json` of the compile cache): sm_* cubins 5.4 s
/// (nvcc + ptxas), gfx* code objects 4.8 s (hip-clang), `compute_*` PTX 5.6 s (nvcc to PTX).
/// Only their ratios matter.
pub const WEIGHTS: [(ObjectKind, u64); 3] = [
    (ObjectKind::Cubin, 54),
    (ObjectKind::Hsaco, 48),
    (ObjectKind::Ptx, 56),
];

/// The weight of one job for `target` (see [`WEIGHTS`]).
pub fn weight(target: &Target) -> u64 {
    let kind = target.object_kind();
    WEIGHTS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, w)| *w)
        .unwrap_or(1)
}

/// The shard (0-based) of each item of `costs`, longest-processing-time first: items by
/// decreasing cost (ties: earlier item first), each to the shard with the least load so far
/// (ties: the lowest shard). `count` 0 is taken as 1.
pub fn assign(costs: &[u64], count: u32) -> Vec<usize> {
    let count = count.max(1) as usize;
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].cmp(&costs[a]).then(a.cmp(&b)));
    let mut load = vec![0u64; count];
    let mut out = vec![0usize; costs.len()];
    for i in order {
        let mut best = 0;
        for (s, l) in load.iter().enumerate() {
            if *l < load[best] {
                best = s;
            }
        }
        load[best] = load[best].saturating_add(costs[i]);
        out[i] = best;
    }
    out
}
