"""Sibling elementwise kernels (rules.regions.RegionAnalysis._map_groups): materialised
elementwise values over the same axes that read a value in common are computed by one map kernel,
which reads it once (the gradients of an elementwise op's operands: SwiGLU's dG and dU both read
the output's cotangent and the gate). Never where one needs the other through another kernel
(the map kernel would wait on itself), never across a chain the region bounds cut, and every
candidate still equals the float64 reference."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from leantile import autodiff
from leantile.architectures import build
from leantile.dag import DagM
from leantile.derive import derive
from plan_checks import check_every_candidate
from strategies import random_graphs


def _maps(plan):
    return [k for k in plan.kernels if k.name.startswith("fused_")]


def test_two_gradients_of_one_product_are_one_kernel_reading_the_cotangent_once():
    g = DagM("siblings", {"m": 33, "n": 70})
    dy, a, b = (g.input(x, ["m", "n"], "f16") for x in ("dy", "a", "b"))
    g.output("da", g.mul(dy, g.sigmoid(b)))
    g.output("db", g.mul(g.mul(dy, a), g.tanh(b)))
    graph = g.graph()
    plan = derive(graph)
    k, = _maps(plan)
    loads = [s.src for s in k.statements() if s.op == "load"]
    assert sorted(loads) == ["a", "b", "dy"]  # each read once, for both outputs
    check_every_candidate(graph, seed=1, tiles_list=(None,))


def test_a_value_that_needs_the_other_through_a_gemm_stays_a_kernel_of_its_own():
    """h = tanh(x) and z = sigmoid(x) (h W V) both read x over (m, k); z needs h through two GEMMs:
    one kernel for both would wait on itself. z is the second GEMM's epilogue (sigmoid(x) made of
    an input alone: rules.gemm.tile_computable), h a map kernel of its own, written before."""
    g = DagM("through_gemm", {"m": 33, "k": 40, "n": 24})
    x = g.input("x", ["m", "k"], "f32")
    h = g.tanh(x)
    y = g.matmul(g.matmul(h, g.input("W", ["k", "n"], "f32"), "k", "k"), g.input("V", ["n", "k"], "f32"), "n", "n")
    g.output("h", h)
    g.output("z", g.mul(g.sigmoid(x), y))
    graph = g.graph()
    plan = derive(graph)
    writes = {k.name: {s.dst for s in k.statements() if s.op == "store"} for k in plan.kernels}
    h_at = next(n for n, w in writes.items() if plan.outputs["h"] in w)
    z_at = next(n for n, w in writes.items() if plan.outputs["z"] in w)
    names = [k.name for k in plan.kernels]
    assert h_at != z_at and names.index(h_at) < names.index(z_at), writes
    assert z_at.startswith("gemm") and [k.name for k in _maps(plan)] == [h_at], writes
    check_every_candidate(graph, seed=2, tiles_list=(None,))


def test_swiglus_backward_computes_both_gate_gradients_in_one_kernel():
    bw = autodiff.vjp(build("swiglu", m=37, d=70, n=45)).graph
    assert len(_maps(derive(bw))) == 1


@settings(deadline=None)
@given(g=random_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_random_graphs_is_the_graph_with_siblings_merged(g, seed):
    check_every_candidate(g, seed, (None,))
