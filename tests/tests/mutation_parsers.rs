//! Mutation test of the four parsers of outside data besides the code-object readers (those
//! are in `manifests/tests/mutation.rs`): the bundle reader (`Bundle::from_bytes`), the
//! manifest parser (`Manifest::from_json`), the Kbuild.toml parser (`kbuild_build::config::parse`)
//! and OCI manifest parsing (`parse_kbuild_artifact`, and the signature file attached to an
//! artifact). Seeds are real: a small project built and packaged with the real compilers, its
//! manifest.json, its OCI artifact manifest, the repository's own Kbuild.toml files. Every
//! mutant must give `Ok` or `Err`: no panic, at most `HEAP_BOUND` bytes of heap, at most
//! `TIME_BOUND` per input. Deterministic (seeded PRNG); `KBUILD_MUTATIONS=N` sets the count
//! per parser (default: 100 000 in release builds, 4 000 in debug builds).

use crate::kbuild_tests;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kbuild_bundle::archive::{self, ArchiveLimits, Entry};
use kbuild_bundle::sign::SignatureFile;
use kbuild_bundle::Bundle;
use kbuild_registry::oci::{parse_kbuild_artifact, Artifact, FetchedManifest, IMAGE_MANIFEST};
use kbuild_tests::registry::{write_project, Env, SMALL_A, SMALL_B};

/// Counts this thread's live and peak heap bytes (each parser call is single-threaded).
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let _ = LIVE.try_with(|l| {
                let v = l.get() + layout.size();
                l.set(v);
                let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
            });
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(layout.size())));
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Heap one parser call may use on top of what was live before it: the archive limit below
/// (each object held once, plus the tar stream) and slack for the records.
const HEAP_BOUND: usize = 96 << 20;

/// Time one call may take (debug builds included): a hang shows as this tripping.
const TIME_BOUND: Duration = Duration::from_secs(5);

const LIMITS: ArchiveLimits = ArchiveLimits {
    max_unpacked: 16 << 20,
    max_entries: 4096,
};

/// SplitMix64: small, fast, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Tokens that break text parsers: extreme numbers, deep nesting, odd strings.
const TOKENS: &[&str] = &[
    "0",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e400",
    "NaN",
    "inf",
    "\"\"",
    "null",
    "true",
    "[]",
    "{}",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"../../etc/passwd\"",
    "\"sm_89\"",
    "\"gfx1100:xnack-\"",
    "\"sha256:\"",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":",
    "[package]",
    "[[kernels]]",
    "[kernels.x]",
    "a = { b = { c = { d = 1 } } }",
    "\n",
    "=",
    ",",
    "\"",
    "'''",
    "#",
];

/// One to three byte- or token-level edits.
fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut d = original.to_vec();
    for _ in 0..1 + rng.below(3) {
        let len = d.len();
        match rng.below(10) {
            0 | 1 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            2 if len > 0 => {
                let i = rng.below(len);
                d[i] = rng.next() as u8;
            }
            3 => {
                let n = if rng.below(2) == 0 {
                    rng.below(len + 1)
                } else {
                    rng.below(len.min(512) + 1)
                };
                d.truncate(n);
            }
            4 | 5 => {
                // A token in place of a span (or inserted).
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let at = rng.below(len + 1);
                let cut = rng.below(16).min(len - at);
                d.splice(at..at + cut, t.iter().copied());
            }
            6 if len > 0 => {
                // Duplicate a span (repeated keys, entries, sections).
                let at = rng.below(len);
                let n = rng.below((len - at).min(4096)) + 1;
                let span = d[at..at + n].to_vec();
                let to = rng.below(len + 1);
                d.splice(to..to, span);
            }
            7 if len > 0 => {
                let at = rng.below(len);
                let n = rng.below((len - at).min(256)) + 1;
                d.drain(at..at + n);
            }
            8 => {
                // Deep nesting.
                let open = if rng.below(2) == 0 { b'[' } else { b'{' };
                let at = rng.below(len + 1);
                let n = 1 + rng.below(20_000);
                d.splice(at..at, std::iter::repeat_n(open, n));
            }
            _ if len > 0 => {
                // A digit run replaced by an extreme number.
                let i = rng.below(len);
                if let Some(s) = (i..len).find(|&j| d[j].is_ascii_digit()) {
                    let e = (s..len).find(|&j| !d[j].is_ascii_digit()).unwrap_or(len);
                    let t = TOKENS[rng.below(7)].as_bytes();
                    d.splice(s..e, t.iter().copied());
                }
            }
            _ => {}
        }
    }
    d
}

/// The seeds: a real bundle, its manifest.json and its OCI artifact manifest.
struct Seeds {
    bundle: Vec<u8>,
    manifest: Vec<u8>,
    oci: Vec<u8>,
    signatures: Vec<u8>,
}

fn seeds() -> &'static Seeds {
    static S: OnceLock<Seeds> = OnceLock::new();
    S.get_or_init(|| {
        let env = Env::new();
        let k = write_project(
            env.path(),
            "kb-small",
            &["sm_89", "gfx1100"],
            &[("scale", SMALL_A), ("shift", SMALL_B)],
        );
        env.ok(&k, &["package", "--out", "dist"]);
        let bundle = std::fs::read(k.join("dist/kb-small-0.1.0.kbundle")).expect("bundle");
        let b = Bundle::from_bytes(&bundle, LIMITS).expect("the seed bundle reads");
        let art = Artifact::from_bundle(&b, 0).expect("the seed bundle has an OCI form");
        let signatures = format!(
            "{{\"schema\":\"{}\",\"signatures\":[{{\"key_id\":\"0123456789abcdef\",\"public_key\":\"kbuild-ed25519 AAAA\",\"payload\":{{\"schema\":\"kbuild.signature-payload/v1\",\"name\":\"kb-small\",\"version\":\"0.1.0\",\"manifest\":\"{}\"}},\"signature\":\"AAAA\"}}]}}",
            kbuild_bundle::sign::FILE_SCHEMA,
            b.manifest_digest()
        )
        .into_bytes();
        Seeds {
            manifest: b.manifest_json().to_vec(),
            bundle,
            oci: art.manifest,
            signatures,
        }
    })
}

fn count() -> usize {
    std::env::var("KBUILD_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            4_000
        } else {
            100_000
        })
}

/// Mutate `inputs` round-robin `count()` times (`make` builds the input from the mutant),
/// run `parse` on each under the bounds.
fn run(
    what: &str,
    inputs: &[Vec<u8>],
    seed: u64,
    make: &dyn Fn(&mut Rng, &[u8]) -> Vec<u8>,
    parse: &dyn Fn(&[u8]),
) {
    let n = count();
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let (mut worst_heap, mut worst_time) = (0usize, Duration::ZERO);
    let start = Instant::now();
    for i in 0..n {
        let k = i % inputs.len();
        let state = rng.0;
        let data = make(&mut rng, &inputs[k]);
        let before = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(before));
        let t0 = Instant::now();
        let ok = catch_unwind(AssertUnwindSafe(|| parse(&data))).is_ok();
        let took = t0.elapsed();
        let used = PEAK.with(Cell::get).saturating_sub(before);
        worst_heap = worst_heap.max(used);
        worst_time = worst_time.max(took);
        if !ok || used > HEAP_BOUND || took > TIME_BOUND {
            failures.push(format!(
                "{what} mutation {i} of seed {k} (rng state {state:#x}): {}",
                if !ok {
                    "panicked".to_string()
                } else if used > HEAP_BOUND {
                    format!("used {used} heap bytes")
                } else {
                    format!("took {took:.2?}")
                }
            ));
        }
    }
    eprintln!(
        "{what}: {n} mutations in {:.2?}, worst heap use {} KiB, slowest input {:.2?}, {} failures",
        start.elapsed(),
        worst_heap / 1024,
        worst_time,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

fn read_bundle(data: &[u8]) {
    let _ = archive::read(data, LIMITS);
    if let Ok(b) = Bundle::from_bytes(data, LIMITS) {
        let _ = b.targets();
        let _ = b.to_bytes(0);
    }
}

#[test]
fn mutate_bundle_reader() {
    let s = seeds();
    let tar = zstd::decode_all(s.bundle.as_slice()).expect("the seed bundle decompresses");
    let entries = archive::read(&s.bundle, LIMITS).expect("the seed bundle reads");
    // A third of the mutants on the compressed bytes, a third on the tar stream
    // (recompressed), a third on one member's bytes re-packed as a well-formed archive (which
    // reaches the manifest and object checks).
    let make = move |rng: &mut Rng, compressed: &[u8]| -> Vec<u8> {
        match rng.below(3) {
            0 => mutate(rng, compressed),
            1 => zstd::encode_all(mutate(rng, &tar).as_slice(), 1).unwrap_or_default(),
            _ => {
                let mut e = entries.clone();
                let i = rng.below(e.len());
                e[i].data = mutate(rng, &e[i].data);
                if rng.below(4) == 0 {
                    let j = rng.below(e.len());
                    e[j].name =
                        String::from_utf8_lossy(&mutate(rng, e[j].name.as_bytes())).into_owned();
                }
                if rng.below(8) == 0 {
                    e.push(Entry {
                        name: format!("objects/sha256/{:064x}", rng.next()),
                        data: vec![0; rng.below(64)],
                    });
                }
                archive::write(&e, 0).unwrap_or_default()
            }
        }
    };
    run(
        "bundle reader",
        std::slice::from_ref(&s.bundle),
        0xB0B,
        &make,
        &read_bundle,
    );
}

#[test]
fn mutate_manifest_parser() {
    let s = seeds();
    run(
        "manifest parser",
        std::slice::from_ref(&s.manifest),
        0x3A7,
        &|rng, d| mutate(rng, d),
        &|d| {
            let _ = kbuild_manifest::manifest::Manifest::from_json(d);
        },
    );
}

#[test]
fn mutate_kbuild_toml_parser() {
    let root = kbuild_tests::repo_root();
    let inputs: Vec<Vec<u8>> = [
        "kernels/Kbuild.toml",
        "tests/fixtures/probes/Kbuild.toml",
        "tests/fixtures/diff/head/Kbuild.toml",
    ]
    .iter()
    .filter_map(|p| std::fs::read(root.join(p)).ok())
    .collect();
    assert!(!inputs.is_empty(), "no Kbuild.toml seeds");
    run(
        "Kbuild.toml parser",
        &inputs,
        0x70A1,
        &|rng, d| mutate(rng, d),
        &|d| {
            let text = String::from_utf8_lossy(d);
            let _ = kbuild_build::config::parse(Path::new("Kbuild.toml"), &text);
        },
    );
}

#[test]
fn mutate_oci_manifest_parsing() {
    let s = seeds();
    run(
        "OCI manifest parsing",
        &[s.oci.clone(), s.signatures.clone()],
        0x0C1,
        &|rng, d| mutate(rng, d),
        &|d| {
            let f = FetchedManifest {
                digest: String::new(),
                bytes: d.to_vec(),
                media_type: IMAGE_MANIFEST.to_string(),
            };
            let _ = parse_kbuild_artifact(&f, "mutation/r:1");
            let _ = SignatureFile::from_json(d);
        },
    );
}
