//! Text readers of compiler logs: `ptxas -v` (via `nvcc -Xptxas -v`) and clang's
//! `-Rpass-analysis=kernel-resource-usage` remarks. Both are also oracles for the binary
//! readers: spills are only in the ptxas log, and the remarks restate the AMDGPU metadata.

use serde::Serialize;

/// One function of a `ptxas -v` log. Figures are exactly the numbers ptxas printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PtxasFunctionReport {
    pub function: String,
    /// "sm_89", from "Compiling entry function 'k' for 'sm_89'" (the last one seen, for
    /// non-entry functions).
    pub target: Option<String>,
    /// Whether ptxas compiled it as an entry function (a kernel).
    pub is_entry: bool,
    pub registers: Option<u32>,
    pub barriers: Option<u32>,
    /// "S bytes smem" (absent = 0).
    pub smem_bytes: u64,
    /// "C bytes cmem[0]" (ptxas for sm_90+ does not print it).
    pub cmem0_bytes: Option<u64>,
    /// Other constant banks: (bank, bytes).
    pub cmem_other: Vec<(u32, u64)>,
    pub stack_frame: u64,
    pub spill_stores: u64,
    pub spill_loads: u64,
    /// "N bytes cumulative stack size".
    pub cumulative_stack: Option<u64>,
}

/// Leading number of a comma-separated item such as "360 bytes cmem[0]".
fn leading_number(item: &str) -> Option<u64> {
    item.split_whitespace().next()?.parse().ok()
}

/// The text between the first pair of single quotes.
fn quoted(s: &str) -> Option<&str> {
    let start = s.find('\'')? + 1;
    let len = s.get(start..)?.find('\'')?;
    s.get(start..start + len)
}

/// Parses a `ptxas -v` log (as nvcc prints it on stderr). Lines it does not know are ignored,
/// so the whole compiler output can be passed.
pub fn parse_ptxas_log(text: &str) -> Vec<PtxasFunctionReport> {
    let mut out: Vec<PtxasFunctionReport> = Vec::new();
    let mut current: Option<usize> = None;
    let mut target: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        let body = line
            .split_once(':')
            .filter(|(h, _)| h.starts_with("ptxas"))
            .map(|(_, b)| b.trim());
        if let Some(body) = body {
            if let Some(rest) = body.strip_prefix("Compiling entry function") {
                let name = quoted(rest).unwrap_or("").to_string();
                target = rest
                    .rsplit_once(" for ")
                    .and_then(|(_, t)| quoted(t))
                    .map(str::to_string);
                out.push(PtxasFunctionReport {
                    function: name,
                    target: target.clone(),
                    is_entry: true,
                    ..Default::default()
                });
                current = Some(out.len() - 1);
            } else if let Some(rest) = body.strip_prefix("Function properties for") {
                let name = rest.trim().to_string();
                let same = current
                    .and_then(|i| out.get(i))
                    .is_some_and(|r| r.function == name);
                if !same {
                    out.push(PtxasFunctionReport {
                        function: name,
                        target: target.clone(),
                        ..Default::default()
                    });
                    current = Some(out.len() - 1);
                }
            } else if let Some(rest) = body.strip_prefix("Used") {
                if let Some(r) = current.and_then(|i| out.get_mut(i)) {
                    apply_used(r, rest);
                }
            }
        } else if line.contains("bytes stack frame") {
            if let Some(r) = current.and_then(|i| out.get_mut(i)) {
                for item in line.split(',') {
                    let n = leading_number(item.trim()).unwrap_or(0);
                    if item.contains("stack frame") {
                        r.stack_frame = n;
                    } else if item.contains("spill stores") {
                        r.spill_stores = n;
                    } else if item.contains("spill loads") {
                        r.spill_loads = n;
                    }
                }
            }
        }
    }
    out
}

/// "Used 16 registers, used 1 barriers, 4112 bytes smem, 368 bytes cmem[0]".
fn apply_used(r: &mut PtxasFunctionReport, rest: &str) {
    for item in rest.split(',') {
        let item = item.trim();
        let item = item.strip_prefix("used ").unwrap_or(item);
        let n = leading_number(item);
        if item.ends_with("registers") {
            r.registers = n.and_then(|v| u32::try_from(v).ok());
        } else if item.ends_with("barriers") {
            r.barriers = n.and_then(|v| u32::try_from(v).ok());
        } else if item.ends_with("bytes smem") {
            r.smem_bytes = n.unwrap_or(0);
        } else if item.ends_with("cumulative stack size") {
            r.cumulative_stack = n;
        } else if let Some(bank) = item
            .split_once("cmem[")
            .and_then(|(_, b)| b.strip_suffix(']'))
        {
            match (bank.parse::<u32>(), n) {
                (Ok(0), Some(v)) => r.cmem0_bytes = Some(v),
                (Ok(b), Some(v)) => r.cmem_other.push((b, v)),
                _ => {}
            }
        }
    }
}

/// One kernel of clang's `-Rpass-analysis=kernel-resource-usage` remarks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClangKernelRemarks {
    pub function: String,
    pub sgprs: Option<u32>,
    pub vgprs: Option<u32>,
    /// Printed for targets with AGPRs only.
    pub agprs: Option<u32>,
    /// "ScratchSize [bytes/lane]".
    pub scratch_bytes: Option<u64>,
    pub dynamic_stack: Option<bool>,
    /// "Occupancy [waves/SIMD]".
    pub occupancy: Option<u32>,
    pub sgpr_spill: Option<u32>,
    pub vgpr_spill: Option<u32>,
    /// "LDS Size [bytes/block]".
    pub lds_bytes: Option<u64>,
}

/// Parses clang's kernel-resource-usage remarks (clang's whole stderr may be passed).
pub fn parse_clang_resource_remarks(text: &str) -> Vec<ClangKernelRemarks> {
    let mut out: Vec<ClangKernelRemarks> = Vec::new();
    for line in text.lines() {
        let Some((_, rest)) = line.split_once("remark:") else {
            continue;
        };
        let rest = rest
            .split(" [-Rpass-analysis")
            .next()
            .unwrap_or(rest)
            .trim();
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key == "Function Name" {
            out.push(ClangKernelRemarks {
                function: value.to_string(),
                ..Default::default()
            });
            continue;
        }
        let Some(r) = out.last_mut() else { continue };
        let num = || value.parse::<u64>().ok();
        let num32 = || value.parse::<u32>().ok();
        match key {
            "SGPRs" => r.sgprs = num32(),
            "VGPRs" => r.vgprs = num32(),
            "AGPRs" => r.agprs = num32(),
            "ScratchSize [bytes/lane]" => r.scratch_bytes = num(),
            "Dynamic Stack" => r.dynamic_stack = Some(value.eq_ignore_ascii_case("true")),
            "Occupancy [waves/SIMD]" => r.occupancy = num32(),
            "SGPRs Spill" => r.sgpr_spill = num32(),
            "VGPRs Spill" => r.vgpr_spill = num32(),
            "LDS Size [bytes/block]" => r.lds_bytes = num(),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_lines() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Function properties for _Z3devv\n    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n\
ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
ptxas info    : Function properties for k\n    88 bytes stack frame, 148 bytes spill stores, 140 bytes spill loads\n\
ptxas info    : Used 64 registers, used 1 barriers, 4112 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2], 88 bytes cumulative stack size\n\
ptxas info    : Compile time = 1.0 ms\n";
        let r = parse_ptxas_log(log);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].function, "_Z3devv");
        assert!(!r[0].is_entry);
        assert_eq!((r[0].stack_frame, r[0].spill_stores), (8, 4));
        let k = &r[1];
        assert_eq!(k.target.as_deref(), Some("sm_90a"));
        assert_eq!(
            (k.registers, k.barriers, k.smem_bytes, k.cmem0_bytes),
            (Some(64), Some(1), 4112, Some(360))
        );
        assert_eq!(
            (k.stack_frame, k.spill_stores, k.spill_loads),
            (88, 148, 140)
        );
        assert_eq!(k.cmem_other, vec![(2, 8)]);
        assert_eq!(k.cumulative_stack, Some(88));
    }

    #[test]
    fn clang_remarks() {
        let t = "a.cu:3:1: remark: Function Name: k [-Rpass-analysis=kernel-resource-usage]\n\
a.cu:3:1: remark:     SGPRs: 39 [-Rpass-analysis=kernel-resource-usage]\n\
a.cu:3:1: remark:     AGPRs: 4 [-Rpass-analysis=kernel-resource-usage]\n\
a.cu:3:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]\n\
a.cu:3:1: remark:     LDS Size [bytes/block]: 32768 [-Rpass-analysis=kernel-resource-usage]\n";
        let r = parse_clang_resource_remarks(t);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].sgprs, r[0].agprs, r[0].dynamic_stack, r[0].lds_bytes),
            (Some(39), Some(4), Some(false), Some(32768))
        );
    }
}
