//! Occupancy models: CUDA warps/SM and AMD waves/SIMD at a kernel's block size.
