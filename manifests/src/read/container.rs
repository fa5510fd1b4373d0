//! A recursive walk over containers (host ELF → fatbin / offload bundle → compressed bundle →
//! code objects) yielding every leaf with a path such as `.nv_fatbin#sm_89.cubin` or
//! `.hip_fatbin#hipv4-amdgcn-amd-amdhsa--gfx1100`.

use std::borrow::Cow;
use std::collections::HashMap;

use super::fatbin::{self, Compression, EntryKind};
use super::{detect, host_elf, offload_bundle, Format, ReadError};

/// Bounds on what a walk may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest declared (or produced) size of one decompressed member.
    pub max_decompressed: u64,
    /// Largest sum of all decompressed bytes of one walk.
    pub max_total_decompressed: u64,
    /// Deepest nesting of containers.
    pub max_depth: u32,
    /// Most members one walk may yield.
    pub max_members: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_decompressed: 256 << 20,
            max_total_decompressed: 1 << 30,
            max_depth: 8,
            max_members: 1 << 16,
        }
    }
}

/// A leaf of the walk: a code object (or an entry whose format is not known, e.g. NVVM IR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<'data> {
    /// `outer#member-id`, one `#` per container level; "" for the input itself.
    pub path: String,
    /// The format of the member's bytes, if recognised.
    pub format: Option<Format>,
    /// The target the container records for it ("sm_89", "compute_90", "gfx90a:xnack-").
    pub container_target: Option<String>,
    /// The container format this member was found in (`None` for the input itself).
    pub parent: Option<Format>,
    /// How it was stored in the container.
    pub compression: Compression,
    /// The member's bytes (borrowed when stored plain).
    pub data: Cow<'data, [u8]>,
}

/// Walks a container (or a single code object, which yields itself) with default [`Limits`].
pub fn walk(data: &[u8]) -> Result<Vec<Member<'_>>, ReadError> {
    walk_with(data, &Limits::default())
}

/// Walks with explicit limits.
pub fn walk_with<'data>(
    data: &'data [u8],
    limits: &Limits,
) -> Result<Vec<Member<'data>>, ReadError> {
    if detect(data).is_none() {
        return Err(super::unrecognised(data));
    }
    let mut w = Walker {
        limits: *limits,
        total: 0,
        out: Vec::new(),
    };
    w.visit(
        String::new(),
        None,
        None,
        Compression::None,
        Cow::Borrowed(data),
        0,
    )?;
    Ok(w.out)
}

struct Walker<'data> {
    limits: Limits,
    total: u64,
    out: Vec<Member<'data>>,
}

fn join(parent: &str, id: &str) -> String {
    if parent.is_empty() {
        id.to_string()
    } else {
        format!("{parent}#{id}")
    }
}

/// Makes ids unique within one container: a repeated id gets `~2`, `~3`, ...
fn unique(seen: &mut HashMap<String, usize>, id: String) -> String {
    let n = seen.entry(id.clone()).or_insert(0);
    *n += 1;
    if *n == 1 {
        id
    } else {
        format!("{id}~{n}")
    }
}

impl<'data> Walker<'data> {
    fn account(&mut self, bytes: &[u8], what: &'static str) -> Result<(), ReadError> {
        self.total = self.total.saturating_add(bytes.len() as u64);
        if self.total > self.limits.max_total_decompressed {
            return Err(ReadError::LimitExceeded {
                what,
                offset: 0,
                declared: self.total,
                limit: self.limits.max_total_decompressed,
            });
        }
        Ok(())
    }

    fn visit(
        &mut self,
        path: String,
        parent: Option<Format>,
        container_target: Option<String>,
        compression: Compression,
        data: Cow<'data, [u8]>,
        depth: u32,
    ) -> Result<(), ReadError> {
        let format = detect(&data);
        let is_container = matches!(
            format,
            Some(Format::Fatbin | Format::OffloadBundle | Format::HostElf)
        );
        if !is_container {
            if self.out.len() >= self.limits.max_members {
                return Err(ReadError::LimitExceeded {
                    what: "container walk member count",
                    offset: 0,
                    declared: self.out.len() as u64 + 1,
                    limit: self.limits.max_members as u64,
                });
            }
            self.out.push(Member {
                path,
                format,
                container_target,
                parent,
                compression,
                data,
            });
            return Ok(());
        }
        if depth >= self.limits.max_depth {
            return Err(ReadError::LimitExceeded {
                what: "container nesting depth",
                offset: 0,
                declared: u64::from(depth) + 1,
                limit: u64::from(self.limits.max_depth),
            });
        }
        let wrap = |e: ReadError, p: &str| if p.is_empty() { e } else { e.in_member(p) };
        let result = match format {
            Some(Format::Fatbin) => self.visit_fatbin(&path, data, depth),
            Some(Format::OffloadBundle) => self.visit_bundle(&path, data, depth),
            _ => self.visit_host(&path, data, depth),
        };
        result.map_err(|e| wrap(e, &path))
    }

    fn visit_fatbin(
        &mut self,
        path: &str,
        data: Cow<'data, [u8]>,
        depth: u32,
    ) -> Result<(), ReadError> {
        let mut seen = HashMap::new();
        // Borrowed data keeps borrowed members; data we own (decompressed) is copied out.
        match data {
            Cow::Borrowed(d) => {
                for e in fatbin::read_fatbin(d)? {
                    let bytes = self.entry_bytes(&e)?;
                    let id = unique(&mut seen, entry_id(&e));
                    self.visit(
                        join(path, &id),
                        Some(Format::Fatbin),
                        Some(e.target()),
                        e.compression,
                        bytes,
                        depth + 1,
                    )?;
                }
            }
            Cow::Owned(d) => {
                for e in fatbin::read_fatbin(&d)? {
                    let bytes = Cow::Owned(self.entry_bytes(&e)?.into_owned());
                    let id = unique(&mut seen, entry_id(&e));
                    self.visit(
                        join(path, &id),
                        Some(Format::Fatbin),
                        Some(e.target()),
                        e.compression,
                        bytes,
                        depth + 1,
                    )?;
                }
            }
        }
        Ok(())
    }

    fn entry_bytes<'a>(&mut self, e: &fatbin::FatbinEntry<'a>) -> Result<Cow<'a, [u8]>, ReadError> {
        let bytes = e.data(self.limits.max_decompressed)?;
        if let Cow::Owned(b) = &bytes {
            self.account(b, "fatbin decompressed total")?;
        }
        Ok(bytes)
    }

    fn visit_bundle(
        &mut self,
        path: &str,
        data: Cow<'data, [u8]>,
        depth: u32,
    ) -> Result<(), ReadError> {
        if data.starts_with(offload_bundle::CCOB_MAGIC) {
            let (h, plain) =
                offload_bundle::decompress_bundle(&data, self.limits.max_decompressed)?;
            self.account(&plain, "offload bundle decompressed total")?;
            return self.visit_plain_bundle(path, Cow::Owned(plain), h.method, depth);
        }
        self.visit_plain_bundle(path, data, Compression::None, depth)
    }

    fn visit_plain_bundle(
        &mut self,
        path: &str,
        data: Cow<'data, [u8]>,
        compression: Compression,
        depth: u32,
    ) -> Result<(), ReadError> {
        let mut seen = HashMap::new();
        let mut handle =
            |w: &mut Self, e: offload_bundle::BundleEntry<'_>, bytes: Cow<'data, [u8]>| {
                if e.kind == "host" && e.size == 0 {
                    return Ok(());
                }
                let id = unique(&mut seen, e.id.clone());
                w.visit(
                    join(path, &id),
                    Some(Format::OffloadBundle),
                    e.target_id.clone(),
                    compression,
                    bytes,
                    depth + 1,
                )
            };
        match data {
            Cow::Borrowed(d) => {
                for e in offload_bundle::read_offload_bundle(d)? {
                    let bytes = Cow::Borrowed(e.data);
                    handle(self, e, bytes)?;
                }
            }
            Cow::Owned(d) => {
                for e in offload_bundle::read_offload_bundle(&d)? {
                    let bytes = Cow::Owned(e.data.to_vec());
                    handle(self, e, bytes)?;
                }
            }
        }
        Ok(())
    }

    fn visit_host(
        &mut self,
        path: &str,
        data: Cow<'data, [u8]>,
        depth: u32,
    ) -> Result<(), ReadError> {
        match data {
            Cow::Borrowed(d) => {
                let host = host_elf::read_host_elf(d)?;
                for s in host.sections {
                    self.visit_section(path, &s.name, Cow::Borrowed(s.data), depth)?;
                }
            }
            Cow::Owned(d) => {
                let host = host_elf::read_host_elf(&d)?;
                for s in host.sections {
                    self.visit_section(path, &s.name, Cow::Owned(s.data.to_vec()), depth)?;
                }
            }
        }
        Ok(())
    }

    fn visit_section(
        &mut self,
        path: &str,
        name: &str,
        data: Cow<'data, [u8]>,
        depth: u32,
    ) -> Result<(), ReadError> {
        let p = join(path, name);
        // `.hip_fatbin` is padded to 4096 bytes in shared objects; an all-zero section (a
        // placeholder) holds nothing.
        if data.iter().all(|&b| b == 0) {
            return Ok(());
        }
        self.visit(
            p,
            Some(Format::HostElf),
            None,
            Compression::None,
            data,
            depth + 1,
        )
    }
}

/// `sm_89.cubin`, `compute_90.ptx`, `compute_90.nvvm`, `kind7.sm_90`.
fn entry_id(e: &fatbin::FatbinEntry<'_>) -> String {
    match e.kind {
        EntryKind::Elf => format!("{}.cubin", e.target()),
        EntryKind::Ptx => format!("{}.ptx", e.target()),
        EntryKind::NvvmIr => format!("{}.nvvm", e.target()),
        EntryKind::Other(k) => format!("kind{k}.{}", e.target()),
    }
}
