//! An action's blobs: the input root as REAPI `Directory` messages, the `Command` and the
//! `Action`, each with its SHA-256 digest. Pure functions over bytes already read, except
//! [`dir_tree`], which hashes a local directory (a toolchain a hermetic action carries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message;

/// A blob and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub digest: re::Digest,
    pub data: Vec<u8>,
}

impl Blob {
    pub fn new(data: Vec<u8>) -> Blob {
        Blob {
            digest: digest_of(&data),
            data,
        }
    }
}

/// The SHA-256 digest REAPI names a blob by.
pub fn digest_of(data: &[u8]) -> re::Digest {
    re::Digest {
        hash: kbuild_base::digest::sha256_hex(data),
        size_bytes: data.len() as i64,
    }
}

/// Why a path cannot be in an input root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input `{path}`: {why}")]
pub struct BadInputPath {
    pub path: String,
    pub why: &'static str,
}

/// One file of the input root: its relative path, bytes, executable bit.
#[derive(Debug, Clone)]
pub struct InputFile {
    pub path: String,
    pub data: Vec<u8>,
    pub executable: bool,
}

#[derive(Default)]
struct Node {
    files: BTreeMap<String, (re::Digest, bool)>,
    dirs: BTreeMap<String, Node>,
    /// Subdirectories whose `Directory` blobs exist already (a mounted [`DirTree`]).
    mounted: BTreeMap<String, re::Digest>,
}

impl Node {
    /// The node of `path`'s parent directory and `path`'s last part, made as needed.
    fn parent_of<'a>(&mut self, path: &'a str) -> Result<(&mut Node, &'a str), BadInputPath> {
        let bad = |why| BadInputPath {
            path: path.to_string(),
            why,
        };
        let parts: Vec<&str> = path.split('/').collect();
        if path.starts_with('/') {
            return Err(bad("absolute"));
        }
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(bad("has an empty, `.` or `..` component"));
        }
        let (name, dirs) = parts.split_last().ok_or_else(|| bad("empty"))?;
        let mut node = self;
        for d in dirs {
            if node.files.contains_key(*d) {
                return Err(bad("a parent is also a file"));
            }
            if node.mounted.contains_key(*d) {
                return Err(bad("a parent is a mounted directory"));
            }
            node = node.dirs.entry((*d).to_string()).or_default();
        }
        if node.dirs.contains_key(*name) || node.mounted.contains_key(*name) {
            return Err(bad("is also a directory"));
        }
        if node.files.contains_key(*name) {
            return Err(bad("is also a file"));
        }
        Ok((node, name))
    }
}

/// The input root of `files` and of directories whose trees exist already (`mounts`: a path
/// and the digest of its root `Directory`): its digest and every blob it needs besides the
/// mounted trees' (the files' bytes and each `Directory`), duplicates removed. Paths are
/// relative, `/`-separated, without `.`/`..` or empty parts; a path that is both a file and a
/// directory is refused.
pub fn input_root(
    files: Vec<InputFile>,
    mounts: &[(String, re::Digest)],
) -> Result<(re::Digest, Vec<Blob>), BadInputPath> {
    let mut root = Node::default();
    let mut blobs: BTreeMap<String, Blob> = BTreeMap::new();
    for (path, digest) in mounts {
        let (node, name) = root.parent_of(path)?;
        node.mounted.insert(name.to_string(), digest.clone());
    }
    for f in files {
        let (node, name) = root.parent_of(&f.path)?;
        let blob = Blob::new(f.data);
        node.files
            .insert(name.to_string(), (blob.digest.clone(), f.executable));
        blobs.insert(blob.digest.hash.clone(), blob);
    }
    let digest = directory(&root, &mut blobs);
    Ok((digest, blobs.into_values().collect()))
}

/// `node` as a `Directory` message (children first), its digest.
fn directory(node: &Node, blobs: &mut BTreeMap<String, Blob>) -> re::Digest {
    // REAPI wants both lists sorted by name (byte order).
    let mut directories: Vec<re::DirectoryNode> = node
        .dirs
        .iter()
        .map(|(name, child)| re::DirectoryNode {
            name: name.clone(),
            digest: Some(directory(child, blobs)),
        })
        .chain(node.mounted.iter().map(|(name, d)| re::DirectoryNode {
            name: name.clone(),
            digest: Some(d.clone()),
        }))
        .collect();
    directories.sort_by(|a, b| a.name.cmp(&b.name));
    let files = node
        .files
        .iter()
        .map(|(name, (digest, executable))| re::FileNode {
            name: name.clone(),
            digest: Some(digest.clone()),
            is_executable: *executable,
            node_properties: None,
        })
        .collect();
    let dir = re::Directory {
        files,
        directories,
        symlinks: Vec::new(),
        node_properties: None,
    };
    let blob = Blob::new(dir.encode_to_vec());
    let digest = blob.digest.clone();
    blobs.insert(digest.hash.clone(), blob);
    digest
}

/// A local directory as a REAPI tree: its root `Directory` digest, every `Directory` blob,
/// and its files by digest and local path (read again only to upload those a service lacks).
#[derive(Debug, Clone)]
pub struct DirTree {
    pub digest: re::Digest,
    pub dirs: Vec<Blob>,
    pub files: Vec<(re::Digest, PathBuf)>,
    /// The files' bytes in all (each counted once per path).
    pub bytes: u64,
}

/// Why a local directory cannot become a tree.
#[derive(Debug, thiserror::Error)]
pub enum DirTreeError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{root}: more than {limit} {what}")]
    TooBig {
        root: String,
        limit: u64,
        what: &'static str,
    },
}

/// Files and bytes a directory tree may hold, and how deep it may go: a toolchain is a few
/// thousand files and under a gigabyte; a path naming `/` by mistake is stopped, not walked.
const TREE_MAX_FILES: u64 = 100_000;
const TREE_MAX_BYTES: u64 = 8 << 30;
const TREE_MAX_DEPTH: usize = 64;

/// `root` as a tree. Symbolic links are followed (a worker gets their targets' bytes; a link
/// leading nowhere is left out); sockets, FIFOs and devices are left out. A file is
/// executable when any execute bit is set.
pub fn dir_tree(root: &Path) -> Result<DirTree, DirTreeError> {
    let mut w = Walker {
        root,
        files: Vec::new(),
        bytes: 0,
    };
    let node = w.walk(root, 0)?;
    let mut blobs = BTreeMap::new();
    let digest = directory(&node, &mut blobs);
    Ok(DirTree {
        digest,
        dirs: blobs.into_values().collect(),
        files: w.files,
        bytes: w.bytes,
    })
}

struct Walker<'a> {
    root: &'a Path,
    files: Vec<(re::Digest, PathBuf)>,
    bytes: u64,
}

impl Walker<'_> {
    fn too_big(&self, limit: u64, what: &'static str) -> DirTreeError {
        DirTreeError::TooBig {
            root: self.root.display().to_string(),
            limit,
            what,
        }
    }

    /// `dir`'s node, its subdirectories first.
    fn walk(&mut self, dir: &Path, depth: usize) -> Result<Node, DirTreeError> {
        use std::os::unix::fs::PermissionsExt;
        if depth > TREE_MAX_DEPTH {
            return Err(self.too_big(
                TREE_MAX_DEPTH as u64,
                "directory levels (a symbolic link loop?)",
            ));
        }
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .and_then(|rd| rd.collect::<Result<_, _>>())
            .map_err(|e| io_error(dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        let mut node = Node::default();
        for e in entries {
            let path = e.path();
            let Some(name) = e.file_name().to_str().map(String::from) else {
                continue; // not UTF-8: REAPI names are strings
            };
            let Ok(meta) = std::fs::metadata(&path) else {
                continue; // a dangling symbolic link
            };
            if meta.is_dir() {
                let child = self.walk(&path, depth + 1)?;
                node.dirs.insert(name, child);
            } else if meta.is_file() {
                // A file that changes after this is caught at upload (re-read, re-hashed).
                let digest = re::Digest {
                    hash: kbuild_base::digest::sha256_file(&path)
                        .map_err(|e| io_error(&path, e))?,
                    size_bytes: i64::try_from(meta.len()).unwrap_or(i64::MAX),
                };
                self.bytes += digest.size_bytes as u64;
                if self.bytes > TREE_MAX_BYTES {
                    return Err(self.too_big(TREE_MAX_BYTES, "bytes"));
                }
                if self.files.len() as u64 >= TREE_MAX_FILES {
                    return Err(self.too_big(TREE_MAX_FILES, "files"));
                }
                let executable = meta.permissions().mode() & 0o111 != 0;
                self.files.push((digest.clone(), path));
                node.files.insert(name, (digest, executable));
            }
        }
        Ok(node)
    }
}

fn io_error(path: &Path, source: std::io::Error) -> DirTreeError {
    DirTreeError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The `Command` blob: arguments, environment and platform sorted by name, the outputs as
/// REAPI 2.1's `output_paths` (or 2.0's `output_files` for an older server). The platform is
/// also set on the Command, where servers before 2.2 read it.
#[allow(deprecated)]
pub fn command(
    argv: &[String],
    env: &[(String, String)],
    working_directory: &str,
    outputs: &[String],
    platform: &re::Platform,
    output_paths: bool,
) -> Blob {
    let mut env: Vec<(String, String)> = env.to_vec();
    env.sort();
    let mut outputs = outputs.to_vec();
    outputs.sort();
    let (output_paths, output_files) = if output_paths {
        (outputs, Vec::new())
    } else {
        (Vec::new(), outputs)
    };
    let cmd = re::Command {
        arguments: argv.to_vec(),
        environment_variables: env
            .into_iter()
            .map(|(name, value)| re::command::EnvironmentVariable { name, value })
            .collect(),
        output_files,
        output_directories: Vec::new(),
        output_paths,
        platform: Some(platform.clone()),
        working_directory: working_directory.to_string(),
        output_node_properties: Vec::new(),
        output_directory_format: 0,
    };
    Blob::new(cmd.encode_to_vec())
}

/// The platform properties, sorted by name then value as REAPI requires.
pub fn platform(properties: &[(String, String)]) -> re::Platform {
    let mut p: Vec<(String, String)> = properties.to_vec();
    p.sort();
    p.dedup();
    re::Platform {
        properties: p
            .into_iter()
            .map(|(name, value)| re::platform::Property { name, value })
            .collect(),
    }
}

/// The `Action` blob.
pub fn action(
    command: &re::Digest,
    input_root: &re::Digest,
    timeout: Option<std::time::Duration>,
    platform: &re::Platform,
) -> Blob {
    let a = re::Action {
        command_digest: Some(command.clone()),
        input_root_digest: Some(input_root.clone()),
        timeout: timeout.map(|t| bazel_remote_apis::google::protobuf::Duration {
            seconds: t.as_secs() as i64,
            nanos: t.subsec_nanos() as i32,
        }),
        do_not_cache: false,
        salt: Vec::new(),
        platform: Some(platform.clone()),
    };
    Blob::new(a.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, data: &[u8]) -> InputFile {
        InputFile {
            path: path.into(),
            data: data.to_vec(),
            executable: false,
        }
    }

    #[test]
    fn the_empty_blob_has_the_well_known_digest() {
        assert_eq!(
            digest_of(b"").hash,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_tree_is_the_same_whatever_the_order_of_its_files() {
        let a = vec![
            file("k/a.cu", b"a"),
            file("k/sub/b.h", b"b"),
            file("_kbuild/include/kcompat.h", b"c"),
        ];
        let mut b = a.clone();
        b.reverse();
        let (da, blobs) = input_root(a, &[]).unwrap();
        let (db, _) = input_root(b, &[]).unwrap();
        assert_eq!(da, db);
        // 3 files + root, k, k/sub, _kbuild, _kbuild/include.
        assert_eq!(blobs.len(), 8);
        let root = blobs.iter().find(|x| x.digest == da).unwrap();
        let dir = re::Directory::decode(root.data.as_slice()).unwrap();
        let names: Vec<&str> = dir.directories.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["_kbuild", "k"]);
    }

    #[test]
    fn a_mounted_directory_equals_its_files_given_one_by_one() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let tc = d.path().join("tc");
        std::fs::create_dir_all(tc.join("bin")).unwrap();
        std::fs::create_dir_all(tc.join("include/sub")).unwrap();
        std::fs::write(tc.join("bin/cc"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(tc.join("bin/cc"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(tc.join("include/sub/a.h"), b"int a;\n").unwrap();
        // A link inside the tree is followed; one leading nowhere is left out.
        std::os::unix::fs::symlink("cc", tc.join("bin/c++")).unwrap();
        std::os::unix::fs::symlink("/no/such/file", tc.join("bin/dangling")).unwrap();
        let t = dir_tree(&tc).unwrap();
        assert_eq!(t.files.len(), 3);
        assert_eq!(t.bytes, 10 + 10 + 7);
        let project = file("k/a.cu", b"a");
        let (mounted, blobs) = input_root(
            vec![project.clone()],
            &[("_kbuild/toolchain/0".to_string(), t.digest.clone())],
        )
        .unwrap();
        // The mounted tree's blobs are not the action's own.
        assert!(blobs.iter().all(|b| !t.dirs.contains(b)));
        let given = |p: &str, data: &[u8], executable| InputFile {
            path: format!("_kbuild/toolchain/0/{p}"),
            data: data.to_vec(),
            executable,
        };
        let (direct, _) = input_root(
            vec![
                project,
                given("bin/cc", b"#!/bin/sh\n", true),
                given("bin/c++", b"#!/bin/sh\n", true),
                given("include/sub/a.h", b"int a;\n", false),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(mounted, direct);
        // A mount over a file or another mount is refused.
        let e = input_root(
            vec![file("_kbuild/toolchain/0", b"x")],
            &[("_kbuild/toolchain/0".to_string(), t.digest.clone())],
        )
        .unwrap_err();
        assert_eq!(e.why, "is also a directory");
        let e = input_root(
            vec![file("_kbuild/toolchain/0/x", b"x")],
            &[("_kbuild/toolchain/0".to_string(), t.digest.clone())],
        )
        .unwrap_err();
        assert_eq!(e.why, "a parent is a mounted directory");
    }

    #[test]
    fn bad_paths_are_refused_by_name() {
        for (p, why) in [
            ("/etc/passwd", "absolute"),
            ("a/../b", "has an empty, `.` or `..` component"),
            ("a//b", "has an empty, `.` or `..` component"),
        ] {
            let e = input_root(vec![file(p, b"x")], &[]).unwrap_err();
            assert_eq!((e.path.as_str(), e.why), (p, why));
        }
        let e = input_root(vec![file("a", b"x"), file("a/b", b"y")], &[]).unwrap_err();
        assert_eq!(e.why, "a parent is also a file");
    }

    #[test]
    #[allow(deprecated)]
    fn commands_sort_what_reapi_wants_sorted() {
        let p = platform(&[("b".into(), "2".into()), ("a".into(), "1".into())]);
        assert_eq!(p.properties[0].name, "a");
        let c = command(
            &["cc".into()],
            &[("Z".into(), "1".into()), ("A".into(), "2".into())],
            "",
            &["out/o".into(), "out/d".into()],
            &p,
            true,
        );
        let c = re::Command::decode(c.data.as_slice()).unwrap();
        assert_eq!(c.environment_variables[0].name, "A");
        assert_eq!(c.output_paths, ["out/d", "out/o"]);
        assert!(c.output_files.is_empty());
    }
}
