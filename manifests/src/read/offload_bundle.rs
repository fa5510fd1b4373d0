//! Clang offload bundles: plain (`__CLANG_OFFLOAD_BUNDLE__`) and compressed (`CCOB` v1, v2,
//! v3; zlib or zstd), as written by `clang-offload-bundler` (LLVM `OffloadBundler.cpp`).
//!
//! The listing must equal `clang-offload-bundler-19 --list --type=o --input=FILE`, and each
//! entry's bytes what `--unbundle` extracts.

use serde::Serialize;

use super::decompress;
use super::elf::{u16_at, u32_at, u64_at};
use super::fatbin::Compression;
use super::ReadError;

/// Magic of a plain bundle.
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Magic of a compressed bundle.
pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";

/// Is this a plain or compressed bundle?
pub fn is_offload_bundle(data: &[u8]) -> bool {
    data.starts_with(BUNDLE_MAGIC) || data.starts_with(CCOB_MAGIC)
}

/// One bundle entry, borrowing its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleEntry<'data> {
    /// The id as written: `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`.
    pub id: String,
    /// `hip`, `hipv4`, `host`, `openmp`, ...
    pub kind: String,
    /// `amdgcn-amd-amdhsa-` / `x86_64-unknown-linux-gnu`: four components, the last may be empty.
    pub triple: String,
    /// `gfx90a:xnack-`; `None` for host entries.
    pub target_id: Option<String>,
    /// Offset of the payload from the start of the bundle.
    pub offset: u64,
    pub size: u64,
    #[serde(skip)]
    pub data: &'data [u8],
}

/// The header of a compressed bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompressedHeader {
    /// 1, 2 or 3.
    pub version: u16,
    /// Zlib (method 0) or Zstd (method 1).
    pub method: Compression,
    /// v2: u32, v3: u64; `None` for v1.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    /// The hash LLVM stores (xxh3-64 of the uncompressed bundle); not verified here.
    pub hash: u64,
    /// Size of this header; the compressed stream follows.
    pub header_size: usize,
}

/// Splits an id into (kind, triple, target id), the way `OffloadTargetInfo` does.
pub fn parse_id(id: &str) -> (String, String, Option<String>) {
    let (kind, rest) = id.split_once('-').unwrap_or((id, ""));
    let parts: Vec<&str> = rest.splitn(5, '-').collect();
    let target = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    match parts.as_slice() {
        // Old 3-component triples: hip-amdgcn-amd-amdhsa-gfx906
        [a, v, o, t] if t.starts_with("gfx") || t.starts_with("sm_") => {
            (kind.into(), format!("{a}-{v}-{o}"), target(t))
        }
        [a, v, o, e, t] => (kind.into(), format!("{a}-{v}-{o}-{e}"), target(t)),
        _ => (kind.into(), rest.to_string(), None),
    }
}

/// Reads the header of a compressed (`CCOB`) bundle.
pub fn read_compressed_header(data: &[u8]) -> Result<CompressedHeader, ReadError> {
    const WHAT: &str = "compressed offload bundle header";
    if !data.starts_with(CCOB_MAGIC) {
        return Err(ReadError::at(WHAT, 0, "no CCOB magic"));
    }
    let short = || ReadError::at(WHAT, 0, "truncated");
    let version = u16_at(data, 4).ok_or_else(short)?;
    let method = match u16_at(data, 6).ok_or_else(short)? {
        0 => Compression::Zlib,
        1 => Compression::Zstd,
        m => {
            return Err(ReadError::unsupported(
                WHAT,
                Some(6),
                format!("compression method {m} (known: 0 zlib, 1 zstd)"),
            ))
        }
    };
    let (total_size, uncompressed_size, hash, header_size) = match version {
        1 => (
            None,
            u64::from(u32_at(data, 8).ok_or_else(short)?),
            u64_at(data, 12).ok_or_else(short)?,
            20,
        ),
        2 => (
            Some(u64::from(u32_at(data, 8).ok_or_else(short)?)),
            u64::from(u32_at(data, 12).ok_or_else(short)?),
            u64_at(data, 16).ok_or_else(short)?,
            24,
        ),
        3 => (
            Some(u64_at(data, 8).ok_or_else(short)?),
            u64_at(data, 16).ok_or_else(short)?,
            u64_at(data, 24).ok_or_else(short)?,
            32,
        ),
        v => {
            return Err(ReadError::unsupported(
                WHAT,
                Some(4),
                format!("version {v} (known: 1, 2, 3)"),
            ))
        }
    };
    if let Some(t) = total_size {
        if t < header_size as u64 || t > data.len() as u64 {
            return Err(ReadError::at(
                WHAT,
                8,
                format!(
                    "total size {t} does not fit the input ({} bytes)",
                    data.len()
                ),
            ));
        }
    }
    Ok(CompressedHeader {
        version,
        method,
        total_size,
        uncompressed_size,
        hash,
        header_size,
    })
}

/// Decompresses a `CCOB` bundle into the plain bundle it holds (bounded by `limit`).
pub fn decompress_bundle(
    data: &[u8],
    limit: u64,
) -> Result<(CompressedHeader, Vec<u8>), ReadError> {
    const WHAT: &str = "compressed offload bundle";
    let h = read_compressed_header(data)?;
    let end = h.total_size.map_or(data.len(), |t| t as usize);
    let stream = data
        .get(h.header_size..end)
        .ok_or_else(|| ReadError::at(WHAT, 0, "truncated"))?;
    let off = h.header_size as u64;
    let out = match h.method {
        Compression::Zstd => decompress::zstd(WHAT, off, stream, Some(h.uncompressed_size), limit)?,
        _ => decompress::zlib(WHAT, off, stream, Some(h.uncompressed_size), limit)?,
    };
    Ok((h, out))
}

/// Reads the entries of a plain bundle.
pub fn read_offload_bundle(data: &[u8]) -> Result<Vec<BundleEntry<'_>>, ReadError> {
    const WHAT: &str = "offload bundle entry table";
    if data.starts_with(CCOB_MAGIC) {
        return Err(ReadError::unsupported(
            WHAT,
            Some(0),
            "compressed (CCOB) bundle: decompress it first (`decompress_bundle`)",
        ));
    }
    if !data.starts_with(BUNDLE_MAGIC) {
        return Err(ReadError::at(WHAT, 0, "no __CLANG_OFFLOAD_BUNDLE__ magic"));
    }
    let mut pos = BUNDLE_MAGIC.len();
    let count = u64_at(data, pos)
        .ok_or_else(|| ReadError::at(WHAT, pos as u64, "truncated entry count"))?;
    pos += 8;
    // Each entry needs at least 24 bytes of table: a count above that is a lie.
    if count > (data.len() / 24) as u64 {
        return Err(ReadError::at(
            WHAT,
            24,
            format!("{count} entries cannot fit in {} bytes", data.len()),
        ));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        let at = pos as u64;
        let bad = |d: String| ReadError::at(WHAT, at, format!("entry {i}: {d}"));
        let offset = u64_at(data, pos).ok_or_else(|| bad("truncated".into()))?;
        let size = u64_at(data, pos + 8).ok_or_else(|| bad("truncated".into()))?;
        let id_len = u64_at(data, pos + 16).ok_or_else(|| bad("truncated".into()))?;
        pos += 24;
        let id_end = usize::try_from(id_len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| bad(format!("id length {id_len} runs past the input")))?;
        let id = std::str::from_utf8(&data[pos..id_end])
            .map_err(|_| bad("id is not UTF-8".into()))?
            .to_string();
        pos = id_end;
        let body = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| data.get(o..o.checked_add(s)?))
            .ok_or_else(|| {
                bad(format!(
                    "payload [{offset:#x}, +{size}) runs past the input ({} bytes)",
                    data.len()
                ))
            })?;
        let (kind, triple, target_id) = parse_id(&id);
        entries.push(BundleEntry {
            id,
            kind,
            triple,
            target_id,
            offset,
            size,
            data: body,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(
            parse_id("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"),
            (
                "hipv4".into(),
                "amdgcn-amd-amdhsa-".into(),
                Some("gfx90a:xnack-".into())
            )
        );
        assert_eq!(
            parse_id("host-x86_64-unknown-linux--"),
            ("host".into(), "x86_64-unknown-linux-".into(), None)
        );
        assert_eq!(
            parse_id("hip-amdgcn-amd-amdhsa-gfx906"),
            (
                "hip".into(),
                "amdgcn-amd-amdhsa".into(),
                Some("gfx906".into())
            )
        );
    }
}
