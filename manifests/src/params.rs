//! The launch ABI of a kernel entry: its parameters as the code object lays them out (index,
//! byte offset, size, alignment where the object records it, pointer or value), from the
//! cubin's `EIATTR_KPARAM_INFO` records, the AMDGPU metadata's `.args`, or the PTX `.entry`
//! parameter list.
//!
//! Each source says less than the others in some way, and a field says only what its source
//! says: a cubin has no parameter names or types and marks pointers only on sm_100 and later
//! (space 5, see [`crate::read::nvinfo::KParamInfo`]); PTX from nvcc 13 writes pointers as
//! plain `.u64`; AMDGPU metadata has no per-argument alignment. What a C++ kernel's mangled
//! name adds (types, and so pointer or value) is applied by [`apply_types`].

use serde::{Deserialize, Serialize};

use crate::read::amdgpu::AmdKernelArg;
use crate::read::cubin::CudaKernel;
use crate::read::ptx::PtxParam;

/// Pointer, value, or not known from the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    Pointer,
    Value,
    Unknown,
}

impl ParamKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamKind::Pointer => "pointer",
            ParamKind::Value => "value",
            ParamKind::Unknown => "unknown",
        }
    }
}

/// One launch parameter of a kernel entry. Offsets and sizes are bytes in the parameter block
/// (CUDA: constant bank 0 from `EIATTR_PARAM_CBANK`'s offset on; AMD: the kernarg segment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Position in the parameter list, 0-based (hidden AMD arguments continue the count).
    pub index: u32,
    pub offset: u64,
    pub size: u64,
    /// Bytes; only where the object records it (PTX). Absent for cubins and AMDGPU objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub align: Option<u64>,
    pub kind: ParamKind,
    /// The source name (AMDGPU `.name`); absent where the object has none (cubins, nvcc's PTX
    /// `<entry>_param_N`, hip-clang's metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The C++ type (`const float*`): AMDGPU `.type_name`, or the demangled name of a C++
    /// kernel.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// An argument the runtime fills, not the caller (AMDGPU `hidden_*` value kinds).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

impl Param {
    /// First byte after the parameter.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

/// Pointer width of every target kbuild builds (64-bit only).
const POINTER_BYTES: u64 = 8;

/// The parameters of a cubin kernel, from its `EIATTR_KPARAM_INFO` records; `None` when the
/// cubin does not record them (a parameter block but no records) or the records do not make a
/// list (see [`CudaKernel::kparams_unusable`]).
///
/// Kind: pointer when the space field is set (sm_100+ marks used global pointers); value when
/// the size is not a pointer's (a 4-byte parameter is no pointer); else unknown.
pub fn from_cubin(k: &CudaKernel) -> Option<Vec<Param>> {
    if k.kparams_unusable.is_some() || (k.kparams.is_empty() && k.param_bytes.unwrap_or(0) > 0) {
        return None;
    }
    Some(
        k.kparams
            .iter()
            .map(|p| Param {
                index: u32::from(p.ordinal),
                offset: u64::from(p.offset),
                size: u64::from(p.size),
                align: None,
                kind: if p.space != 0 && u64::from(p.size) == POINTER_BYTES {
                    ParamKind::Pointer
                } else if u64::from(p.size) != POINTER_BYTES {
                    ParamKind::Value
                } else {
                    ParamKind::Unknown
                },
                name: None,
                type_name: None,
                hidden: false,
            })
            .collect(),
    )
}

/// AMDGPU `.value_kind`s of hidden arguments that hold an address (AMDGPUUsage "Code Object
/// V3+ Metadata", kernel argument value kinds).
const HIDDEN_POINTERS: &[&str] = &[
    "hidden_printf_buffer",
    "hidden_hostcall_buffer",
    "hidden_default_queue",
    "hidden_completion_action",
    "hidden_multigrid_sync_arg",
    "hidden_heap_v1",
    "hidden_queue_ptr",
];

/// Kind of an AMDGPU argument from its `.value_kind`.
fn amd_kind(value_kind: &str) -> ParamKind {
    match value_kind {
        "global_buffer" | "dynamic_shared_pointer" | "queue" | "pipe" => ParamKind::Pointer,
        "by_value" => ParamKind::Value,
        k if HIDDEN_POINTERS.contains(&k) => ParamKind::Pointer,
        "hidden_none" => ParamKind::Unknown,
        k if k.starts_with("hidden_") => ParamKind::Value,
        _ => ParamKind::Unknown,
    }
}

/// The parameters of an AMDGPU kernel, from its metadata `.args` (hidden ones included, marked
/// `hidden`), in `.args` order.
pub fn from_amd(args: &[AmdKernelArg]) -> Vec<Param> {
    args.iter()
        .enumerate()
        .map(|(i, a)| Param {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            offset: a.offset,
            size: a.size,
            align: None,
            kind: amd_kind(&a.value_kind),
            name: a.name.clone().filter(|n| !n.is_empty()),
            type_name: a.type_name.clone().filter(|t| !t.is_empty()),
            hidden: a.value_kind.starts_with("hidden_"),
        })
        .collect()
}

/// The parameters of a PTX entry. Kind: pointer when declared `.ptr`; unknown for a 64-bit
/// integer without it (nvcc 13 writes every pointer so); value otherwise. Names are not kept:
/// nvcc's are `<entry>_param_N`, which say nothing.
pub fn from_ptx(params: &[PtxParam]) -> Vec<Param> {
    params
        .iter()
        .enumerate()
        .map(|(i, p)| Param {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            offset: p.offset,
            size: p.size,
            align: Some(p.align),
            kind: if p.ptr {
                ParamKind::Pointer
            } else if !p.array
                && p.size == POINTER_BYTES
                && matches!(p.ty.as_str(), "u64" | "s64" | "b64")
            {
                ParamKind::Unknown
            } else {
                ParamKind::Value
            },
            name: None,
            type_name: None,
            hidden: false,
        })
        .collect()
}

/// Pointer or value, from a C++ parameter type as a demangler writes it (`float*`,
/// `float const*`, `int`, `float* __restrict`).
pub fn kind_of_type(ty: &str) -> ParamKind {
    let t = ty.trim();
    let t = t
        .trim_end_matches("__restrict")
        .trim_end_matches("restrict")
        .trim_end_matches("const")
        .trim_end_matches("volatile")
        .trim_end();
    if t.ends_with('*') || t.ends_with('&') {
        ParamKind::Pointer
    } else {
        ParamKind::Value
    }
}

/// Gives the caller-visible (not hidden) parameters the C++ types of the kernel's signature, in
/// order, where they have none, and decides the unknown kinds by them. Does nothing when the
/// counts differ (the object does not lay the parameters out one per C++ parameter).
pub fn apply_types(params: &mut [Param], types: &[String]) {
    let visible = params.iter().filter(|p| !p.hidden).count();
    if visible != types.len() {
        return;
    }
    for (p, t) in params.iter_mut().filter(|p| !p.hidden).zip(types) {
        if p.type_name.is_none() {
            p.type_name = Some(t.clone());
        }
        if p.kind == ParamKind::Unknown {
            p.kind = kind_of_type(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::nvinfo::KParamInfo;

    fn kp(ordinal: u16, offset: u16, size: u16, space: u8) -> KParamInfo {
        KParamInfo {
            index: 0,
            ordinal,
            offset,
            size,
            pointee_log_align: 0,
            space,
            cbank: 0x1f,
            in_cbank: true,
        }
    }

    #[test]
    fn cubin_kinds_follow_space_and_size() {
        let k = CudaKernel {
            kparams: vec![kp(0, 0, 8, 5), kp(1, 8, 8, 0), kp(2, 16, 4, 0)],
            param_bytes: Some(20),
            ..Default::default()
        };
        let p = from_cubin(&k).unwrap();
        let kinds: Vec<ParamKind> = p.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [ParamKind::Pointer, ParamKind::Unknown, ParamKind::Value]
        );
        assert_eq!((p[2].index, p[2].offset, p[2].size), (2, 16, 4));
        let none = CudaKernel {
            param_bytes: Some(8),
            ..Default::default()
        };
        assert_eq!(from_cubin(&none), None);
        assert_eq!(from_cubin(&CudaKernel::default()), Some(vec![]));
        let gap = CudaKernel {
            kparams: vec![kp(0, 0, 8, 0), kp(2, 8, 4, 0)],
            ..Default::default()
        };
        let mut gap_read = gap.clone();
        gap_read.kparams_unusable = crate::read::cubin::check_kparams(&mut gap_read)
            .err()
            .map(|e| e.to_string());
        assert!(gap_read.kparams_unusable.unwrap().contains("not 0..2"));
        let mut past = CudaKernel {
            kparams: vec![kp(0, 0, 8, 0)],
            param_bytes: Some(4),
            ..Default::default()
        };
        assert!(crate::read::cubin::check_kparams(&mut past)
            .unwrap_err()
            .to_string()
            .contains("past the 4-byte parameter block"));
        let unusable = CudaKernel {
            kparams_unusable: Some("x".into()),
            ..gap
        };
        assert_eq!(from_cubin(&unusable), None);
    }

    #[test]
    fn amd_value_kinds_and_hidden_arguments() {
        let arg = |kind: &str, offset: u64, size: u64| AmdKernelArg {
            offset,
            size,
            value_kind: kind.into(),
            ..Default::default()
        };
        let p = from_amd(&[
            arg("global_buffer", 0, 8),
            arg("by_value", 8, 4),
            arg("hidden_block_count_x", 16, 4),
            arg("hidden_hostcall_buffer", 24, 8),
            arg("image", 32, 8),
        ]);
        let got: Vec<(ParamKind, bool)> = p.iter().map(|p| (p.kind, p.hidden)).collect();
        assert_eq!(
            got,
            [
                (ParamKind::Pointer, false),
                (ParamKind::Value, false),
                (ParamKind::Value, true),
                (ParamKind::Pointer, true),
                (ParamKind::Unknown, false),
            ]
        );
    }

    #[test]
    fn demangled_types_fill_types_and_unknown_kinds() {
        let mut p = from_amd(&[]);
        assert!(p.is_empty());
        let k = CudaKernel {
            kparams: vec![kp(0, 0, 8, 0), kp(1, 8, 4, 0)],
            ..Default::default()
        };
        p = from_cubin(&k).unwrap();
        apply_types(&mut p, &["float const*".into(), "int".into()]);
        assert_eq!(p[0].kind, ParamKind::Pointer);
        assert_eq!(p[0].type_name.as_deref(), Some("float const*"));
        assert_eq!(p[1].kind, ParamKind::Value);
        let mut q = from_cubin(&k).unwrap();
        apply_types(&mut q, &["int".into()]);
        assert_eq!(q[0].type_name, None, "counts differ: nothing applied");
        assert_eq!(kind_of_type("float* __restrict"), ParamKind::Pointer);
        assert_eq!(kind_of_type("Params"), ParamKind::Value);
    }
}
