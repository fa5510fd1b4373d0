//! The benchmark of `kbuild run gdn --bench`: for the whole stack, each operation captured
//! once into a CUDA graph and replayed, every replay timed alone with events; the median.
//!
//! * forward unfused / fused for each T (state traffic: one read of every layer's S), per
//!   layer (the model's shape) and with one launch per kernel for the whole stack;
//! * the recurrence alone (gdn_step_verify over the forward's q, k, v, g, β), per layer and
//!   as a stack: the same work as FLA's fused_recurrent_gated_delta_rule without final state;
//! * commit per-layer / batched for each n (state traffic: read + write of every S);
//! * a device-to-device copy of the same bytes as the state in the same run (traffic: read +
//!   write), the bandwidth the commit is compared with.

use serde::Serialize;

use crate::engine::{CommitMode, GdnEngine, Path};
use crate::error::Result;
use crate::inputs::Inputs;

#[derive(Debug, Clone, Serialize)]
pub struct BenchOptions {
    pub tokens: Vec<usize>,
    pub commits: Vec<usize>,
    /// Timed replays per row (after `warmup`).
    pub iters: usize,
    pub warmup: usize,
    pub seed: u64,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            tokens: vec![1, 2, 4, 8],
            commits: vec![1, 2, 3, 4, 5],
            iters: 50,
            warmup: 5,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `forward unfused`, `forward fused`, `fwd unfused stack`, `fwd fused stack`,
    /// `fwd fused serial` (the fused forward without the programmatic overlap of layers),
    /// `recurrence`, `recurrence stack`, `commit per-layer`, `commit batched`, `d2d copy`.
    pub op: String,
    /// T of a forward, n of a commit; 0 for the copy.
    pub tokens: usize,
    pub median_us: f64,
    pub min_us: f64,
    /// Bytes of state traffic one run moves.
    pub state_bytes: u64,
    pub gb_per_s: f64,
    /// `gb_per_s` over the copy's.
    pub vs_copy: f64,
    /// Kernel launches in the graph.
    pub launches: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub device: String,
    pub layers: usize,
    pub state_bytes: u64,
    pub copy_us: f64,
    pub copy_gb_per_s: f64,
    pub rows: Vec<Row>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Replay `graph` `warmup + iters` times; µs of each timed replay.
fn time_graph(
    e: &GdnEngine,
    graph: &crate::device::Graph,
    opts: &BenchOptions,
) -> Result<Vec<f64>> {
    let (start, end) = (e.cuda().event()?, e.cuda().event()?);
    let mut out = Vec::with_capacity(opts.iters);
    for i in 0..opts.warmup + opts.iters {
        e.cuda().record(&start)?;
        e.replay(graph)?;
        e.cuda().record(&end)?;
        let ms = e.cuda().elapsed_ms(&start, &end)?;
        if i >= opts.warmup {
            out.push(f64::from(ms) * 1000.0);
        }
    }
    Ok(out)
}

/// Run the benchmark on seeded inputs.
pub fn run(
    e: &mut GdnEngine,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&Row),
) -> Result<BenchReport> {
    let g = *e.geometry();
    let inputs = Inputs::seeded(g, opts.seed);
    e.load_inputs(&inputs)?;
    let mut window = Vec::with_capacity(g.layers);
    for l in 0..g.layers {
        window.push(inputs.tokens(l, 0, g.window)?);
    }
    e.stage(&window)?;
    let state_bytes = g.state_bytes() as u64;

    // The copy: the same bytes as every layer's state, device to device.
    let copy_dst = e.cuda().alloc(g.layers * g.state_len())?;
    let n = g.layers * g.state_len();
    let copy_graph = {
        e.cuda().begin_capture()?;
        let r = e.cuda().copy(&copy_dst, 0, &e.buffers().state, 0, n);
        let graph = e.cuda().end_capture();
        r?;
        graph?
    };
    let copy_us = median(time_graph(e, &copy_graph, opts)?);
    let copy_gbps = 2.0 * state_bytes as f64 / (copy_us * 1e3);
    let mut rows = Vec::new();
    let mut add = |op: String,
                   tokens: usize,
                   times: Vec<f64>,
                   bytes: u64,
                   launches: usize,
                   rows: &mut Vec<Row>| {
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let med = median(times);
        let gbps = bytes as f64 / (med * 1e3);
        let row = Row {
            op,
            tokens,
            median_us: med,
            min_us: min,
            state_bytes: bytes,
            gb_per_s: gbps,
            vs_copy: gbps / copy_gbps,
            launches,
        };
        progress(&row);
        rows.push(row);
    };
    add(
        "d2d copy".into(),
        0,
        time_graph(e, &copy_graph, opts)?,
        2 * state_bytes,
        1,
        &mut rows,
    );
    drop(copy_graph);
    drop(copy_dst);

    for &t in &opts.tokens {
        for (path, name, per_layer) in [
            (Path::Unfused, "forward unfused", 4),
            (Path::Fused, "forward fused", 1),
        ] {
            let graph = e.capture(|e| e.launch_forward(t, path))?;
            let times = time_graph(e, &graph, opts)?;
            add(
                name.into(),
                t,
                times,
                state_bytes,
                per_layer * g.layers,
                &mut rows,
            );
        }
        // The fused forward without the programmatic overlap of layer l + 1 with layer l (where
        // the engine uses it), to show what the overlap buys.
        if e.layer_overlap() {
            e.set_layer_overlap(false);
            let graph = e.capture(|e| e.launch_forward(t, Path::Fused));
            e.set_layer_overlap(true);
            let times = time_graph(e, &graph?, opts)?;
            add(
                "fwd fused serial".into(),
                t,
                times,
                state_bytes,
                g.layers,
                &mut rows,
            );
        }
        // The same kernels with one launch covering every layer (FLA's layers-as-batch shape).
        for (path, name, launches) in [
            (Path::Unfused, "fwd unfused stack", 4),
            (Path::Fused, "fwd fused stack", 1),
        ] {
            let graph = e.capture(|e| e.launch_forward_stack(t, path))?;
            let times = time_graph(e, &graph, opts)?;
            add(name.into(), t, times, state_bytes, launches, &mut rows);
        }
        // The recurrence alone over the q, k, v, g, β the forwards above left: the work of
        // FLA's fused_recurrent_gated_delta_rule (no final state), per layer and as a stack.
        for (stack, name, launches) in [
            (false, "recurrence", g.layers),
            (true, "recurrence stack", 1),
        ] {
            let graph = e.capture(|e| {
                if stack {
                    e.launch_recurrence_stack(t)
                } else {
                    e.launch_recurrence(t)
                }
            })?;
            let times = time_graph(e, &graph, opts)?;
            add(name.into(), t, times, state_bytes, launches, &mut rows);
        }
    }
    // Commits replay over the window's scratch: fill it once.
    e.launch_forward(g.window, Path::Fused)?;
    for &n_commit in &opts.commits {
        for (mode, name, launches) in [
            (CommitMode::PerLayer, "commit per-layer", g.layers),
            (CommitMode::Batched, "commit batched", 1),
        ] {
            let graph = e.capture(|e| e.launch_commit(n_commit, mode))?;
            let times = time_graph(e, &graph, opts)?;
            add(
                name.into(),
                n_commit,
                times,
                2 * state_bytes,
                launches,
                &mut rows,
            );
        }
    }
    e.cuda().sync()?;
    Ok(BenchReport {
        device: e.device().to_string(),
        layers: g.layers,
        state_bytes,
        copy_us,
        copy_gb_per_s: copy_gbps,
        rows,
    })
}
