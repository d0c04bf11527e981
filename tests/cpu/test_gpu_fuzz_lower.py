"""benchmarks/gpu_fuzz_lower.py, the GPU campaign's compile half on the CPU: it lowers every plan
of a graph for sm_90 and reports a plan TileLang cannot lower as a crash. The graph here is
campaign s32's crash (two sums of one bf16 row of 5120 on 256 threads: "no available layout
found" before rules/regions.padded held such rows at 6144), which the tool reported at e1edb1c."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

S32_CRASH = {"axes": {"n": 5120, "r": 127}, "derivation": [], "name": "long_reduction", "schema": "leantile/v1",
             "nodes": [{"axes": ["r", "n"], "dtype": "bf16", "id": 0, "name": "X", "op": "input"},
                       {"axes": ["r"], "axis": "n", "id": 1, "kind": "sum", "op": "reduce", "x": 0},
                       {"axes": [], "axis": "n", "id": 2, "op": "sizeConst"},
                       {"a": 1, "axes": ["r"], "b": 2, "id": 3, "op": "div"},
                       {"axes": [], "id": 4, "op": "const", "value": "0.001"},
                       {"a": 3, "axes": ["r"], "b": 4, "id": 5, "op": "mul"},
                       {"axes": ["r"], "id": 6, "op": "tanh", "x": 5},
                       {"axes": ["r"], "axis": "n", "id": 7, "kind": "sum", "op": "reduce", "x": 0}],
             "outputs": {"s": 7, "y": 6}}


def test_the_s32_crash_graph_lowers_in_every_plan():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    import gpu_fuzz_lower
    r = gpu_fuzz_lower.lower_graph(S32_CRASH, nvcc=False, max_candidates=0)
    assert r["plans"] >= 2 and r["crashes"] == [], r["crashes"]
    assert len(r["candidates"]) == r["plans"] and len(set(r["candidates"])) == r["plans"], r["candidates"]
