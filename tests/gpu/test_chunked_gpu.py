"""GPU checks (marker gpu) of chunked execution (leantile.chunked): the LM head with its
cross-entropy in chunks on the GPU -- its forward, training forward and backward each judged as
Kernel.verify judges against the float32 reference (chunks that do not divide the axis, labels
past the first chunk), lt.op training through the chunks (train_bench.run_case's gradient check),
and a step captured in a CUDA graph equal to the same step run eagerly; and generated graphs
(random, structured, backwards) at the GPU campaign's sizes (resize, benchmarks/gpu_fuzz_parts/sizes.py)
in chunks of every axis they allow, each judged the same way.

    pytest -m gpu tests/gpu/test_chunked_gpu.py   (on the device)
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leantile
from leantile import autodiff, chunked
from leantile import train_bench as TB
from leantile.chunked import ChunkedKernel
from leantile.chunking import classify

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
from strategies import backward_graphs, random_graphs, structured_graphs  # noqa: E402

SIZES = {"m": 1000, "k": 256, "d": 5003}  # 4 chunks of 256 tokens (the last 232), 5 of 1024 words (the last 907)


def _case():
    (case,) = [c for c in TB.cases(lambda n, s: SIZES if n == "lm_head_ce" else s) if c.name == "lm_head_ce"]
    return case


def _labels(k, inputs):
    if "label" in inputs:
        inputs["label"] = torch.randint(0, SIZES["d"], inputs["label"].shape, device="cuda").float()
    return inputs


@pytest.mark.parametrize("which,axis,size", [("forward", "m", 256), ("training", "m", 256), ("backward", "d", 1024)])
def test_the_lm_head_in_chunks_is_the_graph(which, axis, size):
    g = _case().graph
    g = {"forward": g, "training": autodiff.training_forward(g)[0], "backward": autodiff.vjp(g).graph}[which]
    k = leantile.compile(g, chunk={axis: size})
    assert isinstance(k, ChunkedKernel) and len(k.chunks.starts()) == -(-g.axes[axis] // size)
    for seed in range(2):
        v = k.verify(_labels(k, k.random_inputs(seed)))
        assert v["ok"] or set(o for o in k.output_names if v["rel_err"][o] > v["tolerance"][o]) <= set(
            v["ill_conditioned"]), v


def test_lt_op_trains_through_chunks_and_a_captured_step_is_the_eager_one(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 1 << 20)  # these sizes' logits (10 MB) chunk on their own
    monkeypatch.setattr(chunked, "CHUNK_TARGET", 1 << 21)
    case = _case()
    assert isinstance(leantile.compile(case.graph), ChunkedKernel)
    row = TB.run_case(case, device="cuda", timer=lambda step: 0.0)
    assert row["ok"], row["grad_rel_err"]
    import leantile.torch as lt
    k = leantile.compile(case.graph)
    op = lt.op(k)
    t = TB.leaves(case, "cuda", 5)
    ct = [torch.ones((), device="cuda", dtype=k.output_specs["out"][1])]
    step = TB.step_of(lambda: op(*[t[n] for n in k.input_names]), t, ct)
    step()
    eager = {n: v.grad.clone() for n, v in t.items() if v.grad is not None}
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    for n, want in eager.items():
        assert torch.equal(t[n].grad, want), n


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(g=st.one_of(random_graphs(dtypes=("f32", "bf16", "f16")), structured_graphs(), backward_graphs()),
       seed=st.integers(0, 2**16))
def test_generated_graphs_in_chunks_at_gpu_sizes(g, seed):
    from gpu_fuzz_parts.sizes import Profile, resize
    rng = random.Random(seed)
    big = resize(g, rng, Profile("cuda", 1 << 22, 2.0 ** 34))
    if big is None:
        return
    for axis in [a for a in sorted(big.axes) if classify(big, a)[1] is None and big.axes[a] > 1]:
        size = rng.choice(sorted({1, max(1, big.axes[axis] // 3), big.axes[axis] - 1}))
        if -(-big.axes[axis] // size) > 64:  # a chunk of one row of 2^17: compile once, launch 2^17 times
            size = -(-big.axes[axis] // 64)
        k = leantile.compile(big, chunk={axis: size})
        v = k.verify(k.random_inputs(seed))
        wrong = [o for o in k.output_names if not v["rel_err"][o] <= v["tolerance"][o] and o not in v["ill_conditioned"]]
        assert not wrong, (big.name, dict(big.axes), axis, size, {o: v["rel_err"][o] for o in wrong})


def test_the_fused_loss_step_adds_dw_in_place_on_the_gpu(monkeypatch):
    """The LM head's training step (leantile.train_step) in chunks of tokens with dW added in place
    (chunking's in_place, plan.storage.in_place): judged against the float32 reference, every
    chunk's plan writing dW over the sum so far, and a chunk's kernel handing back that very
    tensor (the emitted allocate's alias on the GPU)."""
    from leantile.train_step import step_graph
    monkeypatch.setattr(chunked, "CHUNK_TARGET", 1 << 21)  # dW's float32 sum (5 MB) then counts as large
    step, _ = step_graph(_case().graph)
    k = leantile.compile(step, chunk={"m": 256})
    assert k.chunks.into == {"d_W": "d_W_sum"} and all(kk.plan.in_place for kk in k.kernels.values())
    for seed in range(2):
        v = k.verify(_labels(k, k.random_inputs(seed)))
        assert v["ok"], v
    one = k.kernels[256]
    x = _labels(k, k.random_inputs(3))
    feed = {n: (t[:256].contiguous() if n in ("H", "label") else t) for n, t in x.items()}
    so_far = torch.randn(one.output_specs["d_W"][0], device="cuda").to(one.output_specs["d_W"][1])
    before = so_far.clone()
    out = one.run({**feed, "d_W_sum": so_far})
    assert out["d_W"].data_ptr() == so_far.data_ptr() and not torch.equal(so_far, before)
