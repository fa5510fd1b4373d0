"""Launches that need more than a grid and a block, on the H200 (issue 28): Triton kernels
built ahead of time by kbuild (tests/tests/triton/features.py: device-side tensor descriptors
with per-program global scratch, a cluster of 2 CTAs per program, a cooperative grid)
launched through `import kbuild`, against Triton's own JIT launch of the same kernel on the
same inputs.

    triton-features.py jit CASES.pt SRCDIR    # Triton's JIT of SRCDIR/features.py (torch allocates)
    triton-features.py aot CASES.pt OUTDIR    # kbuild's objects; never imports triton
"""
import sys

import torch

SEEDS = (0, 1, 2)
M, N, SCALE = 200, 256, 0.75
n, A = 100003, -1.25


def inputs(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return {
        "x2": torch.randn(M, N, device="cuda", generator=g),
        "x": torch.randn(n, device="cuda", generator=g),
        "y": torch.randn(n, device="cuda", generator=g),
    }


def jit(path):
    import triton

    sys.path.insert(0, sys.argv[3])
    import features

    # Triton asks its allocator for the descriptors' global scratch.
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    cases = {}
    for seed in SEEDS:
        x = inputs(seed)
        o2 = torch.empty_like(x["x2"])
        features.desc_scale[(triton.cdiv(M, 64),)](x["x2"], o2, M, N, SCALE, BM=64, BN=64)
        o = torch.empty_like(x["x"])
        features.cluster_axpy[(triton.cdiv(n, 256),)](x["x"], x["y"], o, n, A, BLOCK=256, num_ctas=2)
        sq = torch.empty_like(x["x"])
        features.coop_square[(triton.cdiv(n, 256),)](x["x"], sq, n, BLOCK=256, launch_cooperative_grid=True)
        torch.cuda.synchronize()
        cases[seed] = {"desc": o2.cpu(), "cluster": o.cpu(), "coop": sq.cpu()}
    torch.save(cases, path)
    print(f"JIT: {len(SEEDS)} seeds of desc_scale (global scratch), cluster_axpy (num_ctas=2), coop_square (cooperative)")


def aot(path, out):
    import kbuild

    pkg = kbuild.open(out)
    desc, cluster, coop = pkg.kernel("desc_scale"), pkg.kernel("cluster_axpy"), pkg.kernel("coop_square")
    want = torch.load(path)
    rows = []
    for seed in SEEDS:
        x = inputs(seed)
        o2 = torch.empty_like(x["x2"])
        desc.launch_triton(((M + 63) // 64,), x["x2"], o2, M, N, SCALE)
        o = torch.empty_like(x["x"])
        cluster.launch_triton(((n + 255) // 256,), x["x"], x["y"], o, n, A)
        sq = torch.empty_like(x["x"])
        coop.launch_triton(((n + 255) // 256,), x["x"], sq, n)
        torch.cuda.synchronize()
        # The fp64 reference, as a second oracle.
        ref2 = (x["x2"].double() * SCALE + 1.0).float().cpu()
        ref = (A * x["x"].double() + x["y"].double()).float().cpu()
        rows.append((seed, torch.equal(o2.cpu(), want[seed]["desc"]), torch.equal(o.cpu(), want[seed]["cluster"]),
                     (o2.cpu() - ref2).abs().max().item(), (o.cpu() - ref).abs().max().item(),
                     torch.equal(sq.cpu(), want[seed]["coop"])))
    # A graph of the scratch launch: the stream-ordered allocation is captured with it.
    x = inputs(9)
    o2 = torch.empty_like(x["x2"])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        desc.launch_triton(((M + 63) // 64,), x["x2"], o2, M, N, SCALE)
    torch.cuda.current_stream().wait_stream(s)
    direct = o2.clone()
    o2.zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        desc.launch_triton(((M + 63) // 64,), x["x2"], o2, M, N, SCALE)
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    replayed = torch.equal(o2, direct)
    assert "triton" not in sys.modules, "the kbuild process imported triton"
    print("seed | desc_scale = JIT | cluster_axpy = JIT | coop_square = JIT | desc max |err| vs fp64 | cluster max |err| vs fp64")
    for r in rows:
        print(f"{r[0]} | {r[1]} | {r[2]} | {r[5]} | {r[3]:.2e} | {r[4]:.2e}")
    print(f"desc_scale (global scratch) in a CUDA graph, replayed twice, bitwise equal to a direct launch: {replayed}")
    ok = all(r[1] and r[2] and r[5] for r in rows) and replayed
    print("features: PASS" if ok else "features: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "jit":
        jit(sys.argv[2])
    else:
        sys.exit(aot(sys.argv[2], sys.argv[3]))
