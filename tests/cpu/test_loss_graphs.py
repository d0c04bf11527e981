"""The losses of issue 46 (tests/loss_graphs.py) through the interpreter at small sizes: each graph
is the loss torch.nn.functional computes (float64, leantile.reference), and every candidate's
plan gives it, at sizes where the fused plan keeps the batch on chip and where it streams the
batch in blocks into the 0-d output (the shape of the plan the GPU miscompiled at b = 32768).
tests/gpu/test_losses_gpu.py checks the kernels at the failing sizes."""
import pytest
import torch

import leantile
from leantile import reference
from leantile.derive import candidates, derive
from leantile.tolerance import output_tolerances, rel_err

from loss_graphs import FAILING, LOSSES, build, loss_inputs, torch_loss

SMALL = [("cross_entropy", {"b": 37, "c": 19}), ("kl_batchmean", {"b": 21, "c": 33}),
         ("triplet_margin", {"b": 29, "d": 17}),
         # past 8192 or 16384 rows (by the row's bytes) the fused plan streams b in blocks of 1024 into the 0-d loss (the last block partial)
         ("cross_entropy", {"b": 16500, "c": 3}), ("triplet_margin", {"b": 16500, "d": 2})]


@pytest.mark.parametrize("name,sizes", SMALL, ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v.values())))
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_every_candidate_of_each_loss_is_the_torch_loss(name, sizes, dtype):
    g = build(name, sizes, dtype)
    inputs = loss_inputs(g, seed=1)
    want = torch_loss(name, inputs)
    assert rel_err(reference.evaluate(g, inputs, compute_dtype=torch.float64)["loss"], want) < 1e-12
    tol = output_tolerances(g)["loss"]
    cands = [c.name for c in candidates(g)]
    assert len(cands) >= 2  # a fused plan beside the unfused one
    for c in cands:
        k = leantile.compile(g, candidate=c, device="cpu", interpret=True)
        out = k(**inputs)
        assert out.shape == () and rel_err(out, want) <= tol, (c, float(out), float(want))


def test_the_streamed_plan_is_the_one_the_gpu_miscompiled():
    """At the failing size the unsplit fused candidate reduces b in one CTA streaming blocks of
    rows into the 0-d output (the plan the GPU miscompiled); the small streamed case above has
    the same kernels, so the interpreter checks that shape too."""
    def shape(g, c):
        return [(k.stream.axis if k.stream else None, not k.grid) for k in derive(g, c).kernels]
    for name, big, small in (("cross_entropy", {"b": 32768, "c": 64}, {"b": 16500, "c": 3}),
                             ("triplet_margin", {"b": 32768, "d": 8192}, {"b": 16500, "d": 2})):
        assert shape(build(name, big), "fused") == shape(build(name, small), "fused")
        assert ("b", True) in shape(build(name, big), "fused")


@pytest.mark.parametrize("name,sizes", [*FAILING, ("cross_entropy", {"b": 1 << 20, "c": 8}),
                                        ("cross_entropy", {"b": 3, "c": 300007})],
                         ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v.values())))
def test_the_default_plan_reduces_no_long_axis_on_one_cta(name, sizes):
    """Issue 49: the default plan spreads a long reduction into a scalar (or a few long rows)
    over CTAs (split_reduction): no kernel of fewer CTAs than SMs reduces more than 8192
    elements of an axis in one CTA (benchmarks/single_cta_reductions/inventory.py measures it)."""
    from leantile import cost
    from leantile.cost import LONG_REDUCTION as LONG, ctas, reductions_per_cta
    from leantile.target import DEFAULT

    plan, _ = cost.choose(build(name, sizes))  # the plan leantile.compile runs without a tuned entry
    for k in plan.kernels:
        for axis, per_cta in reductions_per_cta(plan, k):
            assert per_cta <= LONG or ctas(plan, k) >= DEFAULT.sms, (k.name, axis, per_cta, ctas(plan, k))


def test_failing_sizes_name_known_losses():
    assert {name for name, _ in FAILING} == set(LOSSES)
    for name, sizes in FAILING:
        assert build(name, sizes).axes == sizes
