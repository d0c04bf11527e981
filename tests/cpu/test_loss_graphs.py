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
    """At the failing size the default plan reduces b in one CTA streaming blocks of rows into
    the 0-d output; the small streamed case above has the same kernels."""
    def shape(g):
        return [(k.stream.axis if k.stream else None, not k.grid) for k in derive(g).kernels]
    for name, big, small in (("cross_entropy", {"b": 32768, "c": 64}, {"b": 16500, "c": 3}),
                             ("triplet_margin", {"b": 32768, "d": 8192}, {"b": 16500, "d": 2})):
        assert shape(build(name, big)) == shape(build(name, small))
        assert ("b", True) in shape(build(name, big))


def test_failing_sizes_name_known_losses():
    assert {name for name, _ in FAILING} == set(LOSSES)
    for name, sizes in FAILING:
        assert build(name, sizes).axes == sizes
