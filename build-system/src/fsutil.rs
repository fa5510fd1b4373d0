//! File-system helpers: atomic writes and kbuild's XDG directories.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` through a temp file in the same directory and a rename, so a
/// reader (or a killed writer) never sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile_in(dir)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_data().ok();
    drop(tmp.1);
    std::fs::rename(&tmp.0, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp.0);
    })
}

/// Like [`write_atomic`], but leaves the file untouched (mtime too) when it already holds
/// exactly these bytes. Returns whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if let Ok(old) = std::fs::read(path) {
        if old == bytes {
            return Ok(false);
        }
    }
    write_atomic(path, bytes)?;
    Ok(true)
}

/// A fresh, uniquely named file in `dir` (pid + counter + time), opened for writing.
pub fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = dir.join(format!(".tmp-{}-{n}-{nanos}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A fresh, uniquely named directory in `dir`.
pub fn tempdir_in(dir: &Path, tag: &str) -> std::io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = dir.join(format!(".tmp-{tag}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

fn xdg(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => home().join(fallback),
    }
}

/// kbuild's cache directory: `KBUILD_CACHE_DIR`, else `$XDG_CACHE_HOME/kbuild`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("KBUILD_CACHE_DIR") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => xdg("XDG_CACHE_HOME", ".cache").join("kbuild"),
    }
}

/// kbuild's data directory (managed toolchains): `KBUILD_DATA_DIR`, else
/// `$XDG_DATA_HOME/kbuild`.
pub fn data_dir() -> PathBuf {
    match std::env::var_os("KBUILD_DATA_DIR") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => xdg("XDG_DATA_HOME", ".local/share").join("kbuild"),
    }
}

/// blake3 of a file's bytes, hex.
pub fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    h.update_reader(std::fs::File::open(path)?)?;
    Ok(h.finalize().to_hex().to_string())
}

/// sha256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_and_unchanged_skip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b.txt");
        write_atomic(&p, b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert!(!write_if_changed(&p, b"one").unwrap());
        assert!(write_if_changed(&p, b"two").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
