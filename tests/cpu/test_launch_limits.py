"""CUDA's launch limits (issue 46): gridDim.x <= 2^31 - 1, gridDim.y and .z <= 65535. The GPU
campaign's launches that failed (CUDA_ERROR_INVALID_VALUE at grid (1, 65537, 1), (1, 8, 65536),
(1, 1, 524288)) now fold their grid into blockIdx.x (plan.grid_folded); every emitted kernel of a
generated graph resized to huge batch axes launches within the limits, or derive refuses it; and
the interpreter walks a folded grid by the emitter's own div/mod, matching the reference."""
from __future__ import annotations

import json
import math
import re
import sys
import types
from pathlib import Path
from unittest.mock import patch

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import ir
from leantile import plan as plan_mod
from leantile.derive import candidates, derive
from leantile.emit import emit_module
from leantile.plan import GRID_X_MAX, GRID_YZ_MAX, grid_folded, grid_walk, launch_dims
from leantile.plan.verify import GRID_PREFIX, grid_problem
from plan_checks import check
from strategies import resized, structured_graphs, user_graphs
from profiles import examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu-fuzz-h100x4-2026-11-27-first.json"
HUGE = (65535, 65536, 65537, 131073, 2 ** 20 + 3)


def launch_failures() -> list[dict]:
    return [r for r in json.loads(RESULTS.read_text())["failures"] if "CUDALaunch" in (r.get("error") or "")]


def _split_args(s: str) -> list[str]:
    """The top-level comma-separated arguments of a call's argument text."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([" and 1 or (-1 if ch in ")]" else 0)
        cur += ch
    return out + [cur.strip()] if cur.strip() else out


def _namespace(src: str) -> dict:
    """size_<axis> and the default tile parameters of an emitted module, and T.ceildiv on ints."""
    ns: dict = {"T": types.SimpleNamespace(ceildiv=lambda a, b: -(-a // b))}
    axes = eval(re.search(r"^AXES = (.*)$", src, re.M).group(1))
    tiles = eval(re.search(r"^TILE_PARAMS = (\{.*?\})", src, re.M).group(1))
    for line in re.findall(r"^(size_\w+) = AXES\[(.*?)\]$", src, re.M):
        ns[line[0]] = axes[eval(line[1])]
    return {**ns, **tiles}


def emitted_grids(src: str) -> list[tuple[int, ...]]:
    """Each non-persistent kernel's T.Kernel(...) extents in the emitted source, evaluated at the
    module's sizes and default tiles."""
    ns = _namespace(src)
    grids = []
    for m in re.finditer(r"with T\.Kernel\((.*), threads=.*\) as ", src):
        args = _split_args(m.group(1))
        if any("pp_cta" in a or "ctas" in a for a in args):  # persistent: one CTA per SM
            continue
        grids.append(tuple(eval(a, dict(ns)) for a in args))
    return grids


def assert_within_limits(plan) -> None:
    for k in plan.kernels:
        x, y, z = launch_dims(plan, k)
        assert x <= GRID_X_MAX and y <= GRID_YZ_MAX and z <= GRID_YZ_MAX, (k.name, (x, y, z))
        assert grid_problem(plan, k) is None
        assert not (k.swizzle and grid_folded(plan, k)), k.name
    for dims in emitted_grids(emit_module(plan)):
        assert len(dims) <= 3 and dims[0] <= GRID_X_MAX and all(d <= GRID_YZ_MAX for d in dims[1:]), dims


# -- the campaign's failing launches ------------------------------------------------------------
@pytest.mark.parametrize("i", range(5))
def test_campaign_launch_failures_fold_into_x(i):
    recs = launch_failures()
    assert len(recs) == 5  # user_softmax online_row(_exp2) at m = 131073; masked_attention online(_exp2), unfused at g = 65536
    r = recs[i]
    grid = tuple(int(v) for v in re.search(r"grid=\((\d+),(\d+),(\d+)\)", r["error"]).groups())
    assert max(grid[1:]) > GRID_YZ_MAX  # what CUDA refused: y or z past 65535 (shared memory was small)
    plan = derive(ir.parse(r["graph"]), r["candidate"], r["tiles"])
    assert any(grid_folded(plan, k) for k in plan.kernels)
    assert_within_limits(plan)
    # the refused launch is now one index on x: the same number of CTAs
    assert any(launch_dims(plan, k) == (math.prod(grid), 1, 1) for k in plan.kernels)


def test_folded_kernels_lower_with_a_grid_on_x():
    """TileLang lowers the folded kernels of the failing unfused and flash plans; the launch's
    gridDim (its thread_extent) is (CTAs, 1, 1)."""
    pytest.importorskip("tilelang")
    from leantile.lower import lower_to_cuda
    from leantile.runtime import emitted_module

    recs = launch_failures()
    for r in (recs[2], recs[4]):  # flash_17 of online_exp2; the unfused plan's first GEMM and a reduction
        plan = derive(ir.parse(r["graph"]), r["candidate"], r["tiles"])
        mod = emitted_module(emit_module(plan))
        funcs = mod.build_kernel()
        for k in plan.kernels[:1] + tuple(k for k in plan.kernels if k.name.startswith("reduce"))[:1]:
            info: dict = {}
            cuda = lower_to_cuda(funcs[k.name], arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(k.name), info=info)
            assert info["grid"] == launch_dims(plan, k) == (524288, 1, 1), (k.name, info["grid"])
            assert "blockIdx.y" not in cuda and "blockIdx.z" not in cuda


# -- generated graphs at huge batch axes ---------------------------------------------------------
def _derived(g):
    """Every candidate's plan of g at its default tiles; derive's refusals (ir.GraphError: a tile
    that does not fit, a grid past x's limit) are refusals, not launches."""
    for c in candidates(g):
        try:
            yield derive(g, c.name)
        except ir.GraphError:
            continue


@settings(max_examples=examples(25))
@given(st.one_of(user_graphs().map(lambda gc: gc[0]), structured_graphs()), st.data())
def test_generated_graphs_at_huge_batch_axes_launch_within_limits(g, data):
    big = data.draw(st.sets(st.sampled_from(sorted(g.axes)), min_size=1, max_size=2), label="huge axes")
    g = resized(g, lambda a: data.draw(st.sampled_from(HUGE), label=a) if a in big else min(g.axes[a], 8))
    try:
        g = ir.parse(g.model_dump(mode="json", by_alias=True) | {"derivation": []})
    except ir.GraphError:
        return
    for plan in _derived(g):
        assert_within_limits(plan)


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_campaign_graphs_launch_within_limits():
    """The campaign's own graphs (benchmarks/gpu_fuzz.py: every generator family resized by
    gpu_fuzz_parts/sizes.py to axes up to 2^17 + 1 under its GPU caps), the first 100 of two of its streams:
    every candidate's plan launches within the limits, some of them only folded."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_fuzz_parts.families import families, graph_stream
    from gpu_fuzz_parts.sizes import Profile

    prof = Profile("cuda", 2 ** 26, 2.0 ** 37)  # the campaign's caps (gpu_fuzz.py on a GPU)
    folded = longest = 0
    for seed in (0, 5):  # folds: attention at a batch of 65536, a GEMM's 131073 split batches
        for n, (_, g, _, _) in enumerate(graph_stream(seed, families(), ["f16"], prof)):
            if n == 100:
                break
            longest = max(longest, *g.axes.values())
            for plan in _derived(g):
                assert_within_limits(plan)
                folded += sum(grid_folded(plan, k) for k in plan.kernels)
    assert longest > GRID_YZ_MAX and folded > 0


def test_tiles_past_x_are_refused_cleanly():
    """More CTAs than gridDim.x holds needs more than 2^31 - 1 elements, which validate refuses
    (ir.MAX_TENSOR_ELEMENTS: the kernels index with 32-bit integers) with the limit named; the
    verifier's grid check stays behind it (a plan built at other tiles)."""
    from leantile.dag import DagM
    from leantile.plan.verify import grid_problem

    d = DagM("huge_map", {"a": 2 ** 20, "b": 2 ** 20, "c": 4096})
    d.output("out", d.exp(d.input("X", ["a", "b", "c"], "f32")))
    with pytest.raises(ir.GraphError, match=r"input 'X': 4503599627370496 elements, more than the 2147483647"):
        derive(d.graph(), "fused")
    small = DagM("map", {"a": 2 ** 8, "b": 2 ** 8, "c": 4096})
    small.output("out", small.exp(small.input("X", ["a", "b", "c"], "f32")))
    plan = derive(small.graph(), "fused")
    huge = plan.model_copy(update={"axes": {**plan.axes, "a": 2 ** 20, "b": 2 ** 20}})
    assert grid_problem(huge, huge.kernels[0]).startswith(f"{GRID_PREFIX}: kernel")


def test_factory_refuses_tiles_that_unfold_past_y():
    """A module's grid is laid out at its plan's tiles; build_kernel at smaller blocks that would
    put more than 65535 tiles on y refuses them (a plan derived at them folds instead)."""
    pytest.importorskip("tilelang")
    from leantile.runtime import emitted_module

    d = _gemm(m=2 ** 20 + 3, n=256, k=64)
    plan = derive(d, None, {"block_m": 128, "block_n": 128})
    k = plan.kernels[0]
    assert not grid_folded(plan, k) and launch_dims(plan, k)[1] == -(-(2 ** 20 + 3) // 128)
    src = emit_module(plan)
    assert "CUDA's launch limit" in src
    mod = emitted_module(src)
    mod.build_kernel()  # the plan's own tiles: fine
    with pytest.raises(ValueError, match="over CUDA's 65535"):
        mod.build_kernel(block_m=16)
    small = derive(d, None, {"block_m": 16, "block_n": 128})  # derived at them: folded, no swizzle
    assert grid_folded(small, small.kernels[0]) and not small.kernels[0].swizzle
    assert_within_limits(small)


def _gemm(m: int, n: int, k: int) -> ir.Graph:
    from leantile.dag import DagM

    d = DagM("gemm", {"m": m, "n": n, "k": k})
    d.output("out", d.matmul(d.input("A", ["m", "k"]), d.input("B", ["n", "k"]), "k", "k"))
    return d.graph()


# -- the folded walk: the emitter's div/mod, the interpreter's tiles -------------------------------
def _emitted_walks(src: str) -> dict[str, list[tuple[str, str]]]:
    """kernel name -> [(index name, its expression of bx)] of each folded kernel's launch."""
    out: dict[str, list[tuple[str, str]]] = {}
    name = None
    for line in src.splitlines():
        m = re.match(r"    def (\w+)\(", line)
        if m:
            name = m.group(1)
        m = re.match(r"\s+(b_\w+) = (.*\bbx\b.*)$", line)
        if m and name:
            out.setdefault(name, []).append((m.group(1), m.group(2)))
    return out


def _check_folded_walk(plan) -> int:
    """Each folded kernel's emitted div/mod, evaluated for every bx, gives grid_walk's tiles in
    order; returns how many kernels folded."""
    src = emit_module(plan)
    ns = _namespace(src)
    walks = _emitted_walks(src)
    n = 0
    for k in plan.kernels:
        if not grid_folded(plan, k):
            continue
        n += 1
        total = launch_dims(plan, k)[0]
        names = {f"b_{t.axis}": t.axis for t in k.grid}
        exprs = [(v, e) for v, e in walks[k.name] if v in names]
        assert len(exprs) == len(k.grid), (k.name, exprs)
        order = [t.axis for t in k.grid]
        want = list(grid_walk(plan, k))
        assert len(want) == total
        for bx, idx in enumerate(want):
            env = {**ns, "bx": bx}
            got = {names[v]: eval(e, env) for v, e in exprs}
            assert tuple(got[a] for a in order) == idx, (k.name, bx)
    return n


def test_campaign_structures_folded_match_the_reference_at_small_sizes():
    """The failing records' graphs at small sizes, their grids forced to fold (a y/z limit of 1):
    the interpreter runs the folded walk and matches the reference; the emitted div/mod is that
    walk."""
    for r in launch_failures():
        g = ir.parse(r["graph"])
        g = g.model_copy(update={"axes": {a: min(v, 5) for a, v in g.axes.items()}})
        tiles = {**r["tiles"], "block_m": 2, "block_n": 2, "block_k": 2}
        with patch.object(plan_mod, "GRID_YZ_MAX", 1):
            plan = derive(g, r["candidate"], tiles)
            assert _check_folded_walk(plan) >= 1
            check(g, plan, seed=7, dtype=torch.float64)


tiles = st.fixed_dictionaries({"block_m": st.sampled_from([1, 2, 3, 8]), "block_n": st.sampled_from([1, 2, 5, 8]),
                               "block_k": st.sampled_from([1, 2, 4]), "block_r": st.sampled_from([1, 2, 4])})


@settings(max_examples=examples(10))
@given(st.one_of(user_graphs().map(lambda gc: gc[0]), structured_graphs()), tiles, st.integers(0, 2 ** 31 - 1))
def test_generated_graphs_folded_match_the_reference(g, t, seed):
    """Every candidate of a generated graph with every multi-axis grid folded (a y/z limit of 0):
    the interpreter's folded walk matches the reference, and is the emitter's div/mod."""
    with patch.object(plan_mod, "GRID_YZ_MAX", 0):
        for c in candidates(g):
            try:
                plan = derive(g, c.name, t)
            except ir.GraphError:
                continue
            _check_folded_walk(plan)
            check(g, plan, seed, torch.float64)


def test_grid_walk_folded_is_the_launch_order():
    """Folding changes the index arithmetic, not the walk: the same tiles in the same order."""
    from leantile.dag import DagM

    d = DagM("w", {"a": 3, "b": 5, "c": 7})
    d.output("out", d.exp(d.input("X", ["a", "b", "c"], "f32")))
    plan = derive(d.graph(), "fused", {"block_m": 2, "block_n": 3})
    k = plan.kernels[0]
    plain = list(grid_walk(plan, k))
    with patch.object(plan_mod, "GRID_YZ_MAX", 0):
        assert grid_folded(plan, k)
        assert list(grid_walk(plan, k)) == plain
        assert launch_dims(plan, k) == (len(plain), 1, 1)
