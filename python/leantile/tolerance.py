"""The one accuracy check of leantile: every comparison of a kernel or a plan with the
reference (runtime verify, bench, tune, search workers, report evidence, the test suites)
uses `rel_err` and the `TOLERANCE` of the output's dtype.

    rel_err(out, ref, ref_same=None, noise_factor=NOISE) =
        max(0, ||out - ref|| - min(noise_factor * ||ref_same - ref||, CAP * ||ref||)) / ||ref||
                                                                        (Frobenius, float64)

`ref` is the reference in a wider dtype (float32 or float64). `ref_same`, where given, is the
reference computed in the kernel's own dtype: the rounding error the unfused graph itself
makes in that dtype. Error up to NOISE times that is rounding, not a wrong kernel, so it is not
counted; never more than CAP of the reference's norm, so that a graph too noisy to compute in
its dtype does not let a wrong kernel through (an all-zero output stays >= 1 - CAP). This is what lets an output that cancels to ~0 (a mean of a centred row, a GeGLU
output of 3e-4 from O(1) terms) be checked in float32 without an absolute floor, and an
absolute floor is what must never be used: an output that is small everywhere (a softmax over
65536 columns, ~1.5e-5 per element) would then pass as all zeros. Without `ref_same` (float64
oracles, the GPU checks of the published shapes) it is the plain relative error.

A reference that is exactly 0 where the graph in its own dtype is not (an output that cancels
exactly in float64, `x + 1 - 1 - x`, but not in the graph's dtypes) has no norm to be relative to: the output is pure rounding, so the error beyond NOISE times the graph's own is
measured relative to that rounding (an all-zero output is exact there, so CAP has nothing to
guard).

A non-finite output is inf, except where the reference has the same non-finite value: a row
whose every score is masked (-inf) is NaN in the graph's semantics (0 / 0), as it is in torch's
softmax, and a kernel that agrees is right there; the error is then measured over the finite
positions. A reference of norm 0 gives 0 when the excess error is 0, else inf.
"""
from __future__ import annotations

import torch


# Largest accepted rel_err per output dtype.
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 4e-2, torch.float32: 1e-4, torch.float64: 1e-9}
# How many times the unfused graph's own rounding error (ref_same) is forgiven.
NOISE = 8.0
CAP = 0.1


def tolerance(dtype: torch.dtype) -> float:
    """The largest accepted rel_err for an output of this dtype."""
    return TOLERANCE[dtype]


def output_tolerances(g) -> dict[str, float]:
    """Per output of graph g, the tolerance of the least precise value it is computed from: its
    own dtype's and that of every computed node it depends on (ir.value_dtype; inputs and
    constants are given exactly, they round nothing). An f32 output cast from bf16 arithmetic is
    as precise as bf16 and judged so; the f32 path of a mixed graph keeps float32's tolerance."""
    from . import ir
    from .reference import TORCH_DTYPES
    dtypes = ir.value_dtypes(g)
    worst: list[float] = []  # per node: the largest tolerance among the computed values it reads
    for n in g.nodes:
        own = 0.0 if isinstance(n, (ir.Input, ir.Const, ir.SizeConst)) else TOLERANCE[TORCH_DTYPES[dtypes[n.id]]]
        worst.append(max([own, *(worst[a] for a in n.args())]))
    return {o: worst[i] or TOLERANCE[TORCH_DTYPES[dtypes[i]]] for o, i in g.outputs.items()}


def rel_err(out: torch.Tensor, ref: torch.Tensor, ref_same: torch.Tensor | None = None,
            noise_factor: float = NOISE) -> float:
    """See the module docstring. noise_factor: how many times ref_same's error is forgiven (NOISE;
    1 for a rounding probe, itself a unit off at every value: Judging._other_roundings)."""
    finite = torch.isfinite(ref)
    if not bool(finite.all()):  # the same NaN / inf where the reference has one, then the rest
        ref_nan, out_nan = torch.isnan(ref), torch.isnan(out)
        agree = torch.equal(out_nan, ref_nan) and torch.equal(out[~finite & ~ref_nan], ref[~finite & ~ref_nan].to(out.dtype))
        if out.shape != ref.shape or not agree:
            return float("inf")
        out, ref = out[finite], ref[finite]
        ref_same = None if ref_same is None or ref_same.shape != finite.shape else ref_same[finite]
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    ref64 = ref.double()
    num = (out.double() - ref64).norm().item()
    den = ref64.norm().item()
    if ref_same is not None and bool(torch.isfinite(ref_same).all()):
        noise = (ref_same.double() - ref64).norm().item()
        if den == 0 and noise > 0:  # exactly 0, and only rounding makes it otherwise: see above
            return max(0.0, num - noise_factor * noise) / noise
        num = max(0.0, num - min(noise_factor * noise, CAP * den))
    if den > 0:
        return num / den
    return 0.0 if num == 0 else float("inf")
