"""Default derivations have the fused shape the issue asks for; replay rejects bad steps
with a message naming the step; every cited theorem is in the one rule table."""
import json

import pytest

from leantile import architectures, ir
from leantile.derive import DerivationError, THEOREMS, candidates, default_steps, derive, replay
from leantile.plan import Gemm, Map, Reduce


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
    assert {s.src for s in reduces} >= {"X_shared", "W_shared"}  # sum x, sum x^2 terms, colsum W
    assert len(reduces) == 3
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
    (lambda s: s[1].update(at=[3, 4, 5, 6, 7, 8]), "step 2 (online_softmax"),
    (lambda s: s[2].update(theorem="LeanTile.bogus"), "step 3 (exp_to_exp2"),
    (lambda s: s.pop(1), "step 2 (exp_to_exp2"),
    (lambda s: s[0].update(rule="no_such_rule"), "unknown rule"),
])
def test_replay_rejects_bad_steps(mutate, msg):
    g = architectures.build("attention")
    steps = _steps("attention")
    mutate(steps)
    with pytest.raises((DerivationError, KeyError), match=msg.replace("(", r"\(")):
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
    assert "LeanTile.online_softmax_fold" in out and "kernel flash_9" in out
    assert main(["derive", "rmsnorm", "--candidate", "nope"]) == 1


def test_plan_json_roundtrip():
    from leantile.plan import Plan
    p = derive(architectures.build("layernorm_linear_gelu"))
    assert Plan.model_validate(json.loads(p.model_dump_json())) == p
