"""Which kernel of a failing plan is wrong: a GPU differential campaign's mismatch (gpu_fuzz.py)
taken apart kernel by kernel.

    python3 benchmarks/gpu_fuzz_localize.py benchmarks/results/gpu-fuzz-<gpu>-<date>.json \
        [--failure N ...] [--repeat 3] [--out FILE]

For each failing plan (its graph, candidate, seeded draw and scale, as the campaign recorded them)
the plan is derived and emitted again, then run on the GPU three ways, each judged buffer by
buffer against the interpreter running the same plan in the plan's own dtypes (16-bit stores
rounded, accumulators in float32: what the kernels should compute up to summation order):
  - isolated: each kernel launched alone after its inputs were set to the interpreter's values,
    then synchronised; the buffers it writes compared. A kernel wrong here is wrong by itself.
  - chained: the kernels launched in order, each synchronised before the next (no overlap).
  - shipped: the module's own launch loop (programmatic dependent launch between kernels where
    the GPU has it), `--repeat` times, and the same with dependent launch off: a buffer that
    differs only here, or from one repeat to the next, is a race between kernels.
Prints a line per kernel and run; writes JSON with --out. `--device cpu` runs the same steps
with the interpreter standing in for the GPU (tests/cpu/test_gpu_fuzz.py checks that a kernel
made wrong there is the one named).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def every_buffer(plan, inputs: dict, dtype=None) -> dict:
    """The interpreter's value of every global buffer of `plan` on `inputs` (in the plan's own
    dtypes, or in `dtype`): the plan with each global made an output."""
    from leantile import interp
    return interp.run(plan.model_copy(update={"outputs": {b.name: b.name for b in plan.globals}}), inputs, dtype)


def buffer_error(got, want) -> float:
    """leantile.tolerance.rel_err of `got` against `want`, both brought to the CPU (norm-wise; inf
    where the two disagree on which elements are NaN: an element one of them never wrote)."""
    from leantile.tolerance import rel_err
    return rel_err(got.detach().cpu(), want.detach().cpu())


def worst_elements(got, want, n: int = 6) -> list:
    """The n elements where `got` is farthest from `want`: [index, got, want] each (a wrong kernel's
    pattern: one row, a tile's edge, every element), NaN-aware."""
    import torch
    g, w = got.detach().cpu().double().reshape(-1), want.detach().cpu().double().reshape(-1)
    diff = torch.where(torch.isnan(g) != torch.isnan(w), torch.full_like(g, float("inf")), (g - w).abs().nan_to_num(0.0))
    top = torch.topk(diff, min(n, diff.numel())).indices.tolist() if diff.numel() else []
    shape = tuple(got.shape)
    return [[list(_unravel(i, shape)), float(g[i]), float(w[i])] for i in top]


def _unravel(i: int, shape: tuple) -> tuple:
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


class InterpreterLaunch:
    """The interpreter standing in for the GPU, kernel by kernel (--device cpu): launch(name,
    tensors) runs one kernel of the plan on the tensors given, in place."""

    def __init__(self, plan):
        self.plan = plan

    def launch(self, name: str, tensors: dict) -> None:
        k = next(k for k in self.plan.kernels if k.name == name)
        one = self.plan.model_copy(update={"kernels": (k,), "outputs": {b.name: b.name for b in self.plan.globals}})
        from leantile.plan import Store
        outs = every_buffer(one, dict(tensors))
        for s in k.statements():
            if isinstance(s, Store):
                tensors[s.dst].copy_(outs[s.dst])

    def sync(self) -> None:
        pass


class GpuLaunch:
    """The emitted module's kernels compiled for the GPU, with or without dependent launch."""

    def __init__(self, module, pdl: bool):
        import tilelang
        from leantile.codegen_repair import MARKER_FLAG, install
        install()
        funcs = module.build_kernel(pdl=pdl and module.has_pdl("cuda"))
        self.kernels = {name: tilelang.compile(f, target="cuda",
                                               compile_flags=[*module.NVCC_FLAGS.get(name, ()), MARKER_FLAG],
                                               pass_configs=module.PASS_CONFIGS.get(name))
                        for name, f in funcs.items()}
        self.params = {k["name"]: k["params"] for k in module.KERNELS}

    def launch(self, name: str, tensors: dict) -> None:
        self.kernels[name](*[tensors[n] if tensors[n].dim() else tensors[n].reshape(1) for n in self.params[name]])

    def sync(self) -> None:
        import torch
        torch.cuda.synchronize()


def localize(plan, module, inputs: dict, launcher, device, repeat: int = 1, unsynced=None) -> dict:
    """The three runs of the module docstring: {"isolated": {kernel: {buffer: err}}, "chained":
    {...}, "shipped": [{buffer: err} per repeat], "first_wrong": (mode, kernel, buffer, err) or
    None}. `unsynced`: launchers for the shipped loop ({"pdl": launcher, "plain": launcher})."""
    want = every_buffer(plan, {n: t.cpu() for n, t in inputs.items()})
    writes = {k["name"]: k["writes"] for k in module.KERNELS}
    reads = {k["name"]: k["reads"] for k in module.KERNELS}
    order = [k["name"] for k in module.KERNELS]
    dev_inputs = {n: t.to(device) for n, t in inputs.items()}
    report: dict = {"isolated": {}, "chained": {}, "shipped": {}}
    # every buffer its own bytes (share=False): plan.storage puts an intermediate in a buffer written
    # after it, and a buffer read after the run would be its host's by then
    tensors = module.allocate(dev_inputs, device=device, fill=float("nan"), share=False)
    for name in order:  # isolated: exact inputs
        for r in reads[name]:
            if r not in inputs:
                tensors[r].copy_(want[r].to(tensors[r].dtype))
        launcher.launch(name, tensors)
        launcher.sync()
        report["isolated"][name] = {w: buffer_error(tensors[w], want[w]) for w in writes[name]}
        report.setdefault("worst", {})[name] = {w: worst_elements(tensors[w], want[w]) for w in writes[name]}
    tensors = module.allocate(dev_inputs, device=device, fill=float("nan"), share=False)
    for name in order:  # chained: the GPU's own intermediates, one kernel at a time
        launcher.launch(name, tensors)
        launcher.sync()
        report["chained"][name] = {w: buffer_error(tensors[w], want[w]) for w in writes[name]}
    for mode, runner in (unsynced or {}).items():
        runs = []
        for _ in range(repeat):
            tensors = module.allocate(dev_inputs, device=device, fill=float("nan"), share=False)
            for name in order:
                runner.launch(name, tensors)
            runner.sync()
            runs.append({b: buffer_error(tensors[b], want[b]) for n in order for b in writes[n]})
        report["shipped"][mode] = runs
    report["first_wrong"] = None
    for mode in ("isolated", "chained"):
        for name in order:
            for b, err in report[mode][name].items():
                if not err <= _tolerance(plan, b):
                    report["first_wrong"] = (mode, name, b, err)
                    return report
    return report


def _tolerance(plan, buffer: str) -> float:
    """How far a kernel's buffer may be from the interpreter's running the same plan, norm-wise
    (tighter than leantile.tolerance's, which bounds a kernel against the float64 reference): summation order, exp's
    last bits, one unit of a 16-bit dtype where the two round a value on either side, and TF32
    (10-bit mantissa) products where the GPU multiplies float32 tiles on tensor cores."""
    dtype = plan.global_buffer(buffer).dtype
    return {"f16": 4e-3, "bf16": 2e-2, "f32": 3e-3, "acc": 3e-3, "f64": 1e-9}.get(dtype, 4e-3)


def judged(g, candidate, inputs: dict, dev) -> dict:
    """The plan's outputs judged as the campaign judges them (Kernel.judge against the float64
    reference, the graph's own rounding forgiven): on the GPU the shipped kernels, on the CPU the
    interpreter running the plan (which tells a wrong plan from a wrong GPU kernel)."""
    import torch
    import leantile
    k = leantile.compile(g, candidate=candidate, device=dev, tuned=False, interpret=dev.type != "cuda")
    on = {n: t.to(dev) for n, t in inputs.items()}
    outs = k.run(on, fill=float("nan"))
    v = k.judge(on, outs, refs=k.references(on, torch.float64))
    return {o: {"rel_err": v["rel_err"][o], "plain_rel_err": v["plain_rel_err"][o], "tolerance": v["tolerance"][o]}
            for o in v["rel_err"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a gpu_fuzz results file with failures")
    ap.add_argument("--failure", type=int, nargs="*", help="which failures (indices in the file; default all mismatches)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the shipped launch loop, each mode")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", help="write the reports as JSON (atomically)")
    a = ap.parse_args(argv)
    import torch
    from gpu_fuzz_parts.judge import _inputs
    from leantile import ir
    from leantile.cost import choose
    from leantile.derive import derive
    from leantile.emit import emit_module
    from leantile.runtime import emitted_module

    failures = json.loads(Path(a.results).read_text()).get("failures", [])
    picked = a.failure if a.failure else [i for i, f in enumerate(failures) if f.get("kind") == "mismatch"]
    dev = torch.device(a.device)
    out = []
    for i in picked:
        f = failures[i]
        g = ir.parse(f["graph"])
        plan = choose(g)[0] if f.get("candidate") is None else derive(g, f["candidate"])
        module = emitted_module(emit_module(plan))
        inputs = {n: t.cpu() for n, t in _inputs(g, f["seed"], f["scale"], dev, torch).items()}
        if dev.type == "cuda":
            launcher = GpuLaunch(module, pdl=False)
            unsynced = {"pdl": GpuLaunch(module, pdl=True), "plain": launcher}
        else:
            launcher, unsynced = InterpreterLaunch(plan), {"plain": InterpreterLaunch(plan)}
        rep = localize(plan, module, inputs, launcher, dev, a.repeat, unsynced)
        rep.update({"failure": i, "candidate": f.get("candidate"), "sizes": f.get("sizes"), "dtype": f.get("dtype")})
        rep["judged"] = judged(g, f.get("candidate"), inputs, dev)
        out.append(rep)
        print(f"failure {i}: {f.get('family')} {f.get('dtype')} {f.get('candidate')} sizes {f.get('sizes')}")
        for mode in ("isolated", "chained"):
            for name, errs in rep[mode].items():
                print(f"  {mode:9s} {name:28s} " + ", ".join(f"{b} {e:.3g}" for b, e in errs.items()))
        for mode, runs in rep["shipped"].items():
            for r, errs in enumerate(runs):
                print(f"  shipped/{mode} run {r}: " + ", ".join(f"{b} {e:.3g}" for b, e in errs.items()))
        print(f"  first wrong: {rep['first_wrong']}")
        if rep["first_wrong"]:
            _, kname, buf, _ = rep["first_wrong"]
            print(f"  worst elements of {buf} (isolated {kname}: [index, got, want]): {rep['worst'][kname][buf]}")
        print(f"  judged as the campaign judges (leantile.compile on {dev.type}"
              f"{', the interpreter' if dev.type != 'cuda' else ''}): {rep['judged']}", flush=True)
    if a.out:
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1, default=str))
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
