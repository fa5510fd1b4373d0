//! Reading outside files through a cap: a file that is not a regular file (a FIFO, a device
//! such as `/dev/zero` behind a symlink) is refused before it is opened for reading, and one
//! over the caller's limit before a byte of it is read, so no input costs more memory than
//! its limit however it was made.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why an outside file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a regular file ({kind}); refusing to read it as {what}", path.display())]
    NotAFile {
        path: PathBuf,
        kind: &'static str,
        what: &'static str,
    },
    #[error("{} is {size} bytes, over kbuild's limit of {limit} bytes for {what}; refusing to read it", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        what: &'static str,
    },
}

impl ReadError {
    /// The file is not there (callers for which a missing file is no error test this).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// The underlying I/O error, if this is one.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            ReadError::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The whole of `path` (symlinks followed), at most `limit` bytes; `what` names the kind of
/// file in errors ("a manifest", "a signature file").
pub fn read_capped(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
            what,
        });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Again on the open file: the path may have been swapped in between.
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
            what,
        });
    }
    let too_large = |size| ReadError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
        what,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // One byte past the limit tells a file that grew since the stat.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_capped_string(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<String, ReadError> {
    let bytes = read_capped(path, limit, what)?;
    String::from_utf8(bytes).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_special_files_and_oversize_files_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_capped(&zero, 1 << 20, "a manifest").unwrap_err();
        assert!(
            e.to_string().contains("character device") && e.to_string().contains("zero"),
            "{e}"
        );
        let e = read_capped(dir.path(), 1 << 20, "a manifest").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");

        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(10 << 20)
            .unwrap();
        let e = read_capped(&big, 1 << 20, "a signature file").unwrap_err();
        assert!(
            matches!(e, ReadError::TooLarge { size, limit, .. } if size == 10 << 20 && limit == 1 << 20),
            "{e}"
        );
        assert!(e.to_string().contains("a signature file"), "{e}");

        let ok = dir.path().join("ok");
        std::fs::write(&ok, b"four").unwrap();
        assert_eq!(read_capped(&ok, 4, "x").unwrap(), b"four");
        assert!(read_capped(&ok, 3, "x").is_err());
        assert!(read_capped(&dir.path().join("none"), 4, "x")
            .unwrap_err()
            .is_not_found());
    }
}
