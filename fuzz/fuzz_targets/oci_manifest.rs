#![no_main]
//! OCI manifest parsing: a fetched image manifest → a checked kbuild artifact; and the
//! signature file attached to it.
use kbuild_registry::oci::{parse_kbuild_artifact, FetchedManifest, IMAGE_MANIFEST};
use kbuild_bundle::sign::SignatureFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = FetchedManifest {
        digest: String::new(),
        bytes: data.to_vec(),
        media_type: IMAGE_MANIFEST.to_string(),
    };
    let _ = parse_kbuild_artifact(&f, "fuzz/r:1");
    let _ = SignatureFile::from_json(data);
});
