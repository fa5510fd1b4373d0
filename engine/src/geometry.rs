//! The shape of a Gated DeltaNet stack and its validation.
//!
//! Every size the engine, the reference and the kernels agree on comes from [`Geometry`]; a
//! geometry is checked once ([`Geometry::validate`]) and every later request (a forward of T
//! tokens, a commit of n) is checked against it with an error that says what to change.

use serde::Serialize;

/// Causal conv width (fixed: the kernels hard-code 4 taps).
pub const CONV_WIDTH: usize = 4;
/// The largest verify window the kernels accept (`GDN_TMAX` in kernels/gdn/gdn_common.h).
pub const MAX_WINDOW: usize = 8;
/// Head dims the kernels of the bundle are built for (`DK`, `DV` defaults).
pub const KERNEL_HEAD_DIM: usize = 128;
/// eps of the q/k L2 norm (`GDN_L2_EPS`).
pub const L2_EPS: f64 = 1e-6;

/// Sizes of one GDN stack, batch 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Geometry {
    /// Key head dim.
    pub dk: usize,
    /// Value head dim.
    pub dv: usize,
    /// Key (and query) heads.
    pub hk: usize,
    /// Value heads; value head h reads key head h·hk/hv.
    pub hv: usize,
    /// Layers.
    pub layers: usize,
    /// Verify window: the most tokens one forward takes.
    pub window: usize,
    /// eps of the gated RMSNorm.
    pub norm_eps: f32,
}

impl Default for Geometry {
    /// The 36-layer production geometry: dk = dv = 128, Hk = 16, Hv = 48, C = 10240, window 8.
    fn default() -> Geometry {
        Geometry {
            dk: 128,
            dv: 128,
            hk: 16,
            hv: 48,
            layers: 36,
            window: MAX_WINDOW,
            norm_eps: 1e-6,
        }
    }
}

/// A geometry or a request that the engine cannot run, with what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("geometry: {field} = {value}: {why}")]
    Invalid {
        field: &'static str,
        value: String,
        why: String,
    },
    #[error("forward of {tokens} token(s): the verify window is {window}; hint: split the tokens into windows of at most {window}")]
    TooManyTokens { tokens: usize, window: usize },
    #[error("forward of 0 tokens: give at least one token")]
    NoTokens,
    #[error("commit({n}): the last forward verified {verified} token(s); hint: commit at most {verified}, or run forward first")]
    CommitTooMany { n: usize, verified: usize },
    #[error("commit(0): nothing to commit; hint: commit at least one token")]
    CommitZero,
}

impl Geometry {
    /// The default geometry with `layers` layers.
    pub fn with_layers(layers: usize) -> Geometry {
        Geometry {
            layers,
            ..Geometry::default()
        }
    }

    /// Conv channels C = 2·Hk·dk + Hv·dv (q | k | v).
    pub fn channels(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }

    /// Width of o, y and z per token: Hv·dv.
    pub fn value_width(&self) -> usize {
        self.hv * self.dv
    }

    /// f32 elements of one layer's recurrent state (Hv × dk × dv).
    pub fn state_len(&self) -> usize {
        self.hv * self.dk * self.dv
    }

    /// f32 elements of one layer's conv state ((width − 1) × C).
    pub fn conv_state_len(&self) -> usize {
        (CONV_WIDTH - 1) * self.channels()
    }

    /// Bytes of every layer's recurrent state.
    pub fn state_bytes(&self) -> usize {
        self.layers * self.state_len() * 4
    }

    /// Key head of value head `h`.
    pub fn key_head(&self, h: usize) -> usize {
        h * self.hk / self.hv
    }

    /// Check the geometry itself (sizes, head grouping, window).
    pub fn validate(&self) -> Result<(), GeometryError> {
        let bad = |field: &'static str, value: usize, why: &str| GeometryError::Invalid {
            field,
            value: value.to_string(),
            why: why.to_string(),
        };
        for (field, v) in [
            ("dk", self.dk),
            ("dv", self.dv),
            ("hk", self.hk),
            ("hv", self.hv),
            ("layers", self.layers),
        ] {
            if v == 0 {
                return Err(bad(field, v, "must be at least 1"));
            }
        }
        if !self.hv.is_multiple_of(self.hk) {
            return Err(bad(
                "hv",
                self.hv,
                &format!(
                    "must be a multiple of hk = {} (each key head serves hv/hk value heads)",
                    self.hk
                ),
            ));
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(bad(
                "window",
                self.window,
                &format!(
                    "must be in 1..={MAX_WINDOW} (the kernels' largest exact-T instantiation)"
                ),
            ));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0) {
            return Err(GeometryError::Invalid {
                field: "norm_eps",
                value: self.norm_eps.to_string(),
                why: "must be a positive finite number".into(),
            });
        }
        // Keep every flat index of a kernel inside i32 (blocks index with int).
        let c = self.channels() as u128;
        if c * (self.window as u128) * (self.layers as u128) > i32::MAX as u128
            || (self.state_len() as u128) * (self.layers as u128) > i64::MAX as u128
        {
            return Err(bad(
                "layers",
                self.layers,
                "the stack is too large for 32-bit kernel indices",
            ));
        }
        Ok(())
    }

    /// Check what the kernels of a bundle can run: head dims are compiled in.
    pub fn validate_for_kernels(&self) -> Result<(), GeometryError> {
        self.validate()?;
        for (field, v) in [("dk", self.dk), ("dv", self.dv)] {
            if v != KERNEL_HEAD_DIM {
                return Err(GeometryError::Invalid {
                    field,
                    value: v.to_string(),
                    why: format!(
                        "the GDN kernels are built for {KERNEL_HEAD_DIM} (DK/DV defines); hint: rebuild them with -DDK/-DDV in kernels/Kbuild.toml, or use the CPU reference"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Check a forward of `tokens` tokens.
    pub fn check_tokens(&self, tokens: usize) -> Result<(), GeometryError> {
        if tokens == 0 {
            return Err(GeometryError::NoTokens);
        }
        if tokens > self.window {
            return Err(GeometryError::TooManyTokens {
                tokens,
                window: self.window,
            });
        }
        Ok(())
    }

    /// Check a commit of `n` tokens after a forward of `verified` tokens.
    pub fn check_commit(&self, n: usize, verified: usize) -> Result<(), GeometryError> {
        if n == 0 {
            return Err(GeometryError::CommitZero);
        }
        if n > verified {
            return Err(GeometryError::CommitTooMany { n, verified });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_production_geometry() {
        let g = Geometry::default();
        assert_eq!(g.channels(), 10240);
        assert_eq!((g.layers, g.window), (36, 8));
        assert_eq!(g.key_head(47), 15);
        assert_eq!(g.key_head(2), 0);
        assert_eq!(g.key_head(3), 1);
        assert_eq!(g.state_bytes(), 36 * 48 * 128 * 128 * 4);
        g.validate_for_kernels().unwrap();
    }

    #[test]
    fn bad_geometry_is_named() {
        let e = Geometry {
            hv: 40,
            ..Geometry::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.to_string().contains("hv = 40") && e.to_string().contains("multiple of hk = 16"),
            "{e}"
        );
        let e = Geometry {
            window: 9,
            ..Geometry::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("window = 9"), "{e}");
        let e = Geometry {
            layers: 0,
            ..Geometry::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("layers = 0"), "{e}");
        let e = Geometry {
            dk: 64,
            ..Geometry::default()
        }
        .validate_for_kernels()
        .unwrap_err();
        assert!(
            e.to_string().contains("dk = 64") && e.to_string().contains("hint"),
            "{e}"
        );
        let e = Geometry {
            norm_eps: f32::NAN,
            ..Geometry::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("norm_eps"), "{e}");
    }

    #[test]
    fn tokens_and_commit_limits() {
        let g = Geometry::default();
        assert!(g.check_tokens(8).is_ok());
        let e = g.check_tokens(9).unwrap_err();
        assert_eq!(
            e,
            GeometryError::TooManyTokens {
                tokens: 9,
                window: 8
            }
        );
        assert!(e.to_string().contains("window is 8"));
        assert_eq!(g.check_tokens(0).unwrap_err(), GeometryError::NoTokens);
        assert!(g.check_commit(3, 4).is_ok());
        let e = g.check_commit(5, 4).unwrap_err();
        assert!(
            e.to_string().contains("commit(5)") && e.to_string().contains("verified 4"),
            "{e}"
        );
        assert_eq!(g.check_commit(0, 4).unwrap_err(), GeometryError::CommitZero);
    }
}
