"""The one equivalence check the CPU suites share: interp(plan) against reference(graph)."""
import torch

from leantile import interp, reference

TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def rel_err(out, ref):
    """Norm-wise relative error; outputs that cancel to ~0 (e.g. the mean of a centred row)
    are measured against a floor of 1e-3 per element instead of their own rounding noise."""
    floor = 1e-3 * ref.numel() ** 0.5
    return ((out - ref).norm() / max(ref.norm().item(), floor)).item()


def check(g, plan, seed, dtype, scale=1.0):
    inputs = reference.random_inputs(g, seed=seed, scale=scale)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    out = interp.run(plan, {k: v.to(dtype) for k, v in inputs.items()}, dtype=dtype)
    for name in g.outputs:
        assert out[name].dtype == dtype
        assert torch.isfinite(out[name]).all(), f"{plan.candidate}: non-finite output (unwritten tile?)"
        err = rel_err(out[name].double(), ref[name])
        assert err < TOL[dtype], f"{g.name}/{plan.candidate}: relative error {err:.3g} in {dtype}"
