"""End-to-end checks of worker.py on a machine with no GPU:

    python3 -I build-system/triton/test_worker.py --site DIR [--fla FLA_WHEEL]

DIR holds Triton (pip install --target DIR triton==3.6.0); FLA_WHEEL is fla-core 0.6.0's wheel.
Prints one line per check and exits non-zero when any fails."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
MAX_LINE = 64 << 20

ADD = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def scaled(x_ptr, g, out_ptr, n, stride, BLOCK: tl.constexpr, HAS_G: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs * stride, mask=m)
    if HAS_G:
        x = x * tl.load(g + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)
'''

# The kernel calls a helper in the same file and one in another module; `unrelated` sits
# below the kernel (Triton's key includes the kernel's starting line).
KEYED = '''import triton
import triton.language as tl
from helpers import far


@triton.jit
def near(x):
    return x * 2


@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, far(near(x)), mask=offs < n)


def unrelated():
    return 1
'''
HELPERS = '''import triton


@triton.jit
def far(x):
    return x + 1
'''

ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
TARGETS = {
    "cuda 80": {"backend": "cuda", "arch": 80, "warp_size": 32},
    "cuda 90": {"backend": "cuda", "arch": 90, "warp_size": 32},
    "hip gfx942": {"backend": "hip", "arch": "gfx942", "warp_size": 64},
    "hip gfx1100": {"backend": "hip", "arch": "gfx1100", "warp_size": 32},
}


def fla_import():
    """What fla-core 0.6.0's fused_recurrent.py and chunk_delta_h.py need to import with no
    torch and no GPU: the real fla/ops/utils/op.py and softplus.py, stubs for the rest."""
    def utils(nvidia, hopper_like):
        return {"IS_NVIDIA": nvidia, "IS_NVIDIA_HOPPER": nvidia and hopper_like,
                "IS_NVIDIA_BLACKWELL": False, "IS_INTEL": False, "IS_GATHER_SUPPORTED": True,
                "input_guard": "@decorator", "autotune_cache_kwargs": {},
                "check_shared_mem": "@returns true" if hopper_like else "@returns false"}
    return {
        "stub-modules": {
            "torch": {"Tensor": "@class", "LongTensor": "@class", "autograd.Function": "@class"},
            "fla.backends": {"dispatch": "@decorator"},
            "fla.ops.utils": {"__path__": ["../utils"], "prepare_chunk_indices": "@function",
                              "prepare_chunk_offsets": "@function"},
            "fla.ops.utils.cache": {"fla_cache_autotune": "@autotune"},
            "fla.ops.utils.graph": {"get_static_buffer": "@function"},
        },
        "nvidia": {"stub-modules": {"fla.utils": utils(True, True)}},
        "amd": {"stub-modules": {"fla.utils": utils(False, False)}},
    }


FR_SIG = {**{a: "*bf16" for a in ("q", "k", "v", "beta", "o")},
          **{a: "*fp32" for a in ("g", "A_log", "dt_bias", "h0", "ht")},
          "cu_seqlens": "*i64", "gk": None, "gv": None, "scale": "fp32", "T": "i32"}
FR_CALLER = {"H": 16, "HV": 32, "K": 128, "V": 128, "BK": 128, "BV": 8, "USE_QK_L2NORM_IN_KERNEL": True,
             "IS_BETA_HEADWISE": True, "STATE_V_FIRST": False, "APPLY_BETA_SIGMOID": False, "ALLOW_NEG_EIGVAL": False}
FR_HEUR = {"USE_G": True, "USE_GK": False, "USE_GV": False, "USE_INITIAL_STATE": True, "STORE_FINAL_STATE": True,
           "IS_VARLEN": True, "USE_GATE_IN_KERNEL": True, "HAS_DT_BIAS": True}
CH_SIG = {**{a: "*bf16" for a in ("k", "v", "w", "v_new", "h")}, "g": "*fp32", "gk": None, "h0": "*fp32",
          "ht": "*fp32", "cu_seqlens": "*i64", "chunk_offsets": "*i32", "T": "i32"}
CH_CONST = {"H": 16, "HV": 32, "K": 128, "V": 128, "BT": 64, "USE_G": True, "USE_GK": False,
            "USE_INITIAL_STATE": True, "STORE_FINAL_STATE": True, "SAVE_NEW_VALUE": True, "STATE_V_FIRST": False,
            "IS_VARLEN": True}


class Worker:
    def __init__(self, site, cache):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
        env["TRITON_CACHE_DIR"] = cache
        self.p = subprocess.Popen([sys.executable, "-I", "-u", WORKER, "--site", site], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.n = 0

    def call(self, req):
        self.n += 1
        req = {"id": self.n, **req}
        self.p.stdin.write((json.dumps(req) + "\n").encode())
        self.p.stdin.flush()
        line = self.p.stdout.readline(MAX_LINE)
        if not line:
            raise RuntimeError(f"worker died (exit {self.p.wait()})")
        resp = json.loads(line)
        if resp.get("id") != self.n:
            raise RuntimeError(f"answer to request {resp.get('id')}, expected {self.n}")
        return resp

    def raw(self, text):
        self.p.stdin.write(text)
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline(MAX_LINE))

    def close(self):
        self.p.stdin.close()
        return self.p.wait(timeout=60)


FAILS = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name:58s} {detail}")
    if not ok:
        FAILS.append(name)


def cubin_arch(path):
    """(sm, arch-specific 'a') from a cubin's ELF header (ABI 7 and ABI 8 layouts differ)."""
    with open(path, "rb") as f:
        h = f.read(64)
    abi, flags = h[8], struct.unpack_from("<I", h, 0x30)[0]
    if abi >= 8:
        return (flags >> 8) & 0xFF, bool(flags & 0x8)
    return flags & 0xFF, bool(flags & 0x800)


def compile_req(file, function, target, out, **kw):
    return {"op": "compile", "file": file, "function": function, "target": TARGETS[target] if isinstance(target, str) else target,
            "out": out, **kw}


def timed(w, req):
    t = time.monotonic()
    r = w.call(req)
    return r, time.monotonic() - t


TUNED = """
import triton
import triton.language as tl


def hook(nargs):
    pass


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0, "HAS_X": lambda args: args["x_ptr"] is not None})
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=8, pre_hook=hook)], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, HAS_X: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(x_ptr + offs, 1.0)
    else:
        tl.store(x_ptr + offs, 1.0, mask=offs < n)
"""


def main():
    args = sys.argv[1:]
    site = args[args.index("--site") + 1] if "--site" in args else None
    fla = args[args.index("--fla") + 1] if "--fla" in args else None
    if not site:
        sys.exit(__doc__)
    tmp = tempfile.mkdtemp(prefix="kbuild-triton-test-")
    add = os.path.join(tmp, "add.py")
    with open(add, "w") as f:
        f.write(ADD)
    w = Worker(site, os.path.join(tmp, "cache1"))

    r = w.call({"op": "hello"})
    check("hello", r.get("ok") and r.get("triton_version"), f"triton {r.get('triton_version')} python {r.get('python')}")

    # The add kernel on four targets.
    objs = {}
    for name in TARGETS:
        out = os.path.join(tmp, "add_" + name.replace(" ", "_"))
        r, dt = timed(w, compile_req(add, "add_kernel", name, out, signature=ADD_SIG, constexprs={"BLOCK": 256},
                                     divisible_16=["x_ptr", "y_ptr", "out_ptr"], options={"num_warps": 4}))
        ok = r.get("ok") and os.path.isfile(r.get("object", ""))
        detail = f"{dt:.2f}s " + (f"{os.path.getsize(r['object'])} B shared={r['metadata']['shared']}" if ok else r.get("error", "")[:200])
        if ok and name.startswith("cuda"):
            sm, a = cubin_arch(r["object"])
            want = (TARGETS[name]["arch"], TARGETS[name]["arch"] >= 90)
            ok = (sm, a) == want and r["spills"] and r["metadata"].get("ptx_version")
            detail += f" ELF sm_{sm}{'a' if a else ''} regs={r['spills'] and r['spills'].get('registers')} ptx {r['metadata'].get('ptx_version')}"
        check(f"add_kernel {name}", ok, detail)
        if ok:
            objs[name] = open(r["object"], "rb").read()

    # Reproducible: a second worker with its own empty cache writes the same bytes.
    w2 = Worker(site, os.path.join(tmp, "cache2"))
    for name in ("cuda 90", "hip gfx1100"):
        out = os.path.join(tmp, "again_" + name.replace(" ", "_"))
        r = w2.call(compile_req(add, "add_kernel", name, out, signature=ADD_SIG, constexprs={"BLOCK": 256},
                                divisible_16=["x_ptr", "y_ptr", "out_ptr"], options={"num_warps": 4}))
        check(f"byte-identical from a fresh cache, {name}",
              r.get("ok") and open(r["object"], "rb").read() == objs.get(name), r.get("error", "")[:200])
    w2.close()

    # A None argument and an int equal to 1 leave the parameter list.
    r = w.call(compile_req(add, "scaled", "cuda 90", os.path.join(tmp, "scaled"),
                           signature={"x_ptr": "*fp16", "g": None, "out_ptr": "*fp16", "n": "i32", "stride": "i32"},
                           equal_to_1=["stride"], constexprs={"BLOCK": 128, "HAS_G": False},
                           divisible_16=["x_ptr", "n"], options={"num_warps": 2}))
    params = [(p["name"], p["type"], p["divisible_16"]) for p in r.get("params", [])]
    check("params / removed (None arg, int == 1)",
          r.get("ok") and params == [("x_ptr", "*fp16", True), ("out_ptr", "*fp16", False), ("n", "i32", True),
                                     ("global_scratch", "scratch", False), ("profile_scratch", "scratch", False)]
          and r["removed"] == [{"name": "g", "why": "none"}, {"name": "stride", "why": "equal_to_1"}],
          f"{[p[0] for p in params]} removed {[x['name'] + ':' + x['why'] for x in r.get('removed', [])]}"
          if r.get("ok") else r.get("error", "")[:200])
    with open(os.path.join(tmp, "scaled.ptx")) as f:
        nparams = f.read().count(".param .")
    check("PTX entry has exactly those parameters", nparams == 5, f"{nparams} .param")

    # Autotune configs (a list, hooks flagged) and heuristics: filled, checked, or, where one
    # reads a run-time value, the caller's given value kept; `key` and `compile` report them.
    tuned = os.path.join(tmp, "tuned.py")
    with open(tuned, "w") as f:
        f.write(TUNED)
    tk = {"file": tuned, "function": "tuned", "family": "nvidia", "signature": {"x_ptr": "*fp32", "n": "i32"}}
    r = w.call({**tk, "op": "configs"})
    check("configs: a list, with pre_hook flags",
          r.get("ok") and [(c["kwargs"], c["num_warps"], c["pre_hook"]) for c in r["configs"]]
          == [({"BLOCK": 64}, 2, False), ({"BLOCK": 256}, 8, True)] and r["heuristics"] == ["EVEN", "HAS_X"],
          json.dumps(r)[:300])
    r = w.call({**tk, "op": "key", "heuristics": True, "constexprs": {"BLOCK": 64}})
    check("key: heuristic that reads a run-time value, not given, is named",
          not r.get("ok") and "heuristic for `EVEN` failed" in r.get("error", ""), r.get("error", "")[:200])
    r = w.call({**tk, "op": "key", "heuristics": True, "constexprs": {"BLOCK": 64, "EVEN": True}})
    check("key: the given value stands where a heuristic cannot run; the rest filled",
          r.get("ok") and r["constexprs"] == {"BLOCK": 64, "EVEN": True, "HAS_X": True}, json.dumps(r)[:300])
    r = w.call({**tk, "op": "key", "heuristics": True, "constexprs": {"BLOCK": 64, "EVEN": True, "HAS_X": False}})
    check("key: a given value the heuristics disagree with is named",
          not r.get("ok") and "constexpr `HAS_X` = False, but the heuristics compute True" in r.get("error", ""),
          r.get("error", "")[:200])
    r = w.call({**tk, "op": "compile", "heuristics": True, "constexprs": {"BLOCK": 64, "EVEN": True},
                "target": TARGETS["cuda 90"], "out": os.path.join(tmp, "tuned"), "options": {"num_warps": 2}})
    check("compile reports the constexprs it used",
          r.get("ok") and r["constexprs"] == {"BLOCK": 64, "EVEN": True, "HAS_X": True}, json.dumps(r)[:300])

    # The source key follows called @jit helpers (same file and another module), not the rest.
    kdir = os.path.join(tmp, "keyed")
    os.makedirs(kdir)
    kfile, hfile = os.path.join(kdir, "kern.py"), os.path.join(kdir, "helpers.py")

    def key(src, helpers):
        with open(kfile, "w") as f:
            f.write(src)
        with open(hfile, "w") as f:
            f.write(helpers)
        r = w.call({"op": "key", "file": kfile, "function": "kern", "family": "nvidia", "import": {"paths": ["."]}})
        if not r.get("ok"):
            raise RuntimeError(r.get("error"))
        return r

    k0 = key(KEYED, HELPERS)
    check("key lists the helpers' files", sorted(k0["files"]) == sorted([kfile, hfile]), " ".join(map(os.path.basename, k0["files"])))
    k1 = key(KEYED.replace("return x * 2", "return x * 3"), HELPERS)
    check("key changes with a same-file helper's body", k1["key"] != k0["key"])
    k2 = key(KEYED, HELPERS.replace("x + 1", "x + 2"))
    check("key changes with another module's helper", k2["key"] != k0["key"])
    k3 = key(KEYED.replace("return 1", "return 2"), HELPERS)
    check("key stays when an unrelated function changes", k3["key"] == k0["key"])
    k4 = key(KEYED, HELPERS)
    check("key comes back when the edit is undone", k4["key"] == k0["key"])

    # Bad requests get ok:false and the worker keeps serving.
    bad = {
        "unknown function": compile_req(add, "nope", "cuda 90", os.path.join(tmp, "x"), signature=ADD_SIG, constexprs={"BLOCK": 128}),
        "bad type": compile_req(add, "add_kernel", "cuda 90", os.path.join(tmp, "x"),
                                signature={**ADD_SIG, "n": "int33!"}, constexprs={"BLOCK": 128}),
        "unknown target": compile_req(add, "add_kernel", {"backend": "cuda", "arch": 12345, "warp_size": 32},
                                      os.path.join(tmp, "x"), signature=ADD_SIG, constexprs={"BLOCK": 128}),
        "missing constexpr": compile_req(add, "add_kernel", "cuda 90", os.path.join(tmp, "x"), signature=ADD_SIG),
        "compile error (non-pow2 arange)": compile_req(add, "add_kernel", "hip gfx942", os.path.join(tmp, "x"),
                                                       signature=ADD_SIG, constexprs={"BLOCK": 100}),
        "missing file": compile_req("/nonexistent/k.py", "k", "cuda 90", os.path.join(tmp, "x")),
        "unknown op": {"op": "explode"},
    }
    for name, req in bad.items():
        r = w.call(req)
        check(f"refused: {name}", r.get("ok") is False and r.get("error"), r.get("error", "")[:110].replace("\n", " "))
    r = w.raw(b"not json\n")
    check("refused: malformed line", r.get("ok") is False, r.get("error", "")[:80])
    r = w.raw(b"x" * ((1 << 20) + 10) + b"\n")
    check("refused: line over 1 MiB", r.get("ok") is False, r.get("error", "")[:80])
    check("still serving after bad requests", w.call({"op": "hello"}).get("ok") is True)

    if fla:
        test_fla(w, fla, tmp)
    check("worker exits 0 at end of input", w.close() == 0)
    print(f"\n{len(FAILS)} failed" + (": " + ", ".join(FAILS) if FAILS else ""))
    sys.exit(1 if FAILS else 0)


def test_fla(w, wheel, tmp):
    root = os.path.join(tmp, "fla")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root)
    fr = os.path.join(root, "fla/ops/gated_delta_rule/fused_recurrent.py")
    ch = os.path.join(root, "fla/ops/common/chunk_delta_h.py")
    imp = fla_import()
    kernel = "fused_recurrent_gated_delta_rule_fwd_kernel"
    base = {"file": fr, "function": kernel, "import": imp, "signature": FR_SIG,
            "divisible_16": [a for a, t in FR_SIG.items() if t and t.startswith("*")], "options": {"num_warps": 1, "num_stages": 3}}
    r = w.call({**base, "op": "heuristics", "family": "nvidia", "constexprs": FR_CALLER})
    check("FLA fused_recurrent heuristics", r.get("ok") and r["constexprs"] == FR_HEUR, json.dumps(r.get("constexprs") or r.get("error"))[:200])
    keys = {}
    for name in ("cuda 90", "hip gfx1100"):
        r, dt = timed(w, {**base, "op": "compile", "target": TARGETS[name], "constexprs": {**FR_CALLER, **FR_HEUR},
                          "out": os.path.join(tmp, "fr_" + name.replace(" ", "_"))})
        ok = r.get("ok") and len(r["params"]) == 15 and [x["name"] for x in r["removed"]] == ["gk", "gv"]
        detail = f"{dt:.2f}s " + (f"{len(r['params'])} params shared={r['metadata']['shared']} {os.path.getsize(r['object'])} B"
                                  + (f" regs={r['spills']['registers']} spill={r['spills']['spill_stores']}" if r.get("spills") else "")
                                  if r.get("ok") else r.get("error", "")[:300])
        check(f"FLA {kernel[:24]}.. {name}", ok, detail)
        if r.get("ok"):
            keys[name] = open(r["object"], "rb").read()
            if name.startswith("hip"):
                check("FLA AMD object has no inline PTX", b"mov.f32" not in keys[name] and b"ex2.approx" not in keys[name])
    r, dt = timed(w, {**base, "op": "compile", "target": TARGETS["cuda 90"], "constexprs": FR_CALLER, "heuristics": True,
                      "out": os.path.join(tmp, "fr_heur")})
    check("FLA fused_recurrent with heuristics applied: same object",
          r.get("ok") and open(r["object"], "rb").read() == keys.get("cuda 90") and r["spills"],
          f"{dt:.2f}s (Triton's cache: spills from our own ptxas run: {r.get('spills')})" if r.get("ok") else r.get("error", "")[:200])
    r = w.call({"op": "key", "file": fr, "function": kernel, "import": imp, "family": "nvidia"})
    r2 = w.call({"op": "key", "file": fr, "function": kernel, "import": imp, "family": "amd"})
    check("FLA key differs per family (softplus: inline PTX vs tl)", r.get("ok") and r2.get("ok") and r["key"] != r2["key"],
          " ".join(sorted({os.path.relpath(f, root) for f in r.get("files", [])})))

    chk = "chunk_gated_delta_rule_fwd_kernel_h_blockdim64"
    for family, want in (("nvidia", 12), ("amd", 4)):
        r = w.call({"op": "configs", "file": ch, "function": chk, "import": imp, "family": family})
        check(f"FLA chunk_h configs ({family}) = {want}", r.get("ok") and r["autotuned"] and len(r["configs"]) == want,
              (f"{len(r['configs'])} configs key={r['key']}" if r.get("ok") else r.get("error", "")[:300]))
    if r.get("ok"):
        r = w.call({"op": "configs", "file": ch, "function": chk, "import": imp, "family": "nvidia"})
        for c in (r["configs"][0], r["configs"][-1]):
            rr, dt = timed(w, {"op": "compile", "file": ch, "function": chk, "import": imp, "target": TARGETS["cuda 90"],
                               "signature": CH_SIG, "constexprs": {**CH_CONST, **c["kwargs"]},
                               "divisible_16": [a for a, t in CH_SIG.items() if t and t.startswith("*")],
                               "options": {"num_warps": c["num_warps"], "num_stages": c["num_stages"]},
                               "out": os.path.join(tmp, "chunk_h")})
            cfg = f"BV={c['kwargs'].get('BV')} w={c['num_warps']} s={c['num_stages']}"
            check(f"FLA chunk_h cuda 90 {cfg}", rr.get("ok"),
                  f"{dt:.2f}s shared={rr['metadata']['shared']} ptxas {rr['spills']}"
                  if rr.get("ok") else rr.get("error", "")[:300])


if __name__ == "__main__":
    main()
