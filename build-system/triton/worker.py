"""kbuild's Triton compile worker: one long-lived process that compiles `@triton.jit` functions
ahead of time, for any NVIDIA or AMD target, on a machine with no GPU, no driver and no torch.

kbuild starts it as `python3 -I -u worker.py --site DIR` (DIR holds the pinned Triton) and talks
JSON lines: one request per stdin line, one response per stdout line, nothing else on stdout
(what imported modules print goes to stderr). A bad request gets {"ok": false, "error": ...} and
the worker goes on; it exits at end of input.

Requests (every one may carry "id", echoed back):
  {"op": "hello"} -> {"ok", "triton_version", "python"}
  {"op": "key", KERNEL} -> {"ok", "key", "files"}: the source identity of the function and of
      every @jit function and global it uses (Triton's own cache key), with no compile.
  {"op": "compile", KERNEL, "target": {"backend": "cuda"|"hip", "arch": 90|"gfx1100",
      "warp_size": 32}, "out": "/abs/prefix"} -> {"ok", "object", "format", "symbol", "log",
      "metadata", "params", "removed"}: writes prefix.cubin (and prefix.ptx) or prefix.hsaco.
KERNEL = "file": "/abs/kernel.py", "function": NAME, "import": {...} (below), "family":
  "nvidia"|"amd", "signature": {ARG: TYPE or null (passed as None)}, "constexprs": {ARG: VALUE},
  "divisible_16": [ARG...], "options": {"num_warps", "num_stages", "num_ctas", "maxnreg"}.

"import" says what the module needs to import here, declaratively (per target family, since a
module may read the device at import time):
  {"paths": [DIR...]} added to sys.path (relative to the kernel file's directory);
  {"env": {NAME: VALUE}} set while importing;
  {"stub-modules": {MODULE: {ATTR: VALUE}}} modules made before the import (and removed after,
      unless the real module was imported): VALUE is a JSON value, or one of the strings
      "@class" (an empty class), "@decorator" (returns the function, as @d and as @d(...)),
      "@function" (returns None), "@autotune" (triton.autotune with the same arguments);
  {"nvidia": {...}, "amd": {...}}: the same keys for one family only (merged over the rest).
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import traceback
import types

MAX_REQUEST = 1 << 20


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
REAL_STDOUT = sys.stdout
sys.stdout = sys.stderr

import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

# Triton runs ptxas -v and discards its report unless asked; kbuild reads spills from it.
knobs.nvidia.dump_ptxas_log = True


class RequestError(Exception):
    pass


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


def stub_value(module, attr, value):
    if value == "@class":
        return type(attr.rsplit(".", 1)[-1], (), {})
    if value == "@decorator":
        return identity_decorator
    if value == "@function":
        return lambda *a, **k: None
    if value == "@autotune":
        def autotune(*args, **kwargs):
            # FLA-style wrappers take triton.autotune's arguments plus their own.
            keep = {k: v for k, v in kwargs.items() if k in ("configs", "key", "prune_configs_by", "reset_to_zero", "restore_value", "do_bench", "warmup", "rep")}
            configs = keep.pop("configs", args[0] if args else [])
            key = keep.pop("key", args[1] if len(args) > 1 else [])
            return triton.autotune(configs=configs, key=key, **keep)
        return autotune
    if isinstance(value, str) and value.startswith("@"):
        raise RequestError(f"import: stub {module}.{attr}: unknown special value {value}")
    return value


def make_stubs(stubs):
    """Modules to put in sys.modules; dotted attributes (`autograd.Function`) make submodules."""
    made = {}

    def module_of(name):
        if name not in made:
            made[name] = types.ModuleType(name)
            made[name].__path__ = []
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(module_of(parent), child, made[name])
        return made[name]

    for name, attrs in stubs.items():
        if not isinstance(attrs, dict):
            raise RequestError(f"import: stub-modules.{name}: expected a table")
        m = module_of(name)
        for attr, value in attrs.items():
            owner, _, leaf = attr.rpartition(".")
            target = module_of(f"{name}.{owner}") if owner else m
            setattr(target, leaf, stub_value(name, attr, value))
    return made


MODULES = {}


def load_module(path, desc, family):
    """Import the kernel's file under its family's import description (cached per both)."""
    desc = family_description(desc or {}, family)
    cache_key = (path, json.dumps(desc, sort_keys=True))
    if cache_key in MODULES:
        return MODULES[cache_key]
    if not os.path.isfile(path):
        raise RequestError(f"{path}: no such file")
    base = os.path.dirname(path)
    paths = [os.path.normpath(os.path.join(base, p)) for p in desc.get("paths", [])]
    env = {str(k): str(v) for k, v in (desc.get("env") or {}).items()}
    stubs = make_stubs(desc.get("stub-modules") or {})
    saved_env = {k: os.environ.get(k) for k in env}
    saved_modules = {k: sys.modules.get(k) for k in stubs}
    saved_path = list(sys.path)
    os.environ.update(env)
    sys.path[:0] = paths
    sys.modules.update(stubs)
    digest = hashlib.sha256(cache_key[1].encode()).hexdigest()[:16]
    name = f"kbuild_triton_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise RequestError(f"{path}: import failed: {type(e).__name__}: {e}") from e
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for k, v in saved_modules.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        sys.path[:] = saved_path
    MODULES[cache_key] = module
    return module


def jit_function(module, name, path):
    obj = getattr(module, name, None)
    if obj is None:
        raise RequestError(f"{path}: no function `{name}`")
    seen = 0
    # Through @triton.heuristics / @triton.autotune wrappers to the JITFunction.
    while not isinstance(obj, JITFunction):
        obj = getattr(obj, "fn", None)
        seen += 1
        if obj is None or seen > 8:
            raise RequestError(f"{path}: `{name}` is not a @triton.jit function")
    return obj


def kernel_of(req):
    for field in ("file", "function", "family"):
        if not isinstance(req.get(field), str):
            raise RequestError(f"`{field}` missing")
    module = load_module(req["file"], req.get("import"), req["family"])
    return jit_function(module, req["function"], req["file"])


def source_files(fn):
    """The files of the function and of every @jit function its cache key covers."""
    files = set()
    todo, seen = [fn], set()
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        code = getattr(getattr(f, "fn", None), "__code__", None)
        if code is not None:
            files.add(code.co_filename)
        for g in getattr(f, "fn", None).__globals__.values() if code is not None else []:
            if isinstance(g, JITFunction) and g.fn.__code__.co_name in code.co_names:
                todo.append(g)
    return sorted(files)


def op_key(req):
    fn = kernel_of(req)
    return {"key": fn.cache_key, "files": source_files(fn)}


def specialize(fn, req):
    """ASTSource arguments and the parameter table, from the request's specialization."""
    names = list(fn.arg_names)
    signature = req.get("signature") or {}
    constexprs = req.get("constexprs") or {}
    div16 = set(req.get("divisible_16") or [])
    for arg in list(signature) + list(constexprs) + list(div16):
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
        if name not in signature:
            raise RequestError(f"argument `{name}` has no type in `signature` (use \"None\" for one passed as None)")
        ty = signature[name]
        if ty is None:
            sig[name] = "constexpr"
            consts[name] = None
            removed.append({"name": name, "why": "none"})
            continue
        sig[name] = ty
        if name in div16:
            attrs[(i,)] = [["tt.divisibility", 16]]
        params.append({"name": name, "type": ty, "divisible_16": name in div16})
    params.append({"name": "global_scratch", "type": "scratch", "divisible_16": False})
    params.append({"name": "profile_scratch", "type": "scratch", "divisible_16": False})
    return ASTSource(fn, sig, consts, attrs), params, removed


def write_atomic(path, data):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


METADATA_KEYS = ("num_warps", "warp_size", "num_ctas", "num_stages", "shared", "global_scratch_size",
                 "global_scratch_align", "profile_scratch_size", "profile_scratch_align",
                 "launch_cooperative_grid", "launch_pdl", "tmem_size", "ptx_version", "arch", "triton_version")


def op_compile(req):
    fn = kernel_of(req)
    t = req.get("target") or {}
    backend, arch, warp = t.get("backend"), t.get("arch"), t.get("warp_size")
    if backend not in ("cuda", "hip") or not isinstance(warp, int):
        raise RequestError(f"bad target {t}")
    if (backend == "cuda") != isinstance(arch, int):
        raise RequestError(f"bad target {t}: cuda takes a capability number, hip a gfx name")
    src, params, removed = specialize(fn, req)
    options = {k: v for k, v in (req.get("options") or {}).items() if v is not None}
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        try:
            k = triton.compile(src, target=GPUTarget(backend, arch, warp), options=options)
        except Exception as e:
            raise RequestError(f"{req['file']}: `{req['function']}` for {backend} {arch}: {type(e).__name__}: {e}") from e
    md = k.metadata._asdict()
    out = req.get("out")
    if not isinstance(out, str) or not os.path.isabs(out):
        raise RequestError("`out` must be an absolute path prefix")
    fmt = "cubin" if backend == "cuda" else "hsaco"
    obj = f"{out}.{fmt}"
    write_atomic(obj, k.asm[fmt])
    if backend == "cuda":
        write_atomic(f"{out}.ptx", k.asm["ptx"].encode())
    meta = {key: md.get(key) for key in METADATA_KEYS if md.get(key) is not None}
    for key in ("global_scratch_size", "profile_scratch_size", "tmem_size"):
        meta.setdefault(key, 0)
    for key in ("global_scratch_align", "profile_scratch_align"):
        meta.setdefault(key, 1)
    meta.setdefault("launch_pdl", False)
    meta["target"] = {"backend": backend, "arch": arch, "warp_size": warp}
    return {"object": obj, "format": fmt, "symbol": md.get("name"), "log": captured.getvalue(),
            "metadata": meta, "params": params, "removed": removed}


def respond(resp):
    REAL_STDOUT.write(json.dumps(resp, sort_keys=True) + "\n")
    REAL_STDOUT.flush()


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
        rid = None
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise RequestError("a request is a JSON object")
            rid = req.get("id")
            op = req.get("op")
            if op == "hello":
                body = {"triton_version": triton.__version__, "python": sys.version.split()[0]}
            elif op == "key":
                body = op_key(req)
            elif op == "compile":
                body = op_compile(req)
            else:
                raise RequestError(f"unknown op {op!r}")
            resp = {"ok": True, **body}
        except RequestError as e:
            resp = {"ok": False, "error": str(e)}
        except Exception as e:  # a worker outlives any one request
            resp = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=6)}
        if rid is not None:
            resp["id"] = rid
        respond(resp)


if __name__ == "__main__":
    serve()
