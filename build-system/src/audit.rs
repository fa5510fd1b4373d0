//! The coverage audit: an object must be the target's (the identity
//! [`kbuild_manifest::compat::object_identity`] requires: ELF machine, arch field, target name)
//! and export every expected entry symbol; otherwise the build fails naming what is missing.

use kbuild_manifest::compat::object_identity;
use kbuild_manifest::read::{identify, ObjectIdent};
use kbuild_manifest::target::Target;

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
}

/// Check `object` against `target` and the `expected` entries; returns what it identified.
pub fn audit(
    target: &Target,
    expected: &[String],
    object: &[u8],
) -> Result<ObjectIdent, AuditError> {
    let ident = check_target(target, object)?;
    let missing: Vec<&str> = expected
        .iter()
        .filter(|e| !ident.entries.iter().any(|x| x == *e))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(AuditError::MissingEntries {
            missing: missing.join(", "),
            found: if ident.entries.is_empty() {
                "none".into()
            } else {
                ident.entries.join(", ")
            },
        });
    }
    Ok(ident)
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
