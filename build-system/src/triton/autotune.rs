//! `autotune = true`: a Triton kernel's variants are its function's own `@triton.autotune`
//! config list, read through a worker when a build plans its jobs (one object per config:
//! its kwargs as constexprs, its `num_warps`/`num_stages`/`num_ctas`/`maxnreg` as launch
//! options). The list is read on every build, in the worker that then keys the jobs (a warm
//! build asks a worker for each job's source key anyway, and the module it imported is
//! cached there), so an edited list changes the variant set on the next build at the cost
//! of one request per kernel and target family.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kbuild_manifest::target::Vendor;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::config::{Kernel, Project, TritonKernel, Variant};
use crate::plan::Job;

use super::worker::{Pool, WorkerError};

#[derive(Debug, thiserror::Error)]
pub enum AutotuneError {
    #[error("kernel `{kernel}`: autotune = true, but `{function}` in {file} has no @triton.autotune wrapper; remove `autotune = true` or give a `[kernels.{kernel}.variants]` table")]
    NotAutotuned {
        kernel: String,
        file: String,
        function: String,
    },
    #[error("kernel `{kernel}`: the @triton.autotune config list of `{function}` in {file} is empty ({family})")]
    Empty {
        kernel: String,
        file: String,
        function: String,
        family: &'static str,
    },
    #[error(
        "kernel `{kernel}`: reading the autotune config list of `{function}` ({family}): {why}"
    )]
    Refused {
        kernel: String,
        function: String,
        family: &'static str,
        why: String,
    },
    #[error("kernel `{kernel}`: reading the autotune config list: {source}")]
    Worker {
        kernel: String,
        #[source]
        source: WorkerError,
    },
    #[error("kernel `{kernel}`: the Triton worker's `configs` answer lacks or mistypes `{field}`")]
    Answer { kernel: String, field: &'static str },
    #[error("kernel `{kernel}`: constexpr `{name}` is in `constexprs` and set by autotune config `{variant}`; remove it from `constexprs` (Triton refuses such a conflict too)")]
    Conflict {
        kernel: String,
        name: String,
        variant: String,
    },
    #[error("kernel `{kernel}`: two different autotune configs are both named `{name}`; make their values differ in more than punctuation")]
    Clash { kernel: String, name: String },
}

/// One `triton.Config` as the worker reports it.
#[derive(Debug, Deserialize)]
struct Config {
    kwargs: Map<String, Value>,
    num_warps: Option<u32>,
    num_stages: Option<u32>,
    num_ctas: Option<u32>,
    maxnreg: Option<u32>,
    #[serde(default)]
    pre_hook: bool,
}

#[derive(Debug, Deserialize)]
struct Configs {
    autotuned: bool,
    configs: Vec<Config>,
}

/// A project whose `autotune = true` kernels have their variants, and what to warn about.
pub struct Expanded {
    pub project: Project,
    pub warnings: Vec<String>,
}

/// The project with every autotune kernel's variants read from its function, for the target
/// families `jobs` (planned before) build it for; `None` when no kernel autotunes.
pub fn expand(
    project: &Project,
    pool: &Pool,
    timeout: Option<Duration>,
    jobs: &[Job],
) -> Result<Option<Expanded>, AutotuneError> {
    let mut families: BTreeMap<usize, BTreeSet<Vendor>> = BTreeMap::new();
    for j in jobs {
        let autotunes = project.kernels[j.kernel]
            .triton
            .as_ref()
            .is_some_and(|t| t.autotune);
        if autotunes {
            families
                .entry(j.kernel)
                .or_default()
                .insert(j.target.vendor());
        }
    }
    if families.is_empty() {
        return Ok(None);
    }
    let mut out = project.clone();
    let mut warnings = Vec::new();
    for (ki, vendors) in families {
        let kernel = &project.kernels[ki];
        let Some(spec) = kernel.triton.as_ref() else {
            continue;
        };
        let mut per_family = Vec::new();
        for vendor in &vendors {
            let configs = read_configs(project, kernel, spec, *vendor, pool, timeout)?;
            per_family.push((*vendor, configs));
        }
        let (variants, hooked) = variants_of(&kernel.name, spec, &per_family)?;
        if !hooked.is_empty() {
            warnings.push(format!(
                "warning: kernel `{}`: autotune config(s) {} of `{}` have a pre_hook; hooks do not run ahead of time and the loader launches these objects without them: do what the hook does before each launch",
                kernel.name,
                hooked.join(", "),
                spec.function
            ));
        }
        out.kernels[ki].variants = variants;
    }
    Ok(Some(Expanded {
        project: out,
        warnings,
    }))
}

fn family_name(v: Vendor) -> &'static str {
    match v {
        Vendor::Nvidia => "nvidia",
        Vendor::Amd => "amd",
    }
}

/// The config list of `kernel`'s function as `vendor`'s import description gives it.
fn read_configs(
    project: &Project,
    kernel: &Kernel,
    spec: &TritonKernel,
    vendor: Vendor,
    pool: &Pool,
    timeout: Option<Duration>,
) -> Result<Vec<Config>, AutotuneError> {
    let family = family_name(vendor);
    let file = project.root.join(&kernel.source).display().to_string();
    let import: Value = serde_json::from_str(&spec.import).unwrap_or_else(|_| json!({}));
    let req = json!({
        "op": "configs",
        "file": file,
        "function": spec.function,
        "family": family,
        "import": import,
    });
    let answer = pool
        .call(&req, timeout)
        .map_err(|source| AutotuneError::Worker {
            kernel: kernel.name.clone(),
            source,
        })?;
    if answer.get("ok").and_then(Value::as_bool) != Some(true) {
        return Err(AutotuneError::Refused {
            kernel: kernel.name.clone(),
            function: spec.function.clone(),
            family,
            why: answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the worker gave no reason")
                .to_string(),
        });
    }
    let parsed: Configs = serde_json::from_value(answer).map_err(|_| AutotuneError::Answer {
        kernel: kernel.name.clone(),
        field: "configs",
    })?;
    let shown = kernel.source.display().to_string();
    if !parsed.autotuned {
        return Err(AutotuneError::NotAutotuned {
            kernel: kernel.name.clone(),
            file: shown,
            function: spec.function.clone(),
        });
    }
    if parsed.configs.is_empty() {
        return Err(AutotuneError::Empty {
            kernel: kernel.name.clone(),
            file: shown,
            function: spec.function.clone(),
            family,
        });
    }
    Ok(parsed.configs)
}

/// The variants of the families' config lists, in list order (the first family's first), and
/// the names of those with a pre_hook. A config in every family's list builds for every
/// target; one only some lists hold builds for those families' targets.
fn variants_of(
    kernel: &str,
    spec: &TritonKernel,
    per_family: &[(Vendor, Vec<Config>)],
) -> Result<(Vec<Variant>, Vec<String>), AutotuneError> {
    let mut order: Vec<Variant> = Vec::new();
    let mut families: BTreeMap<String, BTreeSet<Vendor>> = BTreeMap::new();
    let mut hooked = BTreeSet::new();
    for (vendor, configs) in per_family {
        for c in configs {
            let v = variant(c);
            for name in c.kwargs.keys() {
                if spec.constexprs.contains_key(name) {
                    return Err(AutotuneError::Conflict {
                        kernel: kernel.to_string(),
                        name: name.clone(),
                        variant: v.name.clone(),
                    });
                }
            }
            if c.pre_hook {
                hooked.insert(v.name.clone());
            }
            match order.iter().find(|o| o.name == v.name) {
                // The same config listed twice, or in two families' lists: one object.
                Some(o) if o.defines == v.defines => {}
                Some(_) => {
                    return Err(AutotuneError::Clash {
                        kernel: kernel.to_string(),
                        name: v.name,
                    })
                }
                None => order.push(v.clone()),
            }
            families.entry(v.name).or_default().insert(*vendor);
        }
    }
    let all: BTreeSet<Vendor> = per_family.iter().map(|(v, _)| *v).collect();
    for v in &mut order {
        let own = families.get(&v.name).cloned().unwrap_or_default();
        if own != all {
            v.vendors = own.into_iter().collect();
        }
    }
    Ok((order, hooked.into_iter().collect()))
}

/// A config's variant, named from its values: each kwarg as NAME then value (in name order),
/// then `w` num_warps, `s` num_stages, `c` num_ctas (when not 1), `r` maxnreg (when set),
/// joined by `.`: `BV64.w4.s2`. The name is the config's identity: stable across builds and
/// list reorderings, and the same as the object's file name and the loader's `variant=`.
fn variant(c: &Config) -> Variant {
    let mut parts = Vec::new();
    let mut defines = BTreeMap::new();
    // serde_json's map is ordered by key (and the worker writes sorted keys).
    for (k, v) in &c.kwargs {
        let text = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        parts.push(format!("{k}{}", crate::config::variant_part(&text)));
        defines.insert(k.clone(), text);
    }
    let mut option = |key: &str, tag: &str, value: Option<u32>, shown: bool| {
        if let Some(n) = value {
            defines.insert(key.to_string(), n.to_string());
            if shown {
                parts.push(format!("{tag}{n}"));
            }
        }
    };
    option("num_warps", "w", c.num_warps, true);
    option("num_stages", "s", c.num_stages, true);
    option("num_ctas", "c", c.num_ctas, c.num_ctas != Some(1));
    option("maxnreg", "r", c.maxnreg, true);
    Variant {
        name: parts.join("."),
        defines,
        vendors: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(v: Value) -> Config {
        serde_json::from_value(v).expect("test config")
    }

    fn spec() -> TritonKernel {
        TritonKernel {
            function: "k".into(),
            signature: BTreeMap::new(),
            constexprs: BTreeMap::from([("H".to_string(), "16".to_string())]),
            divisible_16: Vec::new(),
            equal_to_1: Vec::new(),
            num_warps: 4,
            num_stages: 3,
            num_ctas: 1,
            maxnreg: None,
            import: "{}".into(),
            autotune: true,
            heuristics: false,
            cooperative: false,
            pdl: false,
        }
    }

    #[test]
    fn a_config_is_named_by_its_values() {
        let c = config(
            json!({"kwargs": {"BV": 64, "BK": 32, "EVEN": true, "P": "ieee"},
            "num_warps": 4, "num_stages": 2, "num_ctas": 1, "maxnreg": null}),
        );
        let v = variant(&c);
        assert_eq!(v.name, "BK32.BV64.EVENtrue.Pieee.w4.s2");
        assert_eq!(v.defines["BV"], "64");
        assert_eq!(v.defines["EVEN"], "true");
        assert_eq!(v.defines["num_ctas"], "1");
        assert!(!v.defines.contains_key("maxnreg"));
        let c = config(
            json!({"kwargs": {}, "num_warps": 8, "num_stages": 1, "num_ctas": 2,
            "maxnreg": 128}),
        );
        assert_eq!(variant(&c).name, "w8.s1.c2.r128");
    }

    #[test]
    fn family_lists_merge_and_restrict_what_one_family_lacks() {
        let c = |bv: u32| {
            config(json!({"kwargs": {"BV": bv}, "num_warps": 4, "num_stages": 2, "num_ctas": 1}))
        };
        let (vs, hooked) = variants_of(
            "k",
            &spec(),
            &[
                (Vendor::Nvidia, vec![c(32), c(64), c(64)]),
                (Vendor::Amd, vec![c(32)]),
            ],
        )
        .expect("merges");
        assert!(hooked.is_empty());
        let names: Vec<(&str, &[Vendor])> = vs
            .iter()
            .map(|v| (v.name.as_str(), v.vendors.as_slice()))
            .collect();
        assert_eq!(
            names,
            [
                ("BV32.w4.s2", &[][..]),
                ("BV64.w4.s2", &[Vendor::Nvidia][..])
            ]
        );
    }

    #[test]
    fn conflicts_and_clashes_are_named() {
        let hooked = config(json!({"kwargs": {"BV": 8}, "num_warps": 1, "num_stages": 1,
            "num_ctas": 1, "pre_hook": true}));
        let (_, names) = variants_of("k", &spec(), &[(Vendor::Nvidia, vec![hooked])]).unwrap();
        assert_eq!(names, ["BV8.w1.s1"]);
        let h = config(json!({"kwargs": {"H": 8}, "num_warps": 1, "num_stages": 1}));
        let e = variants_of("k", &spec(), &[(Vendor::Nvidia, vec![h])]).unwrap_err();
        assert!(
            e.to_string()
                .contains("constexpr `H` is in `constexprs` and set by autotune config `H8.w1.s1`"),
            "{e}"
        );
        let a = config(json!({"kwargs": {"P": "a-b"}, "num_warps": 1, "num_stages": 1}));
        let b = config(json!({"kwargs": {"P": "a+b"}, "num_warps": 1, "num_stages": 1}));
        let e = variants_of("k", &spec(), &[(Vendor::Nvidia, vec![a, b])]).unwrap_err();
        assert!(e.to_string().contains("both named `Pa_b.w1.s1`"), "{e}");
    }
}
