"""A GEMM epilogue value that one region node reads, made of the GEMM's product (stored anyway),
inputs and constants, is left to that reader (rules.gemm.left_to_reader): RMSNorm's backward
stored dY W^T and (dY W^T) X from one GEMM, and its row kernel loaded both and X. Checked: the
GEMM then stores only its product, and every candidate of such graphs (drawn: the epilogue
value's op and operands, the reader a reduction or an elementwise node, sizes that do not divide
the tiles) equals the float64 reference through the interpreter."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leantile import autodiff, interp, reference
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.derive.rules import gemm
from leantile.plan import Store, launches

from plan_checks import rel_err


def _stores(plan) -> dict[str, list[str]]:
    return {k.name: sorted(s.dst for s in k.statements() if isinstance(s, Store)) for k in launches(plan)}


def test_rmsnorm_backward_gemm_stores_only_its_product():
    """At a width past the GEMM's column tile (the row is no epilogue's: no `rows` candidate)."""
    from leantile import architectures
    bw = autodiff.vjp(architectures.build("rmsnorm", m=33, d=300, n=45)).graph
    plan = derive(bw)
    dxn = [n.id for n in bw.nodes if n.op == "matmul" and n.axes == ("m", "d")]
    (k,) = [k for k in launches(plan) if any(s.op == "gemm" and s.acc == f"matmul_{dxn[0]}" for s in k.body)]
    assert _stores(plan)[k.name] == [f"matmul_{dxn[0]}"], _stores(plan)  # (dY W^T) X is the row kernel's
    assert not any(s.op == "map" for s in k.epilogue)
    gemm.LEAVE_TO_READERS = False
    try:
        before = _stores(derive(bw))
    finally:
        gemm.LEAVE_TO_READERS = True
    assert len(before[k.name]) == 2 and sum(map(len, before.values())) == sum(map(len, _stores(plan).values())) + 1


@st.composite
def _epilogue_graphs(draw):
    m, k = (draw(st.integers(1, 70)) for _ in range(2))
    n = draw(st.sampled_from([1, 5, 257, 300, 600]))  # past the column tile: no `rows` epilogue takes the row
    g = DagM("left_to_reader", {"m": m, "k": k, "n": n})
    y = g.matmul(g.input("X", ["m", "k"]), g.input("W", ["k", "n"]), "k", "k")
    z = draw(st.sampled_from(["Z", "b", "mask"]))
    if z == "mask":  # made of the tile's coordinates and an input alone (a reader computes it too)
        z = g.lt(g.iota("n"), g.mul(g.abs(g.input("len", ["m"])), g.size_const("n")))
    else:
        z = g.input("Z", ["m", "n"]) if z == "Z" else g.input("b", ["n"])
    op = draw(st.sampled_from(["mul", "add", "sub"]))
    e = getattr(g, op)(y, z) if draw(st.booleans()) else g.mul(y, g.const("0.5"))
    s = g.red("sum", y, "n")  # the product is read outside the epilogue: stored anyway
    if draw(st.booleans()):  # a reduction reads it
        t = g.red(draw(st.sampled_from(["sum", "max"])), e, "n")
        g.output("out", g.add(g.mul(y, s), t))
    else:  # an elementwise node of a row kernel reads it (with the product's row sum)
        g.output("out", g.mul(e, s))
    return g.graph()


@settings(deadline=None)
@given(g=_epilogue_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_an_epilogue_left_to_its_reader_is_the_graph(g, seed):
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)
        for o in ref:
            assert rel_err(out[o], ref[o]) < 1e-9, (c.name, o)


def test_cross_entropys_picked_logit_is_summed_by_its_row_kernel_not_stored_by_the_gemm():
    """The LM head's forward: sum over the vocabulary of logits * onehot(label) is the row kernel's
    (it loads the logits for the log-sum-exp anyway and makes the one-hot from the labels); the
    GEMM stores the logits alone (it stored their product with the one-hot too, a second
    [tokens, vocabulary] tensor)."""
    from leantile.train_bench import cases
    head = next(c for c in cases(lambda name, shape: {"m": 45, "k": 24, "d": 300} if name == "lm_head_ce" else shape)
                if c.name == "lm_head_ce")
    for g in (head.graph, autodiff.training_forward(head.graph)[0]):
        plan = derive(g)
        wide = [b.name for b in plan.globals if set(b.axes) == {"m", "d"}]
        assert len(wide) == 1 and wide[0].startswith("matmul"), wide


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_rmsnorm_backward_lowers_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile import architectures
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    for sizes in ({"m": 33, "d": 300, "n": 45}, {"m": 4096, "d": 4096, "n": 4096}):
        plan = derive(autodiff.vjp(architectures.build("rmsnorm", **sizes)).graph)
        mod = load_module(emit_module(plan), f"left_to_reader_{sizes['d']}")
        for f in mod.build_kernel().values():
            lower_to_cuda(f, arch="sm_90")
