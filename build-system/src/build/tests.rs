//! `build()` and the job runner against a fake CUDA toolkit: a shell script as `nvcc` that
//! answers `--version`, writes PTX for `-arch=compute_XY` and a depfile, and fails on a source
//! that says `BROKEN`. No GPU toolchain needed.

use super::jobs::run_jobs;
use super::outputs::unbuilt_objects;
use super::prepare::prepare;

use std::sync::Mutex;

use super::*;
use std::path::Path;

use kbuild_base::env::Env;
use kbuild_manifest::load_index;
use kbuild_manifest::manifest::Manifest;

use crate::cache::Cache;
use crate::config::{parse, Project, FILE_NAME};
use crate::events::{Event, JobStatus, Observer};
use crate::remote_cache::DepRoots;

/// Only shell builtins: the compiler may run with a bare environment.
const FAKE_NVCC: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "nvcc: NVIDIA (R) Cuda compiler driver"
  echo "Cuda compilation tools, release 13.5, V13.5.37"
  exit 0
fi
out=; dep=; arch=; src=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -MF) dep="$2"; shift ;;
    -Xcompiler) case "$2" in -MD,-MF,*) dep="${2#-MD,-MF,}" ;; esac; shift ;;
    -arch=compute_*) arch="${1#-arch=compute_}" ;;
    -*) ;;
    *) src="$1" ;;
  esac
  shift
done
while IFS= read -r line; do
  case "$line" in
    *BROKEN*) echo "$src(1): error: this kernel is broken" >&2; exit 2 ;;
  esac
done < "$src"
printf '.version 8.0\n.target sm_%s\n.address_size 64\n\n.visible .entry scale(\n\t.param .u64 scale_param_0\n)\n{\n\tret;\n}\n' "$arch" > "$out"
printf '%s: %s\n' "$out" "$src" > "$dep"
"#;

/// A project in `dir` with one kernel per `(name, source text)`, each exporting `scale`, for
/// compute_89, built with the fake toolkit; its cache and output under `dir`.
fn project(dir: &Path, kernels: &[(&str, &str)]) -> (Project, BuildOptions) {
    use std::os::unix::fs::PermissionsExt;
    let cuda = dir.join("cuda");
    std::fs::create_dir_all(cuda.join("bin")).expect("mkdir");
    let nvcc = cuda.join("bin/nvcc");
    std::fs::write(&nvcc, FAKE_NVCC).expect("write nvcc");
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut toml = format!(
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"compute_89\"]\n\n[toolchain]\ncuda = {:?}\n",
        cuda.display().to_string()
    );
    for (name, text) in kernels {
        std::fs::write(dir.join(format!("{name}.cu")), text).expect("write source");
        toml.push_str(&format!(
            "\n[kernels.{name}]\nsource = \"{name}.cu\"\nentries = [\"scale\"]\n"
        ));
    }
    let project = parse(&dir.join(FILE_NAME), &toml).expect("project parses");
    let opts = BuildOptions {
        out_dir: Some(dir.join("out")),
        cache_dir: Some(dir.join("cache")),
        jobs: Some(1),
        env: Env::empty(),
        ..BuildOptions::default()
    };
    (project, opts)
}

/// What a build told its observer.
#[derive(Default)]
struct Seen {
    events: Mutex<Vec<Event>>,
    notes: Mutex<Vec<String>>,
}

impl Observer for Seen {
    fn event(&self, e: &Event) {
        self.events.lock().expect("lock").push(e.clone());
    }
    fn note(&self, text: &str) {
        self.notes.lock().expect("lock").push(text.to_string());
    }
}

impl Seen {
    fn job_statuses(&self) -> Vec<(String, JobStatus)> {
        let events = self.events.lock().expect("lock");
        events
            .iter()
            .filter_map(|e| match e {
                Event::Job { kernel, status, .. } => Some((kernel.clone(), *status)),
                _ => None,
            })
            .collect()
    }
}

const GOOD: &str = "__global__ void scale(float* x) {}\n";
const BROKEN: &str = "BROKEN\n";

#[test]
fn build_compiles_writes_the_manifest_then_hits_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, opts) = project(dir.path(), &[("scale", GOOD)]);

    let seen = Seen::default();
    let report = build(&project, &opts, &seen).expect("builds");
    assert_eq!((report.compiled, report.cached), (1, 0));
    assert!(report.failures.is_empty());
    assert_eq!(seen.job_statuses(), [("scale".into(), JobStatus::Compiled)]);
    let manifest =
        Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest written"))
            .expect("manifest parses");
    assert_eq!(manifest.targets, ["compute_89"]);
    assert_eq!(manifest.objects.len(), 1);
    let o = &manifest.objects[0];
    assert_eq!(
        (o.kernel.as_str(), o.target.as_str()),
        ("scale", "compute_89")
    );
    assert_eq!(o.entries, ["scale"]);
    let object = std::fs::read(report.out_dir.join(&o.path)).expect("object written");
    assert_eq!(kbuild_base::digest::sha256_hex(&object), o.sha256);
    assert!(report.out_dir.join(load_index::LOAD_INDEX_FILE).is_file());
    let events = seen.events.lock().expect("lock");
    assert!(matches!(
        events.last(),
        Some(Event::Summary {
            compiled: 1,
            cached: 0,
            failed: 0,
            ..
        })
    ));
    drop(events);

    let again = Seen::default();
    let report = build(&project, &opts, &again).expect("builds again");
    assert_eq!((report.compiled, report.cached), (0, 1));
    assert_eq!(again.job_statuses(), [("scale".into(), JobStatus::Cached)]);
}

#[test]
fn build_keeps_going_past_a_failed_job_and_lists_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, mut opts) = project(dir.path(), &[("bad", BROKEN), ("good", GOOD)]);
    opts.keep_going = true;
    let seen = Seen::default();
    let report = build(&project, &opts, &seen).expect("a job failure is no setup error");
    assert_eq!(report.compiled, 1);
    assert_eq!(report.failures.len(), 1);
    let f = &report.failures[0];
    assert!(f.label.starts_with("bad"), "{}", f.label);
    assert!(f.log.contains("this kernel is broken"), "{}", f.log);
    assert!(f.command.as_deref().is_some_and(|c| c.contains("nvcc")));
    let notes = seen.notes.lock().expect("lock");
    assert!(
        notes.iter().any(|n| n.starts_with("error: bad")),
        "{notes:?}"
    );
    let manifest = Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest"))
        .expect("parses");
    assert_eq!(manifest.objects.len(), 1);
    assert_eq!(manifest.failed.len(), 1);
    assert_eq!(manifest.failed[0].kernel, "bad");
    assert!(manifest.failed[0].error.is_some());
    assert!(manifest.missing.is_empty());
}

#[test]
fn build_without_a_toolchain_fails_before_running_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut project, opts) = project(dir.path(), &[("scale", GOOD)]);
    project.toolchain.cuda = Some(dir.path().join("no-cuda-here"));
    let seen = Seen::default();
    match build(&project, &opts, &seen) {
        Err(BuildError::Toolchain(problems)) => assert_eq!(problems.len(), 1),
        other => panic!("expected a toolchain error, got {other:?}"),
    }
    assert!(seen.job_statuses().is_empty());
    assert!(!dir.path().join("out/manifest.json").exists());
}

#[test]
fn the_runner_stops_at_the_first_failure_without_keep_going() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, opts) = project(dir.path(), &[("bad", BROKEN), ("good", GOOD)]);
    let seen = Seen::default();
    let prepared = prepare(&project, &opts, &seen).expect("prepares");
    let cache = Cache::open(&prepared.cache_dir);
    let out_dir = out_dir_of(&project, &opts);
    // The broken job first: one worker runs the list in order.
    let mut jobs = prepared.jobs.clone();
    jobs.sort_by_key(|j| j.kernel_name != "bad");
    let ctx = Ctx {
        project: &project,
        tcs: &prepared.tcs,
        cache: &cache,
        out_dir: &out_dir,
        timeout: None,
        reporter: &seen,
        remote: None,
        dep_roots: DepRoots::for_build(&project.root, &prepared.tcs),
        env: &opts.env,
        compat_dir: None,
        pch: None,
        triton: None,
        strict: false,
        remote_exec: None,
        local_slots: None,
    };
    let ran = run_jobs(&ctx, &jobs, 1, false);
    assert_eq!(ran.ran, [true, false]);
    assert_eq!(ran.failed_jobs, [0]);
    assert_eq!(ran.failures.len(), 1);
    assert!(ran.records.is_empty());
    assert_eq!((ran.compiled, ran.cached), (0, 0));
    let (failed, missing) =
        unbuilt_objects(&jobs, &ran.failed_jobs, &ran.ran, &ran.failures, &out_dir);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].kernel, "bad");
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].kernel, "good");
    assert!(missing[0].error.is_none());

    // With keep_going both run; the good one is compiled and timed.
    let ran = run_jobs(&ctx, &jobs, 1, true);
    assert_eq!(ran.ran, [true, true]);
    assert_eq!(ran.compiled, 1);
    assert!(ran.timings.keys().any(|k| k.starts_with("good")));
}

#[test]
fn failure_text_shows_the_command_and_the_indented_output() {
    let f = Failure {
        label: "k for sm_89".into(),
        cause: "compiler exited with 2".into(),
        command: Some("nvcc k.cu".into()),
        log: "k.cu(1): error: x\n".into(),
    };
    assert_eq!(
        failure_text(&f),
        "error: k for sm_89: compiler exited with 2\n  command: nvcc k.cu\n  compiler output:\n    k.cu(1): error: x\n"
    );
}

/// A fake nvcc whose PTX exports, for `-arch=compute_XY`, every name on a source line
/// `EXPORT name` and every name on a line `EXPORT_XY name`: kernels guarded by
/// `__CUDA_ARCH__`, without a compiler.
const GUARDED_NVCC: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "nvcc: NVIDIA (R) Cuda compiler driver"
  echo "Cuda compilation tools, release 13.5, V13.5.37"
  exit 0
fi
out=; dep=; arch=; src=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -MF) dep="$2"; shift ;;
    -Xcompiler) case "$2" in -MD,-MF,*) dep="${2#-MD,-MF,}" ;; esac; shift ;;
    -arch=compute_*) arch="${1#-arch=compute_}" ;;
    -*) ;;
    *) src="$1" ;;
  esac
  shift
done
printf '.version 8.0\n.target sm_%s\n.address_size 64\n' "$arch" > "$out"
while IFS= read -r line; do
  name=
  case "$line" in
    "EXPORT "*) name="${line#EXPORT }" ;;
    "EXPORT_$arch "*) name="${line#EXPORT_$arch }" ;;
  esac
  if [ -n "$name" ]; then
    printf '\n.visible .entry %s(\n\t.param .u64 %s_param_0\n)\n{\n\tret;\n}\n' "$name" "$name" >> "$out"
  fi
done < "$src"
printf '%s: %s\n' "$out" "$src" > "$dep"
"#;

/// A project of one kernel `ops` (`ops.cu` is `source`) with `entries` as written, for
/// compute_89 and compute_90, built with [`GUARDED_NVCC`].
fn guarded_project(dir: &Path, source: &str, entries: &str) -> (Project, BuildOptions) {
    use std::os::unix::fs::PermissionsExt;
    let cuda = dir.join("cuda");
    std::fs::create_dir_all(cuda.join("bin")).expect("mkdir");
    let nvcc = cuda.join("bin/nvcc");
    std::fs::write(&nvcc, GUARDED_NVCC).expect("write nvcc");
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.join("ops.cu"), source).expect("write source");
    let toml = format!(
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"compute_89\", \"compute_90\"]\n\n[toolchain]\ncuda = {:?}\n\n[kernels.ops]\nsource = \"ops.cu\"\nentries = {entries}\n",
        cuda.display().to_string()
    );
    let project = parse(&dir.join(FILE_NAME), &toml).expect("project parses");
    let opts = BuildOptions {
        out_dir: Some(dir.join("out")),
        cache_dir: Some(dir.join("cache")),
        jobs: Some(1),
        keep_going: true,
        env: Env::empty(),
        ..BuildOptions::default()
    };
    (project, opts)
}

/// `ops` exports `common` everywhere and 48 `only90_N` kernels on compute_90 alone.
fn guarded_source() -> String {
    let mut s = String::from("EXPORT common\n");
    for i in 0..48 {
        s.push_str(&format!("EXPORT_90 only90_{i}\n"));
    }
    s
}

/// Issue 27, item 7: a target lacking what the others export fails alone (a short list of
/// the missing entries, one line), and the objects that passed stay in the output and the
/// manifest.
#[test]
fn the_cross_target_audit_fails_only_the_lacking_target_with_a_short_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, opts) = guarded_project(dir.path(), &guarded_source(), "[\"*\"]");
    let report = build(&project, &opts, &Seen::default()).expect("builds");
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    let f = &report.failures[0];
    assert_eq!(f.label, "ops for compute_89");
    assert!(
        f.cause
            .contains("compute_89 does not export 48 entries that compute_90 exports")
            && f.cause.contains("45 more")
            && !f.cause.contains("only90_47"),
        "{}",
        f.cause
    );
    assert!(f.cause.len() < 600, "{} bytes: {}", f.cause.len(), f.cause);
    let m = Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest"))
        .expect("parses");
    let built: Vec<&str> = m.objects.iter().map(|o| o.target.as_str()).collect();
    assert_eq!(built, ["compute_90"]);
    assert_eq!(m.objects[0].entries.len(), 49);
    assert!(dir.path().join("out").join(&m.objects[0].path).is_file());
    assert!(!dir.path().join("out/compute_89/ops.ptx").exists());
    let failed: Vec<&str> = m.failed.iter().map(|u| u.target.as_str()).collect();
    assert_eq!(failed, ["compute_89"]);
}

/// Issue 27, item 7: entries per target (or vendor) name what only some targets export, so
/// every object passes and each records its own entries.
#[test]
fn entries_per_target_let_a_guarded_kernel_pass_on_every_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, opts) = guarded_project(
        dir.path(),
        &guarded_source(),
        "{ all = [\"*\"], compute_90 = [\"only90_*\"] }",
    );
    let report = build(&project, &opts, &Seen::default()).expect("builds");
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let m = Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest"))
        .expect("parses");
    let counts: Vec<(&str, usize)> = m
        .objects
        .iter()
        .map(|o| (o.target.as_str(), o.entries.len()))
        .collect();
    assert_eq!(counts, [("compute_89", 1), ("compute_90", 49)]);
    // An exact name listed for one vendor is required there, and only there.
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, opts) = guarded_project(
        dir.path(),
        "EXPORT common\n",
        "{ all = [\"common\"], nvidia = [\"fast\"] }",
    );
    let report = build(&project, &opts, &Seen::default()).expect("builds");
    assert_eq!(report.failures.len(), 2, "{:?}", report.failures);
    assert!(
        report.failures[0].cause.contains("entry symbol(s) fast "),
        "{}",
        report.failures[0].cause
    );
}

/// Issue 27, item 11: `block-size` per entry pattern reaches each entry's occupancy in the
/// manifest (the gate's input); an entry two patterns disagree on fails its object. The fake
/// nvcc hands back a real sm_89 cubin (the readers' fixture, with its ptxas log).
#[test]
fn block_size_per_entry_reaches_the_manifest() {
    use kbuild_manifest::resources::Resources;
    use std::os::unix::fs::PermissionsExt;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/tests/fixtures");
    let build_with = |block_size: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let cuda = dir.path().join("cuda");
        std::fs::create_dir_all(cuda.join("bin")).expect("mkdir");
        let nvcc = cuda.join("bin/nvcc");
        let script = format!(
            "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then\n  echo \"Cuda compilation tools, release 13.5, V13.5.37\"\n  exit 0\nfi\nout=; dep=; src=\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n    -o) out=\"$2\"; shift ;;\n    -MF) dep=\"$2\"; shift ;;\n    -Xcompiler) case \"$2\" in -MD,-MF,*) dep=\"${{2#-MD,-MF,}}\" ;; esac; shift ;;\n    -*) ;;\n    *) src=\"$1\" ;;\n  esac\n  shift\ndone\ncat {:?} > \"$out\"\ncat {:?} >&2\nprintf '%s: %s\\n' \"$out\" \"$src\" > \"$dep\"\n",
            fixtures.join("kern_sm89.cubin").display().to_string(),
            fixtures.join("kern_sm89.ptxas.log").display().to_string(),
        );
        std::fs::write(&nvcc, script).expect("write nvcc");
        std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(dir.path().join("kern.cu"), "// the fixture's kernels\n").expect("src");
        let toml = format!(
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\n\n[toolchain]\ncuda = {:?}\n\n[kernels.kern]\nsource = \"kern.cu\"\nentries = [\"*\"]\nblock-size = {block_size}\n",
            cuda.display().to_string()
        );
        let project = parse(&dir.path().join(FILE_NAME), &toml).expect("project parses");
        let opts = BuildOptions {
            out_dir: Some(dir.path().join("out")),
            cache_dir: Some(dir.path().join("cache")),
            jobs: Some(1),
            keep_going: true,
            env: Env::empty(),
            ..BuildOptions::default()
        };
        let report = build(&project, &opts, &Seen::default()).expect("builds");
        let m = Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest"))
            .expect("parses");
        (report.failures, m, dir)
    };
    let (failures, m, _dir) = build_with("{ vadd = 512, \"fixed_*\" = 32, \"reduce_*\" = 128 }");
    assert!(failures.is_empty(), "{failures:?}");
    let block = |name: &str| match m.objects[0].resources.get(name) {
        Some(Resources::Cuda(c)) => c
            .occupancy
            .as_ref()
            .and_then(|o| Some((o.block_size?, o.block_size_from.clone()?))),
        _ => None,
    };
    assert_eq!(block("vadd"), Some((512, "block-size".to_string())));
    assert_eq!(block("fixed_block"), Some((32, "block-size".to_string())));
    assert_eq!(block("reduce_smem"), Some((128, "block-size".to_string())));
    // Not named: its own __launch_bounds__(64).
    assert_eq!(block("reqd64"), Some((64, "launch-bounds".to_string())));
    let (failures, m, _dir) = build_with("{ \"*_block\" = 32, \"fixed_*\" = 64 }");
    assert_eq!(failures.len(), 1);
    assert!(
        failures[0]
            .cause
            .contains("entry `fixed_block` matches `*_block` (32) and `fixed_*` (64)"),
        "{}",
        failures[0].cause
    );
    assert!(m.objects.is_empty());
}

/// Per target, the summary says how many kernels it built and why the rest are absent; the
/// manifest records the restrictions; a target left without objects is a warning, and an
/// error under `strict` (after the manifest is written).
#[test]
fn a_target_without_objects_warns_and_fails_under_strict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (project, mut opts) = project(dir.path(), &[("a", GOOD), ("b", GOOD), ("c", BROKEN)]);
    let mut project = project;
    // `a` and `b` are kept to compute_89; `c` fails everywhere: compute_90 gets nothing.
    let only_89 = vec!["compute_89".parse().expect("target")];
    project.kernels[0].targets = Some(only_89.clone());
    project.kernels[1].targets = Some(only_89);
    opts.targets = Some(vec![
        "compute_89".parse().expect("target"),
        "compute_90".parse().expect("target"),
    ]);
    opts.keep_going = true;
    let seen = Seen::default();
    let report = build(&project, &opts, &seen).expect("builds");
    let m = Manifest::from_json(&std::fs::read(&report.manifest_path).expect("manifest"))
        .expect("parses");
    assert_eq!(
        m.restricted.get("compute_90"),
        Some(&vec!["a".to_string(), "b".to_string()])
    );
    assert!(!m.restricted.contains_key("compute_89"));
    assert!(m.is_incomplete());
    let summary = seen
        .events
        .lock()
        .expect("lock")
        .iter()
        .find_map(|e| matches!(e, Event::Summary { .. }).then(|| e.line()))
        .flatten()
        .expect("a summary");
    assert!(
        summary.ends_with(
            "\nkbuild: per target: compute_89 2 of 3 kernels (1 failed), compute_90 0 of 3 kernels (2 restricted by Kbuild.toml, 1 failed)"
        ),
        "{summary}"
    );
    let notes = seen.notes.lock().expect("lock").clone();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("warning: target compute_90 built no object")),
        "{notes:?}"
    );
    assert!(
        !notes
            .iter()
            .any(|n| n.contains("target compute_89 built no")),
        "{notes:?}"
    );

    opts.strict = true;
    let err = build(&project, &opts, &Seen::default()).expect_err("strict refuses");
    assert!(matches!(err, BuildError::EmptyTargets { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("compute_90: 0 of 3 kernels (2 restricted by Kbuild.toml, 1 failed)"),
        "{text}"
    );
    assert!(report.manifest_path.is_file());
    // Every target with an object passes under strict.
    opts.targets = Some(vec!["compute_89".parse().expect("target")]);
    project.kernels.truncate(2);
    build(&project, &opts, &Seen::default()).expect("complete under strict");
}
