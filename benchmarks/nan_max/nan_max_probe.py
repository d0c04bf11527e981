"""What NaN-propagating max and min (leantile.codegen_nan) cost: each plan's kernels compiled twice
in one process, with the repair and without it (max dropping NaN, TileLang's own), timed with
do_bench_cudagraph, interleaved, best of three rounds. Cases: the kernels whose inner loops take a
max the most: attention's online max (causal, FA3-style overlap), a log-softmax row, a maxout GEMM
epilogue, a column max. Prints a table, writes JSON.

    python benchmarks/nan_max/nan_max_probe.py --out DIR      (on a GPU)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cases():
    sys.path.insert(0, str(ROOT / "examples"))
    import reductions
    from leantile import architectures, dag
    col = dag.build_graph_with_output("column_max", {"m": 16384, "d": 4096},
                                      lambda g: g.red("max", g.input("dY", ["m", "d"], "f16"), "m"))
    return [("causal_attention", architectures.build("causal_attention", h=16, t_q=4096, t_kv=4096, d_h=128)),
            ("attention", architectures.build("attention", h=16, t_q=4096, t_kv=4096, d_h=128)),
            ("log_softmax", reductions.graph("log_softmax")), ("gemm_maxout", reductions.graph("gemm_maxout")),
            ("column_max", col)]


def timed(g, propagate: bool, tag: str):
    """(run callable) of g's default plan compiled with or without the NaN repair."""
    import torch
    from leantile import codegen_nan
    from leantile.derive import derive
    from leantile.emit import emit_module, load_module
    from leantile.reference import random_inputs
    m = load_module(emit_module(derive(g)), f"nanprobe_{g.name}_{tag}")
    real = codegen_nan.propagate_nan
    if not propagate:  # TileLang's own max; a flag of its own so that no cached binary is shared
        codegen_nan.propagate_nan = lambda source: source
        for name in m.KERNELS:
            m.NVCC_FLAGS[name["name"]] = [*m.NVCC_FLAGS.get(name["name"], ()), "-DLEANTILE_NAN_PROBE_OFF"]
    try:
        kernels = m.compile_kernels(target="cuda")
    finally:
        codegen_nan.propagate_nan = real
    tensors = m.allocate(random_inputs(g, seed=0, device="cuda"), device="cuda")
    torch.cuda.synchronize()
    return lambda: m.run(kernels, tensors)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import triton.testing as tt
    rows = []
    for name, g in cases():
        try:
            on, off = timed(g, True, "on"), timed(g, False, "off")
            best = {"on": float("inf"), "off": float("inf")}
            for _ in range(3):
                for k, f in (("off", off), ("on", on)):
                    best[k] = min(best[k], tt.do_bench_cudagraph(f))
        except Exception as e:  # one case failing is reported, the others go on
            rows.append({"case": name, "error": f"{type(e).__name__}: {e}"[:300]})
            print(name, "error", rows[-1]["error"], flush=True)
            continue
        rows.append({"case": name, "nan_propagating_ms": best["on"], "nan_dropping_ms": best["off"],
                     "ratio": best["on"] / best["off"]})
        print(f"{name:18s} propagating {best['on']:.4f} ms  dropping {best['off']:.4f} ms  "
              f"x{best['on'] / best['off']:.3f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "nan-max-probe.json.tmp"
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(out / "nan-max-probe.json")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main())
