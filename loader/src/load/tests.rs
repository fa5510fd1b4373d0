//! Tests of loading: attribute checks, the launch check before the driver, simulated devices.

use super::attributes::*;
use super::module::*;
use super::*;
use kbuild_manifest::compat::Device;
use kbuild_manifest::load_index::LoadFigures;
use kbuild_manifest::resources::{CudaResources, Resources};

use crate::launch::LaunchConfig;
use kbuild_manifest::triton::TritonLaunch;

fn record(registers: u32, lds: u64, reserved: u64, scratch: u64) -> LoadFigures {
    let mut o = crate::fixtures::object("k", None, "sm_90a", None);
    o.resources.insert(
        "k".into(),
        Resources::Cuda(CudaResources {
            registers,
            lds_bytes: lds,
            reserved_shared_bytes: reserved,
            scratch_bytes: scratch,
            spill_store_bytes: Some(0),
            spill_load_bytes: Some(0),
            const_bytes: 388,
            barriers: 1,
            max_threads: Some(256),
            occupancy: None,
            note: None,
        }),
    );
    LoadFigures::of(o.resources.get("k"))
}

fn loaded(registers: i64, shared: i64, local: i64) -> RuntimeFigures {
    RuntimeFigures {
        registers: Some(registers),
        shared_bytes: shared,
        local_bytes: local,
        max_threads: 256,
    }
}

#[test]
fn matching_attributes_pass_with_or_without_the_reservation() {
    let r = record(32, 32, 1024, 0);
    check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 32, 0)).unwrap();
    let c = describe_attributes(&r, &loaded(32, 32, 0));
    assert_eq!(c.len(), 3);
    assert_eq!(c[1].note, "SHARED_SIZE_BYTES = lds_bytes");
    check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 1056, 0)).unwrap();
    let c = describe_attributes(&r, &loaded(32, 1056, 0));
    assert_eq!(
        c[1].note,
        "SHARED_SIZE_BYTES = lds_bytes + reserved_shared_bytes"
    );
    assert_eq!(c[1].manifest, "32 (+1024 reserved)");
    assert_eq!(r.max_threads(), Some(256));
}

#[test]
fn a_difference_is_a_stale_artifact() {
    let r = record(32, 32, 1024, 0);
    let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(40, 32, 0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`k` registers is 40 after load, the manifest says 32"),
        "{e}"
    );
    assert!(e.contains("stale or swapped"), "{e}");
    let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 64, 0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("lds_bytes is 64"), "{e}");
    let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 32, 16))
        .unwrap_err()
        .to_string();
    assert!(e.contains("scratch_bytes is 16"), "{e}");
    // Without a reservation the 1 KiB form is not accepted.
    let r = record(32, 32, 0, 0);
    assert!(check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 1056, 0)).is_err());
}

/// A manifest of one cubin `k` exporting `k(const float* x, int n)`, with or without
/// its launch parameters.
fn with_params(params: bool) -> kbuild_manifest::manifest::Manifest {
    let mut o = crate::fixtures::object("k", None, "sm_90", None);
    if params {
        o.params = [("k".to_string(), kbuild_manifest::fixtures::params_x_n())].into();
    }
    crate::fixtures::manifest(vec![o])
}

/// Function `k` of a module no driver loaded: its launches go to `cuLaunchKernel` (which,
/// on a machine without libcuda, fails to load the driver).
fn detached(m: kbuild_manifest::manifest::Manifest) -> Function {
    let p = Package::from_manifest(m).unwrap();
    let module = Arc::new(LoadedModule {
        index: p.shared_index(),
        object: 0,
        origin: p.origin().to_path_buf(),
        inner: ModuleInner::Detached,
    });
    Function {
        module,
        entry: "k".into(),
        raw: RawFunction::Cuda(std::ptr::null_mut()),
        max_threads: Some(256),
        compared: (LoadFigures::None, loaded(0, 0, 0)),
        checks: std::sync::OnceLock::new(),
        abi: std::sync::OnceLock::new(),
        shared_allowed: std::sync::atomic::AtomicU32::new(crate::cuda::DEFAULT_DYNAMIC_SHARED),
    }
}

fn reached_the_driver(r: Result<()>) -> bool {
    // Without libcuda the driver fails to load; with one, a null function is refused.
    matches!(r, Err(LoaderError::Runtime { ref api, .. }) if api.starts_with("cuLaunchKernel"))
}

#[test]
fn a_mismatched_launch_never_reaches_the_driver() {
    use crate::launch::DevicePtr;
    let f = detached(with_params(true));
    assert_eq!(f.params().map(<[_]>::len), Some(2));
    assert_eq!(f.hidden_params(), Some(0));
    let cfg = LaunchConfig::linear(1, 64);
    let (mut x, mut n, mut wide) = (DevicePtr(0), 4i32, 4i64);
    let mut good: Vec<*mut std::ffi::c_void> = vec![
        (&mut x as *mut DevicePtr).cast(),
        (&mut n as *mut i32).cast(),
    ];
    let mut bad: Vec<*mut std::ffi::c_void> = vec![
        (&mut x as *mut DevicePtr).cast(),
        (&mut wide as *mut i64).cast(),
    ];
    // SAFETY: nothing is launched: the check refuses, or the driver is absent / refuses
    // the null function.
    unsafe {
        let e = f.launch_raw(&cfg, &mut bad, &[8, 8]).unwrap_err();
        assert!(matches!(e, LoaderError::Args(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
        );
        let e = f.launch(&cfg, &(x, 4i64)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
        );
        let e = f.launch(&cfg, &(x,)).unwrap_err();
        assert_eq!(e.to_string(), "k: 1 argument given, the kernel takes 2");
        let e = f.launch_raw(&cfg, &mut good, &[8]).unwrap_err();
        assert!(
            e.to_string().contains("2 argument pointers but 1 sizes"),
            "{e}"
        );
        // The launch configuration is checked first, then the arguments.
        let e = f
            .launch(&LaunchConfig::linear(1, 512), &(x, 4i64))
            .unwrap_err();
        assert!(e.to_string().contains("exceeds the kernel's bound"), "{e}");
        // Fitting arguments go on to the driver; so does the unchecked escape hatch.
        assert!(reached_the_driver(f.launch_raw(&cfg, &mut good, &[8, 4])));
        assert!(reached_the_driver(f.launch(&cfg, &(x, 4i32))));
        assert!(reached_the_driver(f.launch_raw_unchecked(&cfg, &mut bad)));
    }
    assert!(f.check_args(&[8, 4]).unwrap());
    assert!(f.check_args(&[8, 8]).is_err());
}

#[test]
fn without_parameters_launches_are_unchecked_and_say_so() {
    use crate::launch::DevicePtr;
    let f = detached(with_params(false));
    assert_eq!(f.params(), None);
    assert_eq!(f.hidden_params(), None);
    assert!(!f.check_args(&[1, 2, 3]).unwrap());
    // SAFETY: as above.
    unsafe {
        assert!(reached_the_driver(f.launch(
            &LaunchConfig::linear(1, 64),
            &(DevicePtr(0), 4i64, 5i64)
        )));
    }
}

#[test]
fn a_loader_checks_arguments_without_loading() {
    let dev = Device::parse("sm_90", None, None).unwrap();
    let l = Loader::from_package(
        Package::from_manifest(with_params(true)).unwrap(),
        &Gpu::simulated(dev),
    );
    assert!(l.check_args("k", None, "k", &[8, 4]).unwrap());
    let e = l.check_args("k", None, "k", &[8, 2]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "k: argument 1 is 2 bytes, the kernel takes 4 (int n)"
    );
    let abi = l.entry_params("k", None, "k").unwrap().unwrap();
    assert_eq!(abi.params[1].type_name.as_deref(), Some("int"));
    let e = l.check_args("k", None, "nope", &[]).unwrap_err();
    assert!(
        e.to_string().contains("entry `nope` is not exported"),
        "{e}"
    );
    assert!(l.check_args("nope", None, "k", &[]).is_err());
    let l = Loader::from_package(
        Package::from_manifest(with_params(false)).unwrap(),
        &Gpu::simulated(dev),
    );
    assert!(!l.check_args("k", None, "k", &[8]).unwrap());
}

#[test]
fn simulated_devices_explain_but_do_not_load() {
    let dev = Device::parse("sm_90", None, None).unwrap();
    let gpu = Gpu::simulated(dev);
    let dir = tempfile::tempdir().unwrap();
    let m = crate::fixtures::manifest(vec![crate::fixtures::object("k", None, "sm_90", None)]);
    std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
    let l = Loader::open(dir.path(), &gpu).unwrap();
    assert_eq!(
        l.selection()
            .kernel("k", None)
            .unwrap()
            .selected()
            .unwrap()
            .target,
        "sm_90"
    );
    let e = l.function("k", None, "k").unwrap_err();
    assert!(matches!(e, LoaderError::Simulated { .. }), "{e}");
    let e = l.function("nope", None, "k").unwrap_err().to_string();
    assert!(
        e.contains("kernel `nope` is not in the manifest (it has: k)"),
        "{e}"
    );
    // preload: an unknown kernel is refused before anything loads, and a simulated
    // device loads nothing.
    let e = l.preload(&[("k", None), ("nope", None)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("kernel `nope` is not in the manifest"),
        "{e}"
    );
    let e = l.preload(&[("k", None)]).unwrap_err();
    assert!(matches!(e, LoaderError::Simulated { .. }), "{e}");
    assert!(l.preload(&[]).is_ok());
}

/// A Triton object `k(x: *fp32, n: i32)` (x assumed divisible by 16) with its launch record
/// and the two scratch pointers in its parameter table, as a Triton build records it.
fn triton_object() -> (kbuild_manifest::manifest::Manifest, TritonLaunch) {
    use kbuild_manifest::params::ParamKind;
    let record = kbuild_manifest::fixtures::triton_launch(
        "k",
        1024,
        &[("x", "*fp32", true), ("n", "i32", false)],
    );
    let mut params = kbuild_manifest::fixtures::params_x_n();
    params.push(kbuild_manifest::fixtures::param(
        2,
        16,
        8,
        ParamKind::Pointer,
    ));
    params.push(kbuild_manifest::fixtures::param(
        3,
        24,
        8,
        ParamKind::Pointer,
    ));
    let mut o = crate::fixtures::object("k", None, "sm_90a", None);
    o.params = [("k".to_string(), params)].into();
    o.triton = Some(record.clone());
    (crate::fixtures::manifest(vec![o]), record)
}

#[test]
fn a_triton_launch_applies_its_record_and_refuses_what_the_build_assumed_otherwise() {
    use crate::launch::Stream;
    let (m, record) = triton_object();
    let f = detached(m);
    let (mut x, mut bad_x, mut n, mut wide) = (0x1000u64, 0x1004u64, 64i32, 64i64);
    let ptr = |v: &mut u64| (v as *mut u64).cast::<std::ffi::c_void>();
    let good = [ptr(&mut x), (&mut n as *mut i32).cast()];
    let unaligned = [ptr(&mut bad_x), (&mut n as *mut i32).cast()];
    let too_wide = [ptr(&mut x), (&mut wide as *mut i64).cast()];
    // SAFETY: nothing is launched: the check refuses, or the driver is absent / refuses the
    // null function; every pointer is to a live value of its size.
    unsafe {
        let launch = |args: &[*mut std::ffi::c_void], sizes: &[usize]| {
            f.launch_triton(&record, (8, 1, 1), Stream::DEFAULT, args, sizes)
        };
        assert!(reached_the_driver(launch(&good, &[8, 4])));
        let e = launch(&unaligned, &[8, 4]).unwrap_err();
        assert!(matches!(e, LoaderError::Args(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "k: argument `x` (*fp32): its address 0x1004 is not a multiple of 16, which this build of the kernel assumes"
        );
        let e = launch(&good[..1], &[8]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: 1 argument given, the kernel takes 2 (x, n)"
        );
        // The scratch pointers kbuild adds take part in the object's own check of sizes.
        let e = launch(&too_wide, &[8, 8]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
        );
        let mut needs_scratch = record.clone();
        needs_scratch.global_scratch_size = 128;
        let e = f
            .launch_triton(&needs_scratch, (8, 1, 1), Stream::DEFAULT, &good, &[8, 4])
            .unwrap_err();
        // Allocated through the CUDA driver only; this module no driver loaded.
        assert!(
            e.to_string()
                .contains("needs scratch memory, which kbuild allocates through the CUDA driver"),
            "{e}"
        );
        // A cluster launch reaches the driver as any other (refused there for the null
        // function), its grid a whole number of clusters.
        let mut clustered = record.clone();
        clustered.num_ctas = 2;
        assert!(reached_the_driver(f.launch_triton(
            &clustered,
            (8, 1, 1),
            Stream::DEFAULT,
            &good,
            &[8, 4]
        )));
    }
}

#[test]
fn a_triton_launch_is_checked_without_a_gpu_through_the_loader() {
    let (m, _) = triton_object();
    let dev = Device::parse("sm_90", None, None).unwrap();
    let loader = Loader::from_package(Package::from_manifest(m).unwrap(), &Gpu::simulated(dev));
    let record = loader
        .triton_launch("k", None)
        .unwrap()
        .expect("a launch record");
    assert_eq!(record.block_threads(), 128);
    assert!(loader
        .check_triton_args("k", None, &[0x1000, 64], &[8, 4])
        .is_ok());
    let e = loader
        .check_triton_args("k", None, &[0x1008, 64], &[8, 4])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("argument `x` (*fp32): its address 0x1008"),
        "{e}"
    );
    let e = loader
        .check_triton_args("k", None, &[0x1000, 64], &[8, 8])
        .unwrap_err();
    assert!(e.to_string().contains("argument 1 is 8 bytes"), "{e}");
}
