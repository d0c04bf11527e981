"""Exact symbolic checks (sympy) that each rule's rewrite holds on a small unrolled instance.
The checks live in leantile.symbolic (the reports run the same ones); they complement the
Lean proofs and run everywhere, including where no Lean toolchain is."""
import pytest
import sympy as sp

from leantile import symbolic
from leantile.derive import RULES


def test_every_rule_has_a_check():
    assert {r.name for r in RULES} <= set(symbolic.CHECKS)


@pytest.mark.parametrize("rule", sorted(symbolic.CHECKS))
def test_rewrite_holds_symbolically(rule):
    assert symbolic.CHECKS[rule]() is True


def test_checks_can_fail():
    """The zero test behind the checks rejects a false identity (a wrong rescale)."""
    s1, s2, m = sp.symbols("s1 s2 m", real=True)
    wrong = sp.exp(s1 - m) + sp.exp(s2) - (sp.exp(s1) + sp.exp(s2)) * sp.exp(-m)
    assert symbolic._zero(wrong) is False
