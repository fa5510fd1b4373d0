#!/usr/bin/env python3
"""FLA's fused recurrent GDN forward and chunked state kernel (its 12 configs): its own call or
launch (Triton's JIT) or kbuild's ahead-of-time objects through `import kbuild`, on the same
tensors.

    triton-fla.py jit CASES.pt        # FLA's call; writes the inputs and its outputs
    triton-fla.py aot CASES.pt OUTDIR # kbuild's object on the same inputs; never imports triton
    triton-fla.py bench OUTDIR        # host time per launch in one process: Triton's
                                      # kernel[grid](...) and FLA's call vs kbuild's launches

Geometry: the engine's (Hk = 16, Hv = 48, dk = dv = 128), one sequence, decode with an initial
and a final state, gate and dt-bias in the kernel, q/k L2-normalised in the kernel."""
import sys
import time

import torch

H, HV, K, V, BV = 16, 48, 128, 128, 8
TOKENS = [1, 2, 3, 4, 8, 16, 32, 64]
SEEDS = [0, 1, 2]


def inputs(T, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g, device="cuda", dtype=torch.float32).to(dtype)
    return dict(
        q=r(1, T, H, K, dtype=torch.bfloat16), k=r(1, T, H, K, dtype=torch.bfloat16),
        v=r(1, T, HV, V, dtype=torch.bfloat16), g=r(1, T, HV) * 0.5,
        beta=torch.sigmoid(r(1, T, HV)).to(torch.bfloat16), A_log=r(HV) * 0.1, dt_bias=r(HV) * 0.1,
        h0=r(1, HV, K, V) * 0.1, scale=K ** -0.5, T=T,
    )


CHUNK_T, BT = 256, 64
CHUNK_CONFIGS = [(bv, s, w) for bv in (32, 64) for s in (2, 3, 4) for w in (2, 4)]


def chunk_inputs(seed):
    g = torch.Generator(device="cuda").manual_seed(100 + seed)
    r = lambda *s: torch.randn(*s, generator=g, device="cuda", dtype=torch.float32)
    T = CHUNK_T
    return dict(k=(r(1, T, H, K) * 0.1).to(torch.bfloat16), w=(r(1, T, HV, K) * 0.1).to(torch.bfloat16),
                u=r(1, T, HV, V).to(torch.bfloat16), g=-torch.cumsum(torch.rand(1, T, HV, generator=g, device="cuda") * 0.05, 1),
                h0=r(1, HV, K, V) * 0.1)


def chunk_outputs():
    NT = CHUNK_T // BT
    return (torch.empty(1, NT, HV, K, V, device="cuda", dtype=torch.bfloat16),
            torch.empty(1, CHUNK_T, HV, V, device="cuda", dtype=torch.bfloat16),
            torch.empty(1, HV, K, V, device="cuda", dtype=torch.float32))


def chunk_jit():
    """Each of the 12 configs launched through Triton's JIT (the autotuner bypassed)."""
    from fla.ops.common import chunk_delta_h
    from triton.runtime.jit import JITFunction
    fn = chunk_delta_h.chunk_gated_delta_rule_fwd_kernel_h_blockdim64
    while not isinstance(fn, JITFunction):
        fn = fn.fn
    out = []
    for seed in SEEDS:
        x = chunk_inputs(seed)
        for bv, st, nw in CHUNK_CONFIGS:
            h, v_new, ht = chunk_outputs()
            fn[((V + bv - 1) // bv * HV,)](
                k=x["k"], v=x["u"], w=x["w"], v_new=v_new, g=x["g"], gk=None, h=h, h0=x["h0"], ht=ht,
                cu_seqlens=None, chunk_offsets=None, T=CHUNK_T, H=H, HV=HV, K=K, V=V, BT=BT, BV=bv,
                USE_G=True, USE_GK=False, USE_INITIAL_STATE=True, STORE_FINAL_STATE=True, SAVE_NEW_VALUE=True,
                STATE_V_FIRST=False, IS_VARLEN=False, num_warps=nw, num_stages=st)
            torch.cuda.synchronize()
            out.append(dict(seed=seed, config=(bv, st, nw), inputs=x, h=h, v_new=v_new, ht=ht))
    return out


def chunk_aot(pkg, cases):
    rows = {}
    for c in cases:
        bv, st, nw = c["config"]
        variant = f"bv{bv}-num_stages{st}-num_warps{nw}"
        x = c["inputs"]
        h, v_new, ht = chunk_outputs()
        k = pkg.kernel("gdn_chunk_h", variant=variant)
        k.launch_triton(((V + bv - 1) // bv * HV,), x["k"], x["u"], x["w"], v_new, x["g"], h, x["h0"], ht, CHUNK_T)
        torch.cuda.synchronize()
        same = all(torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a.view(torch.int32),
                               b.view(torch.int16) if b.dtype == torch.bfloat16 else b.view(torch.int32))
                   for a, b in ((h, c["h"]), (v_new, c["v_new"]), (ht, c["ht"])))
        rows.setdefault(variant, [k.triton["shared"], 0, 0])
        rows[variant][1] += same
        rows[variant][2] += 1
    print("| chunk config | dynamic shared B | h, v_new, final state bitwise |")
    print("|---|---|---|")
    ok = True
    for v, (sh, same, n) in rows.items():
        ok &= same == n
        print(f"| {v} | {sh} | {same}/{n} |")
    return ok


def jit(path):
    t0 = time.perf_counter()
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule_fwd
    cases = []
    first = None
    for T in TOKENS:
        for seed in SEEDS:
            x = inputs(T, seed)
            o, ht = fused_recurrent_gated_delta_rule_fwd(
                x["q"], x["k"], x["v"], x["g"], None, None, x["beta"], x["A_log"], x["dt_bias"],
                x["scale"], x["h0"], True, use_qk_l2norm_in_kernel=True)
            torch.cuda.synchronize()
            if first is None:
                first = time.perf_counter() - t0
            cases.append(dict(inputs=x, o=o, ht=ht))
    x = cases[0]["inputs"]
    args = (x["q"], x["k"], x["v"], x["g"], None, None, x["beta"], x["A_log"], x["dt_bias"], x["scale"], x["h0"], True)
    host = launch_time(lambda: fused_recurrent_gated_delta_rule_fwd(*args, use_qk_l2norm_in_kernel=True))
    chunk = chunk_jit()
    torch.save(dict(fused=cases, chunk=chunk), path)
    print(f"JIT: FLA's call, first result {first * 1e3:.0f} ms after the process's imports began; host time per call {host:.1f} us")


def launch_time(call, n=2000, batch=100):
    """Host time per call: the median over batches of `batch` calls, each batch timed without
    the wait for the GPU that follows it (a queue kept short never blocks a launch, so a
    kernel's own run time does not count)."""
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(n // batch):
        t = time.perf_counter()
        for _ in range(batch):
            call()
        per_call.append((time.perf_counter() - t) / batch * 1e6)
        torch.cuda.synchronize()
    per_call.sort()
    return per_call[len(per_call) // 2]


def aot(path, out):
    t0 = time.perf_counter()
    import kbuild
    pkg = kbuild.open(out)
    k = pkg.kernel("gdn_fused_recurrent_fwd")
    saved = torch.load(path)
    cases = saved["fused"]
    first = None
    rows = []
    for c in cases:
        x = c["inputs"]
        T = x["T"]
        o = torch.empty_like(x["v"])
        ht = torch.empty(1, HV, K, V, device="cuda", dtype=torch.float32)
        grid = ((V // BV) * 1 * HV,)
        k.launch_triton(grid, x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], o,
                        x["h0"], ht, float(x["scale"]), T)
        torch.cuda.synchronize()
        if first is None:
            first = time.perf_counter() - t0
        same_o = torch.equal(o.view(torch.int16), c["o"].view(torch.int16))
        same_ht = torch.equal(ht.view(torch.int32), c["ht"].view(torch.int32))
        rel = ((o.double() - c["o"].double()).norm() / c["o"].double().norm()).item()
        rows.append((T, same_o, same_ht, rel))
    x = cases[0]["inputs"]
    o = torch.empty_like(x["v"])
    ht = torch.empty(1, HV, K, V, device="cuda", dtype=torch.float32)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], o, x["h0"], ht,
            float(x["scale"]), x["T"])
    host = launch_time(lambda: k.launch_triton(((V // BV) * HV,), *args))
    raw = launch_time(lambda: k.launch(((V // BV) * HV,), 32, *args, 0, 0, shared=256))
    assert "triton" not in sys.modules, "the kbuild process imported triton"
    print(f"kbuild: first result {first * 1e3:.0f} ms after `import kbuild` began; host time per launch_triton {host:.1f} us (launch with block/shared by hand {raw:.1f} us); triton imported: no")
    print("| T | cases | o bitwise | final state bitwise | max rel-L2 of o |")
    print("|---|---|---|---|---|")
    by_t = {}
    for T, so, sh, rel in rows:
        by_t.setdefault(T, []).append((so, sh, rel))
    ok = True
    for T, rs in by_t.items():
        bo = sum(r[0] for r in rs)
        bh = sum(r[1] for r in rs)
        ok &= bo == len(rs) and bh == len(rs)
        print(f"| {T} | {len(rs)} | {bo}/{len(rs)} | {bh}/{len(rs)} | {max(r[2] for r in rs):.1e} |")
    ok &= chunk_aot(pkg, saved["chunk"])
    assert "triton" not in sys.modules, "the kbuild process imported triton"
    print("ALL BITWISE EQUAL" if ok else "NOT ALL EQUAL")


def bench(out):
    """Host time per launch of the fused recurrent kernel (T = 1), all in this process: Triton's
    own `kernel[grid](...)` with the arguments FLA passes, FLA's call, and kbuild's launches
    (the record applied in Rust; block and shared memory by hand) with torch's current stream."""
    import kbuild
    from fla.ops.gated_delta_rule import fused_recurrent as fr
    x = inputs(1, 0)
    o = torch.empty_like(x["v"])
    ht = torch.empty(1, HV, K, V, device="cuda", dtype=torch.float32)
    grid = ((V // BV) * HV,)
    kern = fr.fused_recurrent_gated_delta_rule_fwd_kernel

    def triton_launch():
        kern[grid](q=x["q"], k=x["k"], v=x["v"], g=x["g"], gk=None, gv=None, beta=x["beta"],
                   A_log=x["A_log"], dt_bias=x["dt_bias"], o=o, h0=x["h0"], ht=ht, cu_seqlens=None,
                   scale=x["scale"], T=1, H=H, HV=HV, K=K, V=V, BK=K, BV=BV, IS_BETA_HEADWISE=True,
                   USE_QK_L2NORM_IN_KERNEL=True, APPLY_BETA_SIGMOID=False, ALLOW_NEG_EIGVAL=False,
                   STATE_V_FIRST=False, num_warps=1, num_stages=3)

    args = (x["q"], x["k"], x["v"], x["g"], None, None, x["beta"], x["A_log"], x["dt_bias"], x["scale"], x["h0"], True)
    k = kbuild.open(out).kernel("gdn_fused_recurrent_fwd")
    kargs = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], o, x["h0"], ht,
             float(x["scale"]), 1)
    rows = [
        ("Triton `kernel[grid](...)`", launch_time(triton_launch)),
        ("FLA's `fused_recurrent_gated_delta_rule_fwd`", launch_time(lambda: fr.fused_recurrent_gated_delta_rule_fwd(*args, use_qk_l2norm_in_kernel=True))),
        ("kbuild `launch_triton` (record applied in Rust)", launch_time(lambda: k.launch_triton(grid, *kargs))),
        ("kbuild `launch` (block, shared, scratch by hand)", launch_time(lambda: k.launch(grid, 32, *kargs, 0, 0, shared=256))),
    ]
    # Same outputs from Triton's launch and kbuild's in this process too.
    triton_launch()
    o_jit, ht_jit = o.clone(), ht.clone()
    k.launch_triton(grid, *kargs)
    torch.cuda.synchronize()
    same = torch.equal(o.view(torch.int16), o_jit.view(torch.int16)) and torch.equal(ht.view(torch.int32), ht_jit.view(torch.int32))
    # A CUDA graph of the Triton launch (captured on torch's current stream, which
    # launch_triton uses by default) replays to the same bits.
    o_direct, ht_direct = o.clone(), ht.clone()
    o.zero_()
    ht.zero_()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k.launch_triton(grid, *kargs)  # warm-up on the capture stream, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    o.zero_()
    ht.zero_()
    with torch.cuda.graph(graph):
        k.launch_triton(grid, *kargs)
    graph.replay()
    torch.cuda.synchronize()
    replayed = torch.equal(o.view(torch.int16), o_direct.view(torch.int16)) and torch.equal(ht.view(torch.int32), ht_direct.view(torch.int32))
    base = rows[0][1]
    print("| launch (fused recurrent GDN, T = 1, torch's current stream) | host us per launch | vs kernel[grid] |")
    print("|---|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} | {us / base:.2f}x |")
    print(f"same outputs from kernel[grid] and launch_triton in one process: {same}")
    print(f"launch_triton captured in a CUDA graph and replayed, outputs bitwise equal to a direct launch: {replayed}")


if __name__ == "__main__":
    if sys.argv[1] == "jit":
        jit(sys.argv[2])
    elif sys.argv[1] == "bench":
        bench(sys.argv[2])
    else:
        aot(sys.argv[2], sys.argv[3])
