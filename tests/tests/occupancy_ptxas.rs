//! The CUDA occupancy table against ptxas: for every compute capability of the table, ptxas
//! accepts `__launch_bounds__(T, B)` while B blocks of T threads fit on one SM and ignores B
//! as "out of range" past the resident-thread or resident-block ceiling. So the table's warps
//! per SM and blocks per SM are checked by the vendor tool, one row at a time: the largest
//! fitting B for 256-thread blocks is warps/8 and for 32-thread blocks the block cap.

use std::path::PathBuf;
use std::process::Command;

use kbuild_manifest::occupancy::cuda_limits;
use kbuild_manifest::target::{CudaSuffix, ProcessorKind, PROCESSORS};

fn nvcc() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    let p = PathBuf::from(home)
        .join(".local/share/kbuild/toolchains/cuda-13.5.37/nvidia/cu13/bin/nvcc");
    assert!(
        p.is_file(),
        "{} missing: run `cargo run -p kbuild -- toolchain install cuda`",
        p.display()
    );
    p
}

/// Kernels `k_T_B` at each (threads, min blocks) pair.
fn source(pairs: &[(u32, u32)]) -> String {
    let mut s = String::new();
    for (t, b) in pairs {
        s += &format!(
            "extern \"C\" __global__ void __launch_bounds__({t}, {b}) k_{t}_{b}(float* o) \
             {{ o[threadIdx.x] = 1.0f; }}\n"
        );
    }
    s
}

/// The kernels ptxas ignored the minimum block count of, by name.
fn out_of_range(arch: &str, pairs: &[(u32, u32)], dir: &std::path::Path) -> Vec<String> {
    let src = dir.join(format!("{arch}.cu"));
    std::fs::write(&src, source(pairs)).expect("write source");
    let o = Command::new(nvcc())
        .arg(format!("-arch={arch}"))
        .args(["-cubin", "-Xptxas", "-v", "-o"])
        .arg(dir.join(format!("{arch}.cubin")))
        .arg(&src)
        .output()
        .expect("nvcc");
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "nvcc -arch={arch}: {log}");
    let mut names: Vec<String> = log
        .lines()
        .filter(|l| l.contains("out of range"))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("k_")))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

#[test]
fn ptxas_confirms_the_warps_and_blocks_per_sm_of_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<_> = PROCESSORS
        .iter()
        .filter(|p| {
            matches!(
                p.kind,
                ProcessorKind::Cuda {
                    suffix: CudaSuffix::Plain,
                    ..
                }
            )
        })
        .map(|p| (p.name, cuda_limits(p).expect("every CUDA row has limits")))
        .collect();
    assert!(rows.iter().any(|(n, _)| *n == "sm_110"));
    std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .iter()
            .map(|(name, l)| {
                let dir = dir.path();
                scope.spawn(move || {
                    let warps_blocks = l.warps_per_sm / 8;
                    let pairs = [
                        (256, warps_blocks),
                        (256, warps_blocks + 1),
                        (32, l.blocks_per_sm),
                        (32, l.blocks_per_sm + 1),
                    ];
                    let mut want = vec![
                        format!("k_256_{}", warps_blocks + 1),
                        format!("k_32_{}", l.blocks_per_sm + 1),
                    ];
                    want.sort();
                    (name, out_of_range(name, &pairs, dir), want)
                })
            })
            .collect();
        for h in handles {
            let (name, got, want) = h.join().expect("probe thread");
            assert_eq!(
                got, want,
                "{name}: ptxas rejected other minimum block counts than the table implies"
            );
        }
    });
}
