//! [`GdnEngine`]: a GDN stack on the device, driven through kernels a kbuild-loader
//! [`Loader`] selected from a bundle.
//!
//! Device buffers (f32, layer-major, token stride = the window; layouts in
//! kernels/gdn/gdn_common.h): the inputs x|z|a|b of the current window, the parameters, the
//! committed recurrent and conv states, and the verify scratch (qkv, g, β, o, y) that a later
//! commit reads.
//!
//! * [`GdnEngine::forward`] verifies T ≤ window tokens of every layer from the committed state
//!   (unfused: conv → gates → step → norm, four launches a layer; fused: one), leaving the
//!   state untouched;
//! * [`GdnEngine::commit`] advances the committed state by the first n ≤ T verified tokens,
//!   one launch a layer or one launch for the whole stack, bit for bit the same;
//! * [`GdnEngine::capture`] records any of that into a CUDA graph for replay.

use std::ffi::c_void;

use kbuild_loader::{DevicePtr, Function, LaunchConfig, Loader};
use kbuild_manifest::target::Target;

use crate::device::{Buffer, Cuda, Graph};
use crate::error::{EngineError, Result};
use crate::geometry::{Geometry, CONV_WIDTH};
use crate::inputs::{Inputs, LayerParams, LayerState, LayerTokens};
use crate::plan;

/// The device layout of one layer's recurrent state (kernels/gdn/gdn_common.h): element (i, j)
/// of head h ([dk][dv] row-major on the host) is stored at
/// `((j/8 · R + i % R) · P + i / R) · 8 + j % 8` within the head, P = 4 parts, R = dk/4 rows a
/// part, so each 32-lane group of a kernel reads 128 contiguous bytes per row step.
pub fn state_offset(g: &Geometry, i: usize, j: usize) -> usize {
    let rows = g.dk / STATE_PARTS;
    ((j / STATE_COLS_PER_GROUP * rows + i % rows) * STATE_PARTS + i / rows) * STATE_COLS_PER_GROUP
        + j % STATE_COLS_PER_GROUP
}

/// Lanes sharing a state column (`GDN_PARTS` of kernels/gdn/gdn_common.h).
pub const STATE_PARTS: usize = 4;
/// State columns of one 32-lane group (`GDN_COLS_PER_GROUP`).
const STATE_COLS_PER_GROUP: usize = 32 / STATE_PARTS;
/// Threads of a gdn_step / gdn_fused_verify block: 32 state columns × [`STATE_PARTS`].
const STEP_THREADS: u32 = 32 * STATE_PARTS as u32;

/// Host [Hv][dk][dv] → device tiled layout ([`state_offset`]).
pub fn tile_state(g: &Geometry, s: &[f32]) -> Vec<f32> {
    let hs = g.dk * g.dv;
    let mut out = vec![0.0; s.len()];
    for (h, head) in s.chunks_exact(hs).enumerate() {
        for i in 0..g.dk {
            for j in 0..g.dv {
                out[h * hs + state_offset(g, i, j)] = head[i * g.dv + j];
            }
        }
    }
    out
}

/// Device tiled layout → host [Hv][dk][dv].
pub fn untile_state(g: &Geometry, s: &[f32]) -> Vec<f32> {
    let hs = g.dk * g.dv;
    let mut out = vec![0.0; s.len()];
    for (h, head) in s.chunks_exact(hs).enumerate() {
        for i in 0..g.dk {
            for j in 0..g.dv {
                out[h * hs + i * g.dv + j] = head[state_offset(g, i, j)];
            }
        }
    }
    out
}

/// Which forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// gdn_conv → gdn_gates → gdn_step_verify → gdn_norm per layer.
    Unfused,
    /// gdn_fused_verify per layer.
    Fused,
}

/// How a commit is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommitMode {
    /// One gdn_step_commit launch per layer.
    PerLayer,
    /// One gdn_step_commit launch for every layer.
    Batched,
}

struct Kernels {
    conv: Function,
    gates: Function,
    norm: Function,
    /// Index T − 1.
    step_verify: Vec<Function>,
    step_commit: Vec<Function>,
    /// The grid of each gdn_step_commit: the blocks the device holds at once.
    commit_blocks: Vec<u32>,
    fused: Vec<Function>,
}

/// Device buffers of the stack.
pub struct Buffers {
    pub x: Buffer,
    pub z: Buffer,
    pub a: Buffer,
    pub b: Buffer,
    pub conv_w: Buffer,
    pub a_log: Buffer,
    pub dt_bias: Buffer,
    pub norm_w: Buffer,
    pub conv_state: Buffer,
    pub state: Buffer,
    pub qkv: Buffer,
    pub g: Buffer,
    pub beta: Buffer,
    pub o: Buffer,
    pub y: Buffer,
    /// Spare [L][3][C] (gdn_conv's optional conv-state output, checks).
    pub conv_spare: Buffer,
    /// gdn_fused_verify's cross-block norm partials [L][Hv][8][dv/32] and arrival counts
    /// [L][Hv] (ints; zero, and left zero by every launch), where it has no clusters.
    pub norm_part: Buffer,
    pub norm_count: Buffer,
}

/// The engine.
pub struct GdnEngine {
    // Dropped first: its drop waits for the stream before modules and buffers go.
    cuda: Cuda,
    geometry: Geometry,
    kernels: Kernels,
    buf: Buffers,
    device: String,
    /// Tokens staged in the input buffers (per layer, the same count).
    staged: usize,
    /// Tokens the last forward verified (what commit may take), `None` before any.
    verified: Option<usize>,
    /// Launch the fused forward of layer l + 1 programmatically ([`GdnEngine::layer_overlap`]).
    overlap_layers: bool,
    /// Whether every fused object has the dependency wait compiled in (sm_90+).
    overlap_supported: bool,
    /// The batched commit's grid instead of the resident blocks (tests).
    commit_grid: Option<u32>,
}

fn load(loader: &Loader, kernel: &str, variant: Option<&str>, entry: &str) -> Result<Function> {
    loader
        .function(kernel, variant, entry)
        .map_err(|source| EngineError::Loader {
            what: format!(
                "loading `{entry}` of {kernel}{}",
                variant.map(|v| format!(".{v}")).unwrap_or_default()
            ),
            source,
        })
}

fn i32_of(v: usize, what: &'static str) -> Result<i32> {
    i32::try_from(v).map_err(|_| EngineError::TooLarge { what, value: v })
}

impl GdnEngine {
    /// Check the bundle against the geometry ([`plan::check`]), load every kernel the window
    /// needs, and allocate the stack's buffers (zeroed).
    pub fn new(loader: &Loader, geometry: Geometry) -> Result<GdnEngine> {
        let origin = loader.package().origin().display().to_string();
        let manifest = loader
            .package()
            .manifest()
            .map_err(|source| EngineError::Loader {
                what: format!("reading {origin}"),
                source,
            })?;
        plan::check(manifest, loader.selection(), &origin, &geometry)?;
        let cuda = Cuda::new(loader.gpu())?;
        // Every object at once: the loader reads and verifies the next while the driver
        // loads one.
        let needs = plan::needs(&geometry);
        let wanted: Vec<(&str, Option<&str>)> = needs
            .iter()
            .map(|n| (n.kernel, n.variant.as_deref()))
            .collect();
        loader
            .preload(&wanted)
            .map_err(|source| EngineError::Loader {
                what: format!("loading the GDN kernels of {origin}"),
                source,
            })?;
        let mut step_verify = Vec::new();
        let mut step_commit = Vec::new();
        let mut fused = Vec::new();
        for t in 1..=geometry.window {
            let v = plan::tokens_variant(t);
            step_verify.push(load(loader, plan::STEP, Some(&v), plan::STEP_VERIFY)?);
            step_commit.push(load(loader, plan::STEP, Some(&v), plan::STEP_COMMIT)?);
            fused.push(load(loader, plan::FUSED, Some(&v), plan::FUSED_VERIFY)?);
        }
        // A programmatic launch needs the kernel's kc_grid_dependency_wait: objects for sm_90+.
        let overlap_supported = fused.iter().all(|f| {
            f.record()
                .ok()
                .and_then(|r| r.target.parse::<Target>().ok())
                .and_then(|t| t.processor.sm())
                .is_some_and(|sm| sm >= 90)
        });
        let commit_blocks = step_commit
            .iter()
            .map(|f| cuda.resident_blocks(f, STEP_THREADS))
            .collect::<Result<Vec<u32>>>()?;
        let kernels = Kernels {
            conv: load(loader, plan::CONV, None, plan::CONV)?,
            gates: load(loader, plan::GATES, None, plan::GATES)?,
            norm: load(loader, plan::NORM, None, plan::NORM)?,
            step_verify,
            step_commit,
            commit_blocks,
            fused,
        };
        let g = geometry;
        let (l, tw, c) = (g.layers, g.window, g.channels());
        let buf = Buffers {
            x: cuda.alloc(l * tw * c)?,
            z: cuda.alloc(l * tw * g.value_width())?,
            a: cuda.alloc(l * tw * g.hv)?,
            b: cuda.alloc(l * tw * g.hv)?,
            conv_w: cuda.alloc(l * c * CONV_WIDTH)?,
            a_log: cuda.alloc(l * g.hv)?,
            dt_bias: cuda.alloc(l * g.hv)?,
            norm_w: cuda.alloc(l * g.dv)?,
            conv_state: cuda.alloc(l * g.conv_state_len())?,
            state: cuda.alloc(l * g.state_len())?,
            qkv: cuda.alloc(l * tw * c)?,
            g: cuda.alloc(l * tw * g.hv)?,
            beta: cuda.alloc(l * tw * g.hv)?,
            o: cuda.alloc(l * tw * g.value_width())?,
            y: cuda.alloc(l * tw * g.value_width())?,
            conv_spare: cuda.alloc(l * g.conv_state_len())?,
            norm_part: cuda.alloc(l * g.hv * crate::geometry::MAX_WINDOW * (g.dv / 32))?,
            norm_count: cuda.alloc(l * g.hv)?,
        };
        Ok(GdnEngine {
            geometry,
            kernels,
            cuda,
            buf,
            device: loader.gpu().device().describe(),
            staged: 0,
            verified: None,
            overlap_layers: overlap_supported,
            overlap_supported,
            commit_grid: None,
        })
    }

    /// Whether the fused forward launches layer l + 1 as a programmatic dependent launch: its
    /// blocks start while layer l runs and load their state and weights, then wait for layer
    /// l before they read the layer's inputs. On by default where the objects support it
    /// (sm_90+); the results are bitwise the same either way.
    pub fn layer_overlap(&self) -> bool {
        self.overlap_layers
    }

    /// The grid of gdn_step_commit: `None` (the default) is the blocks the device holds at
    /// once; any other count gives the same bits (each block walks its share of the tiles), for
    /// tests of that walk.
    pub fn set_commit_grid(&mut self, blocks: Option<u32>) {
        self.commit_grid = blocks.map(|b| b.max(1));
    }

    /// Turn [`Self::layer_overlap`] on or off; on only where supported. Returns the setting.
    pub fn set_layer_overlap(&mut self, on: bool) -> bool {
        self.overlap_layers = on && self.overlap_supported;
        self.overlap_layers
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The device, as the loader describes it.
    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn cuda(&self) -> &Cuda {
        &self.cuda
    }

    pub fn buffers(&self) -> &Buffers {
        &self.buf
    }

    /// Which object (target, path) serves `kernel` (e.g. for reports).
    pub fn object_of(&self, path: Path, t: usize) -> String {
        let f = match path {
            Path::Unfused => self.kernels.step_verify.get(t.wrapping_sub(1)),
            Path::Fused => self.kernels.fused.get(t.wrapping_sub(1)),
        };
        f.and_then(|f| {
            f.record()
                .ok()
                .map(|r| format!("{} ({})", r.path, r.target))
        })
        .unwrap_or_default()
    }

    fn check_layer(&self, layer: usize) -> Result<()> {
        if layer >= self.geometry.layers {
            return Err(EngineError::NoSuchLayer {
                layer,
                layers: self.geometry.layers,
            });
        }
        Ok(())
    }

    fn check_len(what: &'static str, got: usize, want: usize) -> Result<()> {
        if got != want {
            return Err(EngineError::Length { what, got, want });
        }
        Ok(())
    }

    /// Upload one layer's parameters.
    pub fn set_params(&mut self, layer: usize, p: &LayerParams) -> Result<()> {
        self.check_layer(layer)?;
        let g = self.geometry;
        GdnEngine::check_len("conv_w", p.conv_w.len(), g.channels() * CONV_WIDTH)?;
        GdnEngine::check_len("A_log", p.a_log.len(), g.hv)?;
        GdnEngine::check_len("dt_bias", p.dt_bias.len(), g.hv)?;
        GdnEngine::check_len("norm_w", p.norm_w.len(), g.dv)?;
        self.cuda.upload(
            &self.buf.conv_w,
            layer * g.channels() * CONV_WIDTH,
            &p.conv_w,
        )?;
        self.cuda.upload(&self.buf.a_log, layer * g.hv, &p.a_log)?;
        self.cuda
            .upload(&self.buf.dt_bias, layer * g.hv, &p.dt_bias)?;
        self.cuda.upload(&self.buf.norm_w, layer * g.dv, &p.norm_w)
    }

    /// Overwrite one layer's committed state (recurrent and conv).
    pub fn set_state(&mut self, layer: usize, s: &LayerState) -> Result<()> {
        self.check_layer(layer)?;
        let g = self.geometry;
        GdnEngine::check_len("state", s.s.len(), g.state_len())?;
        GdnEngine::check_len("conv_state", s.conv.len(), g.conv_state_len())?;
        self.cuda.upload(
            &self.buf.state,
            layer * g.state_len(),
            &tile_state(&g, &s.s),
        )?;
        self.cuda
            .upload(&self.buf.conv_state, layer * g.conv_state_len(), &s.conv)?;
        self.verified = None;
        Ok(())
    }

    /// Parameters and initial state of every layer from `inputs`.
    pub fn load_inputs(&mut self, inputs: &Inputs) -> Result<()> {
        if inputs.geometry() != &self.geometry {
            return Err(EngineError::GeometryMismatch {
                inputs: inputs.describe(),
            });
        }
        for l in 0..self.geometry.layers {
            self.set_params(l, &inputs.params(l))?;
            self.set_state(l, &inputs.initial_state(l))?;
        }
        Ok(())
    }

    /// Put `tokens[l]` (the same count n ≤ window for every layer) into the input buffers.
    pub fn stage(&mut self, tokens: &[LayerTokens]) -> Result<()> {
        let g = self.geometry;
        GdnEngine::check_len("layers of tokens", tokens.len(), g.layers)?;
        let n = tokens.first().map(|t| t.n).unwrap_or(0);
        g.check_tokens(n)?;
        for (l, t) in tokens.iter().enumerate() {
            if t.n != n {
                return Err(EngineError::UnevenWindow {
                    layer: l,
                    got: t.n,
                    first: n,
                });
            }
            GdnEngine::check_len("x", t.x.len(), n * g.channels())?;
            GdnEngine::check_len("z", t.z.len(), n * g.value_width())?;
            GdnEngine::check_len("a", t.a.len(), n * g.hv)?;
            GdnEngine::check_len("b", t.b.len(), n * g.hv)?;
            let tw = g.window;
            self.cuda.upload(&self.buf.x, l * tw * g.channels(), &t.x)?;
            self.cuda
                .upload(&self.buf.z, l * tw * g.value_width(), &t.z)?;
            self.cuda.upload(&self.buf.a, l * tw * g.hv, &t.a)?;
            self.cuda.upload(&self.buf.b, l * tw * g.hv, &t.b)?;
        }
        self.staged = n;
        Ok(())
    }

    /// Verify `tokens` (all layers): stage them, then [`Self::launch_forward`].
    pub fn forward(&mut self, tokens: &[LayerTokens], path: Path) -> Result<()> {
        self.stage(tokens)?;
        self.launch_forward(self.staged, path)
    }

    /// Verify the first `t` staged tokens of every layer (launches only; the stream orders them).
    pub fn launch_forward(&mut self, t: usize, path: Path) -> Result<()> {
        self.geometry.check_tokens(t)?;
        if t > self.staged {
            return Err(EngineError::NotStaged {
                tokens: t,
                staged: self.staged,
            });
        }
        for l in 0..self.geometry.layers {
            // Layer 0 follows whatever came before (a commit writes the state): a plain launch.
            let overlap = self.overlap_layers && path == Path::Fused && l > 0;
            self.launch_forward_layers(l, 1, t, path, overlap)?;
        }
        self.verified = Some(t);
        Ok(())
    }

    fn cfg(&self, grid: (u32, u32, u32), block: u32) -> LaunchConfig {
        LaunchConfig {
            grid,
            block: (block, 1, 1),
            shared_bytes: 0,
            stream: self.cuda.stream(),
            programmatic: false,
            cluster: 1,
            cooperative: false,
        }
    }

    fn launch_err(entry: &str) -> impl Fn(kbuild_loader::LoaderError) -> EngineError + '_ {
        move |source| EngineError::Loader {
            what: format!("launching `{entry}`"),
            source,
        }
    }

    /// The conv of `t` staged tokens of `layer`; with `state_out`, also gdn_conv's optional
    /// conv-state output (advanced by all t tokens) into that buffer.
    pub fn launch_conv(&self, layer: usize, t: usize, state_out: Option<&Buffer>) -> Result<()> {
        self.launch_conv_layers(layer, 1, t, state_out)
    }

    fn launch_conv_layers(
        &self,
        layer: usize,
        layers: usize,
        t: usize,
        state_out: Option<&Buffer>,
    ) -> Result<()> {
        let g = self.geometry;
        let (tt, tw, hk, hv, l0) = (
            i32_of(t, "tokens")?,
            i32_of(g.window, "window")?,
            i32_of(g.hk, "hk")?,
            i32_of(g.hv, "hv")?,
            i32_of(layer, "layer")?,
        );
        let b = &self.buf;
        let out = state_out.map(|s| s.at(0)).unwrap_or(DevicePtr(0));
        let nz = u32::try_from(layers).unwrap_or(u32::MAX);
        let cfg = self.cfg(
            (u32::try_from(2 * g.hk + g.hv).unwrap_or(u32::MAX), 1, nz),
            128,
        );
        // SAFETY: the arguments are gdn_conv's (kernels/gdn/gdn_conv.cu) and every buffer is
        // sized for the whole stack.
        unsafe {
            self.kernels.conv.launch(
                &cfg,
                &(
                    b.x.at(0),
                    b.conv_w.at(0),
                    b.conv_state.at(0),
                    out,
                    b.qkv.at(0),
                    tt,
                    tw,
                    hk,
                    hv,
                    l0,
                ),
            )
        }
        .map_err(GdnEngine::launch_err(plan::CONV))
    }

    /// One layer's forward of `t` staged tokens.
    pub fn launch_forward_layer(&self, layer: usize, t: usize, path: Path) -> Result<()> {
        self.launch_forward_layers(layer, 1, t, path, false)
    }

    /// Every layer's forward of `t` staged tokens with one launch per kernel (the grid covers
    /// the layers): bitwise the per-layer forward. For inputs that are all known up front
    /// (benchmarks, a stack whose layers are independent); a model's layers feed each other
    /// and go layer by layer.
    pub fn launch_forward_stack(&mut self, t: usize, path: Path) -> Result<()> {
        self.geometry.check_tokens(t)?;
        if t > self.staged {
            return Err(EngineError::NotStaged {
                tokens: t,
                staged: self.staged,
            });
        }
        self.launch_forward_layers(0, self.geometry.layers, t, path, false)?;
        self.verified = Some(t);
        Ok(())
    }

    /// The delta-rule recurrence alone (gdn_step_verify: staged q, k, v, g, β → o, the state
    /// untouched) of `t` tokens, one launch per layer: the work of FLA's
    /// `fused_recurrent_gated_delta_rule` without a final state, for benchmarks. Reads the
    /// qkv, g and β scratch of the last forward of at least `t` tokens.
    pub fn launch_recurrence(&self, t: usize) -> Result<()> {
        self.check_recurrence(t)?;
        for l in 0..self.geometry.layers {
            self.launch_step_verify_layers(l, 1, t)?;
        }
        Ok(())
    }

    /// [`Self::launch_recurrence`] with one launch for every layer.
    pub fn launch_recurrence_stack(&self, t: usize) -> Result<()> {
        self.check_recurrence(t)?;
        self.launch_step_verify_layers(0, self.geometry.layers, t)
    }

    fn check_recurrence(&self, t: usize) -> Result<()> {
        self.geometry.check_tokens(t)?;
        match self.verified {
            Some(v) if v >= t => Ok(()),
            _ => Err(EngineError::NoForward { tokens: t }),
        }
    }

    fn launch_step_verify_layers(&self, layer: usize, layers: usize, t: usize) -> Result<()> {
        let g = self.geometry;
        let (tw, hk, hv, l0) = (
            i32_of(g.window, "window")?,
            i32_of(g.hk, "hk")?,
            i32_of(g.hv, "hv")?,
            i32_of(layer, "layer")?,
        );
        let f = t
            .checked_sub(1)
            .and_then(|i| self.kernels.step_verify.get(i))
            .ok_or(EngineError::NoKernel {
                kernel: "step",
                tokens: t,
            })?;
        let nz = u32::try_from(layers).unwrap_or(u32::MAX);
        let hv32 = u32::try_from(g.hv).unwrap_or(u32::MAX);
        let cols = u32::try_from(g.dv / 32).unwrap_or(u32::MAX);
        let cfg = self.cfg((cols, hv32, nz), STEP_THREADS);
        let b = &self.buf;
        // SAFETY: gdn_step_verify's arguments (kernels/gdn/gdn_step.cu); every buffer is sized
        // for the whole stack.
        unsafe {
            f.launch(
                &cfg,
                &(
                    b.qkv.at(0),
                    b.g.at(0),
                    b.beta.at(0),
                    b.state.at(0),
                    b.o.at(0),
                    tw,
                    hk,
                    hv,
                    l0,
                ),
            )
        }
        .map_err(GdnEngine::launch_err(plan::STEP_VERIFY))
    }

    fn launch_forward_layers(
        &self,
        layer: usize,
        layers: usize,
        t: usize,
        path: Path,
        programmatic: bool,
    ) -> Result<()> {
        let nz = u32::try_from(layers).unwrap_or(u32::MAX);
        let g = self.geometry;
        let (tt, tw, hk, hv, l0) = (
            i32_of(t, "tokens")?,
            i32_of(g.window, "window")?,
            i32_of(g.hk, "hk")?,
            i32_of(g.hv, "hv")?,
            i32_of(layer, "layer")?,
        );
        let eps = g.norm_eps;
        let b = &self.buf;
        let hv32 = u32::try_from(g.hv).unwrap_or(u32::MAX);
        let Some(idx) = t.checked_sub(1) else {
            return Err(g
                .check_tokens(0)
                .err()
                .map(EngineError::from)
                .unwrap_or(EngineError::NoTokens));
        };
        match path {
            Path::Unfused => {
                self.launch_conv_layers(layer, layers, t, None)?;
                let cfg = self.cfg(
                    (
                        u32::try_from((t * g.hv).div_ceil(128)).unwrap_or(u32::MAX),
                        1,
                        nz,
                    ),
                    128,
                );
                // SAFETY: gdn_gates' arguments (kernels/gdn/gdn_gates.cu).
                unsafe {
                    self.kernels.gates.launch(
                        &cfg,
                        &(
                            b.a.at(0),
                            b.b.at(0),
                            b.a_log.at(0),
                            b.dt_bias.at(0),
                            b.g.at(0),
                            b.beta.at(0),
                            tt,
                            tw,
                            hv,
                            l0,
                        ),
                    )
                }
                .map_err(GdnEngine::launch_err(plan::GATES))?;
                self.launch_step_verify_layers(layer, layers, t)?;
                let cfg = self.cfg((hv32, u32::try_from(t).unwrap_or(u32::MAX), nz), 128);
                // SAFETY: gdn_norm's arguments (kernels/gdn/gdn_norm.cu).
                unsafe {
                    self.kernels.norm.launch(
                        &cfg,
                        &(
                            b.o.at(0),
                            b.z.at(0),
                            b.norm_w.at(0),
                            b.y.at(0),
                            tt,
                            tw,
                            hv,
                            eps,
                            l0,
                        ),
                    )
                }
                .map_err(GdnEngine::launch_err(plan::NORM))
            }
            Path::Fused => {
                let f = self.kernels.fused.get(idx).ok_or(EngineError::NoKernel {
                    kernel: "fused",
                    tokens: t,
                })?;
                let cols = u32::try_from(g.dv / 32).unwrap_or(u32::MAX);
                let cfg = self
                    .cfg((cols, hv32, nz), STEP_THREADS)
                    .programmatic(programmatic);
                let mut ptrs = [
                    b.x.at(0),
                    b.z.at(0),
                    b.a.at(0),
                    b.b.at(0),
                    b.conv_w.at(0),
                    b.a_log.at(0),
                    b.dt_bias.at(0),
                    b.norm_w.at(0),
                    b.conv_state.at(0),
                    b.state.at(0),
                    b.qkv.at(0),
                    b.g.at(0),
                    b.beta.at(0),
                    b.o.at(0),
                    b.y.at(0),
                    b.norm_part.at(0),
                    b.norm_count.at(0),
                ];
                let mut ints = [tw, hk, hv];
                let mut eps = eps;
                let mut l0 = l0;
                let mut params: Vec<*mut c_void> = ptrs
                    .iter_mut()
                    .map(|p| (p as *mut DevicePtr).cast())
                    .collect();
                params.extend(ints.iter_mut().map(|v| (v as *mut i32).cast::<c_void>()));
                params.push((&mut eps as *mut f32).cast());
                params.push((&mut l0 as *mut i32).cast());
                let mut sizes = vec![std::mem::size_of::<DevicePtr>(); ptrs.len()];
                sizes.extend([std::mem::size_of::<i32>(); 3]);
                sizes.extend([std::mem::size_of::<f32>(), std::mem::size_of::<i32>()]);
                // SAFETY: gdn_fused_verify's 22 parameters in order (kernels/gdn/gdn_fused.cu),
                // pointing at locals alive for the call (and checked against its parameters).
                unsafe { f.launch_raw(&cfg, &mut params, &sizes) }
                    .map_err(GdnEngine::launch_err(plan::FUSED_VERIFY))
            }
        }
    }

    /// Advance the committed state by the first `n` tokens of the last forward.
    pub fn commit(&mut self, n: usize, mode: CommitMode) -> Result<()> {
        let verified = self.verified.unwrap_or(0);
        self.geometry.check_commit(n, verified)?;
        self.launch_commit(n, mode)?;
        // The committed state moved: the scratch now describes tokens of an older state.
        self.verified = None;
        Ok(())
    }

    /// The commit launches alone (for capture and benchmarks, where the same verified window
    /// is committed repeatedly); `n` must not exceed the staged window.
    pub fn launch_commit(&self, n: usize, mode: CommitMode) -> Result<()> {
        let g = self.geometry;
        g.check_commit(n, self.staged)?;
        let f = self
            .kernels
            .step_commit
            .get(n - 1)
            .ok_or(EngineError::NoKernel {
                kernel: "commit",
                tokens: n,
            })?;
        let (tw, hk, hv) = (
            i32_of(g.window, "window")?,
            i32_of(g.hk, "hk")?,
            i32_of(g.hv, "hv")?,
        );
        let b = &self.buf;
        let resident = self
            .commit_grid
            .or_else(|| self.kernels.commit_blocks.get(n - 1).copied())
            .unwrap_or(1);
        let launch = |layer0: usize, layers: usize| -> Result<()> {
            // The kernel walks the launch's tiles: any grid is right, the resident one fastest.
            let blocks = u32::try_from(layers * g.hv * (g.dv / 32))
                .unwrap_or(u32::MAX)
                .min(resident);
            let cfg = self.cfg((blocks.max(1), 1, 1), STEP_THREADS);
            let nl = i32_of(layers, "layers")?;
            let l0 = i32_of(layer0, "layer")?;
            // SAFETY: gdn_step_commit's arguments (kernels/gdn/gdn_step.cu).
            unsafe {
                f.launch(
                    &cfg,
                    &(
                        b.qkv.at(0),
                        b.g.at(0),
                        b.beta.at(0),
                        b.x.at(0),
                        b.state.at(0),
                        b.conv_state.at(0),
                        tw,
                        hk,
                        hv,
                        l0,
                        nl,
                    ),
                )
            }
            .map_err(GdnEngine::launch_err(plan::STEP_COMMIT))
        };
        match mode {
            CommitMode::Batched => launch(0, g.layers),
            CommitMode::PerLayer => (0..g.layers).try_for_each(|l| launch(l, 1)),
        }
    }

    /// NaN-fill every output and scratch buffer (qkv, g, β, o, y), so that an element a
    /// kernel fails to write shows up.
    pub fn poison_outputs(&self) -> Result<()> {
        for b in [
            &self.buf.qkv,
            &self.buf.g,
            &self.buf.beta,
            &self.buf.o,
            &self.buf.y,
        ] {
            self.cuda.poison(b)?;
        }
        Ok(())
    }

    /// Record `work` (launches on the engine's stream) into a graph, to replay with
    /// [`Self::replay`]. Uploads and downloads cannot be captured (they synchronise).
    pub fn capture(&mut self, work: impl FnOnce(&mut GdnEngine) -> Result<()>) -> Result<Graph> {
        self.cuda.begin_capture()?;
        let worked = work(self);
        let graph = self.cuda.end_capture();
        worked?;
        graph
    }

    pub fn replay(&self, graph: &Graph) -> Result<()> {
        self.cuda.launch_graph(graph)
    }

    /// Layer `layer`'s rows `0..t` of a [L][tw][width] buffer.
    fn rows(&self, buf: &Buffer, width: usize, layer: usize, t: usize) -> Result<Vec<f32>> {
        self.check_layer(layer)?;
        self.cuda
            .download(buf, layer * self.geometry.window * width, t * width)
    }

    /// y of the last forward ([t][Hv·dv]) of `layer`.
    pub fn read_y(&self, layer: usize, t: usize) -> Result<Vec<f32>> {
        self.rows(&self.buf.y, self.geometry.value_width(), layer, t)
    }

    /// o of the last forward ([t][Hv·dv]).
    pub fn read_o(&self, layer: usize, t: usize) -> Result<Vec<f32>> {
        self.rows(&self.buf.o, self.geometry.value_width(), layer, t)
    }

    /// The conv outputs of the last forward ([t][C]).
    pub fn read_qkv(&self, layer: usize, t: usize) -> Result<Vec<f32>> {
        self.rows(&self.buf.qkv, self.geometry.channels(), layer, t)
    }

    /// g and β of the last forward ([t][Hv] each).
    pub fn read_gates(&self, layer: usize, t: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((
            self.rows(&self.buf.g, self.geometry.hv, layer, t)?,
            self.rows(&self.buf.beta, self.geometry.hv, layer, t)?,
        ))
    }

    /// The whole window's rows of y and o, [L][tw][Hv·dv] (to see what was left unwritten).
    pub fn read_all_outputs(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        Ok((
            self.cuda.download(&self.buf.y, 0, self.buf.y.len())?,
            self.cuda.download(&self.buf.o, 0, self.buf.o.len())?,
        ))
    }

    /// One layer's committed state.
    pub fn read_state(&self, layer: usize) -> Result<LayerState> {
        self.check_layer(layer)?;
        let g = self.geometry;
        Ok(LayerState {
            s: untile_state(
                &g,
                &self
                    .cuda
                    .download(&self.buf.state, layer * g.state_len(), g.state_len())?,
            ),
            conv: self.cuda.download(
                &self.buf.conv_state,
                layer * g.conv_state_len(),
                g.conv_state_len(),
            )?,
        })
    }

    /// One layer of the spare conv-state buffer (see [`Self::launch_conv`]).
    pub fn read_conv_spare(&self, layer: usize) -> Result<Vec<f32>> {
        self.check_layer(layer)?;
        let n = self.geometry.conv_state_len();
        self.cuda.download(&self.buf.conv_spare, layer * n, n)
    }

    /// Tokens the last forward verified.
    pub fn verified(&self) -> Option<usize> {
        self.verified
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_tiling_is_a_permutation_that_round_trips() {
        let g = Geometry::with_layers(1);
        let hs = g.dk * g.dv;
        let mut seen = vec![false; hs];
        for i in 0..g.dk {
            for j in 0..g.dv {
                let o = state_offset(&g, i, j);
                assert!(!seen[o], "({i}, {j}) collides");
                seen[o] = true;
            }
        }
        assert!(seen.iter().all(|s| *s));
        // The kernels' lane (column group cg, part p, column c) reads row r at
        // cg·dk·8 + p·8 + c + r·32 (gdn_state_lane, GDN_STATE_STEP).
        let rows = g.dk / STATE_PARTS;
        for (cg, p, c, r) in [(0, 0, 0, 0), (3, 2, 5, 7), (15, 3, 7, rows - 1)] {
            assert_eq!(
                state_offset(
                    &g,
                    p * rows + r,
                    cg * STATE_COLS_PER_GROUP + c % STATE_COLS_PER_GROUP
                ),
                cg * g.dk * STATE_COLS_PER_GROUP
                    + p * STATE_COLS_PER_GROUP
                    + c % STATE_COLS_PER_GROUP
                    + r * 32
            );
        }
        let s: Vec<f32> = (0..2 * hs).map(|v| v as f32).collect();
        let t = tile_state(&g, &s);
        assert_ne!(t, s);
        assert_eq!(untile_state(&g, &t), s);
    }
}
