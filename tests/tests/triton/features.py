"""Triton kernels whose launches need more than a grid and a block: device-side tensor
descriptors (global scratch memory per program), clusters (num_ctas > 1) and a cooperative
grid. kbuild's tests build them ahead of time; on a GPU the loader's launches are compared
with Triton's own."""
import triton
import triton.language as tl


@triton.jit
def desc_scale(x_ptr, out_ptr, M, N, scale, BM: tl.constexpr, BN: tl.constexpr):
    # Descriptors made on the device: Triton keeps them in per-program global scratch.
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    od = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for j in range(0, tl.cdiv(N, BN)):
        t = xd.load([pid * BM, j * BN])
        od.store([pid * BM, j * BN], t * scale + 1.0)


@triton.jit
def cluster_axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, a * x + y, mask=m)


@triton.jit
def coop_square(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * x, mask=m)
