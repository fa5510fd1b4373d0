//! sha256 digests in the two spellings kbuild uses: bare hex (object names inside a bundle,
//! `ObjectRecord::sha256`) and OCI's `sha256:<hex>`.

use sha2::{Digest as _, Sha256};

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// sha256 of `bytes` in OCI form, `sha256:<hex>`.
pub fn oci_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// Whether `s` is 64 lowercase hex digits (a sha256).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hex part of an OCI `sha256:<hex>` digest, if it is one.
pub fn oci_hex(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| is_sha256_hex(h))
}

/// blake3 of `bytes`, lowercase hex (the per-object load-time check and the compile cache).
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// blake3 of a file's bytes, hex, read in a stream.
pub fn blake3_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new();
    h.update_reader(std::fs::File::open(path)?)?;
    Ok(h.finalize().to_hex().to_string())
}

/// sha256 of a file's bytes, lowercase hex, read in a stream.
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut h)?;
    Ok(hex(&h.finalize()))
}

/// A streaming sha256 (for blobs read from the network).
#[derive(Default)]
pub struct Hasher(Sha256);

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// `sha256:<hex>`.
    pub fn finish_oci(self) -> String {
        format!("sha256:{}", hex(&self.0.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector_and_forms() {
        let h = sha256_hex(b"abc");
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&h));
        assert!(!is_sha256_hex(&h.to_uppercase()));
        assert_eq!(oci_hex(&oci_digest(b"abc")), Some(h.as_str()));
        assert_eq!(oci_hex("sha512:00"), None);
        let mut s = Hasher::default();
        s.update(b"a");
        s.update(b"bc");
        assert_eq!(s.finish_oci(), oci_digest(b"abc"));
    }
}
