"""Attention with heads past 128 (Gemma's 256, MLA's q.k over 192) gets one flash kernel at
FLASH_LARGE_HEAD_TILES (issue 51): the default tiles' two 128-key stages of K and V do not fit
beside Q at such heads, and the flash option used to be judged there only, refused, and the
attention ran on_chip in 4 kernels. Each such plan must stay exact: the interpreter runs every
candidate at the shape's tiles on sizes that do not divide them, with the structures users write
(masks, biases, grouped heads, computed operands) on 16-bit operands."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

from leantile import architectures, interp, reference
from leantile.cost import choose
from leantile.derive import candidates, derive
from leantile.derive.shape_tiles import FLASH_LARGE_HEAD, FLASH_LARGE_HEAD_TILES
from leantile.plan.verify import verify
from leantile.tolerance import rel_err
from profiles import examples
from strategies import ALL_CLASSES, _user_attention, inputs_in

ARCHS = ["attention", "causal_attention", "sliding_window_attention"]


@pytest.mark.parametrize("arch", ARCHS + ["gqa_attention"])
@pytest.mark.parametrize("d_h, dtype", [(256, "bf16"), (192, "f16"), (FLASH_LARGE_HEAD + 16, "f16")])
def test_heads_past_128_get_one_flash_kernel_that_fits(arch, d_h, dtype):
    sizes = {"h_kv": 8, "g": 2} if arch == "gqa_attention" else {"h": 16}  # a wave of CTAs: no split over the keys
    g = inputs_in(architectures.build(arch, **sizes, t_q=2048, t_kv=2048, d_h=d_h), dtype)
    plan = choose(g)[0]
    assert len(plan.kernels) == 1 and plan.kernels[0].stream is not None, (plan.candidate, [k.name for k in plan.kernels])
    assert {k: plan.tiles[k] for k in FLASH_LARGE_HEAD_TILES} == FLASH_LARGE_HEAD_TILES, plan.tiles
    assert not verify(plan, g)  # shared memory within the target's, every tile a legal block


def test_heads_too_large_for_any_flash_tile_keep_the_fallback():
    """d_h 512: Q alone is 128 KiB at 128 rows; no flash option is offered, the plan still runs."""
    g = inputs_in(architectures.build("causal_attention", h=2, t_q=1000, t_kv=1000, d_h=512), "f16")
    assert not any(c.name.startswith("online") and "row" not in c.name for c in candidates(g))
    assert not verify(choose(g)[0], g)


@pytest.mark.parametrize("t_q, d", [(16, 65536), (2048, 4096)])
def test_every_candidate_of_large_head_attention_behind_a_projection_derives(t_q, d):
    """Q = X W (a projection) before attention with heads of 256: the plan takes the GEMM's tiles,
    so a flash option that fits only at its own shape's tiles must not be offered (GPU campaign
    s111: offered, then refused by derive at 320 KiB of shared memory)."""
    from leantile.dag import DagM
    g = DagM("projected_attention", {"h": 32, "t_q": t_q, "t_kv": 32, "d": d, "d_h": 256})
    q = g.matmul(g.input("X", ["h", "t_q", "d"], "f16"), g.input("Wq", ["d", "d_h"], "f16"), "d", "d")
    k, v = (g.input(n, ["h", "t_kv", "d_h"], "f16") for n in ("K", "V"))
    g.output("out", g.matmul(g.softmax(g.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv"))
    graph = g.graph()
    for c in candidates(graph):
        assert not verify(derive(graph, c.name), graph), c.name


def _large_head_attention():
    return _user_attention(ALL_CLASSES, shaped=True).filter(lambda gc: gc[0].axes["d_h"] > FLASH_LARGE_HEAD)


@settings(max_examples=examples(12, deep=True), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(_large_head_attention(), st.sampled_from(["f16", "bf16"]), st.integers(0, 2**16))
def test_every_candidate_of_large_head_attention_is_the_graph(gc, dtype, seed):
    g = inputs_in(gc[0], dtype, only="f32")
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    cands = candidates(g)
    event("a flash candidate" if any(c.name.startswith("online") and "row" not in c.name for c in cands) else "no flash")
    for c in cands:
        out = interp.run(derive(g, c.name), inputs, dtype=torch.float64)  # at the shape's own tiles
        for o in g.outputs:
            r, x = ref[o], out[o].double()
            fin = torch.isfinite(r)  # a wholly masked row is NaN in both (softmax of nothing)
            assert torch.equal(fin, torch.isfinite(x)), (c.name, o)
            assert rel_err(x[fin], r[fin]) < 1e-9, (c.name, o)


@pytest.mark.slow  # make test runs it; make test-fast does not (a TileLang lowering)
def test_a_large_head_flash_kernel_lowers_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = inputs_in(architectures.build("causal_attention", h=2, t_q=300, t_kv=333, d_h=256), "bf16")
    plan = choose(g)[0]
    mod = load_module(emit_module(plan), "large_head_causal")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
        assert f"{name}_kernel" in cu


@pytest.mark.parametrize("arch", ["attention", "causal_attention"])
@pytest.mark.parametrize("d_h, t_q", [(96, 1), (128, 16), (96, 100)])
def test_float32_attention_the_shape_tiles_let_flash_run_is_the_graph(arch, d_h, t_q):
    """Judged at its shape's tiles (one stage, 64 query rows), float32 attention with heads of 96..128
    over few queries gets a flash kernel too (TF32 tensor cores on the GPU; it ran on_chip before):
    every candidate equals the float64 reference, keys past a whole tile."""
    g = inputs_in(architectures.build(arch, h=2, t_q=t_q, t_kv=333, d_h=d_h), "f32")
    cands = candidates(g)
    assert any(c.name.startswith("online") and "row" not in c.name for c in cands), [c.name for c in cands]
    inputs = reference.random_inputs(g, seed=d_h + t_q)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in cands:
        plan = derive(g, c.name)
        assert not verify(plan, g), c.name
        out = interp.run(plan, inputs, dtype=torch.float64)
        for o in g.outputs:
            assert rel_err(out[o].double(), ref[o]) < 1e-9, (c.name, o)


@pytest.mark.parametrize("d_h", [144, 256])
def test_every_candidate_of_large_head_decode_derives(d_h):
    """Decode (one query) with heads past 128 over a long cache: a split over the keys is judged at
    the default tiles, where its plan falls back when the shape's do not verify; judged at the
    shape's, it was offered and derive refused its combine (d_h 144: 1152 values on 256 threads;
    GPU campaign s111)."""
    from leantile.dag import DagM
    g = DagM("decode_large_head", {"h": 9, "t_q": 1, "t_kv": 32749, "d_h": d_h})
    q, k, v = (g.input(n, ["h", t, "d_h"], "bf16") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    g.output("out", g.matmul(g.softmax(g.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv"))
    graph = g.graph()
    for c in candidates(graph):
        assert not verify(derive(graph, c.name), graph), c.name
