// driver_types.h for hip-clang, shipped with kbuild (docs/compat-header.md): the runtime's
// types (cudaStream_t, cudaError_t, ...) through cuda_runtime_api.h. Only on hip-clang's
// include path.
#ifndef KBUILD_SHIM_DRIVER_TYPES_H
#define KBUILD_SHIM_DRIVER_TYPES_H
#include "cuda_runtime_api.h"
#endif
