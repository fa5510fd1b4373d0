// Occupancy oracle for sm_90 (H200): for kernels of varied registers, static shared memory
// and barrier counts, prints what the CUDA runtime's
// cudaOccupancyMaxActiveBlocksPerMultiprocessor answers at each (block size, dynamic shared
// memory), with the kernel's cudaFuncGetAttributes, as JSON lines. The first line holds the
// device properties. Nothing is launched.
//
// Build: $NV/bin/nvcc -arch=sm_90 -cudart static -Xptxas -v -o .device/occupancy_sm90 \
//          tests/device/occupancy_sm90.cu
// Compared with kbuild's model by manifests/tests/occupancy_cuda_device.rs
// (scripts/device/occupancy-sm90.sh runs both).
#include <cstdio>
#include <cuda_runtime.h>

// Register pressure: NV live values; __maxnreg__ caps what ptxas may use.
#define NV 240
#define PRESSURE_BODY                                                        \
  float v[NV];                                                               \
  _Pragma("unroll") for (int i = 0; i < NV; ++i) v[i] = p[threadIdx.x + i * 1024]; \
  _Pragma("unroll") for (int r = 0; r < 8; ++r)                              \
  _Pragma("unroll") for (int i = 0; i < NV; ++i) v[i] = fmaf(v[i], v[(i + r + 1) % NV], v[(i * 7 + r) % NV]); \
  _Pragma("unroll") for (int i = 0; i < NV; ++i) p[threadIdx.x + i * 1024] = v[i];

#define REGS(n) \
  __global__ void __maxnreg__(n) regs_##n(float *p) { PRESSURE_BODY }
REGS(24) REGS(32) REGS(40) REGS(48) REGS(56) REGS(64) REGS(72) REGS(80) REGS(96)
REGS(104) REGS(128) REGS(168) REGS(200) REGS(255)

// Static shared memory of S bytes (one barrier: __syncthreads).
template <int S> __global__ void smem(float *p) {
  __shared__ char buf[S];
  buf[threadIdx.x % S] = (char)p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = buf[(threadIdx.x + 1) % S];
}

__global__ void plain(float *p) { p[threadIdx.x] = 1.0f; }

// Named barriers: bar.sync N uses barriers 0..N.
__global__ void bar4(float *p) {
  asm volatile("bar.sync 3;" ::: "memory");
  p[threadIdx.x] = 1.0f;
}
__global__ void bar16(float *p) {
  asm volatile("bar.sync 15;" ::: "memory");
  p[threadIdx.x] = 1.0f;
}
__global__ void bar16_smem(float *p) {
  __shared__ float buf[4096];
  buf[threadIdx.x] = p[threadIdx.x];
  asm volatile("bar.sync 15;" ::: "memory");
  p[threadIdx.x] = buf[(threadIdx.x + 1) % 4096];
}

struct Kernel {
  const char *name;
  const void *func;
  int barriers;      // as ptxas -v reports ("used N barriers")
  int static_shared; // as declared
};

#define R(n) {"regs_" #n, (const void *)regs_##n, 0, 0}
#define S(n) {"smem_" #n, (const void *)smem<n>, 1, n}
static const Kernel KERNELS[] = {
    R(24), R(32), R(40), R(48), R(56), R(64), R(72), R(80), R(96), R(104), R(128), R(168),
    R(200), R(255),
    S(1000), S(4096), S(12288), S(24576), S(40000), S(49152),
    {"plain", (const void *)plain, 0, 0},
    {"bar4", (const void *)bar4, 4, 0},
    {"bar16", (const void *)bar16, 16, 0},
    {"bar16_smem", (const void *)bar16_smem, 16, 16384},
};

static const int BLOCKS[] = {32, 64, 96, 128, 160, 192, 256, 288, 384, 512, 640, 768, 800, 1024};
static const int DYNAMIC[] = {0, 1024, 8192, 30000, 65536, 100000, 200000, 232448};

int main() {
  int dev = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess) {
    fprintf(stderr, "cudaGetDeviceProperties: %s\n", cudaGetErrorString(e));
    return 1;
  }
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  printf("{\"device\":\"%s\",\"major\":%d,\"minor\":%d,\"driver\":%d,\"runtime\":%d,"
         "\"max_threads_per_sm\":%d,\"max_blocks_per_sm\":%d,\"shared_per_sm\":%zu,"
         "\"shared_per_block\":%zu,\"shared_per_block_optin\":%zu,\"reserved_shared_per_block\":%zu,"
         "\"regs_per_sm\":%d,\"regs_per_block\":%d}\n",
         prop.name, prop.major, prop.minor, driver, runtime, prop.maxThreadsPerMultiProcessor,
         prop.maxBlocksPerMultiProcessor, prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlock,
         prop.sharedMemPerBlockOptin, prop.reservedSharedMemPerBlock, prop.regsPerMultiprocessor,
         prop.regsPerBlock);
  for (const Kernel &k : KERNELS) {
    cudaFuncAttributes a;
    if ((e = cudaFuncGetAttributes(&a, k.func)) != cudaSuccess) {
      fprintf(stderr, "%s: cudaFuncGetAttributes: %s\n", k.name, cudaGetErrorString(e));
      return 1;
    }
    // Opt in to the largest dynamic shared memory, as kbuild's model assumes.
    int max_dynamic = (int)prop.sharedMemPerBlockOptin - (int)a.sharedSizeBytes;
    if ((e = cudaFuncSetAttribute(k.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  max_dynamic)) != cudaSuccess) {
      fprintf(stderr, "%s: cudaFuncSetAttribute: %s\n", k.name, cudaGetErrorString(e));
      return 1;
    }
    for (int block : BLOCKS) {
      for (int dynamic : DYNAMIC) {
        int blocks = -1;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k.func, block, dynamic);
        cudaGetLastError();
        printf("{\"kernel\":\"%s\",\"block\":%d,\"dynamic_shared\":%d,\"err\":%d,"
               "\"blocks\":%d,\"warps\":%d,\"num_regs\":%d,\"shared_size_bytes\":%zu,"
               "\"static_declared\":%d,\"barriers\":%d,\"max_threads_per_block\":%d,"
               "\"max_dynamic_shared\":%d,\"local_size_bytes\":%zu}\n",
               k.name, block, dynamic, (int)e, blocks, e == cudaSuccess ? blocks * ((block + 31) / 32) : -1,
               a.numRegs, a.sharedSizeBytes, k.static_shared, k.barriers, a.maxThreadsPerBlock,
               max_dynamic, a.localSizeBytes);
      }
    }
  }
  return 0;
}
