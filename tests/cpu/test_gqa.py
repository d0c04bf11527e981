"""Issue 17: grouped-query attention. Q[h_kv, g, t_q, d] against K, V[h_kv, t_kv, d]: the g query
heads of a group share K and V, so pack_query_group puts them in one CTA (block_m rows = g heads
x block_m / g positions, or block_m heads for one query), and each K and V block is loaded once
per group. Every candidate at every tiling equals the independent float64 evaluator."""
import math
from unittest import mock

import pytest
import torch
from hypothesis import given, strategies as st

import evaluator as ev
from leantile import interp
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.derive import grids
from leantile.derive.engine import refusals
from leantile.plan import Load
from leantile.tolerance import TOLERANCE

TOL = TOLERANCE[torch.float64]


def gqa(heads=4, tq=5, tkv=7, d=3, hkv=2, q_axes=("h_kv", "g", "t_q", "d_h"), mask=None, dtype="f32"):
    g = DagM("gqa", {"h_kv": hkv, "g": heads, "t_q": tq, "t_kv": tkv, "d_h": d})
    q = g.input("Q", list(q_axes), dtype)
    k, v = (g.input(n, ["h_kv", "t_kv", "d_h"], dtype) for n in ("K", "V"))
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    if mask:
        s = mask(g, s, g.iota("t_q"), g.iota("t_kv"))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def causal(g, s, i, j):
    return g.select(g.le(j, g.add(i, g.const("1"))), s, g.const("-inf"))


def bias_without_heads(g, s, i, j):  # a [t_q, t_kv] bias: the packed loop reads it at row % block
    return g.add(s, g.input("B", ["t_q", "t_kv"], "f32"))


def flash(plan):
    return next(k for k in plan.kernels if k.name.startswith("flash"))


def packed_rows(on: bool):
    """grids.PACK_QUERY_ROWS (heads x queries as one row dimension; off by default: slower)."""
    return mock.patch.object(grids, "PACK_QUERY_ROWS", on)


@packed_rows(True)
def test_a_group_shares_one_cta_and_each_kv_block_is_loaded_once():
    """Packed: the grid has no CTA per query head, so K and V are read h_kv x (t_q tiles) times,
    not h_kv x g x (t_q tiles); the step is in the derivation."""
    g = gqa(heads=4, tq=300, tkv=500, d=64)
    steps = next(c.steps for c in candidates(g) if c.name == "online_exp2")
    assert [s.params for s in steps if s.rule == "pack_query_group"] == [{"group": "g"}]
    plan = derive(g, "online_exp2")
    k = flash(plan)
    assert k.packed == ("g", "t_q")
    grid = {t.axis: t for t in k.grid}
    assert grid["g"].block == 4 and grid["t_q"].block * 4 == plan.tiles["block_m"]
    ctas = math.prod(math.ceil(plan.axes[t.axis] / t.block) for t in k.grid)
    assert ctas == 2 * math.ceil(300 / (plan.tiles["block_m"] // 4))  # h_kv x query tiles: no factor g
    kv_loads = [s for s in k.body if isinstance(s, Load)]
    assert {s.src for s in kv_loads} == {"K", "V"} and len(kv_loads) == 2


def test_one_query_tiles_the_heads():
    """Decode: a CTA's rows are the group's heads (t_q a batch axis), not one row of block_m."""
    g = gqa(heads=8, tq=1, tkv=300, d=64)
    steps = next(c.steps for c in candidates(g) if c.name == "online_exp2")
    assert [s.params for s in steps if s.rule == "pack_query_group"] == [{"group": "g"}]
    k = flash(derive(g, "online_exp2"))
    grid = {t.axis: t.block for t in k.grid}
    assert grid["t_q"] == 1 and grid["g"] > 1 and k.packed == ()


def test_many_queries_keep_a_head_per_cta_by_default():
    """The queries of one head fill a tile's rows (grids.PACK_QUERY_ROWS is off: measured slower)."""
    g = gqa(heads=4, tq=300, tkv=500, d=64)
    k = flash(derive(g, "online_exp2"))
    assert k.packed == () and {t.axis: t.block for t in k.grid}["g"] == 1
    assert not any(s.rule == "pack_query_group" for c in candidates(g) for s in c.steps)


@pytest.mark.parametrize("q_axes", [("g", "h_kv", "t_q", "d_h"), ("h_kv", "t_q", "d_h", "g")])
def test_one_query_tiles_the_heads_wherever_the_head_axis_sits(q_axes):
    g = gqa(heads=5, tq=1, tkv=9, q_axes=q_axes)
    k = flash(derive(g, "online_exp2"))
    assert {t.axis: t.block for t in k.grid}["g"] > 1
    check(g)


@packed_rows(True)
def test_packed_rows_need_the_head_axis_before_the_query_axis_and_say_why():
    g = gqa(q_axes=("g", "h_kv", "t_q", "d_h"))
    k = flash(derive(g, "online_exp2"))
    assert k.packed == () and {t.axis: t.block for t in k.grid}["g"] == 1
    assert any("pack_query_group" in r and "not just before the query axis" in r for r in refusals(g))


def check(g, seed=0):
    inputs = ev.random_inputs(g, seed)
    ref = ev.evaluate(g, inputs)
    for c in candidates(g):
        for t in (None, {"block_m": 4, "block_n": 2}, {"block_m": 1, "block_n": 3}):
            out = interp.run(derive(g, c.name, t), inputs, dtype=torch.float64)
            for name, r in ref.items():
                assert ev.rel_err(out[name], r) <= TOL, (c.name, t)


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("mask", [None, causal, bias_without_heads])
@given(heads=st.integers(1, 5), tq=st.integers(1, 7), tkv=st.integers(1, 9), bm=st.sampled_from([1, 2, 4, 6, 8, 12]),
       bn=st.sampled_from([1, 2, 3, 5]), seed=st.integers(0, 2**16))
def test_packed_plans_equal_evaluator(rows, mask, heads, tq, tkv, bm, bn, seed):
    """At tiles that pack (block_m a multiple of the heads), that tile the heads (one query, or
    more heads than block_m) and that do not (block_m not a multiple): partial query tiles,
    size-1 axes, wholly masked rows (the causal offset leaves none here; test_masks has them)."""
    g = gqa(heads=heads, tq=tq, tkv=tkv, mask=mask)
    inputs = ev.random_inputs(g, seed)
    ref = ev.evaluate(g, inputs)
    with packed_rows(rows):
        for c in candidates(g):
            out = interp.run(derive(g, c.name, {"block_m": bm, "block_n": bn}), inputs, dtype=torch.float64)
            for name, r in ref.items():
                assert ev.rel_err(out[name], r) <= TOL, (c.name, bm, bn)


GPU_SHAPES = {  # (heads, t_q, t_kv, d_h, mask, Q's axes): partial query and key tiles, decode, MQA-like
    "packed_causal": (4, 100, 300, 64, causal, None),
    "packed_bias": (4, 72, 200, 64, bias_without_heads, None),
    "decode": (8, 1, 700, 128, None, None),
    "decode_heads_first": (5, 1, 700, 128, None, ("g", "h_kv", "t_q", "d_h")),
    "decode_heads_last": (5, 1, 300, 64, None, ("h_kv", "t_q", "d_h", "g")),
    "many_heads": (16, 3, 260, 64, None, None),
}


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("case", sorted(GPU_SHAPES))
def test_packed_gqa_kernels_on_gpu(case, rows):
    import leantile
    heads, tq, tkv, d, mask, q_axes = GPU_SHAPES[case]
    g = gqa(heads=heads, tq=tq, tkv=tkv, d=d, mask=mask, dtype="f16", q_axes=q_axes or ("h_kv", "g", "t_q", "d_h"))
    with packed_rows(rows):
        for c in candidates(g):
            if c.name != "unfused":
                v = leantile.compile(g, candidate=c.name, tuned=False).verify(seed=5)
                assert v["ok"], (c.name, v)
