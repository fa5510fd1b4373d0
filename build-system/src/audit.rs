//! The coverage audit: an object must be the target's (the identity
//! [`kbuild_manifest::compat::object_identity`] requires: ELF machine, arch field, target name)
//! and export every expected entry symbol (each exact name, at least one symbol per pattern);
//! otherwise the build fails naming what is missing (a few names and how many more). A kernel
//! with patterns must export the same matching symbols on every target a list of its entries
//! applies to ([`cross_target`]); a target lacking some fails, the others pass.

use std::collections::{BTreeMap, BTreeSet};

use kbuild_manifest::compat::object_identity;
use kbuild_manifest::read::{identify, ObjectIdent};
use kbuild_manifest::target::Target;

use crate::entries::{disagreements, resolve, shown, EntryPattern, EntryScope, Exported};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("object is not a readable {kind}: {err}")]
    Unreadable { kind: &'static str, err: String },
    #[error("object is for {found} (e_machine {machine}, arch {arch:#x}), not {target}")]
    WrongTarget {
        target: String,
        found: String,
        machine: u16,
        arch: u32,
    },
    #[error("object does not export entry symbol(s) {missing} (it exports: {found})")]
    MissingEntries { missing: String, found: String },
    #[error("{0}")]
    Unmatched(Box<Unmatched>),
}

/// Entry patterns that match no exported symbol of a kernel's object for a target.
#[derive(Debug, thiserror::Error)]
#[error("kernel `{kernel}`, target {target}: entry pattern(s) {patterns} match no exported symbol (it exports: {found})")]
pub struct Unmatched {
    pub kernel: String,
    pub target: String,
    pub patterns: String,
    pub found: String,
}

/// How many names an audit error lists before "N more": one error stays one line.
const SHOWN: usize = 5;

/// What the audit found in an object: its identity, and what its entries resolve to.
#[derive(Debug)]
pub struct Audited {
    pub ident: ObjectIdent,
    /// Exported symbol → its demangled form (c++filt's), for the mangled ones.
    pub demangled: BTreeMap<String, String>,
    /// The exported symbols the kernel's patterns (not exact names) match.
    pub matched: BTreeSet<String>,
}

/// Check `object` against `target` and the kernel's `entries`: every exact name exported,
/// every pattern matching at least one exported symbol. `kernel` names it in errors.
pub fn audit(
    kernel: &str,
    target: &Target,
    entries: &[EntryPattern],
    object: &[u8],
) -> Result<Audited, AuditError> {
    let ident = check_target(target, object)?;
    let exported: Vec<Exported> = ident.entries.iter().map(|n| Exported::new(n)).collect();
    let found = || {
        if exported.is_empty() {
            "none".to_string()
        } else {
            let names: Vec<String> = exported.iter().map(shown).collect();
            kbuild_base::list::short_list(&names, SHOWN)
        }
    };
    let r = resolve(entries, &exported);
    if !r.missing.is_empty() {
        return Err(AuditError::MissingEntries {
            missing: kbuild_base::list::short_list(&r.missing, SHOWN),
            found: found(),
        });
    }
    if !r.unmatched.is_empty() {
        return Err(AuditError::Unmatched(Box::new(Unmatched {
            kernel: kernel.to_string(),
            target: target.to_string(),
            patterns: kbuild_base::list::short_list(
                &r.unmatched
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>(),
                SHOWN,
            ),
            found: found(),
        })));
    }
    let demangled = exported
        .iter()
        .filter_map(|e| e.demangled.clone().map(|d| (e.name.clone(), d)))
        .collect();
    Ok(Audited {
        ident,
        demangled,
        matched: r.matched,
    })
}

/// The cross-target half of the audit, for one list of a kernel's pattern entries (`scope`):
/// every target it applies to, of one (kernel, variant), must export the same symbols its
/// patterns match, or a `#if __CUDA_ARCH__`-guarded kernel would be missing where a loader
/// looks for it. `per_target` maps each built target to the symbols its object's patterns
/// matched. Returns each target whose object lacks a symbol another exports, with why; the
/// targets exporting every symbol pass (their objects are good).
pub fn cross_target(
    kernel: &str,
    variant: Option<&str>,
    scope: &EntryScope,
    patterns: &[EntryPattern],
    per_target: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<(String, String)> {
    // Lacking target → the symbols it lacks, and the targets that export them.
    let mut lacking: BTreeMap<String, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    for (sym, has, lacks) in disagreements(per_target) {
        for t in lacks {
            let e = lacking.entry(t).or_default();
            e.0.push(sym.clone());
            e.1.extend(has.iter().cloned());
        }
    }
    let patterns: Vec<String> = patterns
        .iter()
        .filter(|e| !e.is_exact())
        .map(|e| format!("`{e}`"))
        .collect();
    let name = match variant {
        Some(v) => format!("kernel `{kernel}` variant `{v}`"),
        None => format!("kernel `{kernel}`"),
    };
    let list = match scope {
        EntryScope::All => "entries".to_string(),
        s => format!("entries.{s}"),
    };
    lacking
        .into_iter()
        .map(|(target, (syms, exporters))| {
            let shown: Vec<String> = syms
                .iter()
                .map(|sym| match kbuild_manifest::demangle::demangle_symbol(sym) {
                    Some(d) => format!("`{sym}` ({d})"),
                    None => format!("`{sym}`"),
                })
                .collect();
            let exporters: Vec<&str> = exporters.iter().map(String::as_str).collect();
            let message = format!(
                "{name}: {target} does not export {} entr{} that {} export{} for {list} {}: {} (name what only some targets export per vendor or target, `entries = {{ all = [...], nvidia = [...] }}`, or restrict the kernel's `targets`)",
                syms.len(),
                if syms.len() == 1 { "y" } else { "ies" },
                exporters.join(", "),
                if exporters.len() == 1 { "s" } else { "" },
                patterns.join(", "),
                kbuild_base::list::short_list(&shown, 3)
            );
            (target, message)
        })
        .collect()
}

/// The object is a readable code object for `target`: what a compile must produce before its
/// output may enter the cache, so a crashing or garbage-writing compiler never poisons it.
pub fn check_target(target: &Target, object: &[u8]) -> Result<ObjectIdent, AuditError> {
    let kind = target.object_kind();
    let ident = identify(object).map_err(|e| AuditError::Unreadable {
        kind: kind.extension(),
        err: e.to_string(),
    })?;
    // The identity rule is compat's, so the audit admits exactly what selection judges.
    let matches = object_identity(target).is_some_and(|id| id.matches(&ident));
    if !matches {
        return Err(AuditError::WrongTarget {
            target: target.to_string(),
            found: ident.target.clone(),
            machine: ident.machine,
            arch: ident.arch,
        });
    }
    Ok(ident)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::compat::{judge, Device, NO_GENERIC_RUNTIME};
    use kbuild_manifest::read::{walk, Format};
    use kbuild_manifest::target::{ProcessorKind, PROCESSORS};

    /// The readers' fixtures: real objects from nvcc and clang (containers walked).
    fn fixture_objects() -> Vec<(String, Vec<u8>)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root
            .ancestors()
            .map(|a| a.join("manifests/tests/fixtures"))
            .find(|d| d.is_dir())
            .expect("manifests/tests/fixtures above the crate");
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for path in names {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let Ok(members) = walk(&bytes) else { continue };
            for m in members {
                if !matches!(m.format, Some(Format::Hsaco | Format::Cubin | Format::Ptx)) {
                    continue;
                }
                let name = format!("{}#{}", path.display(), m.path);
                // The target a fatbin entry records keeps the `f` a standalone cubin lacks.
                let real = m.container_target.clone().unwrap_or_default();
                out.push((format!("{name}|{real}"), m.data.into_owned()));
            }
        }
        out
    }

    fn devices() -> Vec<Device> {
        let mut out = Vec::new();
        for p in PROCESSORS.iter().filter(|p| !p.is_generic()) {
            let specs: Vec<String> = match p.kind {
                ProcessorKind::Amd { xnack: true, .. } => ["+", "-"]
                    .iter()
                    .flat_map(|s| ["+", "-"].map(|x| format!("{}:sramecc{s}:xnack{x}", p.name)))
                    .collect(),
                _ => vec![p.name.to_string()],
            };
            for spec in specs {
                for runtime in [None, Some(NO_GENERIC_RUNTIME)] {
                    if let Ok(d) = Device::parse(&spec, None, runtime) {
                        out.push(d);
                    }
                }
            }
        }
        out
    }

    /// The object's own target: the container's record, else what the object says (PTX
    /// `.target sm_90a` is `compute_90a`).
    fn real_target(container: &str, ident: &ObjectIdent) -> Target {
        let name = match (container, ident.format) {
            ("", Format::Ptx) => ident.target.replacen("sm_", "compute_", 1),
            ("", _) => ident.target.clone(),
            (c, _) => c.to_string(),
        };
        name.parse().unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// For every real object and every catalogue target the audit admits it for, selection
    /// (which judges the target the manifest records) never puts it on a device where the
    /// object's own target does not run; and every object is admitted for its own target.
    #[test]
    fn audit_and_selection_agree_on_real_objects() {
        let objects = fixture_objects();
        assert!(objects.len() >= 15, "{} objects", objects.len());
        let (targets, devices) = (kbuild_manifest::fixtures::every_target(), devices());
        for (name, bytes) in &objects {
            let container = name.rsplit('|').next().unwrap_or_default();
            let ident = identify(bytes).unwrap();
            let real = real_target(container, &ident);
            let admitted: Vec<&Target> = targets
                .iter()
                .filter(|t| check_target(t, bytes).is_ok())
                .collect();
            assert!(!admitted.is_empty(), "{name}: admitted for no target");
            for claimed in admitted {
                for d in &devices {
                    let as_claimed = judge(claimed, None, d);
                    let as_real = judge(&real, None, d);
                    assert!(
                        !as_claimed.accepted || as_real.accepted,
                        "{name}: admitted as {claimed}, selected on {d}: {}",
                        as_real.reason
                    );
                }
            }
        }
    }

    #[test]
    fn arch_specific_ptx_is_not_plain_ptx() {
        let objects = fixture_objects();
        let (_, ptx) = objects
            .iter()
            .find(|(n, b)| {
                n.contains("smem_res_af")
                    && identify(b).is_ok_and(|i| i.format == Format::Ptx && i.target == "sm_90a")
            })
            .expect("compute_90a PTX in smem_res_af.fatbin");
        assert!(check_target(&"compute_90a".parse().unwrap(), ptx).is_ok());
        let e = check_target(&"compute_90".parse().unwrap(), ptx).unwrap_err();
        assert_eq!(
            e.to_string(),
            "object is for sm_90a (e_machine 0, arch 0x5a), not compute_90"
        );
    }
}
