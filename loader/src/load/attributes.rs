//! The runtime's figures for a loaded function compared with the manifest's: a difference is
//! a stale or swapped artifact.

use kbuild_manifest::load_index::LoadFigures;

use crate::cuda;
use crate::error::{LoaderError, Result};

#[derive(Debug, Clone, Copy)]
pub(crate) struct RuntimeFigures {
    pub(crate) registers: Option<i64>,
    pub(crate) shared_bytes: i64,
    pub(crate) local_bytes: i64,
    pub(crate) max_threads: i64,
}

impl From<cuda::FuncAttributes> for RuntimeFigures {
    fn from(a: cuda::FuncAttributes) -> RuntimeFigures {
        RuntimeFigures {
            registers: Some(a.registers),
            shared_bytes: a.shared_bytes,
            local_bytes: a.local_bytes,
            max_threads: a.max_threads,
        }
    }
}

/// One compared attribute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttributeCheck {
    /// Manifest field: `registers`, `lds_bytes`, `scratch_bytes`.
    pub field: &'static str,
    /// What the runtime reports after load.
    pub loaded: i64,
    /// What the manifest says (`32`, or `32 (+1024 reserved)`).
    pub manifest: String,
    /// How they were compared, e.g. that the driver's figure includes the reservation.
    pub note: String,
}

/// Compare the runtime's figures with the manifest's; a difference is an error. Nothing is
/// allocated when they agree (this is on every function's load path).
///
/// CUDA: `NUM_REGS` = `registers`; `LOCAL_SIZE_BYTES` = `scratch_bytes`;
/// `SHARED_SIZE_BYTES` = `lds_bytes`, or `lds_bytes + reserved_shared_bytes` (the sm_90+
/// 1 KiB system reservation, which a driver may count in). PTX is JIT-compiled by the driver,
/// so there are no build-time figures to compare. AMD: `SHARED_SIZE_BYTES` = `lds_bytes` and
/// `LOCAL_SIZE_BYTES` = `scratch_bytes` (registers are reported per the runtime's own unit
/// and not compared).
pub(crate) fn check_attributes(
    object: &str,
    entry: &str,
    figures: &LoadFigures,
    loaded: &RuntimeFigures,
) -> Result<()> {
    for c in compared_fields(figures, loaded) {
        if !c.agrees {
            return Err(LoaderError::AttributeMismatch {
                object: object.to_string(),
                entry: entry.to_string(),
                field: c.field,
                loaded: c.loaded,
                manifest: c.manifest_text(),
            });
        }
    }
    Ok(())
}

/// The compared attributes as [`AttributeCheck`]s (all agreed: loading checked them).
pub(crate) fn describe_attributes(
    figures: &LoadFigures,
    loaded: &RuntimeFigures,
) -> Vec<AttributeCheck> {
    compared_fields(figures, loaded)
        .map(|c| AttributeCheck {
            field: c.field,
            loaded: c.loaded,
            manifest: c.manifest_text(),
            note: c.note.into(),
        })
        .collect()
}

/// One attribute compared: what the runtime says, what the manifest says, whether they agree.
struct Compared {
    field: &'static str,
    loaded: i64,
    manifest: i64,
    /// The sm_90+ shared-memory reservation, shown beside `lds_bytes`.
    reserved: i64,
    agrees: bool,
    note: &'static str,
}

impl Compared {
    fn manifest_text(&self) -> String {
        if self.reserved > 0 {
            format!("{} (+{} reserved)", self.manifest, self.reserved)
        } else {
            self.manifest.to_string()
        }
    }
}

fn compared_fields(
    figures: &LoadFigures,
    loaded: &RuntimeFigures,
) -> impl Iterator<Item = Compared> {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let fields: [Option<Compared>; 3] = match *figures {
        LoadFigures::Cuda {
            registers,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
            ..
        } => {
            let regs = loaded.registers.unwrap_or(-1);
            let lds = as_i64(lds_bytes);
            let reserved = i64::try_from(reserved_shared_bytes).unwrap_or(0);
            let (shared_ok, shared_note) = if loaded.shared_bytes == lds {
                (true, "SHARED_SIZE_BYTES = lds_bytes")
            } else if reserved > 0 && loaded.shared_bytes == lds + reserved {
                (
                    true,
                    "SHARED_SIZE_BYTES = lds_bytes + reserved_shared_bytes",
                )
            } else {
                (false, "SHARED_SIZE_BYTES")
            };
            let scratch = as_i64(scratch_bytes);
            [
                Some(Compared {
                    field: "registers",
                    loaded: regs,
                    manifest: i64::from(registers),
                    reserved: 0,
                    agrees: regs == i64::from(registers),
                    note: "NUM_REGS",
                }),
                Some(Compared {
                    field: "lds_bytes",
                    loaded: loaded.shared_bytes,
                    manifest: lds,
                    reserved,
                    agrees: shared_ok,
                    note: shared_note,
                }),
                Some(Compared {
                    field: "scratch_bytes",
                    loaded: loaded.local_bytes,
                    manifest: scratch,
                    reserved: 0,
                    agrees: loaded.local_bytes == scratch,
                    note: "LOCAL_SIZE_BYTES",
                }),
            ]
        }
        LoadFigures::Amd {
            lds_bytes,
            scratch_bytes,
            ..
        } => {
            let (lds, scratch) = (as_i64(lds_bytes), as_i64(scratch_bytes));
            [
                Some(Compared {
                    field: "lds_bytes",
                    loaded: loaded.shared_bytes,
                    manifest: lds,
                    reserved: 0,
                    agrees: loaded.shared_bytes == lds,
                    note: "hipFuncGetAttribute",
                }),
                Some(Compared {
                    field: "scratch_bytes",
                    loaded: loaded.local_bytes,
                    manifest: scratch,
                    reserved: 0,
                    agrees: loaded.local_bytes == scratch,
                    note: "hipFuncGetAttribute",
                }),
                None,
            ]
        }
        LoadFigures::Ptx | LoadFigures::None => [None, None, None],
    };
    fields.into_iter().flatten()
}
