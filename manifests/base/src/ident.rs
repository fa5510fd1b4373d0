//! Strings from outside (a registry, a bundle, a cache file, a manifest) that kbuild turns
//! into file names and paths: the rules they must pass, and [`confined`], the one way such a
//! string becomes a path under a root.
//!
//! A hostile `package.version` like `9.9.9/../../x` must never reach `Path::join`: every
//! parse of a manifest checks its name and version here, and every path built from outside
//! data goes through [`confined`].

use std::path::{Component, Path, PathBuf};

/// Why an outside string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} `{value}` {why}")]
pub struct IdentError {
    /// What the string is: `package.name`, `package.version`, `objects[3].path`, ….
    pub field: String,
    /// The string, with control characters escaped.
    pub value: String,
    pub why: &'static str,
}

fn refuse(field: &str, value: &str, why: &'static str) -> IdentError {
    IdentError {
        field: field.to_string(),
        value: value.escape_debug().take(200).collect(),
        why,
    }
}

/// Longest name, version or path component accepted.
pub const MAX_LEN: usize = 128;

/// The package name rule (publish, OCI repository component, file names): lowercase ASCII
/// letters, digits and `._-`, starting with a letter or digit, at most 128 bytes.
pub fn check_package_name(field: &str, name: &str) -> Result<(), IdentError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_LEN
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            field,
            name,
            "is not a package name: lowercase letters, digits and `._-`, starting with a letter or digit, at most 128 characters",
        ))
    }
}

/// A semantic version as SemVer 2.0.0 defines it (`MAJOR.MINOR.PATCH[-PRE][+BUILD]`, no
/// leading zeros), at most 128 bytes. Such a string is always a safe file name component.
pub fn check_version(field: &str, version: &str) -> Result<(), IdentError> {
    if version.len() <= MAX_LEN && is_semver(version) {
        Ok(())
    } else {
        Err(refuse(
            field,
            version,
            "is not a semantic version (MAJOR.MINOR.PATCH, optional -PRERELEASE and +BUILD of [0-9A-Za-z-.])",
        ))
    }
}

fn is_semver(s: &str) -> bool {
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |p: &str| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (p == "0" || !p.starts_with('0'))
    };
    let ident =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|p| {
            p.split('.')
                .all(|i| ident(i) && (!i.bytes().all(|b| b.is_ascii_digit()) || numeric(i)))
        })
        && build.is_none_or(|b| b.split('.').all(ident))
}

/// One file name component (a target name in `NAME-VERSION.T1+T2.kbundle`): ASCII letters,
/// digits and `._:+-`, not `.` or `..`, at most 128 bytes.
pub fn check_component(field: &str, s: &str) -> Result<(), IdentError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_LEN
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:+-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            field,
            s,
            "is not a plain name (ASCII letters, digits and `._:+-`, at most 128 characters)",
        ))
    }
}

/// A relative path that stays under the directory it is joined to: not empty, not absolute,
/// no `..`, no NUL or backslash, at most 1024 bytes. `.` components are allowed.
pub fn check_relative_path(field: &str, rel: &str) -> Result<(), IdentError> {
    let p = Path::new(rel);
    let ok = !rel.is_empty()
        && rel.len() <= 1024
        && !rel.contains(['\0', '\\'])
        && p.components().any(|c| matches!(c, Component::Normal(_)))
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(())
    } else {
        Err(refuse(
            field,
            rel,
            "must be a relative path that stays inside its directory (no `..`, no absolute path)",
        ))
    }
}

/// `root` joined with the outside string `rel`, once `rel` passes [`check_relative_path`].
/// The only way kbuild turns outside data into a path.
pub fn confined(root: &Path, field: &str, rel: &str) -> Result<PathBuf, IdentError> {
    check_relative_path(field, rel)?;
    Ok(root.join(rel))
}

/// The characters a shell acts on. nvcc runs its sub-steps through `sh`, so a compiler
/// argument holding one of these (`-DV=$(sh x.sh)`, a file named `k$(…).cu`) would run
/// commands; kbuild passes only plain text. `=,-+./:@%` and spaces stay allowed, and so does
/// `"`: nvcc puts each argument in double quotes and escapes a `"` in it (`"Q=\"a,b\""`),
/// which string-literal defines of real libraries need (`-DGGML_CUDA_FA_QUANTS="q4_0-q4_0"`).
/// What double quotes leave active (`$`, a backtick, `\`) is refused with the rest.
pub const SHELL_CHARS: &str = "$`;|&<>(){}*?[]!~#'\\";

/// A compiler argument (a path, include dir, define or flag) that a shell would act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} `{value}` holds {found}, which a shell acts on: kbuild passes compiler arguments (sources, include dirs, defines, flags) only as plain text, without any of {SHELL_CHARS} or control characters")]
pub struct ShellCharError {
    /// Where the value came from: `kernels.gdn.defines.VERSION`, `compile_commands.json -D`, ….
    pub field: String,
    /// The value, with control characters escaped.
    pub value: String,
    /// The first refused character, as shown: `` `$` ``, `a backtick`, `the control character U+000A`.
    pub found: String,
}

/// Refuse `value` when it holds a shell metacharacter ([`SHELL_CHARS`]) or a control
/// character (newline, CR, tab, NUL, …). The one check for everything that reaches a
/// compiler's command line, used by `Kbuild.toml`'s parser and by `kbuild init`.
pub fn check_compiler_arg(field: &str, value: &str) -> Result<(), ShellCharError> {
    match value
        .chars()
        .find(|c| c.is_control() || SHELL_CHARS.contains(*c))
    {
        None => Ok(()),
        Some(c) => Err(ShellCharError {
            field: field.to_string(),
            value: value.escape_debug().take(200).collect(),
            found: if c.is_control() {
                format!("the control character U+{:04X}", u32::from(c))
            } else if c == '`' {
                "a backtick".into()
            } else {
                format!("`{c}`")
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for ok in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-alpha.1",
            "1.0.0-0.3.7",
            "1.0.0-x-y.z",
            "1.0.0+build.5",
            "1.0.0-rc.1+sha.abc-d",
        ] {
            assert!(check_version("v", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3+",
            "1.2.3-a..b",
            "9.9.9/../../x",
            "1.0.0-/../../x",
            "1.0.0+../x",
            "1.2.3 ",
            "v1.2.3",
        ] {
            let e = check_version("package.version", bad).unwrap_err();
            assert_eq!(e.field, "package.version");
        }
        assert!(check_version("v", &format!("1.2.3-{}", "a".repeat(200))).is_err());
    }

    #[test]
    fn names_components_paths() {
        assert!(check_package_name("n", "a.b-c_1").is_ok());
        for bad in ["", "-x", "Pkg", "my pkg/../../x", "a/b", ".."] {
            assert!(check_package_name("n", bad).is_err(), "{bad}");
        }
        assert!(check_component("t", "gfx90a:xnack+").is_ok());
        for bad in ["", ".", "..", "a/b", "sm 89", "x\0"] {
            assert!(check_component("t", bad).is_err(), "{bad:?}");
        }
        assert!(check_relative_path("p", "sm_89/k.cubin").is_ok());
        assert!(check_relative_path("p", "./k.cubin").is_ok());
        for bad in [
            "",
            ".",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a\\..\\x",
            "a\0b",
        ] {
            assert!(check_relative_path("p", bad).is_err(), "{bad:?}");
        }
        let root = Path::new("/r");
        assert_eq!(confined(root, "p", "a/b").unwrap(), PathBuf::from("/r/a/b"));
        let e = confined(root, "objects[0].path", "../../etc/passwd").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("objects[0].path `../../etc/passwd`"));
    }

    #[test]
    fn compiler_args_refuse_what_a_shell_acts_on() {
        for ok in [
            "-DVERSION=1.2.3",
            "-maxrregcount=32",
            "--fmad=false",
            "-Xcompiler=-Wall,-Wextra",
            "inc dir/sub",
            "a+b@c%d:e",
            "ops/rms_norm.cu",
            "-1e-06",
            "-DQ=\"q4_0-q4_0,f16-f16\"",
        ] {
            assert_eq!(check_compiler_arg("f", ok), Ok(()), "{ok}");
        }
        for bad in [
            "$(sh tools/x.sh)",
            "k$(sh tools$(printf \\057)x.sh).cu",
            "`id`",
            "a;b",
            "a|b",
            "a&b",
            "<x",
            ">x",
            "{a,b}",
            "*.cu",
            "?",
            "[a]",
            "!x",
            "~/inc",
            "#x",
            "'x'",
            "a\\b",
            "inc\nlauncher = \"./tools/cc-wrap.sh\"",
            "a\rb",
            "a\tb",
            "a\0b",
        ] {
            let e = check_compiler_arg("kernels.k.defines.V", bad).unwrap_err();
            assert!(!e.to_string().contains('\n'), "{e}");
            assert!(e.to_string().starts_with("kernels.k.defines.V `"), "{e}");
        }
        let e = check_compiler_arg("f", "a\nb").unwrap_err();
        assert_eq!(e.found, "the control character U+000A");
        assert_eq!(e.value, "a\\nb");
    }
}
