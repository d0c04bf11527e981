"""The fusion issue's workloads on the GPU: graphs nobody wrote a pattern for (examples/fusion.py),
each derived with the shipped default, checked against the float32 reference, and timed against
the same computation written in PyTorch (F.layer_norm, F.cross_entropy, ...: examples/fusion.py
torch_versions), eager and under torch.compile, in the same process (leantile.bench.run_one:
do_bench_cudagraph medians, best of two interleaved rounds). Prints a table, writes JSON.

    python benchmarks/fusion/fusion_suite.py [--out DIR] [--only NAME ...] [--cases fusion|reductions]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cases(which: str = "fusion"):
    spec = spec_from_file_location(f"leantile_{which}_examples", ROOT / "examples" / f"{which}.py")
    m = module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def workloads(which: str):
    """(name, graph, torch function, max kernels) of each case: examples/fusion.py (the fusion
    issue's) or examples/reductions.py (issue 49's forms at the sizes people run them)."""
    from leantile import dag
    m = cases(which)
    if which == "reductions":
        return [(name, m.graph(name), c.torch, c.max_kernels) for name, c in m.cases().items()]
    fns = m.torch_versions()
    return [(name, dag.build_graph_with_output(name, axes, body), fns[name], m.MAX_KERNELS[name])
            for name, (body, axes) in m.CASES.items()]


def _peaks(r) -> str:
    """leantile's and torch.compile's peak device memory of one call (leantile.bench.peak_memory_mb)."""
    p = r.get("peak_mb") or {}
    return f"{p['leantile']:.1f} / {p['compile']:.1f}" if "leantile" in p and "compile" in p else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/fusion/results")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--cases", choices=("fusion", "reductions"), default="fusion",
                    help="examples/fusion.py (default) or examples/reductions.py (issue 49)")
    args = ap.parse_args(argv)
    import torch

    from leantile.bench import run_one

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    stem = "fusion-suite" if args.cases == "fusion" else "reductions-suite"

    def save(rows):  # after every row (temporary file, then rename): a call's time limit keeps what ran
        tmp = out / f"{stem}.json.tmp"
        tmp.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1, default=str))
        tmp.replace(out / f"{stem}.json")
    rows = []
    for name, g, torch_fn, max_kernels in workloads(args.cases):
        if args.only and name not in args.only:
            continue
        try:
            inputs = None
            if name == "cross_entropy":  # class indices, not normal noise
                from leantile.reference import random_inputs
                inputs = random_inputs(g, device="cuda")
                inputs["label"] = torch.randint(0, g.axes["c"], (g.axes["m"],), device="cuda").float()
            r = run_one(g, eager=torch_fn, inputs=inputs)
        except Exception as e:  # one failing case is reported, the others go on
            traceback.print_exc()
            rows.append({"arch": name, "error": f"{type(e).__name__}: {e}"[:300]})
            save(rows)
            continue
        r["max_kernels"] = max_kernels
        rows.append(r)
        save(rows)
        gm = r["gpu_ms"]
        print(f"{name:20s} kernels {len(r['kernels'])} (max {r['max_kernels']}) ok {r['ok']} err {r['rel_err']:.1e} "
              f"leantile {gm['leantile']:.4f} ms  compile {gm['compile']:.4f} ms  "
              f"x{gm['compile'] / gm['leantile']:.2f} vs compile  x{gm['eager'] / gm['leantile']:.2f} vs eager",
              flush=True)
    lines = ["| workload | shape | kernels (max) | ok | rel. err | leantile ms | torch.compile ms | vs compile | eager ms | vs eager "
             "| peak MiB leantile / compile |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['arch']} | | | error: {r['error']} | | | | | | | |")
            continue
        gm = r["gpu_ms"]
        lines.append(f"| {r['arch']} | {'x'.join(str(v) for v in r['shape'].values())} | {len(r['kernels'])} "
                     f"({r['max_kernels']}) | {r['ok']} | {r['rel_err']:.1e} | {gm['leantile']:.4f} | "
                     f"{gm['compile']:.4f} | {gm['compile'] / gm['leantile']:.2f}x | {gm['eager']:.4f} | "
                     f"{gm['eager'] / gm['leantile']:.2f}x | {_peaks(r)} |")
    ratios = {r["arch"]: r["gpu_ms"]["compile"] / r["gpu_ms"]["leantile"] for r in rows if "error" not in r}
    if ratios:  # issue 49's acceptance: geomean >= 1.2x, none below 0.8x, every form >= 1.0x
        geo = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios))
        lines += ["", f"geomean vs torch.compile {geo:.2f}x over {len(ratios)} rows; below 1.0x: "
                  + (", ".join(f"{n} {v:.2f}x" for n, v in ratios.items() if v < 1.0) or "none")]
    print("\n".join(lines))
    save(rows)
    tmp = out / f"{stem}.md.tmp"
    tmp.write_text(f"GPU: {gpu}\n\n" + "\n".join(lines) + "\n")
    tmp.replace(out / f"{stem}.md")
    return 0 if all(r.get("ok") and len(r["kernels"]) <= r["max_kernels"] for r in rows) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main())
