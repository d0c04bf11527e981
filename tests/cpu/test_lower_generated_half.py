"""The generated lowering sweep (test_lower_generated.py) with 16-bit inputs: at sizes 1..3,
where few-row GEMMs take the swapped tiles, and at odd sizes (rows of 77 16-bit elements, single
rows) that reach TileLang's cp.async width checks."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
pytestmark = pytest.mark.slow  # minutes of TileLang lowering: make test runs it, make test-fast does not

from leantile.derive import candidates, derive  # noqa: E402

from lowering_sweeps import GRAPHS, Sweep, sweep_settings  # noqa: E402
from profiles import examples  # noqa: E402
from strategies import inputs_in, resized, user_graphs  # noqa: E402


def test_every_candidate_of_half_precision_generated_graphs_lowers():
    """The same graphs with 16-bit inputs: their few-row GEMMs take the swapped tiles (the
    accumulator transposed: plan.passes.swap_operands), which float32 graphs never do."""
    sweep = Sweep()
    count = examples(10)  # 12 drew a heavier mix once the mask kinds grew (86 s of make test)

    @sweep_settings(count)
    @given(GRAPHS, st.sampled_from(["f16", "bf16"]))
    def every_candidate_lowers(g, dtype):
        g = inputs_in(g.model_copy(update={"axes": {a: min(n, 3) for a, n in g.axes.items()}}), dtype, only="f32")
        for c in candidates(g):
            plan = derive(g, c.name)
            sweep.seen["swapped"] += sum(bool(k.swapped) for k in plan.kernels)
            sweep.kernels_of(plan, f"gen16_{g.name}_{c.name}")

    every_candidate_lowers()
    assert sweep.seen["swapped"] >= min(10, count), sweep.seen  # swapped GEMM kernels were among them


# 77: rows of an odd number of 16-bit elements, which no cp.async width (4, 8, 16 bytes) fits;
# 1: a single-row GEMM. Together they made TileLang emit a 2-byte cp.async and fail its own
# check (emit.common.pass_configs); the sizes 1..3 above never reached it
ODD_SIZES = (1, 77)


@sweep_settings(examples(5))
@given(user_graphs().map(lambda gc: gc[0]), st.sampled_from(["f16", "bf16"]), st.randoms(use_true_random=False))
def test_every_candidate_of_generated_graphs_at_odd_sizes_lowers(g, dtype, pick):
    g = inputs_in(resized(g, lambda a: pick.choice(ODD_SIZES)), dtype, only="f32")
    sweep = Sweep()
    for c in candidates(g):
        sweep.kernels_of(derive(g, c.name), f"genodd_{g.name}_{c.name}")
