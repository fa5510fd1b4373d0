//! The NT_AMDGPU_METADATA MessagePack note (code object v3..v6), as typed records.
//!
//! Keys and their meaning are LLVM's AMDGPUUsage "Code Object V3+ Metadata"; every per-kernel
//! key listed there that a resource report needs is read, unknown keys are ignored. Values must
//! equal what `llvm-readobj-19 --notes` prints for the same note.

use serde::{Deserialize, Serialize};

/// The whole metadata map.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AmdMetadata {
    /// `amdhsa.version`: [1, 1] for v4, [1, 2] for v5 and v6.
    #[serde(rename = "amdhsa.version", default)]
    pub version: Vec<u32>,
    /// `amdhsa.target`, e.g. "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-".
    #[serde(rename = "amdhsa.target", default)]
    pub target: Option<String>,
    /// `amdhsa.printf` format strings, when the module uses printf.
    #[serde(rename = "amdhsa.printf", default)]
    pub printf: Vec<String>,
    #[serde(rename = "amdhsa.kernels", default)]
    pub kernels: Vec<AmdKernelMetadata>,
}

/// One entry of `amdhsa.kernels`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AmdKernelMetadata {
    #[serde(rename = ".name")]
    pub name: String,
    /// `<name>.kd`: the kernel descriptor symbol.
    #[serde(rename = ".symbol")]
    pub symbol: String,
    #[serde(rename = ".kernarg_segment_size")]
    pub kernarg_segment_size: u64,
    #[serde(rename = ".kernarg_segment_align")]
    pub kernarg_segment_align: u64,
    /// Static LDS bytes per work-group.
    #[serde(rename = ".group_segment_fixed_size")]
    pub group_segment_fixed_size: u64,
    /// Scratch bytes per work-item.
    #[serde(rename = ".private_segment_fixed_size")]
    pub private_segment_fixed_size: u64,
    #[serde(rename = ".wavefront_size")]
    pub wavefront_size: u32,
    #[serde(rename = ".sgpr_count")]
    pub sgpr_count: u32,
    /// On gfx90a/gfx942 the unified total: arch VGPRs aligned to 4, plus AGPRs.
    #[serde(rename = ".vgpr_count")]
    pub vgpr_count: u32,
    #[serde(rename = ".max_flat_workgroup_size")]
    pub max_flat_workgroup_size: u32,
    /// Emitted for targets with AGPRs (gfx908, gfx90a, gfx94x).
    #[serde(rename = ".agpr_count", default)]
    pub agpr_count: Option<u32>,
    #[serde(rename = ".sgpr_spill_count", default)]
    pub sgpr_spill_count: Option<u32>,
    #[serde(rename = ".vgpr_spill_count", default)]
    pub vgpr_spill_count: Option<u32>,
    #[serde(rename = ".uses_dynamic_stack", default)]
    pub uses_dynamic_stack: Option<bool>,
    #[serde(rename = ".reqd_workgroup_size", default)]
    pub reqd_workgroup_size: Option<Vec<u32>>,
    #[serde(rename = ".workgroup_size_hint", default)]
    pub workgroup_size_hint: Option<Vec<u32>>,
    #[serde(rename = ".uniform_work_group_size", default)]
    pub uniform_work_group_size: Option<u32>,
    #[serde(rename = ".workgroup_processor_mode", default)]
    pub workgroup_processor_mode: Option<u32>,
    #[serde(rename = ".kind", default)]
    pub kind: Option<String>,
    #[serde(rename = ".language", default)]
    pub language: Option<String>,
    #[serde(rename = ".language_version", default)]
    pub language_version: Option<Vec<u32>>,
    #[serde(rename = ".vec_type_hint", default)]
    pub vec_type_hint: Option<String>,
    #[serde(rename = ".device_enqueue_symbol", default)]
    pub device_enqueue_symbol: Option<String>,
    #[serde(rename = ".max_num_workgroups_x", default)]
    pub max_num_workgroups_x: Option<u32>,
    #[serde(rename = ".max_num_workgroups_y", default)]
    pub max_num_workgroups_y: Option<u32>,
    #[serde(rename = ".max_num_workgroups_z", default)]
    pub max_num_workgroups_z: Option<u32>,
    #[serde(rename = ".args", default)]
    pub args: Vec<AmdKernelArg>,
}

/// One entry of a kernel's `.args`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AmdKernelArg {
    #[serde(rename = ".name", default)]
    pub name: Option<String>,
    #[serde(rename = ".type_name", default)]
    pub type_name: Option<String>,
    #[serde(rename = ".size")]
    pub size: u64,
    #[serde(rename = ".offset")]
    pub offset: u64,
    /// "by_value", "global_buffer", "hidden_block_count_x", ...
    #[serde(rename = ".value_kind")]
    pub value_kind: String,
    #[serde(rename = ".address_space", default)]
    pub address_space: Option<String>,
    #[serde(rename = ".access", default)]
    pub access: Option<String>,
    #[serde(rename = ".actual_access", default)]
    pub actual_access: Option<String>,
    #[serde(rename = ".pointee_align", default)]
    pub pointee_align: Option<u64>,
    #[serde(rename = ".is_const", default)]
    pub is_const: Option<bool>,
    #[serde(rename = ".is_restrict", default)]
    pub is_restrict: Option<bool>,
    #[serde(rename = ".is_volatile", default)]
    pub is_volatile: Option<bool>,
    #[serde(rename = ".is_pipe", default)]
    pub is_pipe: Option<bool>,
}

/// Deepest MessagePack nesting accepted. Real metadata nests 5 levels (map, kernels, kernel,
/// args, arg); rmp-serde's default of 1024 overflows a 2 MiB thread stack in debug builds.
const MAX_DEPTH: usize = 32;

/// Decodes the note body. Recursion is bounded by [`MAX_DEPTH`] and serde pre-allocates
/// cautiously, so a hostile note costs at most a small multiple of its own size.
pub(crate) fn decode(desc: &[u8]) -> Result<AmdMetadata, rmp_serde::decode::Error> {
    let mut de = rmp_serde::Deserializer::from_read_ref(desc);
    de.set_max_depth(MAX_DEPTH);
    AmdMetadata::deserialize(&mut de)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_messagepack_is_an_error() {
        // Deep nesting (fixarray of fixarray ...), inside an ignored key and at the top.
        let mut deep = vec![0x81, 0xa1, b'x'];
        deep.extend(std::iter::repeat_n(0x91u8, 200_000));
        assert!(decode(&deep).is_err());
        assert!(decode(&[0x91; 200_000]).is_err());
        // A map that declares 2^32-1 entries, an array of 2^32-1 kernels, a huge string.
        assert!(decode(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
        let mut kernels = vec![0x81, 0xae];
        kernels.extend(b"amdhsa.kernels");
        kernels.extend([0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert!(decode(&kernels).is_err());
        assert!(decode(&[0x81, 0xdb, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(decode(&[0x80]).unwrap(), AmdMetadata::default());
    }
}
