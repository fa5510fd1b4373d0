//! Mutation test of every reader: real objects with bit flips, byte overwrites, truncations and
//! corrupted length fields must give `Ok` or `Err`, never a panic, and never allocate more
//! than a fixed bound. Deterministic (seeded PRNG); `KBUILD_MUTATIONS=N` sets the count per
//! format (default: 100 000 in release builds, 4 000 in debug builds).

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use kbuild_manifest::read::{self, Limits};

/// Counts this thread's live and peak heap bytes (the readers are single-threaded).
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

/// Heap one reader call may use on top of what was live before it: the decompression limits
/// below plus slack for the records themselves.
const HEAP_BOUND: usize = 96 << 20;

const LIMITS: Limits = Limits {
    max_decompressed: 16 << 20,
    max_total_decompressed: 48 << 20,
    max_depth: 8,
    max_members: 4096,
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

/// Values that break length checks.
fn interesting(rng: &mut Rng, original: u64) -> u64 {
    match rng.below(10) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::from(u32::MAX),
        4 => 0x7fff_ffff,
        5 => original.wrapping_add(1 + rng.below(16) as u64),
        6 => original.wrapping_sub(1 + rng.below(16) as u64),
        7 => original.wrapping_mul(2),
        8 => 1 << rng.below(63),
        _ => rng.next(),
    }
}

fn write_le(data: &mut [u8], at: usize, width: usize, v: u64) {
    for i in 0..width {
        if let Some(b) = data.get_mut(at + i) {
            *b = (v >> (8 * i)) as u8;
        }
    }
}

fn read_le(data: &[u8], at: usize, width: usize) -> u64 {
    (0..width).fold(0, |acc, i| {
        acc | (u64::from(*data.get(at + i).unwrap_or(&0)) << (8 * i))
    })
}

/// Offsets of length/offset fields worth corrupting, per format (u32/u64 little-endian).
fn length_fields(data: &[u8]) -> Vec<(usize, usize)> {
    let mut f = Vec::new();
    if data.starts_with(b"\x7fELF") {
        // e_phoff, e_shoff, e_phnum, e_shnum, e_shstrndx, e_shentsize
        f.extend([
            (0x20, 8),
            (0x28, 8),
            (0x38, 2),
            (0x3c, 2),
            (0x3e, 2),
            (0x3a, 2),
        ]);
        let shoff = read_le(data, 0x28, 8) as usize;
        let shnum = read_le(data, 0x3c, 2) as usize;
        for i in 0..shnum.min(512) {
            let s = shoff + i * 64;
            // sh_offset, sh_size, sh_link, sh_info, sh_entsize
            f.extend([
                (s + 0x18, 8),
                (s + 0x20, 8),
                (s + 0x28, 4),
                (s + 0x2c, 4),
                (s + 0x38, 8),
            ]);
        }
    } else if data.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
        f.push((8, 8));
        let mut pos = 16;
        while pos + 64 <= data.len() {
            // header size, payload size, compressed size, uncompressed size, flags
            f.extend([
                (pos + 4, 4),
                (pos + 8, 8),
                (pos + 16, 4),
                (pos + 56, 8),
                (pos + 40, 8),
            ]);
            let next =
                pos + read_le(data, pos + 4, 4) as usize + read_le(data, pos + 8, 8) as usize;
            if next <= pos {
                break;
            }
            pos = next;
        }
    } else if data.starts_with(b"__CLANG_OFFLOAD_BUNDLE__") {
        f.push((24, 8));
        let mut pos = 32;
        for _ in 0..read_le(data, 24, 8).min(64) {
            f.extend([(pos, 8), (pos + 8, 8), (pos + 16, 8)]);
            pos += 24 + read_le(data, pos + 16, 8) as usize;
        }
    } else if data.starts_with(b"CCOB") {
        f.extend([(4, 2), (6, 2), (8, 4), (12, 4), (8, 8), (16, 8)]);
    }
    f.retain(|&(at, w)| at + w <= data.len());
    f
}

fn mutate(rng: &mut Rng, original: &[u8], fields: &[(usize, usize)]) -> Vec<u8> {
    let mut d = original.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        if d.is_empty() {
            break;
        }
        match rng.below(8) {
            0 | 1 => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            2 => {
                let i = rng.below(d.len());
                d[i] = rng.next() as u8;
            }
            3 => {
                // Truncation, often near the end or inside the headers.
                let n = if rng.below(2) == 0 {
                    rng.below(d.len())
                } else {
                    rng.below(d.len().min(512))
                };
                d.truncate(n);
            }
            4..=6 if !fields.is_empty() => {
                let (at, w) = fields[rng.below(fields.len())];
                let v = interesting(rng, read_le(&d, at, w));
                write_le(&mut d, at, w, v);
            }
            _ => {
                // A random aligned word anywhere.
                let w = if rng.below(2) == 0 { 4 } else { 8 };
                let at = rng.below(d.len()) & !(w - 1);
                let v = interesting(rng, read_le(&d, at, w));
                write_le(&mut d, at, w, v);
            }
        }
    }
    d
}

/// Everything a user of the readers might call on untrusted bytes. Each reader runs once per
/// input: `identify` covers the reader of the detected format, `walk` the container readers;
/// the other readers are called directly to see them refuse foreign bytes.
fn exercise(data: &[u8]) {
    use read::Format;
    let format = read::detect(data);
    let _ = read::identify(data).map(|_| ());
    if format == Some(Format::Hsaco) {
        let _ = read::amdgpu::read_hsaco(data).map(|o| o.check().is_ok());
    } else {
        let _ = read::amdgpu::read_hsaco(data);
    }
    if format != Some(Format::Cubin) {
        let _ = read::cubin::read_cubin(data);
    }
    if matches!(format, Some(Format::Cubin | Format::Hsaco | Format::Ptx)) {
        // Resources and launch parameters (KPARAM_INFO, `.args`, `.param` lists) of the object.
        let _ = kbuild_manifest::resources::object_resources(data, None, None);
    }
    if format != Some(Format::Ptx) {
        let _ = read::ptx::read_ptx(data);
    }
    if !matches!(
        format,
        Some(Format::Fatbin | Format::OffloadBundle | Format::HostElf)
    ) {
        let _ = read::fatbin::read_fatbin(data);
        let _ = read::offload_bundle::read_offload_bundle(data);
        let _ = read::offload_bundle::decompress_bundle(data, LIMITS.max_decompressed);
        let _ = read::host_elf::read_host_elf(data);
    }
    if let Ok(members) = read::walk_with(data, &LIMITS) {
        for m in members {
            if m.parent.is_some() {
                let _ = read::identify(&m.data);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = read::parse_ptxas_log(text);
        let _ = read::parse_clang_resource_remarks(text);
    }
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

fn run(format: &str, fixtures: &[&str], seed: u64) {
    let inputs: Vec<Vec<u8>> = fixtures.iter().map(|f| common::fixture(f)).collect();
    let n = count();
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let mut worst = 0usize;
    let start = std::time::Instant::now();
    for i in 0..n {
        let k = i % inputs.len();
        let fields = length_fields(&inputs[k]);
        let state = rng.0;
        let data = mutate(&mut rng, &inputs[k], &fields);
        let before = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(before));
        let ok = catch_unwind(AssertUnwindSafe(|| exercise(&data))).is_ok();
        let used = PEAK.with(Cell::get).saturating_sub(before);
        worst = worst.max(used);
        if !ok || used > HEAP_BOUND {
            failures.push(format!(
                "{format} mutation {i} of {} (rng state {state:#x}): {}",
                fixtures[k],
                if ok {
                    format!("used {used} heap bytes")
                } else {
                    "panicked".into()
                }
            ));
        }
    }
    eprintln!(
        "{format}: {n} mutations in {:.2?}, worst heap use {} KiB, {} failures",
        start.elapsed(),
        worst / 1024,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

#[test]
fn mutate_hsaco() {
    run(
        "hsaco",
        &[
            "kern_gfx1100.hsaco",
            "mfma_gfx90a.hsaco",
            "kern_gfx11generic.hsaco",
        ],
        1,
    );
}

#[test]
fn mutate_cubin() {
    run(
        "cubin",
        &[
            "kern_sm90a.cubin",
            "kern_sm89_v1.cubin",
            "smem_res_sm_120.cubin",
        ],
        2,
    );
}

#[test]
fn mutate_ptx() {
    run("ptx", &["kern_compute90.ptx"], 3);
}

#[test]
fn mutate_fatbin() {
    run(
        "fatbin",
        &[
            "kern_multi.fatbin",
            "kern_sm80_lz4.fatbin",
            "smem_res_af.fatbin",
        ],
        4,
    );
}

#[test]
fn mutate_offload_bundle() {
    run(
        "offload bundle",
        &["small_bundle.hipfb", "small_bundle_compressed.hipfb"],
        5,
    );
}

#[test]
fn mutate_host_elf() {
    run(
        "host elf",
        &["libhost_nv.so", "small_host_hip.o", "libsmall_hip.so"],
        6,
    );
}

#[test]
fn mutate_logs() {
    run(
        "logs",
        &["spill_sm90.ptxas.log", "spill_gfx90a.remarks.txt"],
        7,
    );
}
