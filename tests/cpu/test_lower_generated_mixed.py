"""The generated lowering sweep (test_lower_generated.py) with inputs of mixed dtypes, and GEMM
graphs on the ping-pong schedule."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
pytestmark = pytest.mark.slow  # minutes of TileLang lowering: make test runs it, make test-fast does not

from leantile.derive import candidates, derive  # noqa: E402
from leantile.ir import GraphError  # noqa: E402

import strategies  # noqa: E402
from lowering_sweeps import GRAPHS, Sweep, sweep_settings  # noqa: E402
from profiles import examples  # noqa: E402
from strategies import ALL_CLASSES, inputs_in, inputs_mixed, resized  # noqa: E402


@sweep_settings(examples(8))
@given(GRAPHS, st.data())
def test_every_candidate_of_mixed_dtype_generated_graphs_lowers(g, data):
    """Each input in a drawn dtype (f32, f16, bf16): outputs are stored in their own value's
    dtype (a float32 path beside a 16-bit one), rounded and widened in the epilogue."""
    g = inputs_mixed(g.model_copy(update={"axes": {a: min(n, 3) for a, n in g.axes.items()}}), data.draw)
    sweep = Sweep()
    for c in candidates(g):
        sweep.kernels_of(derive(g, c.name), f"genmix_{g.name}_{c.name}")


# the ping-pong schedule's sizes: 16-bit rows of whole 16-byte granules (TMA), tiles that do
# not divide them (136 of 128) or one partial tile (8)
PINGPONG_SIZES = (8, 136)
PINGPONG_TILES = {"block_m": 128, "block_n": 128, "threads": 256, "pingpong": 1}


def test_every_candidate_of_generated_graphs_on_the_pingpong_schedule_lowers():
    """Every candidate asked for the ping-pong schedule (plan.passes.pingpong): the kernels that
    take it (a GEMM with an elementwise epilogue: norms into GEMMs, several outputs, casts,
    reused weights) emit and lower with the shared memory the verifier counts."""
    sweep = Sweep()

    @sweep_settings(examples(8))
    @given(st.one_of(strategies._user_gemm(ALL_CLASSES), strategies._user_norm_gemm(ALL_CLASSES)).map(lambda gc: gc[0]),
           st.sampled_from(["f16", "bf16"]), st.randoms(use_true_random=False))
    def pingpong_kernels_lower(g, dtype, pick):
        g = inputs_in(resized(g, lambda a: pick.choice(PINGPONG_SIZES)), dtype, only="f32")
        for c in candidates(g):
            try:
                plan = derive(g, c.name, {**derive(g, c.name).tiles, **PINGPONG_TILES})
            except GraphError as e:  # these tiles overfill shared memory for this candidate (attention
                assert "shared memory" in str(e), e  # at a 136-wide head): refused, rightly
                continue
            on = {k.name for k in plan.kernels if k.pingpong}
            sweep.seen["pingpong"] += len(on)
            # the plain kernels at these tiles: the other sweeps
            sweep.kernels_of(plan, f"genpp_{g.name}_{c.name}", only=on)

    pingpong_kernels_lower()
    assert sweep.seen["pingpong"] >= 4, sweep.seen  # GEMM kernels lowered on the ping-pong schedule
