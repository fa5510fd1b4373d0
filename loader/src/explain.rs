//! Rendering of a [`Selection`] (and of a [`Detection`]) as text and as JSON
//! (`kbuild.explain/v1`, `kbuild.devices/v1`): the one place output is formatted, shared by the
//! CLI and the C ABI.

use kbuild_manifest::compat::GENERIC_MIN_RUNTIME;

use crate::detect::{Detection, ResolvedDevice, RuntimeReport};
use crate::select::Selection;

/// The schema tag of explain JSON.
pub const EXPLAIN_SCHEMA: &str = "kbuild.explain/v1";
/// The schema tag of devices JSON.
pub const DEVICES_SCHEMA: &str = "kbuild.devices/v1";

/// `{"schema": "kbuild.explain/v1", "device", "kernels": [{"kernel", "variant", "selected":
/// {"target", "path", "rule"} | null, "candidates": [{"target", "accepted", "rule",
/// "reason"}]}]}`, plus `device_info`, `source`, `partial` (the package's partial-build mark,
/// only when it has one) and, per kernel without a selection, `error`.
/// Keys in that order (serialised from structs, one line).
pub fn explain_json(
    selection: &Selection,
    device: &ResolvedDevice,
    source: &str,
    partial: Option<&str>,
) -> String {
    serde_json::to_string(&explain_doc(selection, device, source, partial)).unwrap_or_default()
}

/// [`explain_json`] of a split release's index: `parts` (the index's records of the parts the
/// device needs) added as the document's `parts` field.
pub fn explain_json_with_parts<P: serde::Serialize>(
    selection: &Selection,
    device: &ResolvedDevice,
    source: &str,
    partial: Option<&str>,
    parts: &P,
) -> Result<String, serde_json::Error> {
    let mut doc = serde_json::to_value(explain_doc(selection, device, source, partial))?;
    doc["parts"] = serde_json::to_value(parts)?;
    Ok(doc.to_string())
}

fn explain_doc<'a>(
    selection: &'a Selection,
    device: &ResolvedDevice,
    source: &'a str,
    partial: Option<&'a str>,
) -> ExplainDoc<'a> {
    ExplainDoc {
        schema: EXPLAIN_SCHEMA,
        device: selection.device.name(),
        device_info: DeviceInfo {
            simulated: device.simulated(),
            name: device.detected.as_ref().map(|d| d.name.clone()),
            description: device.describe(),
        },
        source,
        partial,
        kernels: selection
            .kernels
            .iter()
            .map(|k| KernelDoc {
                kernel: &k.kernel,
                variant: k.variant.as_deref(),
                selected: k.selected().map(|c| SelectedDoc {
                    target: &c.target,
                    path: &c.path,
                    rule: c.rule,
                }),
                candidates: k
                    .candidates
                    .iter()
                    .map(|c| CandidateDoc {
                        target: &c.target,
                        accepted: c.accepted,
                        rule: c.rule,
                        reason: &c.reason,
                    })
                    .collect(),
                error: k
                    .selected
                    .is_none()
                    .then(|| selection.no_match(k).to_string()),
            })
            .collect(),
    }
}

#[derive(serde::Serialize)]
struct ExplainDoc<'a> {
    schema: &'static str,
    device: String,
    device_info: DeviceInfo,
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    partial: Option<&'a str>,
    kernels: Vec<KernelDoc<'a>>,
}

#[derive(serde::Serialize)]
struct DeviceInfo {
    simulated: bool,
    name: Option<String>,
    description: String,
}

#[derive(serde::Serialize)]
struct KernelDoc<'a> {
    kernel: &'a str,
    variant: Option<&'a str>,
    selected: Option<SelectedDoc<'a>>,
    candidates: Vec<CandidateDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(serde::Serialize)]
struct SelectedDoc<'a> {
    target: &'a str,
    path: &'a str,
    rule: Option<kbuild_manifest::compat::Rule>,
}

#[derive(serde::Serialize)]
struct CandidateDoc<'a> {
    target: &'a str,
    accepted: bool,
    rule: Option<kbuild_manifest::compat::Rule>,
    reason: &'a str,
}

/// The readable trace: one block per kernel, the selected object first, each candidate with
/// ✓/✗, its rule and the reason; a kernel with no match gets its error line.
pub fn explain_text(selection: &Selection, device: &ResolvedDevice, source: &str) -> String {
    trace(selection, device, source, true)
}

/// [`explain_text`] without the error lines of kernels with no match (`NO MATCH` marks them):
/// for a caller that reports those errors itself ([`Selection::missing`]) on another stream,
/// as `kbuild explain` does on stderr, so that each is said once.
pub fn explain_trace(selection: &Selection, device: &ResolvedDevice, source: &str) -> String {
    trace(selection, device, source, false)
}

fn trace(selection: &Selection, device: &ResolvedDevice, source: &str, errors: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("device: {}\n", device.describe()));
    out.push_str(&format!("source: {source}\n"));
    let width = selection
        .kernels
        .iter()
        .flat_map(|k| k.candidates.iter().map(|c| c.target.len()))
        .max()
        .unwrap_or(0);
    for k in &selection.kernels {
        let name = match &k.variant {
            Some(v) => format!("{} [{v}]", k.kernel),
            None => k.kernel.clone(),
        };
        match k.selected() {
            Some(c) => out.push_str(&format!(
                "\n{name}: {} ({}, {})\n",
                c.target,
                c.rule.map(|r| r.as_str()).unwrap_or("-"),
                c.path
            )),
            None => out.push_str(&format!("\n{name}: NO MATCH\n")),
        }
        for c in &k.candidates {
            let mark = if c.accepted { "✓" } else { "✗" };
            let rule = c.rule.map(|r| r.as_str()).unwrap_or("unknown_target");
            out.push_str(&format!(
                "  {mark} {:width$}  {rule:<20} {}\n",
                c.target, c.reason
            ));
        }
        if errors && k.selected.is_none() {
            out.push_str(&format!("  error: {}\n", selection.no_match(k)));
        }
    }
    out
}

/// `kbuild devices --json`: `{"schema": "kbuild.devices/v1", "cuda": {...}, "hip": {...}}`.
pub fn devices_json(detection: &Detection) -> String {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        schema: &'static str,
        cuda: &'a RuntimeReport,
        hip: &'a RuntimeReport,
    }
    serde_json::to_string(&Doc {
        schema: DEVICES_SCHEMA,
        cuda: &detection.cuda,
        hip: &detection.hip,
    })
    .unwrap_or_default()
}

/// `kbuild devices`.
pub fn devices_text(detection: &Detection) -> String {
    let mut out = String::new();
    for r in [&detection.cuda, &detection.hip] {
        let head = match (&r.library, &r.version) {
            (Some(lib), Some(v)) => format!("{}: {lib}, version {v}", r.runtime),
            (Some(lib), None) => format!("{}: {lib}", r.runtime),
            _ => r.runtime.to_string(),
        };
        out.push_str(&format!("{head}: {}\n", r.message));
        if let Some(g) = r.generic_supported {
            out.push_str(&format!(
                "  generic code objects: {}\n",
                if g {
                    "loaded".to_string()
                } else {
                    format!("not loaded (needs ROCm ≥ {GENERIC_MIN_RUNTIME})")
                }
            ));
        }
        for d in &r.devices {
            out.push_str(&format!(
                "  [{}] {} {} ({} MiB, {} {}){}\n",
                d.index,
                d.arch,
                d.name,
                d.memory_bytes >> 20,
                d.multiprocessors,
                if r.runtime == "cuda" { "SMs" } else { "CUs" },
                d.note
                    .as_ref()
                    .map(|n| format!(" — {n}"))
                    .unwrap_or_default()
            ));
        }
    }
    out
}
