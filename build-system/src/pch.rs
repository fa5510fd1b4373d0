//! The compat header, precompiled once per AMD target and flag set.
//!
//! Reading `kcompat.h` and the HIP and C++ headers under it is most of a small kernel's
//! hip-clang compile (about 0.5 s of 0.65 s); a build precompiles it (`-emit-pch`) the first
//! time a compile needs it and lets every compile of the same command load it
//! (`-include-pch`). An accelerator only: the object, the compiler's log and the dependency
//! list are the plain compile's (the end-to-end tests compare them byte for byte), the action
//! key leaves it out, and a compile that fails with it runs again without it, so a failure
//! shows the plain command's output.
//!
//! Kept between builds in the cache (`<cache>/pch/KEY/`: the header, its empty source and the
//! list of files it was read from with their size, mtime and blake3), so a rebuild of one AMD
//! kernel does not precompile again. A stored header is used only while every file it was read
//! from is as it was (what clang checks by size and mtime, and its content); otherwise it is
//! built again in its place.
//!
//! Not used through a launcher (a compiler cache keys on the exact command line), nor when a
//! kernel's or variant's `-D` names an identifier that appears in any precompiled file (that
//! file would have read differently with it), nor with `KBUILD_PCH=0`. A macro name a header
//! could only build by token pasting is the one case that check cannot see; kbuild's headers
//! and the toolchain's do not read kernel defines that way.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kbuild_base::env::{names, Env};

use crate::driver::{self, CompileCommand, DepfileFrom};

/// Headers bigger than this are not read for the define check: the precompiled header is
/// then not used (libstdc++'s largest header is under 200 KiB).
const MAX_HEADER_BYTES: u64 = 8 << 20;
/// All the precompiled headers' files together.
const MAX_TOTAL_BYTES: u64 = 256 << 20;

/// The precompiled headers of one build: kept in `store` (the cache's), built in a scratch
/// directory removed with the set.
pub struct PchSet {
    dir: PathBuf,
    store: PathBuf,
    built: Mutex<HashMap<String, Arc<Slot>>>,
}

/// What a stored header was read from: each file (as the compiler's dependency list names it)
/// with its size, mtime and content digest; and the header's own digest.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredInputs {
    pch_blake3: String,
    files: Vec<StoredFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredFile {
    path: PathBuf,
    size: u64,
    mtime_ns: i128,
    blake3: String,
}

/// The stored list of inputs is small; anything bigger is not one.
const MAX_INPUTS_BYTES: u64 = 4 << 20;
/// A precompiled header bigger than this is not read back for its digest.
const MAX_PCH_BYTES: u64 = 512 << 20;

/// A precompiled header built once on first use; `None` if it would not build.
type Slot = OnceLock<Option<Arc<Pch>>>;

/// One precompiled header and what it was read from.
pub struct Pch {
    file: PathBuf,
    /// The empty source it was built from (its depfile lists it first).
    source: PathBuf,
    /// Every identifier in the files it holds.
    identifiers: HashSet<String>,
}

impl PchSet {
    /// A set kept in `store` (made when a first header is), built in a new directory under
    /// `scratch`; `None` when `KBUILD_PCH=0` or that directory cannot be made (the build then
    /// compiles without).
    pub fn new(scratch: &Path, store: &Path, env: &Env) -> Option<PchSet> {
        if env.str(names::KBUILD_PCH) == Some("0") {
            return None;
        }
        let dir = kbuild_base::fs::tempdir_in(scratch, "pch").ok()?;
        Some(PchSet {
            dir,
            store: store.to_path_buf(),
            built: Mutex::new(HashMap::new()),
        })
    }

    /// The precompiled header `cmd` can load, built on first use; `None` when `cmd` is not a
    /// hip-clang compile of the compat header, runs through a launcher, defines a name the
    /// header reads, or the header would not precompile.
    pub fn for_command(
        &self,
        cmd: &CompileCommand,
        cwd: &Path,
        timeout: Option<Duration>,
    ) -> Option<Arc<Pch>> {
        let args = cmd.args();
        let shared = shared_args(cmd, &args)?;
        let key = {
            // The compiler (its path and identity), where it runs and the shared command: the
            // files a header is read from are checked on every use besides.
            let mut h = blake3::Hasher::new();
            for part in [
                env!("CARGO_PKG_VERSION").as_bytes(),
                cmd.program.as_os_str().as_encoded_bytes(),
                cmd.identity.as_bytes(),
                cwd.as_os_str().as_encoded_bytes(),
            ] {
                h.update(&(part.len() as u64).to_le_bytes());
                h.update(part);
            }
            for a in shared {
                h.update(&(a.len() as u64).to_le_bytes());
                h.update(a.as_bytes());
            }
            h.finalize().to_hex()[..32].to_string()
        };
        let slot = {
            let mut built = self.built.lock().ok()?;
            built.entry(key.clone()).or_default().clone()
        };
        let pch = slot
            .get_or_init(|| {
                let entry = self.store.join(&key);
                stored(&entry, cwd)
                    .or_else(|| self.build(cmd, shared, &entry, cwd, timeout))
                    .map(Arc::new)
            })
            .clone()?;
        let defines = &args[args.len() - 1 - cmd.unit_defines..args.len() - 1];
        pch.covers(defines).then_some(pch)
    }

    /// Precompile the header for `cmd` into `entry` (the store's place for it): its empty
    /// source made once there (clang records it with the header), the header and its list of
    /// inputs written whole (temp file + rename; the list last, so a reader never pairs it with
    /// another header).
    fn build(
        &self,
        cmd: &CompileCommand,
        shared: &[String],
        entry: &Path,
        cwd: &Path,
        timeout: Option<Duration>,
    ) -> Option<Pch> {
        prune(&self.store, UNUSED_FOR);
        std::fs::create_dir_all(entry).ok()?;
        let source = entry.join("empty.hip");
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&source)
        {
            Ok(_) => {}
            // Another build made it: it must still be the empty file it was.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if std::fs::symlink_metadata(&source).ok()?.len() != 0 {
                    return None;
                }
            }
            Err(_) => return None,
        }
        let mut key_args = shared.to_vec();
        key_args.extend([
            "-Xclang".into(),
            "-emit-pch".into(),
            "-S".into(),
            source.display().to_string(),
        ]);
        let pch_cmd = CompileCommand {
            program: cmd.program.clone(),
            key_args,
            launcher: None,
            identity: cmd.identity.clone(),
            compat_dir: None,
            compat_digest: None,
            depfile: DepfileFrom::Compiler,
            unit_defines: 0,
        };
        let tmp = kbuild_base::fs::tempdir_in(&self.dir, "build").ok()?;
        let out = driver::run(&pch_cmd, cwd, &tmp, timeout);
        let _ = std::fs::remove_dir_all(&tmp);
        let out = out.ok()?;
        let (identifiers, files) = read_inputs(cwd, &out.deps, &source)?;
        let file = entry.join("header.pch");
        kbuild_base::fs::write_atomic(&file, &out.object).ok()?;
        let inputs = StoredInputs {
            pch_blake3: blake3::hash(&out.object).to_hex().to_string(),
            files,
        };
        let text = serde_json::to_vec(&inputs).ok()?;
        kbuild_base::fs::write_atomic(&entry.join("inputs.json"), &text).ok()?;
        tracing::debug!(
            "precompiled the compat header into {} in {:.2} s",
            file.display(),
            out.seconds
        );
        Some(Pch {
            file,
            source,
            identifiers,
        })
    }
}

/// A stored header nobody used for this long is removed when another one is built.
const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// Remove the stored headers of `store` last used (their list of inputs written or touched)
/// longer than `unused_for` ago: an out-dir or compiler that is gone leaves no 11 MB behind for
/// good. Only directories holding kbuild's `inputs.json` are looked at.
fn prune(store: &Path, unused_for: Duration) {
    let Ok(entries) = std::fs::read_dir(store) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in entries.flatten() {
        let dir = e.path();
        let Ok(meta) = std::fs::symlink_metadata(dir.join("inputs.json")) else {
            continue;
        };
        let idle = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or_default();
        if meta.is_file() && idle > unused_for && e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The header stored at `entry`, when every file it was read from has the size, mtime and
/// content it had and the header is the one its list was written for.
fn stored(entry: &Path, cwd: &Path) -> Option<Pch> {
    let text =
        kbuild_base::read::read_capped(&entry.join("inputs.json"), MAX_INPUTS_BYTES, "PCH inputs")
            .ok()?;
    let inputs: StoredInputs = serde_json::from_slice(&text).ok()?;
    let file = entry.join("header.pch");
    let header = kbuild_base::read::read_capped(&file, MAX_PCH_BYTES, "PCH").ok()?;
    if blake3::hash(&header).to_hex().as_str() != inputs.pch_blake3 {
        return None;
    }
    let source = entry.join("empty.hip");
    let deps: Vec<PathBuf> = inputs.files.iter().map(|f| f.path.clone()).collect();
    let (identifiers, now) = read_inputs(cwd, &deps, &source)?;
    let same = now.len() == inputs.files.len()
        && now.iter().zip(&inputs.files).all(|(a, b)| {
            a.path == b.path && a.size == b.size && a.mtime_ns == b.mtime_ns && a.blake3 == b.blake3
        });
    if !same {
        return None;
    }
    // Its last use, which keeps it from pruning.
    let _ = std::fs::File::options()
        .write(true)
        .open(entry.join("inputs.json"))
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    tracing::debug!(
        "the precompiled compat header {} is current",
        file.display()
    );
    Some(Pch {
        file,
        source,
        identifiers,
    })
}

/// Every C identifier in `files` (relative ones under `cwd`), and each file's size, mtime and
/// digest; the empty `source` is recorded and not read for identifiers. `None` if one cannot
/// be read within the caps.
fn read_inputs(
    cwd: &Path,
    files: &[PathBuf],
    source: &Path,
) -> Option<(HashSet<String>, Vec<StoredFile>)> {
    let mut set = HashSet::new();
    let mut stored = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for f in files {
        let path = cwd.join(f);
        let bytes = kbuild_base::read::read_capped(&path, MAX_HEADER_BYTES, "header").ok()?;
        let meta = std::fs::metadata(&path).ok()?;
        let mtime_ns = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        total += bytes.len() as u64;
        if total > MAX_TOTAL_BYTES {
            return None;
        }
        if path != source {
            add_identifiers(&bytes, &mut set);
        }
        stored.push(StoredFile {
            path: f.clone(),
            size: bytes.len() as u64,
            mtime_ns,
            blake3: blake3::hash(&bytes).to_hex().to_string(),
        });
    }
    Some((set, stored))
}

impl Drop for PchSet {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pch {
    /// The arguments that load it.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-Xclang".into(),
            "-include-pch".into(),
            "-Xclang".into(),
            self.file.display().to_string(),
        ]
    }

    /// Whether `defines` (`-DNAME[=VALUE]` arguments) leave every precompiled file as it was
    /// read: none of their names appears in them.
    fn covers(&self, defines: &[String]) -> bool {
        defines.iter().all(|d| {
            let name = d.strip_prefix("-D").unwrap_or(d);
            let name = name.split_once('=').map_or(name, |(n, _)| n);
            !self.identifiers.contains(name)
        })
    }

    /// A compile's dependency list as the plain compile writes it: hip-clang lists the
    /// precompiled header's files first (after its empty source) and the compiled source last;
    /// the plain compile lists the source first.
    pub fn plain_deps(&self, deps: Vec<PathBuf>, source: &Path) -> Vec<PathBuf> {
        let mut out = Vec::with_capacity(deps.len());
        let mut saw_source = false;
        for d in deps {
            if d == self.source || d == self.file {
                continue;
            }
            if d == source && !saw_source {
                saw_source = true;
                continue;
            }
            out.push(d);
        }
        if saw_source {
            out.insert(0, source.to_path_buf());
        }
        out
    }
}

/// The arguments a kernel's variants share: the command without its unit defines and its
/// source. `None` unless this is a hip-clang compile that includes the compat header and runs
/// without a launcher.
fn shared_args<'a>(cmd: &CompileCommand, args: &'a [String]) -> Option<&'a [String]> {
    if cmd.launcher.is_some() || cmd.compat_dir.is_none() {
        return None;
    }
    let pair = |a: &str, b: &str| args.windows(2).any(|w| w[0] == a && w[1] == b);
    if !pair("-x", "hip") || !pair("-include", "kcompat.h") {
        return None;
    }
    let end = args.len().checked_sub(1 + cmd.unit_defines)?;
    Some(&args[..end])
}

/// Adds every identifier of C/C++ `text` outside comments and string and character literals
/// (a macro is never expanded there) to `set`. Where the lexing could be wrong, it errs
/// towards more identifiers: a `//` comment's continuation lines are read as code.
fn add_identifiers(text: &[u8], set: &mut HashSet<String>) {
    let ident = |b: u8| b == b'_' || b.is_ascii_alphanumeric();
    let n = text.len();
    let mut i = 0;
    // Skip to after the closing `close` of a literal, honouring backslash escapes; a newline
    // ends an unterminated one.
    let literal = |mut i: usize, close: u8| {
        while i < n && text[i] != close && text[i] != b'\n' {
            i += if text[i] == b'\\' { 2 } else { 1 };
        }
        i + 1
    };
    while i < n {
        let b = text[i];
        if b == b'_' || b.is_ascii_alphabetic() {
            let start = i;
            while i < n && ident(text[i]) {
                i += 1;
            }
            let word = &text[start..i];
            if i < n && text[i] == b'"' && word.ends_with(b"R") {
                // A raw string: R"delim( ... )delim".
                let open = i + 1;
                let Some(paren) = text[open..].iter().position(|&c| c == b'(') else {
                    i = open;
                    continue;
                };
                let mut close = b")".to_vec();
                close.extend_from_slice(&text[open..open + paren]);
                close.push(b'"');
                let body = open + paren + 1;
                i = text[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(n, |p| body + p + close.len());
                continue;
            }
            if let Ok(word) = std::str::from_utf8(word) {
                if !set.contains(word) {
                    set.insert(word.to_string());
                }
            }
        } else if b.is_ascii_digit()
            || (b == b'.' && text.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // A pp-number (`0x1f`, `1e+5f`, `1'000`): its letters are not identifiers.
            i += 1;
            while i < n {
                let c = text[i];
                let sign =
                    (c == b'+' || c == b'-') && matches!(text[i - 1], b'e' | b'E' | b'p' | b'P');
                if ident(c) || c == b'.' || c == b'\'' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
        } else if b == b'"' || b == b'\'' {
            i = literal(i + 1, b);
        } else if text[i..].starts_with(b"//") {
            i = text[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(n, |p| i + p + 1);
        } else if text[i..].starts_with(b"/*") {
            i = text[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(n, |p| i + 2 + p + 2);
        } else {
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_unused_for_long_are_pruned_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let store = d.path();
        let old = std::time::SystemTime::now() - Duration::from_secs(40 * 24 * 3600);
        for (name, inputs, age) in [
            ("stale", true, Some(old)),
            ("fresh", true, None),
            ("not-kbuilds", false, Some(old)),
        ] {
            let dir = store.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("header.pch"), b"x").unwrap();
            if inputs {
                let f = dir.join("inputs.json");
                std::fs::write(&f, b"{}").unwrap();
                if let Some(t) = age {
                    std::fs::File::options()
                        .write(true)
                        .open(&f)
                        .unwrap()
                        .set_modified(t)
                        .unwrap();
                }
            }
        }
        prune(store, UNUSED_FOR);
        assert!(!store.join("stale").exists());
        assert!(store.join("fresh/header.pch").exists());
        assert!(store.join("not-kbuilds/header.pch").exists());
    }

    fn pch(words: &str) -> Pch {
        let mut identifiers = HashSet::new();
        add_identifiers(words.as_bytes(), &mut identifiers);
        Pch {
            file: PathBuf::from("/s/k.pch"),
            source: PathBuf::from("/s/k.hip"),
            identifiers,
        }
    }

    #[test]
    fn identifiers_are_whole_words_and_numbers_are_not() {
        let mut s = HashSet::new();
        add_identifiers(
            b"#if defined(KC_CUDA) && __HIP__ >= 0x1f // not IN_LINE_COMMENT\n\
              int x1 = 1e+5f + 1'000 + .5e3; /* not IN_BLOCK\n COMMENT */ char c = '\\'';\n\
              const char* s = \"not \\\" IN_STRING\"; auto r = R\"x(not )\" IN_RAW)x\"; AFTER",
            &mut s,
        );
        for w in [
            "if", "defined", "KC_CUDA", "__HIP__", "int", "x1", "char", "c", "s", "AFTER",
        ] {
            assert!(s.contains(w), "{w}");
        }
        for w in [
            "x1f",
            "e5f",
            "f",
            "IN_LINE_COMMENT",
            "IN_BLOCK",
            "COMMENT",
            "IN_STRING",
            "IN_RAW",
            "not",
            "000",
            "e3",
        ] {
            assert!(!s.contains(w), "{w} in {s:?}");
        }
    }

    #[test]
    fn a_define_the_headers_mention_turns_the_pch_off() {
        let p = pch("#ifdef KC_NO_CUDA_ARCH\n#endif\nTOKENSX");
        assert!(p.covers(&["-DTOKENS=3".into(), "-DROWS=2".into()]));
        assert!(!p.covers(&["-DTOKENS=3".into(), "-DKC_NO_CUDA_ARCH=1".into()]));
        assert!(!p.covers(&["-DKC_NO_CUDA_ARCH".into()]));
        assert!(p.covers(&[]));
    }

    #[test]
    fn deps_come_back_in_the_plain_compiles_order() {
        let p = pch("");
        let with_pch: Vec<PathBuf> = [
            "/s/k.hip",
            "/inc/kcompat.h",
            "/usr/a.h",
            "k/common.h",
            "k/k.cu",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(
            p.plain_deps(with_pch, Path::new("k/k.cu")),
            ["k/k.cu", "/inc/kcompat.h", "/usr/a.h", "k/common.h"]
                .iter()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn only_hip_compiles_of_the_compat_header_without_a_launcher_qualify() {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let mut cmd = CompileCommand {
            program: PathBuf::from("clang++"),
            key_args: s(&["-x", "hip", "-O3", "-include", "kcompat.h", "-DT=1", "k.cu"]),
            launcher: None,
            identity: String::new(),
            compat_dir: Some(PathBuf::from("/o/include")),
            compat_digest: None,
            depfile: DepfileFrom::Compiler,
            unit_defines: 1,
        };
        let args = cmd.args();
        assert_eq!(
            shared_args(&cmd, &args),
            Some(&s(&["-x", "hip", "-O3", "-include", "kcompat.h"])[..])
        );
        cmd.launcher = Some("sccache".into());
        assert_eq!(shared_args(&cmd, &args), None);
        cmd.launcher = None;
        cmd.compat_dir = None;
        assert_eq!(shared_args(&cmd, &args), None);
        let nvcc = s(&["-cubin", "-arch=sm_89", "k.cu"]);
        cmd.compat_dir = Some(PathBuf::from("/o/include"));
        assert_eq!(shared_args(&cmd, &nvcc), None);
    }
}
