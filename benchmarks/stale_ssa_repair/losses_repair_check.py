"""GPU check of the three losses issue 46 found miscompiled (TileLang's stale cached vector
loads, leantile.codegen_repair): each compiled with the default plan, with and without the repair,
against a float64 torch reference on the same inputs. Prints a table; writes JSON to --out.

    PYTHONPATH=python python3 benchmarks/stale_ssa_repair/losses_repair_check.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))


# the graphs as a user writes them: tests/loss_graphs.py (shared with the GPU and CPU tests)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from loss_graphs import cross_entropy, kl_batchmean, triplet_margin as triplet  # noqa: E402


def reference(name, ins):
    d = {k: v.double() for k, v in ins.items()}
    if name == "xent":
        return torch.nn.functional.cross_entropy(d["P"], d["T"].long())
    if name == "kl":
        lp, lq = d["P"].log_softmax(-1), d["Q"].log_softmax(-1)
        return (lp.exp() * (lp - lq)).sum() / d["P"].shape[0]
    a, p, n = d["A"], d["P"], d["N"]
    return torch.clamp((a - p).norm(dim=1) - (a - n).norm(dim=1) + 1.0, min=0).mean()


CASES = [("xent", cross_entropy, 32768, 64), ("xent", cross_entropy, 32768, 4096), ("xent", cross_entropy, 20000, 64),
         ("xent", cross_entropy, 65537, 64), ("kl", kl_batchmean, 16384, 16384), ("triplet", triplet, 32768, 8192)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import leantile
    from leantile import codegen_repair
    rows = []
    for name, build, n0, n1 in CASES:
        g = build(n0, n1)
        gen = torch.Generator(device="cuda").manual_seed(0)
        ins = {}
        for inp in g.inputs():
            shape = tuple(g.axes[x] for x in inp.axes)
            if inp.name == "T":
                ins["T"] = torch.randint(0, n1, shape, device="cuda", generator=gen).float()
            else:
                ins[inp.name] = torch.randn(shape, device="cuda", generator=gen).half()
        ref = reference(name, ins).item()
        for repaired in (False, True):
            if repaired:
                codegen_repair.install()
            k = leantile.compile(g, tuned=False)
            if not repaired:  # compile_kernels installs the repair: compile the raw kernels by hand
                import tilelang
                codegen_repair.uninstall()
                mod = k._c.module
                k._c.launchers = {n: tilelang.compile(f, target="cuda", compile_flags=["-DLEANTILE_RAW=1"])
                                  for n, f in mod.build_kernel(pdl=True).items()}
            got = k(**ins).double().item()
            rows.append({"loss": name, "sizes": [n0, n1], "candidate": k.plan.candidate, "repaired": repaired,
                         "got": got, "reference": ref, "rel_err": abs(got - ref) / abs(ref)})
            print(f"{name:8s} {n0:6d} x {n1:6d} {k.plan.candidate:24s} repaired={repaired!s:5s} "
                  f"got {got:12.5f} ref {ref:12.5f} rel err {rows[-1]['rel_err']:.2e}", flush=True)
            leantile.runtime._CACHE.clear()
    codegen_repair.install()
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        os.replace(a.out + ".tmp", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
