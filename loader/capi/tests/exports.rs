//! The header and the library agree: every function `kbuild_loader.h` declares is a dynamic
//! symbol of `libkbuild_capi.so`, and the library exports no `kbuild_` function the header
//! leaves out. (This test also makes `cargo test --workspace` build the shared library, so the
//! end-to-end tests that link C programs against it find it built with the workspace's features.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

/// The functions the header declares: the name before the first `(` of a line that starts a
/// declaration (not indented, not a comment or a directive).
fn declared(header: &str) -> BTreeSet<String> {
    header
        .lines()
        .filter(|l| !l.starts_with([' ', '#', '/', '*', '}', 't']))
        .filter_map(|l| {
            let before = &l[..l.find('(')?];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let name = &before[start..];
            name.starts_with("kbuild_").then(|| name.to_owned())
        })
        .collect()
}

/// The shared library cargo built for this test run (next to the test executable's `deps/`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("target/<profile>/deps");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libkbuild_capi.so");
        if p.is_file() {
            return p;
        }
    }
    panic!("no libkbuild_capi.so next to {}", deps.display());
}

fn exported(lib: &Path) -> BTreeSet<String> {
    let bytes = std::fs::read(lib).expect("read the library");
    let file = object::File::parse(&*bytes).expect("an ELF shared library");
    file.dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_owned))
        .filter(|n| n.starts_with("kbuild_"))
        .collect()
}

#[test]
fn the_header_declares_exactly_what_the_library_exports() {
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/kbuild_loader.h");
    let header = std::fs::read_to_string(&header).expect("read kbuild_loader.h");
    let declared = declared(&header);
    assert!(declared.len() >= 14, "{declared:?}");
    let exported = exported(&library());
    let missing: Vec<_> = declared.difference(&exported).collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && undeclared.is_empty(),
        "declared but not exported: {missing:?}; exported but not declared: {undeclared:?}"
    );
}
