"""plan.passes.fast_math: a kernel that maps a transcendental, reduces nothing and stores only
16-bit floats is compiled with nvcc --use_fast_math (Mish(Mish(x W)) at 4096^3 ran 0.58x
torch.compile on an H200 with the precise expf / logf / tanhf unrolled over its epilogue:
benchmarks/fusion/results/reductions-suite-h200-2026-11-29.md). Everything else keeps the precise
functions: a float32 store, a reduction (a log of a sum), the tile parameter fast_math=0."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leantile import dag
from leantile.derive import candidates, derive
from leantile.emit import emit_module, load_module
from leantile.plan import Map, Reduce, Store
from leantile.plan.passes import FAST_MATH_OPS, FAST_MATH_STORES

from strategies import inputs_mixed, user_graphs


def _mish_gemm(dtype: str, sizes=None):
    def mish(g, v):
        return g.mul(v, g.tanh(g.log(g.add(g.const("1"), g.exp(v)))))

    def body(g):
        x, w = g.input("X", ["m", "k"], dtype), g.input("W", ["k", "n"], dtype)
        return mish(g, mish(g, g.matmul(x, w, "k", "k")))
    return dag.build_graph_with_output(f"mish_mish_{dtype}", sizes or {"m": 200, "k": 96, "n": 130}, body)


def _checked(plan):
    """The pass's promise, kernel by kernel: fast math only where every store is 16-bit and nothing
    reduces; there, every kernel with a transcendental map gets it."""
    for k in plan.kernels:
        body = k.statements()
        stores = {plan.global_buffer(s.dst).dtype for s in body if isinstance(s, Store)}
        reduces = any(isinstance(s, Reduce) for s in body)
        transcendental = any(isinstance(s, Map) and s.fn in FAST_MATH_OPS for s in body)
        if k.fast_math:
            assert stores and stores <= FAST_MATH_STORES and not reduces, (plan.candidate, k.name, stores)
        elif transcendental and stores and stores <= FAST_MATH_STORES and not reduces:
            assert (plan.tiles or {}).get("fast_math") == 0, (plan.candidate, k.name)


@pytest.mark.parametrize("dtype,expected", [("f16", True), ("bf16", True), ("f32", False)])
def test_a_transcendental_epilogue_storing_16_bit_floats_compiles_with_fast_math(dtype, expected):
    g = _mish_gemm(dtype)
    plan = derive(g, "fused")
    [gemm] = plan.kernels
    assert gemm.fast_math is expected
    flags = load_module(emit_module(plan), f"fast_math_{dtype}").NVCC_FLAGS
    assert flags == ({gemm.name: ["--use_fast_math", "--prec-div=true", "--prec-sqrt=true"]} if expected else {})
    off = derive(g, "fused", {"fast_math": 0})
    assert not any(k.fast_math for k in off.kernels)
    for c in candidates(g):
        _checked(derive(g, c.name))


def test_row_kernels_and_float32_stores_keep_the_precise_functions():
    """log-softmax reduces (its log of a sum stays precise); a float32 output stays precise."""
    def log_softmax(g):
        x = g.input("X", ["m", "d"])
        s = g.sub(x, g.red("max", x, "d"))
        return g.sub(s, g.log(g.red("sum", g.exp(s), "d")))
    g = dag.build_graph_with_output("lsm", {"m": 33, "d": 1000}, log_softmax)
    for c in candidates(g):
        plan = derive(g, c.name)
        _checked(plan)
        assert not any(k.fast_math for k in plan.kernels if any(isinstance(s, Reduce) for s in k.statements()))


@settings(deadline=None, suppress_health_check=list(HealthCheck))  # examples: the profile's
@given(user_graphs(), st.data())
def test_generated_graphs_get_fast_math_only_where_promised(drawn, data):
    """User graphs (GEMM epilogues, norms, softmax, attention) with inputs in f32, f16 and bf16
    mixed: a 16-bit input beside a float32 one stores float32 and keeps the precise functions."""
    g = inputs_mixed(drawn[0], data.draw)
    for c in candidates(g):
        try:
            plan = derive(g, c.name)
        except Exception:  # a refused candidate (derive's own tests judge refusals)
            continue
        _checked(plan)


def test_the_flag_reaches_nvcc():
    """The emitted module's NVCC_FLAGS reach nvcc: the epilogue's precise functions give way to a
    few MUFU instructions, so the cubin of the same CUDA source is much smaller."""
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    if nvcc_path() is None:
        pytest.skip("nvcc not found: the flag's effect not checked")
    mod = load_module(emit_module(derive(_mish_gemm("f16"), "fused")), "fast_math_nvcc")
    ((name, f),) = mod.build_kernel().items()
    cu = lower_to_cuda(f, arch="sm_90")
    assert 2 * len(compile_cuda(cu, flags=mod.NVCC_FLAGS[name])) < len(compile_cuda(cu))


def test_fast_math_keeps_division_and_square_root_correctly_rounded():
    """The flags map expf / logf / tanhf to their MUFU forms but keep x / y and sqrt IEEE
    (div.rn): an approximate division returns 0 for a denominator past 2^126 and NaN for inf / y,
    a wrong number where the precise kernel's is right."""
    import subprocess
    import tempfile
    from pathlib import Path

    from leantile.emit.common import FAST_MATH_FLAGS
    from leantile.lower import nvcc_path
    if nvcc_path() is None:
        pytest.skip("nvcc not found: the flags' effect not checked")
    src = ('extern "C" __global__ void k(float* a, const float* b, const float* c) {\n'
           '  int i = threadIdx.x; a[i] = b[i] / c[i] + sqrtf(c[i]) + expf(b[i]) + tanhf(c[i]) + logf(b[i]); }\n')
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = Path(tmp, "k.cu"), Path(tmp, "k.ptx")
        cu.write_text(src)
        subprocess.run([nvcc_path(), "-ptx", "-arch=sm_90", *FAST_MATH_FLAGS, "-o", str(ptx), str(cu)], check=True)
        text = ptx.read_text()
    assert "div.rn" in text and "div.approx" not in text and "div.full" not in text
    assert "sqrt.rn" in text and "sqrt.approx" not in text
    assert "tanh.approx.f32" in text and "lg2.approx" in text and "ex2.approx" in text
