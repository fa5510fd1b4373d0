//! `kbuild inspect`: what it reads ([`inspect_path`]: code objects and containers, build
//! output dirs and manifest.json; [`inspect_objects`]: the objects of a bundle, which the
//! caller opens — this crate never reads bundles) and the table it renders for people. (JSON
//! is serde's.)

use std::fmt::Write;
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::params::{apply_types, Param, ParamKind};
use kbuild_manifest::read::ReadError;
use kbuild_manifest::resources::{
    inspect, BlockSize, InspectFailure, InspectedObject, Resources, FOREIGN_SPILLS,
    UNKNOWN_BLOCK_SIZE,
};

/// What [`inspect_path`] found in one path: the objects it read and what it could not read
/// (the path itself, or single objects of a build or bundle).
#[derive(Debug, Default)]
pub struct Inspected {
    pub objects: Vec<InspectedObject>,
    pub errors: Vec<InspectFailure>,
}

/// Why one object of a build or bundle could not be inspected.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("listed in {manifest} but not readable: {err}")]
    Listed {
        manifest: String,
        err: std::io::Error,
    },
    #[error("listed in the bundle's manifest but not in the bundle")]
    NotInBundle,
}

impl Inspected {
    /// One path that could not be read at all, and why.
    pub fn fail(path: impl Into<String>, error: impl std::fmt::Display) -> Inspected {
        Inspected {
            objects: Vec::new(),
            errors: vec![InspectFailure {
                path: path.into(),
                error: error.to_string(),
            }],
        }
    }

    /// `recorded`: what the manifest that lists the object records of its entries.
    fn add(
        &mut self,
        label: &str,
        found: Result<Vec<InspectedObject>, Unreadable>,
        recorded: Option<&BTreeMap<String, Resources>>,
    ) {
        match found {
            Ok(found) if found.is_empty() => self.errors.push(InspectFailure {
                path: label.to_string(),
                error: "no GPU code object in it".into(),
            }),
            Ok(mut found) => {
                for o in &mut found {
                    with_demangled_types(o);
                    if let Some(r) = recorded {
                        with_recorded(o, r);
                    }
                }
                self.objects.extend(found)
            }
            Err(error) => self.errors.push(InspectFailure {
                path: label.to_string(),
                error: error.to_string(),
            }),
        }
    }
}

/// Gives the parameters of C++ kernels the types of their demangled signatures (as the build
/// does for the manifest).
fn with_demangled_types(o: &mut InspectedObject) {
    for k in &mut o.kernels {
        if let (Some(p), Some(types)) = (
            k.params.as_mut(),
            kbuild_manifest::demangle::parameter_types(&k.name),
        ) {
            apply_types(p, &types);
        }
    }
}

/// Fills what a CUDA object cannot tell about itself from what its manifest records: spill
/// bytes (from the build's ptxas log, which a bundle does not ship) and occupancy (at the
/// project's block size), dropping the notes that said they were unknown.
fn with_recorded(o: &mut InspectedObject, recorded: &BTreeMap<String, Resources>) {
    for k in &mut o.kernels {
        let (Resources::Cuda(c), Some(Resources::Cuda(r))) =
            (&mut k.resources, recorded.get(&k.name))
        else {
            continue;
        };
        if c.spill_store_bytes.is_none() && c.spill_load_bytes.is_none() {
            c.spill_store_bytes = r.spill_store_bytes;
            c.spill_load_bytes = r.spill_load_bytes;
        }
        if c.occupancy.is_none() {
            c.occupancy = r.occupancy.clone();
        }
        let known = |part: &str| {
            (part == FOREIGN_SPILLS && c.spill_store_bytes.is_some())
                || (part == UNKNOWN_BLOCK_SIZE && c.occupancy.is_some())
        };
        let left: Vec<&str> = c
            .note
            .as_deref()
            .map(|n| n.split("; ").filter(|p| !known(p)).collect())
            .unwrap_or_default();
        c.note = (!left.is_empty()).then(|| left.join("; "));
    }
}

/// One kernel's parameters on one line: `0 ptr@0:8, 1 int@8:4 (+15 hidden)`: index, the C++
/// type where known (else `ptr`, `val` or `?` for pointer, value, unknown), `@offset:size`.
pub fn params_line(params: &[Param]) -> String {
    let mut parts: Vec<String> = params
        .iter()
        .filter(|p| !p.hidden)
        .map(|p| {
            let label = match (&p.type_name, p.kind) {
                (Some(t), _) => t.clone(),
                (None, ParamKind::Pointer) => "ptr".into(),
                (None, ParamKind::Value) => "val".into(),
                (None, ParamKind::Unknown) => "?".into(),
            };
            format!("{} {label}@{}:{}", p.index, p.offset, p.size)
        })
        .collect();
    if parts.is_empty() {
        parts.push("none".into());
    }
    let mut line = parts.join(", ");
    let hidden = params.iter().filter(|p| p.hidden).count();
    if hidden > 0 {
        line.push_str(&format!(" (+{hidden} hidden)"));
    }
    line
}

/// The ptxas log kbuild writes next to a cubin it built (`x.cubin.log`), if any.
fn build_log(path: &Path) -> Option<String> {
    let mut p = path.as_os_str().to_owned();
    p.push(".log");
    std::fs::read_to_string(PathBuf::from(p)).ok()
}

/// Inspect one path: a code object or container (cubin, hsaco, PTX, fatbin, offload bundle,
/// host ELF), or a kbuild build output directory or its `manifest.json` (every object it
/// lists, read from the build). A kbuild bundle is the caller's to open ([`inspect_objects`]).
/// `block_size` is `--block-size` for occupancy.
pub fn inspect_path(path: &Path, block_size: Option<BlockSize>) -> Inspected {
    let label = path.display().to_string();
    if path.is_dir() {
        let m = path.join("manifest.json");
        if !m.is_file() {
            return Inspected::fail(
                label,
                "a directory without manifest.json; pass a build output directory (`kbuild build --out DIR`), a bundle, or code object files",
            );
        }
        return inspect_manifest_file(&m, block_size);
    }
    let data = match kbuild_base::read::read_capped(path, MAX_INPUT_BYTES, "an input of inspect") {
        Ok(d) => d,
        Err(e) => return Inspected::fail(label, e),
    };
    if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return inspect_manifest(path, &data, block_size);
    }
    let mut out = Inspected::default();
    let log = build_log(path);
    out.add(
        &label,
        inspect(&label, &data, log.as_deref(), block_size).map_err(Unreadable::from),
        None,
    );
    out
}

fn inspect_manifest_file(m: &Path, block_size: Option<BlockSize>) -> Inspected {
    match kbuild_base::read::read_capped(m, kbuild_manifest::manifest::MAX_JSON_BYTES, "a manifest")
    {
        Ok(data) => inspect_manifest(m, &data, block_size),
        Err(e) => Inspected::fail(m.display().to_string(), e),
    }
}

/// The largest file inspect reads whole: a code object, fat binary or host library (the
/// largest real ones are a few hundred MiB).
const MAX_INPUT_BYTES: u64 = 2 << 30;

/// A build's manifest: each object it lists, read from the build dir beside it.
fn inspect_manifest(path: &Path, data: &[u8], block_size: Option<BlockSize>) -> Inspected {
    let manifest = match Manifest::from_json(data) {
        Ok(m) => m,
        Err(e) => return Inspected::fail(path.display().to_string(), e),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = Inspected::default();
    for o in &manifest.objects {
        let file = dir.join(&o.path);
        let label = file.display().to_string();
        let found = match std::fs::read(&file) {
            Ok(bytes) => {
                let log = build_log(&file);
                inspect(&label, &bytes, log.as_deref(), block_size).map_err(Unreadable::from)
            }
            Err(err) => Err(Unreadable::Listed {
                manifest: path.display().to_string(),
                err,
            }),
        };
        out.add(&label, found, Some(&o.resources));
    }
    out
}

/// The objects of a bundle `label` (its manifest's records with their bytes, `None` when the
/// manifest lists an object the bundle lacks), each named `LABEL#OBJECT PATH`; what an object
/// cannot tell about itself (CUDA spills) comes from its record.
pub fn inspect_objects<'a>(
    label: &str,
    objects: impl IntoIterator<Item = (&'a ObjectRecord, Option<&'a [u8]>)>,
    block_size: Option<BlockSize>,
) -> Inspected {
    let mut out = Inspected::default();
    for (record, bytes) in objects {
        let name = format!("{label}#{}", record.path);
        let found = match bytes {
            Some(bytes) => inspect(&name, bytes, None, block_size).map_err(Unreadable::from),
            None => Err(Unreadable::NotInBundle),
        };
        out.add(&name, found, Some(&record.resources));
    }
    out
}

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
/// registers/shared/reserved/stack/spill stores+loads/const/barriers/occupancy; PTX ISA. Then
/// one line per kernel with its parameters ([`params_line`]).
///
/// Kernels are named as a diff names them: demangled, without a leading `void ` (the JSON
/// keeps the symbols).
pub fn inspect_table(objects: &[InspectedObject]) -> String {
    let names = kbuild_manifest::demangle::demangle(
        objects.iter().flat_map(|o| &o.kernels).map(|k| &k.name),
    );
    let shown = |symbol: &str| crate::diff::display_name(symbol, None, &names);
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
                    shown(&k.name),
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
                    shown(&k.name),
                    c.registers.to_string(),
                    c.lds_bytes.to_string(),
                    c.reserved_shared_bytes.to_string(),
                    c.scratch_bytes.to_string(),
                    format!("{}/{}", opt(c.spill_store_bytes), opt(c.spill_load_bytes)),
                    c.const_bytes.to_string(),
                    c.barriers.to_string(),
                    occupancy_cell(&c.occupancy),
                ],
                Resources::Ptx(p) => vec![shown(&k.name), p.ptx_isa.clone(), p.target.clone()],
            });
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
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
        let name_width = o
            .kernels
            .iter()
            .filter(|k| k.params.is_some())
            .map(|k| shown(&k.name).chars().count())
            .max()
            .unwrap_or(0);
        if name_width > 0 {
            let _ = writeln!(out, "  params:");
        }
        for k in &o.kernels {
            if let Some(p) = &k.params {
                let _ = writeln!(
                    out,
                    "    {:<name_width$}  {}",
                    shown(&k.name),
                    params_line(p)
                );
            }
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
