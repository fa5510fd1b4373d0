"""kbuild from Python: open a build directory, bundle or manifest (or pull one from a
registry), explain which code object runs on a device, and launch kernels on torch tensors.

    import kbuild
    pkg = kbuild.open("target/kbuild")           # build dir, .kbundle or manifest.json
    print(pkg.explain(device="sm_90")["kernels"][0]["selected"])
    k = pkg.kernel("rmsnorm_f32")                 # loaded on torch's current CUDA device
    k.launch(rows, 256, x, w, y, rows, cols, 1e-6)  # on torch's current stream

`import kbuild` needs neither torch nor a GPU; torch is imported when a kernel is loaded or
launched without an explicit device or stream, and by `kbuild.torch`. Errors are
`kbuild.KbuildError` (and subclasses) carrying the kbuild CLI's message.
"""

import json as _json
import sys as _sys
import warnings as _warnings

from . import _native
from ._native import (
    EXPLAIN_SCHEMA,
    KbuildError,
    LaunchError,
    NoDeviceError,
    NoMatchError,
    Pointer,
    Scalar,
    SimulatedError,
    float32,
    float64,
    int32,
    int64,
    uint32,
    uint64,
)

__version__ = _native.__version__


class TrustWarning(UserWarning):
    """The signature policy let a bundle or pulled version through with a warning (the default
    `warn` policy: unsigned, or signed by a key that is not trusted). The message is the one
    the kbuild CLI prints on stderr (`kbuild pull`: `warning: MESSAGE`; `kbuild explain`:
    `BUNDLE: MESSAGE`). Turn it into an error with
    `warnings.simplefilter("error", kbuild.TrustWarning)`, or require signatures outright with
    KBUILD_SIGNATURE_POLICY=require."""


def _warn_trust(pkg, prefix=""):
    """Warn as the CLI does when the signature policy let `pkg` through with a warning."""
    message = pkg._native.trust_warning
    if message:
        # stacklevel 3: the caller of kbuild.open / kbuild.pull.
        _warnings.warn(prefix + message, TrustWarning, stacklevel=3)
    return pkg

__all__ = [
    "EXPLAIN_SCHEMA",
    "KbuildError",
    "Kernel",
    "LaunchError",
    "NoDeviceError",
    "NoMatchError",
    "Package",
    "Pointer",
    "Scalar",
    "SimulatedError",
    "TrustWarning",
    "float32",
    "float64",
    "int32",
    "int64",
    "open",
    "pull",
    "uint32",
    "uint64",
]


def open(path):  # noqa: A001 - the package's verb, as kbuild's
    """Open a build directory (holding manifest.json), a manifest file or a bundle (.kbundle).

    A bundle is checked against the user's signature policy, as `kbuild explain` checks it;
    where the policy lets it through with a warning, a TrustWarning says so."""
    return _warn_trust(Package(_native.open(str(path))), f"{path}: ")


def pull(spec, registry=None, plain_http=False, device=None):
    """`kbuild pull NAME[@REQ]`: resolve the newest matching version in `registry` (a
    directory, file://DIR or oci://HOST[:PORT]/REPO; default: kbuild's local registry), fetch
    it (only the targets `device` runs, when a device is named: a target such as "sm_90", or
    "auto" for the detected GPU), verify it, check signatures, cache it, and return the
    pulled Package (with a TrustWarning where the signature policy warns, as `kbuild pull`
    does). No lockfile is read or written."""
    return _warn_trust(Package(_native.pull(spec, registry, plain_http, device)))


def _torch():
    """torch if it is importable, else None (kbuild works without it)."""
    torch = _sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import torch  # noqa: F811
    except ImportError:
        return None
    return torch


def _device_index(device):
    """`device` as (simulated target or None, detected index or None)."""
    if device is None:
        torch = _torch()
        if torch is not None and torch.cuda.is_available():
            return None, torch.cuda.current_device()
        return None, None
    if isinstance(device, int):
        return None, device
    text = str(device)
    if text == "cuda":
        return _device_index(None)
    if text.startswith("cuda:"):
        return None, int(text[5:])
    if text == "auto":
        return None, None
    return text, None


class Package:
    """A kbuild package: a build, bundle, manifest or pulled version."""

    def __init__(self, native):
        self._native = native

    @property
    def name(self):
        return self._native.name

    @property
    def version(self):
        return self._native.version

    @property
    def targets(self):
        """The targets the package was built for."""
        return self._native.targets

    @property
    def kernels(self):
        """Kernel names, in Kbuild.toml order."""
        return self._native.kernels

    @property
    def origin(self):
        """The manifest file, bundle or cache entry it was opened from."""
        return self._native.origin

    @property
    def trust_note(self):
        """What the signature policy said of a bundle or pulled version (None for a build)."""
        return self._native.trust_note

    def explain(self, device=None, kernel=None):
        """The `kbuild.explain/v1` document (as `kbuild explain --json` prints it) for
        `device`: a target to simulate ("sm_90", "gfx1100"), or None for the detected GPU
        (NoDeviceError without one). `kernel` keeps one kernel."""
        return _json.loads(self._native.explain_json(device, kernel))

    def explain_text(self, device=None, kernel=None):
        """The readable trace, as `kbuild explain` prints it."""
        return self._native.explain_text(device, kernel)

    def params(self, name, variant=None, device=None):
        """The launch parameters of entry `name` (or of a kernel with one entry) in the object
        `device` selects, as the manifest records them: dicts with index, offset, size, kind
        and, where the object has them, type and name. AMD hidden arguments are left out.
        None when the manifest records no parameters for it."""
        _, _, _, text = self._native.params_json(name, variant, device)
        return None if text is None else _json.loads(text)

    def check_launch(self, name, *args, variant=None, device=None):
        """Check `args` against the launch parameters of what `device` selects for `name`
        (None: the detected GPU), loading nothing; raises LaunchError as launch would."""
        self._native.check_launch(name, tuple(args), variant, device)

    def kernel(self, name, variant=None, device=None):
        """Entry `name` (or the one entry of kernel `name`) loaded for `device`: None for
        torch's current CUDA device (device 0 without torch), "cuda:N" or N for device N, or a
        target ("sm_90") for a simulated device, whose kernel checks arguments but does not
        launch. Loading verifies the object and compares its attributes with the manifest."""
        target, index = _device_index(device)
        kernel = Kernel(self._native.kernel(name, variant, target, index))
        record = kernel._native.triton_json
        kernel._triton = None if record is None else _json.loads(record)
        return kernel

    def __str__(self):
        try:
            return self._native.explain_text(None, None)
        except NoDeviceError as e:
            return f"{self.name} {self.version} ({self.origin}): {e}"

    def __repr__(self):
        return f"<kbuild.Package {self.name} {self.version} ({self.origin})>"


class Kernel:
    """A kernel entry loaded on a GPU (or selected for a simulated device)."""

    def __init__(self, native):
        self._native = native
        # Launches go straight to the native methods: no Python frame on their path.
        self.launch = native.launch
        self.launch_triton = native.launch_triton
        self._triton = None

    @property
    def entry(self):
        return self._native.entry

    @property
    def kernel(self):
        return self._native.kernel

    @property
    def variant(self):
        return self._native.variant

    @property
    def target(self):
        """The target of the selected code object."""
        return self._native.target

    @property
    def device_index(self):
        """The CUDA/HIP device it is loaded on (None when simulated)."""
        return self._native.device_index

    @property
    def simulated(self):
        return self._native.simulated

    @property
    def params(self):
        """The launch parameters (see Package.params)."""
        text = self._native.params_json
        return None if text is None else _json.loads(text)

    @property
    def attributes(self):
        """What the driver reports: registers, shared_bytes (static), local_bytes,
        const_bytes, max_threads."""
        return self._native.attributes

    @property
    def attribute_checks(self):
        """The attributes compared with the manifest when the kernel was loaded."""
        return _json.loads(self._native.attribute_checks_json)

    def check(self, *args):
        """Check `args` against the launch parameters; raises LaunchError."""
        self._native.check(tuple(args))

    def __call__(self, grid, block, *args, shared=0, stream=None):
        """Kernel.launch."""
        self._native.launch(grid, block, *args, shared=shared, stream=stream)

    @property
    def triton(self):
        """A Triton kernel's launch record (num_warps, warp_size, shared, params, ...), as the
        manifest holds it; None for other kernels."""
        return self._triton

    def check_triton(self, *args):
        """Check a Triton launch's arguments as launch_triton does; raises LaunchError."""
        self._native.check_triton(args)

    def __repr__(self):
        return repr(self._native)
