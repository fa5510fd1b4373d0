//! The resource and launch-parameter blobs of a load index, decoded on demand (opening and
//! loading never read them).

use std::collections::BTreeMap;

use super::{EntryParams, LoadIndexError, WireParam};
use crate::params::{Param, ParamKind};
use crate::resources::Resources;

/// The launch parameters of object `path`'s entries (in entry order; `None` for an entry the
/// manifest records none for) from its params blob.
pub fn decode_params(bytes: &[u8], path: &str) -> Result<Vec<Option<EntryParams>>, LoadIndexError> {
    use serde::Deserialize;
    let damaged =
        |e: String| LoadIndexError::Damaged(format!("object {path}: launch parameters: {e}"));
    // Three levels of arrays in the blob; the cap keeps a hostile blob from recursing.
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(8);
    let wire = Vec::<Option<(u32, Vec<WireParam>)>>::deserialize(&mut de)
        .map_err(|e| damaged(e.to_string()))?;
    wire.into_iter()
        .map(|entry| {
            entry
                .map(|(hidden, list)| {
                    let params = list
                        .into_iter()
                        .map(|(index, offset, size, align, kind, name, type_name)| {
                            let kind = match kind {
                                0 => ParamKind::Pointer,
                                1 => ParamKind::Value,
                                2 => ParamKind::Unknown,
                                k => return Err(damaged(format!("parameter kind {k} is unknown"))),
                            };
                            Ok(Param {
                                index,
                                offset,
                                size,
                                align,
                                kind,
                                name,
                                type_name,
                                hidden: false,
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(EntryParams { params, hidden })
                })
                .transpose()
        })
        .collect()
}

/// The per-entry resource records of object `path` from their blob.
pub fn decode_resources(
    bytes: &[u8],
    path: &str,
) -> Result<BTreeMap<String, Resources>, LoadIndexError> {
    use serde::Deserialize;
    // Records nest 3 levels (entry map, record, occupancy); the cap keeps a hostile blob from
    // recursing through the stack (rmp-serde's default allows 1024).
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(16);
    BTreeMap::<String, Resources>::deserialize(&mut de)
        .map_err(|e| LoadIndexError::Damaged(format!("object {path}: resource records: {e}")))
}
