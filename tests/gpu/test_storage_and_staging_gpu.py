"""GPU checks (marker gpu) of two changes of 2026-11-30 that no GPU has run yet beyond the campaign:

- plan.storage: intermediates in the bytes of a buffer not yet live. The emitted allocate() puts
  each guest inside its host on the device, a run is the graph (judged as Kernel.verify judges,
  NaN-poisoned: run(fill=...) poisons a host again as its first kernel starts), the same bits as
  a run with every buffer its own (share=False), call after call and under CUDA-graph replay.
- plan.passes.stage_loads (tile parameter stage_loads=1): streamed row kernels whose loads go
  through a pipelined shared tile are the graph at the suites' shapes and at sizes that leave the
  last block partial, and give the bits of the unstaged plan up to float32 summation order.

    pytest -m gpu tests/gpu/test_storage_and_staging_gpu.py   (on the device)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import leantile
from leantile.plan.storage import storage
from leantile.tolerance import TOLERANCE, rel_err

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import fusion  # noqa: E402
import reductions  # noqa: E402

SHARED = [("layernorm_chw", {}), ("groupnorm", {"n": 2, "g": 3, "cg": 5, "h": 200, "w": 131}),
          ("batchnorm_train", {"n": 5, "c": 7, "h": 61, "w": 67})]


@pytest.mark.parametrize("case", SHARED, ids=lambda c: c[0])
def test_guests_live_in_their_hosts_and_the_run_is_the_graph(case):
    name, sizes = case
    g = reductions.graph(name, **sizes)
    k = leantile.compile(g, tuned=False, candidate="split" if name != "batchnorm_train" else None)
    places = storage(k.plan)
    assert places, f"{name}: no intermediate shares bytes"
    m = k._c.module
    for seed in range(3):
        inputs = k.random_inputs(seed=seed)
        t = m.allocate(k.bind((), inputs), device=k.device, fill=float("nan"))
        for guest, (host, offset) in places.items():
            assert t[guest].data_ptr() == t[host].data_ptr() + offset
        shared = m.run(k._c.launchers, t, fill=float("nan"))
        apart = m.run(k._c.launchers, m.allocate(k.bind((), inputs), device=k.device, fill=float("nan"), share=False))
        for o in shared:
            assert torch.equal(shared[o], apart[o]), f"{name} seed {seed}: output {o} differs with shared bytes"
        assert k.judge(inputs, k.run(inputs, fill=float("nan")))["ok"], f"{name} seed {seed}: not the graph"


def test_shared_bytes_under_cuda_graph_replay():
    g = reductions.graph("layernorm_chw", n=4, c=8, h=128, w=96)
    k = leantile.compile(g, tuned=False, candidate="split")
    assert storage(k.plan)
    inputs = k.random_inputs(seed=5)
    want = k.run(inputs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = k.run(inputs)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        for o in want:
            assert torch.equal(got[o], want[o])


STAGED = [("fus", "cross_entropy", {}), ("fus", "cross_entropy", {"m": 37, "c": 50008}), ("red", "log_softmax", {}),
          ("red", "layernorm_chw", {}), ("red", "groupnorm", {}), ("red", "bias_grad", {}),
          ("red", "rmsnorm_gain_grad", {}), ("fus", "mse_loss", {}), ("red", "huber_loss", {"m": 1, "d": 1 << 20})]


@pytest.mark.parametrize("case", STAGED, ids=lambda c: c[1] + ("-" + "x".join(map(str, c[2].values())) if c[2] else ""))
def test_staged_row_kernels_are_the_graph(case):
    src, name, sizes = case
    g = (fusion if src == "fus" else reductions).graph(name, **sizes)
    staged = leantile.compile(g, tuned=False, tiles={"stage_loads": 1})
    assert any(b.name.endswith("_staged") for k in staged.plan.kernels for b in k.buffers), f"{name}: nothing staged"
    plain = leantile.compile(g, tuned=False)
    for seed in range(2):
        inputs = staged.random_inputs(seed=seed)
        a = staged.run(inputs, fill=float("nan"))
        b = plain.run(inputs, fill=float("nan"))
        assert staged.judge(inputs, a)["ok"], f"{name} {sizes} seed {seed}: staged plan is not the graph"
        for o in a:
            assert rel_err(a[o], b[o]) <= TOLERANCE[a[o].dtype], f"{name} {sizes}: output {o} is not the unstaged plan's"
