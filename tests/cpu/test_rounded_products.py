"""Products that must be ONE rounded value in two places are the plan op mul_rn (T.ieee_mul:
__fmul_rn, never contracted). nvcc contracts a multiply and a following add into one FMA wherever
it likes, the product then unrounded, and two plans changed meaning on the GPU (gpu-fuzz
2026-11-28, an H100):
- flash attention's M = round(m c') was one value in P = exp2(s c' - M) and in the rescale
  exp2(M_prev - M); contracted into the rescale, exp2(m c' - round(m c')) != 1 compounded over
  512 key blocks into inf (f32 scores of 1e7, d_h = 2: 59 of 1000 rows). Flash kernels now take
  s - m first (derive/online_update.py says why): no product of theirs is reused;
- the row softmax's normaliser computes c x - c m (c m stored by the stats kernel), 0 at the
  row's max only if c x is rounded.
The rule checked here over every candidate of every built-in and of scaled softmax / attention
graphs: a subtraction of two products made in the kernel and a product subtracted from a stored
product use mul_rn (an fma's addend needs nothing: no instruction fuses a product into it). Then, on the PTX nvcc hands to ptxas,
the explicit roundings survive TileLang's codegen (a plain product is `mul.f32`, open to
contraction; only the intrinsic gives `mul.rn.f32`). The GPU behaviour itself:
tests/gpu/test_softmax_large_scores_gpu.py."""
from __future__ import annotations

import re

import pytest

from leantile import architectures, dag
from leantile.derive import candidates, derive
from leantile.emit import emit_module, load_module
from leantile.plan import Load, Map, Store

PRODUCTS = ("mul", "mul_rn")


def loose_products(plan) -> list[str]:
    """Where a plain `mul` is used as a value that must be rounded (the rule above)."""
    stored_product: set[str] = set()  # globals stored from a product
    for k in plan.kernels:
        made: dict[str, str] = {}
        for s in k.statements():
            if isinstance(s, Map):
                made[s.dst] = s.fn
            if isinstance(s, Store) and made.get(s.src) in PRODUCTS:
                stored_product.add(s.dst)
    bad = []
    for k in plan.kernels:
        made, loaded = {}, {}
        for s in k.statements():
            if isinstance(s, Load):
                loaded[s.dst] = s.src
                made.pop(s.dst, None)
            if not isinstance(s, Map):
                continue
            a = s.args
            if s.fn == "sub" and len(a) == 2:
                x, y = made.get(a[0]), made.get(a[1])
                if x in PRODUCTS and y in PRODUCTS and "mul" in (x, y):
                    bad.append(f"{k.name}: {a[0]} - {a[1]}, products, not both mul_rn")
                if x == "mul" and loaded.get(a[1]) in stored_product:
                    bad.append(f"{k.name}: {a[0]} (plain product) - {a[1]} (a stored product)")
            made[s.dst] = s.fn
    return bad


def _attention(dtype: str, d_h: int, scale: float):
    def body(b):
        q, k, v = (b.input(n, ["h", t, "d_h"], dtype) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
        return b.matmul(b.softmax(b.mul(b.matmul(q, k, "d_h", "d_h"), b.const(scale)), "t_kv"), v, "t_kv", "t_kv")
    return dag.build_graph_with_output(f"attention_{dtype}", {"h": 2, "t_q": 5, "t_kv": 4096, "d_h": d_h}, body)


def _softmax_rows(scale: float, cols: int = 5000):
    def body(g):
        return g.softmax(g.mul(g.input("X", ["rows", "cols"]), g.const(scale)), "cols")
    return dag.build_graph_with_output("softmax_rows", {"rows": 7, "cols": cols}, body)


GRAPHS = [architectures.build(n) for n in architectures.NAMES] + [
    _attention("f32", 2, 0.37), _attention("f16", 64, 0.37), _attention("bf16", 64, 1.0),
    _softmax_rows(0.37), _softmax_rows(0.37, 70000), _softmax_rows(1.0)]


@pytest.mark.parametrize("g", GRAPHS, ids=lambda g: f"{g.name}-{'-'.join(map(str, g.axes.values()))}")
def test_products_used_as_one_rounded_value_are_mul_rn(g):
    checked = 0
    for c in candidates(g):
        try:
            plan = derive(g, c.name)
        except Exception:  # refused at these sizes: nothing emitted
            continue
        assert not loose_products(plan), (c.name, loose_products(plan))
        checked += 1
    assert checked


def test_the_rule_finds_the_product_nvcc_contracted():
    """The checker is not vacuous: the plan as it was (mul for mul_rn) breaks it."""
    for g, name in ((_softmax_rows(0.37), "online_row_exp2"),):
        plan = derive(g, name)
        ks = [k.model_copy(update={"body": tuple(s.model_copy(update={"fn": "mul"}) if isinstance(s, Map)
                                                 and s.fn == "mul_rn" else s for s in k.body)})
              for k in plan.kernels]
        assert loose_products(plan.model_copy(update={"kernels": tuple(ks)})), name


@pytest.mark.parametrize("g,candidate,kernel_part,n_rn", [
    (_softmax_rows(0.37), "online_row_exp2", "normalize", 1),
    (_softmax_rows(0.37, 70000), "online_row_exp2", "normalize", 1)], ids=lambda v: v if isinstance(v, str) else None)
def test_the_rounded_products_reach_the_ptx(g, candidate, kernel_part, n_rn):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    if nvcc_path() is None:
        pytest.skip("nvcc not found: PTX not checked")
    plan = derive(g, candidate)
    mod = load_module(emit_module(plan), f"rp_{g.name}_{candidate}")
    ((name, f),) = [(n, f) for n, f in mod.build_kernel().items() if kernel_part in n]
    cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
    ptx = compile_cuda(cu, arch="sm_90a", flags=mod.NVCC_FLAGS.get(name), ptx=True).decode()
    rounded = re.findall(r"^\s*mul\.rn(\.ftz)?\.f32\s", ptx, re.M)
    # the body may be unrolled or peeled (the stream's last block): at least once per product
    assert len(rounded) >= n_rn, (name, len(rounded))
