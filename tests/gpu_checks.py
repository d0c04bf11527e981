"""What the GPU suites share: every (graph, candidate) compiled in a thread pool (TileLang's
compile is mostly nvcc), then each verified on the device (leantile.compile's verify: outputs
NaN-poisoned, fresh random inputs), at another draw where the first cannot be judged."""
from concurrent.futures import ThreadPoolExecutor

import leantile
from leantile import ir
from leantile.reference import TORCH_DTYPES

DRAWS = 3  # input draws tried before a kernel whose every draw is ill-conditioned is reported


def verify_all(jobs, seed: int = 5, tiles: dict | None = None) -> list:
    """[(graph name, candidate, what failed)] for the jobs, [(graph, candidate)], that fail to
    compile or to verify (at `tiles` where given); [] when every one is exact."""
    def make(job):
        g, cand = job
        try:
            return job, leantile.compile(g, candidate=cand, tiles=tiles)
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
        for draw in range(seed, seed + DRAWS):  # another draw only where every failure is the draw's
            v = k.verify(seed=draw)
            failed = {o for o, e in v["rel_err"].items() if not e <= v["tolerance"][o]}
            if not failed or not failed <= set(v["ill_conditioned"]):
                break
        if not v["ok"]:  # at a well-conditioned draw, or at none of DRAWS
            bad.append((g.name, cand, v["rel_err"]))
    return bad

