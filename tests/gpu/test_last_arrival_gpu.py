"""GPU checks (marker gpu) of the split reduction's combine run by the last slice of each tile
(plan.passes.last_arrival, tile parameter last_arrival=1, emit.tail): the one launch is the graph
(float64 reference, judged as Kernel.verify judges) call after call on new inputs (the counters
are left at 0 for the next launch), the same bits on the same inputs (no order of arrival shows
in the values), under CUDA-graph replay and on a second stream; and it is within float32
rounding of the two launches (the same statements; the combine's reduction runs on the slices'
threads, so its tree may differ: the bits differed at layernorm_chw's 16 x 64 x 256 x 256).

Shapes: the suite's losses and norms, and sizes that leave slices empty or tiles partial.

    pytest -m gpu tests/gpu/test_last_arrival_gpu.py   (on the device)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import leantile
from leantile.tolerance import TOLERANCE, rel_err

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import reductions  # noqa: E402

CASES = [("mse_loss", {}), ("mse_loss", {"m": 3, "d": 70001}), ("huber_loss", {"m": 1, "d": 1 << 20}),
         ("hinge_loss", {"m": 129, "d": 4095}), ("layernorm_chw", {"n": 3, "c": 5, "h": 300, "w": 301}),
         ("groupnorm", {"n": 2, "g": 3, "cg": 5, "h": 200, "w": 131}), ("bias_grad", {"m": 50001, "n": 300}),
         ("rmsnorm_gain_grad", {"m": 30000, "d": 1000})]


def _ids(c):
    return c[0] + ("-" + "x".join(map(str, c[1].values())) if c[1] else "")


def _counters(k):
    return [t for (name, _, _), t in k._c.module._ARRIVALS.items()]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_the_tail_is_the_graph_with_the_same_bits_call_after_call(case):
    name, sizes = case
    g = reductions.graph(name, **sizes)
    one = leantile.compile(g, tuned=False, tiles={"last_arrival": 1})
    assert any(k.tail_of for k in one.plan.kernels), f"{name}: no tail"
    two = leantile.compile(g, tuned=False)
    assert not any(k.tail_of for k in two.plan.kernels)
    for seed in range(3):  # new inputs each call: a counter left past 0 would skip a combine
        inputs = one.random_inputs(seed=seed)
        a, again, b = (k.run(inputs, fill=float("nan")) for k in (one, one, two))
        for o in a:
            assert torch.equal(a[o], again[o]), f"{name} {sizes} seed {seed}: output {o} changed between calls"
            assert rel_err(a[o], b[o]) <= TOLERANCE[a[o].dtype], f"{name} {sizes} seed {seed}: output {o} is not the two launches'"
        assert one.judge(inputs, a)["ok"], f"{name} {sizes} seed {seed}: not the graph"
    assert all(int(c.abs().sum()) == 0 for c in _counters(one)), "a launch left its arrival counters set"


def test_the_tail_under_cuda_graph_replay_and_on_another_stream():
    g = reductions.graph("layernorm_chw", n=4, c=7, h=129, w=255)
    k = leantile.compile(g, tuned=False, tiles={"last_arrival": 1})
    assert any(t.tail_of for t in k.plan.kernels)
    inputs = k.random_inputs(seed=5)
    want = k.run(inputs)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        k.run(inputs)  # warm on the capture stream: its counters exist before capture
        with torch.cuda.graph(graph, stream=s):
            out = k.run(inputs)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(4):
        for t in out.values():
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for o in want:
            assert torch.equal(out[o], want[o]), f"replay: output {o} differs"
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        got = k.run(inputs)
    torch.cuda.synchronize()
    assert all(torch.equal(got[o], want[o]) for o in want)
