//! Bounded decompression: zstd, zlib and the LZ4 block format of NVIDIA fatbins.
//!
//! A declared size over the limit is refused before any work, and output is never allowed to
//! grow past `min(declared, limit)`, so a hostile input costs at most the limit in memory.

use std::io::Read;

use super::ReadError;

/// zstd windows accepted: up to 8 MiB always (what streaming compressors use for small
/// inputs), up to the declared output size beyond that, never over 128 MiB (zstd's own default
/// maximum). A window never needs to exceed the content, so this bounds the decoder's
/// allocation by the declared size without refusing real frames.
fn zstd_window_log_max(cap: u64) -> u32 {
    (64 - cap.saturating_sub(1).leading_zeros()).clamp(23, 27)
}

/// Checks a declared size against the limit.
pub(crate) fn check_declared(
    what: &'static str,
    offset: u64,
    declared: u64,
    limit: u64,
) -> Result<(), ReadError> {
    if declared > limit {
        return Err(ReadError::LimitExceeded {
            what,
            offset,
            declared,
            limit,
        });
    }
    Ok(())
}

fn finish(
    what: &'static str,
    offset: u64,
    out: Vec<u8>,
    declared: Option<u64>,
    cap: u64,
) -> Result<Vec<u8>, ReadError> {
    let got = out.len() as u64;
    match declared {
        Some(d) if got != d => Err(ReadError::at(
            what,
            offset,
            format!(
                "decompressed to {}{got} bytes, but {d} were declared",
                if got > d { "more than " } else { "" }
            ),
        )),
        None if got > cap => Err(ReadError::LimitExceeded {
            what,
            offset,
            declared: got,
            limit: cap,
        }),
        _ => Ok(out),
    }
}

/// Reads at most `cap + 1` bytes from a decoder.
fn read_capped(
    what: &'static str,
    offset: u64,
    reader: impl Read,
    cap: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| ReadError::at(what, offset, format!("corrupt compressed data: {e}")))?;
    Ok(out)
}

/// Decompresses a zstd stream (one or more frames).
pub(crate) fn zstd(
    what: &'static str,
    offset: u64,
    data: &[u8],
    declared: Option<u64>,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    if let Some(d) = declared {
        check_declared(what, offset, d, limit)?;
    }
    let cap = declared.unwrap_or(limit).min(limit);
    let mut decoder = zstd::stream::read::Decoder::with_buffer(data)
        .map_err(|e| ReadError::at(what, offset, format!("zstd: {e}")))?;
    decoder
        .window_log_max(zstd_window_log_max(cap))
        .map_err(|e| ReadError::at(what, offset, format!("zstd: {e}")))?;
    let out = read_capped(what, offset, decoder, cap)?;
    finish(what, offset, out, declared, cap)
}

/// Decompresses a zlib stream.
pub(crate) fn zlib(
    what: &'static str,
    offset: u64,
    data: &[u8],
    declared: Option<u64>,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    if let Some(d) = declared {
        check_declared(what, offset, d, limit)?;
    }
    let cap = declared.unwrap_or(limit).min(limit);
    let out = read_capped(what, offset, flate2::read::ZlibDecoder::new(data), cap)?;
    finish(what, offset, out, declared, cap)
}

/// Decompresses an LZ4 *block* (no frame header), as NVIDIA fatbins store entries with flag
/// 0x2000 (`fatbinary --compress-mode=speed`); `expected` is the entry's uncompressed size.
pub(crate) fn lz4_block(
    what: &'static str,
    offset: u64,
    src: &[u8],
    expected: u64,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    check_declared(what, offset, expected, limit)?;
    let cap =
        usize::try_from(expected).map_err(|_| ReadError::at(what, offset, "size out of range"))?;
    let bad = |at: usize, d: &str| ReadError::at(what, offset + at as u64, format!("LZ4: {d}"));
    let mut out: Vec<u8> = Vec::with_capacity(cap.min(src.len().saturating_mul(4)).min(1 << 24));
    let mut i = 0usize;
    let read_len = |i: &mut usize, base: usize| -> Result<usize, ReadError> {
        let mut n = base;
        if base == 15 {
            loop {
                let b = *src.get(*i).ok_or_else(|| bad(*i, "truncated length"))?;
                *i += 1;
                n = n
                    .checked_add(usize::from(b))
                    .ok_or_else(|| bad(*i, "length overflows"))?;
                if b != 255 {
                    break;
                }
            }
        }
        Ok(n)
    };
    while let Some(&token) = src.get(i) {
        i += 1;
        let lit = read_len(&mut i, usize::from(token >> 4))?;
        let lit_end = i
            .checked_add(lit)
            .ok_or_else(|| bad(i, "literal length overflows"))?;
        let literals = src
            .get(i..lit_end)
            .ok_or_else(|| bad(i, "literals run past the input"))?;
        if out.len() + literals.len() > cap {
            return Err(bad(i, "output larger than the declared size"));
        }
        out.extend_from_slice(literals);
        i = lit_end;
        if i == src.len() {
            break; // the last sequence has literals only
        }
        let off_bytes = src
            .get(i..i + 2)
            .ok_or_else(|| bad(i, "truncated match offset"))?;
        let dist = usize::from(u16::from_le_bytes([
            off_bytes.first().copied().unwrap_or(0),
            off_bytes.get(1).copied().unwrap_or(0),
        ]));
        i += 2;
        if dist == 0 || dist > out.len() {
            return Err(bad(
                i - 2,
                &format!("match offset {dist} points before the output start"),
            ));
        }
        let mlen = read_len(&mut i, usize::from(token & 15))?
            .checked_add(4)
            .ok_or_else(|| bad(i, "match length overflows"))?;
        if out.len().checked_add(mlen).is_none_or(|n| n > cap) {
            return Err(bad(i, "output larger than the declared size"));
        }
        let start = out.len() - dist;
        if dist >= mlen {
            out.extend_from_within(start..start + mlen);
        } else {
            for k in 0..mlen {
                let b = out
                    .get(start + k)
                    .copied()
                    .ok_or_else(|| bad(i, "match before the output start"))?;
                out.push(b);
            }
        }
    }
    finish(what, offset, out, Some(expected), cap as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lz4_literals_and_overlapping_match() {
        // 3 literals "abc", then a match of 8 at distance 3 -> "abcabcabcab".
        let block = [0x34, b'a', b'b', b'c', 3, 0, 0x00];
        // token 0x34: 3 literals, match len 4+4; final token 0x00: no literals, end.
        let block = &block[..6];
        let out = lz4_block("t", 0, block, 11, 100).unwrap();
        assert_eq!(out, b"abcabcabcab");
        assert!(lz4_block("t", 0, block, 10, 100).is_err());
        assert!(lz4_block("t", 0, &[0x10, b'a', 9, 0], 5, 100).is_err());
        assert!(matches!(
            lz4_block("t", 0, block, 1000, 100),
            Err(ReadError::LimitExceeded { .. })
        ));
    }

    #[test]
    fn zstd_and_zlib_are_bounded() {
        let raw = vec![7u8; 100_000];
        let z = ::zstd::bulk::compress(&raw, 3).unwrap();
        assert_eq!(zstd("t", 0, &z, Some(100_000), 1 << 20).unwrap(), raw);
        assert!(zstd("t", 0, &z, Some(99_999), 1 << 20).is_err());
        assert!(matches!(
            zstd("t", 0, &z, None, 1000),
            Err(ReadError::LimitExceeded { .. })
        ));
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, &raw).unwrap();
        let zl = e.finish().unwrap();
        assert_eq!(zlib("t", 0, &zl, Some(100_000), 1 << 20).unwrap(), raw);
        assert!(matches!(
            zlib("t", 0, &zl, Some(1 << 30), 1 << 20),
            Err(ReadError::LimitExceeded { .. })
        ));
    }
}
