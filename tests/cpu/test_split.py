"""The split rules (split_k, split_kv, split_row): offered where the output tiles leave SMs idle, and every
split plan computes what the unsplit graph computes, in float64, at shapes whose slices do not
divide the axis, with size-1 axes, with an epilogue, at tiles other than the ones the number of
slices was chosen at (the search runs a plan at other blocks without deriving it again: a slice
past the end is then empty), and the kernels lower to CUDA for sm_90."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from plan_checks import check
from profiles import examples
from leantile import architectures, dag
from leantile.derive import candidates, derive

F64 = torch.float64


def _gemm_epilogue(sizes):
    def body(g):
        x, w = g.input("X", ["m", "d"]), g.input("W", ["d", "n"])
        b = g.input("b", ["n"])
        return g.gelu_tanh(g.add(g.matmul(x, w, "d", "d"), b))
    return dag.build_graph_with_output("gemm_bias_gelu", sizes, body)


def test_split_k_is_offered_only_when_tiles_leave_sms_idle():
    skinny = architectures.build("matmul", m=16, d=4096, n=4096)
    assert candidates(skinny)[0].name == "split_k"
    plan = derive(skinny)
    assert [k.name for k in plan.kernels] == ["gemm_2", "split_sum_2"]
    assert all(k.stream.split is None for k in plan.kernels[1:])
    assert plan.kernels[0].stream.split in plan.axes
    big = architectures.build("matmul", m=4096, d=4096, n=4096)  # 1024 output tiles: no split
    assert "split_k" not in [c.name for c in candidates(big)]
    short = architectures.build("matmul", m=16, d=256, n=256)  # 4 k blocks: not worth a second kernel
    assert "split_k" not in [c.name for c in candidates(short)]


@pytest.mark.parametrize("m,d,n", [(1, 1100, 1), (5, 1100, 7), pytest.param(16, 2049, 130, marks=pytest.mark.slow), (3, 4096, 1)])
def test_split_k_plans_are_exact(m, d, n):
    g = architectures.build("matmul", m=m, d=d, n=n)
    plan = derive(g, "split_k")
    assert len(plan.kernels) == 2
    check(g, plan, 0, F64)
    # blocks that divide nothing: 4 x 3 where the output is small; 8 x 24 at 16 x 130 (the tiny
    # blocks cost the interpreter 40k tile steps there, for the same partial-tile cases)
    small = {"block_k": 48, "block_m": 4, "block_n": 3} if m * n <= 64 else {"block_k": 48, "block_m": 8, "block_n": 24}
    check(g, derive(g, "split_k", small), 0, F64)


def test_split_k_with_an_epilogue_runs_the_epilogue_after_the_combine():
    g = _gemm_epilogue({"m": 3, "d": 1500, "n": 5})
    plan = derive(g)
    assert plan.candidate.startswith("split_k"), plan.candidate
    assert [k.name for k in plan.kernels][-1].startswith("split_sum")
    assert any(s.op == "map" and s.fn == "gelu_tanh" for s in plan.kernels[-1].epilogue)
    check(g, plan, 0, F64)


@pytest.mark.parametrize("h,t_q,t_kv,d_h", [(1, 1, 700, 8), (3, 1, 1000, 5), (2, 3, 513, 1),
                                         pytest.param(32, 1, 2048, 4, marks=pytest.mark.slow)])
def test_split_kv_plans_are_exact(h, t_q, t_kv, d_h):
    g = architectures.build("attention", h=h, t_q=t_q, t_kv=t_kv, d_h=d_h)
    names = [c.name for c in candidates(g)]
    assert names[0].endswith("_split"), names
    for name in [n for n in names if n.endswith("_split")]:
        plan = derive(g, name)
        assert [k.name for k in plan.kernels] == ["flash_9", "split_merge_9"]
        check(g, plan, 0, F64)
    check(g, derive(g, names[0], {"block_n": 96, "block_m": 2}), 0, F64)


def test_split_kv_of_scaled_attention_weighs_slices_by_the_scaled_log_sum_exp():
    from leantile.sources import load_source
    g = load_source("examples/architectures/attention_scaled.py:build", {"h": 2, "t_q": 1, "t_kv": 900, "d_h": 6})
    plan = derive(g)
    assert plan.candidate.endswith("_split"), plan.candidate
    check(g, plan, 0, F64)


def test_a_split_plan_run_at_a_larger_block_leaves_empty_slices_and_stays_exact():
    """The search times a plan at blocks it was not derived with (the emitted kernel computes
    its slice from the block it runs with): slices past the end of the axis run no block, and
    the combine must weigh them by nothing (split_kv: l = 0, lse = -inf; split_k: zero sums)."""
    for g, name in [(architectures.build("attention", h=2, t_q=1, t_kv=1000, d_h=4), "online_exp2_split"),
                    (architectures.build("matmul", m=2, d=1500, n=3), "split_k"),
                    (_softmax_row({"rows": 3, "cols": 2000}), "online_row_exp2_split")]:
        plan = derive(g, name)
        sliced = plan.kernels[0]
        slices = plan.axes[sliced.stream.split]
        block = sliced.stream.block
        blocks = math.ceil(plan.axes[sliced.stream.axis] / block)
        bigger = block * math.ceil(blocks / (slices - 1))  # now slices - 1 slices cover the axis
        per = math.ceil(math.ceil(plan.axes[sliced.stream.axis] / bigger) / slices)
        assert per * (slices - 1) >= math.ceil(plan.axes[sliced.stream.axis] / bigger)  # the last slice is empty
        stream = sliced.stream.model_copy(update={"block": bigger})
        plan = plan.model_copy(update={"kernels": (sliced.model_copy(update={"stream": stream}), *plan.kernels[1:])})
        check(g, plan, 0, F64)


def _softmax_row(sizes, scale=None, batch=False):
    """softmax over cols of X (times a positive constant: folded into the exponent), with a
    leading batch axis when `batch`."""
    rows = ["b", "rows"] if batch else ["rows"]

    def body(g):
        x = g.input("X", [*rows, "cols"])
        return g.softmax(g.mul(x, g.const(scale)) if scale else x, "cols")
    return dag.build_graph_with_output("softmax_rows", sizes, body)


def test_split_row_is_offered_only_when_row_blocks_leave_sms_idle():
    few = _softmax_row({"rows": 16, "cols": 128256})
    names = [c.name for c in candidates(few)]
    assert names[0] == "online_row_exp2_split", names
    plan = derive(few)
    assert [k.name.split("_")[0] for k in plan.kernels] == ["softmax", "split", "softmax"]
    assert plan.kernels[0].stream.split in plan.axes and plan.axes[plan.kernels[0].stream.split] == 64
    many = _softmax_row({"rows": 65536, "cols": 4096})  # 512 row blocks fill the GPU
    assert not any(c.name.endswith("_split") for c in candidates(many))
    short = _softmax_row({"rows": 4, "cols": 600})  # 5 column blocks: one CTA streams them
    assert not any(c.name.endswith("_split") for c in candidates(short))


@pytest.mark.parametrize("sizes,scale,batch", [({"rows": 1, "cols": 1030}, None, False),
                                              ({"rows": 5, "cols": 3001}, 0.37, False),
                                              ({"b": 2, "rows": 3, "cols": 1500}, 2.5, True),
                                              ({"b": 1, "rows": 1, "cols": 4097}, None, True)])
def test_split_row_plans_are_exact(sizes, scale, batch):
    g = _softmax_row(sizes, scale, batch)
    names = [c.name for c in candidates(g)]
    assert {"online_row_split", "online_row_exp2_split"} <= set(names), names  # after on_chip where the row fits
    for name in [n for n in names if n.endswith("_split")]:
        check(g, derive(g, name), 0, F64)
        check(g, derive(g, name, {"block_n": 96, "block_m": 2}), 0, F64)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(rows=st.integers(1, 40), cols=st.integers(1025, 5000), scale=st.sampled_from([None, 0.125, 3.0]),
       seed=st.integers(0, 2**16))
def test_split_row_random_shapes(rows, cols, scale, seed):
    g = _softmax_row({"rows": rows, "cols": cols}, scale)
    check(g, derive(g, "online_row_exp2_split"), seed, F64)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(m=st.integers(1, 9), n=st.integers(1, 9), d=st.integers(1025, 3000), seed=st.integers(0, 2**16),
       epilogue=st.booleans())
def test_split_k_random_shapes(m, n, d, seed, epilogue):
    g = _gemm_epilogue({"m": m, "d": d, "n": n}) if epilogue else architectures.build("matmul", m=m, d=d, n=n)
    names = [c.name for c in candidates(g)]
    assert names[0].startswith("split_k"), names
    check(g, derive(g), seed, F64)


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
# ~6 s an example (GEMMs of up to 140 x 1100 x 20000 interpreted in float64): 12 in ci, the
# profile's own count under dev (300) and slow (1000)
@settings(max_examples=examples(12, deep=True), deadline=None)
@given(m=st.integers(65, 140), n=st.integers(385, 1100), d=st.integers(9000, 20000), seed=st.integers(0, 2**16),
       epilogue=st.booleans())
def test_split_k_of_many_rows_random_shapes(m, n, d, seed, epilogue):
    """GEMMs of more than 64 rows (128-row tiles): every split candidate derive offers, one wave
    of slices or two (split_k_x2, where the contraction is long enough: about 4 draws in 10 of
    these ranges), equals the graph."""
    g = _gemm_epilogue({"m": m, "d": d, "n": n}) if epilogue else architectures.build("matmul", m=m, d=d, n=n)
    split = [c.name for c in candidates(g) if c.name.startswith("split_k")]
    assert split[:1] == ["split_k"], split
    for name in split:
        check(g, derive(g, name), seed, F64)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(h=st.integers(1, 4), t_q=st.integers(1, 4), t_kv=st.integers(513, 2000), d_h=st.sampled_from([1, 3, 8, 16]),
       seed=st.integers(0, 2**16))
def test_split_kv_random_shapes(h, t_q, t_kv, d_h, seed):
    g = architectures.build("attention", h=h, t_q=t_q, t_kv=t_kv, d_h=d_h)
    plan = derive(g)
    assert plan.candidate.endswith("_split"), plan.candidate
    check(g, plan, seed, F64)


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_split_kernels_lower_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    graphs = [architectures.build("matmul", m=16, d=4096, n=4096), _gemm_epilogue({"m": 8, "d": 8192, "n": 512}),
              architectures.build("attention", h=32, t_q=1, t_kv=8192, d_h=128),
              _softmax_row({"rows": 16, "cols": 128256})]
    for g in graphs:
        plan = derive(g)
        assert any(k.stream and k.stream.split for k in plan.kernels), plan.candidate
        mod = load_module(emit_module(plan), f"split_{g.name}")
        for tiles in ({}, {"block_k": 128, "block_n": 64}):  # the slice follows the block the kernel runs with
            for name, f in mod.build_kernel(**{k: v for k, v in tiles.items() if k in mod.TILE_PARAMS}).items():
                cu = lower_to_cuda(f, arch="sm_90")
                assert "__global__" in cu and f"{name}_kernel" in cu


def _slices(plan) -> list[int]:
    return [plan.axes[k.stream.split] for k in plan.kernels if k.stream and k.stream.split]


def test_split_k_fills_one_wave_and_offers_two_where_the_rows_are_many():
    """As many slices as fill one wave of CTAs at the shape's tiles, 4 stages deep; where the rows
    take 128-row tiles twice as many are a candidate too (the cost model weighs the partial sums:
    two waves won at K = 2^19, one at 128 x 4096 x 4096 at 128 x 128 tiles)."""
    o = architectures.build("matmul", m=128, d=8192, n=2048)  # 16 output tiles of 128 x 128
    assert [c.name for c in candidates(o)][:2] == ["split_k", "split_k_x2"]
    one, two = derive(o, "split_k"), derive(o, "split_k_x2")
    assert _slices(one) == [8] and _slices(two) == [16]
    assert one.tiles["stages"] == 4
    # where 64-row tiles fill a wave (shape_tiles.wave_tiles: 128 CTAs of 64 x 64) nothing is
    # split: H100 0.0128 ms unsplit against 0.0188 in 4 slices (split-probe-m128-h100-2026-11-26.json)
    assert [c.name for c in candidates(architectures.build("matmul", m=128, d=4096, n=4096))] == ["direct"]
    odd = architectures.build("matmul", m=130, d=20001, n=300)  # 6 tiles: 16 or 32 uneven slices
    check(odd, derive(odd, "split_k_x2"), 0, F64)
    # a few-row GEMM is judged at its swapped 16 x 128 tiles (one wave measured best there too):
    # 4096 columns are 32 tiles, 4 slices (H100 0.0082 ms against 0.0152 unsplit and cuBLAS's
    # 0.0094: benchmarks/swap_ab/results/split-probe-skinny-swap-h100-2026-11-26-*.json); 14336 are 112, no split
    skinny = architectures.build("matmul", m=16, d=4096, n=4096)
    assert "split_k_x2" not in [c.name for c in candidates(skinny)]
    assert _slices(derive(skinny, "split_k")) == [4]
    assert [c.name for c in candidates(architectures.build("matmul", m=16, d=4096, n=14336))] == ["direct"]


@pytest.mark.parametrize("d_h", [31, 40, 48, 64, 128])
def test_split_kv_combines_only_what_tilelang_can_lay_out(d_h):
    """The split-KV combine reduces a (d_h, split) float32 fragment over the split: TileLang 0.1.15
    finds no layout for it where its values outnumber the threads and are no multiple of them (the
    GPU campaign: "no available layout found" at 48 x 4 and 31 x 16 on 128 threads). Every split
    plan derive still gives has a combine TileLang can lay out; the others are refused at their
    tiles, never a crash, and the default plan is still chosen."""
    from leantile.cost import choose
    from leantile.ir import GraphError
    from leantile.plan import FIXED
    g = dag.build_graph_with_output(
        "decode", {"h": 4, "t_q": 1, "t_kv": 16384, "d_h": d_h},
        lambda g: g.matmul(g.softmax(g.matmul(g.input("Q", ["h", "t_q", "d_h"]), g.input("K", ["h", "t_kv", "d_h"]),
                                              "d_h", "d_h"), "t_kv"),
                           g.input("V", ["h", "t_kv", "d_h"]), "t_kv", "t_kv"))
    derived = 0
    for c in candidates(g):
        if "split" not in c.name:
            continue
        for tiles in (None, {"threads": 128}, {"threads": 256}):
            try:
                plan = derive(g, c.name, tiles)
            except GraphError:
                continue
            merge = next((k for k in plan.kernels if k.name.startswith("split_merge")), None)
            if merge is None:  # a split of another kind (split_row)
                continue
            derived += 1
            threads = merge.threads if any(t.param == FIXED for t in merge.grid) else plan.tiles.get("threads", merge.threads)
            n = d_h * next(plan.axes[a] for a in plan.axes if a.startswith("split_"))
            assert n <= threads or n % threads == 0, (c.name, tiles, n, threads)
    assert choose(g)[0] is not None
    if d_h in (64, 128):
        assert derived  # the common head dims keep their split plans
