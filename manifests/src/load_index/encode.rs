//! Writing a load index: [`encode`] a manifest into the layout the module documents.

use std::collections::BTreeMap;

use super::{
    parse_sha256, EntryParams, LoadFigures, LoadIndexError, ManifestStamp, WireParam,
    BLOBS_DIGEST_AT, FLAG_BLAKE3, FLAG_PARAMS, HEADER_LEN, HEAD_DIGEST_AT, MAGIC, NONE, OBJECT,
    SPAN, VERSION,
};
use crate::manifest::{Manifest, ObjectRecord};
use crate::params::ParamKind;
use crate::resources::Resources;
use crate::target::Version;

fn kind_code(k: ParamKind) -> u8 {
    match k {
        ParamKind::Pointer => 0,
        ParamKind::Value => 1,
        ParamKind::Unknown => 2,
    }
}

/// The params blob of `o`: per entry in entry order, nil or `[hidden, [param...]]`.
fn encode_params(o: &ObjectRecord) -> Result<Vec<u8>, LoadIndexError> {
    let wire: Vec<Option<(u32, Vec<WireParam>)>> = o
        .entries
        .iter()
        .map(|e| {
            o.params.get(e).map(|list| {
                let ep = EntryParams::of(list);
                let params = ep
                    .params
                    .into_iter()
                    .map(|p| {
                        (
                            p.index,
                            p.offset,
                            p.size,
                            p.align,
                            kind_code(p.kind),
                            p.name,
                            p.type_name,
                        )
                    })
                    .collect();
                (ep.hidden, params)
            })
        })
        .collect();
    rmp_serde::to_vec(&wire).map_err(|e| LoadIndexError::EncodeParams {
        path: o.path.clone(),
        cause: e.to_string(),
    })
}

/// Encode the load index of `manifest`, whose `manifest.json` has `stamp`.
pub fn encode(manifest: &Manifest, stamp: ManifestStamp) -> Result<Vec<u8>, LoadIndexError> {
    let mut strings = StringTable::default();
    let mut blobs: Vec<u8> = Vec::new();
    let mut entries: Vec<u8> = Vec::new();
    let mut entry_count = 0usize;
    let mut kernels = Vec::with_capacity(manifest.kernels.len());
    for k in &manifest.kernels {
        kernels.push(strings.span(k)?);
    }
    let digest = |o: &ObjectRecord, field: &'static str, value: &str| {
        parse_sha256(value).ok_or_else(|| LoadIndexError::Digest {
            path: o.path.clone(),
            field,
            value: value.to_string(),
        })
    };
    let mut objects = Vec::with_capacity(manifest.objects.len() * OBJECT);
    for o in &manifest.objects {
        let sha = digest(o, "sha256", &o.sha256)?;
        let blake3 = match &o.blake3 {
            Some(b) => Some(digest(o, "blake3", b)?),
            None => None,
        };
        let first_entry = u32_of(entry_count, "entries")?;
        for e in &o.entries {
            put_span(&mut entries, strings.span(e)?);
            put_figures(&mut entries, LoadFigures::of(o.resources.get(e)));
            entry_count += 1;
        }
        let blob = rmp_serde::to_vec_named(&o.resources).map_err(|e| LoadIndexError::Encode {
            path: o.path.clone(),
            cause: e.to_string(),
        })?;
        let blob_span = [u32_of(blobs.len(), "blobs")?, u32_of(blob.len(), "blobs")?];
        blobs.extend_from_slice(&blob);
        let params_span = if o.params.is_empty() {
            [0, 0]
        } else {
            let blob = encode_params(o)?;
            let span = [u32_of(blobs.len(), "blobs")?, u32_of(blob.len(), "blobs")?];
            blobs.extend_from_slice(&blob);
            span
        };
        let ptx = crate::compat::parse_version(&ptx_isa_text(o).unwrap_or_default());
        let variant = match &o.variant {
            Some(v) => strings.span(v)?,
            None => [NONE, 0],
        };
        for span in [
            strings.span(&o.kernel)?,
            variant,
            strings.span(&o.target)?,
            strings.span(&o.path)?,
            strings.span(&o.format)?,
        ] {
            put_span(&mut objects, span);
        }
        objects.extend_from_slice(&sha);
        objects.extend_from_slice(&o.size.to_le_bytes());
        let (major, minor) = match ptx {
            Some(Version(a, b)) => (
                u16::try_from(a).unwrap_or(u16::MAX - 1),
                u16::try_from(b).unwrap_or(u16::MAX - 1),
            ),
            None => (u16::MAX, u16::MAX),
        };
        objects.extend_from_slice(&major.to_le_bytes());
        objects.extend_from_slice(&minor.to_le_bytes());
        objects.extend_from_slice(&first_entry.to_le_bytes());
        objects.extend_from_slice(&u32_of(o.entries.len(), "entries")?.to_le_bytes());
        put_span(&mut objects, blob_span);
        objects.extend_from_slice(&blake3.unwrap_or([0; 32]));
        let mut flags = if blake3.is_some() { FLAG_BLAKE3 } else { 0 };
        if !o.params.is_empty() {
            flags |= FLAG_PARAMS;
        }
        objects.extend_from_slice(&flags.to_le_bytes());
        put_span(&mut objects, params_span);
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + kernels.len() * SPAN
            + objects.len()
            + entries.len()
            + strings.data.len()
            + blobs.len(),
    );
    out.extend_from_slice(MAGIC);
    for n in [
        VERSION,
        u32_of(kernels.len(), "kernels")?,
        u32_of(manifest.objects.len(), "objects")?,
        u32_of(entry_count, "entries")?,
        u32_of(strings.data.len(), "strings")?,
        u32_of(blobs.len(), "blobs")?,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&stamp.len.to_le_bytes());
    out.extend_from_slice(&stamp.mtime_ns.to_le_bytes());
    out.extend_from_slice(&stamp.blake3);
    out.extend_from_slice(&stamp.ctime_ns.to_le_bytes());
    out.extend_from_slice(&stamp.ino.to_le_bytes());
    out.extend_from_slice(&[0u8; 64]);
    for k in kernels {
        put_span(&mut out, k);
    }
    out.extend_from_slice(&objects);
    out.extend_from_slice(&entries);
    out.extend_from_slice(strings.data.as_bytes());
    out.extend_from_slice(&blobs);
    let head = out.len() - blobs.len();
    let head_digest = *blake3::hash(&out[HEADER_LEN..head]).as_bytes();
    let blobs_digest = *blake3::hash(&out[head..]).as_bytes();
    out[HEAD_DIGEST_AT..HEAD_DIGEST_AT + 32].copy_from_slice(&head_digest);
    out[BLOBS_DIGEST_AT..BLOBS_DIGEST_AT + 32].copy_from_slice(&blobs_digest);
    Ok(out)
}

fn ptx_isa_text(o: &ObjectRecord) -> Option<String> {
    o.resources.values().find_map(|r| match r {
        Resources::Ptx(p) => Some(p.ptx_isa.clone()),
        _ => None,
    })
}

fn put_span(out: &mut Vec<u8>, [off, len]: [u32; 2]) {
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
}

fn put_figures(out: &mut Vec<u8>, f: LoadFigures) {
    let (kind, registers, max_threads, lds, reserved, scratch) = match f {
        LoadFigures::None => (0u32, 0, None, 0, 0, 0),
        LoadFigures::Cuda {
            registers,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
            max_threads,
        } => (
            1,
            registers,
            max_threads,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
        ),
        LoadFigures::Amd {
            lds_bytes,
            scratch_bytes,
            max_threads,
        } => (2, 0, Some(max_threads), lds_bytes, 0, scratch_bytes),
        LoadFigures::Ptx => (3, 0, None, 0, 0, 0),
    };
    for n in [kind, registers, max_threads.unwrap_or(NONE), 0] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for n in [lds, reserved, scratch] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

fn u32_of(n: usize, what: &'static str) -> Result<u32, LoadIndexError> {
    u32::try_from(n).map_err(|_| LoadIndexError::TooLarge(what))
}

/// Strings, each stored once.
#[derive(Default)]
struct StringTable {
    data: String,
    seen: BTreeMap<String, [u32; 2]>,
}

impl StringTable {
    fn span(&mut self, s: &str) -> Result<[u32; 2], LoadIndexError> {
        if let Some(span) = self.seen.get(s) {
            return Ok(*span);
        }
        let span = [
            u32_of(self.data.len(), "strings")?,
            u32_of(s.len(), "strings")?,
        ];
        self.data.push_str(s);
        self.seen.insert(s.to_string(), span);
        Ok(span)
    }
}
