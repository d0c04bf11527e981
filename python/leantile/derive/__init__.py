"""Derivations: the rules, each an executable unit with its matcher, steps, part of replay,
formula and sympy check (rules/), the site records they share (sites.py), the plans they
build (kernels.py), the graph's namespace (context.py), steps and their checking (steps.py),
and enumeration + replay (engine.py)."""
from .engine import (Candidate, DerivationError, candidate, candidates, check_derivation,  # noqa: F401
                     default_steps, derive, refusals, replay)
from .rules import RULES, THEOREMS, rule  # noqa: F401
