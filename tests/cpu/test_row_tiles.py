"""Rows per CTA and threads of on-chip row kernels (rules.row_tiles.row_block / row_threads): a
row layout (the reduced axes innermost) holds about ROW_TILE elements a CTA, at least two rows, on
128 threads (H200: 2 rows on 128 threads beat 4-16 rows on 256 by 10-45% on norms and their
backwards, benchmarks/row_tiles/results/). Checked on the default plans of the row forms a user
writes and of their backwards, at widths that do not divide the tiles and row counts down to 1;
the backwards' kernels at those tiles equal the float64 reference through the interpreter and
lower for sm_90 (the widest: 2 rows of 8192 on 128 threads, three live row tiles)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leantile import autodiff, dag, interp, reference
from leantile.derive import derive
from leantile.derive.rules.base import padded
from leantile.derive.rules.row_tiles import ON_CHIP, ROW_TILE
from leantile.plan import Reduce, launches

from plan_checks import rel_err

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import fusion  # noqa: E402

FORMS = {"layernorm_affine": fusion.layernorm_affine, "rmsnorm_gain": fusion.rmsnorm_gain,
         "log_softmax": fusion.log_softmax, "softmax": fusion.softmax}


def _row_kernels(plan, axis: str = "d"):
    """(rows per CTA, row width on chip, threads) of every kernel holding whole rows of `axis` and
    reducing nothing else."""
    out = []
    for k in launches(plan):
        width = [t.block for t in k.grid if t.axis == axis]
        reduces = [s for s in k.statements() if isinstance(s, Reduce)]
        # whole rows of `axis` only: a kernel that also reduces over m (all of [m, d] on chip, m tiny) is no row layout
        if k.stream is None and width and reduces and all(s.axis == axis for s in reduces):
            rows = [t.block for t in k.grid if t.axis == "m"]
            out.append((rows[0] if rows else 1, width[0], k.threads))
    return out


def _graphs(name: str, m: int, d: int):
    g = dag.build_graph_with_output(name, {"m": m, "d": d}, FORMS[name])
    return g, autodiff.vjp(g).graph


@settings(deadline=None)
@given(name=st.sampled_from(sorted(FORMS)), m=st.integers(1, 70000),
       d=st.sampled_from([1, 3, 100, 640, 1000, 1024, 1500, 2048, 3000, 4096, 5120, 8191, 8192]))
def test_on_chip_rows_hold_about_a_row_tile_on_128_threads(name, m, d):
    for g in _graphs(name, m, d):
        plan = derive(g)
        kernels = _row_kernels(plan)
        if 2 * padded(d) <= ON_CHIP and m * padded(d) > ON_CHIP:  # (smaller: all of [m, d] on chip, m reduced too)
            assert kernels, (g.name, [k.name for k in launches(plan)])  # the rows sit on chip
        for rows, width, threads in kernels:
            assert width == max(2, padded(d)) and threads == 128, (g.name, rows, width, threads)
            assert rows >= 2, (g.name, rows)  # a block of 1 would make the reductions scalar
            assert rows * width <= max(ROW_TILE, 2 * width), (g.name, rows, width)  # no more than a tile
            if m >= 2 * 264 * max(1, ROW_TILE // width):  # rows to spare: the tile is filled
                assert rows * width >= min(ROW_TILE, 64 * width), (g.name, rows, width)


@pytest.mark.parametrize("name", ["layernorm_affine", "rmsnorm_gain"])
@pytest.mark.parametrize("m,d", [(5, 1000), (3, 4096), (1, 5120)])
def test_backward_row_kernels_at_these_tiles_equal_float64(name, m, d):
    _, bw = _graphs(name, m, d)
    inputs = reference.random_inputs(bw, seed=m * d)
    ref = reference.evaluate(bw, inputs, compute_dtype=torch.float64)
    out = interp.run(derive(bw), inputs, dtype=torch.float64)
    for o in ref:
        assert rel_err(out[o], ref[o]) < 1e-9, o


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("d", [1000, 4096, 8192])
def test_backward_row_kernels_lower_for_sm_90(d):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    for name in ("layernorm_affine", "rmsnorm_gain"):
        _, bw = _graphs(name, 33, d)
        plan = derive(bw)
        assert all(t == 128 for _, _, t in _row_kernels(plan))
        mod = load_module(emit_module(plan), f"row_tiles_{name}_{d}")
        for f in mod.build_kernel().values():
            lower_to_cuda(f, arch="sm_90")  # raises where TileLang finds no layout
