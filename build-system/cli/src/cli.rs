//! The command line's types: every subcommand, flag and value parser of `kbuild`, and nothing
//! else. `main.rs` dispatches each command to its module under `commands/`.

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand};
use kbuild_build::remote_cache::RemoteMode;
use kbuild_build::shard::ShardSpec;
use kbuild_bundle::sign::Policy;
use kbuild_manifest::compat::{parse_version, Device};
use kbuild_manifest::target::{parse_target_spec, TargetError, Version};
use kbuild_report::diff::gate::{self, Rule};

/// Ahead-of-time GPU kernel builds: every kernel, every target, cached.
#[derive(Parser)]
#[command(name = "kbuild", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Only errors and warnings: no progress bar, no per-job lines, no summary.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also print every job's line and each compile as it starts (a bar prints them above).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(flatten)]
    pub build: BuildArgs,
}

/// `-q`/`-v` given before a command's name (`kbuild -q inspect X`) are moved after it: the
/// top level also takes the default command's (build's) flags, so clap alone would read
/// them as build's and refuse the command.
pub fn verbosity_after_command(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let is_verbosity =
        |a: &std::ffi::OsString| matches!(a.to_str(), Some("-q" | "--quiet" | "-v" | "--verbose"));
    let lead = args.iter().skip(1).take_while(|a| is_verbosity(a)).count();
    let Some(name) = args.get(1 + lead).and_then(|a| a.to_str()) else {
        return args;
    };
    let cmd = <Cli as clap::CommandFactory>::command();
    let is_command = cmd
        .get_subcommands()
        .any(|c| c.get_name() == name || c.get_all_aliases().any(|a| a == name));
    if lead > 0 && is_command {
        let flags: Vec<_> = args.drain(1..1 + lead).collect();
        let at = 2.min(args.len());
        args.splice(at..at, flags);
    }
    args
}

/// `kbuild diff --help`: what its exit status means.
const DIFF_EXIT_CODES: &str = "Exit status:
  0  the diff was made and no gate tripped (or none was given)
  1  a --fail-on gate tripped (an expired allowlist entry counts as tripped)
  2  no diff was made: bad input or usage (a file that does not exist or cannot be read, bad
     JSON, not a kbuild manifest/bundle/baseline, a broken allowlist, an unknown git revision,
     a side that does not build, a bad flag)
  141  stdout was closed before the report was written (`kbuild diff … | head`), as for
     every command";

/// `kbuild explain --help`: what its exit status means.
const EXPLAIN_EXIT_CODES: &str = "Exit status:
  0  every kernel has a code object that runs on the device
  1  no match: some kernel has none (each named on stderr)
  2  bad input or usage: the build, manifest or bundle cannot be read or is malformed, its
     signature is refused, an unknown --kernel, no device detected, a bad flag";

#[derive(Subcommand)]
pub enum Command {
    /// Build every kernel × variant × target (the default command).
    Build(BuildArgs),
    /// Write a first Kbuild.toml for a tree of kernels: finds its *.cu/*.hip files, takes
    /// include dirs, defines and -std from compile_commands.json (and -I/-D/--cuda-flag), and
    /// builds each once per vendor to list the kernels it exports.
    Init(InitArgs),
    /// Resource-usage and launch-ABI diff (registers, LDS, scratch, spills, occupancy, sizes,
    /// kernel parameters) of two builds
    /// (each a manifest, build output dir, bundle or baseline), or of the working tree against
    /// a git revision; `--fail-on` makes it a CI gate (exit 1).
    #[command(after_help = DIFF_EXIT_CODES)]
    Diff(DiffArgs),
    /// Markdown release notes of NEW against PREV (usually NAME@VERSION in --registry): added
    /// and removed targets and kernels, resource regressions and improvements, launch-ABI
    /// changes, sizes per target. Exit 2 when a side cannot be read.
    ReleaseNotes(ReleaseNotesArgs),

    /// The committed resource baseline (kernels/resources.json).
    #[command(subcommand)]
    Baseline(BaselineCommand),
    /// List the GPUs the CUDA driver and the HIP runtime report (none is a normal answer).
    Devices {
        /// `kbuild.devices/v1` JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Which code object of a build runs on a device (detected or simulated), with the rule
    /// that accepted or rejected every candidate; exit 1 when a kernel has none.
    #[command(after_help = EXPLAIN_EXIT_CODES)]
    Explain(ExplainArgs),
    /// Package a build into a deterministic bundle dist/NAME-VERSION.kbundle (tar+zstd,
    /// manifest.json first, objects once by sha256).
    Package(PackageArgs),
    /// Publish a bundle to a registry (a directory or oci://HOST[:PORT]/REPO).
    Publish(PublishArgs),
    /// Fetch a version (semver requirement) and only the targets a device runs; verify,
    /// cache, write Kbuild.lock.
    Pull(PullArgs),
    /// List cached and published versions.
    Ls(LsArgs),
    /// Make an ed25519 signing key pair.
    Keygen(KeygenArgs),
    /// Sign a bundle file or a published version.
    Sign(SignArgs),
    /// Run a workload over the project's kernels through the loader (`kbuild run gdn`).
    #[cfg(feature = "engine")]
    #[command(subcommand)]
    Run(RunCommand),
    /// Show the resources (registers, shared/LDS, stack/scratch, spills, occupancy) of code
    /// objects: cubins, hsaco, PTX, fatbins, offload bundles, host ELF files with device code,
    /// and of everything kbuild writes: build output dirs, manifest.json, bundles (.kbundle).
    /// Exit 1 when any path could not be read (the others still print).
    Inspect {
        /// Code objects, containers, build output dirs, manifest.json files or bundles.
        #[arg(required = true, value_name = "PATH")]
        files: Vec<PathBuf>,
        /// `kbuild.inspect/v1` JSON on stdout; a path that could not be read is in `errors`.
        #[arg(long)]
        json: bool,
        /// Threads per block for occupancy (default: the kernel's launch bounds / AMD
        /// max_flat_workgroup_size; without one, CUDA occupancy is unknown).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
        block_size: Option<u32>,
    },
    /// List or install toolchains.
    #[command(subcommand)]
    Toolchain(ToolchainCommand),
    /// Remove the build output (and with --cache, the compile cache).
    Clean(CleanArgs),
}

/// Arguments of `kbuild clean`.
#[derive(Args)]
#[command(mut_arg("manifest_path", |a| a.value_name("MANIFEST_PATH")))]
pub struct CleanArgs {
    #[command(flatten)]
    pub project: ManifestPath,
    /// The output directory to remove (default: the project's out-dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also empty the content-addressed compile cache.
    #[arg(long)]
    pub cache: bool,
}

#[derive(Subcommand)]
pub enum BaselineCommand {
    /// Rebuild and rewrite the baseline (a --targets subset replaces only those targets).
    Update(BaselineUpdateArgs),
}

#[derive(Subcommand)]
pub enum ToolchainCommand {
    /// Show each toolchain's path, version and the catalogue targets it can build.
    List(ToolchainListArgs),
    /// Install a toolchain (CUDA and HIP when none is named). Idempotent.
    Install {
        /// `cuda`, `hip` or `triton` (the pinned Triton wheel, for Triton kernels); default:
        /// cuda and hip.
        #[arg(value_parser = ["cuda", "hip", "triton"])]
        which: Option<String>,
    },
}

/// Arguments of `kbuild toolchain list`.
#[derive(Args)]
#[command(mut_arg("manifest_path", |a| a.value_name("MANIFEST_PATH").help(
    "Path to Kbuild.toml, for its [toolchain] settings (default: found from the current directory, if any)"
)))]
pub struct ToolchainListArgs {
    /// `kbuild.toolchains/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub project: ManifestPath,
}

/// `--targets`, declared once; commands that read it otherwise say so with `mut_arg`.
#[derive(Args, Debug, Default, Clone)]
pub struct Targets {
    /// Targets: names (sm_89, gfx1100, gfx90a:xnack-, compute_90), groups (ampere, rdna3, all),
    /// or TORCH_CUDA_ARCH_LIST syntax (8.0;8.9;9.0+PTX); `-TARGET` excludes one (all,-gfx950).
    /// `all` is every target the found toolchains can build. Repeatable. Default: the
    /// project's list.
    #[arg(long, value_name = "LIST", value_parser = parse_targets, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub targets: Vec<String>,
}

/// `--manifest-path`, declared once; commands that use it otherwise say so with `mut_arg`.
#[derive(Args, Debug, Default, Clone)]
pub struct ManifestPath {
    /// Path to Kbuild.toml (default: found from the current directory).
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
}

/// The help of `--manifest-path` where it only finds the default out-dir.
const OUT_DIR_MANIFEST: &str = "Manifest path used to find the default out-dir";

/// `--driver` and `--no-generic`: what a simulated device's runtime loads.
#[derive(Args, Debug, Default, Clone)]
pub struct SimulatedDevice {
    /// CUDA driver version of a simulated NVIDIA device (default: the newest kbuild knows).
    #[arg(long, value_name = "VERSION", value_parser = parse_driver)]
    pub driver: Option<Version>,
    /// A simulated AMD device's runtime does not load generic (code object v6) objects.
    #[arg(long)]
    pub no_generic: bool,
}

#[derive(Args, Default)]
pub struct BuildArgs {
    #[command(flatten)]
    pub targets: Targets,
    #[command(flatten)]
    pub project: ManifestPath,
    /// Output directory (default: the project's out-dir).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Parallel compiles (default: number of cores; a make/cargo jobserver is honoured).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Keep building other jobs after a failure.
    #[arg(long)]
    pub keep_going: bool,
    /// A requested target that ends with no object (every kernel failed there, or
    /// Kbuild.toml's `targets` keep them all off it) is an error, not a warning.
    #[arg(long)]
    pub strict: bool,
    /// Also write one fatbin per CUDA kernel and one offload bundle per HIP kernel.
    #[arg(long)]
    pub fat: bool,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
    /// Kill a compile that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub job_timeout: Option<u64>,
    /// Print each job's compile command as a JSON line instead of building.
    #[arg(long)]
    pub print_commands: bool,
    /// Prefix every compiler command with this launcher (`sccache`, a wrapper); overrides
    /// Kbuild.toml `launcher` and KBUILD_LAUNCHER. It is part of no cache key.
    #[arg(long, value_name = "CMD")]
    pub launcher: Option<String>,
    /// Fetch cache entries another machine compiled from this OCI repository
    /// (oci://HOST[:PORT]/REPO; overrides Kbuild.toml `remote-cache`). Never fails a build.
    #[arg(long, value_name = "URL")]
    pub remote_cache: Option<String>,
    /// `read` (default) or `read-write` (also upload what this build compiles).
    #[arg(long, value_name = "MODE", value_parser = clap::value_parser!(RemoteMode))]
    pub remote_cache_mode: Option<RemoteMode>,
    /// Talk to the remote cache over http:// (a local test registry).
    #[arg(long)]
    pub plain_http: bool,
    /// After building, fail (exit 1, printing the diff) if the resources drifted from the
    /// committed baseline (default: resources.json next to Kbuild.toml).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    pub check_baseline: Option<Option<PathBuf>>,
    /// Build only shard I of N (1-based): the resolved target list is split by estimated cost
    /// into N disjoint shards, the same on every machine. Package each shard build, then join
    /// the bundles with `kbuild package --merge`.
    #[arg(long, value_name = "I/N", value_parser = ShardSpec::from_str, conflicts_with = "print_shards")]
    pub shard: Option<ShardSpec>,
    /// Print how N shards would split the resolved target list (each shard's targets and
    /// estimated cost; `kbuild.shards/v1` JSON with --json) instead of building.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub print_shards: Option<u32>,
    #[cfg(feature = "remote-exec")]
    #[command(flatten)]
    pub remote_exec: kbuild_remote_exec::RemoteExecArgs,
}

/// Arguments of `kbuild init`.
#[derive(Args, Debug, Default)]
#[command(mut_arg("targets", |a| a.help(
    "`[build] targets` of the new file (names, groups, TORCH_CUDA_ARCH_LIST syntax, `-TARGET` excludes); discovery builds one of them per vendor. Default: common targets of each vendor whose toolchain was found"
)))]
pub struct InitArgs {
    /// The directory to scan and to write Kbuild.toml into (default: the current directory).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub targets: Targets,
    /// Replace an existing Kbuild.toml (refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// An include dir, relative to DIR, written to `include-dirs` and used by discovery (after
    /// those of compile_commands.json). Repeatable.
    #[arg(short = 'I', long = "include-dir", value_name = "DIR")]
    pub include_dirs: Vec<String>,
    /// A define NAME or NAME=VALUE, written to `defines` and used by discovery. Repeatable.
    #[arg(short = 'D', long = "define", value_name = "NAME[=VALUE]")]
    pub defines: Vec<String>,
    /// An nvcc flag for `[build.flags] cuda` (`--cuda-flag=-use_fast_math`). Repeatable.
    #[arg(long = "cuda-flag", value_name = "FLAG", allow_hyphen_values = true)]
    pub cuda_flags: Vec<String>,
    /// A hip-clang flag for `[build.flags] hip`. Repeatable.
    #[arg(long = "hip-flag", value_name = "FLAG", allow_hyphen_values = true)]
    pub hip_flags: Vec<String>,
    /// `kbuild.init/v1` JSON on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `kbuild explain`.
#[derive(Args, Debug, Default)]
#[command(mut_arg("manifest_path", |a| a.help(OUT_DIR_MANIFEST)))]
pub struct ExplainArgs {
    /// A build directory (holding manifest.json) or a manifest file. Default: the project's
    /// out-dir.
    #[arg(value_name = "BUNDLE|DIR|MANIFEST")]
    pub path: Option<PathBuf>,
    /// `auto` (detect) or a target to simulate: sm_90, 9.0, gfx1151, gfx90a:sramecc+:xnack-.
    #[arg(long, value_name = "auto|TARGET", env = "KBUILD_DEVICE", value_parser = parse_device)]
    pub device: Option<String>,
    #[command(flatten)]
    pub simulated: SimulatedDevice,
    /// Only this kernel.
    #[arg(long, value_name = "NAME")]
    pub kernel: Option<String>,
    /// `kbuild.explain/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub project: ManifestPath,
    /// The signature policy for a bundle (its `.sig` file beside it), as at pull.
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// Registry flags shared by publish, pull, ls and sign.
#[derive(Args, Debug, Default, Clone)]
pub struct RegistryArgs {
    /// DIR, file://DIR or oci://HOST[:PORT]/REPO (default: kbuild's local registry in the XDG
    /// data dir).
    #[arg(long, value_name = "REG", env = "KBUILD_REGISTRY")]
    pub registry: Option<String>,
    /// Talk plain HTTP to an OCI registry (no TLS), as ORAS's --plain-http.
    #[arg(long)]
    pub plain_http: bool,
    /// Upload chunk size in bytes (OCI).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20, hide = true)]
    pub chunk_size: usize,
    /// Retries on 5xx/429/timeouts (OCI), with exponential backoff.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub retries: u32,
}

/// Signature flags shared by pull and publish.
#[derive(Args, Debug, Default, Clone)]
pub struct TrustArgs {
    /// require | warn | off (default: [signatures] policy in the kbuild config, else warn).
    #[arg(long, value_name = "POLICY", env = "KBUILD_SIGNATURE_POLICY", value_parser = Policy::from_str)]
    pub signature_policy: Option<Policy>,
    /// A trusted public key file (.pub), besides those in the kbuild config. Repeatable.
    #[arg(long = "trusted-key", value_name = "PATH")]
    pub trusted_keys: Vec<PathBuf>,
}

#[derive(Args, Debug)]
#[command(mut_arg("targets", |a| a.help(
    "Only these targets (names, groups, TORCH_CUDA_ARCH_LIST syntax, `-TARGET` excludes). Repeatable"
)))]
pub struct PackageArgs {
    /// A build output directory (holding manifest.json). Default: build the project (through
    /// the cache) first, then package its out-dir.
    #[arg(value_name = "BUILD_DIR")]
    pub build_dir: Option<PathBuf>,
    #[command(flatten)]
    pub targets: Targets,
    /// Where bundles go.
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub out: PathBuf,
    /// Also write one bundle per target.
    #[arg(long)]
    pub split: bool,
    /// Keep every file at most SIZE (2GiB, 500MiB, 1.5GB, bytes), for release-asset limits:
    /// when the bundle is larger, write one bundle per target family (NAME-VERSION.sm_9x.kbundle,
    /// ...; a family still too large split by target) and the index NAME-VERSION.kbindex that
    /// `kbuild pull` reads, instead of the whole bundle. See docs/release.md.
    #[arg(long, value_name = "SIZE", value_parser = kbuild_bundle::assets::parse_size, conflicts_with = "split")]
    pub max_asset_size: Option<u64>,
    /// Rebuild from scratch (fresh cache, fresh out-dir), package again, and compare bytes.
    #[arg(long)]
    pub verify_reproducible: bool,
    /// Package a build with failed or missing objects (refused otherwise); the bundle's
    /// manifest is marked `partial`, and pull and explain show it.
    #[arg(long)]
    pub allow_partial: bool,
    #[command(flatten)]
    pub project: ManifestPath,
    /// `kbuild.package/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Join the bundles of a sharded build (`kbuild build --shard I/N`, then `kbuild package`
    /// on each runner) into the release bundle NAME-VERSION.kbundle in --out: byte-identical to
    /// packaging one build of every target. Refused when they are of different sources, hold
    /// different bytes for one object, or leave a declared target out (--allow-partial).
    #[arg(long, value_name = "BUNDLE", num_args = 1.., conflicts_with_all = ["build_dir", "targets", "split", "verify_reproducible"])]
    pub merge: Vec<PathBuf>,
}

#[derive(Args, Debug)]
#[command(mut_arg("manifest_path", |a| a.help(
    "Path to Kbuild.toml, to find the default bundle (default: found from the current directory)"
)))]
pub struct PublishArgs {
    /// The bundle (default: dist/NAME-VERSION.kbundle of the project here). Its `.sig` file,
    /// when present, is published too.
    #[arg(value_name = "BUNDLE")]
    pub bundle: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Publish a partial bundle (`package --allow-partial`; refused otherwise). Published
    /// versions are immutable.
    #[arg(long)]
    pub allow_partial: bool,
    #[command(flatten)]
    pub project: ManifestPath,
    /// `kbuild.publish/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// NAME, NAME@1.2.3 (exact), NAME@^1.2 (semver requirement) or NAME@sha256:... (digest);
    /// or the path of a split release's index (NAME-VERSION.kbindex, from `package
    /// --max-asset-size`): then only the parts beside it that the device needs are read.
    #[arg(value_name = "NAME[@REQ]|INDEX")]
    pub spec: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Fetch only what this device would load: `auto` (detect) or a target to simulate
    /// (sm_90, 9.0, gfx1151, gfx90a:xnack-). Default: every target.
    #[arg(long, value_name = "auto|TARGET")]
    pub device: Option<String>,
    #[command(flatten)]
    pub simulated: SimulatedDevice,
    /// Refuse anything that differs from Kbuild.lock.
    #[arg(long)]
    pub locked: bool,
    /// Accept what the registry resolves even when Kbuild.lock disagrees (the locked
    /// version's digests changed, or an older version than the locked one), and rewrite the
    /// entry. Without it, a plain pull refuses both.
    #[arg(long, conflicts_with = "locked")]
    pub update: bool,
    /// Serve from the local cache only.
    #[arg(long)]
    pub offline: bool,
    /// The lockfile (default: ./Kbuild.lock).
    #[arg(long, value_name = "PATH", default_value = kbuild_registry::lock::FILE_NAME)]
    pub lockfile: PathBuf,
    /// Also write the pulled (subset) bundle and its signatures here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// `kbuild.pull/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// A package name (default: every cached package; for a directory registry, all).
    pub name: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Only what is cached locally.
    #[arg(long)]
    pub offline: bool,
    /// `kbuild.ls/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Directory for NAME.key (secret, mode 0600) and NAME.pub (default: the kbuild config
    /// dir's keys/).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Base name of the key files.
    #[arg(long, default_value = "kbuild")]
    pub name: String,
    /// Replace existing key files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct SignArgs {
    /// A bundle file (writes BUNDLE.sig), or NAME@VERSION in --registry.
    #[arg(value_name = "BUNDLE|REF")]
    pub target: String,
    /// The secret key (default: KBUILD_SIGNING_KEY, else the key `kbuild keygen` made).
    #[arg(long, value_name = "PATH", env = "KBUILD_SIGNING_KEY")]
    pub key: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `kbuild run WORKLOAD`.
#[cfg(feature = "engine")]
#[derive(Subcommand, Debug)]
pub enum RunCommand {
    /// Gated DeltaNet decode/verify/commit over the GDN kernels: parity against the fp64
    /// reference (--check, the default) and a benchmark (--bench).
    Gdn(GdnArgs),
}

#[cfg(feature = "engine")]
/// Arguments of `kbuild run gdn`.
#[derive(Args, Debug)]
#[command(mut_arg("manifest_path", |a| a.help(OUT_DIR_MANIFEST)))]
pub struct GdnArgs {
    /// The kernels: a build directory (holding manifest.json), a manifest or a bundle.
    /// Default: the project's out-dir.
    #[arg(long, value_name = "DIR|MANIFEST|BUNDLE")]
    pub bundle: Option<PathBuf>,
    /// The signature policy for a bundle, as at pull.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Layers of the stack (the production geometry has 36).
    #[arg(long, value_name = "N", default_value_t = 36, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub layers: u32,
    /// Window sizes T to check and benchmark (each 1..=8).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2,4,8"
    )]
    pub tokens: Vec<usize>,
    /// Parity verdicts against the fp64 reference, and bitwise between paths (exit 1 on a failure).
    #[arg(long)]
    pub check: bool,
    /// The benchmark table: forward unfused/fused per T, commit per-layer/batched per n.
    #[arg(long)]
    pub bench: bool,
    /// One JSON document (`kbuild.run-gdn/v1`) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Seeds of the generated inputs for --check.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2,3"
    )]
    pub seeds: Vec<u64>,
    /// Inputs from a safetensors file instead of the seeded generator (layout: kbuild-engine's
    /// inputs module); the trajectory takes its tokens from it too.
    #[arg(long, value_name = "FILE", conflicts_with = "dump_inputs")]
    pub inputs: Option<PathBuf>,
    /// Steps of the --check decode trajectory (forward 1, commit 1); 0 skips it.
    #[arg(long, value_name = "STEPS", default_value_t = 256)]
    pub trajectory: usize,
    /// Commit sizes n for --bench.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2,3,4,5"
    )]
    pub commits: Vec<usize>,
    /// Timed graph replays per --bench row.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Write the first seed's inputs and the fp64 reference of a full window to a safetensors
    /// file (for a side-by-side run elsewhere) and exit; needs no GPU.
    #[arg(long, value_name = "FILE")]
    pub dump_inputs: Option<PathBuf>,
    #[command(flatten)]
    pub project: ManifestPath,
}

pub fn parse_fail_on(s: &str) -> Result<FailOn, gate::GateRuleError> {
    gate::parse_rules(s).map(FailOn)
}

/// One `--targets` value, checked item by item (exclusions may refer to other occurrences,
/// so emptiness is judged on all of them together: `parse_target_lists`).
pub fn parse_targets(s: &str) -> Result<String, TargetError> {
    parse_target_spec(s).map(|_| s.to_string())
}

/// A parsed `--fail-on` value.
#[derive(Clone)]
pub struct FailOn(pub Vec<Rule>);

pub fn parse_device(s: &str) -> Result<String, String> {
    if s == "auto" {
        return Ok(s.to_string());
    }
    Device::parse(s, None, None)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

pub fn parse_driver(s: &str) -> Result<Version, String> {
    parse_version(s).ok_or_else(|| format!("`{s}` is not a CUDA version like 13.0"))
}

/// Arguments of `kbuild release-notes`.
#[derive(Args)]
pub struct ReleaseNotesArgs {
    /// The previous release: NAME@VERSION (NAME@REQ, NAME@sha256:...) in --registry, or a
    /// build dir, manifest or bundle.
    pub prev: PathBuf,
    /// This release: a build dir, manifest or bundle, or NAME@VERSION.
    pub next: PathBuf,
    /// Where a NAME@VERSION side is published.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Write the notes to this file (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Arguments of `kbuild diff`.
#[derive(Args)]
#[command(mut_arg("targets", |a| a.help(
    "With --base: targets of both builds (default: each side's project list). Repeatable"
)))]
#[command(mut_arg("manifest_path", |a| a.help("With --base: path to Kbuild.toml")))]
pub struct DiffArgs {
    /// The base side: a build dir, manifest, bundle or baseline, or NAME@VERSION (NAME@REQ,
    /// NAME@sha256:...) published in --registry, of which only the manifest is fetched.
    #[arg(required_unless_present = "base", conflicts_with = "base")]
    pub old: Option<PathBuf>,
    /// The head side (the same kinds as OLD).
    #[arg(required_unless_present = "base", conflicts_with = "base")]
    pub new: Option<PathBuf>,
    /// Where a NAME@VERSION side is published.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Build this git revision in a temporary worktree and diff it with the working tree.
    #[arg(long, value_name = "GIT_REV")]
    pub base: Option<String>,
    /// Report format: text, md (a PR comment) or json.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Gate rules: spills, occupancy, registers:+N, registers:+N%, lds:+N, scratch, size:+N
    /// (bytes) or size:+N% (each object, each target's objects, the whole package), removed (a
    /// kernel or target is gone, renamed ones included), abi (a kernel's launch parameters
    /// changed, or it was removed or renamed).
    #[arg(long, value_name = "RULES", value_parser = parse_fail_on)]
    pub fail_on: Option<FailOn>,
    /// Also write the whole report as markdown to FILE (atomically): `--format md` is a PR
    /// comment, capped to fit GitHub's limit, which shows the first rows of long lists only.
    #[arg(long, value_name = "FILE")]
    pub full_report: Option<PathBuf>,
    /// Allowlist of known cases (kbuild-allow.toml).
    #[arg(long, value_name = "FILE")]
    pub allow: Option<PathBuf>,
    #[command(flatten)]
    pub targets: Targets,
    #[command(flatten)]
    pub project: ManifestPath,
    /// With --base: parallel compiles (default: number of cores).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
}

/// Arguments of `kbuild baseline update`.
#[derive(Args)]
#[command(mut_arg("targets", |a| a.help(
    "Targets to rebuild (names, groups, `-TARGET` excludes; default: the project's list). Repeatable"
)))]
pub struct BaselineUpdateArgs {
    #[command(flatten)]
    pub targets: Targets,
    #[command(flatten)]
    pub project: ManifestPath,
    /// The baseline file (default: resources.json next to Kbuild.toml).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Take the resources from this build output dir or manifest instead of building.
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
    /// Parallel compiles (default: number of cores).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
}

/// Report format of `kbuild diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// GitHub markdown (a PR comment).
    #[value(name = "md", alias = "markdown")]
    Markdown,
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `kbuild -q inspect X` parses as `kbuild inspect -q X`; build's own use of the top level
    /// (`kbuild -q --targets sm_89`) and a value after a flag are left alone.
    #[test]
    fn verbosity_before_a_command_moves_after_its_name() {
        let parse = |argv: &[&str]| {
            let args = verbosity_after_command(argv.iter().map(std::ffi::OsString::from));
            Cli::try_parse_from(args).map_err(|e| e.to_string())
        };
        let cli = parse(&["kbuild", "-q", "inspect", "x.cubin"]).expect("-q before inspect");
        assert!(cli.quiet && matches!(cli.command, Some(Command::Inspect { .. })));
        let cli = parse(&["kbuild", "--verbose", "build", "--targets", "sm_89"]).expect("-v");
        assert!(cli.verbose && matches!(cli.command, Some(Command::Build(_))));
        let cli = parse(&["kbuild", "-q", "--targets", "sm_89"]).expect("default command");
        assert!(cli.quiet && cli.command.is_none());
        let cli = parse(&["kbuild", "inspect", "-q", "x.cubin"]).expect("after the name");
        assert!(cli.quiet);
        assert!(
            parse(&["kbuild", "-q", "-v", "inspect", "x"]).is_err(),
            "-q with -v"
        );
    }

    /// Every option, flag and positional of every (sub)command says what it does in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                let has_help = arg
                    .get_help()
                    .or(arg.get_long_help())
                    .is_some_and(|h| !h.to_string().trim().is_empty());
                if !has_help {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{path} {} (no about)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kbuild", &mut missing);
        assert!(
            missing.is_empty(),
            "arguments without help text:\n{}",
            missing.join("\n")
        );
    }
}
