"""plan.passes.last_arrival (issue 49): a split reduction's combine runs in the slices' launch, by
the last slice of each tile to finish (Kernel.tail_of, emit.tail), where the combine's tiles are
the slices' and it reads only its tile's partials; the tile parameter last_arrival=1 asks for it
(off by default: it did not pay on the H200, benchmarks/last_arrival/). Checked here: which kernels become tails (and
which must not), that a wrong tail is a verification error, that the plan with tails computes the
graph at other tiles too (float64, through the interpreter), that the module launches one
kernel fewer per tail and keeps zeroed counters, and that the kernels lower with the arrival.
The GPU side (bit for bit the two launches, call after call, graph replay): tests/gpu/test_last_arrival_gpu.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import interp, reference
from leantile.derive import candidates, derive
from leantile.emit import emit_module, load_module
from leantile.plan import launches
from leantile.plan.last_arrival import tail_fits
from leantile.plan.verify import verify
from plan_checks import rel_err
from reduction_strategies import long_reduction_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import reductions  # noqa: E402


ON = {"last_arrival": 1}


def _pairs(plan):
    """(slices' kernel, its tail) of each tail of the plan."""
    ks = plan.kernels
    return [(ks[j - 1], ks[j]) for j in range(1, len(ks)) if ks[j].tail_of]


@pytest.mark.parametrize("name,launched", [("mse_loss", 1), ("huber_loss", 1), ("hinge_loss", 1), ("layernorm_chw", 2),
                                           ("groupnorm", 2), ("bias_grad", 1), ("rmsnorm_gain_grad", 2)])
def test_the_suites_split_reductions_launch_their_combine_in_the_slices_kernel(name, launched):
    g = reductions.graph(name)
    plan = derive(g, tiles=ON)
    assert len(launches(plan)) == launched, [(k.name, k.tail_of) for k in plan.kernels]
    for before, tail in _pairs(plan):
        assert tail.tail_of == before.name and before.stream.split and tail.stream is None
        assert not tail.launch_next and not tail.wait_previous
    for off in (derive(g), derive(g, tiles={"last_arrival": 0})):  # the default: launched apart
        assert not _pairs(off) and len(off.kernels) == len(plan.kernels)
        assert verify(off, g) == []
    assert verify(plan, g) == []


def test_a_combine_over_other_tiles_or_other_tiles_partials_is_no_tail():
    plan = derive(reductions.graph("bias_grad", m=50001, n=300), tiles=ON)
    (before, tail), = _pairs(plan)
    assert tail_fits(plan, before, tail) is None
    # other tiles than the slices': a tile's combine would wait on slices of other tiles
    wider = tail.model_copy(update={"grid": tuple(t.model_copy(update={"block": t.block * 2}) for t in tail.grid)})
    assert "tiles" in tail_fits(plan, before, wider)
    # no split stream before it: no slices to count
    plain = before.model_copy(update={"stream": before.stream.model_copy(update={"split": None})})
    assert "split" in tail_fits(plan, plain, tail)
    # it writes what the slices read: a later slice would read the tail's value
    reads = next(s.src for s in before.body if s.op == "load")
    store = next(s for s in tail.statements() if s.op == "store")
    writes = tail.model_copy(update={"body": (*tail.body, store.model_copy(update={"dst": reads}))})
    assert "writes" in tail_fits(plan, before, writes)


def test_a_tail_that_does_not_fit_is_a_verification_error():
    g = reductions.graph("layernorm_chw", n=3, c=5, h=300, w=301)
    plan = derive(g, tiles=ON)
    ks = list(plan.kernels)
    j = next(i for i, k in enumerate(ks) if k.tail_of)
    wrong = [*ks[:j], ks[j].model_copy(update={"tail_of": None}), ks[j + 1].model_copy(update={"tail_of": ks[j].name})]
    bad = verify(plan.model_copy(update={"kernels": tuple(wrong + ks[j + 2:])}), g)
    assert any("no tail of" in b for b in bad), bad
    misplaced = [*ks[:j], ks[j].model_copy(update={"tail_of": ks[-1].name}), *ks[j + 1:]]
    assert any("not the kernel before it" in b for b in verify(plan.model_copy(update={"kernels": tuple(misplaced)}), g))


@settings(deadline=None)
@given(g=long_reduction_graphs(), seed=st.integers(0, 2**16), block=st.sampled_from([None, 2048, 4096]))
def test_plans_with_tails_are_the_graph_at_other_blocks(g, seed, block):
    """A tail reads the partials of its tile's slices, however many the block leaves empty: at
    another stream block (some slices empty) every tail still fits its launch (verify), and the
    plan is the graph (the interpreter runs a tail as the kernel it is)."""
    split = "split" in [c.name for c in candidates(g)]
    plan = derive(g, "split" if split else None, ON)
    assert bool(_pairs(plan)) == any(k.stream and k.stream.split for k in plan.kernels)
    if block:
        plan = plan.model_copy(update={"kernels": tuple(
            k.model_copy(update={"stream": k.stream.model_copy(update={"block": block})}) if k.stream and k.stream.split
            else k for k in plan.kernels)})
    assert not [p for p in verify(plan, g) if "tail" in p]
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    out = interp.run(plan, inputs, dtype=torch.float64)
    for o in g.outputs:
        assert rel_err(out[o].double(), ref[o]) < 1e-9, o


def test_the_module_launches_one_kernel_fewer_per_tail_and_keeps_zeroed_counters():
    plan = derive(reductions.graph("groupnorm", n=2, g=3, cg=5, h=200, w=131), tiles=ON)
    mod = load_module(emit_module(plan), "tail_groupnorm")
    assert [k["name"] for k in mod.KERNELS] == [k.name for k in launches(plan)]
    (before, tail), = _pairs(plan)
    counters, = [g for g in mod.GLOBALS if g["kind"] == "arrivals"]
    assert counters["dtype"] == "int32" and counters["shape"] == (2 * 3,)  # one per row (n, g) at any tiles
    assert counters["name"] in next(k["params"] for k in mod.KERNELS if k["name"] == before.name)
    inputs = {"X": torch.randn(2, 3, 5, 200, 131, dtype=torch.float16)}
    a = mod.allocate(inputs, device="cpu")  # NaN-filled intermediates; the counters zero, and kept
    b = mod.allocate(inputs, device="cpu")
    assert a[counters["name"]] is b[counters["name"]] and int(a[counters["name"]].abs().sum()) == 0
    assert all(torch.isnan(a[g["name"]]).all() for g in mod.GLOBALS if g["kind"] == "intermediate")


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("name,sizes", [("mse_loss", {"m": 3, "d": 70001}), ("bias_grad", {"m": 50001, "n": 300}),
                                        ("layernorm_chw", {"n": 3, "c": 5, "h": 300, "w": 301})])
def test_a_launch_with_a_tail_lowers_with_its_arrival_and_reset(name, sizes):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.lower import lower_to_cuda
    plan = derive(reductions.graph(name, **sizes), tiles=ON)
    (before, tail), = _pairs(plan)
    mod = load_module(emit_module(plan), f"tail_{name}")
    cu = lower_to_cuda(mod.build_kernel()[before.name], arch="sm_90")
    assert "AtomicAddRet" in cu  # the arrival, acquire-release (memory order 4)
    assert cu.count("_arrivals[") >= 2  # counted in, and set back to 0 by the last slice
