//! The compared fields of a resource record: their manifest names, the report column they
//! belong to, which direction is better, and the unit their deltas are written in.

use kbuild_manifest::resources::Resources;

/// A field's value on one side.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(u64),
    Text(String),
    Bool(bool),
    /// Not recorded (CUDA spills of a foreign cubin, occupancy of an unknown processor).
    Unknown,
}

impl Value {
    pub fn num(&self) -> Option<u64> {
        match self {
            Value::Num(n) => Some(*n),
            _ => None,
        }
    }

    /// As a report cell shows it (`?` when unknown).
    pub fn show(&self) -> String {
        match self {
            Value::Num(n) => n.to_string(),
            Value::Text(t) => t.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Unknown => "?".into(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Num(n) => (*n).into(),
            Value::Text(t) => t.clone().into(),
            Value::Bool(b) => (*b).into(),
            Value::Unknown => serde_json::Value::Null,
        }
    }
}

/// Which way a field should move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
    /// Neither: a change is reported, never judged (kernarg size, PTX ISA, ...).
    Neutral,
}

/// The report column a field is shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Column {
    Vgpr,
    Sgpr,
    Agpr,
    Registers,
    Lds,
    Scratch,
    Spills,
    Occupancy,
    PtxIsa,
    PtxTarget,
    /// Not a column: listed under the table when it changes.
    Other,
}

/// What a field is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The manifest's field name (`vgprs`, `spill_store_bytes`, `occupancy`).
    pub name: &'static str,
    pub column: Column,
    pub better: Better,
    /// Delta unit, singular and plural (`"VGPR"`, `"VGPRs"`); `""` for none. Occupancy takes
    /// its unit from the record instead.
    pub unit: (&'static str, &'static str),
}

const fn f(
    name: &'static str,
    column: Column,
    better: Better,
    unit: (&'static str, &'static str),
) -> Field {
    Field {
        name,
        column,
        better,
        unit,
    }
}

const B: (&str, &str) = ("B", "B");
const OCC: (&str, &str) = ("", "");
use Better::{Higher, Lower, Neutral};
use Column::*;

/// AMD fields, in column order (`llvm-readobj --notes` names as the manifest keeps them).
pub const AMD: &[Field] = &[
    f("vgprs", Vgpr, Lower, ("VGPR", "VGPRs")),
    f("sgprs", Sgpr, Lower, ("SGPR", "SGPRs")),
    f("agprs", Agpr, Lower, ("AGPR", "AGPRs")),
    f("lds_bytes", Lds, Lower, B),
    f("scratch_bytes", Scratch, Lower, B),
    f("vgpr_spills", Spills, Lower, ("VGPR spill", "VGPR spills")),
    f("sgpr_spills", Spills, Lower, ("SGPR spill", "SGPR spills")),
    f("occupancy", Occupancy, Higher, OCC),
    f("wave_size", Other, Neutral, ("lane", "lanes")),
    f("max_threads", Other, Neutral, ("thread", "threads")),
    f("kernarg_bytes", Other, Neutral, B),
    f("dynamic_stack", Other, Neutral, ("", "")),
];

/// CUDA fields, in column order.
pub const CUDA: &[Field] = &[
    f("registers", Registers, Lower, ("register", "registers")),
    f("lds_bytes", Lds, Lower, B),
    f("scratch_bytes", Scratch, Lower, B),
    f(
        "spill_store_bytes",
        Spills,
        Lower,
        ("B spill stores", "B spill stores"),
    ),
    f(
        "spill_load_bytes",
        Spills,
        Lower,
        ("B spill loads", "B spill loads"),
    ),
    f("occupancy", Occupancy, Higher, OCC),
    f("reserved_shared_bytes", Other, Neutral, B),
    f("const_bytes", Other, Neutral, B),
    f("barriers", Other, Neutral, ("barrier", "barriers")),
    f("max_threads", Other, Neutral, ("thread", "threads")),
];

/// PTX fields.
pub const PTX: &[Field] = &[
    f("ptx_isa", PtxIsa, Neutral, ("", "")),
    f("target", PtxTarget, Neutral, ("", "")),
];

/// The vendor kind of a record: `amd`, `cuda` or `ptx` (the manifest's `kind` tag).
pub fn kind(r: &Resources) -> &'static str {
    match r {
        Resources::Amd(_) => "amd",
        Resources::Cuda(_) => "cuda",
        Resources::Ptx(_) => "ptx",
    }
}

/// The fields of a record's kind.
pub fn fields_of(r: &Resources) -> &'static [Field] {
    match r {
        Resources::Amd(_) => AMD,
        Resources::Cuda(_) => CUDA,
        Resources::Ptx(_) => PTX,
    }
}

/// The value of `name` in `r` (`Unknown` for a field the record's kind lacks).
pub fn value(r: &Resources, name: &str) -> Value {
    use Value::{Bool, Num, Text, Unknown};
    let opt = |v: Option<u64>| v.map_or(Unknown, Num);
    match r {
        Resources::Amd(a) => match name {
            "vgprs" => Num(a.vgprs.into()),
            "sgprs" => Num(a.sgprs.into()),
            "agprs" => Num(a.agprs.into()),
            "lds_bytes" => Num(a.lds_bytes),
            "scratch_bytes" => Num(a.scratch_bytes),
            "vgpr_spills" => Num(a.vgpr_spills.into()),
            "sgpr_spills" => Num(a.sgpr_spills.into()),
            "occupancy" => opt(a.occupancy.as_ref().map(|o| o.value.into())),
            "wave_size" => Num(a.wave_size.into()),
            "max_threads" => Num(a.max_threads.into()),
            "kernarg_bytes" => Num(a.kernarg_bytes),
            "dynamic_stack" => Bool(a.dynamic_stack),
            _ => Unknown,
        },
        Resources::Cuda(c) => match name {
            "registers" => Num(c.registers.into()),
            "lds_bytes" => Num(c.lds_bytes),
            "scratch_bytes" => Num(c.scratch_bytes),
            "spill_store_bytes" => opt(c.spill_store_bytes),
            "spill_load_bytes" => opt(c.spill_load_bytes),
            "occupancy" => opt(c.occupancy.as_ref().map(|o| o.value.into())),
            "reserved_shared_bytes" => Num(c.reserved_shared_bytes),
            "const_bytes" => Num(c.const_bytes),
            "barriers" => Num(c.barriers.into()),
            "max_threads" => opt(c.max_threads.map(u64::from)),
            _ => Unknown,
        },
        Resources::Ptx(p) => match name {
            "ptx_isa" => Text(p.ptx_isa.clone()),
            "target" => Text(p.target.clone()),
            _ => Unknown,
        },
    }
}

/// The occupancy record of `r`, if any.
pub fn occupancy(r: &Resources) -> Option<&kbuild_manifest::occupancy::Occupancy> {
    match r {
        Resources::Amd(a) => a.occupancy.as_ref(),
        Resources::Cuda(c) => c.occupancy.as_ref(),
        Resources::Ptx(_) => None,
    }
}

/// `waves/SIMD` → `wave/SIMD`, `warps/SM` → `warp/SM`.
pub fn singular_occupancy_unit(unit: &str) -> String {
    match unit.split_once('/') {
        Some((n, per)) => format!("{}/{per}", n.strip_suffix('s').unwrap_or(n)),
        None => unit.to_string(),
    }
}

/// The plural unit label of a field in `r` (what JSON's `unit` says): `VGPRs`, `bytes`,
/// `waves/SIMD`, or `""`.
pub fn unit_label(field: &Field, r: &Resources) -> String {
    if field.column == Column::Occupancy {
        return occupancy(r).map(|o| o.unit.clone()).unwrap_or_default();
    }
    match field.unit.1 {
        "B" => "bytes".into(),
        u if u.starts_with("B ") => "bytes".into(),
        u => u.into(),
    }
}

/// A signed delta with its unit: `-6 VGPRs`, `+1 wave/SIMD`, `+7168 B`.
pub fn delta_text(field: &Field, delta: i64, r: &Resources) -> String {
    let n = delta.unsigned_abs();
    let sign = if delta < 0 { "-" } else { "+" };
    let unit = if field.column == Column::Occupancy {
        let plural = occupancy(r).map(|o| o.unit.clone()).unwrap_or_default();
        if n == 1 {
            singular_occupancy_unit(&plural)
        } else {
            plural
        }
    } else if n == 1 {
        field.unit.0.to_string()
    } else {
        field.unit.1.to_string()
    };
    if unit.is_empty() {
        format!("{sign}{n}")
    } else {
        format!("{sign}{n} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::occupancy::Occupancy;
    use kbuild_manifest::resources::AmdResources;

    fn amd() -> Resources {
        Resources::Amd(AmdResources {
            vgprs: 89,
            sgprs: 32,
            agprs: 0,
            vgpr_spills: 0,
            sgpr_spills: 0,
            lds_bytes: 6160,
            scratch_bytes: 0,
            wave_size: 32,
            max_threads: 256,
            kernarg_bytes: 40,
            dynamic_stack: false,
            occupancy: Some(Occupancy {
                unit: "waves/SIMD".into(),
                value: 8,
                max: 16,
                limiter: "vgprs".into(),
                block_size: None,
                block_size_from: None,
            }),
        })
    }

    #[test]
    fn deltas_carry_signed_units_singular_and_plural() {
        let r = amd();
        assert_eq!(delta_text(&AMD[0], -6, &r), "-6 VGPRs");
        assert_eq!(delta_text(&AMD[0], 1, &r), "+1 VGPR");
        assert_eq!(delta_text(&AMD[7], 1, &r), "+1 wave/SIMD");
        assert_eq!(delta_text(&AMD[7], -2, &r), "-2 waves/SIMD");
        assert_eq!(delta_text(&AMD[3], 1024, &r), "+1024 B");
        assert_eq!(delta_text(&CUDA[3], 8, &r), "+8 B spill stores");
        assert_eq!(singular_occupancy_unit("warps/SM"), "warp/SM");
    }

    #[test]
    fn every_listed_field_has_a_value_of_its_kind() {
        let r = amd();
        for f in AMD {
            assert_ne!(value(&r, f.name), Value::Unknown, "{}", f.name);
        }
        assert_eq!(value(&r, "registers"), Value::Unknown);
        assert_eq!(unit_label(&AMD[7], &r), "waves/SIMD");
        assert_eq!(unit_label(&AMD[3], &r), "bytes");
    }
}
