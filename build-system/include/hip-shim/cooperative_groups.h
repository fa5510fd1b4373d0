// cooperative_groups.h for hip-clang, shipped with kbuild (docs/compat-header.md): HIP's
// cooperative groups under CUDA's name (this_thread_block, sync, thread_rank,
// tiled_partition<N> with shfl*, this_grid). <cooperative_groups/reduce.h> and the other
// sub-headers are not mapped. Only on hip-clang's include path.
#ifndef KBUILD_SHIM_COOPERATIVE_GROUPS_H
#define KBUILD_SHIM_COOPERATIVE_GROUPS_H
#include <hip/hip_cooperative_groups.h>
#endif
