//! The data a side-by-side run in another framework needs (scripts/device/gdn-fla.py runs FLA's
//! `fused_recurrent_gated_delta_rule` on it): the inputs of a window in the safetensors layout
//! of [`crate::inputs`], plus the fp64 reference's intermediates and results as f32:
//!
//! | tensor | shape | what |
//! |---|---|---|
//! | `ref_q`, `ref_k` | [L, W, Hk, dk] | conv+SiLU+L2 norm output (q scaled by 1/√dk) |
//! | `ref_v` | [L, W, Hv, dv] | conv+SiLU output |
//! | `ref_g`, `ref_beta` | [L, W, Hv] | gates |
//! | `ref_o` | [L, W, Hv, dv] | delta-rule output of token t of a verify from the initial state |
//! | `ref_y` | [L, W, Hv, dv] | gated RMSNorm output |
//! | `ref_state1`, `ref_state{W}` | [L, Hv, dk, dv] | the state after 1 and after W tokens |

use crate::error::Result;
use crate::inputs::Inputs;
use crate::reference::Reference;

type Tensor = (String, Vec<usize>, Vec<f32>);

/// Safetensors bytes of the window's inputs and reference (see the module docs).
pub fn dump(inputs: &Inputs) -> Result<Vec<u8>> {
    let g = *inputs.geometry();
    let (l, w, c) = (g.layers, g.window, g.channels());
    let mut params = Vec::with_capacity(l);
    let mut states = Vec::with_capacity(l);
    let mut tokens = Vec::with_capacity(l);
    for layer in 0..l {
        params.push(inputs.params(layer));
        states.push(inputs.initial_state(layer));
        tokens.push(inputs.tokens(layer, 0, w)?);
    }
    let mut r = Reference::new(g, &states);
    let windows = r.verify(&params, &tokens);
    let f32s = |it: &mut dyn Iterator<Item = f64>| -> Vec<f32> { it.map(|v| v as f32).collect() };
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for win in &windows {
        for t in 0..w {
            let row = &win.qkv[t * c..(t + 1) * c];
            let qk = g.hk * g.dk;
            q.extend(row[..qk].iter().map(|x| *x as f32));
            k.extend(row[qk..2 * qk].iter().map(|x| *x as f32));
            v.extend(row[2 * qk..].iter().map(|x| *x as f32));
        }
    }
    let mut extra: Vec<Tensor> = vec![
        ("ref_q".into(), vec![l, w, g.hk, g.dk], q),
        ("ref_k".into(), vec![l, w, g.hk, g.dk], k),
        ("ref_v".into(), vec![l, w, g.hv, g.dv], v),
        (
            "ref_g".into(),
            vec![l, w, g.hv],
            f32s(&mut windows.iter().flat_map(|x| x.g.iter().copied())),
        ),
        (
            "ref_beta".into(),
            vec![l, w, g.hv],
            f32s(&mut windows.iter().flat_map(|x| x.beta.iter().copied())),
        ),
        (
            "ref_o".into(),
            vec![l, w, g.hv, g.dv],
            f32s(&mut windows.iter().flat_map(|x| x.o.iter().copied())),
        ),
        (
            "ref_y".into(),
            vec![l, w, g.hv, g.dv],
            f32s(&mut windows.iter().flat_map(|x| x.y.iter().copied())),
        ),
        (
            format!("ref_state{w}"),
            vec![l, g.hv, g.dk, g.dv],
            f32s(&mut windows.iter().flat_map(|x| x.state_after.iter().copied())),
        ),
    ];
    if w > 1 {
        let one: Vec<_> = tokens.iter().map(|t| t.slice(&g, 0, 1)).collect();
        let w1 = r.verify(&params, &one);
        extra.push((
            "ref_state1".into(),
            vec![l, g.hv, g.dk, g.dv],
            f32s(&mut w1.iter().flat_map(|x| x.state_after.iter().copied())),
        ));
    }
    Ok(inputs.to_safetensors(w, extra)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;

    #[test]
    fn dump_loads_back_with_reference_tensors() {
        let g = Geometry {
            dk: 8,
            dv: 4,
            hk: 2,
            hv: 4,
            layers: 2,
            window: 3,
            norm_eps: 1e-6,
        };
        let inputs = Inputs::seeded(g, 4);
        let bytes = dump(&inputs).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("ref_q").unwrap().shape(), &[2, 3, 2, 8]);
        assert_eq!(st.tensor("ref_state3").unwrap().shape(), &[2, 4, 8, 4]);
        assert!(st.tensor("ref_state1").is_ok());
        // The inputs part loads as inputs (extra tensors are ignored).
        let back = Inputs::from_safetensors("d", &bytes, g).unwrap();
        assert_eq!(
            back.tokens(1, 0, 3).unwrap(),
            inputs.tokens(1, 0, 3).unwrap()
        );
    }
}
