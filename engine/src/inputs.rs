//! Inputs of a GDN stack: per-layer parameters, the initial committed state, and the stream of
//! per-token projections (q|k|v mixed `x`, `z`, `a`, `b`), from a seeded generator with
//! realistic ranges or from a safetensors file.
//!
//! The generator is counter-based: token `t` of layer `l` is a pure function of (seed, l, t),
//! so a 256-step trajectory needs no storage and any window can be regenerated.
//!
//! safetensors layout (F32, layers stacked on the first axis; `N` tokens):
//!
//! | tensor | shape |
//! |---|---|
//! | `conv_w` | [L, C, 4] |
//! | `A_log`, `dt_bias` | [L, Hv] |
//! | `norm_w` | [L, dv] |
//! | `x` | [L, N, C] |
//! | `z` | [L, N, Hv·dv] |
//! | `a`, `b` | [L, N, Hv] |
//! | `state` (optional, zeros) | [L, Hv, dk, dv] |
//! | `conv_state` (optional, zeros) | [L, 3, C] |

use std::collections::BTreeMap;

use crate::geometry::{Geometry, CONV_WIDTH};

/// A tensor as read: shape and f32 values.
type Tensor = (Vec<usize>, Vec<f32>);

/// Per-layer parameters, f32 as the kernels take them.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerParams {
    /// [C][4], oldest tap first.
    pub conv_w: Vec<f32>,
    /// [Hv]
    pub a_log: Vec<f32>,
    /// [Hv]
    pub dt_bias: Vec<f32>,
    /// [dv]
    pub norm_w: Vec<f32>,
}

/// `n` consecutive tokens of one layer's projected inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTokens {
    pub n: usize,
    /// [n][C]
    pub x: Vec<f32>,
    /// [n][Hv·dv]
    pub z: Vec<f32>,
    /// [n][Hv]
    pub a: Vec<f32>,
    /// [n][Hv]
    pub b: Vec<f32>,
}

impl LayerTokens {
    /// Tokens `start..start + n` of this window.
    pub fn slice(&self, g: &Geometry, start: usize, n: usize) -> LayerTokens {
        let (c, w, h) = (g.channels(), g.value_width(), g.hv);
        LayerTokens {
            n,
            x: self.x[start * c..(start + n) * c].to_vec(),
            z: self.z[start * w..(start + n) * w].to_vec(),
            a: self.a[start * h..(start + n) * h].to_vec(),
            b: self.b[start * h..(start + n) * h].to_vec(),
        }
    }
}

/// One layer's committed state, f32 as the device holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// [Hv][dk][dv]
    pub s: Vec<f32>,
    /// [3][C]
    pub conv: Vec<f32>,
}

/// Why inputs could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {what}")]
    File { path: String, what: String },
    #[error("{path}: tensor `{tensor}`: {what}")]
    Tensor {
        path: String,
        tensor: String,
        what: String,
    },
    #[error("tokens {start}..{end} of the inputs: the file holds {available} token(s); hint: run fewer steps or write more tokens into the file")]
    OutOfTokens {
        start: usize,
        end: usize,
        available: usize,
    },
}

/// Where the numbers come from.
#[derive(Debug, Clone)]
pub enum Inputs {
    Seeded(Seeded),
    Loaded(Box<LoadedInputs>),
}

impl Inputs {
    pub fn seeded(geometry: Geometry, seed: u64) -> Inputs {
        Inputs::Seeded(Seeded { geometry, seed })
    }

    pub fn geometry(&self) -> &Geometry {
        match self {
            Inputs::Seeded(s) => &s.geometry,
            Inputs::Loaded(l) => &l.geometry,
        }
    }

    /// Human-readable origin (`seed 7`, a file path).
    pub fn describe(&self) -> String {
        match self {
            Inputs::Seeded(s) => format!("seed {}", s.seed),
            Inputs::Loaded(l) => l.path.clone(),
        }
    }

    pub fn params(&self, layer: usize) -> LayerParams {
        match self {
            Inputs::Seeded(s) => s.params(layer),
            Inputs::Loaded(l) => l.params[layer].clone(),
        }
    }

    pub fn initial_state(&self, layer: usize) -> LayerState {
        match self {
            Inputs::Seeded(s) => s.initial_state(layer),
            Inputs::Loaded(l) => l.state[layer].clone(),
        }
    }

    /// Tokens `start..start + n` of `layer`.
    pub fn tokens(&self, layer: usize, start: usize, n: usize) -> Result<LayerTokens, InputError> {
        match self {
            Inputs::Seeded(s) => Ok(s.tokens(layer, start, n)),
            Inputs::Loaded(l) => {
                if start + n > l.n_tokens {
                    return Err(InputError::OutOfTokens {
                        start,
                        end: start + n,
                        available: l.n_tokens,
                    });
                }
                Ok(l.tokens[layer].slice(&l.geometry, start, n))
            }
        }
    }

    /// Load a safetensors file (layout in the module docs), checking every shape against
    /// `geometry`.
    pub fn from_safetensors(
        path: &str,
        bytes: &[u8],
        geometry: Geometry,
    ) -> Result<Inputs, InputError> {
        LoadedInputs::parse(path, bytes, geometry).map(|l| Inputs::Loaded(Box::new(l)))
    }

    /// Write parameters, initial state and tokens `0..n` in the safetensors layout (plus any
    /// `extra` tensors: f32, shape given), e.g. for a side-by-side run in another framework.
    pub fn to_safetensors(
        &self,
        n: usize,
        extra: Vec<(String, Vec<usize>, Vec<f32>)>,
    ) -> Result<Vec<u8>, InputError> {
        let g = *self.geometry();
        let (l, c) = (g.layers, g.channels());
        let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
        let mut stack = |name: &str,
                         shape: Vec<usize>,
                         f: &mut dyn FnMut(usize) -> Result<Vec<f32>, InputError>|
         -> Result<(), InputError> {
            let mut data = Vec::new();
            for layer in 0..l {
                data.extend(f(layer)?);
            }
            tensors.push((name.to_string(), shape, data));
            Ok(())
        };
        stack("conv_w", vec![l, c, CONV_WIDTH], &mut |i| {
            Ok(self.params(i).conv_w)
        })?;
        stack("A_log", vec![l, g.hv], &mut |i| Ok(self.params(i).a_log))?;
        stack("dt_bias", vec![l, g.hv], &mut |i| {
            Ok(self.params(i).dt_bias)
        })?;
        stack("norm_w", vec![l, g.dv], &mut |i| Ok(self.params(i).norm_w))?;
        stack("state", vec![l, g.hv, g.dk, g.dv], &mut |i| {
            Ok(self.initial_state(i).s)
        })?;
        stack("conv_state", vec![l, CONV_WIDTH - 1, c], &mut |i| {
            Ok(self.initial_state(i).conv)
        })?;
        stack("x", vec![l, n, c], &mut |i| Ok(self.tokens(i, 0, n)?.x))?;
        stack("z", vec![l, n, g.value_width()], &mut |i| {
            Ok(self.tokens(i, 0, n)?.z)
        })?;
        stack("a", vec![l, n, g.hv], &mut |i| Ok(self.tokens(i, 0, n)?.a))?;
        stack("b", vec![l, n, g.hv], &mut |i| Ok(self.tokens(i, 0, n)?.b))?;
        tensors.extend(extra);
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(n, s, d)| (n, s, d.iter().flat_map(|v| v.to_le_bytes()).collect()))
            .collect();
        let mut views = Vec::with_capacity(bytes.len());
        for (name, shape, data) in &bytes {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .map_err(|e| InputError::Tensor {
                        path: "<output>".into(),
                        tensor: name.clone(),
                        what: e.to_string(),
                    })?;
            views.push((name.clone(), view));
        }
        let mut meta = std::collections::HashMap::new();
        meta.insert(
            "geometry".to_string(),
            serde_json::to_string(&g).unwrap_or_default(),
        );
        meta.insert("source".to_string(), self.describe());
        safetensors::serialize(views, Some(meta)).map_err(|e| InputError::File {
            path: "<output>".into(),
            what: e.to_string(),
        })
    }
}

// --------------------------------------------------------------------------------- seeded

/// The seeded generator (ranges in [`Seeded::params`], [`Seeded::tokens`]).
#[derive(Debug, Clone)]
pub struct Seeded {
    pub geometry: Geometry,
    pub seed: u64,
}

/// Streams of the counter-based generator.
#[derive(Clone, Copy)]
#[repr(u64)]
enum Stream {
    ConvW = 1,
    ALog,
    DtBias,
    NormW,
    State,
    ConvState,
    X,
    Z,
    A,
    B,
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finaliser
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Counter-based generator of one (seed, stream, layer, token) sequence.
struct Gen {
    base: u64,
}

impl Gen {
    fn new(seed: u64, stream: Stream, layer: usize, token: usize) -> Gen {
        let k = mix(seed ^ 0x6a09_e667_f3bc_c908);
        let k = mix(k ^ (stream as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let k = mix(k ^ (layer as u64).wrapping_mul(0xbb67_ae85_84ca_a73b));
        let k = mix(k ^ (token as u64).wrapping_mul(0x3c6e_f372_fe94_f82b));
        Gen { base: k }
    }

    /// Uniform in [0, 1) for element `i` (and sub-draw `j`).
    fn uniform(&self, i: usize, j: u64) -> f64 {
        let z = mix(self.base ^ mix((i as u64) << 1 | j));
        (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn range(&self, i: usize, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform(i, 0)
    }

    /// Standard normal (Box–Muller) for element `i`.
    fn normal(&self, i: usize) -> f64 {
        let u1 = 1.0 - self.uniform(i, 0); // (0, 1]
        let u2 = self.uniform(i, 1);
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    fn normals(&self, n: usize, sigma: f64) -> Vec<f32> {
        (0..n).map(|i| (sigma * self.normal(i)) as f32).collect()
    }
}

/// softplus⁻¹(y) = ln(e^y − 1)
pub fn softplus_inv(y: f64) -> f64 {
    y.exp_m1().ln()
}

impl Seeded {
    /// conv_w ~ U(−0.5, 0.5) (PyTorch's Conv1d init for 4 taps), A_log = ln U(1, 16),
    /// dt_bias = softplus⁻¹(U(0.001, 0.1)), norm_w ~ U(0.8, 1.2).
    pub fn params(&self, layer: usize) -> LayerParams {
        let g = &self.geometry;
        let s = self.seed;
        let conv = Gen::new(s, Stream::ConvW, layer, 0);
        let alog = Gen::new(s, Stream::ALog, layer, 0);
        let dt = Gen::new(s, Stream::DtBias, layer, 0);
        let nw = Gen::new(s, Stream::NormW, layer, 0);
        LayerParams {
            conv_w: (0..g.channels() * CONV_WIDTH)
                .map(|i| conv.range(i, -0.5, 0.5) as f32)
                .collect(),
            a_log: (0..g.hv)
                .map(|i| alog.range(i, 1.0, 16.0).ln() as f32)
                .collect(),
            dt_bias: (0..g.hv)
                .map(|i| softplus_inv(dt.range(i, 0.001, 0.1)) as f32)
                .collect(),
            norm_w: (0..g.dv).map(|i| nw.range(i, 0.8, 1.2) as f32).collect(),
        }
    }

    /// S ~ N(0, 0.05²) (a warmed-up state's scale), conv state ~ N(0, 1) (raw projections).
    pub fn initial_state(&self, layer: usize) -> LayerState {
        let g = &self.geometry;
        LayerState {
            s: Gen::new(self.seed, Stream::State, layer, 0).normals(g.state_len(), 0.05),
            conv: Gen::new(self.seed, Stream::ConvState, layer, 0).normals(g.conv_state_len(), 1.0),
        }
    }

    /// Projections of a normalised hidden state: x, z, a, b ~ N(0, 1).
    pub fn tokens(&self, layer: usize, start: usize, n: usize) -> LayerTokens {
        let g = &self.geometry;
        let mut t = LayerTokens {
            n,
            x: Vec::with_capacity(n * g.channels()),
            z: Vec::with_capacity(n * g.value_width()),
            a: Vec::with_capacity(n * g.hv),
            b: Vec::with_capacity(n * g.hv),
        };
        for tok in start..start + n {
            t.x.extend(Gen::new(self.seed, Stream::X, layer, tok).normals(g.channels(), 1.0));
            t.z.extend(Gen::new(self.seed, Stream::Z, layer, tok).normals(g.value_width(), 1.0));
            t.a.extend(Gen::new(self.seed, Stream::A, layer, tok).normals(g.hv, 1.0));
            t.b.extend(Gen::new(self.seed, Stream::B, layer, tok).normals(g.hv, 1.0));
        }
        t
    }
}

// --------------------------------------------------------------------------------- loaded

/// Inputs read from a safetensors file.
#[derive(Debug, Clone)]
pub struct LoadedInputs {
    pub geometry: Geometry,
    pub path: String,
    pub n_tokens: usize,
    pub params: Vec<LayerParams>,
    pub state: Vec<LayerState>,
    /// Per layer, all `n_tokens` tokens.
    pub tokens: Vec<LayerTokens>,
}

impl LoadedInputs {
    fn parse(path: &str, bytes: &[u8], g: Geometry) -> Result<LoadedInputs, InputError> {
        let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| InputError::File {
            path: path.to_string(),
            what: format!("not a safetensors file: {e}"),
        })?;
        let mut found: BTreeMap<String, Tensor> = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(InputError::Tensor {
                    path: path.to_string(),
                    tensor: name,
                    what: format!("dtype {:?}; expected F32", view.dtype()),
                });
            }
            let data: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            found.insert(name, (view.shape().to_vec(), data));
        }
        let (l, c) = (g.layers, g.channels());
        let mut take = |name: &str,
                        want: &[Option<usize>],
                        optional: bool|
         -> Result<Option<Tensor>, InputError> {
            let Some((shape, data)) = found.remove(name) else {
                if optional {
                    return Ok(None);
                }
                return Err(InputError::Tensor {
                    path: path.to_string(),
                    tensor: name.to_string(),
                    what: "missing".into(),
                });
            };
            let fits = shape.len() == want.len()
                && shape
                    .iter()
                    .zip(want)
                    .all(|(s, w)| w.is_none_or(|w| w == *s));
            if !fits {
                let want: Vec<String> = want
                    .iter()
                    .map(|w| w.map(|w| w.to_string()).unwrap_or_else(|| "N".into()))
                    .collect();
                return Err(InputError::Tensor {
                    path: path.to_string(),
                    tensor: name.to_string(),
                    what: format!(
                        "shape {shape:?}; the geometry (L = {}, C = {c}, Hv = {}, dk = {}, dv = {}) needs [{}]",
                        g.layers,
                        g.hv,
                        g.dk,
                        g.dv,
                        want.join(", ")
                    ),
                });
            }
            Ok(Some((shape, data)))
        };
        let req = |v: Option<Tensor>| v.map(|(_, d)| d).unwrap_or_default();
        let conv_w = req(take(
            "conv_w",
            &[Some(l), Some(c), Some(CONV_WIDTH)],
            false,
        )?);
        let a_log = req(take("A_log", &[Some(l), Some(g.hv)], false)?);
        let dt_bias = req(take("dt_bias", &[Some(l), Some(g.hv)], false)?);
        let norm_w = req(take("norm_w", &[Some(l), Some(g.dv)], false)?);
        let (xs, x) = take("x", &[Some(l), None, Some(c)], false)?.unwrap_or_default();
        let n = xs.get(1).copied().unwrap_or(0);
        let z = req(take(
            "z",
            &[Some(l), Some(n), Some(g.value_width())],
            false,
        )?);
        let a = req(take("a", &[Some(l), Some(n), Some(g.hv)], false)?);
        let b = req(take("b", &[Some(l), Some(n), Some(g.hv)], false)?);
        let state = take(
            "state",
            &[Some(l), Some(g.hv), Some(g.dk), Some(g.dv)],
            true,
        )?
        .map(|(_, d)| d)
        .unwrap_or_else(|| vec![0.0; l * g.state_len()]);
        let conv_state = take(
            "conv_state",
            &[Some(l), Some(CONV_WIDTH - 1), Some(c)],
            true,
        )?
        .map(|(_, d)| d)
        .unwrap_or_else(|| vec![0.0; l * g.conv_state_len()]);
        let per = |v: &[f32], i: usize, len: usize| v[i * len..(i + 1) * len].to_vec();
        Ok(LoadedInputs {
            geometry: g,
            path: path.to_string(),
            n_tokens: n,
            params: (0..l)
                .map(|i| LayerParams {
                    conv_w: per(&conv_w, i, c * CONV_WIDTH),
                    a_log: per(&a_log, i, g.hv),
                    dt_bias: per(&dt_bias, i, g.hv),
                    norm_w: per(&norm_w, i, g.dv),
                })
                .collect(),
            state: (0..l)
                .map(|i| LayerState {
                    s: per(&state, i, g.state_len()),
                    conv: per(&conv_state, i, g.conv_state_len()),
                })
                .collect(),
            tokens: (0..l)
                .map(|i| LayerTokens {
                    n,
                    x: per(&x, i, n * c),
                    z: per(&z, i, n * g.value_width()),
                    a: per(&a, i, n * g.hv),
                    b: per(&b, i, n * g.hv),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Geometry {
        Geometry {
            dk: 8,
            dv: 4,
            hk: 2,
            hv: 4,
            layers: 2,
            window: 4,
            norm_eps: 1e-6,
        }
    }

    #[test]
    fn seeded_ranges_are_realistic_and_deterministic() {
        let g = Geometry::with_layers(1);
        let s = Seeded {
            geometry: g,
            seed: 3,
        };
        let p = s.params(0);
        for &v in &p.a_log {
            assert!((0.0..=16f32.ln()).contains(&v), "A_log {v}");
        }
        for &v in &p.dt_bias {
            let dt = (v as f64).exp().ln_1p();
            assert!(
                (0.000_999..=0.100_01).contains(&dt),
                "softplus(dt_bias) {dt}"
            );
        }
        assert!(p.conv_w.iter().all(|v| (-0.5..0.5).contains(v)));
        let t = s.tokens(0, 5, 2);
        assert_eq!(t.x.len(), 2 * g.channels());
        let mean = t.x.iter().map(|v| *v as f64).sum::<f64>() / t.x.len() as f64;
        let var = t.x.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / t.x.len() as f64;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "mean {mean} var {var}"
        );
        // Counter-based: token 6 is the same alone or inside a window.
        assert_eq!(s.tokens(0, 6, 1), t.slice(&g, 1, 1));
        assert_ne!(
            Seeded {
                geometry: g,
                seed: 4
            }
            .tokens(0, 5, 1)
            .x,
            s.tokens(0, 5, 1).x
        );
    }

    #[test]
    fn safetensors_round_trip_and_shape_errors() {
        let g = small();
        let inputs = Inputs::seeded(g, 9);
        let bytes = inputs.to_safetensors(3, Vec::new()).unwrap();
        let loaded = Inputs::from_safetensors("in.safetensors", &bytes, g).unwrap();
        for l in 0..g.layers {
            assert_eq!(loaded.params(l), inputs.params(l));
            assert_eq!(loaded.initial_state(l), inputs.initial_state(l));
            assert_eq!(
                loaded.tokens(l, 1, 2).unwrap(),
                inputs.tokens(l, 1, 2).unwrap()
            );
        }
        let e = loaded.tokens(0, 2, 2).unwrap_err();
        assert!(e.to_string().contains("holds 3 token(s)"), "{e}");

        let other = Geometry { hv: 6, ..g };
        let e = Inputs::from_safetensors("in.safetensors", &bytes, other).unwrap_err();
        assert!(e.to_string().contains("in.safetensors: tensor `"), "{e}");
        assert!(e.to_string().contains("needs ["), "{e}");
        let e = Inputs::from_safetensors("junk.bin", b"not a file", g).unwrap_err();
        assert!(
            e.to_string().contains("junk.bin: not a safetensors file"),
            "{e}"
        );
    }
}
