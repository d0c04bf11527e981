"""Every emitted kernel rounds each plan statement as the interpreter does: nvcc's default
contracts a multiply and a following add into one FMA wherever it likes (the product then not
rounded), which changed what two plans compute (gpu-fuzz 2026-11-28, an H100):
- flash attention's M = round(m c') is one value in P = exp2(s c' - M) and in the rescale
  exp2(M_prev - M); contracted into the rescale, exp2(m c' - round(m c')) != 1 compounded over
  512 key blocks into inf (f32 scores of 1e7, d_h = 2);
- the row softmax's normaliser computes c x - c m, 0 at the row's max only if c x is rounded.
So every kernel compiles with -fmad=false (emit.common.NO_CONTRACTION) and the plan's own `fma`
is the IEEE intrinsic. Checked here on the PTX nvcc hands to ptxas: a float mul / add / sub
without a rounding mode (.rn) is one ptxas may contract; with the flag there is none, and the
same source without it has some (so the check can fail)."""
from __future__ import annotations

import re

import pytest

from leantile import architectures, dag
from leantile.derive import candidates, derive
from leantile.emit import emit_module, load_module

# a float32/64 multiply, add or subtract left for ptxas to contract: no rounding-mode qualifier
CONTRACTABLE = re.compile(r"^\s*(mul|add|sub)(\.ftz)?(\.sat)?\.f(32|64)\s", re.M)


def _attention_f32(d_h: int, scale: float):
    def body(b):
        q, k, v = (b.input(n, ["h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
        return b.matmul(b.softmax(b.mul(b.matmul(q, k, "d_h", "d_h"), b.const(scale)), "t_kv"), v, "t_kv", "t_kv")
    return dag.build_graph_with_output("attention_f32", {"h": 2, "t_q": 5, "t_kv": 4096, "d_h": d_h}, body)


def _softmax_rows(scale: float):
    def body(g):
        return g.softmax(g.mul(g.input("X", ["rows", "cols"]), g.const(scale)), "cols")
    return dag.build_graph_with_output("softmax_rows", {"rows": 7, "cols": 5000}, body)


PLANS = [(_attention_f32(2, 0.37), "online_exp2"), (_attention_f32(64, 0.37), "online_exp2"),
         (_softmax_rows(0.37), "online_row_exp2"), (_softmax_rows(0.37), "online_row")]


@pytest.mark.parametrize("name", architectures.NAMES)
def test_every_kernel_of_every_candidate_compiles_without_contraction(name):
    g = architectures.build(name)
    for c in candidates(g):
        try:
            plan = derive(g, c.name)
        except Exception:  # a refusal at these sizes: nothing emitted
            continue
        flags = load_module(emit_module(plan), f"nc_{name}_{c.name}").NVCC_FLAGS
        assert all("-fmad=false" in flags.get(k.name, ()) for k in plan.kernels), (name, c.name, flags)


@pytest.mark.parametrize("graph,candidate", PLANS, ids=lambda v: v if isinstance(v, str) else v.name)
def test_no_float_op_is_left_for_ptxas_to_contract(graph, candidate):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    if nvcc_path() is None:
        pytest.skip("nvcc not found: PTX not checked")
    assert candidate in {c.name for c in candidates(graph)}
    plan = derive(graph, candidate)
    mod = load_module(emit_module(plan), f"nc_{graph.name}_{candidate}")
    loose_somewhere = False
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
        ptx = compile_cuda(cu, arch="sm_90a", flags=mod.NVCC_FLAGS[name], ptx=True).decode()
        assert not CONTRACTABLE.findall(ptx), (name, CONTRACTABLE.findall(ptx)[:5])
        loose = compile_cuda(cu, arch="sm_90a", flags=[f for f in mod.NVCC_FLAGS[name] if f != "-fmad=false"],
                             ptx=True).decode()
        loose_somewhere |= bool(CONTRACTABLE.findall(loose))
    assert loose_somewhere, "without -fmad=false nothing was contractable: the check above proves nothing"
