"""A matmul's contraction followed by sums over axes next to it in both operands is one contraction
over their merged axis (rules/flatten.py, MERGE_CONTRACTIONS): GQA's backward sums dK and dV over a
group's query heads g after contracting t_q, and merged over g_t_q it is attention's three-kernel
backward with no group-sum kernel. Off by default until a GPU times it against the split form
(benchmarks/flash_backward/probe.py --merge-contractions); these tests run it on: every candidate of merged graphs
equals the float64 reference, a position along a part (causal GQA) keeps the axes apart, the
derivation replays, the kernels lower."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strategies
from profiles import examples

from leantile import architectures
from leantile.autodiff import vjp
from leantile.derive import candidates, check_derivation, derive
from leantile.derive.rules import flatten
from plan_checks import check_every_candidate


@pytest.fixture
def merging(monkeypatch):
    monkeypatch.setattr(flatten, "MERGE_CONTRACTIONS", True)


def _gqa_backward(f64: bool = True, **sizes):
    g = architectures.build("gqa_attention", **sizes)
    return vjp(strategies.inputs_in(g, "f64") if f64 else g).graph


def _group_sums(plan) -> list[str]:
    return [k.name for k in plan.kernels if k.name.startswith("row") and any(t.axis == "g" for t in k.grid)]


def test_off_by_default_the_gqa_backward_keeps_its_group_sums():
    plan = derive(_gqa_backward(False, h_kv=2, g=3, t_q=300, t_kv=260, d_h=64))
    assert not plan.merged and _group_sums(plan)


def test_merged_the_gqa_backward_streams_the_groups_query_rows(merging):
    g = _gqa_backward(False, h_kv=2, g=3, t_q=300, t_kv=260, d_h=64)  # (f16: f64 tiles pass shared memory)
    plan = derive(g)
    assert plan.merged == {"g_t_q": ("g", "t_q")}
    assert not _group_sums(plan), [k.name for k in plan.kernels]
    dkdv = next(k for k in plan.kernels if k.name.startswith("flash_bwd_dkdv"))
    assert dkdv.stream.axis == "g_t_q"
    for c in candidates(g):
        assert check_derivation(g.model_copy(update={"derivation": c.steps})) == []


def test_merged_gqa_backwards_equal_their_reference(merging):
    for sizes in ({"h_kv": 2, "g": 3, "t_q": 7, "t_kv": 9, "d_h": 4}, {"h_kv": 1, "g": 1, "t_q": 1, "t_kv": 1, "d_h": 2},
                  {"h_kv": 3, "g": 2, "t_q": 5, "t_kv": 11, "d_h": 6}):
        g = _gqa_backward(**sizes)
        assert derive(g).merged, sizes
        check_every_candidate(g, 1, (None, {"block_m": 2, "block_n": 3}))


def test_a_position_along_a_part_keeps_the_axes_apart(merging):
    """A causal mask reads iota(t_q): g and t_q stay two axes."""
    from leantile.dag import DagM
    m = DagM("causal_gqa", {"h_kv": 2, "g": 2, "t_q": 6, "t_kv": 6, "d_h": 4})
    q = m.input("Q", ["h_kv", "g", "t_q", "d_h"], "f64")
    k, v = (m.input(n, ["h_kv", "t_kv", "d_h"], "f64") for n in "KV")
    s = m.select(m.le(m.iota("t_kv"), m.iota("t_q")), m.matmul(q, k, "d_h", "d_h"), m.const("-inf"))
    m.output("out", m.matmul(m.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    bw = vjp(m.graph()).graph
    assert not derive(bw).merged
    check_every_candidate(bw, 2, (None,))


@settings(max_examples=examples(20, deep=True), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(gc=strategies.user_graphs(strategies.ALL_CLASSES - {15}), seed=st.integers(0, 2 ** 16))
def test_generated_backwards_merged_equal_their_reference(gc, seed):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(flatten, "MERGE_CONTRACTIONS", True)
        bw = vjp(gc[0]).graph
        if bw is not None:
            check_every_candidate(bw, seed, (None,))


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_merged_gqa_backward_kernels_lower(merging):
    pytest.importorskip("tilelang", reason="tilelang is not installed")
    from lowering_sweeps import load_module

    from leantile.emit.tilelang import emit_module
    from leantile.lower import lower_to_cuda
    bw = vjp(architectures.build("gqa_attention", h_kv=4, g=4, t_q=1000, t_kv=1000, d_h=128)).graph
    plan = derive(bw)
    assert plan.merged and not _group_sums(plan)
    mod = load_module(emit_module(plan), "gqa_backward_merged")
    for name, f in mod.build_kernel().items():
        assert f"{name}_kernel" in lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
