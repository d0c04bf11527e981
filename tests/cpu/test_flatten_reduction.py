"""flatten_reduction (issue 49): nested reductions of one kind over axes adjacent wherever they
occur are one reduction over their product. A LayerNorm over (c, h, w) is one statistics row of
c h w elements, not a kernel per axis; the plan's tensors over the merged axis are views of the
user's (Plan.merged), in the interpreter and in the emitted module alike. Every candidate of
generated graphs (merged or kept apart: an inner result read elsewhere, an iota, a GEMM, another
layout) equals the graph in float64."""
from __future__ import annotations

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import dag, interp, ir, reference
from leantile.derive import candidates, derive
from leantile.derive.engine import check_derivation, replay
from leantile.derive.rules.flatten import FLATTEN, flatten
from leantile.derive.steps import DerivationError
from plan_checks import rel_err
from reduction_strategies import nested_reduction_graphs, norm_over

ROOT = Path(__file__).resolve().parents[2]


def _norm(shape=("n", "c", "h", "w"), axes=("c", "h", "w"), **sizes):
    sizes = {a: sizes.get(a, 5) for a in shape}
    return dag.build_graph_with_output("norm", sizes, norm_over(axes, shape))


def _reduced_axes(plan) -> set[str]:
    return {s.axis for k in plan.kernels for s in k.statements() if s.op == "reduce"}


def test_a_layernorm_over_c_h_w_reduces_one_merged_axis():
    g = _norm(n=3, c=7, h=5, w=9)
    h, steps, merged = flatten(g)
    assert merged == {"c_h_w": ("c", "h", "w")} and h.axes["c_h_w"] == 7 * 5 * 9
    assert [st.rule for st in steps] == [FLATTEN.name]
    reduces = [n for n in h.nodes if isinstance(n, ir.Reduce)]
    assert [n.axis for n in reduces] == ["c_h_w", "c_h_w"]  # the mean's and the variance's: one each
    plan = derive(g)
    assert plan.merged == merged and not _reduced_axes(plan) & {"c", "h", "w"}
    assert candidates(g)[-1].steps == ()  # the unfused candidate stays on the graph itself
    assert not derive(g, candidates(g)[-1].name).merged


def test_batchnorm_merges_h_w_and_keeps_n_apart():
    """(n, h, w) of [n, c, h, w]: h and w are adjacent, n is not: h_w merged, n reduced after."""
    g = _norm(axes=("n", "h", "w"), n=4, c=3, h=6, w=7)
    _, _, merged = flatten(g)
    assert merged == {"h_w": ("h", "w")}


@pytest.mark.parametrize("shape", [("n", "c", "h", "w"), ("c", "h", "n", "w")])
def test_axes_apart_in_the_layout_are_not_merged(shape):
    g = _norm(shape=shape, axes=("c", "w"))  # c and w never adjacent
    assert flatten(g)[2] == {}


def test_an_inner_result_that_is_an_output_or_read_elsewhere_keeps_its_axis():
    def body(g):
        x = g.input("X", ["n", "c", "h"], "f32")
        inner = g.red("sum", x, "h")
        g.output("inner", inner)
        g.output("y", g.red("sum", inner, "c"))
    g = dag.build_graph("kept", {"n": 3, "c": 4, "h": 5}, body)
    assert flatten(g)[2] == {}


def test_every_candidate_of_a_merged_graph_equals_it_at_sizes_that_divide_no_tile():
    g = _norm(n=3, c=7, h=5, w=9)
    inputs = reference.random_inputs(g, seed=4)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)["out"]
    for c in candidates(g):
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)["out"]
        assert out.shape == ref.shape and rel_err(out, ref) < 1e-9, c.name


def test_replay_takes_the_flatten_steps_and_refuses_others():
    g = _norm(n=2, c=3, h=4, w=5)
    c = candidates(g)[0]
    assert replay(g, c.steps).merged == {"c_h_w": ("c", "h", "w")}
    assert check_derivation(g.with_derivation(c.steps)) == []
    wrong = (FLATTEN.step(c.steps[0].at, axes="h,w", axis="h_w"), *c.steps[1:])
    with pytest.raises(DerivationError, match="flatten_reduction"):
        replay(g, wrong)
    assert check_derivation(g.with_derivation(wrong))


def test_the_emitted_module_views_the_users_tensors():
    """allocate() takes the user's [n, c, h, w] and hands the kernels the plan's [n, c_h_w] view;
    run() returns outputs in the graph's shape (USER_SHAPES)."""
    from leantile.emit import emit_module, load_module
    g = _norm(n=3, c=7, h=5, w=9)
    plan = derive(g)
    mod = load_module(emit_module(plan), "flatten_views")
    x = torch.randn(3, 7, 5, 9)
    t = mod.allocate({"X": x}, device="cpu")
    assert tuple(t["X"].shape) == (3, 315) and t["X"].data_ptr() == x.data_ptr()
    out = plan.outputs["out"]
    assert tuple(t[out].shape) == (3, 315) and mod.USER_SHAPES[out] == (3, 7, 5, 9)
    ran = mod.run({k["name"]: (lambda *a: None) for k in mod.KERNELS}, t)
    assert tuple(ran["out"].shape) == (3, 7, 5, 9)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(g=nested_reduction_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_generated_nested_reductions_is_the_graph(g, seed):
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    h, _, merged = flatten(g)
    assert ir.check(h) == [], "the merged graph is a valid graph"
    for c in candidates(g):
        plan = derive(g, c.name)
        assert bool(plan.merged) == bool(merged and c.steps), c.name
        out = interp.run(plan, inputs, dtype=torch.float64)
        for o in g.outputs:
            assert out[o].shape == ref[o].shape, (c.name, o)
            err = rel_err(out[o].double(), ref[o])
            assert err < 1e-9, f"{c.name}: output {o}: relative error {err:.3g}"


def test_the_reduction_examples_norms_take_fewer_kernels():
    """examples/reductions.py's LayerNorm over (c, h, w) was 7 kernels (a kernel per axis per
    statistic), the GroupNorm and BatchNorm 5: now one statistics row per merged axis."""
    spec = spec_from_file_location("leantile_reduction_examples_flatten", ROOT / "examples" / "reductions.py")
    R = module_from_spec(spec)
    spec.loader.exec_module(R)
    for name, most in (("layernorm_chw", 5), ("groupnorm", 5)):
        plan = derive(R.graph(name))
        assert plan.merged and len(plan.kernels) <= most, (name, len(plan.kernels))
        parts = {p for ps in plan.merged.values() for p in ps}
        assert not _reduced_axes(plan) & parts, name  # no kernel reduces one part of a merged axis


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_merged_plans_lower_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(_norm(n=16, c=64, h=33, w=65))
    assert plan.merged
    mod = load_module(emit_module(plan), "flatten_lower")
    for name, f in mod.build_kernel().items():
        assert "__global__" in lower_to_cuda(f, arch="sm_90")


@pytest.mark.parametrize("interpret", [True, False])
def test_a_merged_plan_keeps_the_graphs_shapes_for_callers(interpret):
    """leantile.compile's output specs (what lt.op's fake tensors are made from under
    torch.compile) and outputs are the graph's shapes, not the plan's merged ones; gradients flow."""
    import leantile
    import leantile.torch as lt
    g = _norm(n=2, c=3, h=4, w=5)
    k = leantile.compile(g, device="cpu", interpret=interpret)
    assert k.plan.merged and k.output_specs["out"][0] == (2, 3, 4, 5)
    f = lt.op(k)
    x = torch.randn(2, 3, 4, 5, requires_grad=True)
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    ref = reference.evaluate(g, {"X": x.detach()}, compute_dtype=torch.float64)["out"]
    assert out.shape == (2, 3, 4, 5) and rel_err(out.detach().double(), ref) < 1e-5
    out.square().sum().backward()
    assert x.grad.shape == (2, 3, 4, 5) and torch.isfinite(x.grad).all()
