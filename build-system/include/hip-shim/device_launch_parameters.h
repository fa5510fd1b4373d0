// device_launch_parameters.h for hip-clang, shipped with kbuild (docs/compat-header.md):
// threadIdx, blockIdx, blockDim, gridDim come with the HIP runtime. Only on hip-clang's
// include path.
#ifndef KBUILD_SHIM_DEVICE_LAUNCH_PARAMETERS_H
#define KBUILD_SHIM_DEVICE_LAUNCH_PARAMETERS_H
#include <hip/hip_runtime.h>
#endif
