"""A sum of GEMM products over one output (rules.gemm.earlier_product): the later product's
epilogue loads the earlier product's tile and adds it, where a kernel of its own added them.
The class: recurrent cells (W x + U h), residual branches, and every gradient of an input two
GEMMs read (SwiGLU's dX = dG W_g^T + dU W_u^T, 0.117 ms of its training step on the H200 as an
add kernel). Every candidate of generated sums equals the float64 reference at odd and size-1
axes; the add is never a kernel of its own; the kernels lower."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from leantile import autodiff, ir
from leantile.architectures import build
from leantile.dag import DagM
from leantile.derive import derive
from plan_checks import check_every_candidate
from gemm_strategies import gemm_sum_graphs


def _products_added_apart(g: ir.Graph, plan) -> list[int]:
    """The adds of two matmul products (directly) that no GEMM kernel computes."""
    sums = [n.id for n in g.nodes if isinstance(n, ir.Binary) and n.op == "add"
            and all(isinstance(g.node(a), ir.Matmul) for a in n.args())]

    def in_a_gemm(i: int) -> bool:
        return any(any(s.op == "gemm" for s in k.statements()) for k in plan.kernels
                   if any(b.node == i and b.scope != "global" for b in k.buffers))
    return [i for i in sums if not in_a_gemm(i)]


def test_swiglus_input_gradient_adds_in_the_second_gemms_epilogue():
    g = build("swiglu", m=37, d=70, n=45)
    bw = autodiff.vjp(g).graph
    plan = derive(bw)
    assert _products_added_apart(bw, plan) == []
    gemms = [k for k in plan.kernels if any(s.op == "gemm" for s in k.statements())]
    assert len(plan.kernels) == len(gemms) + 1  # the two elementwise gradients (dG, dU) in one, no add kernel
    check_every_candidate(bw, seed=4, tiles_list=(None,))


def test_a_recurrent_cell_adds_its_two_products_in_one_epilogue_and_stores_the_first_once():
    g2 = DagM("cell", {"b": 33, "k": 70, "n": 45, "j": 45})
    x = g2.input("x", ["b", "k"], "f16")
    h = g2.tanh(g2.input("h0", ["b", "j"], "f16"))
    wx = g2.matmul(x, g2.input("W", ["k", "n"], "f16"), "k", "k")
    uh = g2.matmul(h, g2.input("U", ["j", "n"], "f16"), "j", "j")
    g2.output("h1", g2.tanh(g2.add(wx, g2.add(uh, g2.input("bias", ["n"], "f16")))))
    graph = g2.graph()
    plan = derive(graph)
    assert len(plan.kernels) <= 3  # the tanh of h0 (a GEMM's LHS), W x, then U h with the sum and tanh
    stores = [s.dst for k in plan.kernels for s in k.statements() if s.op == "store"]
    assert len(stores) == len(set(stores))
    check_every_candidate(graph, seed=2, tiles_list=(None, {"block_m": 16, "block_n": 32, "threads": 128}))


@settings(deadline=None)
@given(g=gemm_sum_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_a_sum_of_products_is_the_graph(g, seed):
    check_every_candidate(g, seed, (None,))
    assert _products_added_apart(g, derive(g)) == []


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_a_gemm_adding_an_earlier_product_lowers_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    bw = autodiff.vjp(build("swiglu", m=256, d=256, n=384)).graph
    plan = derive(bw)
    mod = load_module(emit_module(plan), "gemm_sums_swiglu_backward")
    for name, f in mod.build_kernel().items():
        assert "__global__" in lower_to_cuda(f, arch="sm_90")
