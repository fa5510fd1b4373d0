//! The package name init writes: the library's own, read from the files that name it
//! (`Cargo.toml` `[package]`, `pyproject.toml` `[project]`, `CMakeLists.txt` `project(NAME …)`,
//! each read through a cap), else the directory's with a note to edit it.

use std::path::Path;

/// The most of a project file init reads for its name: far above a real one.
const MAX_PROJECT_FILE: u64 = 1 << 20;

/// Where the name (and version) came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PackageName {
    pub(super) name: String,
    /// The library's version when its file gives a valid one, else `0.1.0`.
    pub(super) version: String,
    /// `Cargo.toml`, `pyproject.toml`, `CMakeLists.txt` or `the directory`.
    pub(super) from: String,
}

/// The library's name under the package-name rule, from the first of its project files in
/// `dir` that names one; the directory's otherwise.
pub(super) fn package_name(dir: &Path) -> PackageName {
    for (file, read) in [
        (
            "Cargo.toml",
            from_toml as fn(&str, &str) -> Option<(String, Option<String>)>,
        ),
        ("pyproject.toml", from_toml),
        ("CMakeLists.txt", from_cmake),
    ] {
        let Ok(text) = kbuild_base::read::read_capped_string(
            &dir.join(file),
            MAX_PROJECT_FILE,
            "project file",
        ) else {
            continue;
        };
        if let Some((name, version)) = read(file, &text) {
            if let Some(name) = sanitize(&name) {
                let version = version
                    .filter(|v| kbuild_base::ident::check_version("version", v).is_ok())
                    .unwrap_or_else(|| "0.1.0".into());
                return PackageName {
                    name,
                    version,
                    from: file.into(),
                };
            }
        }
    }
    PackageName {
        name: super::package_name(dir),
        version: "0.1.0".into(),
        from: "the directory".into(),
    }
}

/// `[package]` (Cargo) or `[project]` (PEP 621) `name` and `version`.
fn from_toml(file: &str, text: &str) -> Option<(String, Option<String>)> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let table = if file == "Cargo.toml" {
        "package"
    } else {
        "project"
    };
    let t = doc.get(table)?.as_table()?;
    let name = t.get("name")?.as_str()?.to_string();
    let version = t
        .get("version")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Some((name, version))
}

/// The first `project(NAME [VERSION x.y.z] …)` call, any case, outside comments.
fn from_cmake(_: &str, text: &str) -> Option<(String, Option<String>)> {
    let code: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let lower = code.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("project") {
        let start = from + at;
        from = start + "project".len();
        let before_ok = lower[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let rest = code[from..].trim_start();
        let (true, Some(args)) = (before_ok, rest.strip_prefix('(')) else {
            continue;
        };
        let args = &args[..args.find(')')?];
        let mut words = args.split_whitespace().map(|w| w.trim_matches('"'));
        let name = words.next()?.to_string();
        let mut version = None;
        while let Some(w) = words.next() {
            if w.eq_ignore_ascii_case("VERSION") {
                version = words.next().map(str::to_string);
            }
        }
        return Some((name, version));
    }
    None
}

/// `name` under the package-name rule (lowercase letters, digits, `._-`, starting with a
/// letter or digit, at most 128 characters); `None` if nothing valid is left.
pub(super) fn sanitize(name: &str) -> Option<String> {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c) {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .trim_end_matches('-')
        .chars()
        .take(kbuild_base::ident::MAX_LEN)
        .collect();
    kbuild_base::ident::check_package_name("name", &out)
        .is_ok()
        .then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_names_the_package_else_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("lib-0.11.1");
        std::fs::create_dir(&dir).unwrap();
        let got = package_name(&dir);
        assert_eq!(
            (got.name.as_str(), got.from.as_str()),
            ("lib-0.11.1", "the directory")
        );
        assert_eq!(got.version, "0.1.0");

        std::fs::write(
            dir.join("CMakeLists.txt"),
            "cmake_minimum_required(VERSION 3.18)\n# project(commented)\nPROJECT( FastKernels VERSION 0.11.1 LANGUAGES CXX CUDA)\n",
        )
        .unwrap();
        let got = package_name(&dir);
        assert_eq!(
            (got.name.as_str(), got.version.as_str(), got.from.as_str()),
            ("fastkernels", "0.11.1", "CMakeLists.txt")
        );
        std::fs::write(
            dir.join("pyproject.toml"),
            "[project]\nname = \"Fast_Kernels\"\nversion = \"0.11\"\n",
        )
        .unwrap();
        let got = package_name(&dir);
        // `0.11` is not a semantic version: the default stays.
        assert_eq!(
            (got.name.as_str(), got.version.as_str(), got.from.as_str()),
            ("fast_kernels", "0.1.0", "pyproject.toml")
        );
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"fast-kernels-sys\"\nversion = \"0.11.1\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&dir).name, "fast-kernels-sys");
        // A file that names nothing usable is passed over; a huge one is not read.
        std::fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        assert_eq!(package_name(&dir).from, "pyproject.toml");
        std::fs::write(
            dir.join("pyproject.toml"),
            "x".repeat((MAX_PROJECT_FILE + 1) as usize),
        )
        .unwrap();
        assert_eq!(package_name(&dir).from, "CMakeLists.txt");
        std::fs::write(dir.join("CMakeLists.txt"), "project(\"!!!\")\n").unwrap();
        assert_eq!(package_name(&dir).from, "the directory");
    }
}
