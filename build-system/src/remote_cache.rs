//! The remote build cache: kbuild's own cache entries (see [`crate::cache`]) kept in an OCI
//! distribution registry, so a second CI runner or a laptop reuses objects another machine
//! compiled.
//!
//! Mapping (one OCI repository, e.g. `oci://registry.example/team/kbuild-cache`):
//!
//! - tag `a-<action key>` → an image manifest (`artifactType`
//!   [`DEPS_TYPE`]) whose config blob is the action's dependency-set record, the same JSON the
//!   local cache keeps under `deps/<kk>/<action key>` (`{"sets": [[[path, blake3], ...], ...]}`),
//!   no layers;
//! - tag `r-<result key>` → an image manifest (`artifactType` [`ENTRY_TYPE`]) whose config blob
//!   is the entry's `meta.json` and whose two layers are the `object` and the compiler `log`.
//!
//! Keys are blake3 hex (64 characters), so tags are 66 characters: inside the 128 the
//! distribution spec allows. Blobs are content-addressed by sha256 as OCI wants, so identical
//! objects and logs are stored once.
//!
//! Fetch (on a local miss): read the action's dep sets, take the first set whose files hash
//! the same here, derive the result key, fetch that entry and verify it: every blob's sha256
//! against its descriptor (the OCI client does this), the meta's dependency list equal to the
//! set that was matched, and the object's size and blake3 equal to the meta's. Only then is it
//! stored in the local cache (temp + rename, as a compile result would be). A refused entry is
//! compiled locally.
//!
//! Upload (read-write mode, after a compile): the entry's blobs and manifest, then the action's
//! dep sets merged with what the remote already had (newest first, at most 8 kept; a
//! concurrent writer may drop a set, which costs a compile, never a wrong object).
//!
//! Failure: a remote that does not answer (refused connection, timeout, 5xx after one retry)
//! is switched off for the rest of the build after its first failure, so a dead remote costs
//! one connect, not one per job; the build compiles locally and says so once. Not found is
//! a plain miss. Nothing here ever fails a build.
//!
//! Dependency paths come from the remote, so they are confined before anything local is
//! touched ([`DepRoots::check`]): a project-relative path without `..`, or an absolute path
//! under a known toolchain or system-header root; it must then resolve (symlinks followed)
//! inside those roots and be a regular file of at most [`MAX_DEP_BYTES`]. Matching an
//! entry's sets is bounded in sets, dependencies and time (the remote's timeout). An entry
//! that breaks a rule is refused, with a warning naming it, and the job compiles locally; a
//! path outside the roots (`/dev/zero`, a file in `$HOME`) is never opened, so a remote writer
//! cannot hang a build or probe for files the builder can read.
//!
//! Trust: verification catches corruption and mix-ups. Anyone who can push to the repository
//! can write a consistent entry, so give push rights (read-write mode) to CI only, and
//! developers read-only credentials.

use std::path::{Component, Path, PathBuf};
#[cfg(feature = "remote-cache")]
use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicUsize, Ordering},
    sync::Mutex,
    time::{Duration, Instant},
};

#[cfg(feature = "remote-cache")]
use kbuild_base::env::{names, Env};

#[cfg(feature = "remote-cache")]
use kbuild_registry::oci::{
    parse_reference, Descriptor, ImageManifest, OciClient, OciError, OciOptions, IMAGE_MANIFEST,
};
#[cfg(feature = "remote-cache")]
use kbuild_registry::progress::Silent;
#[cfg(feature = "remote-cache")]
use serde::Deserialize;
use serde::Serialize;

use crate::cache::{Cache, Entry};
#[cfg(feature = "remote-cache")]
use crate::cache::{Dep, EntryMeta, Made};
use crate::toolchain::Toolchains;

/// `artifactType` and config media type of an action's dep-set record.
pub const DEPS_TYPE: &str = "application/vnd.kbuild.cache.deps.v1+json";
/// `artifactType` of a result entry; its config is the entry's meta.json.
pub const ENTRY_TYPE: &str = "application/vnd.kbuild.cache.entry.v1+json";
pub const OBJECT_TYPE: &str = "application/vnd.kbuild.cache.object.v1";
pub const LOG_TYPE: &str = "application/vnd.kbuild.cache.log.v1+text";
/// Dependency sets kept per action on the remote (newest first), as the local cache does.
#[cfg(feature = "remote-cache")]
const MAX_DEP_SETS: usize = 8;

/// The largest dependency file a remote entry may name (headers are far smaller).
pub const MAX_DEP_BYTES: u64 = 64 << 20;
/// The most dependencies one remote dependency set may list.
pub const MAX_DEPS_PER_SET: usize = 20_000;
/// System header directories a compiler reads besides its own tree.
const SYSTEM_ROOTS: &[&str] = &["/usr/include", "/usr/local/include", "/usr/lib/gcc"];

/// Where a remote cache entry's dependency paths may point: the project, and the roots of
/// the toolchains this build uses plus the system header directories.
#[derive(Debug, Clone)]
pub struct DepRoots {
    project: PathBuf,
    project_canon: PathBuf,
    /// Absolute roots, as given and canonicalized (both spellings are accepted lexically;
    /// the canonical form decides after symlinks are followed).
    roots: Vec<PathBuf>,
    roots_canon: Vec<PathBuf>,
}

/// What [`DepRoots::check`] says about one recorded dependency path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepCheck {
    /// Confined and a regular file: hash it.
    Ok,
    /// Confined but not here: the set simply does not match.
    Missing,
    /// Breaks a rule: the entry is refused.
    Refused(String),
}

impl DepRoots {
    /// `project_root` plus `roots` (absolute directories) plus the system header directories.
    pub fn new(project_root: &Path, roots: impl IntoIterator<Item = PathBuf>) -> DepRoots {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut lexical: Vec<PathBuf> = roots
            .into_iter()
            .chain(SYSTEM_ROOTS.iter().map(PathBuf::from))
            .filter(|r| r.is_absolute())
            .filter_map(|r| normalize(&r))
            // `/` as a root would confine nothing.
            .filter(|r| r.parent().is_some())
            .collect();
        lexical.sort();
        lexical.dedup();
        let mut roots_canon: Vec<PathBuf> = lexical
            .iter()
            .map(|r| canon(r))
            .filter(|r| r.parent().is_some())
            .collect();
        roots_canon.sort();
        roots_canon.dedup();
        DepRoots {
            project: project_root.to_path_buf(),
            project_canon: canon(project_root),
            roots: lexical,
            roots_canon,
        }
    }

    /// The roots of the toolchains a build discovered: the CUDA root, the HIP clang's install
    /// prefix, `--rocm-path` and device libraries, and kbuild's managed toolchain directory.
    pub fn for_build(project_root: &Path, tcs: &Toolchains) -> DepRoots {
        let mut roots = vec![tcs.managed.clone()];
        if let Some(c) = &tcs.cuda {
            roots.push(c.root.clone());
        }
        if let Some(h) = &tcs.hip {
            roots.push(h.rocm_path.clone());
            roots.push(h.device_libs.clone());
            let clang = std::fs::canonicalize(&h.clang).unwrap_or_else(|_| h.clang.clone());
            if let Some(prefix) = clang.parent().and_then(Path::parent) {
                roots.push(prefix.to_path_buf());
            }
        }
        DepRoots::new(project_root, roots)
    }

    pub fn project(&self) -> &Path {
        &self.project
    }

    /// Whether a dependency path recorded by someone else may be read here. Lexical rules
    /// first (nothing outside the roots is touched), then the resolved path and its type
    /// and size.
    pub fn check(&self, recorded: &str) -> DepCheck {
        let path = Path::new(recorded);
        if recorded.is_empty() || recorded.contains('\0') {
            return DepCheck::Refused(format!("dependency path {recorded:?} is not a path"));
        }
        // Compilers write `bin/../include/x.h`: `..` is resolved lexically first, and a path
        // that climbs out of its start (the project, or `/`) is refused.
        let Some(normal) = normalize(path) else {
            return DepCheck::Refused(format!(
                "dependency path {recorded} climbs out of {} with `..`",
                if path.is_absolute() {
                    "/"
                } else {
                    "the project"
                }
            ));
        };
        let full = if normal.is_absolute() {
            let under = self
                .roots
                .iter()
                .chain(&self.roots_canon)
                .any(|r| normal.starts_with(r));
            if !under {
                return DepCheck::Refused(format!(
                    "dependency path {recorded} is outside the project and the toolchain roots"
                ));
            }
            normal
        } else {
            self.project.join(normal)
        };
        let canon = match std::fs::canonicalize(&full) {
            Ok(c) => c,
            Err(_) => return DepCheck::Missing,
        };
        let inside = canon.starts_with(&self.project_canon)
            || self.roots_canon.iter().any(|r| canon.starts_with(r));
        if !inside {
            return DepCheck::Refused(format!(
                "dependency path {recorded} resolves to {}, outside the project and the toolchain roots",
                canon.display()
            ));
        }
        match std::fs::metadata(&canon) {
            Ok(m) if !m.is_file() => DepCheck::Refused(format!(
                "dependency path {recorded} is not a regular file"
            )),
            Ok(m) if m.len() > MAX_DEP_BYTES => DepCheck::Refused(format!(
                "dependency {recorded} is {} bytes, more than the {MAX_DEP_BYTES} a dependency may be",
                m.len()
            )),
            Ok(_) => DepCheck::Ok,
            Err(_) => DepCheck::Missing,
        }
    }
}

/// `path` with `.` dropped and `..` applied lexically; `None` when a `..` would climb above
/// its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Prefix(_) => return None,
            Component::RootDir => out.push(Component::RootDir),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(n) => {
                out.push(n);
                depth += 1;
            }
        }
    }
    Some(out)
}

/// Whether a build only reads the remote or also uploads what it compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteMode {
    #[default]
    Read,
    ReadWrite,
}

impl std::str::FromStr for RemoteMode {
    type Err = RemoteCacheError;
    fn from_str(s: &str) -> Result<Self, RemoteCacheError> {
        match s {
            "read" | "read-only" => Ok(RemoteMode::Read),
            "read-write" => Ok(RemoteMode::ReadWrite),
            other => Err(RemoteCacheError::Mode(other.to_string())),
        }
    }
}

/// Why a remote cache cannot be set up (a failing remote during a build is not an error:
/// it is switched off, see [`Fetch::Unavailable`]).
#[derive(Debug, thiserror::Error)]
pub enum RemoteCacheError {
    #[error("remote cache mode `{0}`: expected `read` or `read-write`")]
    Mode(String),
    #[cfg(feature = "remote-cache")]
    #[error("--remote-cache: {0}")]
    Url(#[source] kbuild_registry::oci::OciError),
    #[error("--remote-cache `{url}`: name a repository, e.g. oci://{host}/kbuild-cache")]
    NoRepository { url: String, host: String },
}

/// The result of asking the remote for an action.
#[derive(Debug)]
pub enum Fetch {
    /// Verified and stored in the local cache.
    Hit(Entry),
    /// The remote has nothing usable for these inputs (or is switched off).
    Miss,
    /// The remote had an entry that failed verification: not used.
    Refused(String),
    /// The remote did not answer; it is switched off for the rest of this build.
    Unavailable(String),
}

/// What the remote did during a build, for the summary and `--json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemoteStats {
    pub url: String,
    pub mode: &'static str,
    pub hits: usize,
    pub uploads: usize,
    pub refused: usize,
    /// Why the remote was switched off, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

#[cfg(feature = "remote-cache")]
#[derive(Debug, Default, Serialize, Deserialize)]
struct DepSets {
    sets: Vec<Vec<Dep>>,
}

#[cfg(feature = "remote-cache")]
/// A remote cache for one build, shared by the worker threads.
#[derive(Debug)]
pub struct RemoteCache {
    client: OciClient,
    url: String,
    mode: RemoteMode,
    /// The most time matching one action's dependency sets may take.
    entry_budget: Duration,
    down: Mutex<Option<String>>,
    hits: AtomicUsize,
    uploads: AtomicUsize,
    refused: AtomicUsize,
}

#[cfg(feature = "remote-cache")]
impl RemoteCache {
    /// `oci://HOST[:PORT]/REPO`. Credentials as for `kbuild publish` (KBUILD_REGISTRY_USER /
    /// KBUILD_REGISTRY_PASSWORD, or docker's config.json).
    /// `env` gives the credentials, CA file and `KBUILD_REMOTE_CACHE_TIMEOUT`.
    pub fn open(
        url: &str,
        mode: RemoteMode,
        plain_http: bool,
        env: &Env,
    ) -> Result<RemoteCache, RemoteCacheError> {
        let (host, repo) = parse_reference(url).map_err(RemoteCacheError::Url)?;
        if repo.is_empty() {
            return Err(RemoteCacheError::NoRepository {
                url: url.to_string(),
                host,
            });
        }
        let timeout = env
            .str(names::KBUILD_REMOTE_CACHE_TIMEOUT)
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(10));
        let opts = OciOptions {
            plain_http,
            retries: 1,
            backoff: Duration::from_millis(200),
            timeout,
            ..OciOptions::from_env(env)
        };
        Ok(RemoteCache {
            client: OciClient::new(&host, &repo, opts),
            url: url.to_string(),
            mode,
            entry_budget: timeout,
            down: Mutex::new(None),
            hits: AtomicUsize::new(0),
            uploads: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn mode(&self) -> RemoteMode {
        self.mode
    }

    pub fn stats(&self) -> RemoteStats {
        RemoteStats {
            url: self.url.clone(),
            mode: match self.mode {
                RemoteMode::Read => "read",
                RemoteMode::ReadWrite => "read-write",
            },
            hits: self.hits.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            unavailable: self.down.lock().ok().and_then(|d| d.clone()),
        }
    }

    fn is_down(&self) -> bool {
        self.down.lock().map(|d| d.is_some()).unwrap_or(true)
    }

    /// Switch the remote off; true for the first caller (the one that reports it).
    fn mark_down(&self, why: String) -> bool {
        match self.down.lock() {
            Ok(mut d) if d.is_none() => {
                *d = Some(why);
                true
            }
            _ => false,
        }
    }

    /// Ask the remote for `action`; on a verified hit the entry is in `cache` afterwards.
    /// Dependency paths are confined to `roots` (see [`DepRoots::check`]).
    pub fn fetch(&self, cache: &Cache, action: &str, roots: &DepRoots) -> Fetch {
        if self.is_down() {
            return Fetch::Miss;
        }
        match self.try_fetch(cache, action, roots) {
            Ok(Some(e)) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Fetch::Hit(e)
            }
            Ok(None) => Fetch::Miss,
            Err(Problem::Refused(why)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Fetch::Refused(why)
            }
            Err(Problem::Down(why)) => {
                if self.mark_down(why.clone()) {
                    Fetch::Unavailable(why)
                } else {
                    Fetch::Miss
                }
            }
        }
    }

    /// Whether every dependency of a remote `set` is confined and hashes the same here.
    /// `Err` refuses the whole record (named `tag`).
    fn set_matches(
        &self,
        cache: &Cache,
        set: &[Dep],
        roots: &DepRoots,
        tag: &str,
        deadline: Instant,
    ) -> Result<bool, Problem> {
        let refuse =
            |why: String| Problem::Refused(format!("{}: {why}", self.client.display_ref(tag)));
        if set.len() > MAX_DEPS_PER_SET {
            return Err(refuse(format!(
                "a dependency set lists {} files, more than {MAX_DEPS_PER_SET}",
                set.len()
            )));
        }
        // Every path is checked before any is hashed: a refused record reads nothing.
        let mut all_here = true;
        for (p, _) in set {
            match roots.check(p) {
                DepCheck::Ok => {}
                DepCheck::Missing => all_here = false,
                DepCheck::Refused(why) => return Err(refuse(why)),
            }
        }
        if !all_here {
            return Ok(false);
        }
        for (p, want) in set {
            if Instant::now() > deadline {
                return Err(refuse(format!(
                    "checking its dependencies took more than {:?}",
                    self.entry_budget
                )));
            }
            if cache.hash_dep(roots.project(), p).as_ref() != Some(want) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn try_fetch(
        &self,
        cache: &Cache,
        action: &str,
        roots: &DepRoots,
    ) -> Result<Option<Entry>, Problem> {
        let Some(sets) = self.remote_dep_sets(action)? else {
            return Ok(None);
        };
        let tag = format!("a-{action}");
        let deadline = Instant::now() + self.entry_budget;
        for set in sets.sets.iter().take(MAX_DEP_SETS) {
            if !self.set_matches(cache, set, roots, &tag, deadline)? {
                continue;
            }
            let key = Cache::result_key(action, set);
            let Some((meta, object, log)) = self.fetch_entry(&key)? else {
                continue;
            };
            verify(&key, set, &meta, &object)?;
            // Kept for this build even when the local disk refuses it (full, read-only).
            let fallback = Entry {
                key: key.clone(),
                object: object.clone(),
                log: log.clone(),
                meta: meta.clone(),
            };
            let made = Made {
                object,
                log,
                command: meta.command.clone(),
                seconds: meta.seconds,
                launch: meta.launch.clone(),
            };
            return Ok(Some(
                cache.store(action, set.clone(), made).unwrap_or(fallback),
            ));
        }
        Ok(None)
    }

    fn remote_dep_sets(&self, action: &str) -> Result<Option<DepSets>, Problem> {
        let tag = format!("a-{action}");
        let Some(m) = self.manifest(&tag, DEPS_TYPE)? else {
            return Ok(None);
        };
        let bytes = self.blob(&m.config, &tag)?;
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Problem::Refused(format!("{}: dep sets: {e}", self.client.display_ref(&tag)))
        })
    }

    fn manifest(&self, tag: &str, kind: &str) -> Result<Option<ImageManifest>, Problem> {
        let Some(fetched) = self
            .client
            .get_manifest(tag, &Silent)
            .map_err(|e| self.problem(e))?
        else {
            return Ok(None);
        };
        let m: ImageManifest = serde_json::from_slice(&fetched.bytes).map_err(|e| {
            Problem::Refused(format!("{}: manifest: {e}", self.client.display_ref(tag)))
        })?;
        if m.artifact_type.as_deref() != Some(kind) {
            return Err(Problem::Refused(format!(
                "{} is not a kbuild cache record (artifactType {:?})",
                self.client.display_ref(tag),
                m.artifact_type
            )));
        }
        Ok(Some(m))
    }

    fn blob(&self, desc: &Descriptor, tag: &str) -> Result<Vec<u8>, Problem> {
        match self.client.get_blob(desc, &Silent) {
            Ok(b) => Ok(b),
            Err(OciError::NotFound(what)) => Err(Problem::Refused(format!(
                "{}: {what} is missing",
                self.client.display_ref(tag)
            ))),
            Err(e) => Err(self.problem(e)),
        }
    }

    /// (meta, object, log) of result `key`, or None when the remote has no such entry.
    fn fetch_entry(&self, key: &str) -> Result<Option<(EntryMeta, Vec<u8>, String)>, Problem> {
        let tag = format!("r-{key}");
        let Some(m) = self.manifest(&tag, ENTRY_TYPE)? else {
            return Ok(None);
        };
        let meta_bytes = self.blob(&m.config, &tag)?;
        let meta: EntryMeta = serde_json::from_slice(&meta_bytes)
            .map_err(|e| Problem::Refused(format!("entry {tag}: meta.json: {e}")))?;
        let layer = |t: &str| m.layers.iter().find(|l| l.media_type == t);
        let Some(obj_desc) = layer(OBJECT_TYPE) else {
            return Err(Problem::Refused(format!("entry {tag} has no object layer")));
        };
        let object = self.blob(obj_desc, &tag)?;
        let log = match layer(LOG_TYPE) {
            Some(d) => String::from_utf8_lossy(&self.blob(d, &tag)?).into_owned(),
            None => String::new(),
        };
        Ok(Some((meta, object, log)))
    }

    /// Upload a compiled entry (read-write mode only). Returns a line for the user when the
    /// remote just went away.
    pub fn upload(&self, action: &str, entry: &Entry) -> Option<String> {
        if self.mode != RemoteMode::ReadWrite || self.is_down() {
            return None;
        }
        match self.try_upload(action, entry) {
            Ok(()) => {
                self.uploads.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(Problem::Down(why)) | Err(Problem::Refused(why)) => {
                self.mark_down(why.clone()).then_some(why)
            }
        }
    }

    fn try_upload(&self, action: &str, entry: &Entry) -> Result<(), Problem> {
        let meta = serde_json::to_vec(&entry.meta)
            .map_err(|e| Problem::Refused(format!("meta.json: {e}")))?;
        let tag = format!("r-{}", entry.key);
        let config = self.push_blob(&meta, ENTRY_TYPE, "meta.json")?;
        let object = self.push_blob(&entry.object, OBJECT_TYPE, "object")?;
        let log = self.push_blob(entry.log.as_bytes(), LOG_TYPE, "log")?;
        self.push_manifest(&tag, ENTRY_TYPE, config, vec![object, log])?;

        // Merge this dependency set into the remote's record for the action.
        let mut sets = match self.remote_dep_sets(action) {
            Ok(s) => s.unwrap_or_default(),
            Err(Problem::Refused(_)) => DepSets::default(),
            Err(e) => return Err(e),
        };
        sets.sets.retain(|s| *s != entry.meta.deps);
        sets.sets.insert(0, entry.meta.deps.clone());
        sets.sets.truncate(MAX_DEP_SETS);
        let record =
            serde_json::to_vec(&sets).map_err(|e| Problem::Refused(format!("dep sets: {e}")))?;
        let config = self.push_blob(&record, DEPS_TYPE, "deps.json")?;
        self.push_manifest(&format!("a-{action}"), DEPS_TYPE, config, Vec::new())
    }

    fn push_blob(
        &self,
        bytes: &[u8],
        media_type: &str,
        title: &str,
    ) -> Result<Descriptor, Problem> {
        self.client
            .put_blob(bytes, title, &Silent)
            .map_err(|e| self.problem(e))?;
        Ok(Descriptor {
            media_type: media_type.to_string(),
            digest: kbuild_base::digest::oci_digest(bytes),
            size: bytes.len() as u64,
            artifact_type: None,
            annotations: [(
                kbuild_registry::oci::TITLE_ANNOTATION.to_string(),
                title.to_string(),
            )]
            .into(),
        })
    }

    fn push_manifest(
        &self,
        tag: &str,
        kind: &str,
        config: Descriptor,
        layers: Vec<Descriptor>,
    ) -> Result<(), Problem> {
        let m = ImageManifest {
            schema_version: 2,
            media_type: Some(IMAGE_MANIFEST.into()),
            artifact_type: Some(kind.into()),
            config,
            layers,
            subject: None,
            annotations: BTreeMap::new(),
        };
        let bytes = serde_json::to_vec(&m).map_err(|e| Problem::Refused(e.to_string()))?;
        self.client
            .put_manifest(tag, &bytes, &Silent)
            .map_err(|e| self.problem(e))?;
        Ok(())
    }

    fn problem(&self, e: OciError) -> Problem {
        match e {
            OciError::Digest { .. } | OciError::NotKbuild { .. } | OciError::Invalid(_) => {
                Problem::Refused(e.to_string())
            }
            _ => Problem::Down(e.to_string()),
        }
    }
}

#[cfg(feature = "remote-cache")]
enum Problem {
    /// This record is unusable (corrupt, tampered, not ours): skip it.
    Refused(String),
    /// The remote is unreachable, too slow or refuses us: stop using it.
    Down(String),
}

/// An entry fetched for result `key` and dependency set `set` must describe exactly that set
/// and hold the object its meta names.
#[cfg(feature = "remote-cache")]
fn verify(key: &str, set: &[Dep], meta: &EntryMeta, object: &[u8]) -> Result<(), Problem> {
    if meta.deps != set {
        return Err(Problem::Refused(format!(
            "entry r-{key}: its meta lists other dependencies than its key was made of"
        )));
    }
    let actual = blake3::hash(object).to_hex();
    if object.len() as u64 != meta.size || actual.as_str() != meta.object_blake3 {
        return Err(Problem::Refused(format!(
            "entry r-{key}: object blake3 {actual} ({} bytes) is not the {} ({} bytes) its meta records",
            object.len(),
            meta.object_blake3,
            meta.size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod mode_tests {
    use super::*;

    #[test]
    fn dep_paths_are_confined_regular_and_bounded() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().join("p");
        std::fs::create_dir_all(project.join("include")).unwrap();
        std::fs::write(project.join("include/a.h"), "x").unwrap();
        let outside = d.path().join("secret.txt");
        std::fs::write(&outside, "s").unwrap();
        std::os::unix::fs::symlink(&outside, project.join("include/link.h")).unwrap();
        let big = project.join("big.h");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_DEP_BYTES + 1)
            .unwrap();
        let roots = DepRoots::new(&project, [PathBuf::from("/dev"), PathBuf::from("/")]);
        assert_eq!(roots.check("include/a.h"), DepCheck::Ok);
        assert_eq!(roots.check("./include/a.h"), DepCheck::Ok);
        assert_eq!(roots.check("include/gone.h"), DepCheck::Missing);
        let refused = |p: &str, why: &str| match roots.check(p) {
            DepCheck::Refused(m) => assert!(m.contains(why), "{p}: {m}"),
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(roots.check("include/../include/a.h"), DepCheck::Ok);
        refused("../secret.txt", "climbs out of the project");
        refused("include/../../secret.txt", "climbs out of the project");
        refused("/usr/include/../../etc/passwd", "outside the project");
        refused("/../etc/passwd", "climbs out of /");
        refused(&outside.display().to_string(), "outside the project");
        refused("/etc/passwd", "outside the project");
        refused("include/link.h", "resolves to");
        refused("/dev/zero", "not a regular file");
        refused("big.h", "more than");
        refused("", "not a path");
        // The system header roots are known; `/` is never a root.
        assert!(roots.roots.iter().any(|r| r == Path::new("/usr/include")));
        assert!(!roots.roots.iter().any(|r| r == Path::new("/")));
    }

    #[test]
    fn modes_parse() {
        assert_eq!("read".parse::<RemoteMode>().ok(), Some(RemoteMode::Read));
        assert_eq!(
            "read-write".parse::<RemoteMode>().ok(),
            Some(RemoteMode::ReadWrite)
        );
        let e = "write".parse::<RemoteMode>().unwrap_err();
        assert!(matches!(&e, RemoteCacheError::Mode(m) if m == "write"));
        assert_eq!(
            e.to_string(),
            "remote cache mode `write`: expected `read` or `read-write`"
        );
    }
}

#[cfg(all(test, feature = "remote-cache"))]
mod tests {
    use super::*;

    fn meta(object: &[u8], deps: Vec<Dep>) -> EntryMeta {
        EntryMeta {
            object_blake3: blake3::hash(object).to_hex().to_string(),
            size: object.len() as u64,
            deps,
            command: String::new(),
            seconds: 0.0,
            launch: None,
        }
    }

    #[test]
    fn verify_checks_object_and_deps() {
        let deps = vec![("a.cu".to_string(), "h".to_string())];
        let m = meta(b"obj", deps.clone());
        assert!(verify("k", &deps, &m, b"obj").is_ok());
        assert!(verify("k", &deps, &m, b"obJ").is_err());
        assert!(verify("k", &[], &m, b"obj").is_err());
    }

    #[test]
    fn a_url_without_repository_is_an_error() {
        let e = RemoteCache::open("oci://127.0.0.1:1", RemoteMode::Read, true, &Env::empty())
            .unwrap_err();
        assert!(matches!(&e, RemoteCacheError::NoRepository { host, .. } if host == "127.0.0.1:1"));
        assert_eq!(
            e.to_string(),
            "--remote-cache `oci://127.0.0.1:1`: name a repository, e.g. oci://127.0.0.1:1/kbuild-cache"
        );
        let e = RemoteCache::open("http://x/c", RemoteMode::Read, true, &Env::empty()).unwrap_err();
        assert!(matches!(e, RemoteCacheError::Url(_)), "{e}");
        assert!(e.to_string().starts_with("--remote-cache: "), "{e}");
        assert!(
            RemoteCache::open("oci://127.0.0.1:1/c", RemoteMode::Read, true, &Env::empty()).is_ok()
        );
    }
}

/// Without the `remote-cache` feature there is no client, so no value of this type exists: a
/// build that names a remote cache says so once and compiles locally.
#[cfg(not(feature = "remote-cache"))]
#[derive(Debug)]
pub enum RemoteCache {}

#[cfg(not(feature = "remote-cache"))]
impl RemoteCache {
    pub fn url(&self) -> &str {
        match *self {}
    }

    pub fn stats(&self) -> RemoteStats {
        match *self {}
    }

    pub fn fetch(&self, _: &Cache, _: &str, _: &DepRoots) -> Fetch {
        match *self {}
    }

    pub fn upload(&self, _: &str, _: &Entry) -> Option<String> {
        match *self {}
    }
}
