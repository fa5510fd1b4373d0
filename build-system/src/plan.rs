//! Job planning: kernel × variant × target.

use std::path::PathBuf;

use kbuild_manifest::target::Target;

use crate::config::{Project, Variant};

/// One compile: a kernel (by index into `Project::kernels`), a variant, a target.
#[derive(Debug, Clone)]
pub struct Job {
    pub kernel: usize,
    pub kernel_name: String,
    pub variant: Option<Variant>,
    pub target: Target,
    /// `<target>/<kernel>[.<variant>].<ext>`, relative to the output directory.
    pub out_rel: PathBuf,
}

impl Job {
    pub fn variant_name(&self) -> Option<&str> {
        self.variant.as_ref().map(|v| v.name.as_str())
    }

    /// `rmsnorm.rows4 for sm_89`, for messages.
    pub fn label(&self) -> String {
        match self.variant_name() {
            Some(v) => format!("{}.{} for {}", self.kernel_name, v, self.target),
            None => format!("{} for {}", self.kernel_name, self.target),
        }
    }
}

/// Every job of `project` for `targets`, in (kernel, variant, target) order. Targets a kernel
/// restricts itself away from are skipped.
pub fn plan(project: &Project, targets: &[Target]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (ki, k) in project.kernels.iter().enumerate() {
        let variants: Vec<Option<Variant>> = if k.variants.is_empty() {
            vec![None]
        } else {
            k.variants.iter().cloned().map(Some).collect()
        };
        for v in &variants {
            let for_variant = |t: &Target| {
                v.as_ref()
                    .is_none_or(|v| v.vendors.is_empty() || v.vendors.contains(&t.vendor()))
            };
            for t in targets.iter().filter(|t| k.builds_for(t) && for_variant(t)) {
                let file = match v {
                    Some(v) => format!("{}.{}.{}", k.name, v.name, t.object_kind().extension()),
                    None => format!("{}.{}", k.name, t.object_kind().extension()),
                };
                jobs.push(Job {
                    kernel: ki,
                    kernel_name: k.name.clone(),
                    variant: v.clone(),
                    target: *t,
                    out_rel: PathBuf::from(t.to_string()).join(file),
                });
            }
        }
    }
    jobs
}
