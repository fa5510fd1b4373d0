//! Gated DeltaNet decode/verify/commit engine over kernels loaded from a kbuild bundle.
