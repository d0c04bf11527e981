"""Issue 18: the ping-pong GEMM schedule (plan.passes.pingpong, emit.pingpong). Which kernels
take it, that it changes no statement (interp runs what the emitter prints), the orderings
its correctness rests on in the emitted script, and the tiles it refuses."""
from __future__ import annotations

import re

import pytest

from leantile.architectures import layernorm_linear_gelu, matmul, rmsnorm, swiglu
from leantile.derive import candidates, derive
from leantile.emit import emit_module, load_module
from leantile.runtime import choose_plan
from strategies import inputs_in

ASK = {"block_m": 128, "block_n": 128, "stages": 4, "threads": 256, "pingpong": 1}


def _gpt2(dtype="f16", m=2048, d=768, n=3072):
    return inputs_in(layernorm_linear_gelu.build(m=m, d=d, n=n), dtype)


def test_default_takes_it_at_short_contractions_where_it_was_measured_faster():
    """shape_tiles.pingpong_fits, H200 (benchmarks/pingpong/results/pingpong-2026-11-27.md): an epilogue reading
    the GEMM at two tiles per SM or more; a norm's row scale where the plain tiles are 128 x 128."""
    rms = lambda **s: inputs_in(rmsnorm.build(**s), "f16")  # noqa: E731
    for g in (_gpt2(), _gpt2(m=8192),  # 384, 1536 tiles: 0.0265 -> 0.0214, 0.1060 -> 0.0866 ms
              rms(m=1500, d=1024, n=1528), rms(m=2048, d=768, n=3072)):  # 0.0210 -> 0.0182, 0.0239 -> 0.0198
        plan, how = choose_plan(g, tuned=False)
        assert how == "default" and plan.tiles.get("pingpong") == 1, g.axes
        assert [k.pingpong for k in plan.kernels] == [False, True]  # the row kernel stays plain
    for g in (_gpt2(d=4096, n=16384, m=4096),  # a long contraction
              _gpt2(m=1024, d=1024, n=4096),  # 256 tiles: level with 128 x 256 (0.0191 vs 0.0195)
              rms(m=4096, d=1024, n=4096),  # 128 x 256 fill the GPU: 0.0646 vs 0.0659
              _gpt2(m=1000, d=776, n=1000),  # 64 tiles: under a wave (0.0114 vs 0.0126)
              inputs_in(matmul.build(m=2048, d=768, n=3072), "f16"),  # a bare GEMM: no epilogue
              _gpt2("f32")):  # float32 operands
        plan, _ = choose_plan(g, tuned=False)
        assert not any(k.pingpong for k in plan.kernels), (g.axes, plan.tiles)


@pytest.mark.parametrize("g, why", [
    (inputs_in(swiglu.build(m=2048, n=3072, d=768), "f16"), "two accumulators"),
    (inputs_in(matmul.build(m=2048, d=77, n=3072), "f16"), "rows of 154 bytes: no TMA"),
])
def test_asked_but_refused_where_the_kernel_has_no_cut(g, why):
    plans = [derive(g, c.name, ASK) for c in candidates(g) if c.name in ("fused", "direct")]
    assert plans, why
    for plan in plans:
        assert not any(k.pingpong for k in plan.kernels), why


def test_schedule_changes_no_statement():
    g = _gpt2("bf16", m=300, n=1000, d=776)
    plain = derive(g, "prenorm", {**ASK, "pingpong": 0})
    pp = derive(g, "prenorm", ASK)
    assert any(k.pingpong for k in pp.kernels)
    for a, b in zip(plain.kernels, pp.kernels):
        assert a.model_copy(update={"pingpong": b.pingpong}) == b


def _branches(src: str, kernel: str) -> dict[str, list[str]]:
    body = src[src.index(f"def {kernel}("):]
    lines = body.splitlines()
    out, cur = {}, None
    for ln in lines:
        s = ln.strip()
        if s.startswith(("elif tx >= threads // 2", "else:  # consumer warpgroup 0")):
            cur = "wg1" if s.startswith("elif") else "wg0"
            out[cur] = []
        elif s.startswith("return "):
            break
        elif cur:
            out[cur].append(s)
    return out


def test_emitted_consumers_take_their_turn_before_the_ring_and_count_through_a_local():
    plan = derive(_gpt2(), "prenorm", ASK)
    src = emit_module(plan)
    name = next(k.name for k in plan.kernels if k.pingpong)
    branches = _branches(src, name)
    assert set(branches) == {"wg0", "wg1"}
    for wg, lines in branches.items():
        turn = next(i for i, s in enumerate(lines) if s.startswith("T.sync_threads(8 +"))
        first_wait = next(i for i, s in enumerate(lines) if s.startswith("T.mbarrier_wait_parity(full["))
        # the consumers share the ring: waiting on a full barrier before the turn could pass
        # on the phase two blocks behind (parity tells two phases apart only)
        assert turn < first_wait, (wg, lines[turn], lines[first_wait])
        loop = next(s for s in lines if s.startswith("for pp_i"))
        assert "pp_mine[0]" in loop, loop  # TileLang's simplifier dropped a bounded loop's guard
    # each consumer has its own accumulator
    accs = [re.search(r"\], (\w+)\)", next(s for s in branches[wg] if s.startswith("T.wgmma_gemm"))).group(1)
            for wg in ("wg0", "wg1")]
    assert accs[0] != accs[1], accs


def test_factory_refuses_tiles_the_schedule_cannot_run_and_configs_offer_none():
    plan = derive(_gpt2(), "prenorm", ASK)
    mod = load_module(emit_module(plan), "pp_refuse")
    name = next(k.name for k in plan.kernels if k.pingpong)
    with pytest.raises(ValueError, match="ping-pong"):
        getattr(mod, name)(block_m=128, block_n=256, block_k=64, stages=4, threads=256)
    configs = mod.get_configs()
    assert configs and all(c["block_m"] == 128 and c["threads"] == 256 and c["block_n"] <= 128 for c in configs)


def _ctas(func) -> int:
    return int(re.search(r'thread_binding\((\d+), thread="blockIdx.x"\)', func.script()).group(1))


def test_persistent_grid_is_the_gpus_sm_count():
    """One CTA per SM of the GPU the kernel runs on: with a count fixed at 132 (H100 / H200 SXM) a
    114-SM GPU (H100 PCIe) would run 18 CTAs in a second wave, the kernel nearly twice as long;
    a GPU with more SMs would leave some idle. build_kernel asks the GPU (sm_count), 132 without one."""
    plan = derive(_gpt2(), "prenorm", ASK)  # 16 x 24 = 384 output tiles
    mod = load_module(emit_module(plan), "pp_sms")
    name = next(k.name for k in plan.kernels if k.pingpong)
    assert mod.SMS == 132 and mod.sm_count(default=77) in (77, _cuda_sms())
    assert _ctas(mod.build_kernel(sms=114)[name]) == 114
    assert _ctas(mod.build_kernel(sms=1000)[name]) == 384  # never more CTAs than tiles
    assert _ctas(mod.build_kernel()[name]) == (_cuda_sms() or 132)


def _cuda_sms() -> int | None:
    import torch
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else None




def test_search_carries_it_on_the_default_point():
    """The search's domains leave the schedules out (docs/search.md: the replayed H200
    comparisons fix the space); the shipped default's point carries it, so a search never
    stores an entry slower than the ping-pong default without measuring it."""
    from leantile.search.driver import Workload, default_point
    wl = Workload.builtin("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072})
    assert wl.dtype == "f16"
    p = default_point(wl)
    assert p.candidate == "prenorm" and p.tile_dict.get("pingpong") == 1, p


def test_a_batched_gemm_keeps_the_plain_loop():
    """Batch axes in the grid: the tile walk covers no batch index (no GPU check has run one)."""
    from leantile import ir
    g = ir.Graph(name="bmm_gelu", axes={"b": 4, "m": 2048, "k": 768, "n": 3072}, nodes=(
        ir.Input(id=0, op="input", axes=("b", "m", "k"), name="A", dtype="f16"),
        ir.Input(id=1, op="input", axes=("b", "k", "n"), name="B", dtype="f16"),
        ir.Matmul(id=2, op="matmul", axes=("b", "m", "n"), a=0, b=1, axis_a="k", axis_b="k"),
        ir.Unary(id=3, op="gelu_tanh", axes=("b", "m", "n"), x=2)), outputs={"out": 3})
    plans = [derive(g, c.name, ASK) for c in candidates(g)]
    assert any(any(s.op == "gemm" for k in p.kernels for s in k.statements()) for p in plans)
    assert not any(k.pingpong for p in plans for k in p.kernels)
