//! Cubin, PTX and fatbin readers against `cuobjdump` and `ptxas -v`.

use crate::common;

use common::*;
use kbuild_manifest::read::cubin::{read_cubin, CudaObject, SM90_RESERVED_SHARED_BYTES};
use kbuild_manifest::read::{parse_ptxas_log, walk, Format};

const CUBINS: &[&str] = &[
    "kern_sm89.cubin",
    "kern_sm90a.cubin",
    "spill_sm90.cubin",
    "kern_sm89_v1.cubin",
    "kern_sm90a_v1.cubin",
    "smem_res_sm_90.cubin",
    "smem_res_sm_120.cubin",
];

fn assert_matches_cuobjdump(what: &str, obj: &CudaObject, module: &CuobjdumpModule) {
    let mut names: Vec<&str> = module.functions.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    assert_eq!(obj.entries(), names, "{what}: kernels");
    for f in &module.functions {
        let k = obj.kernel(&f.name).unwrap();
        assert_eq!(u64::from(k.registers), f.reg, "{what} {}: REG", f.name);
        assert_eq!(u64::from(k.frame_size), f.stack, "{what} {}: STACK", f.name);
        assert_eq!(
            k.shared_bytes + k.reserved_shared_bytes,
            f.shared,
            "{what} {}: SHARED",
            f.name
        );
        assert_eq!(k.local_bytes, f.local, "{what} {}: LOCAL", f.name);
        assert_eq!(
            k.const0_bytes, f.constant0,
            "{what} {}: CONSTANT[0]",
            f.name
        );
    }
    assert_eq!(obj.global_bytes, module.global, "{what}: GLOBAL");
    assert_eq!(
        obj.const_banks, module.common_constants,
        "{what}: common CONSTANT[N]"
    );
}

#[test]
fn cubins_equal_cuobjdump() {
    for file in CUBINS {
        let obj = read_cubin(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let modules = parse_cuobjdump(&cuobjdump_resource_usage(file));
        assert_eq!(modules.len(), 1, "{file}");
        assert_matches_cuobjdump(file, &obj, &modules[0]);
    }
}

/// registers, barriers, smem, stack and cmem[0] equal what ptxas printed when it made the cubin;
/// the reservation itself is checked in `sm90_reservation_is_exactly_1kib`.
#[test]
fn cubins_equal_ptxas_log() {
    for file in CUBINS {
        let obj = read_cubin(&fixture(file)).unwrap();
        let log = fixture_text(&file.replace(".cubin", ".ptxas.log"));
        let reports = parse_ptxas_log(&log);
        let entries: Vec<_> = reports.iter().filter(|r| r.is_entry).collect();
        assert_eq!(entries.len(), obj.kernels.len(), "{file}");
        for r in entries {
            let k = obj
                .kernel(&r.function)
                .unwrap_or_else(|| panic!("{file}: {}", r.function));
            assert_eq!(
                r.target.as_deref(),
                Some(obj.target.as_str()),
                "{file} {}",
                k.name
            );
            assert_eq!(
                r.registers,
                Some(k.registers),
                "{file} {}: registers",
                k.name
            );
            assert_eq!(
                r.barriers.unwrap_or(0),
                k.barriers,
                "{file} {}: barriers",
                k.name
            );
            assert_eq!(r.smem_bytes, k.shared_bytes, "{file} {}: smem", k.name);
            assert_eq!(
                r.stack_frame,
                u64::from(k.frame_size),
                "{file} {}: stack frame",
                k.name
            );
            if let Some(c) = r.cmem0_bytes {
                assert_eq!(c, k.const0_bytes, "{file} {}: cmem[0]", k.name);
            }
        }
    }
    let spill = parse_ptxas_log(&fixture_text("spill_sm90.ptxas.log"));
    let s = spill.iter().find(|r| r.function == "cuda_spill").unwrap();
    assert!(s.spill_stores > 0 && s.spill_loads > 0, "cuda_spill spills");
}

/// On sm_90+ cuobjdump's SHARED is ptxas's smem plus exactly 1 KiB wherever the kernel has a
/// shared section (static, dynamic-only, mbarrier, cluster kernels; ABI V1 and V2; sm_90,
/// sm_90a, sm_120); before sm_90 there is no reservation.
#[test]
fn sm90_reservation_is_exactly_1kib() {
    let mut seen = 0;
    for file in CUBINS {
        let obj = read_cubin(&fixture(file)).unwrap();
        let reports = parse_ptxas_log(&fixture_text(&file.replace(".cubin", ".ptxas.log")));
        let module = &parse_cuobjdump(&cuobjdump_resource_usage(file))[0];
        for f in &module.functions {
            let ptxas = reports
                .iter()
                .find(|r| r.function == f.name && r.is_entry)
                .unwrap();
            let k = obj.kernel(&f.name).unwrap();
            let reservation = f.shared - ptxas.smem_bytes;
            assert_eq!(k.reserved_shared_bytes, reservation, "{file} {}", f.name);
            if obj.sm >= 90 && f.shared > 0 {
                assert_eq!(reservation, SM90_RESERVED_SHARED_BYTES, "{file} {}", f.name);
                seen += 1;
            } else {
                assert_eq!(reservation, 0, "{file} {}", f.name);
            }
        }
    }
    assert!(seen >= 15, "only {seen} kernels with a reservation checked");
}

#[test]
fn cubin_fields() {
    let a = read_cubin(&fixture("kern_sm90a.cubin")).unwrap();
    assert_eq!(
        (a.elf_abi, a.sm, a.arch_specific, a.target.as_str()),
        (2, 90, true, "sm_90a")
    );
    assert_eq!(a.toolkit_version, Some(135));
    let r = a.kernel("reduce_smem").unwrap();
    assert_eq!(
        (r.shared_bytes, r.reserved_shared_bytes, r.barriers),
        (4112, 1024, 1)
    );
    assert_eq!(r.max_threads, Some([256, 1, 1]));
    assert_eq!(a.kernel("reqd64").unwrap().max_threads, Some([64, 1, 1]));
    assert_eq!(a.kernel("vadd").unwrap().param_bytes, Some(28));
    let v1 = read_cubin(&fixture("kern_sm90a_v1.cubin")).unwrap();
    assert_eq!(
        (v1.elf_abi, v1.sm, v1.arch_specific, v1.virtual_sm),
        (1, 90, true, Some(90))
    );
    let s = read_cubin(&fixture("spill_sm90.cubin")).unwrap();
    let k = s.kernel("cuda_spill").unwrap();
    assert_eq!((k.registers, k.maxreg_count), (64, Some(64)));
    assert_eq!(k.max_threads, Some([1024, 1, 1]));
    assert_eq!(s.kernel("big_smem").unwrap().shared_bytes, 32768);
    assert_eq!(s.const_banks, vec![(3, 256)]);
    let r = read_cubin(&fixture("smem_res_sm_90.cubin")).unwrap();
    let c = r.kernel("clustered").unwrap();
    assert_eq!(c.cluster_dims, Some([2, 1, 1]));
    assert_eq!(r.kernel("mbar").unwrap().mbarriers, 1);
    let b = read_cubin(&fixture("smem_res_sm_120.cubin")).unwrap();
    assert_eq!((b.elf_abi, b.sm, b.target.as_str()), (2, 120, "sm_120"));
}

/// Fatbin entry flags carry 'a' and 'f'.
#[test]
fn fatbin_arch_and_family_suffixes() {
    let data = fixture("smem_res_af.fatbin");
    let entries = kbuild_manifest::read::fatbin::read_fatbin(&data).unwrap();
    let targets: Vec<String> = entries.iter().map(|e| e.target()).collect();
    assert_eq!(targets, ["sm_90a", "compute_90a", "sm_100f"]);
    let members = walk(&data).unwrap();
    assert_eq!(read_cubin(&members[0].data).unwrap().target, "sm_90a");
    // A standalone cubin does not record 'f': the reader says sm_100.
    assert_eq!(read_cubin(&members[2].data).unwrap().target, "sm_100");
    assert_eq!(
        kbuild_manifest::read::ptx::read_ptx(&members[1].data)
            .unwrap()
            .target,
        "sm_90a"
    );
}

/// Each cubin member of a fatbin or host library equals cuobjdump's block for its arch, and
/// the decompressed bytes equal what `cuobjdump -xelf/-xptx` extracts.
#[test]
fn fatbin_members_equal_cuobjdump() {
    for file in [
        "kern_multi.fatbin",
        "kern_sm80_lz4.fatbin",
        "kern_sm80_plain.fatbin",
        "libhost_nv.so",
    ] {
        let data = fixture(file);
        let members = walk(&data).unwrap_or_else(|e| panic!("{file}: {e}"));
        let modules = parse_cuobjdump(&cuobjdump_resource_usage(file));
        let cubins: Vec<_> = members
            .iter()
            .filter(|m| m.format == Some(Format::Cubin))
            .collect();
        assert_eq!(cubins.len(), modules.len(), "{file}: ELF members");
        for (m, module) in cubins.iter().zip(&modules) {
            let obj = read_cubin(&m.data).unwrap_or_else(|e| panic!("{file} {}: {e}", m.path));
            assert_eq!(
                module.arch.as_deref(),
                Some(obj.target.as_str()),
                "{file} {}",
                m.path
            );
            assert_eq!(
                m.container_target.as_deref(),
                Some(obj.target.as_str()),
                "{file} {}",
                m.path
            );
            assert_matches_cuobjdump(&format!("{file} {}", m.path), &obj, module);
        }
        let listing = cuobjdump_args(&["-lelf", "-lptx", fixture_path(file).to_str().unwrap()]);
        let ptx_listed = listing
            .lines()
            .filter(|l| l.starts_with("PTX file"))
            .count();
        let ptx_members = members
            .iter()
            .filter(|m| m.format == Some(Format::Ptx))
            .count();
        assert_eq!(ptx_members, ptx_listed, "{file}: PTX members");
        extracted_bytes_equal(file, &members);
    }
}

fn extracted_bytes_equal(file: &str, members: &[kbuild_manifest::read::Member<'_>]) {
    let dir = std::env::temp_dir().join(format!("kbuild-xelf-{}-{}", std::process::id(), file));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(cuobjdump())
        .args([
            "-xelf",
            "all",
            "-xptx",
            "all",
            fixture_path(file).to_str().unwrap(),
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cuobjdump -xelf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut extracted: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(extracted.len(), members.len(), "{file}: extracted files");
    for m in members {
        // cuobjdump writes PTX without the fatbin's trailing NUL padding.
        let ours: &[u8] = if m.format == Some(Format::Ptx) {
            let end = m.data.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            &m.data[..end]
        } else {
            &m.data
        };
        let pos = extracted.iter().position(|x| x.as_slice() == ours);
        assert!(
            pos.is_some(),
            "{file} {}: no extracted file has the same bytes",
            m.path
        );
        extracted.remove(pos.unwrap());
    }
}

#[test]
fn walk_paths_and_targets() {
    let data = fixture("kern_multi.fatbin");
    let m = walk(&data).unwrap();
    let paths: Vec<_> = m.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["sm_80.cubin", "sm_90.cubin", "compute_90.ptx"]);
    let so = fixture("libhost_nv.so");
    let m = walk(&so).unwrap();
    let paths: Vec<_> = m.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(
        paths,
        [".nv_fatbin#sm_89.cubin", ".nv_fatbin#compute_90.ptx"]
    );
    let ptx = kbuild_manifest::read::ptx::read_ptx(&m[1].data).unwrap();
    assert_eq!(
        (ptx.version.as_str(), ptx.target.as_str()),
        ("9.5", "sm_90")
    );
    assert_eq!(ptx.entries, ["vadd"]);
    // LZ4 and plain fatbins of the same build hold the same bytes.
    let lz4 = fixture("kern_sm80_lz4.fatbin");
    let plain = fixture("kern_sm80_plain.fatbin");
    let (a, b) = (walk(&lz4).unwrap(), walk(&plain).unwrap());
    assert_eq!(a.len(), 2);
    assert_eq!(
        a[0].compression,
        kbuild_manifest::read::fatbin::Compression::Lz4
    );
    assert_eq!(
        b[0].compression,
        kbuild_manifest::read::fatbin::Compression::None
    );
    assert_eq!(a[0].data, b[0].data);
}
