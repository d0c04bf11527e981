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


def padded(n: int) -> int:
    """The on-chip extent of a row of n elements: a multiple of 1024 past 2048 rounded up to a
    multiple of 2048 (5120 -> 6144, 6144 exact), anything else the next power of two (TileLang's
    layouts split a fragment evenly among threads; positions past n are masked).

    Why not always the power of two: LayerNorm with gain and bias over 8192 x 5120 f16 held as
    8192 ran 0.0814 ms, 0.82x torch.compile, about 2 TB/s, on an H200; held exactly as 5120,
    0.0433 ms, 1.58x (benchmarks/exact_rows/). Why not the exact 5120: a tile of 2 x 5120 on 256
    threads gives each thread 5 vectors of 8, an odd count, and TileLang 0.1.15 finds no layout for
    some such kernels (two sums of a bf16 row: "no available layout found", GPU campaign s32;
    3072 and 7168 alike at 3 and 7, while 6144 and 10240 lower). A multiple of 2048 gives every
    thread an even count at two rows and 256 or 128 threads (tests/cpu/test_exact_rows.py)."""
    if n > 2048 and n % 1024 == 0:
        return -(-n // 2048) * 2048
    return 1 << max(0, n - 1).bit_length()
