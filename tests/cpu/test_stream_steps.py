"""plan.stream_steps: the interpreter runs a kernel's stream in the order its schedule runs it,
FA3's rotated loop included (issue 48 step 3: the interpreter runs every schedule the emitter
emits), so every check of an overlapped plan against the reference checks the rotation.

Checked: the rotated order is a permutation of the plain one with each block's P V after the
next block's softmax; overlapped plans (with masks, key bounds and partial blocks) agree with
the reference and with the same plan on the plain loop; and a cut that moves a statement the
rotation may not move (P's cast into the softmax) is caught by the interpreter."""
from __future__ import annotations

import pytest
import torch

from leantile import architectures, interp, reference
from leantile.derive import derive
from leantile.plan import overlap_parts as overlap_mod
from leantile.plan.overlap_parts import overlap_parts, stream_steps
from leantile.tolerance import output_tolerances, rel_err


ASK = {"block_m": 128, "block_n": 128, "threads": 256, "overlap": 1, "stages": 1}


def _overlapped(arch: str, **sizes):
    g = architectures.build(arch, **sizes)  # f16 operands: what the schedule takes
    plan = derive(g, "online_exp2", ASK)
    assert any(k.overlap for k in plan.kernels), (arch, sizes)
    return g, plan


def test_the_rotated_order_is_the_plain_one_permuted():
    _, plan = _overlapped("attention", h=1, t_q=130, t_kv=700, d_h=64)
    k = next(k for k in plan.kernels if k.overlap)
    parts, blocks = overlap_parts(k), [0, 1, 2, 3]
    steps = stream_steps(k, blocks)
    plain = [(j, s) for j in blocks for s in k.body]
    assert sorted(map(repr, steps)) == sorted(map(repr, plain))
    at = {(j, repr(s)): n for n, (j, s) in enumerate(steps)}
    for j in blocks[1:]:  # P V of block j - 1 runs after block j's softmax, before its moved statements
        pv = at[(j - 1, repr(parts.gemm_o))]
        assert all(at[(j, repr(s))] < pv for s in parts.softmax)
        assert all(pv < at[(j, repr(s))] for s in parts.moved)
    assert steps[-1] == (blocks[-1], parts.gemm_o)
    assert stream_steps(k, []) == []
    assert stream_steps(k.model_copy(update={"overlap": False}), blocks) == plain


@pytest.mark.parametrize("arch,sizes", [
    ("attention", {"h": 2, "t_q": 130, "t_kv": 700, "d_h": 64}),        # partial query and key blocks
    ("causal_attention", {"h": 1, "t_q": 300, "t_kv": 300, "d_h": 64}),  # key bounds: skipped and boundary blocks
    ("sliding_window_attention", {"h": 1, "t_q": 400, "t_kv": 400, "d_h": 64}),
])
def test_overlapped_plans_equal_the_reference_and_the_plain_loop(arch, sizes):
    g, plan = _overlapped(arch, **sizes)
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)
    same = reference.evaluate(g, inputs)
    out = interp.run(plan, inputs)
    plain = interp.run(plan.model_copy(update={"kernels": tuple(k.model_copy(update={"overlap": False})
                                                                  for k in plan.kernels)}), inputs)
    for o in g.outputs:
        assert rel_err(out[o], ref[o], same[o]) <= output_tolerances(g)[o]
        assert torch.equal(out[o], plain[o])  # the same operations on the same values, in another order


def test_a_cut_that_moves_p_into_the_softmax_is_caught(monkeypatch):
    """P's cast in the softmax part (not among the moved statements) would overwrite P while the
    previous block's P V still reads it on the GPU: the interpreter's order shows it."""
    g, plan = _overlapped("attention", h=1, t_q=130, t_kv=700, d_h=64)
    k = next(k for k in plan.kernels if k.overlap)
    good = overlap_parts(k)
    p_cast = next(s for s in good.moved if s.dst == good.gemm_o.a)
    bad = good._replace(softmax=(*good.softmax, p_cast), moved=tuple(s for s in good.moved if s is not p_cast))
    monkeypatch.setattr(overlap_mod, "overlap_parts", lambda kk: bad if kk.overlap else None)
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)
    out = interp.run(plan, inputs)
    assert any(rel_err(out[o], ref[o]) > 0.1 for o in g.outputs)
