//! Offload bundles and hip host objects against `clang-offload-bundler-19` and
//! `llvm-readobj-19`.

use crate::common;

use common::*;
use kbuild_manifest::read::fatbin::Compression;
use kbuild_manifest::read::offload_bundle::{read_compressed_header, read_offload_bundle};
use kbuild_manifest::read::{identify, walk, Format, ReadError};

fn listed_ids(file: &str) -> Vec<String> {
    let p = fixture_path(file);
    let mut ids: Vec<String> =
        bundler(&["--list", "--type=o", &format!("--input={}", p.display())])
            .lines()
            .map(str::to_string)
            .collect();
    ids.sort();
    ids
}

fn unbundle(file: &str, id: &str) -> Vec<u8> {
    let out = std::env::temp_dir().join(format!(
        "kbuild-unbundle-{}-{}",
        std::process::id(),
        id.replace([':', '/'], "_")
    ));
    let p = fixture_path(file);
    bundler(&[
        "--unbundle",
        "--type=o",
        &format!("--input={}", p.display()),
        &format!("--targets={id}"),
        &format!("--output={}", out.display()),
    ]);
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).ok();
    bytes
}

#[test]
fn bundles_equal_clang_offload_bundler() {
    for file in ["small_bundle.hipfb", "small_bundle_compressed.hipfb"] {
        let data = fixture(file);
        let members = walk(&data).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut ids: Vec<String> = members.iter().map(|m| m.path.clone()).collect();
        ids.sort();
        let mut listed = listed_ids(file);
        listed.retain(|id| !id.starts_with("host-"));
        assert_eq!(ids, listed, "{file}");
        for m in &members {
            assert_eq!(m.format, Some(Format::Hsaco), "{file} {}", m.path);
            assert_eq!(
                *m.data,
                unbundle(file, &m.path)[..],
                "{file} {}: bytes differ from --unbundle",
                m.path
            );
            let id = identify(&m.data).unwrap();
            assert_eq!(
                Some(id.target.as_str()),
                m.container_target.as_deref(),
                "{file} {}",
                m.path
            );
            assert_eq!(id.entries, ["scale"]);
        }
        let expected = if file.contains("compressed") {
            Compression::Zstd
        } else {
            Compression::None
        };
        assert!(members.iter().all(|m| m.compression == expected), "{file}");
    }
    let plain = fixture("small_bundle.hipfb");
    let entries = read_offload_bundle(&plain).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].kind, "host");
    assert_eq!(entries[0].size, 0);
    let h = read_compressed_header(&fixture("small_bundle_compressed.hipfb")).unwrap();
    assert_eq!(
        (h.version, h.method, h.uncompressed_size),
        (2, Compression::Zstd, plain.len() as u64)
    );
}

/// CCOB v1 and v3 and zlib, which clang 19 does not write, built from the plain bundle with the
/// header layouts of LLVM's `CompressedOffloadBundle`.
#[test]
fn synthesized_compressed_bundles() {
    let plain = fixture("small_bundle.hipfb");
    let want: Vec<(String, Vec<u8>)> = walk(&plain)
        .unwrap()
        .into_iter()
        .map(|m| (m.path, m.data.into_owned()))
        .collect();
    let zstd = zstd::bulk::compress(&plain, 3).unwrap();
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut z, &plain).unwrap();
    let zlib = z.finish().unwrap();
    for (version, method, stream) in [
        (1u16, 1u16, &zstd),
        (2, 0, &zlib),
        (3, 1, &zstd),
        (3, 0, &zlib),
        (1, 0, &zlib),
    ] {
        let mut b = b"CCOB".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(method.to_le_bytes());
        let header = match version {
            1 => 20,
            2 => 24,
            _ => 32,
        };
        let total = (header + stream.len()) as u64;
        match version {
            1 => b.extend((plain.len() as u32).to_le_bytes()),
            2 => {
                b.extend((total as u32).to_le_bytes());
                b.extend((plain.len() as u32).to_le_bytes());
            }
            _ => {
                b.extend(total.to_le_bytes());
                b.extend((plain.len() as u64).to_le_bytes());
            }
        }
        b.extend(0x1234_5678_u64.to_le_bytes());
        b.extend(stream.iter());
        let got: Vec<(String, Vec<u8>)> = walk(&b)
            .unwrap_or_else(|e| panic!("v{version} method {method}: {e}"))
            .into_iter()
            .map(|m| (m.path, m.data.into_owned()))
            .collect();
        assert_eq!(got, want, "v{version} method {method}");
        // A declared size over the limit is refused before decompressing.
        let limits = kbuild_manifest::read::Limits {
            max_decompressed: 1000,
            ..Default::default()
        };
        let err = kbuild_manifest::read::walk_with(&b, &limits).unwrap_err();
        assert!(matches!(err, ReadError::LimitExceeded { .. }), "{err}");
    }
}

#[test]
fn hip_host_objects() {
    for (file, targets) in [
        ("small_host_hip.o", vec!["gfx1100"]),
        ("libsmall_hip.so", vec!["gfx1100", "gfx90a:xnack-"]),
    ] {
        let data = fixture(file);
        let members = walk(&data).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut got: Vec<String> = members
            .iter()
            .map(|m| identify(&m.data).unwrap().target)
            .collect();
        got.sort();
        assert_eq!(got, targets, "{file}");
        for m in &members {
            assert!(
                m.path.starts_with(".hip_fatbin#hipv4-amdgcn-amd-amdhsa--"),
                "{file}: {}",
                m.path
            );
            assert_eq!(m.parent, Some(Format::OffloadBundle));
            // Each member is a whole code object: llvm-readobj reads it the same way.
            let tmp = std::env::temp_dir().join(format!(
                "kbuild-member-{}-{}.hsaco",
                std::process::id(),
                got.len()
            ));
            std::fs::write(&tmp, &m.data[..]).unwrap();
            let out = std::process::Command::new(llvm_readobj())
                .arg("--notes")
                .arg(&tmp)
                .output()
                .unwrap();
            std::fs::remove_file(&tmp).ok();
            let oracle = readobj_metadata(&String::from_utf8_lossy(&out.stdout));
            let target = format!("amdgcn-amd-amdhsa--{}", identify(&m.data).unwrap().target);
            assert_eq!(
                oracle.get("amdhsa.target"),
                Some(&Yaml::Scalar(target)),
                "{file} {}",
                m.path
            );
        }
    }
}
