"""GPU checks (marker gpu) of FlashAttention-3's schedule (Kernel.overlap, emit.overlap): with
the schedule engaged, every kernel matches the float32 reference on fresh random inputs, outputs
NaN-poisoned (leantile.compile's verify): partial query and key tiles, a single key block, a
single query row, head dimensions 16..128, f16 and bf16, a producer 1 or 2 blocks ahead, the
scaled form, causal and sliding-window masks (key bounds), the shipped defaults that pick it,
and generated user attention (computed operands, masks, biases, grouped heads; per-head
lengths that mask every key of a tile) wherever the pass finds the FA3 cut."""
import pytest
from hypothesis import HealthCheck, event, given, settings

import leantile
from leantile import suite
from leantile.derive import candidates

from strategies import overlap_attention_graphs

pytestmark = pytest.mark.gpu

OVERLAP = {"block_m": 128, "block_n": 128, "threads": 256, "overlap": 1}


def graph(arch, sizes, dtype="f16"):
    return suite.build(suite.Case("overlap_check", arch, sizes, dtype, "issue"))[0]


def overlapped(g, stages=1):
    """Every unsplit fused candidate of g with the schedule asked for: {candidate: Kernel}."""
    out = {}
    for c in candidates(g):
        if c.name == "unfused" or c.name.endswith("split"):
            continue
        k = leantile.compile(g, candidate=c.name, tiles={**OVERLAP, "stages": stages})
        out[c.name] = k
    return out


CASES = [  # (architecture, sizes, dtype, stages)
    ("attention", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64}, "f16", 1),
    ("attention", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64}, "bf16", 2),
    ("attention", {"h": 3, "t_q": 128, "t_kv": 100, "d_h": 128}, "f16", 1),  # one key block
    ("attention", {"h": 1, "t_q": 1, "t_kv": 257, "d_h": 32}, "f16", 1),  # one query row
    ("attention", {"h": 2, "t_q": 200, "t_kv": 384, "d_h": 16}, "bf16", 1),
    ("attention", {"h": 2, "t_q": 129, "t_kv": 777, "d_h": 96}, "f16", 1),
    ("attention", {"h": 2, "t_q": 256, "t_kv": 2048 + 64, "d_h": 128}, "f16", 1),
    ("attention_scaled", {"h": 2, "t_q": 300, "t_kv": 513, "d_h": 64}, "bf16", 1),
    # key bounds: the rotated loop over the blocks some row keeps, boundary blocks masked
    ("causal_attention", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64}, "f16", 1),
    ("causal_attention", {"h": 2, "t_q": 1000, "t_kv": 1000, "d_h": 128}, "bf16", 1),
    ("sliding_window_attention", {"h": 2, "t_q": 5000, "t_kv": 5000, "d_h": 64}, "f16", 2),
]


@pytest.mark.parametrize("arch,sizes,dtype,stages", CASES, ids=[f"{a}-{s}-{d}-s{n}" for a, s, d, n in CASES])
def test_overlapped_attention_is_exact(arch, sizes, dtype, stages):
    kernels = overlapped(graph(arch, sizes, dtype), stages)
    assert kernels
    for name, k in kernels.items():
        assert any(kk.overlap for kk in k.plan.kernels), (name, "the schedule did not engage")
        for seed in (5, 6):
            v = k.verify(seed=seed)
            assert v["ok"], (name, sizes, dtype, v)


DEFAULTS = [  # shapes at which the shipped default takes the schedule (derive/shape_tiles.py)
    ("attention", {"h": 20, "t_q": 1000, "t_kv": 1000, "d_h": 64}, "f16"),
    ("attention", {"h": 24, "t_q": 700, "t_kv": 1500, "d_h": 128}, "bf16"),
]


@pytest.mark.parametrize("arch,sizes,dtype", DEFAULTS, ids=[f"{a}-{s}-{d}" for a, s, d in DEFAULTS])
def test_shipped_default_takes_the_schedule_and_is_exact(arch, sizes, dtype):
    k = leantile.compile(graph(arch, sizes, dtype), tuned=False)
    assert any(kk.overlap for kk in k.plan.kernels), k.plan.tiles
    for seed in (1, 2):
        v = k.verify(seed=seed)
        assert v["ok"], (k.plan.candidate, k.plan.tiles, v)


@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overlap_attention_graphs())
def test_generated_attention_with_the_schedule_asked_is_exact(gc):
    """User attention in f16 at sizes the schedule serves: where the pass finds the FA3 cut the
    kernel is overlapped, elsewhere the plain loop; either way exact."""
    g, classes = gc
    for name, k in overlapped(g).items():
        event("overlapped" if any(kk.overlap for kk in k.plan.kernels) else "plain loop")
        v = k.verify(seed=7)
        assert v["ok"], (name, sorted(classes), v)
