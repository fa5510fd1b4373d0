use std::collections::BTreeMap;

use super::*;
use crate::manifest::{Manifest, ObjectRecord};
use crate::params::ParamKind;
use crate::resources::{CudaResources, PtxResources};
use crate::target::Version;

fn sample() -> Manifest {
    let cuda = Resources::Cuda(CudaResources {
        registers: 32,
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
    });
    let object = |kernel: &str, variant: Option<&str>, target: &str, format: &str, r: Resources| {
        ObjectRecord {
            kernel: kernel.into(),
            variant: variant.map(Into::into),
            defines: BTreeMap::new(),
            target: target.into(),
            path: format!("{target}/{kernel}.{format}"),
            sha256: format!("{:064x}", target.len() * 7 + kernel.len()),
            blake3: (format != "ptx").then(|| format!("{:064x}", target.len() + 99)),
            size: 1234,
            format: format.into(),
            entries: vec![format!("{kernel}_f32"), format!("{kernel}_bf16")],
            demangled: Default::default(),
            params: Default::default(),
            resources: [(format!("{kernel}_f32"), r)].into_iter().collect(),
            cache_key: "k".into(),
            compile_args: Vec::new(),
            triton: None,
        }
    };
    let ptx = Resources::Ptx(PtxResources {
        ptx_isa: "9.5".into(),
        target: "sm_90".into(),
    });
    crate::fixtures::manifest(
        "p",
        "1.0.0",
        vec![
            object("rmsnorm", None, "sm_90", "cubin", cuda.clone()),
            object("rmsnorm", None, "compute_90", "ptx", ptx),
            object("softmax", Some("rows4"), "sm_90", "cubin", cuda),
        ],
    )
}

impl ManifestStamp {
    fn default_for_tests() -> ManifestStamp {
        ManifestStamp {
            len: 1,
            mtime_ns: 2,
            ctime_ns: -1,
            ino: 0,
            blake3: [3; 32],
        }
    }
}

#[test]
fn round_trip() {
    let m = sample();
    let stamp = ManifestStamp {
        len: 4242,
        mtime_ns: 1_700_000_000_123_456_789,
        ctime_ns: -1,
        ino: 0,
        blake3: [7; 32],
    };
    let bytes = encode(&m, stamp).unwrap();
    let ix = LoadIndex::parse(&bytes).unwrap();
    assert_eq!(ix.stamp(), stamp);
    assert_eq!(ix.kernel_count(), 2);
    assert_eq!(ix.kernel(1).unwrap(), "softmax");
    assert_eq!(ix.object_count(), 3);
    for (i, o) in m.objects.iter().enumerate() {
        let v = ix.object(i).unwrap();
        assert_eq!(v.kernel, o.kernel);
        assert_eq!(v.variant, o.variant.as_deref());
        assert_eq!(v.target, o.target);
        assert_eq!(v.path, o.path);
        assert_eq!(v.format, o.format);
        assert_eq!(v.sha256_hex(), o.sha256);
        assert_eq!(v.blake3_hex(), o.blake3);
        assert_eq!(v.size, o.size);
        assert_eq!(ix.entries(&v).unwrap(), o.entries);
        assert_eq!(ix.resources(&v).unwrap(), o.resources);
        // The fixed-layout figures are the resource records' own.
        for (k, name) in o.entries.iter().enumerate() {
            let e = ix.entry(&v, k).unwrap();
            assert_eq!(e.name, name);
            assert_eq!(e.figures, LoadFigures::of(o.resources.get(name)));
            assert_eq!(ix.find_entry(&v, name).unwrap(), Some(e));
        }
        assert_eq!(ix.find_entry(&v, "nope").unwrap(), None);
    }
    let cubin = ix.object(0).unwrap();
    match ix.entry(&cubin, 0).unwrap().figures {
        LoadFigures::Cuda {
            registers,
            lds_bytes,
            reserved_shared_bytes,
            max_threads,
            ..
        } => assert_eq!(
            (registers, lds_bytes, reserved_shared_bytes, max_threads),
            (32, 32, 1024, Some(256))
        ),
        f => panic!("{f:?}"),
    }
    assert_eq!(ix.entry(&cubin, 1).unwrap().figures, LoadFigures::None);
    assert_eq!(ix.object(1).unwrap().blake3, None);
    assert_eq!(ix.object_variant(2).unwrap(), Some("rows4"));
    assert_eq!(ix.object_variant(0).unwrap(), None);
    assert!(ix.object_variant(3).is_err());
    assert!(ix.has_blobs());
    // The head alone (what a loader reads at open), then one object's blob.
    let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
    assert!(head < bytes.len());
    let hx = LoadIndex::parse(&bytes[..head]).unwrap();
    hx.validate().unwrap();
    assert!(!hx.has_blobs());
    for (i, o) in m.objects.iter().enumerate() {
        let v = hx.object(i).unwrap();
        assert!(hx.resources(&v).is_err());
        let r = hx.resources_at(&v);
        let blob = &bytes[r.start as usize..r.end as usize];
        assert_eq!(decode_resources(blob, v.path).unwrap(), o.resources);
    }
    assert_eq!(ix.object(1).unwrap().ptx_isa, Some(Version(9, 5)));
    assert_eq!(ix.object(0).unwrap().ptx_isa, None);
    assert!(ix.object(3).is_err());
    assert!(ix.kernel(2).is_err());
}

fn with_params() -> Manifest {
    let mut m = sample();
    let p = |index, offset, size, kind, name: Option<&str>, ty: Option<&str>, hidden| {
        crate::params::Param {
            index,
            offset,
            size,
            align: None,
            kind,
            name: name.map(Into::into),
            type_name: ty.map(Into::into),
            hidden,
        }
    };
    m.objects[0].params = [(
        "rmsnorm_f32".to_string(),
        vec![
            p(
                0,
                0,
                8,
                ParamKind::Pointer,
                Some("x"),
                Some("const float*"),
                false,
            ),
            p(1, 8, 4, ParamKind::Value, Some("n"), Some("int"), false),
            p(2, 16, 4, ParamKind::Value, None, None, true),
            p(3, 24, 8, ParamKind::Pointer, None, None, true),
        ],
    )]
    .into();
    let mut ptx = p(0, 0, 8, ParamKind::Unknown, None, None, false);
    ptx.align = Some(8);
    m.objects[1].params = [
        ("rmsnorm_f32".to_string(), vec![ptx]),
        ("rmsnorm_bf16".to_string(), vec![]),
    ]
    .into();
    m
}

#[test]
fn launch_parameters_round_trip_without_the_hidden_ones() {
    let m = with_params();
    let bytes = encode(&m, ManifestStamp::default_for_tests()).unwrap();
    let ix = LoadIndex::parse(&bytes).unwrap();
    ix.validate().unwrap();
    assert_eq!(ix.version(), VERSION);
    assert!(ix.carries_params());
    let cubin = ix.object(0).unwrap();
    let got = ix.params(&cubin).unwrap().unwrap();
    // One item per entry, in entry order: rmsnorm_f32 has a record, rmsnorm_bf16 none.
    assert_eq!(got.len(), 2);
    let f32 = got[0].as_ref().unwrap();
    assert_eq!(f32.hidden, 2);
    assert_eq!(f32.params, m.objects[0].params["rmsnorm_f32"][..2]);
    assert_eq!(got[1], None);
    let ptx = ix.params(&ix.object(1).unwrap()).unwrap().unwrap();
    assert_eq!(ptx[0].as_ref().unwrap().params[0].align, Some(8));
    assert_eq!(ptx[1], Some(EntryParams::default()));
    // An object whose manifest records no parameters carries none.
    let softmax = ix.object(2).unwrap();
    assert_eq!(ix.params(&softmax).unwrap(), None);
    assert_eq!(ix.params_at(&softmax), None);
    // Read from the head and the blob, as the loader does.
    let r = ix.params_at(&cubin).unwrap();
    let blob = &bytes[r.start as usize..r.end as usize];
    assert_eq!(decode_params(blob, cubin.path).unwrap(), got);
    assert!(decode_params(
        &[0x91, 0x92, 0x00, 0x91, 0x97, 0, 0, 8, 0xc0, 9, 0xc0, 0xc0],
        "x"
    )
    .unwrap_err()
    .to_string()
    .contains("parameter kind 9 is unknown"));
    // The parameters add little to the file: no hidden ones, small integers.
    let plain = encode(&sample(), ManifestStamp::default_for_tests()).unwrap();
    assert!(
        bytes.len() - plain.len() < 64,
        "{}",
        bytes.len() - plain.len()
    );
}

#[test]
fn a_version_3_index_opens_without_launch_parameters() {
    // Version 3 is this layout with the params span zero and flag bit 1 never set; one
    // with stray bits there is read as version 3 all the same.
    let mut bytes = encode(&with_params(), ManifestStamp::default_for_tests()).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let ix = LoadIndex::parse(&bytes).unwrap();
    ix.validate().unwrap();
    assert_eq!(ix.version(), 3);
    assert!(!ix.carries_params());
    for i in 0..ix.object_count() {
        let o = ix.object(i).unwrap();
        assert_eq!(ix.params(&o).unwrap(), None);
        assert_eq!(ix.entries(&o).unwrap().len(), 2);
    }
    // A head edited to point the parameters past the blobs is caught by the reads.
    let mut bad = encode(&with_params(), ManifestStamp::default_for_tests()).unwrap();
    let at = HEADER_LEN + 2 * SPAN + 136;
    bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let ix = LoadIndex::parse(&bad).unwrap();
    assert!(ix
        .object(0)
        .unwrap_err()
        .to_string()
        .contains("launch parameters"));
    assert!(ix.validate().is_err());
}

#[test]
fn damage_is_an_error() {
    let bytes = encode(
        &sample(),
        ManifestStamp {
            len: 1,
            mtime_ns: 2,
            ctime_ns: -1,
            ino: 0,
            blake3: [3; 32],
        },
    )
    .unwrap();
    assert_eq!(
        LoadIndex::parse(b"{\"schema\"").unwrap_err(),
        LoadIndexError::Magic
    );
    let mut v = bytes.clone();
    v[8] = 9;
    assert_eq!(
        LoadIndex::parse(&v).unwrap_err(),
        LoadIndexError::Version(9)
    );
    let e = LoadIndex::parse(&bytes[..bytes.len() - 1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("the header describes"), "{e}");
    // A span pointing past the strings.
    let mut v = bytes.clone();
    let at = HEADER_LEN + 2 * SPAN + 24;
    v[at..at + 4].copy_from_slice(&u32::MAX.wrapping_sub(1).to_le_bytes());
    let ix = LoadIndex::parse(&v).unwrap();
    let e = ix.object(0).unwrap_err().to_string();
    assert!(e.contains("object 0 path"), "{e}");
    assert!(ix.validate().is_err());
    // An index of the previous layout (no blake3, no figures) is refused, not misread.
    let mut v1 = bytes.clone();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(
        LoadIndex::parse(&v1).unwrap_err(),
        LoadIndexError::Version(1)
    );
    assert_eq!(head_len(&v1[..HEADER_LEN]), Err(LoadIndexError::Version(1)));
    // A digest that is not hex is refused when encoding, naming the object.
    let mut m = sample();
    m.objects[0].blake3 = Some("xyz".into());
    let stamp = ManifestStamp {
        len: 0,
        mtime_ns: -1,
        ctime_ns: -1,
        ino: 0,
        blake3: [0; 32],
    };
    let e = encode(&m, stamp).unwrap_err().to_string();
    assert!(
        e.contains("sm_90/rmsnorm.cubin") && e.contains("blake3"),
        "{e}"
    );
}

#[test]
fn deep_messagepack_is_an_error() {
    let mut deep = vec![0x81, 0xa1, b'k'];
    deep.extend(std::iter::repeat_n(0x91u8, 100_000));
    let e = decode_resources(&deep, "x.cubin").unwrap_err().to_string();
    assert!(e.contains("x.cubin"), "{e}");
}

#[test]
fn no_input_panics() {
    let bytes = encode(
        &with_params(),
        ManifestStamp {
            len: 1,
            mtime_ns: 2,
            ctime_ns: -1,
            ino: 0,
            blake3: [3; 32],
        },
    )
    .unwrap();
    // Every single-byte change and every truncation: errors or values, never a panic.
    for i in 0..bytes.len() {
        for x in [0u8, 0xff, 0x80] {
            let mut v = bytes.clone();
            v[i] = x;
            if let Ok(ix) = LoadIndex::parse(&v) {
                for o in 0..ix.object_count().min(8) {
                    if let Ok(obj) = ix.object(o) {
                        let _ = ix.entries(&obj);
                        let _ = ix.resources(&obj);
                        let _ = ix.params(&obj);
                        for k in 0..obj.entry_count().min(8) {
                            let _ = ix.entry(&obj, k);
                        }
                        let _ = ix.find_entry(&obj, "rmsnorm_f32");
                    }
                    // The one-pass check and the record-by-record reads agree.
                    assert_eq!(
                        ix.quick_check(),
                        ix.validate_records().is_ok(),
                        "byte {i} = {x:#x}"
                    );
                    let _ = ix.validate();
                }
                for k in 0..ix.kernel_count().min(8) {
                    let _ = ix.kernel(k);
                }
            }
        }
        let _ = LoadIndex::parse(&bytes[..i]);
    }
}
