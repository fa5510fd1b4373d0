//! What a Triton kernel's object does not carry and its launch needs (`ObjectRecord::triton`):
//! the block and dynamic shared memory, the two scratch buffers, launch attributes, and its
//! parameters with the specialization they were compiled under.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How to launch one Triton object, as its compile reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TritonLaunch {
    /// The `@triton.jit` function (also the object's only entry symbol).
    pub function: String,
    pub triton_version: String,
    pub num_warps: u32,
    /// Threads per warp on the target (64 on gfx9): a block is `num_warps * warp_size`.
    pub warp_size: u32,
    /// CTAs per cluster (a launch multiplies the grid's x by it).
    pub num_ctas: u32,
    pub num_stages: u32,
    /// Dynamic shared memory (LDS) bytes each launch must ask for; the object records none.
    pub shared: u64,
    /// Bytes per program of the global scratch buffer (0: pass NULL) and its alignment.
    pub global_scratch_size: u64,
    pub global_scratch_align: u64,
    /// The same for the profiler's scratch buffer.
    pub profile_scratch_size: u64,
    pub profile_scratch_align: u64,
    pub cooperative: bool,
    /// Programmatic dependent launch.
    pub pdl: bool,
    /// Tensor memory bytes (Blackwell).
    #[serde(default)]
    pub tmem_size: u64,
    /// The launch parameters in order: the non-constexpr arguments left, then the two scratch
    /// pointers.
    pub params: Vec<TritonParam>,
    /// Arguments compiled away: each must be passed as it was specialized, or not at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<TritonRemoved>,
    /// The constexpr values compiled in (JSON values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constexprs: BTreeMap<String, serde_json::Value>,
}

/// One launch parameter of a Triton kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TritonParam {
    pub name: String,
    /// Triton's type (`*fp32`, `i32`, `fp32`), or `scratch` for the trailing scratch pointers.
    #[serde(rename = "type")]
    pub ty: String,
    /// The code assumes the value (a pointer's address, an int) is a multiple of 16.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub divisible_16: bool,
}

/// An argument that is not a parameter of the compiled object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TritonRemoved {
    pub name: String,
    /// `none` (compiled for `None`), `equal_to_1` (an int specialized as 1).
    pub why: String,
}

impl TritonLaunch {
    /// Threads per block.
    pub fn block_threads(&self) -> u32 {
        self.num_warps.saturating_mul(self.warp_size)
    }

    /// Give the object's parameter table (as its reader found it) the launch record's names
    /// and C types, so the launch check names each argument and packs an `fp32` as 4 bytes.
    /// Left as read when the two do not have one parameter each.
    pub fn name_params(&self, params: &mut [crate::params::Param]) {
        let visible = params.iter().filter(|p| !p.hidden).count();
        if visible != self.params.len() {
            return;
        }
        let names = params.iter_mut().filter(|p| !p.hidden).zip(&self.params);
        for (p, t) in names {
            p.name = Some(t.name.clone());
            let c = c_type(&t.ty);
            if p.kind == crate::params::ParamKind::Unknown {
                p.kind = crate::params::kind_of_type(&c);
            }
            p.type_name = Some(c);
        }
    }
}

/// The C type of a Triton type (`*fp32` → `float*`, `i32` → `int32_t`, a scratch pointer →
/// `void*`).
pub fn c_type(ty: &str) -> String {
    if ty == "scratch" {
        return "void*".into();
    }
    let (base, pointer) = match ty.strip_prefix('*') {
        Some(b) => (b, "*"),
        None => (ty, ""),
    };
    let c = match base {
        "i1" | "u1" => "bool",
        "i8" => "int8_t",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "fp16" => "half",
        "bf16" => "bf16",
        "fp32" => "float",
        "fp64" => "double",
        // The fp8 types: bytes to C.
        _ => "uint8_t",
    };
    format!("{c}{pointer}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triton_types_as_c_types() {
        for (t, c) in [
            ("*fp32", "float*"),
            ("i32", "int32_t"),
            ("fp32", "float"),
            ("*bf16", "bf16*"),
            ("u64", "uint64_t"),
            ("scratch", "void*"),
            ("*fp8e4nv", "uint8_t*"),
        ] {
            assert_eq!(c_type(t), c, "{t}");
        }
    }
}
