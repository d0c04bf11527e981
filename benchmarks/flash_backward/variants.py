"""Where flash_backward's time goes (issue 50): the attention backward of each named case at a
training shape, compiled at several tile choices and with or without skipped masked blocks,
each plan checked against the float32 reference and timed (do_bench_cudagraph), each kernel's
share from the torch profiler. Prints a table and writes JSON.

    python benchmarks/flash_backward/variants.py --out DIR
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import triton.testing as tt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe import kernel_times, save_rows  # noqa: E402

CASES = [  # (name, sizes); "scaled_attention": softmax(Q K^T / sqrt(d_h)) V, causal's scale without its mask
    ("attention", {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128}),
    ("scaled_attention", {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128}),
    ("causal_attention", {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128}),
    ("causal_attention", {"h": 4, "t_q": 1000, "t_kv": 1000, "d_h": 64}),  # tiles that do not divide
]
VARIANTS = [  # (label, tiles, skip, candidate)
    ("default", None, True, None),
    ("no_skip", None, False, None),
    ("m128_n64_t256", {"block_m": 128, "block_n": 64, "threads": 256}, True, None),
    ("m64_n128", {"block_m": 64, "block_n": 128}, True, None),
    ("stages1", {"stages": 1}, True, None),
    # the TileLang example's dK/dV tile for d_h 128 (128 keys, 32 queries a block, 256 threads), and deeper
    ("n32", {"block_m": 128, "block_n": 32, "threads": 256}, True, None),
    ("stages3", {"block_m": 128, "block_n": 64, "threads": 256, "stages": 3}, True, None),
    # dQ added atomically from the dK/dV kernel (flash_backward's dq="atomic")
    ("atomic_dq", None, True, "flash_backward_exp2_atomic_dq"),
    ("atomic_dq_m64_t128", {"block_m": 64, "block_n": 64, "threads": 128}, True, "flash_backward_exp2_atomic_dq"),
]


def _scaled(sizes: dict):
    from leantile.dag import DagM
    g = DagM("scaled_attention", sizes)
    q, k, v = (g.input(n, ["h", t, "d_h"]) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", nargs="*", help="labels to run (default: all)")
    ap.add_argument("--cases", nargs="*", help="case names to run (default: all)")
    args = ap.parse_args(argv)
    import leantile
    from leantile import architectures
    from leantile.autodiff import vjp
    from leantile.reference import saved_from_forward
    from leantile.derive.rules import flash_backward as fb
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    skip_site = fb.FlashBackward._skip
    for name, sizes in CASES:
        if args.cases and name not in args.cases:
            continue
        fwd = _scaled(sizes) if name == "scaled_attention" else architectures.build(name, **sizes)
        back = vjp(fwd)
        bw = back.graph
        for label, tiles, skip, cand in VARIANTS:
            if ("causal" not in name and label in ("no_skip", "m64_n128", "stages1")) or \
                    (args.variants and label not in args.variants):
                continue
            fb.FlashBackward._skip = skip_site if skip else (lambda self, cx, site, chain: site)
            row = {"case": name, "sizes": sizes, "variant": label, "tiles": tiles}
            try:
                k = leantile.compile(bw, tiles=tiles, candidate=cand)
                inputs = saved_from_forward(fwd, back, k.random_inputs(0))  # not drawn: the forward's
                v = k.verify(inputs)
                row["ok"] = bool(v["ok"])
                row["rel_err"] = {o: float(e) for o, e in v["rel_err"].items()} if isinstance(v["rel_err"], dict) else v["rel_err"]
                row["ms"] = tt.do_bench_cudagraph(lambda: k.run(inputs), rep=100, return_mode="median")
                row["kernels"] = kernel_times(lambda: k.run(inputs))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            rows.append(row)
            print(f"{name:18s} {str(sizes['t_q']):5s} {label:14s} ok={row.get('ok')} {row.get('ms', float('nan')):.4f} ms "
                  f"{row.get('kernels', row.get('error'))}", flush=True)
            save_rows(out / "flash-backward-variants.json", rows)
    fb.FlashBackward._skip = skip_site
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    sys.exit(main())
