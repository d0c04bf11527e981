"""GPU checks (marker gpu) of the ping-pong GEMM schedule (Kernel.pingpong, emit.pingpong): with
the schedule engaged, every output matches the float32 reference on fresh random inputs,
NaN-poisoned first (leantile.compile's verify): tiles partial on every axis, a single tile,
fewer tiles than SMs and many per SM (both consumers, odd and even counts per CTA), a
contraction of one block, f16 and bf16, the shipped defaults that pick it, and generated
GEMM and norm -> GEMM graphs (several outputs, casts, reused weights, computed operands)
wherever the pass finds the cut."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import leantile
from leantile import runtime, suite
from leantile.derive import candidates, derive

from gpu_checks import verify_all
import strategies
from strategies import ALL_CLASSES, inputs_in, resized

pytestmark = pytest.mark.gpu

ASK = {"block_m": 128, "block_n": 128, "stages": 4, "threads": 256, "pingpong": 1}
CASES = [  # (architecture, sizes, dtype)
    ("layernorm_linear_gelu", {"m": 1000, "d": 776, "n": 1000}, "f16"),
    ("layernorm_linear_gelu", {"m": 130, "d": 200, "n": 136}, "bf16"),
    ("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072}, "bf16"),  # the shipped default's shape
    ("matmul", {"m": 2000, "d": 1032, "n": 3080}, "f16"),  # 16 x 25 tiles: 3 or 4 per CTA
    ("matmul", {"m": 129, "d": 8, "n": 4096}, "bf16"),  # one contraction block
    ("matmul", {"m": 100, "d": 64, "n": 72}, "f16"),  # one tile
    ("rmsnorm", {"m": 1500, "d": 1024, "n": 1528}, "f16"),
]


@pytest.mark.parametrize("arch,sizes,dtype", CASES, ids=[f"{a}-{s}-{d}" for a, s, d in CASES])
def test_pingpong_gemms_are_exact(arch, sizes, dtype):
    g = suite.build(suite.Case("pingpong_check", arch, sizes, dtype, "issue"))[0]
    engaged = 0
    for c in candidates(g):
        if c.name == "unfused":
            continue
        k = leantile.compile(g, candidate=c.name, tiles=ASK)
        if not any(kk.pingpong for kk in k.plan.kernels):
            continue
        engaged += 1
        for seed in (5, 6):
            v = k.verify(seed=seed)
            assert v["ok"], (c.name, seed, v["rel_err"], v["tolerance"])
    assert engaged, "the schedule engaged on no candidate"


@pytest.mark.parametrize("arch,sizes,dtype,sms", [
    ("matmul", {"m": 2000, "d": 1032, "n": 3080}, "f16", 7),  # 400 tiles: 57 or 58 per CTA
    ("layernorm_linear_gelu", {"m": 1000, "d": 776, "n": 1000}, "bf16", 3),  # 64 tiles: 21 or 22 per CTA
    ("matmul", {"m": 100, "d": 64, "n": 72}, "f16", 500),  # more SMs than tiles: one CTA
])
def test_pingpong_is_exact_on_any_sm_count(arch, sizes, dtype, sms):
    """The persistent grid is the GPU's SM count (build_kernel's sms): the tile walk is right for
    CTA counts other than this GPU's, long walks per CTA and more SMs than tiles included."""
    g = suite.build(suite.Case("pingpong_sms", arch, sizes, dtype, "issue"))[0]
    c = next(c for c in candidates(g) if c.name in ("prenorm", "direct"))
    k = leantile.compile(g, candidate=c.name, tiles=ASK)
    assert any(kk.pingpong for kk in k.plan.kernels)
    k._c = runtime._Compiled(k._c.module, k._c.module.compile_kernels(target="cuda", sms=sms))
    v = k.verify(seed=7)
    assert v["ok"], (sms, v["rel_err"], v["tolerance"])


# 16-bit rows of whole 16-byte granules (the operands go by TMA): partial tiles (136, 264 of
# 128), one tile (8, 40), two tiles per SM and more (rows 2100)
ROWS = (1, 40, 136, 2100)
OTHER = (8, 136, 264)


@st.composite
def pingpong_graphs(draw):
    g = draw(st.one_of(strategies._user_gemm(ALL_CLASSES), strategies._user_norm_gemm(ALL_CLASSES)).map(lambda gc: gc[0]))
    pick = draw(st.randoms(use_true_random=False))
    g = resized(g, lambda a: pick.choice(ROWS if a in ("m", "t_q") else OTHER))
    return inputs_in(g, draw(st.sampled_from(["f16", "bf16"])), only="f32")


def test_generated_gemms_on_the_pingpong_schedule_are_exact():
    graphs: dict[str, object] = {}

    @settings(max_examples=16, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(pingpong_graphs())
    def draw(g):
        graphs.setdefault(g.model_dump_json(), g)
    draw()
    jobs = []
    for g in graphs.values():
        for c in candidates(g):
            try:
                plan = derive(g, c.name, ASK)
            except Exception:  # tiles this candidate cannot take: refused by the verifier
                continue
            if any(k.pingpong for k in plan.kernels):
                jobs.append((g, c.name))
    assert len(jobs) >= 8, len(jobs)
    assert verify_all(jobs, tiles=ASK) == []
