#!/usr/bin/env python3
"""The FLA anchor of `kbuild run gdn`: FLA's `fused_recurrent_gated_delta_rule` (Triton) on the
same geometry and data as kbuild's GDN engine, side by side on the same GPU in the same run.

    gdn-fla.py DUMP.safetensors OUT.json

DUMP is `kbuild run gdn --dump-inputs DUMP` (kbuild-engine's anchor module): the seeded inputs
and the fp64 reference's q, k (L2-normalised, q scaled by 1/sqrt(dk)), v, g, beta, o and the
state after 1 and after W tokens. FLA gets exactly those q, k, v, g, beta (scale 1.0) and the
initial state, layers folded into its batch dimension (one launch for the stack, its best case)
and also one call per layer (the engine's shape), each captured into a CUDA graph and replayed
the way kbuild's bench does (events around each replay, median of 50 after 5 warm-ups).
For each T = 1..W, with and without the final state; FLA's o (and final state) are compared
with the fp64 reference (rel-L2)."""
import json
import os
import sys
import types


def import_fla():
    try:
        from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule
        return fused_recurrent_gated_delta_rule, "fla.ops"
    except Exception as e:  # an optional dependency of another op: skip fla.ops' __init__
        first_error = repr(e)
    for name in [m for m in sys.modules if m.startswith("fla.ops")]:
        del sys.modules[name]
    import fla
    root = os.path.join(os.path.dirname(fla.__file__), "ops")
    for mod, sub in (("fla.ops", ""), ("fla.ops.gated_delta_rule", "gated_delta_rule")):
        pkg = types.ModuleType(mod)
        pkg.__path__ = [os.path.join(root, sub) if sub else root]
        sys.modules[mod] = pkg
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule
    return fused_recurrent_gated_delta_rule, "fused_recurrent module (fla.ops import failed: " + first_error + ")"


def rel_l2(a, b):
    a = a.double()
    b = b.double()
    den = b.norm().item()
    return float("inf") if den == 0 else (a - b).norm().item() / den


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    dump, out_path = sys.argv[1], sys.argv[2]
    import torch
    from safetensors.torch import load_file

    fn, how = import_fla()
    import fla
    d = load_file(dump, device="cuda")
    L, W, Hk, dk = d["ref_q"].shape
    Hv, dv = d["ref_v"].shape[2], d["ref_v"].shape[3]
    h0 = d["state"].contiguous()
    result = {
        "schema": "kbuild.gdn-fla/v1",
        "fla": getattr(fla, "__version__", "?"),
        "imported": how,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "geometry": {"layers": L, "window": W, "hk": Hk, "hv": Hv, "dk": dk, "dv": dv},
        "rows": [],
    }
    state_bytes = L * Hv * dk * dv * 4

    def timed(run, iters=50, warmup=5):
        run()  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(warmup + iters):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end) * 1000.0)
        times.sort()
        n = len(times)
        med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
        return med, times[0]

    for T in range(1, W + 1):
        q = d["ref_q"][:, :T].contiguous()
        k = d["ref_k"][:, :T].contiguous()
        v = d["ref_v"][:, :T].contiguous()
        g = d["ref_g"][:, :T].contiguous()
        beta = d["ref_beta"][:, :T].contiguous()
        per_layer = [(q[i:i + 1].contiguous(), k[i:i + 1].contiguous(), v[i:i + 1].contiguous(),
                      g[i:i + 1].contiguous(), beta[i:i + 1].contiguous(), h0[i:i + 1].contiguous())
                     for i in range(L)]
        for final in (False, True):
            o, ht = fn(q, k, v, g=g, beta=beta, scale=1.0, initial_state=h0, output_final_state=final)
            torch.cuda.synchronize()
            row = {"T": T, "final_state": final,
                   "o_rel_l2_vs_fp64": rel_l2(o, d["ref_o"][:, :T])}
            ref_state = d.get(f"ref_state{T}")
            if final and ref_state is not None:
                row["state_rel_l2_vs_fp64"] = rel_l2(ht, ref_state)
            med, mn = timed(lambda: fn(q, k, v, g=g, beta=beta, scale=1.0, initial_state=h0,
                                       output_final_state=final))
            row["folded_median_us"], row["folded_min_us"] = med, mn

            def layers():
                for (ql, kl, vl, gl, bl, hl) in per_layer:
                    fn(ql, kl, vl, g=gl, beta=bl, scale=1.0, initial_state=hl, output_final_state=final)
            med, mn = timed(layers)
            row["per_layer_median_us"], row["per_layer_min_us"] = med, mn
            traffic = state_bytes * (2 if final else 1)
            row["folded_state_gb_per_s"] = traffic / (row["folded_median_us"] * 1e3)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
