"""Issue 46: a sizeConst (an axis length) is an exact count, applied in the accumulator's dtype
(float32) wherever the node computes below it, as every kernel computes `x / n` (the emitter writes
`x / 131072.0` in float32 and rounds only what it stores). The reference made it a scalar of the
node's dtype: 131072 in f16 raised ("value cannot be converted to type c10::Half without overflow",
the GPU campaign's reductions at r = 2^17) and 4223 in bf16 was 4224."""
from __future__ import annotations

import torch

from leantile import interp, ir, reference
from leantile.derive import candidates, derive
from leantile.emit.tilelang import emit_module
from leantile.tolerance import rel_err, tolerance


def mean_of_means(r: int, c: int, dtype: str) -> ir.Graph:
    """The campaign's failing reduction: the mean over c of X^2 per row, then the mean over r."""
    nodes = [
        {"id": 0, "op": "input", "name": "X", "axes": ["r", "c"], "dtype": dtype},
        {"id": 1, "op": "square", "axes": ["r", "c"], "x": 0},
        {"id": 2, "op": "reduce", "axes": ["r"], "axis": "c", "kind": "sum", "x": 1},
        {"id": 3, "op": "sizeConst", "axes": [], "axis": "c"},
        {"id": 4, "op": "div", "axes": ["r"], "a": 2, "b": 3},
        {"id": 5, "op": "reduce", "axes": [], "axis": "r", "kind": "sum", "x": 4},
        {"id": 6, "op": "sizeConst", "axes": [], "axis": "r"},
        {"id": 7, "op": "div", "axes": [], "a": 5, "b": 6},
    ]
    return ir.parse({"schema": "leantile/v1", "name": "reduce_to_scalar", "axes": {"r": r, "c": c},
                     "nodes": nodes, "outputs": {"out": 7, "rows": 4}, "derivation": []})


def test_a_count_beyond_f16_does_not_crash_the_reference():
    g = mean_of_means(131072, 31, "f16")
    x = reference.random_inputs(g, seed=0)
    same = reference.evaluate(g, x, check=False)  # raised before
    ref = reference.evaluate(g, x, compute_dtype=torch.float64)
    assert same["rows"].dtype == torch.float16 and bool(torch.isfinite(same["rows"]).all())
    assert rel_err(same["rows"], ref["rows"]) <= tolerance(torch.float16)
    # the sum over 2^17 rows of ~1 is itself past f16 in the graph's own dtypes: inf there, which
    # the judge reads as no rounding to forgive (tolerance.rel_err), never as the expected value
    assert bool(torch.isfinite(ref["out"]).all())


def test_the_count_is_exact_where_its_dtype_rounds_it():
    g = mean_of_means(4000, 4223, "bf16")  # 4223 in bf16 is 4224 (rows enough that some round apart)
    x = reference.random_inputs(g, seed=1)
    same = reference.evaluate(g, x, check=False)
    rows = (x["X"].float() ** 2).bfloat16().float().sum(-1).bfloat16()  # the graph's own roundings
    assert torch.equal(same["rows"], (rows.float() / 4223.0).bfloat16())
    assert not torch.equal(same["rows"], (rows.float() / 4224.0).bfloat16())


def test_interpreter_and_emitter_apply_the_count_in_float32():
    g = mean_of_means(70001, 3, "f16")  # the outer count past f16's 65504
    x = reference.random_inputs(g, seed=2)
    ref = reference.evaluate(g, x, compute_dtype=torch.float64)
    same = reference.evaluate(g, x, check=False)
    for c in candidates(g):
        plan = derive(g, c.name)
        out = interp.run(plan, x)  # declared dtypes, float32 accumulators: as the kernels
        for name in g.outputs:
            assert rel_err(out[name], ref[name], same[name]) <= tolerance(torch.float16), (c.name, name)
        src = emit_module(plan)
        assert "/ 70001.0" in src and "/ 3.0" in src, c.name  # float32 literals in accumulator math
