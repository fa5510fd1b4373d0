//! A Triton kernel's section of Kbuild.toml (`language = "triton"`): the `@triton.jit`
//! function, its signature, constexprs, launch options and what its module needs at import.
//! Checked here as far as Kbuild.toml can tell; the compile worker checks the rest against
//! the function itself (an argument the function lacks, a type Triton does not know).

use std::collections::BTreeMap;

use kbuild_manifest::target::{CudaSuffix, ProcessorKind, Target, Vendor, Version};

/// The Triton kbuild installs and builds with (the version the GPU machines run, so objects
/// built here equal what their JIT builds).
pub const TRITON_VERSION: &str = "3.6.0";

/// The CUDA releases of the two ptxas [`TRITON_VERSION`] carries: `ptxas` for targets below
/// sm_100, `ptxas-blackwell` from sm_100 up. A target newer than its ptxas (sm_110a needs CUDA
/// 13.0) is refused before a compile; a test checks these against the installed wheel.
pub const TRITON_PTXAS: Version = Version(12, 8);
pub const TRITON_PTXAS_BLACKWELL: Version = Version(12, 9);
use serde::Deserialize;
use serde_json::{json, Value};

/// The Triton keys of a `[kernels.NAME]` table, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct RawTriton {
    pub(super) function: Option<String>,
    pub(super) signature: Option<BTreeMap<String, String>>,
    pub(super) constexprs: Option<BTreeMap<String, toml::Value>>,
    pub(super) divisible_16: Option<Vec<String>>,
    pub(super) equal_to_1: Option<Vec<String>>,
    pub(super) num_warps: Option<u32>,
    pub(super) num_stages: Option<u32>,
    pub(super) num_ctas: Option<u32>,
    pub(super) maxnreg: Option<u32>,
    pub(super) import: Option<toml::Table>,
    pub(super) autotune: Option<bool>,
    pub(super) heuristics: Option<bool>,
    pub(super) launch_cooperative_grid: Option<bool>,
    pub(super) launch_pdl: Option<bool>,
}

/// A Triton kernel's compile description, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TritonKernel {
    /// The `@triton.jit` function (through `@triton.heuristics` / `@triton.autotune`).
    pub function: String,
    /// Argument → Triton type (`*fp32`, `i32`, `fp32`, …), or `None` for an argument passed
    /// as `None` (it leaves the parameter list).
    pub signature: BTreeMap<String, Option<String>>,
    /// Constexpr → its value as JSON text (`128`, `true`, `"ieee"`).
    pub constexprs: BTreeMap<String, String>,
    /// Pointer and int arguments the code may assume divisible by 16 (checked at launch).
    pub divisible_16: Vec<String>,
    /// Int arguments compiled in as 1 (Triton's specialization of an int equal to 1): they
    /// leave the parameter list, and a launch passes them no more.
    pub equal_to_1: Vec<String>,
    pub num_warps: u32,
    pub num_stages: u32,
    pub num_ctas: u32,
    pub maxnreg: Option<u32>,
    /// What the module needs at import on a machine without a GPU (JSON text of the
    /// `[kernels.NAME.import]` table; the worker reads it: docs/triton.md).
    pub import: String,
    /// `autotune = true`: the variants are the function's `@triton.autotune` config list,
    /// read by a worker when a build plans its jobs (`crate::triton::autotune`).
    pub autotune: bool,
    /// `heuristics = true`: the constexprs the `@triton.heuristics` wrappers compute are
    /// filled by the worker (one given here must equal what they compute).
    pub heuristics: bool,
    /// `launch-cooperative-grid = true`: compiled for, and launched as, a cooperative grid
    /// (every program resident at once).
    pub cooperative: bool,
    /// `launch-pdl = true` (NVIDIA): launched as a programmatic dependent launch.
    pub pdl: bool,
}

/// The variant axes that set a launch option rather than a constexpr (an autotune config's
/// `num_warps=`, `num_stages=`, `num_ctas=`, `maxnreg=`).
pub const LAUNCH_AXES: &[&str] = &["num_warps", "num_stages", "num_ctas", "maxnreg"];

/// The Triton types a signature may name: pointers to them (`*T`), or scalars.
const SCALARS: &[&str] = &[
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp8e4nv", "fp8e5",
    "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64",
];

impl RawTriton {
    /// The keys given, for a kernel that is not Triton (each is an error there).
    pub(super) fn given(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut has = |set: bool, key: &'static str| {
            if set {
                keys.push(key)
            }
        };
        has(self.function.is_some(), "function");
        has(self.signature.is_some(), "signature");
        has(self.constexprs.is_some(), "constexprs");
        has(self.divisible_16.is_some(), "divisible-16");
        has(self.equal_to_1.is_some(), "equal-to-1");
        has(self.num_warps.is_some(), "num-warps");
        has(self.num_stages.is_some(), "num-stages");
        has(self.num_ctas.is_some(), "num-ctas");
        has(self.maxnreg.is_some(), "maxnreg");
        has(self.import.is_some(), "import");
        has(self.autotune.is_some(), "autotune");
        has(self.heuristics.is_some(), "heuristics");
        has(
            self.launch_cooperative_grid.is_some(),
            "launch-cooperative-grid",
        );
        has(self.launch_pdl.is_some(), "launch-pdl");
        keys
    }

    /// The validated description; every problem, each a message naming its key.
    pub(super) fn validate(&self, variant_axes: &[&String]) -> Result<TritonKernel, Vec<String>> {
        let mut problems = Vec::new();
        let function = match &self.function {
            Some(f) if is_python_identifier(f) => f.clone(),
            Some(f) => {
                problems.push(format!("function `{f}` is not a Python identifier"));
                String::new()
            }
            None => {
                problems.push("`function` (the @triton.jit function's name) is missing".into());
                String::new()
            }
        };
        let mut signature = BTreeMap::new();
        match &self.signature {
            None => problems.push(
                "`signature` (each non-constexpr argument's Triton type, e.g. { x_ptr = \"*fp32\", n = \"i32\" }) is missing"
                    .into(),
            ),
            Some(s) => {
                for (arg, ty) in s {
                    if !is_python_identifier(arg) {
                        problems.push(format!("signature: `{arg}` is not a Python identifier"));
                    }
                    let scalar = ty.strip_prefix('*').unwrap_or(ty);
                    let ty = match ty.as_str() {
                        "None" => None,
                        _ if SCALARS.contains(&scalar) => Some(ty.clone()),
                        _ => {
                            problems.push(format!(
                                "signature: `{arg}` has type `{ty}`; expected one of {} (a pointer is `*TYPE`), or \"None\" for an argument passed as None",
                                SCALARS.join(", ")
                            ));
                            continue;
                        }
                    };
                    signature.insert(arg.clone(), ty);
                }
            }
        }
        let mut constexprs = BTreeMap::new();
        for (name, value) in self.constexprs.iter().flatten() {
            if !is_python_identifier(name) {
                problems.push(format!("constexprs: `{name}` is not a Python identifier"));
            } else if signature.contains_key(name) {
                problems.push(format!("`{name}` is in both `signature` and `constexprs`"));
            }
            match constexpr_json(value) {
                Some(json) => {
                    constexprs.insert(name.clone(), json);
                }
                None => problems.push(format!(
                    "constexprs: `{name}` must be an integer, float, bool or string"
                )),
            }
        }
        let autotune = self.autotune.unwrap_or(false);
        if autotune && !variant_axes.is_empty() {
            // Two sources of one variant set: which would win is no clean rule.
            problems.push(
                "`autotune = true` and a `variants` table: the autotune config list is the variant set; remove one of them"
                    .into(),
            );
        }
        if autotune {
            let given: Vec<&str> = [
                (self.num_warps.is_some(), "num-warps"),
                (self.num_stages.is_some(), "num-stages"),
                (self.num_ctas.is_some(), "num-ctas"),
                (self.maxnreg.is_some(), "maxnreg"),
            ]
            .into_iter()
            .filter_map(|(set, key)| set.then_some(key))
            .collect();
            if !given.is_empty() {
                problems.push(format!(
                    "`autotune = true` and {}: each autotune config sets its own launch options",
                    given.join(", ")
                ));
            }
        }
        for axis in variant_axes {
            if LAUNCH_AXES.contains(&axis.as_str()) {
                // Launch options as axes: an autotune config list written as a matrix.
                continue;
            }
            if signature.contains_key(*axis) {
                problems.push(format!(
                    "variant axis `{axis}` is a signature argument; a variant sets constexprs"
                ));
            }
        }
        let divisible_16 = self.divisible_16.clone().unwrap_or_default();
        for arg in &divisible_16 {
            match signature.get(arg) {
                Some(Some(ty))
                    if ty.starts_with('*') || ty.starts_with('i') || ty.starts_with('u') => {}
                Some(_) => problems.push(format!(
                    "divisible-16: `{arg}` is not a pointer or integer argument"
                )),
                None => problems.push(format!("divisible-16: `{arg}` is not in `signature`")),
            }
        }
        let equal_to_1 = self.equal_to_1.clone().unwrap_or_default();
        for arg in &equal_to_1 {
            match signature.get(arg) {
                Some(Some(ty)) if ty.starts_with('i') || ty.starts_with('u') => {
                    if divisible_16.contains(arg) {
                        problems.push(format!(
                            "`{arg}` is in both `equal-to-1` and `divisible-16`"
                        ));
                    }
                }
                Some(_) => problems.push(format!("equal-to-1: `{arg}` is not an integer argument")),
                None => problems.push(format!("equal-to-1: `{arg}` is not in `signature`")),
            }
        }
        let power_of_two = |key: &str, n: u32, max: u32, problems: &mut Vec<String>| {
            if !n.is_power_of_two() || n > max {
                problems.push(format!("{key} = {n}: a power of two up to {max}"));
            }
            n
        };
        let num_warps = power_of_two("num-warps", self.num_warps.unwrap_or(4), 32, &mut problems);
        let num_ctas = power_of_two("num-ctas", self.num_ctas.unwrap_or(1), 16, &mut problems);
        let num_stages = self.num_stages.unwrap_or(3);
        if num_stages > 16 {
            problems.push(format!("num-stages = {num_stages}: at most 16"));
        }
        if let Some(n) = self.maxnreg {
            if !(16..=255).contains(&n) {
                problems.push(format!("maxnreg = {n}: 16..=255"));
            }
        }
        let import = match &self.import {
            Some(t) => serde_json::to_string(t).unwrap_or_default(),
            None => "{}".to_string(),
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(TritonKernel {
            function,
            signature,
            constexprs,
            divisible_16,
            equal_to_1,
            num_warps,
            num_stages,
            num_ctas,
            maxnreg: self.maxnreg,
            import,
            autotune,
            heuristics: self.heuristics.unwrap_or(false),
            cooperative: self.launch_cooperative_grid.unwrap_or(false),
            pdl: self.launch_pdl.unwrap_or(false),
        })
    }
}

/// A constexpr's value as JSON text; `None` for arrays, tables and dates.
pub(super) fn constexpr_json(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::Integer(_)
        | toml::Value::Float(_)
        | toml::Value::Boolean(_)
        | toml::Value::String(_) => serde_json::to_string(value).ok(),
        _ => None,
    }
}

/// Why Triton cannot build a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotForTriton {
    #[error("Triton ships SASS only, no PTX target")]
    Ptx,
    #[error("Triton writes only arch-specific cubins from sm_90 up: list {processor}a")]
    PlainFromSm90 { processor: String },
    #[error(
        "{processor} needs ptxas from CUDA {needs} or later; Triton {triton} compiles it with its own ptxas of CUDA {ptxas}"
    )]
    PtxasTooOld {
        processor: String,
        needs: Version,
        triton: &'static str,
        ptxas: Version,
    },
    #[error("Triton writes no family-specific cubin")]
    FamilySpecific,
    #[error("Triton's hsaco takes any xnack/sramecc mode; list the plain processor")]
    AmdFeatureSetting,
    #[error("Triton builds no generic AMD processor")]
    GenericAmd,
}

/// The `target` a worker compiles for, or why Triton cannot build `target`: NVIDIA SASS
/// below sm_90 or the arch-specific `sm_XXa` from sm_90 up (the only cubins Triton writes
/// there), AMD concrete processors with no feature setting (Triton's hsaco is xnack/sramecc
/// any).
pub fn triton_arch(target: &Target) -> Result<Value, NotForTriton> {
    let p = target.processor;
    match (p.kind, target.vendor()) {
        (ProcessorKind::Cuda { .. }, _) if target.ptx => Err(NotForTriton::Ptx),
        (ProcessorKind::Cuda { suffix, .. }, Vendor::Nvidia) => {
            let sm = p.sm().unwrap_or(0);
            match (sm >= 90, suffix) {
                (false, CudaSuffix::Plain) | (true, CudaSuffix::ArchSpecific) => {
                    let ptxas = if sm >= 100 {
                        TRITON_PTXAS_BLACKWELL
                    } else {
                        TRITON_PTXAS
                    };
                    if p.min_toolchain > ptxas {
                        return Err(NotForTriton::PtxasTooOld {
                            processor: p.name.to_string(),
                            needs: p.min_toolchain,
                            triton: TRITON_VERSION,
                            ptxas,
                        });
                    }
                    Ok(json!({"backend": "cuda", "arch": sm, "warp_size": 32}))
                }
                (true, CudaSuffix::Plain) => Err(NotForTriton::PlainFromSm90 {
                    processor: p.name.to_string(),
                }),
                _ => Err(NotForTriton::FamilySpecific),
            }
        }
        (ProcessorKind::Amd { .. }, _) if target.is_plain() => Ok(json!({
            "backend": "hip", "arch": p.name, "warp_size": target.wave_size()
        })),
        (ProcessorKind::Amd { .. }, _) => Err(NotForTriton::AmdFeatureSetting),
        _ => Err(NotForTriton::GenericAmd),
    }
}

fn is_python_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawTriton {
        toml::from_str(text).expect("test TOML")
    }

    #[test]
    fn a_full_section_validates() {
        let t = raw(r#"
            function = "add_kernel"
            signature = { x_ptr = "*fp32", n = "i32", gk = "None", scale = "fp32", stride = "i64" }
            constexprs = { BLOCK = 1024, USE_G = true, PREC = "ieee" }
            divisible-16 = ["x_ptr", "n"]
            equal-to-1 = ["stride"]
            num-warps = 8
        "#)
        .validate(&[])
        .expect("valid");
        assert_eq!(t.equal_to_1, ["stride"]);
        assert_eq!(t.function, "add_kernel");
        assert_eq!(t.signature["gk"], None);
        assert_eq!(t.signature["x_ptr"].as_deref(), Some("*fp32"));
        assert_eq!(t.constexprs["BLOCK"], "1024");
        assert_eq!(t.constexprs["USE_G"], "true");
        assert_eq!(t.constexprs["PREC"], "\"ieee\"");
        assert_eq!((t.num_warps, t.num_stages, t.num_ctas), (8, 3, 1));
        assert_eq!(t.import, "{}");
    }

    #[test]
    fn every_problem_is_named() {
        let problems = raw(r#"
            function = "1bad"
            signature = { x = "*float", n = "f32", y = "i32", m = "i32", p = "*fp16" }
            constexprs = { y = 1, L = [1, 2] }
            divisible-16 = ["z", "x", "m"]
            equal-to-1 = ["m", "p", "q"]
            num-warps = 3
            maxnreg = 300
        "#)
        .validate(&[&"n".to_string()])
        .expect_err("invalid");
        let text = problems.join("\n");
        for needle in [
            "function `1bad`",
            "`x` has type `*float`",
            "`n` has type `f32`",
            "`y` is in both",
            "constexprs: `L` must be",
            "divisible-16: `z` is not in `signature`",
            "`m` is in both `equal-to-1` and `divisible-16`",
            "equal-to-1: `p` is not an integer argument",
            "equal-to-1: `q` is not in `signature`",
            "num-warps = 3",
            "maxnreg = 300",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
        let both = raw(r#"
            function = "k"
            signature = { x = "*fp32" }
            autotune = true
            num-warps = 4
            maxnreg = 64
        "#)
        .validate(&[&"BV".to_string()])
        .expect_err("autotune with a matrix and launch options")
        .join("\n");
        assert!(
            both.contains("`autotune = true` and a `variants` table"),
            "{both}"
        );
        assert!(
            both.contains("`autotune = true` and num-warps, maxnreg"),
            "{both}"
        );
        let missing = raw("").validate(&[]).expect_err("nothing given");
        assert!(
            missing.iter().any(|p| p.contains("`function`")),
            "{missing:?}"
        );
        assert!(
            missing.iter().any(|p| p.contains("`signature`")),
            "{missing:?}"
        );
    }
}
