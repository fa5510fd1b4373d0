//! An action's blobs: the input root as REAPI `Directory` messages, the `Command` and the
//! `Action`, each with its SHA-256 digest. Pure functions over bytes already read.

use std::collections::BTreeMap;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message;
use sha2::{Digest as _, Sha256};

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
    let hash = Sha256::digest(data);
    re::Digest {
        hash: hash.iter().map(|b| format!("{b:02x}")).collect(),
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
}

/// The input root of `files`: its digest and every blob it needs (the files' bytes and each
/// `Directory`), duplicates removed. Paths are relative, `/`-separated, without `.`/`..` or
/// empty parts; a path that is both a file and a directory is refused.
pub fn input_root(files: Vec<InputFile>) -> Result<(re::Digest, Vec<Blob>), BadInputPath> {
    let mut root = Node::default();
    let mut blobs: BTreeMap<String, Blob> = BTreeMap::new();
    for f in files {
        let bad = |why| BadInputPath {
            path: f.path.clone(),
            why,
        };
        let parts: Vec<&str> = f.path.split('/').collect();
        if f.path.starts_with('/') {
            return Err(bad("absolute"));
        }
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(bad("has an empty, `.` or `..` component"));
        }
        let (name, dirs) = parts.split_last().ok_or_else(|| bad("empty"))?;
        let mut node = &mut root;
        for d in dirs {
            if node.files.contains_key(*d) {
                return Err(bad("a parent is also a file"));
            }
            node = node.dirs.entry((*d).to_string()).or_default();
        }
        if node.dirs.contains_key(*name) {
            return Err(bad("is also a directory"));
        }
        let blob = Blob::new(f.data);
        node.files
            .insert((*name).to_string(), (blob.digest.clone(), f.executable));
        blobs.insert(blob.digest.hash.clone(), blob);
    }
    let digest = directory(&root, &mut blobs);
    Ok((digest, blobs.into_values().collect()))
}

/// `node` as a `Directory` message (children first), its digest.
fn directory(node: &Node, blobs: &mut BTreeMap<String, Blob>) -> re::Digest {
    // REAPI wants both lists sorted by name (BTreeMap order is byte order).
    let directories = node
        .dirs
        .iter()
        .map(|(name, child)| re::DirectoryNode {
            name: name.clone(),
            digest: Some(directory(child, blobs)),
        })
        .collect();
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
        let (da, blobs) = input_root(a).unwrap();
        let (db, _) = input_root(b).unwrap();
        assert_eq!(da, db);
        // 3 files + root, k, k/sub, _kbuild, _kbuild/include.
        assert_eq!(blobs.len(), 8);
        let root = blobs.iter().find(|x| x.digest == da).unwrap();
        let dir = re::Directory::decode(root.data.as_slice()).unwrap();
        let names: Vec<&str> = dir.directories.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["_kbuild", "k"]);
    }

    #[test]
    fn bad_paths_are_refused_by_name() {
        for (p, why) in [
            ("/etc/passwd", "absolute"),
            ("a/../b", "has an empty, `.` or `..` component"),
            ("a//b", "has an empty, `.` or `..` component"),
        ] {
            let e = input_root(vec![file(p, b"x")]).unwrap_err();
            assert_eq!((e.path.as_str(), e.why), (p, why));
        }
        let e = input_root(vec![file("a", b"x"), file("a/b", b"y")]).unwrap_err();
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
