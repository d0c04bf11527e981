"""A cast is the user's rounding, and every candidate honours it (issue 46).

The class of bug: a cast inside a fused region was a conversion to the fragment's float32 type,
i.e. nothing, while the unfused candidate stores the cast's value in its dtype. The candidates
then computed different functions: an f32 -> f16 -> f32 round trip of 7e10 stayed 7e10 in the
fused kernel and became inf in the unfused one (gpu-fuzz 2026-11-28 s24, a mismatch of the
unfused candidate at the huge draw), and the residual `x - f32(f16(x))` was 0 in one and the
rounding error in the other. reference.plan_rounded and derive's Ctx.rounds_to_own_dtype already
said that every plan rounds a cast; now every path does (region kernels like the others).

The float64 oracle rounds a cast too (reference.evaluate; docs/ir.md), so a cast driven past its
range is inf in the graph's value, as in torch. Where inputs drive an output or a GEMM operand
past its dtype, every plan rounds but the reference does not: no kernel can be judged there,
and the judge calls such an output ill-conditioned (Kernel._out_of_range), never wrong."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import ir, reference, runtime
from leantile.dag import DagM
from leantile.tolerance import rel_err
from leantile.derive import candidates, derive
from leantile.plan import Map
from strategies import random_graphs
from profiles import examples  # noqa: E402

NARROW = {"f16": torch.float16, "bf16": torch.bfloat16}


def _fused_casts(plan) -> list:
    """The casts a candidate computes in registers beside other arithmetic of its kernel."""
    out = []
    for k in plan.kernels:
        maps = [s for s in k.statements() if isinstance(s, Map)]
        out += [(k.name, s.dtype) for s in maps if s.fn == "cast" and len(maps) > 1]
    return out


def _residual_row(m: int, d: int, dt: str) -> ir.Graph:
    """sum_d (3x - f32(dt(3x))): the rounding error of the cast, summed in a row reduction."""
    g = DagM("cast_residual", {"m": m, "d": d})
    x = g.input("X", ["m", "d"], "f32")
    y = g.mul(x, g.const("3.0"))
    r = g.sub(y, g.cast(g.cast(y, dt), "f32"))
    g.output("r", g.red("sum", g.mul(r, r), "d"))
    g.output("e", g.add(r, x))  # an elementwise use too: the map region
    return g.graph()


def _gemm_epilogue(m: int, k: int, n: int, dt: str) -> ir.Graph:
    """(X @ W) - f32(dt(X @ W)): the cast in a GEMM's epilogue."""
    g = DagM("cast_epilogue", {"m": m, "k": k, "n": n})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32")
    p = g.matmul(x, w, "k", "k")
    g.output("r", g.sub(p, g.cast(g.cast(p, dt), "f32")))
    return g.graph()


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("build,sizes", [(_residual_row, (5, 37)), (_residual_row, (1, 130)), (_gemm_epilogue, (9, 33, 17))])
def test_every_candidate_rounds_a_cast_as_the_graph_does(build, sizes, dt):
    g = build(*sizes, dt)
    gen = torch.Generator().manual_seed(sum(sizes))
    inputs = {n.name: torch.randn(g.shape(n.id), generator=gen) * 1.7 + 0.3 for n in g.inputs()}
    # float32 (as the kernels compute 3x: in float64 it differs by 2^-24 of it, 2^-13 of the
    # residual), rounded where every plan rounds
    exact = reference.evaluate(g, inputs, compute_dtype=torch.float32, round_at=reference.plan_rounded(g))
    for o, v in exact.items():
        assert float(v.abs().max()) > 0, o  # the rounding error is there to be computed
    fused = 0
    for c in candidates(g):
        fused += bool(_fused_casts(derive(g, c.name)))
        out = runtime.compile(g, candidate=c.name, device="cpu", interpret=True).run(inputs)
        for o in g.outputs:
            err = runtime.rel_err(out[o], exact[o])
            # without the rounding: 1.0 (r = 0). A GEMM sums in another order than torch's: p
            # moves by ~sqrt(k) float32 units, 2^-13 of the residual each (2e-4 measured)
            assert err <= 2e-3, (c.name, o, err)
    assert fused, "no candidate computes the cast inside a fused kernel: the test does not reach the region path"


@settings(max_examples=examples(25), deadline=None)
@given(random_graphs(max_ops=4), st.sampled_from(["f16", "bf16"]), st.integers(0, 99))
def test_generated_graphs_round_a_cast_of_their_output_in_every_candidate(g, dt, seed):
    """Any generated graph, its output's cast residual added as a second output (fused into
    the kernel that computes the output where a candidate can): each candidate's residual is the
    rounding error of ITS OWN output (float32, as it holds it), not 0. Judged against the
    candidate's own `out` so that an ill-conditioned generated output cannot blur it."""
    d = DagM(g.name, g.axes)
    d.nodes, d.outputs = list(g.nodes), dict(g.outputs)
    y = d.mul(g.outputs["out"], d.const("3.0"))
    d.output("resid", d.sub(y, d.cast(d.cast(y, dt), "f32")))
    g = d.graph()
    gen = torch.Generator().manual_seed(seed)
    inputs = {n.name: torch.randn(g.shape(n.id), generator=gen) * 1.3 + 0.2 for n in g.inputs()}
    for c in candidates(g):
        out = runtime.compile(g, candidate=c.name, device="cpu", interpret=True).run(inputs)
        y3 = out["out"].float() * 3.0
        want = (y3 - y3.to(NARROW[dt]).float()).broadcast_to(out["resid"].shape)
        if not bool((want != 0).any()):
            continue  # every value of this output is a dt number: nothing to tell apart
        assert bool(torch.isfinite(out["resid"]).all()), c.name
        assert torch.allclose(out["resid"].double(), want.double(), rtol=0, atol=2.0 ** -22 * (1 + float(y3.abs().max()))), c.name


def _overflowing_cast(m: int, d: int) -> ir.Graph:
    """sum_d f32(f16(x * 2^12)) + 1: past 65504 at |x| > 16."""
    g = DagM("overflowing_cast", {"m": m, "d": d})
    x = g.input("X", ["m", "d"], "f32")
    c = g.cast(g.cast(g.mul(x, g.const("4096.0")), "f16"), "f32")
    g.output("y", g.add(g.red("sum", c, "d"), g.const("1.0")))
    return g.graph()


def test_a_cast_past_its_range_is_inf_in_every_plan_and_in_the_oracle():
    """The graph's value is inf where its cast overflows (torch's too): every candidate gives
    it, the judge agrees, and a kernel that skipped the rounding (the finite exact-semantics
    value) is wrong there."""
    g = _overflowing_cast(6, 45)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 45, generator=gen) * 2.0
    x[::2, 3] = 40.0  # rows 0, 2, 4: one element past f16 after the scale
    inputs = {"X": x}
    oracle = reference.evaluate(g, inputs, compute_dtype=torch.float64)["y"]
    assert bool(torch.isinf(oracle[::2]).all()) and bool(torch.isfinite(oracle[1::2]).all())
    unrounded = (x.double() * 4096).sum(1) + 1  # a cast as the identity
    for c in candidates(g):
        k = runtime.compile(g, candidate=c.name, device="cpu", interpret=True)
        out = k.run(inputs)["y"]
        assert torch.equal(torch.isinf(out), torch.isinf(oracle)), c.name
        assert k.judge(inputs, {"y": out})["ok"], c.name
        v = k.judge(inputs, {"y": unrounded.float()})
        assert not v["ok"] and v["ill_conditioned"] == [], (c.name, v)


def test_an_output_past_its_dtype_is_out_of_range_for_the_judge_not_a_wrong_kernel():
    """An f16 output whose value passes 65504 (a row sum of large f16 inputs): every plan
    stores inf, the float32 reference is finite; no kernel can be judged there
    (Kernel._out_of_range), so the output is ill-conditioned, never wrong. In range, a wrong
    output is still wrong."""
    g = DagM("f16_row_sum", {"m": 4, "d": 300})
    g.output("y", g.red("sum", g.input("X", ["m", "d"], "f16"), "d"))
    g = g.graph()
    gen = torch.Generator().manual_seed(11)
    big = {"X": (torch.rand(4, 300, generator=gen) * 100 + 300).half()}  # sums of ~1e5
    k = runtime.compile(g, candidate="unfused", device="cpu", interpret=True)
    out = k.run(big)["y"]
    assert bool(torch.isinf(out).all())
    v = k.judge(big, {"y": out})
    assert v["ok"] or v["ill_conditioned"] == ["y"], v
    small = {"X": torch.randn(4, 300, generator=gen).half()}
    right = k.run(small)["y"]
    assert k.judge(small, {"y": right})["ok"]
    v = k.judge(small, {"y": right * 1.1})
    assert not v["ok"] and v["ill_conditioned"] == [], v


def test_an_output_the_graphs_own_rounding_overflows_is_ill_conditioned_not_wrong():
    """Where the graph in its own arithmetic (`same`: on the GPU its float32 GEMMs in TF32) is inf
    across an output whose float64 reference is finite, no finite element is left to weigh it
    by: the output is unjudgeable at these inputs (GPU campaign s99, attention's backward at scores
    of 1e6), never a wrong kernel; where the model is finite and right, a wrong output stays wrong."""
    g = DagM("f32_row_sum", {"m": 4, "d": 30})
    g.output("y", g.red("sum", g.input("X", ["m", "d"], "f32"), "d"))
    g = g.graph()
    k = runtime.compile(g, candidate="unfused", device="cpu", interpret=True)
    inputs = {"X": torch.randn(4, 30, generator=torch.Generator().manual_seed(2))}
    ref, same = k.references(inputs, torch.float64)
    overflowed = {"y": torch.full_like(same["y"], math.inf)}
    assert k.ill_conditioned(inputs, ["y"], ref, overflowed) == ["y"]
    half = {"y": torch.where(torch.arange(4) < 2, math.inf, same["y"])}  # some rows only
    assert k.ill_conditioned(inputs, ["y"], ref, half) == ["y"]
    v = k.judge(inputs, {"y": ref["y"].float() * 1.1}, refs=(ref, same))
    assert not v["ok"] and v["ill_conditioned"] == [], v


def _one_hot_exp_softmax_vjp(rows: int, seed: int, live_gap: float | None = None):
    """(the unfused kernel of d_X = s (d e^s - sum d e^s s), s = softmax(X) over 64 columns; inputs
    at 2^14 with one maximum a row far from the rest, s exactly one-hot; the d_X a kernel's FMA
    d * e^s - r gives, rounded once). live_gap: row 0's second key that far below its maximum (s of
    e^-gap there: one live row)."""
    g = DagM("exp_softmax_vjp", {"i": rows, "k": 64})
    x, d = g.input("X", ["i", "k"], "f32"), g.input("d_out", ["i", "k"], "f32")
    s = g.softmax(x, "k")
    a = g.mul(d, g.exp(s))
    g.output("d_X", g.mul(s, g.sub(a, g.red("sum", g.mul(a, s), "k"))))
    k = runtime.compile(g.graph(), candidate="unfused", device="cpu", interpret=True)
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(rows, 64, generator=gen) * 16384
    X[:, 7] = X.max(-1).values + 5000
    if live_gap is not None:
        X[0, 9] = X[0, 7] - live_gap
    inputs = {"X": X, "d_out": torch.randn(rows, 64, generator=gen) * 16384}
    s1 = torch.softmax(X.double(), -1).float()
    e, dd = torch.exp(s1), inputs["d_out"]
    r = ((dd * e) * s1).sum(-1, keepdim=True)
    return k, inputs, (s1.double() * (dd.double() * e.double() - r.double())).float()


def test_an_output_that_cancels_exactly_is_ill_conditioned_by_a_rounding_probe_and_its_fma_forgiven():
    """s (d e^s - sum d e^s s) with a one-hot softmax s is exactly 0 in the graph's own order
    (d e^s rounded once, subtracted from itself), and any other correct rounding, a kernel's FMA
    d * e^s - r, leaves a unit of the 1e5-sized terms: GPU campaign s105 called every fused plan
    wrong by 9e9 relative. Moving the inputs by a unit keeps s one-hot and the output 0, so only
    the rounding probe (every value one unit off, reference.evaluate's jitter) tells; at normal
    scale a wrong output stays wrong."""
    k, inputs, fma = _one_hot_exp_softmax_vjp(3, seed=4)
    ref, same = k.references(inputs, torch.float64)
    assert float(same["d_X"].abs().max()) == 0.0
    assert float(fma.abs().max()) > 0
    assert k.ill_conditioned(inputs, ["d_X"], ref, same) == ["d_X"]
    v = k.judge(inputs, {"d_X": fma}, refs=(ref, same))  # and the judge forgives that other rounding
    assert v["ok"], v
    gen = torch.Generator().manual_seed(5)
    normal = {"X": torch.randn(3, 64, generator=gen), "d_out": torch.randn(3, 64, generator=gen)}
    ref, same = k.references(normal, torch.float64)
    v = k.judge(normal, {"d_X": same["d_X"] * 1.01}, refs=(ref, same))
    assert not v["ok"] and v["ill_conditioned"] == [], v


def test_an_fma_rounding_of_exactly_cancelling_rows_beside_a_live_one_is_rounding_not_wrong():
    """The redraw of s105 (g39): most rows one-hot (their d_X exactly 0 in the graph's order, a
    unit of the 1e5-sized terms in a kernel's FMA), one row with a second key 9 below its maximum
    (d_X of ~10 there): the output's norm is that row's, so the FMA's units of the other rows come
    to ~1e-3 of it, ten times float32's tolerance, while the graph's own rounding (its one live row)
    forgives little and a rounding probe moves the output by as much as the kernel does, under the
    ill-conditioning threshold. Another correct rounding order is rounding: the judge forgives what
    a rounding probe (reference.evaluate's jitter: every value half a unit off) moves, and an
    output wrong by 10% at that draw still fails."""
    k, inputs, fma = _one_hot_exp_softmax_vjp(64, seed=6, live_gap=9)
    ref, same = k.references(inputs, torch.float64)
    assert rel_err(fma, ref["d_X"], same["d_X"]) > 1e-4  # the graph's own rounding alone does not forgive it
    v = k.judge(inputs, {"d_X": fma}, refs=(ref, same))
    assert v["ok"], v
    v = k.judge(inputs, {"d_X": ref["d_X"].float() * 1.1}, refs=(ref, same))
    assert not v["ok"], v  # (and the rounding probe calls the draw ill-conditioned: the campaign draws again)
