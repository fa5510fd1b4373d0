//! fp64 CPU reference of every GDN step, used by the tests and by
//! `kbuild run gdn --check`:
//!
//! * [`conv_silu_l2`]: causal conv1d (width 4) over the conv state ++ the new tokens, SiLU,
//!   per-head L2 norm of q and k, q scaled by 1/√dk;
//! * [`gates`]: g = −exp(A_log)·softplus(a + dt_bias), β = sigmoid(b);
//! * [`delta_verify`] / [`delta_commit`]: per value head h (key head h·Hk/Hv) and token,
//!   `S ← e^g·S`, `u = v − Sᵀk`, `S ← S + β·k⊗u`, `o = Sᵀq`;
//! * [`gated_norm`]: y = o/√(mean(o²)+ε) · w · silu(z);
//! * [`Reference`]: the stack, layer by layer (threads over layers), with verify/commit.
//!
//! [`naive`] is an independent formulation of the same math (the delta rule in matrix form
//! S_t = S_{t−1}(e^{g_t}(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ on the transposed state, the conv as
//! a sum over the whole history, sigmoid through tanh), against which the loop form is tested.
//! The reference takes the f32 inputs the device gets, widened exactly.

use crate::geometry::{Geometry, CONV_WIDTH, L2_EPS};
use crate::inputs::{LayerParams, LayerState, LayerTokens};

/// What a verify of `n` tokens produced for one layer (all f64).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub n: usize,
    /// [n][C]: conv output, q and k normalised, q scaled.
    pub qkv: Vec<f64>,
    /// [n][Hv]
    pub g: Vec<f64>,
    /// [n][Hv]
    pub beta: Vec<f64>,
    /// [n][Hv·dv]: delta-rule output.
    pub o: Vec<f64>,
    /// [n][Hv·dv]: gated RMSNorm output.
    pub y: Vec<f64>,
    /// The state after all n tokens (what commit(n) writes), [Hv][dk][dv].
    pub state_after: Vec<f64>,
}

/// One layer's committed state in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct RefState {
    /// [Hv][dk][dv]
    pub s: Vec<f64>,
    /// [3][C]
    pub conv: Vec<f64>,
}

impl RefState {
    pub fn from_f32(state: &LayerState) -> RefState {
        RefState {
            s: state.s.iter().map(|v| *v as f64).collect(),
            conv: state.conv.iter().map(|v| *v as f64).collect(),
        }
    }
}

pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// softplus with PyTorch's threshold (x > 20 → x), as the kernels.
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Conv + SiLU + L2 norm of `n` tokens from `conv_state` ([3][C]); returns [n][C].
pub fn conv_silu_l2(
    g: &Geometry,
    conv_w: &[f32],
    conv_state: &[f64],
    x: &[f32],
    n: usize,
) -> Vec<f64> {
    let c = g.channels();
    let cs = CONV_WIDTH - 1;
    let win = |i: usize, ch: usize| -> f64 {
        if i < cs {
            conv_state[i * c + ch]
        } else {
            x[(i - cs) * c + ch] as f64
        }
    };
    let mut out = vec![0.0; n * c];
    for t in 0..n {
        for ch in 0..c {
            let mut acc = 0.0;
            for j in 0..CONV_WIDTH {
                acc += conv_w[ch * CONV_WIDTH + j] as f64 * win(t + j, ch);
            }
            out[t * c + ch] = silu(acc);
        }
        let qscale = 1.0 / (g.dk as f64).sqrt();
        for head in 0..2 * g.hk {
            let seg = &mut out[t * c + head * g.dk..t * c + (head + 1) * g.dk];
            let ss: f64 = seg.iter().map(|v| v * v).sum();
            let inv = 1.0 / (ss + L2_EPS).sqrt();
            let scale = if head < g.hk { inv * qscale } else { inv };
            seg.iter_mut().for_each(|v| *v *= scale);
        }
    }
    out
}

/// The conv state after `n` more tokens: the last 3 rows of (state ++ x[0..n)).
pub fn conv_advance(g: &Geometry, conv_state: &mut [f64], x: &[f32], n: usize) {
    let c = g.channels();
    let cs = CONV_WIDTH - 1;
    let mut rows: Vec<f64> = conv_state.to_vec();
    rows.extend(x[..n * c].iter().map(|v| *v as f64));
    conv_state.copy_from_slice(&rows[n * c..(n + cs) * c]);
}

/// Gates of `n` tokens: (g [n][Hv], β [n][Hv]).
pub fn gates(
    g: &Geometry,
    p: &LayerParams,
    a: &[f32],
    b: &[f32],
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut gg = vec![0.0; n * g.hv];
    let mut beta = vec![0.0; n * g.hv];
    for t in 0..n {
        for h in 0..g.hv {
            let i = t * g.hv + h;
            gg[i] = -(p.a_log[h] as f64).exp() * softplus(a[i] as f64 + p.dt_bias[h] as f64);
            beta[i] = 1.0 / (1.0 + (-(b[i] as f64)).exp());
        }
    }
    (gg, beta)
}

/// One token of the delta rule on head state `s` ([dk][dv]); returns o ([dv]) when `q` is given.
fn delta_token(
    g: &Geometry,
    s: &mut [f64],
    q: Option<&[f64]>,
    k: &[f64],
    v: &[f64],
    (gt, bt): (f64, f64),
    o: &mut [f64],
) {
    let (dk, dv) = (g.dk, g.dv);
    let eg = gt.exp();
    s.iter_mut().for_each(|x| *x *= eg);
    let mut u = v.to_vec();
    for i in 0..dk {
        for j in 0..dv {
            u[j] -= s[i * dv + j] * k[i];
        }
    }
    for i in 0..dk {
        for j in 0..dv {
            s[i * dv + j] += bt * k[i] * u[j];
        }
    }
    if let Some(q) = q {
        o.iter_mut().for_each(|x| *x = 0.0);
        for i in 0..dk {
            for j in 0..dv {
                o[j] += s[i * dv + j] * q[i];
            }
        }
    }
}

/// The slices of token t's q (key head kh), k (kh) and v (value head h) in a [n][C] qkv.
fn qkv_of<'a>(
    g: &Geometry,
    qkv: &'a [f64],
    t: usize,
    h: usize,
) -> (&'a [f64], &'a [f64], &'a [f64]) {
    let c = g.channels();
    let kh = g.key_head(h);
    let row = &qkv[t * c..(t + 1) * c];
    let q = &row[kh * g.dk..(kh + 1) * g.dk];
    let k = &row[(g.hk + kh) * g.dk..(g.hk + kh + 1) * g.dk];
    let v0 = 2 * g.hk * g.dk + h * g.dv;
    (q, k, &row[v0..v0 + g.dv])
}

/// Outputs o ([n][Hv·dv]) of `n` tokens from state `s` ([Hv][dk][dv]), and the state after
/// them. `s` itself is not changed.
pub fn delta_verify(
    g: &Geometry,
    s: &[f64],
    qkv: &[f64],
    gg: &[f64],
    beta: &[f64],
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    let hs = g.dk * g.dv;
    let mut after = s.to_vec();
    let mut o = vec![0.0; n * g.value_width()];
    for h in 0..g.hv {
        let sh = &mut after[h * hs..(h + 1) * hs];
        for t in 0..n {
            let (q, k, v) = qkv_of(g, qkv, t, h);
            let oh = &mut o[t * g.value_width() + h * g.dv..t * g.value_width() + (h + 1) * g.dv];
            delta_token(
                g,
                sh,
                Some(q),
                k,
                v,
                (gg[t * g.hv + h], beta[t * g.hv + h]),
                oh,
            );
        }
    }
    (o, after)
}

/// Advance `s` by the first `n` tokens (no outputs).
pub fn delta_commit(g: &Geometry, s: &mut [f64], qkv: &[f64], gg: &[f64], beta: &[f64], n: usize) {
    let hs = g.dk * g.dv;
    let mut scratch = vec![0.0; g.dv];
    for h in 0..g.hv {
        let sh = &mut s[h * hs..(h + 1) * hs];
        for t in 0..n {
            let (_, k, v) = qkv_of(g, qkv, t, h);
            delta_token(
                g,
                sh,
                None,
                k,
                v,
                (gg[t * g.hv + h], beta[t * g.hv + h]),
                &mut scratch,
            );
        }
    }
}

/// Gated RMSNorm of `n` tokens: y [n][Hv·dv].
pub fn gated_norm(g: &Geometry, o: &[f64], z: &[f32], norm_w: &[f32], n: usize) -> Vec<f64> {
    let eps = g.norm_eps as f64;
    let mut y = vec![0.0; n * g.value_width()];
    for t in 0..n {
        for h in 0..g.hv {
            let base = t * g.value_width() + h * g.dv;
            let oh = &o[base..base + g.dv];
            let ms = oh.iter().map(|v| v * v).sum::<f64>() / g.dv as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            for j in 0..g.dv {
                y[base + j] = oh[j] * inv * norm_w[j] as f64 * silu(z[base + j] as f64);
            }
        }
    }
    y
}

/// Verify `tokens` of one layer from its committed state.
pub fn layer_verify(g: &Geometry, p: &LayerParams, st: &RefState, tokens: &LayerTokens) -> Window {
    let n = tokens.n;
    let qkv = conv_silu_l2(g, &p.conv_w, &st.conv, &tokens.x, n);
    let (gg, beta) = gates(g, p, &tokens.a, &tokens.b, n);
    let (o, state_after) = delta_verify(g, &st.s, &qkv, &gg, &beta, n);
    let y = gated_norm(g, &o, &tokens.z, &p.norm_w, n);
    Window {
        n,
        qkv,
        g: gg,
        beta,
        o,
        y,
        state_after,
    }
}

/// Commit the first `n` tokens of a verified window.
pub fn layer_commit(g: &Geometry, st: &mut RefState, w: &Window, tokens: &LayerTokens, n: usize) {
    if n == w.n {
        st.s.copy_from_slice(&w.state_after);
    } else {
        delta_commit(g, &mut st.s, &w.qkv, &w.g, &w.beta, n);
    }
    conv_advance(g, &mut st.conv, &tokens.x, n);
}

/// The whole stack's committed state, verified and committed layer by layer.
#[derive(Debug, Clone)]
pub struct Reference {
    pub geometry: Geometry,
    pub layers: Vec<RefState>,
}

fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Run `f(i, &mut item)` over `items` on up to `threads()` threads.
fn par_each<T: Send, R: Send>(items: &mut [T], f: impl Fn(usize, &mut T) -> R + Sync) -> Vec<R> {
    let chunk = items.len().div_ceil(threads()).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks_mut(chunk)
            .enumerate()
            .map(|(ci, part)| {
                let f = &f;
                scope.spawn(move || {
                    part.iter_mut()
                        .enumerate()
                        .map(|(i, it)| f(ci * chunk + i, it))
                        .collect::<Vec<R>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl Reference {
    pub fn new(geometry: Geometry, states: &[LayerState]) -> Reference {
        Reference {
            geometry,
            layers: states.iter().map(RefState::from_f32).collect(),
        }
    }

    /// Verify `tokens[l]` for every layer l (threads over layers).
    pub fn verify(&mut self, params: &[LayerParams], tokens: &[LayerTokens]) -> Vec<Window> {
        let g = self.geometry;
        par_each(&mut self.layers, |l, st| {
            layer_verify(&g, &params[l], st, &tokens[l])
        })
    }

    /// Commit the first `n` tokens of each layer's window.
    pub fn commit(&mut self, windows: &[Window], tokens: &[LayerTokens], n: usize) {
        let g = self.geometry;
        par_each(&mut self.layers, |l, st| {
            layer_commit(&g, st, &windows[l], &tokens[l], n)
        });
    }
}

/// ‖a − b‖₂ / ‖b‖₂ (0 when both are zero; ∞ when only b is, or on a NaN in a).
pub fn rel_l2(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.into_iter().zip(b) {
        num += (x - y) * (x - y);
        den += y * y;
    }
    if num.is_nan() {
        return f64::INFINITY;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

/// [`rel_l2`] of device f32 values against reference f64 values.
pub fn rel_l2_f32(gpu: &[f32], reference: &[f64]) -> f64 {
    if gpu.len() != reference.len() {
        return f64::INFINITY;
    }
    rel_l2(gpu.iter().map(|v| *v as f64), reference.iter().copied())
}

/// The independent formulation (see the module docs); one layer, any number of tokens.
pub mod naive {
    use super::*;

    fn sigmoid(x: f64) -> f64 {
        0.5 * (1.0 + (0.5 * x).tanh())
    }

    fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    /// Per token (o [Hv·dv], y [Hv·dv]) and the final state [Hv][dk][dv] of a layer that
    /// starts from `st` and takes every token of `tokens`.
    pub fn run(
        g: &Geometry,
        p: &LayerParams,
        st: &RefState,
        tokens: &LayerTokens,
    ) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) {
        let (c, n, cs) = (g.channels(), tokens.n, CONV_WIDTH - 1);
        // The whole history H = [conv state; x], (cs + n) × C.
        let mut hist = st.conv.clone();
        hist.extend(tokens.x.iter().map(|v| *v as f64));
        // M_h = S_hᵀ, dv × dk.
        let mut m: Vec<Vec<f64>> = (0..g.hv)
            .map(|h| {
                let s = &st.s[h * g.dk * g.dv..(h + 1) * g.dk * g.dv];
                let mut mt = vec![0.0; g.dv * g.dk];
                for i in 0..g.dk {
                    for j in 0..g.dv {
                        mt[j * g.dk + i] = s[i * g.dv + j];
                    }
                }
                mt
            })
            .collect();
        let (mut os, mut ys) = (Vec::new(), Vec::new());
        for t in 0..n {
            // Conv taps newest first: y[c] = Σ_τ w[c][3−τ]·H[t+3−τ][c].
            let act: Vec<f64> = (0..c)
                .map(|ch| {
                    let pre: f64 = (0..CONV_WIDTH)
                        .map(|tau| {
                            p.conv_w[ch * CONV_WIDTH + (CONV_WIDTH - 1 - tau)] as f64
                                * hist[(t + cs - tau) * c + ch]
                        })
                        .sum();
                    pre * sigmoid(pre)
                })
                .collect();
            let unit = |v: &[f64]| -> Vec<f64> {
                let norm = (v.iter().map(|x| x * x).sum::<f64>() + L2_EPS).sqrt();
                v.iter().map(|x| x / norm).collect()
            };
            let mut o = vec![0.0; g.value_width()];
            for (h, mh) in m.iter_mut().enumerate() {
                let kh = g.key_head(h);
                let q: Vec<f64> = unit(&act[kh * g.dk..(kh + 1) * g.dk])
                    .iter()
                    .map(|x| x / (g.dk as f64).sqrt())
                    .collect();
                let k = unit(&act[(g.hk + kh) * g.dk..(g.hk + kh + 1) * g.dk]);
                let v0 = 2 * g.hk * g.dk + h * g.dv;
                let v = &act[v0..v0 + g.dv];
                let i = t * g.hv + h;
                let x = tokens.a[i] as f64 + p.dt_bias[h] as f64;
                let gt = -(p.a_log[h] as f64).exp() * (1.0 + x.exp()).ln();
                let bt = sigmoid(tokens.b[i] as f64);
                // A = e^g (I − β k kᵀ), dk × dk;  M ← M A + β v kᵀ
                let mut a = vec![0.0; g.dk * g.dk];
                for r in 0..g.dk {
                    for s in 0..g.dk {
                        let eye = if r == s { 1.0 } else { 0.0 };
                        a[r * g.dk + s] = gt.exp() * (eye - bt * k[r] * k[s]);
                    }
                }
                let mut next = matmul(mh, &a, g.dv, g.dk, g.dk);
                for r in 0..g.dv {
                    for s in 0..g.dk {
                        next[r * g.dk + s] += bt * v[r] * k[s];
                    }
                }
                *mh = next;
                let oh = matmul(mh, &q, g.dv, g.dk, 1);
                o[h * g.dv..(h + 1) * g.dv].copy_from_slice(&oh);
            }
            let mut y = vec![0.0; g.value_width()];
            for h in 0..g.hv {
                let oh = &o[h * g.dv..(h + 1) * g.dv];
                let rms = (oh.iter().map(|x| x * x).sum::<f64>() / g.dv as f64 + g.norm_eps as f64)
                    .sqrt();
                for j in 0..g.dv {
                    let zz = tokens.z[t * g.value_width() + h * g.dv + j] as f64;
                    y[h * g.dv + j] = oh[j] / rms * p.norm_w[j] as f64 * (zz * sigmoid(zz));
                }
            }
            os.push(o);
            ys.push(y);
        }
        let mut s = vec![0.0; g.state_len()];
        for (h, mh) in m.iter().enumerate() {
            for i in 0..g.dk {
                for j in 0..g.dv {
                    s[h * g.dk * g.dv + i * g.dv + j] = mh[j * g.dk + i];
                }
            }
        }
        (os, ys, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::Inputs;

    fn small(hk: usize, hv: usize) -> Geometry {
        Geometry {
            dk: 8,
            dv: 6,
            hk,
            hv,
            layers: 2,
            window: 8,
            norm_eps: 1e-6,
        }
    }

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
        a.iter()
            .zip(b)
            .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
            / scale
    }

    #[test]
    fn loop_form_equals_matrix_form_on_small_shapes() {
        for (hk, hv, seed) in [(1, 1, 1u64), (2, 4, 2), (2, 6, 3), (3, 3, 4)] {
            let g = small(hk, hv);
            let inputs = Inputs::seeded(g, seed);
            for n in 1..=8 {
                let p = inputs.params(1);
                let st = RefState::from_f32(&inputs.initial_state(1));
                let tokens = inputs.tokens(1, 0, n).unwrap();
                let w = layer_verify(&g, &p, &st, &tokens);
                let (os, ys, s) = naive::run(&g, &p, &st, &tokens);
                let o: Vec<f64> = os.concat();
                let y: Vec<f64> = ys.concat();
                assert!(
                    max_rel(&w.o, &o) < 1e-12,
                    "o hk={hk} hv={hv} n={n}: {}",
                    max_rel(&w.o, &o)
                );
                assert!(max_rel(&w.y, &y) < 1e-12, "y hk={hk} hv={hv} n={n}");
                assert!(
                    max_rel(&w.state_after, &s) < 1e-12,
                    "state hk={hk} hv={hv} n={n}"
                );
                // The reference's state really moves: the check is not vacuous.
                assert!(max_rel(&st.s, &s) > 1e-3);
            }
        }
    }

    #[test]
    fn multi_token_verify_equals_chained_single_token_steps() {
        let g = small(2, 4);
        let inputs = Inputs::seeded(g, 11);
        let p = inputs.params(0);
        let tokens = inputs.tokens(0, 0, 8).unwrap();
        let st0 = RefState::from_f32(&inputs.initial_state(0));
        let multi = layer_verify(&g, &p, &st0, &tokens);
        let mut st = st0.clone();
        for t in 0..8 {
            let one = tokens.slice(&g, t, 1);
            let w = layer_verify(&g, &p, &st, &one);
            let vw = g.value_width();
            assert!(
                max_rel(&w.y, &multi.y[t * vw..(t + 1) * vw]) < 1e-13,
                "token {t}"
            );
            layer_commit(&g, &mut st, &w, &one, 1);
        }
        assert!(max_rel(&st.s, &multi.state_after) < 1e-13);
        // commit(n < T) from a window equals a verify of n tokens then commit(n).
        let mut a = st0.clone();
        layer_commit(&g, &mut a, &multi, &tokens, 3);
        let mut b = st0.clone();
        let w3 = layer_verify(&g, &p, &b, &tokens.slice(&g, 0, 3));
        layer_commit(&g, &mut b, &w3, &tokens, 3);
        assert!(max_rel(&a.s, &b.s) < 1e-13 && a.conv == b.conv);
        // The conv state after 3 tokens is the 3 raw inputs.
        let c = g.channels();
        let raw: Vec<f64> = tokens.x[..3 * c].iter().map(|v| *v as f64).collect();
        assert_eq!(a.conv, raw);
    }

    #[test]
    fn verify_leaves_the_state_and_stack_matches_layers() {
        let g = small(2, 4);
        let inputs = Inputs::seeded(g, 5);
        let states: Vec<_> = (0..g.layers).map(|l| inputs.initial_state(l)).collect();
        let params: Vec<_> = (0..g.layers).map(|l| inputs.params(l)).collect();
        let tokens: Vec<_> = (0..g.layers)
            .map(|l| inputs.tokens(l, 0, 4).unwrap())
            .collect();
        let mut r = Reference::new(g, &states);
        let before = r.layers.clone();
        let ws = r.verify(&params, &tokens);
        assert_eq!(r.layers, before, "verify changed the committed state");
        for l in 0..g.layers {
            assert_eq!(ws[l], layer_verify(&g, &params[l], &before[l], &tokens[l]));
        }
        r.commit(&ws, &tokens, 2);
        assert_ne!(r.layers, before);
    }

    #[test]
    fn rel_l2_flags_nan_and_scale() {
        assert_eq!(rel_l2([1.0, 2.0], [1.0, 2.0]), 0.0);
        assert!((rel_l2([1.0, 0.0], [2.0, 0.0]) - 0.5).abs() < 1e-15);
        assert_eq!(rel_l2([f64::NAN], [1.0]), f64::INFINITY);
        assert_eq!(rel_l2_f32(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}
