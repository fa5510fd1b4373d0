//! `cuda_occupancy` against the CUDA runtime on a real GPU.
//!
//! `tests/device/occupancy_sm90.cu`, run on an H200, prints one JSON line per (kernel, block
//! size, dynamic shared memory) with `cudaOccupancyMaxActiveBlocksPerMultiprocessor` × warps
//! per block and the kernel's `cudaFuncGetAttributes`; its first line holds the device
//! properties. The model must give the same warps/SM for every line, and its table row the
//! same properties. `docs/occupancy-sm90.jsonl` is such a recording (checked on every
//! `cargo test`); `scripts/device/occupancy-sm90.sh` makes a new one and compares it via
//! the ignored test and `KBUILD_OCC_SM90_JSON`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_manifest::occupancy::{cuda_limits, cuda_occupancy, CudaUsage};
use kbuild_manifest::target::processor;
use serde_json::Value;

fn num(v: &Value, key: &str, line: usize) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("line {line}: no unsigned `{key}` in {v}"))
}

fn int(v: &Value, key: &str, line: usize) -> i64 {
    v.get(key)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("line {line}: no integer `{key}` in {v}"))
}

fn u32_of(v: &Value, key: &str, line: usize) -> u32 {
    u32::try_from(num(v, key, line)).unwrap_or_else(|_| panic!("line {line}: `{key}` too big"))
}

fn compare(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (make it with scripts/device/occupancy-sm90.sh)",
            path.display()
        )
    });
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).enumerate();
    let (_, head) = lines.next().expect("empty recording");
    let dev: Value = serde_json::from_str(head).expect("device line is JSON");
    let sm = format!("sm_{}{}", num(&dev, "major", 1), num(&dev, "minor", 1));
    let p = processor(&sm).unwrap_or_else(|| panic!("{sm} is not in the catalogue"));
    let l = cuda_limits(p).expect("a CUDA row");

    // The table row equals what the device reports.
    let props = [
        (
            "max_threads_per_sm",
            u64::from(l.warps_per_sm) * 32,
            num(&dev, "max_threads_per_sm", 1),
        ),
        (
            "max_blocks_per_sm",
            u64::from(l.blocks_per_sm),
            num(&dev, "max_blocks_per_sm", 1),
        ),
        (
            "shared_per_sm",
            u64::from(l.shared_per_sm),
            num(&dev, "shared_per_sm", 1),
        ),
        (
            "shared_per_block_optin",
            u64::from(l.shared_per_block_optin),
            num(&dev, "shared_per_block_optin", 1),
        ),
        (
            "reserved_shared_per_block",
            u64::from(l.reserved_shared_per_block),
            num(&dev, "reserved_shared_per_block", 1),
        ),
        ("regs_per_sm", 65536, num(&dev, "regs_per_sm", 1)),
        ("regs_per_block", 65536, num(&dev, "regs_per_block", 1)),
    ];
    let mut failures: Vec<String> = props
        .iter()
        .filter(|(_, ours, theirs)| ours != theirs)
        .map(|(k, ours, theirs)| format!("{sm} {k}: table {ours}, device {theirs}"))
        .collect();

    let mut cases = 0;
    let mut refused = 0;
    let mut limiters: BTreeMap<String, usize> = BTreeMap::new();
    let mut kernels: BTreeMap<String, (u32, u32, u32)> = BTreeMap::new();
    for (i, line) in lines {
        let n = i + 1;
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("line {n}: {e}"));
        let kernel = v["kernel"].as_str().unwrap_or_default().to_string();
        let u = CudaUsage {
            registers: u32_of(&v, "num_regs", n),
            static_shared: u32_of(&v, "shared_size_bytes", n),
            dynamic_shared: u32_of(&v, "dynamic_shared", n),
            block_size: u32_of(&v, "block", n),
            barriers: u32_of(&v, "barriers", n),
        };
        // cudaFuncGetAttributes reports ptxas's static figure, without the reservation.
        if u64::from(u.static_shared) != num(&v, "static_declared", n) {
            failures.push(format!(
                "line {n} {kernel}: sharedSizeBytes {} != declared {}",
                u.static_shared,
                num(&v, "static_declared", n)
            ));
        }
        let o = cuda_occupancy(p, &u).expect("CUDA model");
        // A refused query (an error) is a launch that cannot run: the model must say 0.
        let device = if int(&v, "err", n) == 0 {
            int(&v, "warps", n)
        } else {
            refused += 1;
            0
        };
        if i64::from(o.value) != device {
            failures.push(format!(
                "line {n} {kernel} block {} dynamic {}: device {device} warps/SM, model {} ({}) from {u:?}",
                u.block_size, u.dynamic_shared, o.value, o.limiter
            ));
        }
        *limiters.entry(o.limiter).or_default() += 1;
        kernels.insert(kernel, (u.registers, u.static_shared, u.barriers));
        cases += 1;
    }
    println!(
        "{}: {} ({sm}, driver {}, runtime {})",
        path.display(),
        dev["device"].as_str().unwrap_or("?"),
        dev["driver"],
        dev["runtime"]
    );
    println!(
        "{} kernels, {cases} cases ({refused} refused by the runtime), limiters {limiters:?}",
        kernels.len()
    );
    for (k, (regs, smem, bars)) in &kernels {
        println!("  {k:<12} {regs:>3} regs {smem:>6} B static {bars:>2} barriers");
    }
    assert!(cases > 0, "no cases in {}", path.display());
    assert!(
        failures.is_empty(),
        "{} of {cases} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn recording() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/occupancy-sm90.jsonl")
}

/// The recorded H200 run in docs/.
#[test]
fn model_equals_recorded_h200_run() {
    compare(&recording());
}

/// A fresh run: `KBUILD_OCC_SM90_JSON=out.jsonl cargo test -p kbuild-manifest --test
/// occupancy_cuda_device -- --ignored`.
#[test]
#[ignore = "needs KBUILD_OCC_SM90_JSON from a GPU run (scripts/device/occupancy-sm90.sh)"]
fn model_equals_device_output() {
    let path = std::env::var_os("KBUILD_OCC_SM90_JSON")
        .map(PathBuf::from)
        .expect("set KBUILD_OCC_SM90_JSON to the output of .device/occupancy_sm90");
    compare(&path);
}
