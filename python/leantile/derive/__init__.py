"""Derivations: rules as data (rules.py), where they match (sites.py), the plans they
build (kernels.py), and enumeration + replay (engine.py)."""
from .engine import Candidate, DerivationError, candidate, candidates, default_steps, derive, replay  # noqa: F401
from .rules import RULES, THEOREMS, rule  # noqa: F401
