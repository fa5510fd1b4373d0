#![no_main]
//! The load index reader (`manifest.kbi`): whole files and heads, every object, entry and
//! resource blob and launch parameters.
use kbuild_manifest::load_index::{
    decode_params, decode_resources, head_len, LoadIndex, HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(head) = head_len(data.get(..HEADER_LEN).unwrap_or(data)) {
        if let Some(h) = usize::try_from(head).ok().and_then(|h| data.get(..h)) {
            let _ = LoadIndex::parse(h);
        }
    }
    let Ok(ix) = LoadIndex::parse(data) else {
        return;
    };
    let _ = ix.validate();
    for k in 0..ix.kernel_count().min(64) {
        let _ = ix.kernel(k);
    }
    for i in 0..ix.object_count().min(256) {
        let _ = ix.object_kernel_is(i, "rmsnorm");
        if let Ok(o) = ix.object(i) {
            let _ = ix.entries(&o);
            let _ = ix.resources(&o);
            let r = ix.resources_at(&o);
            if let Some(b) = data.get(r.start as usize..r.end as usize) {
                let _ = decode_resources(b, o.path);
            }
            let _ = ix.params(&o);
            if let Some(r) = ix.params_at(&o) {
                if let Some(b) = data.get(r.start as usize..r.end as usize) {
                    let _ = decode_params(b, o.path);
                }
            }
        }
    }
});
