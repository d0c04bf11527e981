"""What every rewrite rule is: one executable unit beside its Lean theorem.

A rule says where it applies (its module's matcher, with the side conditions of its lemma
written as checks that refuse the site, `Ctx.refuse`, when they fail), which step it records
there (`step`), what that step decides for the kernel built at the site (`apply`: its part of
replay), and how it reads to a person (`formula`, LaTeX) and to sympy (`check`, an exact
identity on a small unrolled instance). Everything else reads rules through this interface:
the engine dispatches on the step's rule, the theorem, formula, check and parameter tables are
derived from the rule list (rules/__init__.py). docs/rules.md walks through adding one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ... import ir


class Rule:
    """One rewrite rule. Subclasses set the class attributes and override what they need."""

    name: ClassVar[str]
    theorem: ClassVar[str]  # Lean name, proven in lean/LeanTile/Rules/<lean_file>
    lean_file: ClassVar[str]
    pattern: ClassVar[str]  # what the rule matches in the graph (node ops, by role)
    rewrite: ClassVar[str]  # what the plan does instead
    statement: ClassVar[str]  # the lemma in plain words (over the reals)
    params: ClassVar[dict[str, str]] = {}  # parameter -> what it says (derivation error messages)

    def step(self, at, **params) -> ir.Step:
        """The step this rule records at nodes `at` (None params left out)."""
        return ir.Step(rule=self.name, theorem=self.theorem, at=tuple(at),
                       params={k: v for k, v in params.items() if v is not None})

    def apply(self, choice: Any, step: ir.Step) -> None:
        """Its part of replay: what `step` decides for the kernel built at its site (a
        kernels.GemmChoice or kernels.OnlineChoice). Default: nothing, the step justifies a
        form the site's kernel always takes."""

    def refuse(self, cx, at, reason: str) -> None:
        """Record that this rule does not fire at `at`, and why (derive --all-candidates)."""
        cx.refuse(self.name, at, reason)

    def formula(self, g: ir.Graph, at: tuple[int, ...], params: dict) -> tuple[str, str]:
        """(before, after) in LaTeX for a step of this rule at `at` of graph g."""
        raise NotImplementedError(f"rule {self.name} has no formula")

    def check(self) -> bool:
        """The rewrite's identity checked exactly by sympy on a small unrolled instance."""
        raise NotImplementedError(f"rule {self.name} has no sympy check")

    def check_description(self) -> str:
        return " ".join((type(self).check.__doc__ or "").split())

    def __repr__(self) -> str:
        return f"<rule {self.name}: {self.theorem}>"


@dataclass(frozen=True)
class Option:
    """One way to derive one site: its steps, in the order a derivation lists them. `owner` is
    the rule refused when the option's kernels cannot run on the target, at `owner_at`."""
    label: str
    steps: tuple[ir.Step, ...]
    site: Any  # sites.FlashSite | sites.SoftmaxSite | sites.GemmSite
    owner: str
    owner_at: tuple[int, ...]


def sym():
    """leantile.ir.symbolic (sympy), imported when a formula or check is first asked for: deriving
    a plan never needs sympy, and importing it costs half a second."""
    from ...ir import symbolic
    return symbolic
