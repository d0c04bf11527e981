"""What the GPU suites share: every (graph, candidate) compiled in a thread pool (TileLang's
compile is mostly nvcc), then each verified on the device (leantile.compile's verify: outputs
NaN-poisoned, fresh random inputs), at another draw where the first cannot be judged."""
from concurrent.futures import ThreadPoolExecutor

import torch

import leantile
from leantile import ir, reference
from leantile.reference import TORCH_DTYPES
from leantile.runtime import ieee_fp32_matmuls
from leantile.tolerance import CAP, NOISE

DRAWS = 3  # input draws tried before a kernel whose every draw is ill-conditioned is reported


def ill_conditioned(k, seed: int) -> list[str]:
    """The outputs that the draw `seed` leaves unjudgeable in the graph's own dtypes: moving every
    input one unit in its last place (a random direction each) moves the unfused graph's output by
    more than CAP / NOISE of the output's norm. Its rounding is then as large as that (a 1 x 1
    GEMM output of 77 bf16 terms that cancel to 0.006 of their size moves by 0.005), more than
    tolerance.rel_err may forgive (CAP of the norm): the draw would fail a right kernel. A wrong
    kernel fails at a well-conditioned draw, which the next seed almost surely is."""
    inputs = k.random_inputs(seed)
    gen = torch.Generator().manual_seed(seed)
    moved = {}
    for name, t in inputs.items():
        up = torch.rand(t.shape, generator=gen) < 0.5
        way = torch.where(up, torch.tensor(float("inf")), torch.tensor(float("-inf")))
        moved[name] = torch.nextafter(t.cpu(), way.to(t.dtype)).to(t.device)
    with ieee_fp32_matmuls():
        ref = reference.evaluate(k.graph, inputs, compute_dtype=torch.float32)
        same = reference.evaluate(k.graph, inputs, check=False, tf32=True)
        shifted = reference.evaluate(k.graph, moved, check=False, tf32=True)
    return [o for o in k.output_names
            if (shifted[o].double() - same[o].double()).norm().item() > CAP / NOISE * ref[o].double().norm().item()]


def verify_all(jobs, seed: int = 5) -> list:
    """[(graph name, candidate, what failed)] for the jobs, [(graph, candidate)], that fail to
    compile or to verify; [] when every one is exact."""
    def make(job):
        g, cand = job
        try:
            return job, leantile.compile(g, candidate=cand)
        except Exception as e:  # a candidate that does not compile is a failure, named
            return job, e
    with ThreadPoolExecutor(16) as pool:
        built = list(pool.map(make, jobs))
    bad = []
    for (g, cand), k in built:
        if isinstance(k, Exception):
            bad.append((g.name, cand, f"{type(k).__name__}: {str(k)[:200]}"))
            continue
        want = {o: TORCH_DTYPES[d] for o, d in ir.output_dtypes(g).items()}
        got = {o: spec[1] for o, spec in k.output_specs.items()}
        if got != want:  # each output in its value's dtype (ir.value_dtype), not the inputs'
            bad.append((g.name, cand, f"output dtypes {got}, expected {want}"))
            continue
        for draw in range(seed, seed + DRAWS):
            v = k.verify(seed=draw)
            failed = {o for o, e in v["rel_err"].items() if not e <= v["tolerance"][o]}
            if not failed or not failed <= set(ill_conditioned(k, draw)):
                break
        if not v["ok"]:  # at a well-conditioned draw, or at none of DRAWS
            bad.append((g.name, cand, v["rel_err"]))
    return bad

