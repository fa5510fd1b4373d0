//! Rendering of resource records for people: the `kbuild inspect` table. (JSON is serde's.)

use std::fmt::Write;

use kbuild_manifest::resources::{InspectedObject, Resources};

fn occupancy_cell(o: &Option<kbuild_manifest::occupancy::Occupancy>) -> String {
    match o {
        Some(o) => match (o.block_size, &o.block_size_from) {
            (Some(b), Some(from)) => format!(
                "{}/{} {} ({}) at {b} threads ({from})",
                o.value, o.max, o.unit, o.limiter
            ),
            (Some(b), None) => format!(
                "{}/{} {} ({}) at {b} threads",
                o.value, o.max, o.unit, o.limiter
            ),
            _ => format!("{}/{} {} ({})", o.value, o.max, o.unit, o.limiter),
        },
        None => "unknown".into(),
    }
}

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}

/// A table per object: AMD columns VGPR/SGPR/AGPR/LDS/scratch/spills/wave/occupancy; CUDA
/// registers/shared/reserved/stack/spill stores+loads/const/barriers/occupancy; PTX ISA.
pub fn inspect_table(objects: &[InspectedObject]) -> String {
    let mut out = String::new();
    for o in objects {
        let _ = writeln!(
            out,
            "{} ({}, {})",
            o.path,
            format!("{:?}", o.format).to_lowercase(),
            o.target
        );
        let mut rows: Vec<Vec<String>> = Vec::new();
        let header: Vec<&str> = match o.kernels.first().map(|k| &k.resources) {
            Some(Resources::Amd(_)) => vec![
                "kernel",
                "VGPR",
                "SGPR",
                "AGPR",
                "LDS B",
                "scratch B",
                "spills v/s",
                "wave",
                "occupancy",
            ],
            Some(Resources::Cuda(_)) => vec![
                "kernel",
                "regs",
                "shared B",
                "reserved B",
                "stack B",
                "spill st/ld B",
                "cmem0 B",
                "barriers",
                "occupancy",
            ],
            Some(Resources::Ptx(_)) => vec!["kernel", "PTX ISA", "target"],
            None => {
                out.push_str("  (no kernels)\n");
                continue;
            }
        };
        for k in &o.kernels {
            rows.push(match &k.resources {
                Resources::Amd(a) => vec![
                    k.name.clone(),
                    a.vgprs.to_string(),
                    a.sgprs.to_string(),
                    a.agprs.to_string(),
                    a.lds_bytes.to_string(),
                    a.scratch_bytes.to_string(),
                    format!("{}/{}", a.vgpr_spills, a.sgpr_spills),
                    a.wave_size.to_string(),
                    occupancy_cell(&a.occupancy),
                ],
                Resources::Cuda(c) => vec![
                    k.name.clone(),
                    c.registers.to_string(),
                    c.lds_bytes.to_string(),
                    c.reserved_shared_bytes.to_string(),
                    c.scratch_bytes.to_string(),
                    format!("{}/{}", opt(c.spill_store_bytes), opt(c.spill_load_bytes)),
                    c.const_bytes.to_string(),
                    c.barriers.to_string(),
                    occupancy_cell(&c.occupancy),
                ],
                Resources::Ptx(p) => vec![k.name.clone(), p.ptx_isa.clone(), p.target.clone()],
            });
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, String::len))
                    .max()
                    .unwrap_or(0)
                    .max(header[i].len())
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let mut s = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                if i == 0 {
                    let _ = write!(s, " {c:<w$}", w = widths[i]);
                } else {
                    let _ = write!(s, "  {c:>w$}", w = widths[i]);
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(header.clone()));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
        }
        if let Some(note) = o.kernels.iter().find_map(|k| match &k.resources {
            Resources::Cuda(c) => c.note.clone(),
            _ => None,
        }) {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    out
}
