//! Helpers shared by the reader tests: fixtures, the vendor tools used as oracles, and small
//! parsers of their text output.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

pub fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).expect("fixture is UTF-8")
}

/// Runs a tool and returns its stdout; panics with a message saying how to get the tool.
fn run(tool: &PathBuf, args: &[&str], hint: &str) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("oracle `{}` could not be run ({e}). {hint}", tool.display()));
    assert!(
        out.status.success(),
        "`{} {}` failed: {}",
        tool.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `llvm-readobj-19` (Debian package llvm-19), from PATH or `KBUILD_LLVM_READOBJ`.
pub fn llvm_readobj() -> PathBuf {
    std::env::var_os("KBUILD_LLVM_READOBJ").map(PathBuf::from).or_else(|| on_path("llvm-readobj-19")).unwrap_or_else(|| {
        panic!("oracle llvm-readobj-19 not found on PATH: install it with `apt-get install llvm-19` (or set KBUILD_LLVM_READOBJ)")
    })
}

/// `clang-offload-bundler-19` (Debian package clang-tools-19), from PATH.
pub fn offload_bundler() -> PathBuf {
    on_path("clang-offload-bundler-19").unwrap_or_else(|| {
        panic!("oracle clang-offload-bundler-19 not found on PATH: install it with `apt-get install clang-tools-19` (or `kbuild toolchain install hip`)")
    })
}

/// `cuobjdump`: `KBUILD_CUOBJDUMP`, the kbuild-managed CUDA 13.5 toolchain, CUDA_HOME, PATH.
pub fn cuobjdump() -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("KBUILD_CUOBJDUMP") {
        candidates.push(p.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(
            PathBuf::from(home)
                .join(".local/share/kbuild/toolchains/cuda-13.5.37/nvidia/cu13/bin/cuobjdump"),
        );
    }
    if let Some(cuda) = std::env::var_os("CUDA_HOME") {
        candidates.push(PathBuf::from(cuda).join("bin/cuobjdump"));
    }
    candidates.extend(on_path("cuobjdump"));
    candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "oracle cuobjdump not found (looked at KBUILD_CUOBJDUMP, ~/.local/share/kbuild/toolchains/cuda-13.5.37, \
             CUDA_HOME, PATH): run `kbuild toolchain install cuda` or `pip install nvidia-cuda-cuobjdump`"
        )
    })
}

pub fn readobj_notes(file: &str) -> String {
    let p = fixture_path(file);
    run(
        &llvm_readobj(),
        &["--notes", p.to_str().unwrap()],
        "install llvm-19",
    )
}

pub fn cuobjdump_resource_usage(file: &str) -> String {
    let p = fixture_path(file);
    run(
        &cuobjdump(),
        &["--dump-resource-usage", p.to_str().unwrap()],
        "install the CUDA toolchain",
    )
}

pub fn cuobjdump_args(args: &[&str]) -> String {
    run(&cuobjdump(), args, "install the CUDA toolchain")
}

pub fn bundler(args: &[&str]) -> String {
    run(&offload_bundler(), args, "install clang-19")
}

/// A YAML value as llvm-readobj prints the AMDGPU metadata: block maps and sequences only.
#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    Scalar(String),
    List(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    pub fn get(&self, key: &str) -> Option<&Yaml> {
        match self {
            Yaml::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Extracts and parses the `AMDGPU Metadata: ---` document of `llvm-readobj --notes`.
pub fn readobj_metadata(notes: &str) -> Yaml {
    let start = notes
        .find("AMDGPU Metadata: ---")
        .expect("no AMDGPU Metadata in llvm-readobj output");
    let body = &notes[start + "AMDGPU Metadata: ---".len()..];
    let mut lines: Vec<(usize, String)> = Vec::new();
    for l in body.lines() {
        if l.trim() == "..." {
            break;
        }
        if l.trim().is_empty() {
            continue;
        }
        let indent = l.len() - l.trim_start().len();
        lines.push((indent, l.trim_start().to_string()));
    }
    let mut i = 0;
    let indent = lines.first().map_or(0, |l| l.0);
    parse_block(&mut lines, &mut i, indent)
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2
        && ((s.starts_with('\'') && s.ends_with('\'')) || (s.starts_with('"') && s.ends_with('"')))
    {
        s[1..s.len() - 1].replace("''", "'")
    } else {
        s.to_string()
    }
}

fn split_key(s: &str) -> Option<(String, String)> {
    if let Some(k) = s.strip_suffix(':') {
        return Some((k.to_string(), String::new()));
    }
    let (k, v) = s.split_once(": ")?;
    Some((k.to_string(), v.trim().to_string()))
}

fn parse_block(lines: &mut Vec<(usize, String)>, i: &mut usize, indent: usize) -> Yaml {
    if *i < lines.len() && lines[*i].1.starts_with("- ")
        || lines.get(*i).is_some_and(|l| l.1 == "-")
    {
        let mut items = Vec::new();
        while *i < lines.len() && lines[*i].0 == indent && lines[*i].1.starts_with('-') {
            let rest = lines[*i].1[1..].trim_start().to_string();
            if split_key(&rest).is_some() {
                lines[*i] = (indent + 2, rest);
                items.push(parse_block(lines, i, indent + 2));
            } else {
                items.push(Yaml::Scalar(unquote(&rest)));
                *i += 1;
            }
        }
        return Yaml::List(items);
    }
    let mut map = Vec::new();
    while *i < lines.len() && lines[*i].0 == indent && !lines[*i].1.starts_with("- ") {
        let (k, v) = split_key(&lines[*i].1)
            .unwrap_or_else(|| panic!("unexpected YAML line {:?}", lines[*i]));
        *i += 1;
        if v.is_empty() {
            let child_indent = lines.get(*i).map_or(indent, |l| l.0);
            if child_indent > indent
                || lines
                    .get(*i)
                    .is_some_and(|l| l.0 == indent && l.1.starts_with("- "))
            {
                map.push((k, parse_block(lines, i, child_indent)));
            } else {
                map.push((k, Yaml::Scalar(String::new())));
            }
        } else {
            map.push((k, Yaml::Scalar(unquote(&v))));
        }
    }
    Yaml::Map(map)
}

/// Converts a serde_json value of one of our records to the Yaml shape llvm-readobj prints
/// (nulls dropped, empty lists dropped, bools and numbers as text).
pub fn json_to_yaml(v: &serde_json::Value) -> Option<Yaml> {
    use serde_json::Value;
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(Yaml::Scalar(b.to_string())),
        Value::Number(n) => Some(Yaml::Scalar(n.to_string())),
        Value::String(s) => Some(Yaml::Scalar(s.clone())),
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => Some(Yaml::List(a.iter().filter_map(json_to_yaml).collect())),
        Value::Object(o) => {
            let mut m: Vec<(String, Yaml)> = o
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), json_to_yaml(v)?)))
                .collect();
            m.sort_by(|a, b| a.0.cmp(&b.0));
            Some(Yaml::Map(m))
        }
    }
}

/// Sorts map keys recursively (llvm-readobj prints them sorted already; this makes it explicit).
pub fn sorted(y: &Yaml) -> Yaml {
    match y {
        Yaml::Map(m) => {
            let mut m: Vec<(String, Yaml)> =
                m.iter().map(|(k, v)| (k.clone(), sorted(v))).collect();
            m.sort_by(|a, b| a.0.cmp(&b.0));
            Yaml::Map(m)
        }
        Yaml::List(l) => Yaml::List(l.iter().map(sorted).collect()),
        s => s.clone(),
    }
}

/// One function of `cuobjdump --dump-resource-usage`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CuobjdumpFunction {
    pub name: String,
    pub reg: u64,
    pub stack: u64,
    pub shared: u64,
    pub local: u64,
    pub constant0: u64,
}

/// One "Resource usage" block (one cubin) of cuobjdump's output, with the `arch = sm_XX` line
/// that precedes it in a fatbin listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CuobjdumpModule {
    pub arch: Option<String>,
    pub global: u64,
    pub common_constants: Vec<(u32, u64)>,
    pub functions: Vec<CuobjdumpFunction>,
}

fn fields(line: &str) -> Vec<(String, u64)> {
    line.split_whitespace()
        .filter_map(|f| {
            let (k, v) = f.split_once(':')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

pub fn parse_cuobjdump(text: &str) -> Vec<CuobjdumpModule> {
    let mut modules: Vec<CuobjdumpModule> = Vec::new();
    let mut arch = None;
    let mut lines = text.lines().peekable();
    let mut in_common = false;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("arch = ") {
            arch = Some(a.to_string());
        } else if t == "Resource usage:" {
            modules.push(CuobjdumpModule {
                arch: arch.take(),
                ..Default::default()
            });
        } else if t == "Common:" {
            in_common = true;
        } else if let Some(name) = t
            .strip_prefix("Function ")
            .and_then(|n| n.strip_suffix(':'))
        {
            in_common = false;
            let values = fields(lines.next().unwrap_or(""));
            let get = |k: &str| values.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
            let f = CuobjdumpFunction {
                name: name.to_string(),
                reg: get("REG"),
                stack: get("STACK"),
                shared: get("SHARED"),
                local: get("LOCAL"),
                constant0: get("CONSTANT[0]"),
            };
            modules
                .last_mut()
                .expect("Function before Resource usage")
                .functions
                .push(f);
        } else if in_common {
            let m = modules.last_mut().expect("Common before Resource usage");
            for (k, v) in fields(t) {
                if k == "GLOBAL" {
                    m.global = v;
                } else if let Some(bank) = k
                    .strip_prefix("CONSTANT[")
                    .and_then(|b| b.strip_suffix(']'))
                {
                    m.common_constants.push((bank.parse().unwrap(), v));
                }
            }
        }
    }
    modules
}
