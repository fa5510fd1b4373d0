import triton
import triton.language as tl

# An autotune list that is no matrix: each config its own block size, warps and stages.
CONFIGS = [
    triton.Config({"BLOCK": 128}, num_warps=2, num_stages=2),
    triton.Config({"BLOCK": 256}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=1),
]


@triton.heuristics({"HAS_BIAS": lambda args: args["bias_ptr"] is not None})
@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned_kernel(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_BIAS:
        x += tl.load(bias_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


def zero_out(nargs):
    nargs["out_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=1, pre_hook=zero_out)], key=["n"])
@triton.jit
def hooked_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 1.0, mask=offs < n)


@triton.jit
def untuned_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 1.0, mask=offs < n)
