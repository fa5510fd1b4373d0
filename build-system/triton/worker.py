"""kbuild's Triton compile worker: one long-lived process that compiles `@triton.jit` functions
ahead of time, for any NVIDIA or AMD target, on a machine with no GPU, no driver and no torch.

kbuild starts it as `python3 -I -u worker.py --site DIR` (DIR holds the pinned Triton) and talks
JSON lines: one request per stdin line (at most 1 MiB), one response per stdout line, nothing
else on stdout (Python prints and child processes' output go to stderr). A bad request gets
{"ok": false, "error": ...} and the worker goes on; it exits at end of input.

Requests (every one may carry "id", echoed back):
  {"op": "hello"} -> {"ok", "triton_version", "python"}
  {"op": "key", KERNEL} -> {"ok", "key", "files", "functions", "constexprs"}: the source identity
      of the function and of every @jit function and constexpr global it uses (Triton's own cache
      key), with no compile; `files`/`functions`: where those @jit functions live; `constexprs`:
      the request's, with what the heuristics compute when it asks for them (Triton's key does
      not cover a heuristic's lambda, so kbuild keys a job by these values).
  {"op": "configs", KERNEL} -> {"ok", "autotuned", "configs": [{"kwargs", "num_warps",
      "num_stages", "num_ctas", "maxnreg", "pre_hook"}], "key": [ARG...], "heuristics":
      [CONSTEXPR...]}; `pre_hook`: whether the config has one (it would run before each launch).
  {"op": "heuristics", KERNEL, "example": {ARG: VALUE}} -> {"ok", "constexprs"}: the values the
      @triton.heuristics wrappers compute (an argument with a type counts as a non-None object).
  {"op": "compile", KERNEL, "target": TARGET, "out": "/abs/prefix"} -> {"ok", "object",
      "format", "symbol", "log", "spills", "metadata", "params", "removed", "constexprs"}: writes
      prefix.cubin and prefix.ptx, or prefix.hsaco (each atomically).
KERNEL = "file": "/abs/kernel.py", "function": NAME, "import": {...} (below), "family":
  "nvidia"|"amd" (default: from "target"), "signature": {ARG: TYPE, or null for an argument
  passed as None}, "constexprs": {ARG: VALUE}, "divisible_16": [ARG...], "equal_to_1": [ARG...]
  (int arguments specialized to 1: compiled away, as Triton does), "heuristics": true (fill
  constexprs left out from the @triton.heuristics wrappers; one given must equal what they
  compute, and one given is kept where a heuristic cannot be evaluated without the run-time
  arguments), "options": {"num_warps",
  "num_stages", "num_ctas", "maxnreg"}.
TARGET = {"backend": "cuda", "arch": 90, "warp_size": 32} | {"backend": "hip", "arch": "gfx1100",
  "warp_size": 32}. Triton writes sm_XXa (arch-specific) cubins from sm_90 up.

"import" says what the module needs to import here, declaratively (per target family, since a
module may read the device at import time):
  {"paths": [DIR...]} added to sys.path (relative to the kernel file's directory);
  {"env": {NAME: VALUE}} set while importing;
  {"stub-modules": {MODULE: {ATTR: VALUE}}} modules made before the import and removed after:
      VALUE is a JSON value, or one of the strings "@class" (an empty class), "@decorator"
      (returns the function, as @d and as @d(...)), "@function" (returns None), "@returns JSON"
      (returns that value), "@autotune" (triton.autotune with the same configs and key); a
      `__path__` list (directories, relative to the kernel file) makes the stub a package whose
      real submodules import from there;
  {"nvidia": {...}, "amd": {...}}: the same keys for one family only (merged over the rest).
Modules are cached per (file, family's description) and imported again when a project file
they loaded changes; the project's modules and stubs never stay in sys.modules.
"""

import ast
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types

MAX_REQUEST = 1 << 20
MAX_SOURCE = 64 << 20
MAX_LOG = 1 << 20


def parse_args(argv):
    site = None
    it = iter(argv)
    for a in it:
        if a == "--site":
            site = next(it, None)
    return site


SITE = parse_args(sys.argv[1:])
if SITE:
    sys.path.insert(0, SITE)
# Reproducible objects: no absolute paths from line info; a private Triton cache per worker.
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kbuild-triton-cache-"))
# Responses get a private copy of fd 1; fd 1 itself becomes stderr, so whatever imported
# modules, native code or child processes (ptxas) write cannot corrupt the protocol.
REAL_STDOUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr

import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.autotuner import Autotuner, Heuristics  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

# Triton runs ptxas -v and discards its report unless asked; kbuild reads spills from it.
knobs.nvidia.dump_ptxas_log = True

INT_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"}
# The shape of a target only: which targets Triton builds for is kbuild's rule (the compat
# catalogue and `config::triton_arch`), not a second table here.
HIP_ARCH = re.compile(r"gfx[0-9][0-9a-f]{2,3}$")


class RequestError(Exception):
    pass


# ---- import descriptions -------------------------------------------------------------------

def family_description(desc, family):
    """The import description for one target family: the shared keys, then the family's."""
    if not isinstance(desc, dict):
        raise RequestError("import: expected a table")
    out = {k: v for k, v in desc.items() if k not in ("nvidia", "amd")}
    own = desc.get(family) or {}
    if not isinstance(own, dict):
        raise RequestError(f"import.{family}: expected a table")
    for k, v in own.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            merged = dict(out[k])
            if k == "stub-modules":  # merge per module, so a family adds attributes
                for mod, attrs in v.items():
                    merged[mod] = {**(merged.get(mod) or {}), **attrs} if isinstance(attrs, dict) else attrs
            else:
                merged.update(v)
            out[k] = merged
        else:
            out[k] = v
    unknown = set(out) - {"paths", "env", "stub-modules"}
    if unknown:
        raise RequestError(f"import: unknown key(s) {sorted(unknown)}; expected paths, env, stub-modules, nvidia, amd")
    return out


def identity_decorator(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda f: f


AUTOTUNE_KWARGS = ("configs", "key", "prune_configs_by", "reset_to_zero", "restore_value", "warmup", "rep", "do_bench")


def stub_value(module, attr, value):
    if value == "@class":
        return type(attr.rsplit(".", 1)[-1], (), {})
    if value == "@decorator":
        return identity_decorator
    if value == "@function":
        return lambda *a, **k: None
    if isinstance(value, str) and value.startswith("@returns "):
        try:
            result = json.loads(value[len("@returns "):])
        except ValueError as e:
            raise RequestError(f"import: stub {module}.{attr}: {value!r}: {e}") from e
        return lambda *a, **k: result
    if value == "@autotune":
        def autotune(*args, **kwargs):
            # FLA-style wrappers take triton.autotune's arguments plus their own (dropped).
            keep = {k: v for k, v in kwargs.items() if k in AUTOTUNE_KWARGS}
            configs = keep.pop("configs", args[0] if args else [])
            key = keep.pop("key", args[1] if len(args) > 1 else None) or []
            return triton.autotune(configs=configs, key=key, **keep)
        return autotune
    if isinstance(value, str) and value.startswith("@"):
        raise RequestError(f"import: stub {module}.{attr}: unknown special value {value}")
    return value


def make_stubs(stubs, base):
    """Modules to put in sys.modules; dotted attributes (`autograd.Function`) make submodules.
    A `__path__` list (directories relative to the kernel file) makes a package whose real
    submodules import from there, without running its real `__init__`."""
    made = {}

    def module_of(name):
        if name not in made:
            made[name] = types.ModuleType(name)
            made[name].__path__ = []
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(module_of(parent), child, made[name])
        return made[name]

    if not isinstance(stubs, dict):
        raise RequestError("import: stub-modules: expected a table")
    for name, attrs in stubs.items():
        if not isinstance(attrs, dict):
            raise RequestError(f"import: stub-modules.{name}: expected a table")
        m = module_of(name)
        for attr, value in attrs.items():
            if attr == "__path__":
                if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
                    raise RequestError(f"import: stub {name}.__path__: expected a list of directories")
                m.__path__ = [os.path.normpath(os.path.join(base, d)) for d in value]
                continue
            owner, _, leaf = attr.rpartition(".")
            target = module_of(f"{name}.{owner}") if owner else m
            setattr(target, leaf, stub_value(name, attr, value))
    return made


def file_digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(MAX_SOURCE)).hexdigest()
    except OSError:
        return None


def under(path, dirs):
    path = os.path.realpath(path)
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


MODULES = {}  # (file, description) -> (module, {project file: sha256})


def load_module(path, desc, family):
    """Import the kernel's file under its family's import description (cached per both, and
    while none of the project files the import read has changed)."""
    desc = family_description(desc or {}, family)
    cache_key = (path, json.dumps(desc, sort_keys=True))
    cached = MODULES.get(cache_key)
    if cached and all(file_digest(p) == d for p, d in cached[1].items()):
        return cached[0]
    if not os.path.isfile(path):
        raise RequestError(f"{path}: no such file")
    base = os.path.dirname(path)
    paths = desc.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise RequestError("import: paths: expected a list of directories")
    paths = [os.path.normpath(os.path.join(base, p)) for p in paths]
    env = desc.get("env") or {}
    if not isinstance(env, dict):
        raise RequestError("import: env: expected a table")
    env = {str(k): str(v) for k, v in env.items()}
    stubs = make_stubs(desc.get("stub-modules") or {}, base)
    # Files below these directories are the project's: their modules are dropped after the
    # import (so the next import reads them again) and their digests guard the cache.
    project = [os.path.realpath(d) for d in [base, *paths, *(d for m in stubs.values() for d in m.__path__)]]
    saved_env = {k: os.environ.get(k) for k in env}
    saved_modules = {k: sys.modules.get(k) for k in stubs}
    saved_path = list(sys.path)
    before = set(sys.modules)
    os.environ.update(env)
    sys.path[:0] = paths
    sys.modules.update(stubs)
    digest = hashlib.sha256(cache_key[1].encode()).hexdigest()[:16]
    name = f"kbuild_triton_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    files = {path: file_digest(path)}
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        raise RequestError(f"{path}: import failed ({family}): {type(e).__name__}: {e}") from e
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for k in set(sys.modules) - before:
            m = sys.modules[k]
            f = getattr(m, "__file__", None)
            # Stubs and what imported under them read the stubs' flags at import, and the
            # project's modules may change: none of them stays for the next import.
            if k == "triton" or k.startswith("triton."):
                continue  # Triton itself stays imported once
            if (any(k == s or k.startswith(s + ".") for s in stubs) or k == name
                    or (f and under(f, project))):
                if f and k != name:
                    files[f] = file_digest(f)
                sys.modules.pop(k, None)
        for k, v in saved_modules.items():
            if v is not None:
                sys.modules[k] = v
        sys.path[:] = saved_path
    MODULES[cache_key] = (module, files)
    return module


# ---- the kernel ----------------------------------------------------------------------------

def wrappers(module, name, path):
    """The chain from the module attribute to the JITFunction: [outermost, ..., JITFunction]."""
    obj = getattr(module, name, None)
    if obj is None:
        raise RequestError(f"{path}: no function `{name}`")
    chain = [obj]
    # Through @triton.heuristics / @triton.autotune (and look-alike) wrappers.
    while not isinstance(chain[-1], JITFunction):
        nxt = getattr(chain[-1], "fn", None)
        if nxt is None or len(chain) > 8:
            raise RequestError(f"{path}: `{name}` is not a @triton.jit function")
        chain.append(nxt)
    return chain


def family_of(req):
    family = req.get("family")
    if family is None:
        backend = (req.get("target") or {}).get("backend") if isinstance(req.get("target"), dict) else None
        family = {"cuda": "nvidia", "hip": "amd"}.get(backend)
    if family not in ("nvidia", "amd"):
        raise RequestError("`family` (nvidia or amd) missing, and no target backend (cuda or hip) to take it from")
    return family


def kernel_of(req):
    for field in ("file", "function"):
        if not isinstance(req.get(field), str):
            raise RequestError(f"`{field}` missing")
    if not os.path.isabs(req["file"]):
        raise RequestError(f"`file` must be an absolute path: {req['file']}")
    module = load_module(req["file"], req.get("import"), family_of(req))
    return wrappers(module, req["function"], req["file"])


def resolve(node, scope):
    """The value a Name or dotted Attribute in a @jit body refers to, or None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = resolve(node.value, scope)
        if owner is not None:
            try:
                return getattr(owner, node.attr, None)
            except Exception:
                return None
    return None


def jit_dependencies(fn):
    """fn and every @jit function it reaches by name (what Triton's cache key walks)."""
    todo, seen = [fn], {}
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen[id(f)] = f
        try:
            scope = f.get_capture_scope()
            tree = f.parse()
        except Exception:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute)):
                v = resolve(node, scope)
                if isinstance(v, JITFunction) and id(v) not in seen:
                    todo.append(v)
    return list(seen.values())


def op_key(req):
    chain = kernel_of(req)
    fn = chain[-1]
    constexprs = resolved_constexprs(chain, req)
    # Triton's own @jit library functions are part of the toolchain, which kbuild keys apart.
    deps = [f for f in jit_dependencies(fn) if not f.fn.__module__.startswith("triton.")]
    files = sorted({f.fn.__code__.co_filename for f in deps})
    names = sorted(f"{f.fn.__code__.co_filename}:{f.fn.__qualname__}" for f in deps)
    return {"key": fn.cache_key, "files": files, "functions": names, "constexprs": constexprs}


def op_configs(req):
    chain = kernel_of(req)
    tuners = [w for w in chain if isinstance(w, Autotuner)]
    heur = [k for w in chain if isinstance(w, Heuristics) for k in w.values]
    configs = []
    for i, c in enumerate(tuners[0].configs if tuners else []):
        where = f"{req['file']}: `{req['function']}`: autotune config {i} ({c})"
        if getattr(c, "ir_override", None):
            raise RequestError(f"{where}: ir_override replaces the compile with a file; kbuild does not build it")
        for k, v in c.kwargs.items():
            if not isinstance(v, (bool, int, float, str)):
                raise RequestError(f"{where}: `{k}` = {v!r} is not an integer, float, bool or string")
        for k in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
            v = getattr(c, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise RequestError(f"{where}: {k} = {v!r} is not an integer")
        configs.append({"kwargs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages,
                        "num_ctas": c.num_ctas, "maxnreg": c.maxnreg, "pre_hook": c.pre_hook is not None})
    return {"autotuned": bool(tuners), "configs": configs, "key": list(tuners[0].keys) if tuners else [],
            "heuristics": heur}


class TypedArg:
    """Stands for a non-None argument of a known type when heuristics read the arguments."""

    def __init__(self, ty):
        self.dtype = ty

    def __repr__(self):
        return f"<{self.dtype} argument>"


def heuristic_values(chain, req):
    """What the @triton.heuristics wrappers compute, outermost first (as Triton runs them)."""
    args = {k: (None if v is None else TypedArg(v)) for k, v in (req.get("signature") or {}).items()}
    args.update(req.get("constexprs") or {})
    example = req.get("example") or {}
    if not isinstance(example, dict):
        raise RequestError("`example` must be a table of argument values")
    args.update(example)
    given = req.get("constexprs") or {}
    out = {}
    for w in chain:
        if isinstance(w, Heuristics):
            for name, heur in w.values.items():
                try:
                    out[name] = args[name] = heur(args)
                except Exception as e:
                    if name in given:
                        # It reads a run-time value (a size, a stride): the caller's value stands.
                        out[name] = args[name] = given[name]
                        continue
                    raise RequestError(f"{req['file']}: `{req['function']}`: heuristic for `{name}` failed on "
                                       f"the given arguments: {type(e).__name__}: {e}; give its value in `constexprs`") from e
    for k, v in out.items():
        if not isinstance(v, (bool, int, float, str, type(None))):
            raise RequestError(f"heuristic `{k}` computed {v!r}, not a JSON value")
    return out


def op_heuristics(req):
    return {"constexprs": heuristic_values(kernel_of(req), req)}


def resolved_constexprs(chain, req):
    """The request's constexprs, filled from the @triton.heuristics wrappers when it asks."""
    if not isinstance(req.get("constexprs") or {}, dict):
        raise RequestError("`constexprs` must be a table")
    constexprs = dict(req.get("constexprs") or {})
    if req.get("heuristics"):
        for k, v in heuristic_values(chain, req).items():
            if k in constexprs and constexprs[k] != v:
                raise RequestError(f"{req['file']}: `{req['function']}`: constexpr `{k}` = {constexprs[k]!r}, "
                                   f"but the heuristics compute {v!r}")
            constexprs[k] = v
    return constexprs


def specialize(fn, req, constexprs):
    """ASTSource arguments and the parameter table, from the request's specialization."""
    names = list(fn.arg_names)
    signature = req.get("signature") or {}
    div16 = set(req.get("divisible_16") or [])
    ones = set(req.get("equal_to_1") or [])
    if not isinstance(signature, dict) or not isinstance(constexprs, dict):
        raise RequestError("`signature` and `constexprs` must be tables")
    for arg in list(signature) + list(constexprs) + list(div16) + list(ones):
        if arg not in names:
            raise RequestError(f"`{req['function']}` has no argument `{arg}` (it has {', '.join(names)})")
    sig, consts, attrs, params, removed = {}, {}, {}, [], []
    for i, p in enumerate(fn.params):
        name = p.name
        if p.is_constexpr:
            if name not in constexprs:
                raise RequestError(f"constexpr `{name}` has no value in `constexprs`")
            sig[name] = "constexpr"
            consts[name] = constexprs[name]
            continue
        if name in constexprs:
            raise RequestError(f"`{name}` is not a tl.constexpr argument; give its type in `signature`")
        ty = signature.get(name, "int" if name in ones else "missing")
        if ty == "missing":
            raise RequestError(f"argument `{name}` has no type in `signature` (null for one passed as None)")
        if ty is None or ty == "None":
            sig[name] = "constexpr"
            consts[name] = None
            removed.append({"name": name, "why": "none"})
            continue
        if not isinstance(ty, str) or not re.fullmatch(r"\*?k?[a-z0-9]+", ty):
            raise RequestError(f"argument `{name}`: bad type {ty!r} (e.g. \"*fp32\", \"i32\", \"fp32\")")
        if name in ones:
            # What Triton's launcher does with an int argument equal to 1: a constexpr 1.
            if ty != "int" and ty not in INT_TYPES:
                raise RequestError(f"equal_to_1: `{name}` has type {ty}, not an int type")
            sig[name] = "constexpr"
            consts[name] = 1
            removed.append({"name": name, "why": "equal_to_1"})
            continue
        sig[name] = ty
        if name in div16:
            attrs[(i,)] = [["tt.divisibility", 16]]
        params.append({"name": name, "type": ty, "divisible_16": name in div16})
    params.append({"name": "global_scratch", "type": "scratch", "divisible_16": False})
    params.append({"name": "profile_scratch", "type": "scratch", "divisible_16": False})
    return ASTSource(fn, sig, consts, attrs), params, removed


# ---- compile -------------------------------------------------------------------------------

def write_atomic(path, data):
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def parse_ptxas(log):
    """Registers, spills and stack from a `ptxas -v` report (one kernel per Triton object)."""
    out = {}
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        out.update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
    m = re.search(r"Used (\d+) registers", log)
    if m:
        out["registers"] = int(m[1])
    return out if len(out) == 4 else None


def run_ptxas(capability, ptx):
    """The report of the ptxas Triton itself picks for this arch, run -v on the PTX (when the
    compile came from Triton's cache and ptxas did not run)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
    with tempfile.TemporaryDirectory(prefix="kbuild-ptxas-") as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
                            src, "-o", os.path.join(d, "k.cubin")],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    return (r.stdout + r.stderr)[:MAX_LOG].decode("utf-8", "replace")


METADATA_KEYS = ("num_warps", "warp_size", "num_ctas", "num_stages", "shared", "global_scratch_size",
                 "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                 "launch_cooperative_grid", "launch_pdl", "tmem_size", "arch", "triton_version")


def check_target(t):
    if not isinstance(t, dict):
        raise RequestError("`target` missing")
    backend, arch, warp = t.get("backend"), t.get("arch"), t.get("warp_size")
    if backend == "cuda":
        if not isinstance(arch, int) or isinstance(arch, bool) or not 50 <= arch < 200 or warp != 32:
            raise RequestError(f"unknown target {json.dumps(t)}: cuda takes a compute capability number "
                               f"(75, 90, 120, ...) and warp_size 32")
    elif backend == "hip":
        if not isinstance(arch, str) or not HIP_ARCH.match(arch) or warp not in (32, 64):
            raise RequestError(f"unknown target {json.dumps(t)}: hip takes a gfx processor name "
                               f"(gfx942, gfx1100, ...) and warp_size 32 or 64")
    else:
        raise RequestError(f"unknown target {json.dumps(t)}: backend is cuda or hip")
    return backend, arch, warp


def op_compile(req):
    backend, arch, warp = check_target(req.get("target"))
    out = req.get("out")
    if not isinstance(out, str) or not os.path.isabs(out):
        raise RequestError("`out` must be an absolute path prefix")
    chain = kernel_of(req)
    fn = chain[-1]
    constexprs = resolved_constexprs(chain, req)
    src, params, removed = specialize(fn, req, constexprs)
    options = req.get("options") or {}
    if not isinstance(options, dict):
        raise RequestError("`options` must be a table")
    options = {k: v for k, v in options.items() if v is not None}
    where = f"{req['file']}: `{req['function']}` for {backend} {arch}"
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        try:
            k = triton.compile(src, target=GPUTarget(backend, arch, warp), options=options)
        except Exception as e:
            raise RequestError(f"{where}: {type(e).__name__}: {str(e)[:4000]}") from e
    md = k.metadata._asdict()
    log = captured.getvalue()[:MAX_LOG]
    fmt = "cubin" if backend == "cuda" else "hsaco"
    obj = f"{out}.{fmt}"
    write_atomic(obj, k.asm[fmt])
    meta = {key: md.get(key) for key in METADATA_KEYS if md.get(key) is not None}
    for key in ("global_scratch_size", "profile_scratch_size", "tmem_size"):
        meta.setdefault(key, 0)  # HIP in 3.6 has no global scratch (the launcher passes NULL)
    for key in ("global_scratch_align", "profile_scratch_align"):
        meta.setdefault(key, 1)
    meta.setdefault("launch_pdl", False)
    meta["target"] = {"backend": backend, "arch": arch, "warp_size": warp}
    spills = None
    if backend == "cuda":
        ptx = k.asm["ptx"]
        write_atomic(f"{out}.ptx", ptx.encode())
        m = re.search(r"^\.version (\d+\.\d+)", ptx, re.M)
        if m:
            meta["ptx_version"] = m[1]
        spills = parse_ptxas(log)
        if spills is None:
            log = run_ptxas(arch, ptx)
            spills = parse_ptxas(log)
    return {"object": obj, "format": fmt, "symbol": md.get("name"), "log": log, "spills": spills,
            "metadata": meta, "params": params, "removed": removed, "constexprs": constexprs}


# ---- the loop ------------------------------------------------------------------------------

def respond(resp):
    REAL_STDOUT.write(json.dumps(resp, sort_keys=True) + "\n")
    REAL_STDOUT.flush()


OPS = {"key": op_key, "compile": op_compile, "configs": op_configs, "heuristics": op_heuristics}


def serve():
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline(MAX_REQUEST + 1)
        if not line:
            return
        if len(line) > MAX_REQUEST:
            # Drop the rest of the oversized line.
            while line and not line.endswith(b"\n"):
                line = stdin.readline(MAX_REQUEST)
            respond({"ok": False, "error": f"request over {MAX_REQUEST} bytes"})
            continue
        if not line.strip():
            continue
        rid = req = None
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise RequestError(f"a request is one line of JSON: {e}") from e
            if not isinstance(req, dict):
                raise RequestError("a request is a JSON object")
            rid = req.get("id")
            op = req.get("op")
            if op == "hello":
                body = {"triton_version": triton.__version__, "python": sys.version.split()[0]}
            elif op in OPS:
                body = OPS[op](req)
            else:
                raise RequestError(f"unknown op {op!r} (hello, key, configs, heuristics, compile)")
            resp = {"ok": True, **body}
        except RequestError as e:
            resp = {"ok": False, "error": str(e)}
        except BaseException as e:  # a worker outlives any one request (SystemExit from a module too)
            if isinstance(e, KeyboardInterrupt):
                raise
            what = req.get("function") if isinstance(req, dict) else None
            resp = {"ok": False, "error": f"{what or 'request'}: {type(e).__name__}: {e}",
                    "trace": traceback.format_exc(limit=6)}
        if rid is not None:
            resp["id"] = rid
        respond(resp)


if __name__ == "__main__":
    serve()
