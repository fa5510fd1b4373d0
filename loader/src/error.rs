//! What can go wrong between a bundle on disk and a running kernel; every variant names the
//! file, kernel, target or field and, where there is one, the fix.

use std::path::PathBuf;

pub type Result<T, E = LoaderError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    // The cause is in the message (the C ABI's last error is the message alone), so it is
    // not also a source that a chain printer would repeat.
    #[error("{path}: {what}: {cause}")]
    Io {
        path: PathBuf,
        what: String,
        cause: std::io::Error,
    },
    #[error("{path}: {source}")]
    Manifest {
        path: PathBuf,
        #[source]
        source: kbuild_manifest::manifest::ManifestError,
    },
    #[error("{path}: {what}")]
    Package { path: PathBuf, what: String },
    /// A build directory's manifest records an object larger than the loader reads
    /// ([`crate::source::MAX_OBJECT_BYTES`]): refused before anything is allocated.
    #[error("{path}: the manifest records {size} bytes for this code object, over the loader's cap of {cap} bytes per object; refusing to read it")]
    ObjectTooLarge { path: PathBuf, size: u64, cap: u64 },
    /// The signature policy refused a bundle or pulled entry (`require` and no valid
    /// signature by a trusted key).
    #[error("{path}: {reason}")]
    Untrusted { path: PathBuf, reason: String },
    /// A load index (`manifest.kbi`, or the one encoded in memory from a manifest) that cannot
    /// be made or read.
    #[error("{path}: {source}")]
    Index {
        path: PathBuf,
        #[source]
        source: kbuild_manifest::load_index::LoadIndexError,
    },
    #[error("{origin}: object {index} is not in the manifest (it has {count})")]
    UnknownObject {
        origin: PathBuf,
        index: usize,
        count: usize,
    },
    #[error("{origin}: no object source (a package made from a manifest alone selects and explains; it cannot read {path})")]
    NoObjects { origin: PathBuf, path: String },
    #[error("device `{spec}`: {source}")]
    Device {
        spec: String,
        #[source]
        source: kbuild_manifest::target::TargetError,
    },
    #[error("no GPU found ({cuda}; {hip}); hint: pass --device TARGET (or KBUILD_DEVICE=TARGET) to explain for a simulated device")]
    NoDevice { cuda: String, hip: String },
    #[error("{0}")]
    NoMatch(Box<NoMatch>),
    #[error("kernel `{kernel}`{} is not in the manifest (it has: {known})", variant_text(.variant))]
    UnknownKernel {
        kernel: String,
        variant: Option<String>,
        known: String,
    },
    #[error("{object}: entry `{entry}` is not exported (it exports: {exports})")]
    UnknownEntry {
        object: String,
        entry: String,
        exports: String,
    },
    #[error("{path}: sha256 is {found}, the manifest says {expected}: the object was swapped or modified after the build; hint: rebuild or re-pull the bundle")]
    Sha256Mismatch {
        path: String,
        expected: String,
        found: String,
    },
    /// The bytes about to be handed to the driver are not the ones the build recorded.
    #[error("{path}: blake3 is {found}, the manifest says {expected}: the object was swapped or modified after the build; hint: rebuild or re-pull the bundle")]
    Blake3Mismatch {
        path: String,
        expected: String,
        found: String,
    },
    #[error("{object}: `{entry}` {field} is {loaded} after load, the manifest says {manifest}: stale or swapped artifact; hint: rebuild the bundle")]
    AttributeMismatch {
        object: String,
        entry: String,
        field: &'static str,
        loaded: i64,
        manifest: String,
    },
    #[error("device {device} is simulated (--device / KBUILD_DEVICE): selection and explain only, nothing can be loaded")]
    Simulated { device: String },
    #[error("{api} failed: {message}")]
    Runtime { api: String, message: String },
    #[error("launch of `{entry}`: {what}")]
    Launch { entry: String, what: String },
    /// A Triton launch asked of a kernel whose object has no launch record (a CUDA/HIP one).
    #[error("{kernel}: not a Triton kernel (its object has no launch record)")]
    NotTriton { kernel: String },
    /// Arguments that do not fit the entry's parameters (refused before the driver).
    #[error(transparent)]
    Args(Box<LaunchError>),
    #[error(transparent)]
    HipNotFound(#[from] HipNotFound),
    /// A string handed to the driver (an entry name) or out through the C ABI.
    #[error("{what} has a NUL byte")]
    NulByte { what: String },
    /// An argument of the C ABI.
    #[error("{name} {problem}")]
    Argument { name: String, problem: &'static str },
    #[error("the {what} was poisoned by a panic in another thread")]
    Poisoned { what: &'static str },
    /// `--device-index` / `index` past the devices found.
    #[error("device index {index} out of range ({found} detected)")]
    DeviceIndex { index: usize, found: usize },
    /// A detected device kbuild cannot target (an unknown architecture).
    #[error("{arch} ({name}): {note}")]
    UnsupportedDevice {
        arch: String,
        name: String,
        note: String,
    },
}

impl From<LaunchError> for LoaderError {
    fn from(e: LaunchError) -> LoaderError {
        LoaderError::Args(Box::new(e))
    }
}

fn variant_text(v: &Option<String>) -> String {
    v.as_ref()
        .map(|v| format!(" (variant `{v}`)"))
        .unwrap_or_default()
}

/// Why a device's targets could not be picked from a manifest ([`crate::pick_targets`]).
#[derive(Debug, thiserror::Error)]
pub enum PickError {
    /// The manifest cannot be indexed.
    #[error(transparent)]
    Package(#[from] LoaderError),
    /// Kernels nothing in the manifest runs on (never empty); the message is the first's.
    #[error("{}", .0.first().map(ToString::to_string).unwrap_or_default())]
    NoMatch(Vec<NoMatch>),
}

/// No object of a kernel runs on the device: who, what there is, and how to get one.
#[derive(Debug, Clone)]
pub struct NoMatch {
    pub kernel: String,
    pub variant: Option<String>,
    pub device: String,
    /// The targets the manifest has for this kernel.
    pub available: Vec<String>,
    /// The target to build so that it runs (`gfx1151`, `sm_90`).
    pub build_target: String,
    /// Other targets that run on the device (`sm_80` SASS, `compute_86` PTX,
    /// `gfx11-generic`), each with why.
    pub also: Vec<(String, String)>,
    /// The device vendor's targets other kernels of the bundle have while this one has none:
    /// the build skipped it there (restricted or failed), so no `--targets` adds it.
    pub restricted: Vec<String>,
    /// Why the build made none for the device vendor's targets, as its manifest records it
    /// (`Kbuild.toml keeps it off gfx1100`, `its compile failed for gfx1100`); empty when the
    /// manifest was not read.
    pub absent: Vec<String>,
}

impl std::fmt::Display for NoMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let available = if self.available.is_empty() {
            "none".to_string()
        } else {
            self.available.join(", ")
        };
        write!(
            f,
            "no code object of kernel `{}`{} runs on {} (the bundle has: {available}); hint: ",
            self.kernel,
            variant_text(&self.variant),
            self.device,
        )?;
        if !self.absent.is_empty() {
            return write!(
                f,
                "the build made none: {}; so another `--targets` does not add it: lift the restriction or fix that compile first",
                self.absent.join("; ")
            );
        }
        if !self.restricted.is_empty() {
            return write!(
                f,
                "the build made {} for other kernels but none for this one: its Kbuild.toml `targets` restricts it (or its compile failed there), so another `--targets` does not add it; lift the restriction or fix that compile first",
                self.restricted.join(", ")
            );
        }
        write!(f, "build it with `kbuild --targets {}`", self.build_target)?;
        if !self.also.is_empty() {
            let also: Vec<String> = self
                .also
                .iter()
                .map(|(t, why)| format!("`{t}` ({why})"))
                .collect();
            write!(f, "; also runs here: {}", also.join(", "))?;
        }
        Ok(())
    }
}

impl LoaderError {
    pub(crate) fn io(path: impl Into<PathBuf>, what: &str, source: std::io::Error) -> Self {
        LoaderError::Io {
            path: path.into(),
            what: what.to_string(),
            cause: source,
        }
    }

    pub(crate) fn runtime(api: &str, message: impl Into<String>) -> Self {
        LoaderError::Runtime {
            api: api.to_string(),
            message: message.into(),
        }
    }
}

/// Why no HIP runtime could be opened.
#[derive(Debug, Clone, thiserror::Error)]
#[error("HIP runtime not found (tried {})", .tried.join(", "))]
pub struct HipNotFound {
    pub tried: Vec<String>,
}

/// A launch whose arguments do not fit the entry's parameters; the driver never saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("{kernel}: {given} argument{} given, the kernel takes {expected}{}", plural(*.given), hidden_note(*.hidden))]
    Count {
        kernel: String,
        expected: usize,
        given: usize,
        /// Hidden parameters the runtime passes (not counted in `expected`).
        hidden: u32,
    },
    #[error("{kernel}: argument {index} is {given} bytes, the kernel takes {expected} ({param})")]
    Size {
        kernel: String,
        index: usize,
        given: usize,
        expected: u64,
        /// The parameter: `int n`, `int`, or its kind (`value`).
        param: String,
    },
    #[error("{kernel}: argument {index} is a {given}, the kernel takes a {expected} ({param})")]
    Kind {
        kernel: String,
        index: usize,
        given: &'static str,
        expected: &'static str,
        param: String,
    },
    /// An untyped value ([`crate::launch::LooseArg`]) whose kind or C type the parameter's
    /// C type refuses (`given`, `expected`: `a float`, `an integer`).
    #[error("{kernel}: argument {index} is {given}, the kernel takes {expected} ({param})")]
    Type {
        kernel: String,
        index: usize,
        given: String,
        expected: &'static str,
        param: String,
    },
    /// An untyped number for a parameter of a size no number of its kind has (`given`:
    /// `an int`, `a float`).
    #[error("{kernel}: argument {index} is {given}, the kernel takes {size} bytes ({param})")]
    Width {
        kernel: String,
        index: usize,
        given: &'static str,
        size: u64,
        param: String,
    },
    /// An integer outside the range of its parameter's size.
    #[error("{kernel}: argument {index} is {value}, which does not fit in the kernel's {size} bytes ({param})")]
    Range {
        kernel: String,
        index: usize,
        value: i128,
        size: u64,
        param: String,
    },
    /// An integer for a pointer parameter that is no address of it.
    #[error("{kernel}: argument {index} is {value}, not an address for the kernel's {size}-byte pointer ({param})")]
    NotAnAddress {
        kernel: String,
        index: usize,
        value: i128,
        size: u64,
        param: String,
    },
    /// A Triton kernel's arguments, counted against its launch record (its parameters less the
    /// scratch pointers kbuild passes).
    #[error("{kernel}: {given} argument{} given, the kernel takes {expected} ({names})", plural(*.given))]
    TritonCount {
        kernel: String,
        given: usize,
        expected: usize,
        names: String,
    },
    /// A value the object was compiled to assume divisible by 16 (Triton's specialization of
    /// a pointer's address or an int) that is not.
    #[error("{kernel}: argument `{name}` ({ty}): its {what} {value:#x} is not a multiple of 16, which this build of the kernel assumes")]
    NotDivisible {
        kernel: String,
        name: String,
        ty: String,
        /// `address` or `value`.
        what: &'static str,
        value: u64,
    },
    #[error("{kernel}: argument {index} ({size} bytes, {align}-byte aligned) would be at offset {at}, the kernel has it at {offset} ({param})")]
    Offset {
        kernel: String,
        index: usize,
        size: usize,
        align: usize,
        at: u64,
        offset: u64,
        param: String,
    },
}

impl LaunchError {
    /// The error of a check given only the caller-visible parameters (as the load index
    /// carries them), with the count of the hidden ones the entry also has.
    pub fn with_hidden(mut self, n: u32) -> LaunchError {
        if let LaunchError::Count { hidden, .. } = &mut self {
            *hidden = hidden.saturating_add(n);
        }
        self
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn hidden_note(hidden: u32) -> String {
    if hidden == 0 {
        String::new()
    } else {
        format!(" (and {hidden} hidden the runtime passes)")
    }
}
