"""rules.row_tiles.warp_rows (issue 49): a one-pass streamed row kernel over 16-bit rows, with
enough rows to fill the GPU at 16 or more a CTA, streams blocks one warp wide (256 elements) so
that each block's reductions stay within a warp (H200: cross-entropy over 8192 x 32000 f16 0.3239
-> 0.1550 ms). Checked: where the block applies and where it does not (float32 rows, a two-pass
row, a split's slices, too few rows: each measured or laid out otherwise), that such plans
compute the graph (float64 through the interpreter, rows and the streamed axis not dividing the
tiles), and that the kernel lowers with warp all-reduces only (no barrier)."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from leantile.derive import candidates, derive
from leantile.derive.rules import row_tiles
from leantile.derive.rules.row_tiles import STREAM_BLOCK, WARP_BLOCK, WARP_ROWS
from leantile.dag import DagM
from plan_checks import check_every_candidate

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
fusion = importlib.import_module("fusion")
reductions = importlib.import_module("reductions")


def _streams(plan) -> dict[str, tuple[int, int]]:
    """{streamed kernel: (rows a CTA, stream block)}"""
    return {k.name: (k.grid[-1].block if k.grid else 1, k.stream.block) for k in plan.kernels if k.stream is not None}


def _with_dtype(g, dtype):
    nodes = tuple(n.model_copy(update={"dtype": dtype}) if n.op == "input" and n.name == "X" else n for n in g.nodes)
    return g.model_copy(update={"nodes": nodes})


def test_the_warp_block_where_measured_and_not_elsewhere():
    ce = fusion.graph("cross_entropy")  # 8192 x 32000 f16: one pass, three reductions
    rows, block = _streams(derive(ce))["row_2"]
    assert block == WARP_BLOCK and rows >= WARP_ROWS
    assert _streams(derive(_with_dtype(ce, "bf16")))["row_2"][1] == WARP_BLOCK
    # float32 rows: TileLang spreads a row over every thread at any block, no warp a row
    assert _streams(derive(_with_dtype(ce, "f32")))["row_2"][1] == STREAM_BLOCK
    # a two-pass row (log-softmax: 2 rows a CTA, 0.1098 -> 0.2102 ms at 256)
    assert all(b == STREAM_BLOCK for _, b in _streams(derive(reductions.graph("log_softmax"))).values())
    # too few rows to hold 16 a CTA and fill the GPU (a split's slices count blocks at 1024)
    few = fusion.graph("cross_entropy", m=1000)
    assert all(b == STREAM_BLOCK for _, b in _streams(derive(few)).values())
    for c in candidates(reductions.graph("mse_loss")):
        assert all(b != WARP_BLOCK for _, b in _streams(derive(reductions.graph("mse_loss"), c.name)).values())


def small_warp_rows(mp: pytest.MonkeyPatch) -> None:
    """The warp block at sizes the interpreter runs quickly: rows stream past 512 elements (not
    8192) and the grid is taken as filled at any row count (4224 rows and 8193 classes are the
    least that stream at WARP_ROWS a CTA on 132 SMs: 35M elements)."""
    mp.setattr(row_tiles, "ON_CHIP", 1024)
    mp.setattr(row_tiles, "_fill", lambda rows, cx: 1 << 30)


@settings(max_examples=6, deadline=None)
@given(m=st.integers(WARP_ROWS + 1, 3 * WARP_ROWS + 7), c=st.integers(513, 3 * WARP_BLOCK + 100),
       dtype=st.sampled_from(["f16", "bf16"]), seed=st.integers(0, 2 ** 16))
def test_warp_block_plans_compute_the_graph(m, c, dtype, seed):
    """Every candidate of a cross-entropy and of a log-sum-exp with rows and classes not dividing
    the tiles (the last CTA's rows and the last block partial) equals the float64 reference."""
    with pytest.MonkeyPatch.context() as mp:
        small_warp_rows(mp)
        for g in (fusion.graph("cross_entropy", m=m, c=c), _logsumexp(m, c)):
            g = _with_dtype(g, dtype)
            assert WARP_BLOCK in {b for _, b in _streams(derive(g)).values()}
            check_every_candidate(g, seed, [None, {"threads": 128}])


@st.composite
def warp_row_graphs(draw):
    """One-pass streamed rows of 16-bit values as users write them, at sizes the interpreter runs
    (small_warp_rows): a prologue (a constant scale, a square, a sigmoid, a cast to f32 and back),
    reductions over the streamed axis (sum, max, mean, log-sum-exp, a picked element by a label
    input read against an iota, a masked sum of a per-row length), a row epilogue, one to three
    outputs (a per-row value, its cast, a scalar over the rows too), rows and axis dividing no tile."""
    m, c = draw(st.integers(WARP_ROWS + 1, 3 * WARP_ROWS + 7)), draw(st.integers(513, 3 * WARP_BLOCK + 100))
    g = DagM("warp_rows", {"m": m, "c": c})
    x = g.input("X", ["m", "c"], draw(st.sampled_from(["f16", "bf16"])))
    pro = draw(st.sampled_from(["id", "scale", "square", "sigmoid", "cast"]))
    p = {"id": x, "scale": g.mul(x, g.const("0.5")), "square": g.square(x) if pro == "square" else x,
         "sigmoid": g.sigmoid(x) if pro == "sigmoid" else x, "cast": g.cast(x, "f32") if pro == "cast" else x}[pro]
    outs = []
    for kind in draw(st.lists(st.sampled_from(["sum", "max", "mean", "lse", "pick", "masked"]), min_size=1,
                              max_size=3, unique=True)):
        if kind == "lse":
            mx = g.red("max", p, "c")
            outs.append(g.add(mx, g.log(g.red("sum", g.exp(g.sub(p, mx)), "c"))))
        elif kind == "pick":
            outs.append(g.red("sum", g.mul(p, g.eq(g.iota("c"), g.input("label", ["m"], "f32"))), "c"))
        elif kind == "masked":
            keep = g.lt(g.iota("c"), g.input("length", ["m"], "f32"))
            outs.append(g.red("sum", g.select(keep, p, g.const("0")), "c"))
        elif kind == "mean":
            outs.append(g.div(g.red("sum", p, "c"), g.size_const("c")))
        else:
            outs.append(g.red(kind, p, "c"))
    y = outs[0]
    for o in outs[1:]:
        y = g.add(y, o)
    if draw(st.booleans()):
        y = g.tanh(g.mul(y, g.const("0.01")))
    g.output("y", y)
    if draw(st.booleans()):
        g.output("y16", g.cast(y, "bf16"))
    if draw(st.booleans()):
        g.output("total", g.div(g.red("sum", outs[-1], "m"), g.size_const("m")))
    return g.graph()


@settings(max_examples=8, deadline=None)
@given(g=warp_row_graphs(), seed=st.integers(0, 2 ** 16))
def test_generated_warp_block_plans_compute_the_graph(g, seed):
    """Every candidate of generated one-pass 16-bit rows (several outputs, casts, constants, a
    label read against an iota, a length mask, size-1 and odd sizes) equals the float64 reference
    where the default plan streams at the warp block."""
    with pytest.MonkeyPatch.context() as mp:
        small_warp_rows(mp)
        assert WARP_BLOCK in {b for _, b in _streams(derive(g)).values()}
        check_every_candidate(g, seed, [None, {"threads": 128}])


def _logsumexp(m: int, c: int):
    from leantile import dag

    def body(g):
        x = g.input("X", ["m", "c"])
        mx = g.red("max", x, "c")
        return g.add(mx, g.log(g.red("sum", g.exp(g.sub(x, mx)), "c")))
    return dag.build_graph_with_output("logsumexp", {"m": m, "c": c}, body)


@pytest.mark.slow  # lowering: make test runs it, make test-fast does not
def test_the_warp_block_lowers_to_warp_reductions_without_barriers():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from lowering_sweeps import load_module

    from leantile.emit.tilelang import emit_module
    from leantile.lower import lower_to_cuda
    plan = derive(fusion.graph("cross_entropy"))
    mod = load_module(emit_module(plan), "warp_rows_lowering")
    cu = lower_to_cuda(mod.build_kernel()["row_2"], arch="sm_90", pass_configs=mod.PASS_CONFIGS.get("row_2"))
    widths = set(re.findall(r"AllReduce<[^,]+, (\d+),", cu))
    assert widths == {"32"}, widths
    assert "__syncthreads" not in cu
