//! The remote build cache of a build: `--remote-cache` or Kbuild.toml `[build] remote-cache`,
//! and the note a build without the `remote-cache` feature gives instead.

use crate::config::Project;
use crate::events::Observer;
use crate::remote_cache::{RemoteCache, RemoteMode};

use super::{BuildError, BuildOptions};

/// The remote cache of this build: `--remote-cache` or Kbuild.toml `[build] remote-cache`.
pub(super) fn open_remote(
    project: &Project,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    let Some(url) = opts.remote_cache.as_ref().or(project.remote_cache.as_ref()) else {
        return Ok(None);
    };
    let mode = match (opts.remote_cache_mode, &project.remote_cache_mode) {
        (Some(m), _) => m,
        (None, Some(s)) => s.parse().map_err(|source| BuildError::RemoteCacheMode {
            file: project.file.display().to_string(),
            source,
        })?,
        (None, None) => RemoteMode::Read,
    };
    open_remote_client(url, mode, opts, observer)
}

#[cfg(feature = "remote-cache")]
pub(super) fn open_remote_client(
    url: &str,
    mode: RemoteMode,
    opts: &BuildOptions,
    _: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    Ok(Some(RemoteCache::open(
        url,
        mode,
        opts.plain_http,
        &opts.env,
    )?))
}

#[cfg(not(feature = "remote-cache"))]
pub(super) fn open_remote_client(
    url: &str,
    _: RemoteMode,
    _: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    observer.note(&format!(
        "kbuild: remote cache {url}: this build of kbuild has no remote-cache feature; compiling locally"
    ));
    Ok(None)
}
