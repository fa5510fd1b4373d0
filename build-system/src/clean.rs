//! `kbuild clean`: what it removes (a build's out-dir, and kbuild's compile cache when asked),
//! and the marker that says an out-dir is kbuild's. A cloned project's `out-dir = ".."` must
//! not make `clean` remove the directory that holds the project: clean removes only a
//! directory with kbuild's marker in it, and never the project root, an ancestor of it,
//! `$HOME` or `/`.

use std::path::{Path, PathBuf};

use kbuild_base::dirs::Dirs;
use kbuild_base::env::{names, Env};

/// The file kbuild writes in every out-dir it creates; `kbuild clean` removes only a directory
/// that holds it.
pub const OUT_DIR_MARKER: &str = ".kbuild-out";

const MARKER_TEXT: &[u8] = b"A kbuild build's output directory: `kbuild clean` removes it.\n";

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("removing {path}: {err}")]
    Remove { path: String, err: std::io::Error },
    #[error("refusing to remove {path}: {why}")]
    Refused { path: String, why: String },
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
}

/// An out-dir kbuild cannot write into.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error(
        "out-dir {0} is a symbolic link: kbuild writes its output only into a directory of its own"
    )]
    Symlink(String),
    #[error(
        "{0} is a symbolic link: kbuild writes its output only into directories of its own (remove the link)"
    )]
    LinkInside(String),
    #[error("{0} is not a directory: kbuild needs a directory of its own there")]
    NotADirectory(String),
    #[error("creating out-dir {path}: {err}")]
    Io { path: String, err: std::io::Error },
}

/// Create `out_dir` if needed and put kbuild's marker in it. An out-dir that is a symbolic
/// link is refused (the build would write wherever it points), and so is a link on the way to
/// it from `project_root` (a cloned tree's `target -> /elsewhere`) when it lies inside the
/// project: those directories are created one at a time, links never followed.
pub fn mark_out_dir(out_dir: &Path, project_root: &Path) -> Result<(), MarkError> {
    let shown = || out_dir.display().to_string();
    if std::fs::symlink_metadata(out_dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(MarkError::Symlink(shown()));
    }
    let io = |err| MarkError::Io { path: shown(), err };
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match abs(out_dir).strip_prefix(abs(project_root)) {
        Ok(rel) if !rel.as_os_str().is_empty() => {
            real_dir(project_root, rel)?;
        }
        _ => std::fs::create_dir_all(out_dir).map_err(io)?,
    }
    if !std::fs::symlink_metadata(out_dir).is_ok_and(|m| m.is_dir()) {
        return Err(MarkError::Symlink(shown()));
    }
    let marker = out_dir.join(OUT_DIR_MARKER);
    if !marker.is_file() {
        kbuild_base::fs::write_atomic(&marker, MARKER_TEXT).map_err(io)?;
    }
    Ok(())
}

/// `base/rel` as a real directory: each component of `rel` that exists must be a directory,
/// not a symbolic link; each missing one is made with `create_dir` (never through a link) and
/// checked again. The build makes every directory it writes into under its out-dir (per-target
/// dirs, `include`, `fat`) this way, so a planted `target/kbuild/sm_89 -> /elsewhere` is
/// refused, not written through. `base` itself is the caller's to check.
pub fn real_dir(base: &Path, rel: &Path) -> Result<PathBuf, MarkError> {
    use std::path::Component;
    let mut dir = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) => dir.push(name),
            Component::CurDir => continue,
            // Only kbuild's own relative names come here.
            _ => {
                return Err(MarkError::NotADirectory(
                    base.join(rel).display().to_string(),
                ))
            }
        }
        let shown = || dir.display().to_string();
        let meta = match std::fs::symlink_metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    // Made by a concurrent build meanwhile: checked below like any other.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(err) => return Err(MarkError::Io { path: shown(), err }),
                }
                std::fs::symlink_metadata(&dir)
                    .map_err(|err| MarkError::Io { path: shown(), err })?
            }
            Err(err) => return Err(MarkError::Io { path: shown(), err }),
        };
        if meta.file_type().is_symlink() {
            return Err(MarkError::LinkInside(shown()));
        }
        if !meta.is_dir() {
            return Err(MarkError::NotADirectory(shown()));
        }
    }
    Ok(dir)
}

/// Remove `out_dir` (only when it holds kbuild's marker), and with `cache` the compile cache of
/// kbuild's directories (`env`); `project_root` (the directory of the Kbuild.toml whose out-dir
/// this is, when there is one) is never removed, nor anything above it. `removed` hears of
/// each directory as it goes (one that is not there is skipped).
pub fn clean(
    out_dir: &Path,
    project_root: Option<&Path>,
    cache: bool,
    env: &Env,
    removed: &mut dyn FnMut(&Path),
) -> Result<(), CleanError> {
    let mut dirs: Vec<(PathBuf, bool)> = vec![(out_dir.to_path_buf(), true)];
    if cache {
        dirs.push((Dirs::from_env(env)?.cache, false));
    }
    for (dir, needs_marker) in dirs {
        if std::fs::symlink_metadata(&dir).is_err() {
            continue;
        }
        check_removable(&dir, needs_marker, project_root, env)?;
        std::fs::remove_dir_all(&dir).map_err(|err| CleanError::Remove {
            path: dir.display().to_string(),
            err,
        })?;
        removed(&dir);
    }
    Ok(())
}

/// Why `dir` may not be removed, if it may not.
fn check_removable(
    dir: &Path,
    needs_marker: bool,
    project_root: Option<&Path>,
    env: &Env,
) -> Result<(), CleanError> {
    let refuse = |why: String| {
        Err(CleanError::Refused {
            path: dir.display().to_string(),
            why,
        })
    };
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return refuse("it is a symbolic link, not a directory kbuild made".into());
    }
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if real.parent().is_none() {
        return refuse("it is the filesystem root".into());
    }
    let home = env.str(names::HOME).map(|h| {
        let h = Path::new(h);
        std::fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf())
    });
    if home.as_deref() == Some(real.as_path()) {
        return refuse("it is your home directory".into());
    }
    if let Some(root) = project_root {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        if root.starts_with(&real) {
            return refuse(format!(
                "it holds the project itself ({}); set `out-dir` in Kbuild.toml to a directory \
                 inside the project",
                root.display()
            ));
        }
    }
    if needs_marker && !dir.join(OUT_DIR_MARKER).is_file() {
        return refuse(format!(
            "it has no {OUT_DIR_MARKER} marker, so kbuild did not make it (kbuild puts one in \
             every out-dir it creates); remove it yourself if it is a build's output"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with_home(home: &Path) -> Env {
        Env::empty().with(names::HOME, home.display().to_string())
    }

    #[test]
    fn a_marked_out_dir_is_removed() {
        let t = tempfile::tempdir().expect("tempdir");
        let out = t.path().join("proj/out");
        std::fs::create_dir_all(t.path().join("proj")).expect("mkdir");
        mark_out_dir(&out, &t.path().join("proj")).expect("mark");
        std::fs::write(out.join("manifest.json"), "{}").expect("write");
        let mut gone = Vec::new();
        clean(
            &out,
            Some(&t.path().join("proj")),
            false,
            &env_with_home(t.path()),
            &mut |d| gone.push(d.to_path_buf()),
        )
        .expect("clean");
        assert_eq!(gone, std::slice::from_ref(&out));
        assert!(!out.exists());
    }

    #[test]
    fn the_project_its_ancestors_home_root_and_unmarked_dirs_are_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path().join("home");
        let proj = home.join("src/proj");
        std::fs::create_dir_all(proj.join("unmarked")).expect("mkdir");
        std::fs::write(proj.join("Kbuild.toml"), "").expect("write");
        // Even a marker planted in them does not make these removable.
        for d in [&proj, &home] {
            std::fs::write(d.join(OUT_DIR_MARKER), "").expect("write");
        }
        let env = env_with_home(&home);
        let cases: [(&Path, &str); 5] = [
            (&proj, "holds the project itself"),
            (&proj.join(".."), "holds the project itself"),
            (&home, "your home directory"),
            (Path::new("/"), "filesystem root"),
            (&proj.join("unmarked"), "no .kbuild-out marker"),
        ];
        for (dir, want) in cases {
            let e = clean(dir, Some(&proj), false, &env, &mut |_| {})
                .expect_err("refused")
                .to_string();
            assert!(e.contains(want), "{}: {e}", dir.display());
        }
        let e = clean(&home.join("src"), None, true, &env, &mut |_| {})
            .expect_err("unmarked")
            .to_string();
        assert!(e.contains("no .kbuild-out marker"), "{e}");
        assert!(proj.join("Kbuild.toml").is_file() && proj.join("unmarked").is_dir());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_out_dir_is_neither_written_nor_removed() {
        let t = tempfile::tempdir().expect("tempdir");
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        std::fs::write(elsewhere.join(OUT_DIR_MARKER), "").expect("write");
        let out = t.path().join("out");
        std::os::unix::fs::symlink(&elsewhere, &out).expect("symlink");
        assert!(matches!(
            mark_out_dir(&out, t.path()),
            Err(MarkError::Symlink(_))
        ));
        let e = clean(&out, None, false, &env_with_home(t.path()), &mut |_| {})
            .expect_err("refused")
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(elsewhere.join(OUT_DIR_MARKER).is_file());
    }

    #[cfg(unix)]
    #[test]
    fn links_planted_inside_the_out_dir_or_on_the_way_to_it_are_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let proj = t.path().join("proj");
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        std::fs::create_dir_all(&proj).expect("mkdir");
        // `target -> elsewhere`: the default out-dir would be made through it.
        std::os::unix::fs::symlink(&elsewhere, proj.join("target")).expect("symlink");
        let e = mark_out_dir(&proj.join("target/kbuild"), &proj)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("proj/target is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), 0);

        // Inside a real out-dir: a per-target dir and `include` pointing outside.
        let out = proj.join("out");
        mark_out_dir(&out, &proj).expect("mark");
        for name in ["sm_89", "include"] {
            std::os::unix::fs::symlink(&elsewhere, out.join(name)).expect("symlink");
            let e = real_dir(&out, Path::new(name))
                .expect_err("refused")
                .to_string();
            assert!(e.contains(&format!("out/{name} is a symbolic link")), "{e}");
        }
        let e = real_dir(&out, Path::new("include/hip-shim"))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("out/include is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), 0);
        // A file where a directory belongs.
        std::fs::write(out.join("gfx1100"), "").expect("write");
        assert!(matches!(
            real_dir(&out, Path::new("gfx1100")),
            Err(MarkError::NotADirectory(_))
        ));
        // Real directories are made and reused.
        let made = real_dir(&out, Path::new("fat")).expect("made");
        assert!(made.is_dir());
        assert_eq!(real_dir(&out, Path::new("fat")).expect("again"), made);
    }
}
