"""Rows whose width is a multiple of 1024 are held on chip at their exact extent, not padded to a
power of two (rules/regions.padded: LayerNorm over 8192 x 5120 padded to 8192 ran 0.82x
torch.compile on an H200). Every candidate still equals the graph in float64 through the
interpreter, at row counts that do not fill a block, and the kernel lowers for sm_90."""
from __future__ import annotations

import pytest
import torch

from leantile import dag, interp, reference
from leantile.derive import candidates, derive
from leantile.derive.rules.regions import padded
from leantile.plan import Reduce

from plan_checks import rel_err


def _layernorm_affine(g):
    x = g.input("X", ["m", "d"])
    mu = g.div(g.red("sum", x, "d"), g.size_const("d"))
    c = g.sub(x, mu)
    var = g.div(g.red("sum", g.mul(c, c), "d"), g.size_const("d"))
    y = g.mul(c, g.rsqrt(g.add(var, g.const("1e-05"))))
    return g.add(g.mul(y, g.input("gamma", ["d"])), g.input("beta", ["d"]))


def _log_softmax(g):
    x = g.input("X", ["m", "d"])
    s = g.sub(x, g.red("max", x, "d"))
    return g.sub(s, g.log(g.red("sum", g.exp(s), "d")))


def _rms_gain(g):
    x = g.input("X", ["m", "d"])
    ms = g.div(g.red("sum", g.mul(x, x), "d"), g.size_const("d"))
    return g.mul(g.mul(x, g.rsqrt(g.add(ms, g.const("1e-06")))), g.input("w", ["d"]))


def test_padded_keeps_multiples_of_1024_and_rounds_the_rest_up():
    for n in (2048, 3072, 5120, 7168, 12288):
        assert padded(n) == n
    for n, p in ((1, 1), (3, 4), (1000, 1024), (1024, 1024), (1025, 2048), (5119, 8192), (5121, 8192), (3000, 4096)):
        assert padded(n) == p


def _row_blocks(plan, axis):
    """The block of `axis` of every kernel that reduces over it."""
    out = []
    for k in plan.kernels:
        if any(isinstance(s, Reduce) and s.axis == axis for s in k.statements()):
            out += [t.block for t in k.grid if t.axis == axis]
    return out


@pytest.mark.parametrize("body", [_layernorm_affine, _log_softmax, _rms_gain])
@pytest.mark.parametrize("m,d", [(3, 5120), (1, 3072), (5, 6144), (2, 5121)])
def test_exact_rows_equal_the_graph(body, m, d):
    g = dag.build_graph_with_output(body.__name__.strip("_"), {"m": m, "d": d}, body)
    inputs = reference.random_inputs(g, seed=m + d)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        plan = derive(g, c.name)
        out = interp.run(plan, inputs, dtype=torch.float64)
        for name in ref:
            assert rel_err(out[name], ref[name]) < 1e-9, (c.name, name)
    default = derive(g)
    if d % 1024 == 0:
        assert _row_blocks(default, "d") == [d], default.candidate  # held whole, unpadded


def test_an_exact_row_kernel_lowers():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    g = dag.build_graph_with_output("layernorm_affine", {"m": 6, "d": 5120}, _layernorm_affine)
    plan = derive(g)
    assert _row_blocks(plan, "d") == [5120]
    mod = load_module(emit_module(plan), "exact_rows")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90")
        assert "[by * 2:(by + 1) * 2, bx * 5120:(bx + 1) * 5120]" in emit_module(plan)
        if nvcc_path() is not None:
            assert compile_cuda(cu, flags=mod.NVCC_FLAGS.get(name))
