//! The GPU parity suite (`kbuild run gdn --check`), every check against the fp64 reference or
//! bit for bit between two device paths:
//!
//! * per seed and T: verify y and o vs the reference (rel-L2), committed S vs the reference;
//!   the conv state after commit is exactly the last raw inputs;
//! * fused vs unfused forward: y, o, qkv, g, β bitwise;
//! * batched vs per-layer commit: S and conv state bitwise, also with the batched commit on
//!   a 7-block grid (each block walks many tiles); gdn_conv's optional conv-state output vs
//!   the commit's, bitwise;
//! * the fused forward with layers launched programmatically vs serially: y, o bitwise;
//! * multi-token T vs T chained single-token forward+commit: every y and the final S bitwise;
//! * a decode trajectory (forward 1, commit 1) within a looser rel-L2 of the reference at every
//!   step.
//!
//! Outputs and scratch are NaN-poisoned before every forward, so an element a kernel does not
//! write fails its comparison; rows past T must stay poisoned (nothing written out of range).

use serde::Serialize;

use crate::engine::{CommitMode, GdnEngine, Path};
use crate::error::Result;
use crate::geometry::Geometry;
use crate::inputs::{Inputs, LayerParams, LayerState, LayerTokens};
use crate::reference::{rel_l2_f32, Reference, Window};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct ParityOptions {
    /// Window sizes T to check (each ≤ the geometry's window).
    pub tokens: Vec<usize>,
    /// Steps of the decode trajectory (0: none).
    pub trajectory_steps: usize,
    /// rel-L2 limit of outputs and committed states.
    pub tol: f64,
    /// rel-L2 limit of every trajectory step.
    pub trajectory_tol: f64,
}

impl Default for ParityOptions {
    fn default() -> ParityOptions {
        ParityOptions {
            tokens: vec![1, 2, 4, 8],
            trajectory_steps: 256,
            tol: 1e-5,
            trajectory_tol: 1e-4,
        }
    }
}

/// One verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    /// `rel-l2` (value ≤ limit) or `bitwise` (value = differing elements, limit 0).
    pub kind: &'static str,
    pub value: f64,
    pub limit: f64,
    pub pass: bool,
    pub detail: String,
}

impl Check {
    fn rel(name: String, value: f64, limit: f64, detail: String) -> Check {
        Check {
            name,
            kind: "rel-l2",
            value,
            limit,
            pass: value <= limit,
            detail,
        }
    }

    fn bitwise(name: String, a: &[f32], b: &[f32]) -> Check {
        let differing = if a.len() == b.len() {
            a.iter()
                .zip(b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count()
        } else {
            a.len().max(b.len())
        };
        Check {
            name,
            kind: "bitwise",
            value: differing as f64,
            limit: 0.0,
            pass: differing == 0 && !a.is_empty(),
            detail: format!("{differing} of {} elements differ", a.len()),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ParityReport {
    pub device: String,
    /// Each input source (`seed 1`, a file).
    pub inputs: Vec<String>,
    pub geometry: Geometry,
    pub options: ParityOptions,
    pub checks: Vec<Check>,
}

impl ParityReport {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// Device results of one forward, every layer concatenated.
struct Outputs {
    y: Vec<f32>,
    o: Vec<f32>,
    qkv: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
}

fn read_outputs(e: &GdnEngine, t: usize) -> Result<Outputs> {
    let mut out = Outputs {
        y: Vec::new(),
        o: Vec::new(),
        qkv: Vec::new(),
        g: Vec::new(),
        beta: Vec::new(),
    };
    for l in 0..e.geometry().layers {
        out.y.extend(e.read_y(l, t)?);
        out.o.extend(e.read_o(l, t)?);
        out.qkv.extend(e.read_qkv(l, t)?);
        let (g, b) = e.read_gates(l, t)?;
        out.g.extend(g);
        out.beta.extend(b);
    }
    Ok(out)
}

fn read_states(e: &GdnEngine) -> Result<(Vec<f32>, Vec<f32>)> {
    let (mut s, mut c) = (Vec::new(), Vec::new());
    for l in 0..e.geometry().layers {
        let st = e.read_state(l)?;
        s.extend(st.s);
        c.extend(st.conv);
    }
    Ok((s, c))
}

/// Rows t ≥ T of o and y must still hold the poison (all-ones bits).
fn untouched_rows(e: &GdnEngine, t: usize) -> Result<Check> {
    let g = e.geometry();
    let (y, o) = e.read_all_outputs()?;
    let w = g.value_width();
    let mut written = 0usize;
    let mut total = 0usize;
    for buf in [&y, &o] {
        for l in 0..g.layers {
            for row in t..g.window {
                let at = (l * g.window + row) * w;
                let slice = buf.get(at..at + w).unwrap_or(&[]);
                total += slice.len();
                written += slice.iter().filter(|v| v.to_bits() != u32::MAX).count();
            }
        }
    }
    Ok(Check {
        name: format!("T={t} rows past T untouched (o, y)"),
        kind: "bitwise",
        value: written as f64,
        limit: 0.0,
        pass: written == 0,
        detail: format!("{written} of {total} poisoned elements overwritten"),
    })
}

struct Case {
    params: Vec<LayerParams>,
    states: Vec<LayerState>,
    window: Vec<LayerTokens>,
}

fn case(inputs: &Inputs) -> Result<Case> {
    let g = inputs.geometry();
    let mut window = Vec::new();
    for l in 0..g.layers {
        window.push(inputs.tokens(l, 0, g.window)?);
    }
    Ok(Case {
        params: (0..g.layers).map(|l| inputs.params(l)).collect(),
        states: (0..g.layers).map(|l| inputs.initial_state(l)).collect(),
        window,
    })
}

fn reset(e: &mut GdnEngine, c: &Case) -> Result<()> {
    for (l, s) in c.states.iter().enumerate() {
        e.set_state(l, s)?;
    }
    Ok(())
}

fn first(g: &Geometry, tokens: &[LayerTokens], start: usize, n: usize) -> Vec<LayerTokens> {
    tokens.iter().map(|t| t.slice(g, start, n)).collect()
}

fn concat(ws: &[Window], f: impl Fn(&Window) -> &[f64]) -> Vec<f64> {
    ws.iter().flat_map(|w| f(w).iter().copied()).collect()
}

/// Run the suite over each input source (the trajectory over the first); `progress` sees
/// each check as it is made.
pub fn run(
    e: &mut GdnEngine,
    sources: &[Inputs],
    opts: &ParityOptions,
    progress: &mut dyn FnMut(&Check),
) -> Result<ParityReport> {
    let g = *e.geometry();
    for &t in &opts.tokens {
        g.check_tokens(t)?;
    }
    let mut checks = Vec::new();
    let mut push = |c: Check, checks: &mut Vec<Check>| {
        progress(&c);
        checks.push(c);
    };
    for (si, inputs) in sources.iter().enumerate() {
        let seed = inputs.describe();
        e.load_inputs(inputs)?;
        let c = case(inputs)?;
        let reference = Reference::new(g, &c.states);
        for &t in &opts.tokens {
            let tokens = first(&g, &c.window, 0, t);
            let tag = format!("{seed} T={t}");
            // Unfused forward vs the reference.
            reset(e, &c)?;
            e.poison_outputs()?;
            e.forward(&tokens, Path::Unfused)?;
            let un = read_outputs(e, t)?;
            let mut r = reference.clone();
            let windows = r.verify(&c.params, &tokens);
            push(
                Check::rel(
                    format!("{tag} verify y vs fp64"),
                    rel_l2_f32(&un.y, &concat(&windows, |w| &w.y)),
                    opts.tol,
                    String::new(),
                ),
                &mut checks,
            );
            push(
                Check::rel(
                    format!("{tag} verify o vs fp64"),
                    rel_l2_f32(&un.o, &concat(&windows, |w| &w.o)),
                    opts.tol,
                    String::new(),
                ),
                &mut checks,
            );
            if si == 0 {
                push(untouched_rows(e, t)?, &mut checks);
                // The whole stack in one launch per kernel, bitwise the per-layer forward.
                for path in [Path::Unfused, Path::Fused] {
                    e.poison_outputs()?;
                    e.launch_forward_stack(t, path)?;
                    let st = read_outputs(e, t)?;
                    push(
                        Check::bitwise(
                            format!("{tag} stack-launched {path:?} forward vs per-layer y")
                                .to_lowercase(),
                            &st.y,
                            &un.y,
                        ),
                        &mut checks,
                    );
                }
                // Leave the per-layer unfused scratch for the commits below.
                e.poison_outputs()?;
                e.launch_forward(t, Path::Unfused)?;
            }
            // gdn_conv's own conv-state output, for the commit comparison below.
            for l in 0..g.layers {
                e.launch_conv(l, t, Some(&e.buffers().conv_spare))?;
            }
            let mut spare = Vec::new();
            for l in 0..g.layers {
                spare.extend(e.read_conv_spare(l)?);
            }
            // Per-layer commit vs the reference.
            e.commit(t, CommitMode::PerLayer)?;
            let (s_layer, c_layer) = read_states(e)?;
            r.commit(&windows, &tokens, t);
            let ref_s: Vec<f64> = r.layers.iter().flat_map(|l| l.s.iter().copied()).collect();
            let ref_c: Vec<f64> = r
                .layers
                .iter()
                .flat_map(|l| l.conv.iter().copied())
                .collect();
            push(
                Check::rel(
                    format!("{tag} committed S vs fp64"),
                    rel_l2_f32(&s_layer, &ref_s),
                    opts.tol,
                    String::new(),
                ),
                &mut checks,
            );
            let ref_c32: Vec<f32> = ref_c.iter().map(|v| *v as f32).collect();
            push(
                Check::bitwise(
                    format!("{tag} committed conv state = last raw inputs"),
                    &c_layer,
                    &ref_c32,
                ),
                &mut checks,
            );
            push(
                Check::bitwise(
                    format!("{tag} gdn_conv state output vs commit"),
                    &spare,
                    &c_layer,
                ),
                &mut checks,
            );
            // Fused vs unfused, bitwise.
            reset(e, &c)?;
            e.poison_outputs()?;
            e.forward(&tokens, Path::Fused)?;
            let fu = read_outputs(e, t)?;
            for (what, a, b) in [
                ("y", &fu.y, &un.y),
                ("o", &fu.o, &un.o),
                ("qkv", &fu.qkv, &un.qkv),
                ("g", &fu.g, &un.g),
                ("beta", &fu.beta, &un.beta),
            ] {
                push(
                    Check::bitwise(format!("{tag} fused vs unfused {what}"), a, b),
                    &mut checks,
                );
            }
            // The fused forward with layer l + 1 launched programmatically (the default where
            // supported) vs one launch after the other, bitwise.
            if si == 0 && e.layer_overlap() {
                e.set_layer_overlap(false);
                e.poison_outputs()?;
                let serial = e
                    .launch_forward(t, Path::Fused)
                    .and_then(|()| read_outputs(e, t));
                e.set_layer_overlap(true);
                let serial = serial?;
                for (what, a, b) in [("y", &serial.y, &fu.y), ("o", &serial.o, &fu.o)] {
                    push(
                        Check::bitwise(format!("{tag} fused serial vs overlapped {what}"), a, b),
                        &mut checks,
                    );
                }
            }
            // Batched vs per-layer commit, bitwise (from the fused forward's scratch).
            e.commit(t, CommitMode::Batched)?;
            let (s_batch, c_batch) = read_states(e)?;
            push(
                Check::bitwise(
                    format!("{tag} batched vs per-layer commit S"),
                    &s_batch,
                    &s_layer,
                ),
                &mut checks,
            );
            push(
                Check::bitwise(
                    format!("{tag} batched vs per-layer commit conv state"),
                    &c_batch,
                    &c_layer,
                ),
                &mut checks,
            );
            // The batched commit on a grid of 7 blocks, each walking ~1000 tiles through its
            // copy pipeline, vs per-layer (one tile per block), bitwise.
            if si == 0 {
                reset(e, &c)?;
                e.forward(&tokens, Path::Fused)?;
                e.set_commit_grid(Some(7));
                let small = e
                    .commit(t, CommitMode::Batched)
                    .and_then(|()| read_states(e));
                e.set_commit_grid(None);
                let (s_small, c_small) = small?;
                for (what, a, b) in [
                    ("S", &s_small, &s_layer),
                    ("conv state", &c_small, &c_layer),
                ] {
                    push(
                        Check::bitwise(
                            format!("{tag} batched commit on 7 blocks vs per-layer {what}"),
                            a,
                            b,
                        ),
                        &mut checks,
                    );
                }
            }
            // T tokens at once vs T chained single-token forward + commit.
            if t > 1 {
                reset(e, &c)?;
                let mut chained_y = Vec::new();
                let mut per_layer: Vec<Vec<f32>> = vec![Vec::new(); g.layers];
                for step in 0..t {
                    e.poison_outputs()?;
                    e.forward(&first(&g, &c.window, step, 1), Path::Unfused)?;
                    for (l, out) in per_layer.iter_mut().enumerate() {
                        out.extend(e.read_y(l, 1)?);
                    }
                    e.commit(1, CommitMode::Batched)?;
                }
                per_layer.into_iter().for_each(|v| chained_y.extend(v));
                let (s_chain, c_chain) = read_states(e)?;
                push(
                    Check::bitwise(
                        format!("{tag} multi-token vs {t} chained single-token y"),
                        &un.y,
                        &chained_y,
                    ),
                    &mut checks,
                );
                push(
                    Check::bitwise(
                        format!("{tag} multi-token vs chained committed S"),
                        &s_layer,
                        &s_chain,
                    ),
                    &mut checks,
                );
                push(
                    Check::bitwise(
                        format!("{tag} multi-token vs chained conv state"),
                        &c_layer,
                        &c_chain,
                    ),
                    &mut checks,
                );
            }
        }
    }
    if let (true, Some(inputs)) = (opts.trajectory_steps > 0, sources.first()) {
        e.load_inputs(inputs)?;
        let c = case(inputs)?;
        let mut r = Reference::new(g, &c.states);
        let (mut worst, mut worst_step) = (0.0f64, 0usize);
        let mut failed_at = None;
        for step in 0..opts.trajectory_steps {
            let mut tokens = Vec::with_capacity(g.layers);
            for l in 0..g.layers {
                tokens.push(inputs.tokens(l, step, 1)?);
            }
            e.poison_outputs()?;
            e.forward(&tokens, Path::Fused)?;
            let mut y = Vec::new();
            for l in 0..g.layers {
                y.extend(e.read_y(l, 1)?);
            }
            e.commit(1, CommitMode::Batched)?;
            let windows = r.verify(&c.params, &tokens);
            r.commit(&windows, &tokens, 1);
            let err = rel_l2_f32(&y, &concat(&windows, |w| &w.y));
            if err > worst {
                (worst, worst_step) = (err, step);
            }
            if err > opts.trajectory_tol && failed_at.is_none() {
                failed_at = Some(step);
            }
        }
        let (s, _) = read_states(e)?;
        let ref_s: Vec<f64> = r.layers.iter().flat_map(|l| l.s.iter().copied()).collect();
        let n = opts.trajectory_steps;
        push(
            Check::rel(
                format!("{n}-step decode trajectory: worst y vs fp64 over all steps"),
                worst,
                opts.trajectory_tol,
                format!(
                    "worst at step {worst_step}{}",
                    failed_at
                        .map(|s| format!("; first over the limit at step {s}"))
                        .unwrap_or_default()
                ),
            ),
            &mut checks,
        );
        push(
            Check::rel(
                format!("{n}-step decode trajectory: final S vs fp64"),
                rel_l2_f32(&s, &ref_s),
                opts.trajectory_tol,
                String::new(),
            ),
            &mut checks,
        );
    }
    Ok(ParityReport {
        device: e.device().to_string(),
        inputs: sources.iter().map(Inputs::describe).collect(),
        geometry: g,
        options: opts.clone(),
        checks,
    })
}
