"""Generic fusion (rules fuse_elementwise and fuse_reduction): graphs nobody wrote a pattern for
derive to a few kernels and compute what the unfused graph computes, at shapes that do not
divide the tiles, with size-1 axes, with rows on chip and rows streamed."""
from __future__ import annotations

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import evaluator as ev
from leantile import dag, interp
from leantile.derive import candidates, derive
from leantile.derive.rules.row_tiles import ON_CHIP
from leantile.tolerance import TOLERANCE
from profiles import examples  # noqa: E402
from reduction_strategies import norm_over as _norm_over

ROOT = Path(__file__).resolve().parents[2]
_spec = spec_from_file_location("leantile_fusion_examples", ROOT / "examples" / "fusion.py")
F = module_from_spec(_spec)
_spec.loader.exec_module(F)
TOL = TOLERANCE[torch.float64]
SMALL = {"m": 5, "d": 7, "c": 11, "k": 9, "n": 6, "h": 3, "w": 10}


def _graph(name, sizes):
    body, axes = F.CASES[name]
    return dag.build_graph_with_output(name, {a: sizes[a] for a in axes}, body)


def _inputs(g, seed=0):
    t = ev.random_inputs(g, seed)
    if "label" in t:  # class indices, some out of range (their row picks nothing)
        c = g.axes["c"]
        t["label"] = torch.randint(0, c + 1, t["label"].shape, generator=torch.Generator().manual_seed(seed)).double()
    return t


def _check(g, tiles=None, seed=0):
    inputs = _inputs(g, seed)
    ref = ev.evaluate(g, inputs)
    for c in candidates(g):
        out = interp.run(derive(g, c.name, tiles), inputs, dtype=torch.float64)
        for o in g.outputs:
            err = ev.rel_err(out[o], ref[o])
            assert err <= TOL, f"{g.name}/{c.name} tiles={tiles}: {o} relative error {err:.3g}"


@pytest.mark.parametrize("name", sorted(F.CASES))
@pytest.mark.parametrize("sizes", [SMALL, {**SMALL, "m": 1, "n": 1}, {**SMALL, "d": 1, "c": 1, "w": 1}],
                         ids=["5x7", "m1", "d1"])
def test_fusion_examples_are_few_kernels_and_exact(name, sizes):
    g = _graph(name, sizes)
    plan = derive(g)
    assert len(plan.kernels) <= F.MAX_KERNELS[name], [k.name for k in plan.kernels]
    _check(g, None)
    _check(g, {"block_m": 3, "block_n": 2, "block_k": 4, "block_r": 3})


@pytest.mark.parametrize("name", ["layernorm_affine", "rmsnorm_gain", "log_softmax", "cross_entropy", "mse_loss"])
def test_rows_too_long_for_the_chip_stream_and_stay_exact(name):
    d = ON_CHIP + 5  # past what one on-chip row tile holds: the reductions stream
    g = _graph(name, {**SMALL, "m": 2, "d": d, "c": d})
    plan = derive(g)
    assert any(k.stream for k in plan.kernels)
    _check(g, {"block_k": 1000, "block_r": 2})


def test_standalone_norm_is_one_kernel_that_reads_the_row_once():
    g = _graph("layernorm_affine", {"m": 64, "d": 512})
    (k,) = derive(g).kernels
    loads = [s.src for s in k.statements() if s.op == "load"]
    assert loads.count("X") == 1 and k.stream is None


def test_gemm_epilogue_through_computed_scalars_and_0d_inputs_is_one_kernel():
    g = _graph("gemm_epilogue", {"m": 7, "k": 9, "n": 6})
    (k,) = derive(g).kernels
    assert k.name.startswith("gemm_")
    _check(g)


def test_long_elementwise_chain_is_few_kernels_with_few_live_tiles():
    """400 chained ops: kernels of at most MAX_REGION_OPS nodes (regions.py: TileLang's lowering
    time grows faster than linearly with one function's statements), each reusing its tiles."""
    from leantile.derive.rules.regions import MAX_REGION_OPS

    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        for i in range(200):
            x = g.add(g.mul(x, g.const("0.99")), g.const(str(i % 3)))
        return x
    g = dag.build_graph_with_output("chain", {"m": 3, "d": 5}, body)
    ks = derive(g).kernels
    assert len(ks) == -(-400 // MAX_REGION_OPS)
    for k in ks:
        assert len([b for b in k.buffers if b.scope == "fragment"]) <= 3  # reused in place, not one per op
    _check(g)


def test_iota_select_mask_in_a_region():
    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        keep = g.le(g.iota("d"), g.iota("m"))  # a causal-style mask
        return g.select(keep, g.exp(x), g.const(0.0))
    g = dag.build_graph_with_output("mask", {"m": 6, "d": 6}, body)
    assert len(derive(g).kernels) == 1
    _check(g, {"block_m": 4, "block_n": 4})


@settings(max_examples=examples(25))
@given(st.sampled_from(sorted(F.CASES)), st.integers(1, 9), st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_fusion_examples_at_random_shapes(name, m, d, seed):
    g = _graph(name, {"m": m, "d": d, "c": d, "k": d, "n": m, "h": m, "w": d})
    _check(g, {"block_m": 2, "block_n": 3, "block_k": 2, "block_r": 2}, seed)


@pytest.mark.parametrize("name", ["silu", "gelu_erf", "gemm_epilogue"])
def test_map_kernels_with_partial_tiles(name):
    """Map kernels tile the last axis by up to 1024: 1500 columns leave a partial tile."""
    g = _graph(name, {"m": 3, "d": 1500, "k": 5, "n": 1500})
    _check(g)


def test_map_kernel_over_three_axes_with_broadcast_operands():
    def body(g):
        x = g.input("X", ["b", "m", "d"], "f32")
        row, col = g.input("R", ["m"], "f32"), g.input("C", ["d"], "f32")
        return g.select(g.gt(g.iota("b"), g.const(0.0)), g.mul(g.tanh(x), row), g.add(x, col))
    g = dag.build_graph_with_output("bcast", {"b": 3, "m": 5, "d": 1100}, body)
    assert len(derive(g).kernels) == 1
    _check(g)


def _instance_norm(g):
    """statistics over two axes (h, w) of x[n, c, h, w], then the normalisation with a gain per c"""
    x = g.input("X", ["n", "c", "h", "w"], "f32")
    hw = g.mul(g.size_const("h"), g.size_const("w"))
    mean = g.div(g.red("sum", g.red("sum", x, "w"), "h"), hw)
    xc = g.sub(x, mean)
    var = g.div(g.red("sum", g.red("sum", g.square(xc), "w"), "h"), hw)
    return g.mul(g.mul(xc, g.rsqrt(g.add(var, g.const("1e-05")))), g.input("gamma", ["c"], "f32"))


@pytest.mark.parametrize("sizes", [{"n": 2, "c": 3, "h": 5, "w": 7}, {"n": 1, "c": 1, "h": 1, "w": 9},
                                   {"n": 3, "c": 2, "h": 40, "w": 30}])
def test_statistics_over_several_axes_are_one_kernel(sizes):
    """InstanceNorm: the reductions over w then h, the centring and the variance, in one kernel
    holding the (h, w) plane on chip."""
    g = dag.build_graph_with_output("instance_norm", sizes, _instance_norm)
    plan = derive(g)
    (k,) = plan.kernels
    held = {p for t in k.grid if t.block > 1 for p in plan.merged.get(t.axis, (t.axis,))}  # (h, w) or h_w
    assert k.stream is None and held >= {"h", "w"}
    _check(g)
    _check(g, {"block_m": 2, "block_n": 3, "block_k": 2, "block_r": 2})


def test_statistics_too_large_for_the_chip_fall_back_to_more_kernels_and_stay_exact():
    g = dag.build_graph_with_output("instance_norm", {"n": 1, "c": 2, "h": 150, "w": 130}, _instance_norm)
    assert len(derive(g).kernels) > 1
    _check(g)


@pytest.mark.parametrize("sizes,shape,axes", [
    ({"n": 3, "c": 8, "h": 16, "w": 16}, ("n", "c", "h", "w"), ("c", "h", "w")),  # LayerNorm over (c, h, w)
    ({"n": 2, "c": 5, "h": 7, "w": 9}, ("n", "c", "h", "w"), ("c", "h", "w")),
    ({"n": 2, "g": 4, "cg": 3, "h": 5, "w": 6}, ("n", "g", "cg", "h", "w"), ("cg", "h", "w")),  # GroupNorm
    ({"n": 1, "g": 1, "cg": 1, "h": 1, "w": 1}, ("n", "g", "cg", "h", "w"), ("cg", "h", "w"))])
def test_a_norm_over_three_axes_that_fit_on_chip_is_one_kernel(sizes, shape, axes):
    """The statistics over three axes, the centring and the variance in one kernel holding the
    group on chip (it was five: one kernel per reduced axis and pass)."""
    g = dag.build_graph_with_output("norm3", sizes, _norm_over(axes, shape))
    (k,) = derive(g).kernels
    assert k.stream is None
    _check(g)
    _check(g, {"block_m": 2, "block_n": 3, "block_k": 2, "block_r": 2})


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(n=st.integers(1, 3), c=st.integers(1, 9), h=st.integers(1, 20), w=st.integers(1, 40),
       axes=st.sampled_from([("c", "h", "w"), ("h", "w"), ("c", "h"), ("n", "c", "h", "w")]), seed=st.integers(0, 999))
def test_norms_over_several_axes_at_random_shapes(n, c, h, w, axes, seed):
    """On chip where the group fits, in more kernels where it does not: exact either way."""
    g = dag.build_graph_with_output("norm_axes", {"n": n, "c": c, "h": h, "w": w}, _norm_over(axes))
    _check(g, seed=seed)


def _residual_norm(g):
    """h = x + r (an output) and RMSNorm(h) with a gain (the other): the residual stream."""
    h = g.add(g.input("X", ["m", "d"], "f32"), g.input("R", ["m", "d"], "f32"))
    g.output("h", h)
    g.output("y", g.mul(g.rms_norm(h, "d"), g.input("gamma", ["d"], "f32")))


@pytest.mark.parametrize("sizes", [{"m": 5, "d": 37}, {"m": 1, "d": 1}, {"m": 33, "d": 1030}])
def test_a_stored_producer_of_a_row_on_chip_is_computed_in_the_row_kernel(sizes):
    """h, an output the norm reads, is computed and stored by the row kernel: one kernel reads x
    and r once (it was a map kernel storing h, then the row kernel reading it back)."""
    g = dag.build_graph("residual_norm", sizes, _residual_norm)
    (k,) = derive(g).kernels
    assert k.stream is None
    _check(g)
    _check(g, {"block_m": 2, "block_n": 3, "block_k": 2, "block_r": 2})


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_the_residual_norm_kernel_lowers():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = dag.build_graph("residual_norm", {"m": 4096, "d": 4096}, _residual_norm)
    mod = load_module(emit_module(derive(g)), "residual_norm")
    for name, f in mod.build_kernel().items():
        assert "__global__" in lower_to_cuda(f, arch="sm_90"), name


def _exp_maps(plan):
    from leantile.plan import Map
    return {fn: sum(isinstance(s, Map) and s.fn == fn for k in plan.kernels for s in k.statements())
            for fn in ("exp", "exp2")}


@pytest.mark.parametrize("name", ["log_softmax", "cross_entropy"])
@pytest.mark.parametrize("d", [7, ON_CHIP + 5], ids=["on_chip", "streamed"])
def test_a_rows_shifted_exps_run_as_exp2_by_their_step(name, d):
    """exp(s - m), m the row's own max, runs as exp2((s - m) log2 e) in the row kernel (the
    online rescale too, where the row streams): the fused candidate's exp_to_exp2 step names
    exactly those exps, the kernel flushes subnormals (plan.passes.flush_subnormals: exp2 is one
    MUFU.EX2), no precise exp is left, and every candidate computes what the graph computes."""
    from leantile import ir
    g = _graph(name, {**SMALL, "m": 3, "d": d, "c": d})
    shifted = []
    for n in g.nodes:
        if isinstance(n, ir.Unary) and n.op == "exp":
            z = g.node(n.x)
            m = g.node(z.b) if isinstance(z, ir.Binary) and z.op == "sub" else None
            if isinstance(m, ir.Reduce) and m.kind == "max" and m.x == z.a:
                shifted.append(n.id)
    assert shifted
    fused = next(c for c in candidates(g) if c.name != "unfused")
    steps = [s for s in fused.steps if s.rule == "exp_to_exp2"]
    assert [tuple(s.at) for s in steps] == [tuple(shifted)]
    plan = derive(g, fused.name)
    assert _exp_maps(plan) == {"exp": 0, "exp2": _exp_maps(plan)["exp2"]} and _exp_maps(plan)["exp2"] >= 1
    assert all(k.flush_subnormals for k in plan.kernels if any(getattr(s, "fn", None) == "exp2" for s in k.statements()))
    _check(g, None)


def test_an_unshifted_exp_keeps_the_precise_exp():
    """exp(x) and exp(x - mean x) are not exp2: their arguments reach 88, where x log2 e rounds to
    a hundred float32 units of the result (shifted_exps)."""
    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        a = g.red("sum", g.exp(x), "d")
        b = g.red("sum", g.exp(g.sub(x, g.mean_along(x, "d"))), "d")
        return g.add(a, b)
    g = dag.build_graph_with_output("unshifted", {"m": 4, "d": 9}, body)
    for c in candidates(g):
        assert not any(s.rule == "exp_to_exp2" for s in c.steps), c.name
        assert _exp_maps(derive(g, c.name))["exp2"] == 0
    _check(g, None)


def test_a_row_share_a_comparison_reads_keeps_its_division():
    """x / rowsum(x) in a row kernel is x times the row's reciprocal (one per row), but not where a
    comparison reads the quotient: at x = 49 of a row summing to 49, 49 * fl(1/49) < 1 = 49 / 49 in
    float64, so `share >= 1` was false in the fused plan where the graph says true (score_maps
    .reaches_comparison, as the flash score function's reciprocal)."""
    g = dag.DagM("row_share", {"m": 3, "d": 2})
    x = g.input("X", ["m", "d"], "f64")
    g.output("out", g.ge(g.div(x, g.red("sum", x, "d")), g.const("1")))
    graph = g.graph()
    X = torch.tensor([[49.0, 0.0], [3.0, 4.0], [0.0, 7.0]], dtype=torch.float64)
    want = ev.evaluate(graph, {"X": X})["out"]
    for c in candidates(graph):
        assert torch.equal(interp.run(derive(graph, c.name), {"X": X}, dtype=torch.float64)["out"], want), c.name
