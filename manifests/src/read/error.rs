//! The one error type of the readers: what is wrong, and where (offset, section, member).

use super::Format;

/// Why a reader refused its input. Every variant says where the problem is; `Display` is a
/// sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The bytes are not any format these readers know.
    #[error("unrecognised input: {0} (expected an AMDGPU code object, a cubin, PTX text, a fatbin, a clang offload bundle or a host ELF with embedded device code)")]
    Unrecognised(String),

    /// The input is a container; the caller asked for a single code object.
    #[error("input is {} (a container), not a single code object: use `read::walk` to list its members", .0.describe())]
    Container(Format),

    /// A structure is truncated or inconsistent.
    #[error("malformed {what}{}: {detail}", location(.section, .offset))]
    Malformed {
        /// The structure being read ("ELF section header table", "fatbin entry header", ...).
        what: &'static str,
        /// The section it lives in, where there is one.
        section: Option<String>,
        /// Offset of the structure from the start of the input (or of the section, see Display).
        offset: Option<u64>,
        /// What is wrong.
        detail: String,
    },

    /// The format is understood but this variant of it is not supported.
    #[error("unsupported {what}{}: {detail}", location(.section, .offset))]
    Unsupported {
        what: &'static str,
        section: Option<String>,
        offset: Option<u64>,
        detail: String,
    },

    /// A declared size is over the configured limit (decompression bombs, absurd counts).
    #[error("{what} at offset {offset:#x} declares {declared} bytes, over the limit of {limit} bytes (raise `Limits::max_decompressed` if this input is trusted)")]
    LimitExceeded {
        what: &'static str,
        offset: u64,
        declared: u64,
        limit: u64,
    },

    /// Two records of the same object disagree (e.g. AMDGPU metadata vs kernel descriptor).
    #[error("contradiction in kernel `{kernel}`: {detail}")]
    Contradiction { kernel: String, detail: String },

    /// An error inside one member of a container: the path names the member.
    #[error("in member `{path}`: {source}")]
    InMember {
        path: String,
        #[source]
        source: Box<ReadError>,
    },
}

fn location(section: &Option<String>, offset: &Option<u64>) -> String {
    match (section, offset) {
        (Some(s), Some(o)) => format!(" in section `{s}` at offset {o:#x}"),
        (Some(s), None) => format!(" in section `{s}`"),
        (None, Some(o)) => format!(" at offset {o:#x}"),
        (None, None) => String::new(),
    }
}

impl ReadError {
    /// A malformed structure at an offset of the input.
    pub(crate) fn at(what: &'static str, offset: u64, detail: impl Into<String>) -> Self {
        ReadError::Malformed {
            what,
            section: None,
            offset: Some(offset),
            detail: detail.into(),
        }
    }

    /// A malformed structure inside a named section (offset within the input file).
    pub(crate) fn in_section(
        what: &'static str,
        section: &str,
        offset: Option<u64>,
        detail: impl Into<String>,
    ) -> Self {
        ReadError::Malformed {
            what,
            section: Some(section.to_string()),
            offset,
            detail: detail.into(),
        }
    }

    pub(crate) fn unsupported(
        what: &'static str,
        offset: Option<u64>,
        detail: impl Into<String>,
    ) -> Self {
        ReadError::Unsupported {
            what,
            section: None,
            offset,
            detail: detail.into(),
        }
    }

    /// Wraps an error with the container member it came from.
    pub(crate) fn in_member(self, path: &str) -> Self {
        ReadError::InMember {
            path: path.to_string(),
            source: Box::new(self),
        }
    }

    /// Maps an `object` crate error (a short static message) to a located error.
    pub(crate) fn elf(what: &'static str, offset: Option<u64>, err: object::read::Error) -> Self {
        ReadError::Malformed {
            what,
            section: None,
            offset,
            detail: err.to_string(),
        }
    }
}

impl Format {
    /// "an AMDGPU code object", "a cubin", ... for sentences.
    pub fn describe(self) -> &'static str {
        match self {
            Format::Hsaco => "an AMDGPU code object",
            Format::Cubin => "a cubin",
            Format::Ptx => "PTX text",
            Format::Fatbin => "an NVIDIA fatbin",
            Format::OffloadBundle => "a clang offload bundle",
            Format::HostElf => "a host ELF file",
        }
    }
}
