// cub/cub.cuh for hip-clang, shipped with kbuild (docs/compat-header.md): a refusal. CUB has no
// HIP build in Debian's HIP 5.2 (hipCUB is ROCm's), and a partial copy would compile with
// other semantics. A library that can do without CUB usually guards it (ggml: GGML_CUDA_USE_CUB
// needs CUDART_VERSION, which kbuild does not define for AMD).
#error "kbuild: <cub/cub.cuh> has no HIP mapping (no hipCUB in HIP 5.2); restrict this unit to NVIDIA targets or guard its CUB path"
