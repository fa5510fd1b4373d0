"""kbuild kernels as torch custom ops, so that torch.compile'd code can call them.

    import kbuild, kbuild.torch, torch
    pkg = kbuild.open("rmsnorm.kbundle")

    @kbuild.torch.register_op(pkg, "kbuild::rmsnorm", kernel="rmsnorm_f32")
    def rmsnorm(k, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        rows, cols = x.shape
        y = torch.empty_like(x)
        k.launch(rows, 256, x, w, y, rows, cols, eps)
        return y

    @rmsnorm.register_fake
    def _(x, w, eps):
        return torch.empty_like(x)

    y = torch.compile(lambda x, w: rmsnorm(x, w, 1e-6))(x, w)

The decorated function gets the loaded kbuild Kernel first (loaded once per CUDA device, on
first call) and the op's arguments after it; the op's schema is inferred from the other
parameters' annotations, or given as `schema=`. Importing this module needs no torch; using it
does.
"""

import inspect
import sys


def _require_torch():
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import torch  # noqa: F811
    except ImportError as e:
        raise ImportError(
            "kbuild.torch needs PyTorch (torch.library): install torch (pip install torch) "
            "to register kbuild kernels as torch custom ops"
        ) from e
    return torch


def register_op(pkg, name, *, kernel, variant=None, mutates_args=(), schema=None,
                device_types="cuda", fake=None):
    """A decorator that registers `fn(k, *args)` as the torch custom op `name`
    ("namespace::op") through torch.library.custom_op, with `k` the kbuild Kernel `kernel`
    (an entry name, or a kernel with one entry; `variant` picks a variant) of `pkg` loaded on
    the op's CUDA device. `mutates_args` names the arguments it writes, as custom_op wants
    them; `schema` overrides the inferred one; `fake` (or `op.register_fake` later) gives the
    meta implementation torch.compile traces with. Returns the op."""
    torch = _require_torch()

    def decorate(fn):
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if not params:
            raise TypeError(f"{fn.__name__}: its first parameter receives the kbuild Kernel")
        kernels = {}

        def load(device_index):
            k = kernels.get(device_index)
            if k is None:
                k = pkg.kernel(kernel, variant=variant, device=device_index)
                kernels[device_index] = k
            return k

        def impl(*args, **kwargs):
            index = None
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, torch.Tensor) and a.is_cuda:
                    index = a.device.index
                    break
            if index is None:
                index = torch.cuda.current_device()
            return fn(load(index), *args, **kwargs)

        impl.__name__ = fn.__name__
        impl.__qualname__ = fn.__qualname__
        impl.__doc__ = fn.__doc__
        impl.__module__ = fn.__module__
        impl.__signature__ = sig.replace(parameters=params[1:])
        impl.__annotations__ = {
            p.name: p.annotation for p in params[1:] if p.annotation is not inspect.Parameter.empty
        }
        if sig.return_annotation is not inspect.Signature.empty:
            impl.__annotations__["return"] = sig.return_annotation
        op = torch.library.custom_op(name, impl, mutates_args=mutates_args,
                                     device_types=device_types, schema=schema)
        if fake is not None:
            op.register_fake(fake)
        return op

    return decorate
