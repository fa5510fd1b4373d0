//! The `.nv.info`, `.nv.info.<kernel>` and `.nv.compat` record format of cubins.
//!
//! Each record: u8 format, u8 attribute, u16 value-or-size. Formats (EIFMT): 1 no value, 2 one
//! byte (padded), 3 a u16 value, 4 a u16 length followed by that many bytes. Attribute numbers
//! (EIATTR) as `cuobjdump --dump-elf` names them; the ones this crate reads are constants here.

use serde::Serialize;

use super::elf::{u16_at, u32_at};
use super::ReadError;

/// Record formats (EIFMT_*).
pub const EIFMT_NVAL: u8 = 1;
pub const EIFMT_BVAL: u8 = 2;
pub const EIFMT_HVAL: u8 = 3;
pub const EIFMT_SVAL: u8 = 4;

/// Attributes (EIATTR_*) that the cubin reader uses.
pub const EIATTR_MAX_THREADS: u8 = 0x05;
pub const EIATTR_PARAM_CBANK: u8 = 0x0a;
pub const EIATTR_REQNTID: u8 = 0x10;
pub const EIATTR_FRAME_SIZE: u8 = 0x11;
pub const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
pub const EIATTR_KPARAM_INFO: u8 = 0x17;
pub const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
pub const EIATTR_MAXREG_COUNT: u8 = 0x1b;
pub const EIATTR_MAX_STACK_SIZE: u8 = 0x23;
pub const EIATTR_REGCOUNT: u8 = 0x2f;
pub const EIATTR_CUDA_API_VERSION: u8 = 0x37;
pub const EIATTR_NUM_MBARRIERS: u8 = 0x38;
pub const EIATTR_CTA_PER_CLUSTER: u8 = 0x3d;
pub const EIATTR_EXPLICIT_CLUSTER: u8 = 0x3e;
pub const EIATTR_MAX_CLUSTER_RANK: u8 = 0x3f;
pub const EIATTR_NUM_BARRIERS: u8 = 0x4c;
/// In `.nv.compat`: 1 when the cubin is arch-specific (`sm_XYa`).
pub const COMPAT_ARCH_SPECIFIC: u8 = 0x09;

/// The value of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvInfoValue<'data> {
    None,
    U8(u8),
    U16(u16),
    Bytes(&'data [u8]),
}

/// One record, with its offset from the start of the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvInfoRecord<'data> {
    pub offset: usize,
    pub format: u8,
    pub attribute: u8,
    pub value: NvInfoValue<'data>,
}

impl<'data> NvInfoRecord<'data> {
    /// A scalar value (formats 2 and 3), widened.
    pub fn scalar(&self) -> Option<u32> {
        match self.value {
            NvInfoValue::U8(v) => Some(v.into()),
            NvInfoValue::U16(v) => Some(v.into()),
            NvInfoValue::Bytes(b) if b.len() == 4 => u32_at(b, 0),
            _ => None,
        }
    }

    /// The `i`-th u32 of a byte payload (format 4).
    pub fn word(&self, i: usize) -> Option<u32> {
        match self.value {
            NvInfoValue::Bytes(b) => u32_at(b, i.checked_mul(4)?),
            _ => None,
        }
    }

    /// Three u32s (MAX_THREADS, REQNTID, CTA_PER_CLUSTER).
    pub fn dims(&self) -> Option<[u32; 3]> {
        Some([self.word(0)?, self.word(1)?, self.word(2)?])
    }
}

/// Bytes of an `EIATTR_KPARAM_INFO` payload.
pub const KPARAM_INFO_SIZE: usize = 12;

/// One `EIATTR_KPARAM_INFO` record: a kernel parameter as `cuobjdump -elf` prints it
/// (`Index`, `Ordinal`, `Offset`, `Size`, `Pointee's logAlignment`, `Space`, `cbank`,
/// `Parameter Space`).
///
/// Payload (12 bytes): u32 index, u16 ordinal, u16 offset (bytes from the start of the
/// parameter block), u32 flags = log2 pointee alignment (bits 0..7), space (bits 8..11), cbank
/// (bits 12..16), bit 17 set when the parameter is not in the constant bank, size in bytes
/// (bits 18..31). Checked against cuobjdump 13.5 on every cubin of kbuild's own kernels: sizes
/// 4 and 8, cbank 0x1f, pointee alignment 0, space 0 everywhere before sm_100 and 5 on the
/// pointer parameters ptxas sees used as global addresses on sm_100 and sm_120 (so: space is
/// a hint of pointer-ness, never the proof that a parameter is not one). Bit 17 was never
/// seen set (unconfirmed what cuobjdump calls it then).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KParamInfo {
    pub index: u32,
    /// Position in the parameter list (0-based).
    pub ordinal: u16,
    pub offset: u16,
    pub size: u16,
    pub pointee_log_align: u8,
    pub space: u8,
    pub cbank: u8,
    /// `Parameter Space : CBANK` (flags bit 17 clear).
    pub in_cbank: bool,
}

impl KParamInfo {
    /// Decodes a payload; `None` when it is not [`KPARAM_INFO_SIZE`] bytes.
    pub fn parse(payload: &[u8]) -> Option<KParamInfo> {
        if payload.len() != KPARAM_INFO_SIZE {
            return None;
        }
        let flags = u32_at(payload, 8)?;
        Some(KParamInfo {
            index: u32_at(payload, 0)?,
            ordinal: u16_at(payload, 4)?,
            offset: u16_at(payload, 6)?,
            size: (flags >> 18) as u16,
            pointee_log_align: (flags & 0xff) as u8,
            space: ((flags >> 8) & 0xf) as u8,
            cbank: ((flags >> 12) & 0x1f) as u8,
            in_cbank: flags & (1 << 17) == 0,
        })
    }
}

/// `EIATTR_PARAM_CBANK`: where the parameters sit in constant bank 0.
///
/// Payload (8 bytes): u32 symbol index (the `.nv.constant0.<kernel>` section symbol), u16
/// offset of the parameter block in the bank, u16 its size (cuobjdump prints the second word,
/// e.g. `0x240210` = 0x24 bytes at 0x210 on sm_90, 0x160 before sm_90).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParamCbank {
    pub symbol: u32,
    pub offset: u16,
    pub size: u16,
}

impl ParamCbank {
    pub fn parse(payload: &[u8]) -> Option<ParamCbank> {
        if payload.len() != 8 {
            return None;
        }
        Some(ParamCbank {
            symbol: u32_at(payload, 0)?,
            offset: u16_at(payload, 4)?,
            size: u16_at(payload, 6)?,
        })
    }
}

/// Iterates the records of a section body. Errors name the section and the record's offset
/// within it; iteration stops after the first error.
pub struct NvInfoIter<'data> {
    data: &'data [u8],
    base: u64,
    offset: usize,
    section: &'data str,
    failed: bool,
}

impl<'data> NvInfoIter<'data> {
    /// Records of a section body; error offsets are relative to the body.
    pub fn new(section: &'data str, data: &'data [u8]) -> Self {
        Self::at(section, 0, data)
    }

    /// Records of a section body that starts at `base` in the file; error offsets are file
    /// offsets.
    pub fn at(section: &'data str, base: u64, data: &'data [u8]) -> Self {
        NvInfoIter {
            data,
            base,
            offset: 0,
            section,
            failed: false,
        }
    }
}

impl<'data> Iterator for NvInfoIter<'data> {
    type Item = Result<NvInfoRecord<'data>, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.data.len() {
            return None;
        }
        let off = self.offset;
        let at = self.base.saturating_add(off as u64);
        let bad = |d: &str| {
            ReadError::in_section("nv.info record", self.section, Some(at), d.to_string())
        };
        let Some(&[format, attribute, lo, hi]) = self.data.get(off..off + 4) else {
            self.failed = true;
            return Some(Err(bad("truncated record header")));
        };
        let v = u16::from_le_bytes([lo, hi]);
        let (value, len) = match format {
            EIFMT_NVAL => (NvInfoValue::None, 4),
            EIFMT_BVAL => (NvInfoValue::U8(lo), 4),
            EIFMT_HVAL => (NvInfoValue::U16(v), 4),
            EIFMT_SVAL => {
                let n = usize::from(v);
                match self.data.get(off + 4..off + 4 + n) {
                    Some(b) => (NvInfoValue::Bytes(b), 4 + n),
                    None => {
                        self.failed = true;
                        return Some(Err(bad(&format!("record of attribute {attribute:#04x} declares {n} bytes past the section end"))));
                    }
                }
            }
            other => {
                self.failed = true;
                return Some(Err(bad(&format!("unknown record format {other}"))));
            }
        };
        self.offset = off + len;
        Some(Ok(NvInfoRecord {
            offset: off,
            format,
            attribute,
            value,
        }))
    }
}

/// All records of a section, or the first error.
pub fn records<'data>(
    section: &'data str,
    data: &'data [u8],
) -> Result<Vec<NvInfoRecord<'data>>, ReadError> {
    NvInfoIter::new(section, data).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_formats_and_rejects_overruns() {
        let data = [
            1u8, 0x3e, 0, 0, 2, 0x4c, 1, 0, 3, 0x1b, 0xff, 0, 4, 0x2f, 8, 0, 1, 0, 0, 0, 12, 0, 0,
            0,
        ];
        let r = records(".nv.info", &data).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[1].scalar(), Some(1));
        assert_eq!(r[2].scalar(), Some(255));
        assert_eq!(r[3].word(1), Some(12));
        let err = records(".nv.info", &data[..20]).unwrap_err();
        assert!(err.to_string().contains("at offset 0xc"), "{err}");
        assert!(records(".nv.info", &[9, 0, 0, 0]).is_err());
        assert!(records(".nv.info", &[1, 0]).is_err());
    }

    #[test]
    fn decodes_kparam_info_and_param_cbank_as_cuobjdump_prints_them() {
        // sm_100 rmsnorm_f32 ordinal 2: Offset 0x10, Size 0x8, Space 0x5, cbank 0x1f.
        let p = [0, 0, 0, 0, 2, 0, 0x10, 0, 0, 0xf5, 0x21, 0];
        let k = KParamInfo::parse(&p).unwrap();
        assert_eq!(
            (k.index, k.ordinal, k.offset, k.size, k.space, k.cbank, k.in_cbank),
            (0, 2, 0x10, 8, 5, 0x1f, true)
        );
        assert_eq!(k.pointee_log_align, 0);
        assert_eq!(KParamInfo::parse(&p[..11]), None);
        let c = ParamCbank::parse(&[0x15, 0, 0, 0, 0x10, 0x02, 0x24, 0]).unwrap();
        assert_eq!((c.symbol, c.offset, c.size), (0x15, 0x210, 0x24));
        assert_eq!(ParamCbank::parse(&[0; 7]), None);
    }
}
