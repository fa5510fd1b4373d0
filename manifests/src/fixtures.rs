//! Manifests for tests, in one place (always compiled, hidden from the docs): every crate's
//! tests build their sample manifests from these instead of spelling out a whole [`Manifest`]
//! again.

use std::collections::BTreeMap;

use crate::manifest::{Manifest, ObjectRecord, PackageInfo, Provenance, SCHEMA};
use crate::target::{Feature, ProcessorKind, Target, PROCESSORS};

/// A manifest of `objects`: kernels in first-seen order, targets as the objects list them.
pub fn manifest(name: &str, version: &str, objects: Vec<ObjectRecord>) -> Manifest {
    let mut kernels: Vec<String> = Vec::new();
    let mut targets: Vec<String> = Vec::new();
    for o in &objects {
        if !kernels.contains(&o.kernel) {
            kernels.push(o.kernel.clone());
        }
        if !targets.contains(&o.target) {
            targets.push(o.target.clone());
        }
    }
    Manifest {
        schema: SCHEMA.into(),
        package: PackageInfo {
            name: name.into(),
            version: version.into(),
        },
        provenance: Provenance {
            git_commit: None,
            git_dirty: None,
            toolchains: vec![],
            flags: BTreeMap::new(),
            host: "linux-x86_64".into(),
        },
        targets,
        kernels,
        objects,
        containers: vec![],
        failed: vec![],
        missing: vec![],
        restricted: Default::default(),
        partial: false,
        shard: None,
    }
}

/// An object record of `kernel` for `target` whose file is `bytes` (digests and size from
/// them), exporting `entries`, with no resource records.
pub fn object(kernel: &str, target: &str, format: &str, bytes: &[u8]) -> ObjectRecord {
    ObjectRecord {
        kernel: kernel.into(),
        variant: None,
        defines: BTreeMap::new(),
        target: target.into(),
        path: format!("{target}/{kernel}.{format}"),
        sha256: kbuild_base::digest::sha256_hex(bytes),
        blake3: Some(kbuild_base::digest::blake3_hex(bytes)),
        size: bytes.len() as u64,
        format: format.into(),
        entries: vec![kernel.into()],
        demangled: Default::default(),
        params: Default::default(),
        resources: BTreeMap::new(),
        cache_key: "k".into(),
        compile_args: Vec::new(),
        triton: None,
    }
}

/// The parts of a bundle of package `pkg` 1.2.3: a manifest with `targets`, one object of
/// kernel `k` per target whose bytes are the target name repeated, and those objects by sha256.
pub fn bundle_parts(targets: &[&str]) -> (Vec<u8>, BTreeMap<String, Vec<u8>>) {
    let mut objects = BTreeMap::new();
    let mut records = Vec::new();
    for t in targets {
        let data = t.repeat(100).into_bytes();
        let mut o = object("k", t, "cubin", &data);
        o.path = format!("{t}/k.cubin");
        objects.insert(o.sha256.clone(), data);
        records.push(o);
    }
    let m = manifest("pkg", "1.2.3", records);
    (m.to_json().into_bytes(), objects)
}

/// Every catalogue target with every xnack/sramecc setting it takes, and PTX for CUDA.
pub fn every_target() -> Vec<Target> {
    let mut out = Vec::new();
    for p in PROCESSORS {
        let base = Target {
            processor: p,
            ptx: false,
            xnack: Feature::Any,
            sramecc: Feature::Any,
        };
        out.push(base);
        match p.kind {
            ProcessorKind::Cuda { .. } => out.push(Target { ptx: true, ..base }),
            ProcessorKind::Amd {
                xnack: true,
                sramecc: true,
                ..
            } => {
                for x in [Feature::Any, Feature::On, Feature::Off] {
                    for s in [Feature::Any, Feature::On, Feature::Off] {
                        out.push(Target {
                            xnack: x,
                            sramecc: s,
                            ..base
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A caller's parameter without type or name.
pub fn param(
    index: u32,
    offset: u64,
    size: u64,
    kind: crate::params::ParamKind,
) -> crate::params::Param {
    crate::params::Param {
        index,
        offset,
        size,
        align: None,
        kind,
        name: None,
        type_name: None,
        hidden: false,
    }
}

/// The caller's parameters of `k(const float* x, int n)` with their C++ types and names: a
/// pointer at 0 and an `int` at 8.
pub fn params_x_n() -> Vec<crate::params::Param> {
    use crate::params::{Param, ParamKind};
    let p = |index, offset, size, kind, ty: &str, name: &str| Param {
        index,
        offset,
        size,
        align: None,
        kind,
        name: Some(name.into()),
        type_name: Some(ty.into()),
        hidden: false,
    };
    vec![
        p(0, 0, 8, ParamKind::Pointer, "const float*", "x"),
        p(1, 8, 4, ParamKind::Value, "int", "n"),
    ]
}

/// A Triton launch record of `function` (4 warps of 32, 3 stages, `shared` dynamic bytes, no
/// scratch) with `params` as (name, Triton type, divisible by 16), the two scratch pointers
/// appended.
pub fn triton_launch(
    function: &str,
    shared: u64,
    params: &[(&str, &str, bool)],
) -> crate::triton::TritonLaunch {
    use crate::triton::TritonParam;
    let param = |name: &str, ty: &str, divisible_16: bool| TritonParam {
        name: name.into(),
        ty: ty.into(),
        divisible_16,
    };
    let mut all: Vec<TritonParam> = params.iter().map(|(n, t, d)| param(n, t, *d)).collect();
    all.push(param("global_scratch", "scratch", false));
    all.push(param("profile_scratch", "scratch", false));
    crate::triton::TritonLaunch {
        function: function.into(),
        triton_version: "3.6.0".into(),
        num_warps: 4,
        warp_size: 32,
        num_ctas: 1,
        num_stages: 3,
        shared,
        global_scratch_size: 0,
        global_scratch_align: 1,
        profile_scratch_size: 0,
        profile_scratch_align: 1,
        cooperative: false,
        pdl: false,
        tmem_size: 0,
        params: all,
        removed: vec![],
        constexprs: Default::default(),
    }
}
