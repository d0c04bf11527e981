"""Everything one report shows, gathered into plain data (rendered by html.py and md.py)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path

from .. import architectures, ir
from ..derive.rules import run_sympy_checks
from ..files import UnsafePath, under
from ..derive import candidates, replay, rule
from ..derive.rules import END_TO_END
from ..derive.rules.flatten import FLATTEN, flatten
from ..derive.rules.mask_bounds import MASK_BOUNDS
from ..show import graph_text
from . import bench, evidence, formulas, picture

PROOF_WORDS = {"checked": "checked", "failed": "failed", "unchecked": "unchecked (no Lean toolchain)"}


@dataclass
class Step:
    index: int
    rule: str
    theorem: str
    statement: str
    rewrite: str
    at: tuple[int, ...]
    params: dict
    before: str
    after: str


@dataclass
class Proof:
    theorem: str
    rules: list[str]
    status: str  # checked | failed | unchecked
    axioms: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def words(self) -> str:
        return PROOF_WORDS.get(self.status, self.status)


@dataclass
class Report:
    name: str
    source: str
    graph: ir.Graph
    arch_lang: str
    arch_label: str
    arch_text: str
    arch_note: str  # why a Lean file of the same name is not shown (another graph's), else ""
    graph_svg: str
    graph_how: str
    candidates: list[tuple[str, str]]
    chosen: str
    chosen_why: str
    tiles: dict
    steps: list[Step]
    proofs: list[Proof]
    evidence: list[evidence.Result]
    sympy: list[tuple[str, bool | None, str]]
    kernel: str
    kernel_error: str
    bench: bench.Bench


def camel(name: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in name.split("_"))


def lean_file(name: str, root: Path) -> Path | None:
    """lean/LeanTile/Architectures/<CamelName>.lean, when it exists."""
    try:
        lean = under(root / "lean" / "LeanTile" / "Architectures", f"{camel(name)}.lean")
    except UnsafePath:
        return None
    return lean if lean.is_file() else None


def arch_source(spec: str, g: ir.Graph, root: Path, known: bool | None = None) -> tuple[str, str, str, str]:
    """(language, label, text, note): the Lean source of the graph when it IS the graph that
    file describes (same content as the built-in or the committed export of that name; a graph
    that only shares the name gets its own text and a note saying why), else the Python
    builder it came from, else the graph as text."""
    known = bench.is_reference(g, root, any_sizes=True) if known is None else known
    lean = lean_file(g.name, root)
    note = ""
    if lean is not None and known:
        return "lean", str(lean.relative_to(root)), lean.read_text(), ""
    if lean is not None or g.name in architectures.NAMES:
        note = (f"No Lean source: this graph is named {g.name!r} but is not the architecture of that name "
                "(its content differs), so that architecture's source is not shown.")
    if spec in architectures.NAMES and known:
        mod = architectures.module(spec)
        return "python", inspect.getsourcefile(mod) or spec, inspect.getsource(mod), note
    if ".py:" in spec:
        path = spec.rpartition(":")[0]
        from ..files import NotReadable, read_capped
        from ..sources import MAX_SOURCE_BYTES
        try:
            text = read_capped(path, MAX_SOURCE_BYTES, "Python source").decode()
        except (NotReadable, UnicodeDecodeError):
            return "text", spec, graph_text(g), note
        # the whole file: the function may build the graph through helpers of the same file (showing
        # only its own lines hid them); the file is capped at MAX_SOURCE_BYTES
        return "python", spec, text, note
    return "text", spec, graph_text(g), note


def choose(g: ir.Graph, b: bench.Bench, cands=None):
    """The candidate the report shows: the one leantile.compile, `kernels` and `bench` run, i.e.
    the tuned lookup's entry for g's shape and dtype (leantile.tuned: the user's folder, then the
    shipped one) when it names one of g's candidates, else the default (first) candidate. `b` is
    not consulted: a bench or sweep file records what ran then, not what ships now."""
    from ..tuned import shipped_dir, tuned_entries

    cands = candidates(g) if cands is None else cands
    dtype = g.inputs()[0].dtype if g.inputs() else "f16"
    for e, folder in tuned_entries(g.name, dict(g.axes), dtype):
        c = next((c for c in cands if c.name == e["candidate"]), None)
        if c is not None:
            origin = "shipped" if folder.resolve() == shipped_dir().resolve() else "user"
            return c, dict(e["tiles"]), f"the tuned entry for {e['gpu']} ({origin}, {g.name}.json): what leantile.compile runs there"
    return cands[0], {}, "the default (first) candidate; no tuned entry for this shape"


def collect(spec: str, g: ir.Graph, statuses, root: Path, results_dir: Path,
            examples: int = 20, seed: int = 0) -> Report:
    b = bench.latest(results_dir, g, root)
    cands = candidates(g)
    chosen, tiles, why = choose(g, b, cands)
    plan_error = ""
    try:
        plan = replay(g, chosen.steps, tiles, chosen.name)
    except ir.GraphError as e:  # no tiles fit the target at this shape (a launch past CUDA's grid limits,
        plan, plan_error = None, "; ".join(e.problems)  # shared memory): derivation and proofs still reported
    # after flatten_reduction's steps the others name nodes of the merged graph (the graph the plan
    # is for): their formulas, and the picture, are of that graph
    merged = any(s.rule in (FLATTEN.name, MASK_BOUNDS.name) for s in chosen.steps)
    shown = flatten(g)[0] if merged else g
    steps = []
    for k, s in enumerate(chosen.steps, 1):
        r = rule(s.rule)
        before, after = formulas.step_formulas(g if s.rule == FLATTEN.name else shown, s)
        steps.append(Step(k, s.rule, s.theorem, r.statement, r.rewrite, tuple(s.at), dict(s.params), before, after))
    fused = {i for s in chosen.steps if s.rule != FLATTEN.name for i in s.at}
    svg, how = picture.graph_svg(shown, fused)
    known = bench.is_reference(g, root, any_sizes=True)  # g IS the architecture of its name
    lang, label, text, note = arch_source(spec, g, root, known)
    kernel, kernel_error = "", plan_error
    try:
        from ..emit import emit_module
        kernel = emit_module(plan) if plan is not None else ""
    except Exception as e:  # the emitter is optional for the rest of the report
        kernel_error = f"{type(e).__name__}: {e}"
    return Report(
        name=g.name, source=spec, graph=g, arch_lang=lang, arch_label=label, arch_text=text, arch_note=note,
        graph_svg=svg, graph_how=how,
        candidates=[(c.name, c.summary) for c in cands], chosen=chosen.name, chosen_why=why,
        tiles=dict(plan.tiles) if plan is not None else {}, steps=steps,
        proofs=proofs_for(chosen.steps, g.name if known else "", statuses),
        evidence=evidence.property_check(g, examples=examples, seed=seed),
        sympy=run_sympy_checks([s.rule for s in chosen.steps]),
        kernel=kernel, kernel_error=kernel_error, bench=b)


def proofs_for(steps, name: str, statuses) -> list[Proof]:
    """One row per theorem the derivation cites (plus the end-to-end lemma of the architecture
    `name`: pass "" for a graph that is not that architecture), in step order."""
    by_thm = {s.theorem: s for s in statuses}
    rows: dict[str, list[str]] = {}
    for s in steps:
        rows.setdefault(s.theorem, []).append(s.rule)
    if steps and name in END_TO_END:
        rows.setdefault(END_TO_END[name], []).append("end to end")
    out = []
    for thm, rules in rows.items():
        st = by_thm.get(thm)
        if st is None:
            out.append(Proof(thm, rules, "failed", message="not among the theorems `leantile check-lean` checks"))
        else:
            out.append(Proof(thm, list(dict.fromkeys(rules)), st.status, list(st.axioms), st.message))
    return out
