"""TileLang 0.1.15 finds no register layout for an elementwise loop (a map, an iota) writing a
1-D tile of more elements than threads and no multiple of them: at one-wave GEMM tiles of
64 x 192 (shape_tiles), the unfused candidate's vector kernels (an iota, exp of a bias) held 192
elements on 128 threads and did not compile on the GPU ("no available layout found" on an
H200: benchmarks/epilogue_masks/results/gpu-check-h200-2026-11-29.txt). plan.verify refuses such
blocks (reduce_layout_problem) and derive falls back to power-of-two blocks for the shape; every
kernel then lowers."""
from __future__ import annotations

import pytest

from leantile import dag
from leantile.derive import candidates, derive
from leantile.plan import Iota, Map
from leantile.plan.verify import REDUCE_LAYOUT, reduce_layout_problem


def _gemm_with_vector_ops(sizes):
    def body(g):
        x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
        keep = g.ge(g.iota("n"), g.iota("m"))
        return g.select(keep, g.add(g.matmul(x, w, "k", "k"), g.exp(g.input("b", ["n"]))), g.const("0"))
    return dag.build_graph_with_output("gemm_vec", sizes, body)


def _one_d_elementwise(plan):
    """(kernel, elements, threads) of every 1-D tile an elementwise loop writes."""
    out = []
    for k in plan.kernels:
        written = {s.dst for s in k.statements() if isinstance(s, (Map, Iota))}
        threads = k.threads if any(t.param == "fixed" for t in k.grid) else plan.tiles.get("threads", k.threads)
        for b in k.buffers:
            if b.scope == "fragment" and b.name in written and len(b.axes) == 1:
                t = next((t for t in k.grid if t.axis == b.axes[0]), None)
                n = plan.tiles.get(t.param, t.block) if t is not None and t.param in plan.tiles else (t.block if t else 1)
                out.append((k.name, n, threads))
    return out


@pytest.mark.parametrize("sizes", [{"m": 1000, "k": 512, "n": 1030}, {"m": 700, "k": 64, "n": 3000},
                                   {"m": 129, "k": 1000, "n": 1000}])
def test_no_plan_holds_a_1d_tile_past_the_threads_off_their_multiple(sizes):
    g = _gemm_with_vector_ops(sizes)
    for c in candidates(g):
        plan = derive(g, c.name)
        bad = [(k, n, t) for k, n, t in _one_d_elementwise(plan) if n > t and n % t]
        assert not bad, (c.name, bad)
        assert not any(reduce_layout_problem(plan, k) for k in plan.kernels)


def test_the_verifier_names_the_tile_at_blocks_that_would_not_lower():
    g = _gemm_with_vector_ops({"m": 1000, "k": 512, "n": 1030})
    with pytest.raises(Exception) as e:
        derive(g, "unfused", {"block_m": 64, "block_n": 192, "threads": 128})
    assert REDUCE_LAYOUT in str(e.value) and "192-element" in str(e.value)


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_every_kernel_of_every_candidate_lowers_where_the_one_wave_tiles_are_192_wide():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = _gemm_with_vector_ops({"m": 1000, "k": 512, "n": 1030})
    for c in candidates(g):
        mod = load_module(emit_module(derive(g, c.name)), "gemm_vec")
        for name, f in mod.build_kernel().items():
            assert "__global__" in lower_to_cuda(f, arch="sm_90"), (c.name, name)
