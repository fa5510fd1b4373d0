#!/usr/bin/env python3
"""The `kbuild` Python package on a GPU with torch (scripts/device/python-h200.sh runs it).

    python-h200.py DIR      # DIR = .device/python (the wheel installed, kb-h200/, the bundle)

Each section prints PASS or FAIL lines and its figures; the exit code is the number of FAILs.
"""
import glob
import json
import os
import statistics
import sys
import time
import traceback

import torch

import kbuild
import kbuild.torch as ktorch

FAILS = 0


def check(ok, what):
    global FAILS
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS += 1


def rel_l2(a, b):
    a, b = a.double(), b.double()
    den = b.norm().item()
    return float("inf") if den == 0 else (a - b).norm().item() / den


def section(title):
    print(f"\n## {title}", flush=True)


def graph_time(run, iters=50, warmup=5):
    """Median and min microseconds of a CUDA-graph replay of `run` (as gdn-fla.py times FLA)."""
    run()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(warmup + iters):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times), min(times)


def rmsnorm(pkg):
    section("rmsnorm from the bundle on torch tensors, against torch.nn.functional.rms_norm")
    print(pkg)
    k = pkg.kernel("rmsnorm_f32")
    print(repr(k), "attributes:", k.attributes)
    print("attribute checks:", json.dumps(k.attribute_checks))
    print("params:", json.dumps(k.params))
    torch.manual_seed(0)
    for rows, cols in ((1, 256), (64, 4096), (333, 5120)):
        x = torch.randn(rows, cols, device="cuda")
        w = torch.randn(cols, device="cuda")
        y = torch.empty_like(x)
        k.launch(rows, 256, x, w, y, rows, cols, 1e-6)
        torch.cuda.synchronize()
        ref = torch.nn.functional.rms_norm(x, (cols,), w, eps=1e-6)
        err = rel_l2(y, ref)
        check(err <= 1e-5, f"rmsnorm_f32 {rows}x{cols}: rel-L2 {err:.2e} against rms_norm")
        # Side by side: kbuild's kernel (launched from Python) and torch's own op, each as a
        # CUDA-graph replay of one call, so the host's launch path is off the clock for both.
        kb_med, kb_min = graph_time(lambda: k.launch(rows, 256, x, w, y, rows, cols, 1e-6), iters=200)
        t_med, t_min = graph_time(lambda: torch.nn.functional.rms_norm(x, (cols,), w, eps=1e-6), iters=200)
        print(f"  time {rows}x{cols}: graph replay median kbuild {kb_med:.1f} us (min {kb_min:.1f}), "
              f"torch rms_norm {t_med:.1f} us (min {t_min:.1f})")
    kb = pkg.kernel("rmsnorm_bf16")
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    kb.launch(64, 256, x, w, y, 64, 4096, 1e-6)
    ref = torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), eps=1e-6)
    err = rel_l2(y, ref)
    check(err <= 1e-2, f"rmsnorm_bf16 64x4096: rel-L2 {err:.2e} against rms_norm in f32 (bf16 output)")
    return k


def refused(k):
    section("wrong-argument launches are refused before the driver")
    x = torch.randn(4, 256, device="cuda")
    w = torch.randn(256, device="cuda")
    y = torch.zeros_like(x)
    cases = [
        ((x, w, y, x, 256, 1e-6), "argument 3 is 8 bytes, the kernel takes 4"),
        ((x, w, y, 4, 256), "5 arguments given, the kernel takes 6"),
        ((x, w.cpu(), y, 4, 256, 1e-6), "argument 1 is a tensor on cpu, the kernel runs on cuda:"),
        ((x, w, y, 2**40, 256, 1e-6), "argument 3 is 1099511627776, which does not fit"),
    ]
    for args, want in cases:
        try:
            k.launch(4, 256, *args)
            check(False, f"refused: {want} (it launched)")
        except kbuild.LaunchError as e:
            check(want in str(e), f"refused: {e}")
    torch.cuda.synchronize()
    check(bool((y == 0).all()), "nothing was written by the refused launches")


def graph(k):
    section("a launch captured in a CUDA graph (torch.cuda.graph), replayed")
    rows, cols = 64, 4096
    x = torch.randn(rows, cols, device="cuda")
    w = torch.randn(cols, device="cuda")
    y = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        k.launch(rows, 256, x, w, y, rows, cols, 1e-6)  # the current stream: s
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k.launch(rows, 256, x, w, y, rows, cols, 1e-6)
    for i in range(3):
        x.copy_(torch.randn(rows, cols, device="cuda"))
        y.zero_()
        g.replay()
        torch.cuda.synchronize()
        err = rel_l2(y, torch.nn.functional.rms_norm(x, (cols,), w, eps=1e-6))
        check(err <= 1e-5, f"replay {i}: rel-L2 {err:.2e}")


def custom_op(pkg):
    section("kbuild.torch.register_op under torch.compile")

    @ktorch.register_op(pkg, "kbuild_test::rmsnorm", kernel="rmsnorm_f32")
    def rms(k, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        rows, cols = x.shape
        y = torch.empty_like(x)
        k.launch(rows, 256, x, w, y, rows, cols, eps)
        return y

    @rms.register_fake
    def _(x, w, eps):
        return torch.empty_like(x)

    x = torch.randn(32, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    f = torch.compile(lambda x, w: rms(x, w, 1e-6) * 2.0, fullgraph=True)
    err = rel_l2(f(x, w), 2.0 * torch.nn.functional.rms_norm(x, (1024,), w, eps=1e-6))
    check(err <= 1e-5, f"torch.compile(fullgraph) through the custom op: rel-L2 {err:.2e}")


def import_fla():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import importlib
    gdn_fla = importlib.import_module("gdn-fla")
    return gdn_fla.import_fla()


def tile_state(s, dk, dv, parts=4):
    """[Hv, dk, dv] -> kernels/gdn/gdn_common.h's tiled S [Hv][dv/8][dk/parts][parts][8]."""
    hv = s.shape[0]
    rows = dk // parts
    return s.view(hv, parts, rows, dv // 8, 8).permute(0, 3, 2, 1, 4).contiguous()


def gdn(pkg):
    section("GDN verify step of one layer (gdn_step_verify) against FLA's fused_recurrent_gated_delta_rule")
    try:
        fla, how = import_fla()
    except Exception as e:  # noqa: BLE001 - report and go on
        check(False, f"FLA import: {e!r}")
        return
    print("FLA:", how)
    hk, hv, dk, dv, tw = 16, 48, 128, 128, 8
    C = 2 * hk * dk + hv * dv
    torch.manual_seed(1)
    dev = "cuda"
    q = torch.nn.functional.normalize(torch.randn(1, tw, hk, dk, device=dev), dim=-1, eps=1e-6) / dk ** 0.5
    kk = torch.nn.functional.normalize(torch.randn(1, tw, hk, dk, device=dev), dim=-1, eps=1e-6)
    v = torch.randn(1, tw, hv, dv, device=dev)
    g = -torch.nn.functional.softplus(torch.randn(1, tw, hv, device=dev)) * 0.5
    beta = torch.sigmoid(torch.randn(1, tw, hv, device=dev))
    h0 = torch.randn(1, hv, dk, dv, device=dev) * 0.1
    # kbuild's layouts (gdn_common.h): qkv [L][tw][C] = q | k | v per token, g and beta
    # [L][tw][Hv], S tiled, o [L][tw][Hv*dv].
    qkv = torch.cat([q.reshape(1, tw, hk * dk), kk.reshape(1, tw, hk * dk), v.reshape(1, tw, hv * dv)], dim=-1)
    assert qkv.shape[-1] == C
    qkv = qkv.contiguous()
    gk, bk = g.contiguous(), beta.contiguous()
    S = tile_state(h0[0], dk, dv)
    o = torch.zeros(1, tw, hv * dv, device=dev)
    for T in range(1, tw + 1):
        k = pkg.kernel("gdn_step_verify", variant=f"tokens{T}")

        def run_kbuild():
            k.launch((dv // 32, hv, 1), 128, qkv, gk, bk, S, o, tw, hk, hv, 0)

        qT, kT, vT = q[:, :T].contiguous(), kk[:, :T].contiguous(), v[:, :T].contiguous()
        gT, bT = g[:, :T].contiguous(), beta[:, :T].contiguous()

        def run_fla():
            return fla(qT, kT, vT, g=gT, beta=bT, scale=1.0, initial_state=h0, output_final_state=False)

        o.zero_()
        run_kbuild()
        ref, _ = run_fla()
        torch.cuda.synchronize()
        mine = o[:, :T].view(1, T, hv, dv)
        err = rel_l2(mine, ref)
        kb_med, kb_min = graph_time(run_kbuild)
        fla_med, fla_min = graph_time(run_fla)
        check(err <= 1e-5, f"T={T}: rel-L2 {err:.2e} kbuild vs FLA; graph replay median kbuild "
                           f"{kb_med:.1f} us (min {kb_min:.1f}), FLA {fla_med:.1f} us (min {fla_min:.1f})")


def overhead(k):
    section("Python launch overhead (host time per launch, rmsnorm_f32 1x256)")
    x = torch.randn(1, 256, device="cuda")
    w = torch.randn(256, device="cuda")
    y = torch.empty_like(x)
    raw = torch.cuda.current_stream().cuda_stream
    px, pw, py_ = (kbuild.Pointer(t.data_ptr()) for t in (x, w, y))
    n = 20000
    results = {}
    for label, launch in (
        ("kbuild_python_stream_int_us", lambda: k.launch(1, 256, x, w, y, 1, 256, 1e-6, stream=raw)),
        ("kbuild_python_torch_stream_us", lambda: k.launch(1, 256, x, w, y, 1, 256, 1e-6)),
        ("kbuild_python_pointers_us", lambda: k.launch(1, 256, px, pw, py_, 1, 256, 1e-6, stream=raw)),
    ):
        batches = []
        for _ in range(6):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n // 5):
                launch()
            batches.append((time.perf_counter() - t) * 1e6 / (n // 5))
        torch.cuda.synchronize()
        results[label] = round(statistics.median(batches[1:]), 3)
        # Host time only: batches of 100 (under the launch queue's depth), the GPU's run
        # waited for outside the timing.
        host = []
        for _ in range(200):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(100):
                launch()
            host.append((time.perf_counter() - t) * 1e6 / 100)
        torch.cuda.synchronize()
        results[label.replace("_us", "_host_us")] = round(statistics.median(host), 3)
    print(json.dumps({"schema": "kbuild.python-launch-overhead/v1", "launches": n, **results}))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    print("kbuild", kbuild.__version__, "from", kbuild.__file__)
    (bundle,) = glob.glob(os.path.join(d, "*.kbundle"))
    pkg = kbuild.open(bundle)
    print(repr(pkg), "trust:", pkg.trust_note)
    k = None
    for step in (rmsnorm, refused, graph, custom_op, gdn, overhead):
        try:
            if step is rmsnorm:
                k = step(pkg)
            elif step in (custom_op, gdn):
                step(pkg)
            else:
                step(k)
        except Exception:  # noqa: BLE001 - one section's failure must not hide the others
            traceback.print_exc()
            check(False, f"{step.__name__} raised")
    print(f"\n{FAILS} FAIL(s)")
    return min(FAILS, 100)


if __name__ == "__main__":
    sys.exit(main())
