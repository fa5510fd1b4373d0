//! A Triton kernel's launch as its build recorded it ([`TritonLaunch`], the manifest's launch
//! record): the configuration (block = num_warps × warp size, the dynamic shared memory,
//! programmatic dependent launch, clusters, cooperative grids), the scratch pointers, and the
//! check of the caller's arguments against the record (count, and the values the object was
//! compiled to assume divisible by 16), all before any driver call.

use kbuild_manifest::triton::{TritonLaunch, TritonParam};

use super::{LaunchConfig, Stream};
use crate::error::{LaunchError, LoaderError, Result};

/// The parameter type of the two trailing pointers (global and profile scratch) kbuild passes.
const SCRATCH: &str = "scratch";

/// The parameters a caller passes: the record's, less the scratch pointers.
pub fn triton_args(record: &TritonLaunch) -> impl Iterator<Item = &TritonParam> {
    record.params.iter().filter(|p| p.ty != SCRATCH)
}

/// How many scratch pointers follow the caller's arguments.
pub fn triton_scratch_count(record: &TritonLaunch) -> usize {
    record.params.iter().filter(|p| p.ty == SCRATCH).count()
}

/// The configuration of a launch of `record` over `grid` programs on `stream`, as Triton's
/// own launcher makes it: each program is a cluster of `num_ctas` blocks along x (so the grid
/// in blocks is `grid.x × num_ctas`), cooperative and programmatic when the record says so.
pub fn triton_config(
    entry: &str,
    record: &TritonLaunch,
    grid: (u32, u32, u32),
    stream: Stream,
) -> Result<LaunchConfig> {
    let refuse = |what: String| LoaderError::Launch {
        entry: entry.to_string(),
        what,
    };
    let cluster = record.num_ctas.max(1);
    let blocks_x = grid.0.checked_mul(cluster).ok_or_else(|| {
        refuse(format!(
            "grid x of {} programs × {cluster} CTAs each overflows",
            grid.0
        ))
    })?;
    let shared_bytes = u32::try_from(record.shared).map_err(|_| {
        refuse(format!(
            "the record asks for {} bytes of dynamic shared memory",
            record.shared
        ))
    })?;
    Ok(LaunchConfig {
        grid: (blocks_x, grid.1, grid.2),
        block: (record.block_threads(), 1, 1),
        shared_bytes,
        stream,
        programmatic: record.pdl,
        cluster,
        cooperative: record.cooperative,
    })
}

/// Whether a Triton type is a pointer or an integer: the kinds whose value the divisible-by-16
/// specialization is about.
fn address_or_int(ty: &str) -> Option<&'static str> {
    if ty.starts_with('*') {
        Some("address")
    } else if ty.starts_with('i') || ty.starts_with('u') {
        Some("value")
    } else {
        None
    }
}

/// The parameters a caller passes, by name, then the arguments compiled away (`n` as 1, `gk`
/// as None), which a launch no longer passes.
fn describe_params(record: &TritonLaunch, params: &[&TritonParam]) -> String {
    let mut text = params
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let removed: Vec<String> = record
        .removed
        .iter()
        .map(|r| match r.why.as_str() {
            "equal_to_1" => format!("{} as 1", r.name),
            "none" => format!("{} as None", r.name),
            why => format!("{} ({why})", r.name),
        })
        .collect();
    if !removed.is_empty() {
        text.push_str("; compiled in, not passed: ");
        text.push_str(&removed.join(", "));
    }
    text
}

/// The count of a Triton launch's arguments against `record` (the message names the
/// parameters and what was compiled in).
pub fn check_triton_count(
    kernel: &str,
    record: &TritonLaunch,
    given: usize,
) -> std::result::Result<(), LaunchError> {
    let params: Vec<&TritonParam> = triton_args(record).collect();
    if params.len() == given {
        return Ok(());
    }
    Err(LaunchError::TritonCount {
        kernel: kernel.to_string(),
        given,
        expected: params.len(),
        names: describe_params(record, &params),
    })
}

/// Check a Triton launch's arguments against `record`: their count (the message names the
/// parameters), then each value the object assumes divisible by 16. `values[i]` is argument
/// i's bytes read as a little-endian unsigned integer (its address for a pointer); only those
/// of pointer and integer parameters are looked at.
pub fn check_triton_args(
    kernel: &str,
    record: &TritonLaunch,
    values: &[u64],
) -> std::result::Result<(), LaunchError> {
    check_triton_count(kernel, record, values.len())?;
    let params: Vec<&TritonParam> = triton_args(record).collect();
    for (p, &value) in params.iter().zip(values) {
        let Some(what) = address_or_int(&p.ty) else {
            continue;
        };
        if p.divisible_16 && value % 16 != 0 {
            return Err(LaunchError::NotDivisible {
                kernel: kernel.to_string(),
                name: p.name.clone(),
                ty: p.ty.clone(),
                what,
                value,
            });
        }
    }
    Ok(())
}

/// Argument `i`'s value as [`check_triton_args`] reads it: its first `size` bytes (at most 8),
/// little-endian.
///
/// # Safety
/// `arg` points at `size` readable bytes.
pub unsafe fn read_value(arg: *const std::ffi::c_void, size: usize) -> u64 {
    let mut bytes = [0u8; 8];
    let n = size.min(8);
    std::ptr::copy_nonoverlapping(arg.cast::<u8>(), bytes.as_mut_ptr(), n);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TritonLaunch {
        kbuild_manifest::fixtures::triton_launch(
            "add",
            70_000,
            &[
                ("x", "*fp32", true),
                ("scale", "fp32", false),
                ("n", "i32", true),
                ("m", "i32", false),
            ],
        )
    }

    #[test]
    fn the_configuration_comes_from_the_record() {
        let r = record();
        let cfg = triton_config("add", &r, (7, 1, 1), Stream::DEFAULT).unwrap();
        assert_eq!(
            (cfg.grid, cfg.block, cfg.shared_bytes),
            ((7, 1, 1), (128, 1, 1), 70_000)
        );
        assert!(!cfg.programmatic && !cfg.cooperative);
        assert_eq!(cfg.cluster, 1);
        assert_eq!(triton_scratch_count(&r), 2);
        assert_eq!(triton_args(&r).count(), 4);
    }

    #[test]
    fn clusters_and_cooperative_launches_are_configured_as_tritons_launcher_makes_them() {
        let mut r = record();
        r.num_ctas = 2;
        r.cooperative = true;
        let cfg = triton_config("add", &r, (5, 3, 1), Stream::DEFAULT).unwrap();
        // Each program is a cluster of 2 blocks along x.
        assert_eq!((cfg.grid, cfg.cluster), ((10, 3, 1), 2));
        assert!(cfg.cooperative);
        assert!(cfg.check("add", None).is_ok());
        r.num_ctas = 4;
        let e = triton_config("add", &r, (u32::MAX, 1, 1), Stream::DEFAULT).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        // A grid that is no whole number of clusters is refused before the driver.
        let mut odd = cfg;
        odd.grid.0 = 9;
        let e = odd.check("add", None).unwrap_err();
        assert!(
            e.to_string()
                .contains("not a whole number of clusters of 2"),
            "{e}"
        );
    }

    #[test]
    fn arguments_are_counted_and_divisibility_is_checked_by_name() {
        let r = record();
        assert!(check_triton_args("add", &r, &[0x1000, 0x3f80_0000, 64, 3]).is_ok());
        let e = check_triton_args("add", &r, &[0x1000, 0, 64]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "add: 3 arguments given, the kernel takes 4 (x, scale, n, m)"
        );
        let e = check_triton_args("add", &r, &[0x1004, 0, 64, 3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "add: argument `x` (*fp32): its address 0x1004 is not a multiple of 16, which this build of the kernel assumes"
        );
        let e = check_triton_args("add", &r, &[0x1000, 0, 65, 3]).unwrap_err();
        assert!(
            e.to_string().contains("argument `n` (i32): its value 0x41"),
            "{e}"
        );
        // What the build compiled away is named where the count is wrong.
        let mut r2 = record();
        r2.removed = vec![
            kbuild_manifest::triton::TritonRemoved {
                name: "stride".into(),
                why: "equal_to_1".into(),
            },
            kbuild_manifest::triton::TritonRemoved {
                name: "gk".into(),
                why: "none".into(),
            },
        ];
        let e = check_triton_args("add", &r2, &[0x1000, 0, 64, 3, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "add: 5 arguments given, the kernel takes 4 (x, scale, n, m; compiled in, not passed: stride as 1, gk as None)"
        );
        // An fp32 is never read as an address or value; `m` assumes nothing.
        assert!(check_triton_args("add", &r, &[0x1000, 0x3f80_0001, 64, 5]).is_ok());
    }

    #[test]
    fn a_value_is_read_from_its_own_bytes_only() {
        let v: [u8; 8] = [0x10, 0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        // SAFETY: `v` holds 8 readable bytes.
        unsafe {
            assert_eq!(read_value(v.as_ptr().cast(), 2), 0x2010);
            assert_eq!(read_value(v.as_ptr().cast(), 8), u64::from_le_bytes(v));
        }
    }
}
