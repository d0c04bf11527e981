"""FlashAttention-3's schedule (issue 18): when plan.passes.overlap engages, what the shape rule
picks by default, and that the emitted kernels lower for sm_90 with their wgmma in flight
(ptxas serialises wgmma whose accumulators are touched while they run: warning C7514).
Values are checked on the GPU (tests/gpu/test_overlap_gpu.py) and by the interpreter, which runs the
rotated loop (plan.stream_steps; tests/cpu/test_stream_steps.py)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings

from leantile import architectures
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.derive.shape_tiles import FLASH_OVERLAP_TILES
from leantile.plan.overlap_parts import overlap_parts
from leantile.runtime import choose_plan
from leantile.suite import with_dtype

from strategies import inputs_in, overlap_attention_graphs
from profiles import examples  # noqa: E402

ASK = {"block_m": 128, "block_n": 128, "threads": 256, "overlap": 1, "stages": 1}


def overlapped(plan) -> list[bool]:
    return [k.overlap for k in plan.kernels]


def attention(**sizes):
    return architectures.build("attention", **{"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64, **sizes})


def test_the_tile_parameter_asks_and_the_shape_decides():
    g = attention()
    c = "online_exp2"
    assert overlapped(derive(g, c, ASK)) == [True]
    assert overlapped(derive(g, c, {**ASK, "overlap": 0})) == [False]
    assert overlapped(derive(g, c, {k: v for k, v in ASK.items() if k != "overlap"})) == [False]
    # two consumer warpgroups of 64 rows: 128 query rows on 256 threads, nothing else
    assert overlapped(derive(g, c, {**ASK, "block_m": 64, "threads": 128})) == [False]
    assert overlapped(derive(g, c, {**ASK, "threads": 128})) == [False]


@pytest.mark.parametrize("arch,sizes", [
    ("causal_attention", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64}),
    ("sliding_window_attention", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64}),
])
def test_key_bounded_streams_take_the_schedule_over_their_range(arch, sizes):
    """A mask's key bounds (skipped blocks, boundary-only mask statements) keep the FA3 cut:
    the rotated loop runs over the same range of key blocks."""
    g = architectures.build(arch, **sizes)
    seen = 0
    for c in candidates(g):
        for k in derive(g, c.name, ASK).kernels:
            if k.stream and k.stream.skip and not k.stream.split:
                seen += 1
                assert k.overlap, c.name
    assert seen, f"no candidate of {arch} streams under key bounds"


def test_a_bias_tile_loaded_per_key_block_keeps_the_plain_loop():
    """A third load in the stream body (the bias tile) is no FA3 cut: the producer would have
    to load it too."""
    d = DagM("biased", {"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64})
    q, k, v = (d.input(n, ["h", t, "d_h"]) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = d.add(d.matmul(q, k, "d_h", "d_h"), d.input("B", ["h", "t_q", "t_kv"]))
    d.output("out", d.matmul(d.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    g = d.graph()
    flash = 0
    for c in candidates(g):
        for kern in derive(g, c.name, ASK).kernels:
            flash += bool(kern.stream and len([x for x in kern.body if x.op == "gemm"]) == 2)
            assert not kern.overlap, c.name
    assert flash, "no fused attention candidate"


def test_f32_attention_keeps_the_plain_loop():
    g = inputs_in(attention(), "f32")
    for c in candidates(g):
        assert not any(overlapped(derive(g, c.name, ASK))), c.name


def test_the_cut_moves_only_what_the_second_gemm_reads():
    k = derive(attention(), "online_exp2", ASK).kernels[0]
    parts = overlap_parts(k)
    assert parts.gemm_o.acc in {m.dst for m in parts.moved} and parts.gemm_o.a in {m.dst for m in parts.moved}
    assert len(parts.moved) == 2
    assert len(parts.softmax) + len(parts.moved) + 4 == len(k.body)


@pytest.mark.parametrize("arch,sizes,dtype,want", [
    ("attention", {"h": 12, "t_q": 2048, "t_kv": 2048, "d_h": 64}, "f16", True),   # GPT-2 t2048
    ("attention", {"h": 32, "t_q": 1000, "t_kv": 1000, "d_h": 128}, "bf16", True),
    ("attention", {"h": 32, "t_q": 2048, "t_kv": 2048, "d_h": 128}, "f16", True),  # with -ftz=true: past 256-key tiles
    ("attention", {"h": 12, "t_q": 512, "t_kv": 512, "d_h": 64}, "f16", False),     # small grid
    ("attention", {"h": 32, "t_q": 1000, "t_kv": 1000, "d_h": 72}, "f16", False),   # no MMA head
    ("attention", {"h": 32, "t_q": 512, "t_kv": 512, "d_h": 128}, "f16", False),    # 4 key blocks
    ("causal_attention", {"h": 32, "t_q": 1000, "t_kv": 1000, "d_h": 128}, "f16", False),  # <= 1024 keys
    ("causal_attention", {"h": 32, "t_q": 2048, "t_kv": 2048, "d_h": 128}, "f16", True),
    ("sliding_window_attention", {"h": 16, "t_q": 8192, "t_kv": 8192, "d_h": 128}, "f16", True),
    ("causal_attention", {"h": 12, "t_q": 1024, "t_kv": 1024, "d_h": 64}, "bf16", False),
])
def test_the_default_takes_the_schedule_where_it_was_measured_faster(arch, sizes, dtype, want):
    g = architectures.build(arch, **sizes)
    g = with_dtype(g, dtype) if dtype != "f16" else g
    plan, _ = choose_plan(g, None, None, None, False)
    assert any(overlapped(plan)) == want, (plan.candidate, plan.tiles)
    if want:
        assert FLASH_OVERLAP_TILES.items() <= plan.tiles.items()


tilelang = pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
from leantile.emit import emit_module, load_module  # noqa: E402
from leantile.lower import LoweringError, compile_cuda, lower_to_cuda, nvcc_path  # noqa: E402


def test_an_overlapped_factory_refuses_other_row_tiles():
    mod = load_module(emit_module(derive(attention(), "online_exp2", ASK)), "overlap_refuses")
    with pytest.raises(ValueError, match="block_m=128"):
        mod.build_kernel(block_m=64)


@pytest.mark.parametrize("arch,sizes,stages", [("attention", {"d_h": 64, "t_kv": 1000}, 2),
                                               ("attention", {"d_h": 128, "t_q": 128, "t_kv": 300}, 1),
                                               ("causal_attention", {"d_h": 128}, 1)])
def test_overlapped_kernels_keep_their_wgmma_in_flight(arch, sizes, stages):
    g = architectures.build(arch, **{"h": 2, "t_q": 300, "t_kv": 1000, "d_h": 64, **sizes})
    plan = derive(g, "online_exp2", {**ASK, "stages": stages})
    assert overlapped(plan) == [True]
    (f,) = load_module(emit_module(plan), f"overlap_lowers_{arch}_{stages}").build_kernel().values()
    cu = lower_to_cuda(f, arch="sm_90")
    for marker in ("tl::wgmma_ss", "tl::wgmma_rs", "tl::tma_load", "wait_wgmma<1>", "warpgroup_reg_dealloc<24>"):
        assert marker in cu, marker
    if nvcc_path() is None:
        pytest.skip("nvcc not found: ptxas not checked")
    report: list[str] = []
    compile_cuda(cu, report=report)
    text = "\n".join(report)
    assert "C7514" not in text, text  # wgmma serialised: the overlap would be lost
    assert "0 bytes spill stores" in text, text


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
@settings(max_examples=examples(5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overlap_attention_graphs())
def test_generated_attention_with_the_schedule_asked_lowers(gc):
    """...and plan.verify.shared_bytes counts what TileLang allocates for it (the ring of
    stages + 1 blocks, the output's staging tile): an undercount lets the verifier pass tiles
    that fail at launch."""
    from leantile.plan.verify import shared_bytes
    g, _ = gc
    for c in candidates(g):
        if c.name == "unfused" or c.name.endswith("split"):
            continue
        plan = derive(g, c.name, ASK)
        event("overlapped" if any(overlapped(plan)) else "plain loop")
        if not any(overlapped(plan)):
            continue
        for name, f in load_module(emit_module(plan), f"gen_overlap_{c.name}").build_kernel().items():
            info: dict = {}
            try:
                assert "__global__" in lower_to_cuda(f, arch="sm_90", info=info)
            except LoweringError as e:
                raise AssertionError(f"{g.name} {c.name} {name}: {e}") from e
            k = next(k for k in plan.kernels if k.name == name)
            if k.overlap:  # within the row-vector mirrors the plan does not model (< 1 KiB)
                assert 0 <= shared_bytes(plan, k) - info["shared_bytes"] + 1024 <= 2048, \
                    (g.name, c.name, name, shared_bytes(plan, k), info["shared_bytes"])


@settings(max_examples=examples(25), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overlap_attention_graphs())
def test_the_stream_index_is_no_tile_loop_variable(gc):
    """The rotated loop's block index must not be a name the emitter gives its tile loops (a
    `j` there once made the masks read `(kv_first + j) * block_n + j`): in every overlapped
    kernel of generated attention, the serial loops' variables and the T.Parallel loops'
    variables are disjoint."""
    import re
    g, _ = gc
    for c in candidates(g):
        plan = derive(g, c.name, ASK)
        if not any(overlapped(plan)):
            continue
        src = emit_module(plan)
        serial = set(re.findall(r"for (\w+) in T\.serial\(", src))
        tiles = {v.strip() for vs in re.findall(r"for ([\w, ]+) in T\.Parallel\(", src) for v in vs.split(",")}
        assert serial and tiles and not serial & tiles, (c.name, serial & tiles)
