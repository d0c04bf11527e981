"""Each rule is one executable unit (leantile.derive.rules): its theorem, Lean file, matcher,
steps, part of replay, formula and sympy check live together, and every table about rules is
derived from the rule list. The sympy checks are exact identities on small unrolled instances
(they complement the Lean proofs and run where no Lean toolchain is)."""
import ast
from pathlib import Path

import pytest

from leantile.derive.engine import RegionChoice
import sympy as sp

from leantile.ir import symbolic
from leantile.derive import RULES
from leantile.derive.engine import _options, decide
from leantile.derive.context import Ctx
from leantile.derive.rules import BY_NAME, THEOREMS, sympy_checks
from leantile.derive.rules.base import Rule
from leantile.derive.steps import MEANING

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "leantile"
RULE_NAMES = {r.name for r in RULES}


@pytest.mark.parametrize("rule", sorted(RULE_NAMES))
def test_rewrite_holds_symbolically(rule):
    assert BY_NAME[rule].check() is True
    assert BY_NAME[rule].check_description(), "a check says what it checks (the report prints it)"


def test_every_rule_overrides_formula_and_check():
    for r in RULES:
        assert type(r).formula is not Rule.formula, r.name
        assert type(r).check is not Rule.check, r.name
        assert r.theorem.startswith("LeanTile.") and r.lean_file.endswith(".lean"), r.name


def test_checks_can_fail():
    """The zero test behind the checks rejects a false identity (a wrong rescale)."""
    s1, s2, m = sp.symbols("s1 s2 m", real=True)
    wrong = sp.exp(s1 - m) + sp.exp(s2) - (sp.exp(s1) + sp.exp(s2)) * sp.exp(-m)
    assert symbolic.zero(wrong) is False


def test_tables_are_derived_from_the_rules():
    assert THEOREMS == {r.name: r.theorem for r in RULES}
    assert set(sympy_checks()) == RULE_NAMES
    assert {k for k, _ in MEANING} <= RULE_NAMES
    assert MEANING == {(r.name, p): m for r in RULES for p, m in r.params.items()}


def _string_constants(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_module_outside_the_rules_switches_on_a_rule_name():
    """A rule name as a string literal outside derive/rules/ would be a second place that
    decides what a rule does (the engine dispatches through BY_NAME instead)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "derive" / "rules") in path.parents:
            continue
        offenders += [f"{path.relative_to(PACKAGE)}:{line}: {value!r}" for line, value in _string_constants(path)
                      if value in RULE_NAMES]
    assert not offenders, offenders


def test_decide_follows_the_steps(tiny_graphs):
    """The kernel choice of an option is what its steps say: exp2 iff exp_to_exp2 is among
    them, dual iff dual_gemm, the statistics mode and column sums from their parameters."""
    seen = set()
    for g in tiny_graphs:
        for opts in _options(Ctx(g)):
            for o in opts:
                c = decide(o)
                rules = {s.rule: s for s in o.steps}
                seen |= set(rules)
                if isinstance(c, RegionChoice):  # a region's steps justify its kernel, split or not
                    assert set(rules) <= {"fuse_elementwise", "fuse_reduction", "online_sum", "split_reduction",
                                          "exp_to_exp2", "variance_expand"}
                    assert tuple(st.at[0] for st in o.steps if st.rule == "variance_expand") == \
                        tuple(e[0] for e in c.site.expanded)  # the variances it expands are those its steps name
                    split = rules.get("split_reduction")
                    assert c.split == (split.params["splits"] if split else 0)
                    # the exps it computes as exp2 are those its step names, none without one
                    exp2 = tuple(rules["exp_to_exp2"].at) if "exp_to_exp2" in rules else ()
                    assert c.exp2 == c.site.exp2 == exp2
                    assert c.site.members == o.site.members and c.site.inlined is o.site.inlined
                elif hasattr(c, "exp2"):
                    assert c.exp2 == ("exp_to_exp2" in rules)
                    split = rules.get("split_kv") or rules.get("split_row")
                    assert c.split == (split.params["splits"] if split else 0)
                    assert c.pack == ("pack_query_group" in rules)
                else:
                    assert c.split == (rules["split_k"].params["splits"] if "split_k" in rules else 0)
                    assert c.dual == ("dual_gemm" in rules)
                    assert c.scale == ("scale_pullout" in rules)
                    assert c.stats == (rules["stream_stats"].params["mode"] if "stream_stats" in rules else None)
                    assert c.colsum == (rules["mean_pullout"].params["colsum"] if "mean_pullout" in rules else None)
                    pool = rules.get("fuse_pool_epilogue")
                    assert c.pool == (pool.at[0] if pool else None)
                    rows = rules.get("fuse_row_epilogue")
                    assert c.rows == (tuple(rows.at) if rows else ())
                    assert c.epilogue == sorted({*(rules["fuse_elementwise"].at if "fuse_elementwise" in rules else []),
                                                 *(pool.at if pool else []), *(rows.at if rows else [])})
    # flatten_reduction, merge_gemm_axes and mask_bounds rewrite the graph before any site is found
    # (candidates begin with their steps): no site option carries them (tests/cpu/test_flatten_reduction.py,
    # test_merge_gemm_axes.py, test_attention_variants.py)
    assert seen == RULE_NAMES - {"flatten_reduction", "merge_gemm_axes", "mask_bounds"}


@pytest.fixture
def tiny_graphs():
    from leantile import architectures
    from leantile.autodiff import vjp
    from leantile.dag import build_graph_with_output

    def norm(g):  # a standalone LayerNorm: a region no pattern rule claims
        return g.layer_norm(g.input("X", ["m", "d"], "f32"), "d")
    def log_softmax(g):  # a row too long for the chip: streamed, its sum rescaled (online_sum)
        x = g.input("X", ["m", "d"], "f32")
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    return [architectures.build(n) for n in architectures.NAMES] + [
        build_graph_with_output("ln", {"m": 3, "d": 5}, norm),
        build_graph_with_output("lsm", {"m": 2, "d": 20000}, log_softmax),
        build_graph_with_output("long_ln", {"m": 2, "d": 20000}, norm),  # streamed: variance_expand in a region
        architectures.build("matmul", m=16, d=4096, n=4096),  # few output tiles, a long k: split_k
        architectures.build("attention", h=8, t_q=1, t_kv=4096),  # decode: split_kv
        architectures.build("gqa_attention", t_q=1),  # grouped-query decode: pack_query_group
        build_graph_with_output("vocab", {"m": 4, "v": 50000},  # few long softmax rows: split_row
                                lambda g: g.softmax(g.input("X", ["m", "v"]), "v")),
        build_graph_with_output("maxpool", {"b": 8, "k": 16, "n": 8, "p": 4},  # fuse_pool_epilogue
                                lambda g: g.red("max", g.matmul(g.input("X", ["b", "k"]), g.input("W", ["k", "n", "p"]),
                                                                "k", "k"), "p")),
        build_graph_with_output("groupnorm", {"b": 8, "k": 16, "g": 2, "c": 24},  # fuse_row_epilogue
                                lambda g: g.layer_norm(g.matmul(g.input("X", ["b", "k"]), g.input("W", ["k", "g", "c"]),
                                                                "k", "k"), "c")),
        build_graph_with_output("gainfold", {"m": 8, "k": 16, "n": 8},  # gain_fold
                                lambda g: g.matmul(g.mul(g.rms_norm(g.input("X", ["m", "k"]), "k"), g.input("G", ["k"])),
                                                   g.input("W", ["k", "n"]), "k", "k")),
        vjp(architectures.build("causal_attention", h=2, t_q=40, t_kv=40, d_h=16)).graph,  # flash_backward
        build_graph_with_output("activations", {"b": 3, "t": 5, "k": 16, "n": 8},  # merge_gemm_axes
                                lambda g: g.matmul(g.input("X", ["b", "t", "k"]), g.input("W", ["k", "n"]), "k", "k"))]
