//! `kbuild.run-gdn/v1`: the one JSON document of `kbuild run gdn --json`, typed here; the
//! binary renders it.

use serde::Serialize;

use crate::bench::BenchReport;
use crate::geometry::Geometry;
use crate::parity::{Check, ParityReport};

pub const RUN_GDN_SCHEMA: &str = "kbuild.run-gdn/v1";

/// `kbuild.run-gdn/v1`: the device, the geometry, and the parity and benchmark reports that
/// ran; `passed` unless a parity check failed.
#[derive(Debug, Serialize)]
pub struct RunReport<'a> {
    pub schema: &'static str,
    pub device: &'a str,
    pub geometry: &'a Geometry,
    pub parity: Option<&'a ParityReport>,
    pub bench: Option<&'a BenchReport>,
    pub passed: bool,
}

impl<'a> RunReport<'a> {
    pub fn new(
        device: &'a str,
        geometry: &'a Geometry,
        parity: Option<&'a ParityReport>,
        bench: Option<&'a BenchReport>,
    ) -> RunReport<'a> {
        RunReport {
            schema: RUN_GDN_SCHEMA,
            device,
            geometry,
            parity,
            bench,
            passed: parity.is_none_or(ParityReport::passed),
        }
    }
}

/// `  PASS  name  rel-L2 2.1e-07 ≤ 1e-05` / `  FAIL  name  bitwise: 3 of 10 elements differ`.
pub fn check_line(c: &Check) -> String {
    let verdict = if c.pass { "PASS" } else { "FAIL" };
    let what = match c.kind {
        "rel-l2" => format!("rel-L2 {:.2e} ≤ {:.0e}", c.value, c.limit),
        _ => format!("bitwise: {}", c.detail),
    };
    let detail = if c.kind == "rel-l2" && !c.detail.is_empty() {
        format!(" ({})", c.detail)
    } else {
        String::new()
    };
    format!("  {verdict}  {:<58} {what}{detail}", c.name)
}

/// The benchmark table, shaped like the per-stack tables engine teams publish.
pub fn bench_table(r: &BenchReport) -> String {
    let mut s = format!(
        "benchmark: {} layers, state {:.1} MB, CUDA-graph replays (median of timed replays)\n",
        r.layers,
        r.state_bytes as f64 / 1e6
    );
    s.push_str("  op                 T/n  launches  median µs    min µs   state GB/s  vs copy\n");
    for row in &r.rows {
        let t = if row.tokens == 0 {
            "-".to_string()
        } else {
            row.tokens.to_string()
        };
        s.push_str(&format!(
            "  {:<17} {:>4} {:>9} {:>10.1} {:>9.1} {:>12.0} {:>7.2}\n",
            row.op, t, row.launches, row.median_us, row.min_us, row.gb_per_s, row.vs_copy
        ));
    }
    let per = |n: usize| {
        let get = |op: &str| {
            r.rows
                .iter()
                .find(|x| x.op == op && x.tokens == n)
                .map(|x| x.median_us)
        };
        match (get("commit per-layer"), get("commit batched")) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    };
    let ratios: Vec<String> = (1..=8)
        .filter_map(|n| per(n).map(|x| format!("n={n} {x:.2}×")))
        .collect();
    if !ratios.is_empty() {
        s.push_str(&format!(
            "  batched commit speed-up over per-layer: {}\n",
            ratios.join(", ")
        ));
    }
    s
}
