//! Tests of packages: the index against the manifest, verification, the load index file, the
//! process-wide index cache and bundles in memory.

use super::*;
use kbuild_manifest::load_index::{head_len, HEADER_LEN, LOAD_INDEX_FILE};

mod tests_support {
    pub(super) use super::reading::{build_dir, cuda};
}

mod reading {
    use super::*;
    use kbuild_manifest::compat::Rule;
    use kbuild_manifest::resources::CudaResources;
    use kbuild_manifest::target::Version;

    pub(super) fn cuda(registers: u32) -> Resources {
        Resources::Cuda(CudaResources {
            registers,
            lds_bytes: 32,
            reserved_shared_bytes: 1024,
            scratch_bytes: 0,
            spill_store_bytes: Some(0),
            spill_load_bytes: Some(0),
            const_bytes: 388,
            barriers: 1,
            max_threads: Some(256),
            occupancy: None,
            note: None,
        })
    }

    /// A build dir with one cubin-named object and one PTX object.
    pub(super) fn build_dir() -> (tempfile::TempDir, Manifest) {
        let dir = tempfile::tempdir().unwrap();
        let mut m = crate::fixtures::manifest(vec![
            crate::fixtures::object("k", None, "sm_90", None),
            crate::fixtures::object("k", None, "compute_90", Some("9.5")),
        ]);
        for o in &mut m.objects {
            let bytes = format!("object for {}", o.target).into_bytes();
            let p = dir.path().join(&o.path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &bytes).unwrap();
            o.sha256 = sha256_hex(&bytes);
            o.blake3 = Some(blake3::hash(&bytes).to_hex().to_string());
            o.size = bytes.len() as u64;
            if o.format == "cubin" {
                o.resources.insert("k".into(), cuda(32));
            }
        }
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        (dir, m)
    }

    #[test]
    fn the_index_agrees_with_the_manifest() {
        let (dir, m) = build_dir();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.kernels(), m.kernels.as_slice());
        assert_eq!(p.manifest().unwrap(), &m);
        for (i, o) in m.objects.iter().enumerate() {
            let mut r = p.record(i).unwrap();
            r.cache_key = o.cache_key.clone();
            assert_eq!(&r, o);
        }
        assert_eq!(p.objects()[1].ptx_isa, Some(Version(9, 5)));
        let sel = p.select(&Device::parse("sm_90", Some(Version(13, 0)), None).unwrap());
        let k = sel.kernel("k", None).unwrap();
        assert_eq!(k.selected().unwrap().target, "sm_90");
        assert_eq!(k.candidates[1].rule, Some(Rule::PtxIsaTooNew));
        // The same through a manifest file path and through from_parts.
        let p2 = Package::open(&dir.path().join("manifest.json")).unwrap();
        assert_eq!(p2.select(&sel.device), sel);
        let p3 = Package::from_parts(
            m.clone(),
            Box::new(DirSource::new(dir.path())),
            dir.path().into(),
        )
        .unwrap();
        assert_eq!(p3.select(&sel.device), sel);
        assert_eq!(p3.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn a_blake3_mismatch_is_refused_naming_the_object() {
        let (dir, m) = build_dir();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
        // The bytes of the other object put in place of this one.
        std::fs::copy(
            dir.path().join(&m.objects[1].path),
            dir.path().join(&m.objects[0].path),
        )
        .unwrap();
        let e = p.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Blake3Mismatch { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin") && msg.contains("swapped or modified"),
            "{msg}"
        );
        assert!(
            msg.contains(m.objects[0].blake3.as_deref().unwrap()),
            "{msg}"
        );
        // The manifest's 16 bytes are what is read and checked (the file has 21).
        assert!(msg.contains("16 bytes, manifest 16"), "{msg}");
        // The sha256 alone would not have been asked: the message names the blake3.
        assert!(!msg.contains("sha256"), "{msg}");
    }

    #[test]
    fn without_blake3_the_sha256_is_checked() {
        // A manifest written before objects recorded their blake3.
        let (dir, mut m) = build_dir();
        for o in &mut m.objects {
            o.blake3 = None;
        }
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.object(0).unwrap().blake3, None);
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        let e = p.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Sha256Mismatch { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin") && msg.contains(&m.objects[0].sha256),
            "{msg}"
        );
        assert!(msg.contains("7 bytes"), "{msg}");
        // A manifest with a blake3 for one object only: each object by what it records.
        m.objects[1].blake3 = Some(blake3::hash(b"object for compute_90").to_hex().to_string());
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(p.object(1).unwrap().blake3.is_some());
        assert_eq!(p.read_verified(1).unwrap(), b"object for compute_90");
        assert!(matches!(
            p.read_verified(0).unwrap_err(),
            LoaderError::Sha256Mismatch { .. }
        ));
    }

    /// Issue 26, class 8: a build dir is unsigned, and its manifest says how many bytes to
    /// read. A recorded size of 2^40 (the file itself is small) made the loader allocate
    /// 1 TiB and abort; it is refused before anything is allocated, naming file, size and cap.
    #[test]
    fn a_recorded_size_over_the_cap_is_refused_before_allocating() {
        let (dir, mut m) = build_dir();
        m.objects[0].size = 1 << 40;
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        let start = std::time::Instant::now();
        let e = p.read_verified(0).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(matches!(e, LoaderError::ObjectTooLarge { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin")
                && msg.contains("1099511627776 bytes")
                && msg.contains(&format!("cap of {} bytes", crate::source::MAX_OBJECT_BYTES)),
            "{msg}"
        );
        // At the cap it is read: the file's bytes, checked against the digest.
        m.objects[0].size = crate::source::MAX_OBJECT_BYTES;
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn object_paths_stay_inside_the_directory() {
        let (dir, mut m) = build_dir();
        m.objects[0].path = "../../etc/passwd".into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        // Refused when the manifest is read, before any path is made.
        let e = Package::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("objects[0].path `../../etc/passwd`") && e.contains("stays inside"),
            "{e}"
        );
        // A source asked for such a path directly refuses it too.
        let e = DirSource::new(dir.path())
            .read("../../etc/passwd", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stays inside its directory"), "{e}");
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = Package::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("manifest.json") && e.contains("kbuild --out directory"),
            "{e}"
        );
        let f = dir.path().join("manifest.json");
        std::fs::write(&f, b"\x28\xb5\x2f\xfd binary").unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("manifest.json") && e.contains("archive"), "{e}");
        std::fs::write(&f, b"\x7fELF binary").unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("not a kbuild manifest (JSON), bundle"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v0"}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("\"kbuild.manifest/v0\" is not supported"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v1", "objects": 3}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("manifest.json"), "{e}");
    }
}

/// The load path (choose, record, verify) allocates nothing.
mod load_path {
    use super::*;
    use crate::fixtures::object;
    use kbuild_manifest::target::Version;

    #[test]
    fn choosing_and_recording_allocate_nothing() {
        let mut m = crate::fixtures::h200_bundle();
        m.objects
            .push(object("softmax", Some("rows2"), "sm_90", None));
        m.objects
            .push(object("softmax", Some("rows10"), "sm_90a", None));
        m.kernels.push("softmax".into());
        for o in &mut m.objects {
            o.blake3 = Some(blake3::hash(o.path.as_bytes()).to_hex().to_string());
        }
        let p = Package::from_manifest(m).unwrap();
        let device = Device::parse("sm_90", Some(Version(13, 0)), None).unwrap();
        let mut verdicts = crate::select::Verdicts::new(device);
        // The first verdict of each target is the compat table's, with its reason.
        let warm = p.choose(&mut verdicts, "rmsnorm", None);
        assert!(warm.is_some());
        p.choose(&mut verdicts, "softmax", Some("rows10"));
        p.choose(&mut verdicts, "softmax", None);
        let (n, ()) = crate::alloc_count::allocations(|| {
            for (kernel, variant) in [
                ("rmsnorm", None),
                ("softmax", None),
                ("softmax", Some("rows10")),
            ] {
                let i = p.choose(&mut verdicts, kernel, variant).unwrap();
                let o = p.object(i).unwrap();
                let entry = o.entry(kernel).unwrap();
                std::hint::black_box((o.path, o.target, entry.figures.max_threads()));
                crate::package::verify(&o, o.path.as_bytes()).unwrap();
            }
        });
        assert_eq!(
            n, 0,
            "allocations on the load path's select + record + verify"
        );
        // The counter sees allocations (the trace makes many).
        assert!(crate::alloc_count::allocations(|| p.select(&device)).0 > 0);
        // And they agree with the trace.
        let s = p.select(&device);
        assert_eq!(
            p.choose(&mut verdicts, "softmax", Some("rows10")),
            s.kernel("softmax", Some("rows10"))
                .unwrap()
                .selected()
                .map(|c| c.object)
        );
    }
}

mod load_index_tests {
    use super::*;
    use kbuild_manifest::load_index::{encode, ManifestStamp};
    use kbuild_manifest::target::Version;

    fn write_index(dir: &Path, m: &Manifest) {
        let path = dir.join("manifest.json");
        let stamp = ManifestStamp::of(
            &std::fs::metadata(&path).unwrap(),
            &std::fs::read(&path).unwrap(),
        );
        let bytes = encode(m, stamp).unwrap();
        std::fs::write(dir.join(LOAD_INDEX_FILE), bytes).unwrap();
    }

    #[test]
    fn a_load_index_gives_what_the_json_gives() {
        let (dir, m) = tests_support::build_dir();
        let json = Package::open_uncached(dir.path()).unwrap();
        assert!(!json.has_load_index());
        write_index(dir.path(), &m);
        let bin = Package::open(dir.path()).unwrap();
        assert!(bin.has_load_index());
        assert_eq!(bin.kernels(), json.kernels());
        // The same encoder with the same stamp: the in-memory index is the file, byte for
        // byte (the file's head, here: the unit tests read it in two steps).
        assert!(!bin.index.bytes.is_empty());
        assert_eq!(
            &json.index.bytes[..bin.index.bytes.len()],
            &*bin.index.bytes
        );
        for (spec, driver) in [
            ("sm_90", Some(Version(13, 0))),
            ("sm_90", Some(Version(13, 5))),
            ("sm_89", None),
            ("gfx1100", None),
        ] {
            let device = Device::parse(spec, driver, None).unwrap();
            let sel = bin.select(&device);
            assert_eq!(sel, json.select(&device), "{spec}");
            let (mut vb, mut vj) = (Verdicts::new(device), Verdicts::new(device));
            for k in &sel.kernels {
                let want = k.selected().map(|c| c.object);
                assert_eq!(bin.choose(&mut vb, &k.kernel, None), want, "{spec}");
                assert_eq!(json.choose(&mut vj, &k.kernel, None), want, "{spec}");
            }
        }
        assert_eq!(bin.object_count(), json.object_count());
        for i in 0..m.objects.len() {
            let (b, j) = (bin.object(i).unwrap(), json.object(i).unwrap());
            assert_eq!(*b, *j);
            assert_eq!(
                b.entries().collect::<Vec<_>>(),
                j.entries().collect::<Vec<_>>()
            );
            assert_eq!(b.entry("k"), j.entry("k"));
            assert_eq!(bin.record(i).unwrap(), json.record(i).unwrap());
            assert_eq!(bin.resources(i).unwrap(), json.resources(i).unwrap());
            assert_eq!(
                bin.read_verified(i).unwrap(),
                json.read_verified(i).unwrap()
            );
        }
        assert!(bin.object(2).is_err() && json.object(2).is_err());
        assert_eq!(bin.manifest().unwrap(), &m);
        assert_eq!(json.manifest().unwrap(), &m);
        assert_eq!(bin.objects().len(), 2);
        assert_eq!(bin.objects()[1].ptx_isa, Some(Version(9, 5)));
        // A swapped object is caught through either index.
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        for p in [&bin, &json] {
            let e = p.read_verified(0).unwrap_err();
            assert!(matches!(e, LoaderError::Blake3Mismatch { .. }), "{e}");
            assert!(e.to_string().contains("7 bytes"), "{e}");
        }
    }

    #[test]
    fn launch_parameters_come_from_manifest_kbi_and_not_from_a_version_3_one() {
        use kbuild_manifest::params::{Param, ParamKind};
        let (dir, mut m) = tests_support::build_dir();
        let p = |index, hidden| Param {
            index,
            offset: 8 * u64::from(index),
            size: 8,
            align: None,
            kind: ParamKind::Unknown,
            name: None,
            type_name: None,
            hidden,
        };
        m.objects[0].params = [("k".to_string(), vec![p(0, false), p(1, true)])].into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        write_index(dir.path(), &m);
        let bin = Package::open(dir.path()).unwrap();
        assert!(bin.has_load_index());
        let got = bin.params(0).unwrap().unwrap();
        assert_eq!(got[0].as_ref().unwrap().params, [p(0, false)]);
        assert_eq!(got[0].as_ref().unwrap().hidden, 1);
        // The PTX object's record has none: nothing carried.
        assert_eq!(bin.params(1).unwrap(), None);
        assert_eq!(
            bin.index.entry_params(0, "k", bin.origin()).unwrap(),
            got[0].clone()
        );
        assert_eq!(
            bin.index.entry_params(0, "nope", bin.origin()).unwrap(),
            None
        );
        // The same from the JSON.
        let json = Package::open_uncached(dir.path()).unwrap();
        assert_eq!(json.params(0).unwrap(), Some(got));
        // A version 3 index of the same build (written before parameters were carried):
        // still used, and it carries none.
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let mut bytes = std::fs::read(&ix).unwrap();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        std::fs::write(&ix, &bytes).unwrap();
        let old = Package::open(dir.path()).unwrap();
        assert!(old.has_load_index());
        assert_eq!(old.params(0).unwrap(), None);
        assert_eq!(old.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn an_index_of_the_previous_layout_is_re_derived_not_misread() {
        let (dir, m) = tests_support::build_dir();
        write_index(dir.path(), &m);
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let mut bytes = std::fs::read(&ix).unwrap();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&ix, &bytes).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.record(0).unwrap().blake3, m.objects[0].blake3);
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn a_stale_or_damaged_index_is_not_used() {
        let (dir, mut m) = tests_support::build_dir();
        write_index(dir.path(), &m);
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        // The same bytes with a new mtime (a copy that does not keep mtimes): the blake3 in
        // the index still binds it.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let json = std::fs::read(dir.path().join("manifest.json")).unwrap();
        std::fs::write(dir.path().join("manifest.json"), &json).unwrap();
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        // The manifest rewritten after the index (an edit, a new build without kbuild):
        // the JSON is what counts.
        m.objects[0]
            .resources
            .insert("k".into(), tests_support::cuda(40));
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        match &p.resources(0).unwrap()["k"] {
            Resources::Cuda(c) => assert_eq!(c.registers, 40),
            r => panic!("{r:?}"),
        }
        // Damaged: truncated, or not an index at all.
        write_index(dir.path(), &m);
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let bytes = std::fs::read(&ix).unwrap();
        std::fs::write(&ix, &bytes[..HEADER_LEN + 10]).unwrap();
        assert!(!Package::open(dir.path()).unwrap().has_load_index());
        // Cut inside the resource blobs: the head is whole and checks out, so the index opens
        // and selects; the resource records fail their own digest when first read, and the
        // error names the index.
        let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
        std::fs::write(&ix, &bytes[..head + 1]).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(p.has_load_index());
        let last = p.objects().len() - 1;
        assert!(p.object(last).is_ok());
        let e = p.record(last).unwrap_err().to_string();
        assert!(
            e.contains(LOAD_INDEX_FILE) && e.contains("past the end"),
            "{e}"
        );
        // Two object records swapped in place, the stamp kept (an index edited to point one
        // kernel at another's object): refused whole, the manifest's choice stands.
        let at = HEADER_LEN + p.kernels().len() * 8;
        let mut swapped = bytes.clone();
        let (a, b) = swapped[at..].split_at_mut(144);
        a.swap_with_slice(&mut b[..144]);
        std::fs::write(&ix, &swapped).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.record(0).unwrap().path, m.objects[0].path);
        // Only the path spans swapped (each object pointing at the other's file).
        let mut swapped = bytes.clone();
        let (a, b) = swapped[at..].split_at_mut(144);
        a[24..32].swap_with_slice(&mut b[24..32]);
        std::fs::write(&ix, &swapped).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.object(0).unwrap().path, m.objects[0].path);
        // Any single flipped byte of the head is caught the same way; one in the blobs when
        // a resource record is read.
        for i in (HEADER_LEN..bytes.len()).step_by(37) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            std::fs::write(&ix, &bad).unwrap();
            let p = Package::open(dir.path()).unwrap();
            if i < head {
                assert!(!p.has_load_index(), "byte {i}");
            } else {
                assert!(p.has_load_index(), "byte {i}");
                let bad_record = (0..p.objects().len()).any(|k| p.resources(k).is_err());
                assert!(bad_record, "byte {i}");
            }
        }
        std::fs::write(&ix, &bytes).unwrap();
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        std::fs::write(&ix, b"garbage").unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.kernels(), ["k"]);
    }
}

mod cache_tests {
    use super::*;

    #[test]
    fn the_index_cache_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut m =
            crate::fixtures::manifest(vec![crate::fixtures::object("a", None, "sm_90", None)]);
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["a"]);
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["a"]);
        // A new build (a rename over the manifest, as the build writes it) is seen at once.
        m = crate::fixtures::manifest(vec![crate::fixtures::object("bb", None, "sm_90", None)]);
        let tmp = dir.path().join("manifest.json.tmp");
        std::fs::write(&tmp, m.to_json()).unwrap();
        std::fs::rename(&tmp, dir.path().join("manifest.json")).unwrap();
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["bb"]);
        assert_eq!(
            Package::open_uncached(dir.path()).unwrap().kernels(),
            ["bb"]
        );
    }
}

#[cfg(feature = "registry")]
mod bundle_tests {
    use super::*;
    use kbuild_bundle::bundle::Bundle;
    use kbuild_manifest::compat::{Device, NEWEST_DRIVER};

    #[test]
    fn a_bundle_opens_from_memory_and_selects() {
        let mut m =
            crate::fixtures::manifest(vec![crate::fixtures::object("k", None, "sm_90", None)]);
        m.targets = vec!["sm_90".into()];
        let mut objects = std::collections::BTreeMap::new();
        for o in &mut m.objects {
            let bytes = b"object for sm_90".to_vec();
            o.sha256 = crate::package::sha256_hex(&bytes);
            o.size = bytes.len() as u64;
            objects.insert(o.sha256.clone(), bytes);
        }
        let bundle = Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap();
        let bytes = bundle.to_bytes(0).unwrap();
        let p = Package::from_bundle_bytes(&bytes, "embedded").unwrap();
        assert_eq!(p.kernels(), ["k"]);
        let dev = Device::parse("sm_90", Some(NEWEST_DRIVER), None).unwrap();
        assert!(p.select(&dev).complete());
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");

        let mut torn = bytes.clone();
        torn.truncate(bytes.len() / 2);
        let e = Package::from_bundle_bytes(&torn, "embedded").unwrap_err();
        assert!(e.to_string().contains("embedded"), "{e}");
    }
}
