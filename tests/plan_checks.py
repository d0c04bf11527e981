"""The one equivalence check the CPU suites share: interp(plan) against reference(graph)."""
import torch

from leantile import interp, reference

TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def rel_err(out, ref):
    """Norm-wise relative error; outputs that cancel to ~0 (e.g. the mean of a centred row)
    are measured against a floor of 1e-2 per element instead of their own rounding noise.
    The inputs are O(1), so f32 rounds the terms to ~1e-7 absolute: with a 1e-3 floor, a
    geglu output that cancelled to 3e-4 (m=n=1, d=3, found by the dev profile) measured
    1.8e-4 "relative" error from rounding alone. A wrong kernel is off by O(1) either way."""
    floor = 1e-2 * ref.numel() ** 0.5
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
