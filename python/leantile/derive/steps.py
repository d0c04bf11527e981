"""Derivation steps: how the engine writes them, and how a given derivation is checked.

A derivation is valid for a graph iff it is exactly one that derive would produce: for each
site of the graph, in the engine's order, the steps of one of that site's options (or no
step at all: the unfused plan). `match` finds the option of every site; where a derivation
differs, it names the first step that does and the field at fault, against the option that
agrees with the derivation longest:

    derivation[4] (online_softmax): field 'params.axis': 'h' is not allowed here (expected 't_kv')
"""
from __future__ import annotations

import difflib
import re

from .. import ir
from .rules import RULES, THEOREMS

# (rule, parameter) -> what the parameter says, for error messages: from the rules
MEANING = {(r.name, p): meaning for r in RULES for p, meaning in r.params.items()}


class DerivationError(ValueError):
    """A derivation that is not one derive would produce for this graph. One line, naming
    `derivation[k] (<rule>)` and the field at fault."""


def shown(x) -> str:
    """A value from a document, safe on one line: itself if it is a short identifier or an
    integer, else its repr, shortened."""
    s = str(x)
    if isinstance(x, int) and not isinstance(x, bool) or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,99}", s):
        return s
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _val(v) -> str:
    """A parameter value as written in JSON-ish Python: strings quoted, shortened."""
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def key(s: ir.Step) -> tuple:
    """Equality of steps, with the type of each parameter (1 and '1' and True differ)."""
    return (s.rule, s.theorem, tuple(s.at),
            tuple(sorted((k, type(v).__name__, v) for k, v in s.params.items())))


def match(options: list[list[tuple[ir.Step, ...]]], steps) -> list[int]:
    """The option each site's steps pick, in site order; [] for the empty derivation.
    Raises DerivationError at the first step no derivation of this graph has there.

    One pass over the sites keeps every position the steps so far can end at (an option may
    extend another: online_exp2 is online plus a step), so no backtracking; a derivation
    that fails is judged against what agrees with it longest."""
    steps = tuple(steps)
    if not steps:
        return []
    keys = [key(s) for s in steps]
    reach: dict[int, tuple] = {0: ()}  # position -> the options chosen to get there
    far, wanted = -1, []  # the furthest any derivation agrees with the steps, and what it has next
    for opts in options:
        nxt: dict[int, tuple] = {}
        for p, picked in reach.items():
            for j, o in enumerate(opts):
                n = 0
                while n < len(o) and p + n < len(keys) and keys[p + n] == key(o[n]):
                    n += 1
                if n == len(o):
                    nxt.setdefault(p + n, picked + (j,))
                elif p + n > far:
                    far, wanted = p + n, [o[n]]
                elif p + n == far:
                    wanted.append(o[n])
        reach = nxt
    if len(steps) in reach:
        return list(reach[len(steps)])
    extra = max((p for p in reach), default=-1)
    if extra > far or (extra == far and not wanted):
        why = ("extra step: the steps before it derive every site of this graph" if options else
               "extra step: no rule applies to this graph (its only derivation is the empty one)")
        raise DerivationError(_where(steps, extra) + (_rule_problem(steps[extra]) or why) + _repeat(keys, extra))
    if far >= len(steps):
        e = wanted[0]
        raise DerivationError(f"derivation[{far}] ({e.rule}): missing: the derivation ends after {len(steps)} "
                              f"steps, but this graph's next step is {e.rule} at {_ids(e.at)}")
    got = steps[far]
    problem = _rule_problem(got)
    if problem is None:
        exp = max(wanted, key=lambda e: (e.rule == got.rule, tuple(e.at) == tuple(got.at),
                                         set(e.params) == set(got.params)))
        problem = _field_problem(got, exp, wanted)
    raise DerivationError(_where(steps, far) + problem + _repeat(keys, far))


def _where(steps, k: int) -> str:
    return f"derivation[{k}] ({shown(steps[k].rule)}): "


def _repeat(keys, k: int) -> str:
    q = next((q for q in range(k) if keys[q] == keys[k]), None)
    return "" if q is None else f" (it repeats derivation[{q}])"


def _rule_problem(got: ir.Step) -> str | None:
    if got.rule not in THEOREMS:
        # the names closest to it, not all of them: one line of an error stays short (19 rules and growing)
        close = difflib.get_close_matches(str(got.rule), list(THEOREMS), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        return (f"field 'rule': unknown rule {shown(got.rule)} ({hint}`leantile check-lean` lists the "
                f"{len(THEOREMS)} rules)")
    if got.theorem != THEOREMS[got.rule]:
        return f"field 'theorem': cites {shown(got.theorem)}, but the theorem of {got.rule} is {THEOREMS[got.rule]}"
    return None


def _field_problem(got: ir.Step, exp: ir.Step, expected) -> str:
    if got.rule != exp.rule:
        return (f"field 'rule': this graph's derivation has {exp.rule} at {_ids(exp.at)} here, "
                f"not {got.rule} (steps come site by site, in the order derive writes them)")
    if tuple(got.at) != tuple(exp.at):
        why = ("the same nodes in another order" if sorted(got.at) == sorted(exp.at) else
               f"{len(got.at)} nodes where the site has {len(exp.at)}" if len(got.at) != len(exp.at) else
               "other nodes")
        return f"field 'at': {got.rule} does not apply at {_ids(got.at)} ({why}); it applies at {_ids(exp.at)}"
    takes = ", ".join(exp.params) or "none"
    for name in sorted(got.params):
        if name not in exp.params:
            return f"field 'params.{shown(name)}': {got.rule} takes no parameter {shown(name)} here (it takes {takes})"
    for name in exp.params:
        allowed = sorted({e.params[name] for e in expected if e.rule == exp.rule and tuple(e.at) == tuple(exp.at)
                          and name in e.params}, key=str)
        want = " or ".join(repr(a) for a in allowed)
        meaning = MEANING.get((exp.rule, name), "a value this site allows")
        if name not in got.params:
            return f"field 'params.{name}': missing ({meaning}: {want})"
        v = got.params[name]
        if type(v) is not type(exp.params[name]):
            kind = "a string" if isinstance(exp.params[name], str) else "an integer"
            return f"field 'params.{name}': expected {kind} ({meaning}: {want}), got {_val(v)}"
        if v not in allowed:
            return f"field 'params.{name}': {_val(v)} is not {meaning} here (expected {want})"
    return f"no option of this site has this step; it would be {exp.rule} at {_ids(exp.at)} {dict(exp.params)}"


def _ids(at) -> str:
    at = list(at)
    return str(at) if len(at) <= 12 else f"[{', '.join(map(str, at[:12]))}, ... ({len(at)} ids)]"
