"""Default derivations have the fused shape the issue asks for; replay rejects bad steps
with a message naming the step; every cited theorem is in the one rule table."""
import json
import re

import pytest

from leantile import architectures, ir
from leantile.derive import DerivationError, THEOREMS, candidates, default_steps, derive, replay
from leantile.plan import Gemm, Map, Pivot, Reduce


def kernels(name, candidate=None, **sizes):
    return derive(architectures.build(name, **sizes), candidate).kernels


def ops(k):
    return [s.op for s in k.statements()]


def test_attention_is_one_flash_kernel():
    [k] = kernels("attention")
    assert [t.axis for t in k.grid if t.block > 1] == ["t_q"] and "h" in [t.axis for t in k.grid]
    assert k.stream.axis == "t_kv"
    assert {s.combine for s in k.states} == {"max", "rescaled_sum"} and len(k.states) == 3
    fns = [s.fn for s in k.body if isinstance(s, Map)]
    assert "exp2" in fns and "exp" not in fns
    assert [s.fn for s in k.epilogue if isinstance(s, Map)] == ["div"]


def test_swiglu_is_one_dual_gemm_with_silu_mul_epilogue():
    [k] = kernels("swiglu")
    assert sum(isinstance(s, Gemm) for s in k.body) == 2
    assert [s.fn for s in k.epilogue if isinstance(s, Map)] == ["silu", "mul"]


def test_matmul_is_one_gemm():
    [k] = kernels("matmul")
    assert k.stream.axis == "d" and sum(isinstance(s, Gemm) for s in k.body) == 1


def test_rmsnorm_candidates_separate_and_fused_stats():
    names = [c.name for c in candidates(architectures.build("rmsnorm"))]
    assert "stats_separate" in names and "stats_fused" in names
    sep = kernels("rmsnorm", "stats_separate")
    assert [k.name.split("_")[0] for k in sep] == ["row", "gemm"]
    [fused] = kernels("rmsnorm", "stats_fused")
    assert any(isinstance(s, Reduce) for s in fused.body) and any(isinstance(s, Gemm) for s in fused.body)
    assert any(s.fn == "rsqrt" for s in fused.epilogue if isinstance(s, Map))


def test_rmsnorm_mlp_dual_gemm_scale_pulled_out_of_both():
    k = kernels("rmsnorm_mlp")[-1]
    assert sum(isinstance(s, Gemm) for s in k.body) == 2
    scales = [s for s in k.epilogue if isinstance(s, Map) and s.fn == "mul" and s.args[0].startswith("matmul")]
    assert len(scales) >= 2


def test_layernorm_linear_gelu_one_gemm_with_moments_and_colsum():
    [k] = kernels("layernorm_linear_gelu")
    reduces = [s for s in k.body if isinstance(s, Reduce)]
    # sum (x - p), sum (x - p)^2 (shifted by the row's first element p, from the first tile), colsum W
    assert {s.src for s in reduces} == {"X_shifted", "W_shared"} and len(reduces) == 3
    assert [(s.src, s.axis) for s in k.body if isinstance(s, Pivot)] == [("X_shared", "d")]
    fns = [s.fn for s in k.epilogue if isinstance(s, Map)]
    assert fns[-2:] == ["add", "gelu_tanh"] and "rsqrt" in fns
    pre = kernels("layernorm_linear_gelu", "stats_fused+colsum_precomputed")
    assert [k.name.split("_")[0] for k in pre] == ["colsum", "gemm"]


def test_steps_cite_the_rule_table():
    for name in architectures.NAMES:
        for c in candidates(architectures.build(name)):
            for s in c.steps:
                assert THEOREMS[s.rule] == s.theorem


def test_export_carries_default_derivation_that_replays(tmp_path):
    from leantile.cli import main
    assert main(["export", "attention", "--out", str(tmp_path)]) == 0
    g = ir.load(tmp_path / "attention.json")
    assert [s.rule for s in g.derivation] == ["softmax_shift", "online_softmax", "exp_to_exp2"]
    assert g.derivation == default_steps(architectures.build("attention"))
    assert len(replay(g, g.derivation).kernels) == 1


def test_committed_exports_are_current():
    from pathlib import Path
    from leantile.cli import exported_graph
    root = Path(__file__).resolve().parents[2] / "exports"
    for name in architectures.NAMES:
        assert (root / f"{name}.json").read_text() == exported_graph(name).to_json(), \
            f"exports/{name}.json is stale: run `make export`"


def _steps(name):
    return [s.model_dump() for s in default_steps(architectures.build(name))]


@pytest.mark.parametrize("mutate,msg", [
    (lambda s: s[1].update(at=[3, 4, 5, 6, 7, 8]), "derivation[1] (online_softmax): field 'at'"),
    (lambda s: s[2].update(theorem="LeanTile.bogus"), "derivation[2] (exp_to_exp2): field 'theorem'"),
    (lambda s: s.pop(1), "derivation[1] (exp_to_exp2): field 'rule'"),
    (lambda s: s[0].update(rule="no_such_rule"), "derivation[0] (no_such_rule): field 'rule': unknown rule"),
])
def test_replay_rejects_bad_steps(mutate, msg):
    g = architectures.build("attention")
    steps = _steps("attention")
    mutate(steps)
    with pytest.raises(DerivationError, match=re.escape(msg)):
        replay(g, [ir.Step(**s) for s in steps])


def test_replay_rejects_dual_gemm_without_step():
    g = architectures.build("swiglu")
    steps = [s for s in default_steps(g) if s.rule != "dual_gemm"]
    with pytest.raises(DerivationError, match="dual_gemm"):
        replay(g, steps)


def test_derive_cli_shows_theorems(capsys):
    from leantile.cli import main
    assert main(["derive", "attention"]) == 0
    out = capsys.readouterr().out
    assert "LeanTile.online_softmax_ratio" in out and "kernel flash_9" in out
    assert main(["derive", "rmsnorm", "--candidate", "nope"]) == 1


def test_plan_json_roundtrip():
    from leantile.plan import Plan
    p = derive(architectures.build("layernorm_linear_gelu"))
    assert Plan.model_validate(json.loads(p.model_dump_json())) == p


def _scaled_attention(**sizes):
    from leantile.dag import build_graph_with_output

    def body(g):
        q, k, v = (g.input(n, ax) for n, ax in (("Q", ["h", "t_q", "d_h"]), ("K", ["h", "t_kv", "d_h"]),
                                                  ("V", ["h", "t_kv", "d_h"])))
        s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
        return g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv")
    return build_graph_with_output("attention_scaled", {"h": 2, "t_q": 5, "t_kv": 7, "d_h": 16, **sizes}, body)


def test_scaled_attention_folds_the_scale_into_exp2():
    g = _scaled_attention()
    [k] = derive(g).kernels
    # the exponents exp2((x - m) c') (online_update._exponent): the scale is their one constant
    consts = [a for s in k.body if isinstance(s, Map) and s.fn == "mul" for a in s.args if a.startswith("#")]
    import math
    assert consts and all(abs(float(c[1:]) - 0.25 / math.log(2)) < 1e-12 for c in consts)  # 1/sqrt(16) * log2 e
    assert "div" not in [s.fn for s in k.body if isinstance(s, Map)]


def test_long_softmax_row_streams_with_online_state():
    from leantile.dag import build_graph_with_output
    g = build_graph_with_output("softmax_row", {"rows": 4096, "cols": 65536},
                                lambda b: b.softmax(b.input("X", ["rows", "cols"]), "cols"))
    stats, norm = derive(g, "online_row_exp2").kernels  # unsplit (the default splits the 32 row blocks)
    assert stats.stream.axis == "cols" and {s.combine for s in stats.states} == {"max", "rescaled_sum"}
    assert norm.stream is None and [t.axis for t in norm.grid if t.block > 1] == ["rows", "cols"]


@pytest.mark.parametrize("seed", range(3))
def test_scaled_attention_and_row_softmax_match_reference(seed):
    import torch
    from leantile import interp, reference
    from leantile.dag import build_graph_with_output
    row = build_graph_with_output("softmax_row", {"rows": 3, "cols": 19},
                                  lambda b: b.softmax(b.input("X", ["rows", "cols"]), "cols"))
    for g in (_scaled_attention(), row):
        t = reference.random_inputs(g, seed=seed, scale=8.0)
        ref = reference.evaluate(g, t, compute_dtype=torch.float64)["out"]
        for c in candidates(g):
            out = interp.run(derive(g, c.name, {"block_m": 2, "block_n": 4}), {k: v.double() for k, v in t.items()},
                             dtype=torch.float64)["out"]
            assert ((out - ref).norm() / ref.norm()).item() < 1e-12, c.name
