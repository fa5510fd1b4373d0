//! `kbuild clean`: what it removes (a build's out-dir, and kbuild's compile cache when asked).

use std::path::{Path, PathBuf};

use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("removing {path}: {err}")]
    Remove { path: String, err: std::io::Error },
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
}

/// Remove `out_dir`, and with `cache` the compile cache of kbuild's directories (`env`);
/// `removed` hears of each directory as it goes (one that is not there is skipped).
pub fn clean(
    out_dir: &Path,
    cache: bool,
    env: &Env,
    removed: &mut dyn FnMut(&Path),
) -> Result<(), CleanError> {
    let mut dirs: Vec<PathBuf> = vec![out_dir.to_path_buf()];
    if cache {
        dirs.push(Dirs::from_env(env)?.cache);
    }
    for dir in dirs {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|err| CleanError::Remove {
                path: dir.display().to_string(),
                err,
            })?;
            removed(&dir);
        }
    }
    Ok(())
}
