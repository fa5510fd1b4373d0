//! Atomic writes: a temp file in the same directory, then a rename, so a reader (or a killed
//! writer) never sees half a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh `.tmp-TAG-*` path in `dir` (pid + counter + time): unique within and across
/// processes, so concurrent writers never share one.
pub fn temp_path(dir: &Path, tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    dir.join(format!(".tmp-{tag}-{}-{n}-{nanos}", std::process::id()))
}

/// A fresh, uniquely named file in `dir`, opened for writing.
pub fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    loop {
        let p = temp_path(dir, "w");
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

/// A fresh, uniquely named directory in `dir` (created with its parents).
pub fn tempdir_in(dir: &Path, tag: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    loop {
        let p = temp_path(dir, tag);
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Write `bytes` to `path` atomically, creating parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let (tmp, mut f) = tempfile_in(dir)?;
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_data().ok();
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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

/// Up to `limit` bytes from the current position of `file`, in as few `read` calls as the
/// kernel allows (one, for a regular file in the page cache). `Read::read_to_end` on a
/// `Take` grows its reads from 8 KiB, so a 66 kB file took four system calls; on the load
/// path each costs microseconds. Fewer bytes come back only at end of file.
pub fn read_up_to(file: &mut impl std::io::Read, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; limit];
    let mut got = 0;
    while got < limit {
        match file.read(&mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(got);
    Ok(bytes)
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

    #[test]
    fn read_up_to_stops_at_limit_or_end() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![7u8; 70_000]).unwrap();
        let mut f = std::fs::File::open(&p).unwrap();
        assert_eq!(read_up_to(&mut f, 66_000).unwrap(), vec![7u8; 66_000]);
        // The rest, shorter than asked: end of file.
        assert_eq!(read_up_to(&mut f, 66_000).unwrap().len(), 4_000);
        assert!(read_up_to(&mut f, 10).unwrap().is_empty());
    }

    #[test]
    fn temp_paths_differ() {
        let d = Path::new("/x");
        assert_ne!(temp_path(d, "t"), temp_path(d, "t"));
    }
}
