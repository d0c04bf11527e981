"""The derivation engine: enumerate candidate derivations of a graph, and replay a
derivation (a list of steps, each citing its Lean theorem) into a Plan.

    candidates(g)          -> [Candidate(name, steps)], the default first
    replay(g, steps, tiles) -> Plan
    derive(g, candidate, tiles) -> Plan   (the pipeline in one call)
"""
from __future__ import annotations

import graphlib
import itertools
from dataclasses import dataclass

from .. import ir
from ..plan import Buffer, Plan
from . import kernels as K
from .rules import rule
from .sites import FlashSite, GemmSite, SoftmaxSite, find_flash, find_gemms, find_softmax_rows


class DerivationError(ValueError):
    """A step that does not apply where it claims to. The message names the step."""


def step(name: str, at, **params) -> ir.Step:
    return ir.Step(rule=name, theorem=rule(name).theorem, at=tuple(at),
                   params={k: v for k, v in params.items() if v is not None})


@dataclass(frozen=True)
class Candidate:
    name: str
    steps: tuple[ir.Step, ...]
    summary: str


# ------------------------------------------------------------------ enumeration
def _online_steps(s: FlashSite | SoftmaxSite, exp2: bool) -> list[ir.Step]:
    sm = s.softmax if isinstance(s, FlashSite) else s
    out = [step("softmax_shift", [sm.mx, sm.sub]), step("online_softmax", s.nodes, axis=s.axis)]
    if exp2:
        out.append(step("exp_to_exp2", [sm.exp]))
    return out


def _gemm_variants(g: ir.Graph, s: GemmSite) -> list[tuple[str, list[ir.Step]]]:
    """The ways to fuse one GEMM site, best guess first."""
    head: list[ir.Step] = []
    for p in s.peels:
        head.append(step("scale_pullout" if p.kind == "scale" else "mean_pullout", [p.node, *s.matmuls]))
    mean = any(p.kind == "mean" for p in s.peels)
    stats_ok = bool(s.stat_reduces or s.expandable)
    tail = []
    if len(s.matmuls) == 2:
        tail.append(step("dual_gemm", s.matmuls))
    if s.epilogue:
        tail.append(step("fuse_elementwise", s.epilogue))
    variants = []
    stat_modes = ["separate", "fused"] if stats_ok else [None]
    if mean:
        # fused first (one kernel); a separate statistics kernel storing mu and the scale is
        # the alternative, which lifts the row reductions out of the GEMM's mainloop
        stat_modes = ["fused", "separate"] if stats_ok else [None]
    col_modes = ["streamed", "precomputed"] if mean else [None]
    for stats, col in itertools.product(stat_modes, col_modes):
        steps = list(head)
        if mean:  # the colsum choice rides on the mean_pullout step
            steps = [st.model_copy(update={"params": {"colsum": col}}) if st.rule == "mean_pullout" else st
                     for st in steps]
        if stats:
            steps += [step("variance_expand", [r]) for r in s.expandable]
            steps.append(step("stream_stats", [*s.stat_reduces, *s.expandable], mode=stats))
        label = "+".join(x for x in (f"stats_{stats}" if stats else "", f"colsum_{col}" if col else "") if x)
        variants.append((label, steps + tail))
    return variants


def candidates(g: ir.Graph) -> list[Candidate]:
    flash = find_flash(g)
    claimed = {i for s in flash for i in s.nodes}
    rows = find_softmax_rows(g, claimed)
    gemms = [s for s in find_gemms(g, claimed) if s.peels or len(s.matmuls) > 1 or s.epilogue]
    options: list[list[tuple[str, list[ir.Step]]]] = []
    for s in flash:
        options.append([("online_exp2", _online_steps(s, True)), ("online", _online_steps(s, False))])
    for s in rows:
        options.append([("online_row_exp2", _online_steps(s, True)), ("online_row", _online_steps(s, False))])
    for s in gemms:
        options.append(_gemm_variants(g, s))
    out, seen = [], set()
    for combo in itertools.product(*options):
        steps = tuple(st for _, sts in combo for st in sts)
        label = "+".join(lbl for lbl, _ in combo if lbl) or "fused"
        key = tuple(st.model_dump_json() for st in steps)
        if steps and key not in seen:
            seen.add(key)
            out.append(Candidate(label, steps, ", ".join(sorted({st.rule for st in steps}))))
    # Always a candidate: no rule applied. For a lone matmul that is already the one GEMM.
    out.append(Candidate("unfused" if out else "direct", (), "one kernel per node, global intermediates"))
    return out


def default_steps(g: ir.Graph) -> tuple[ir.Step, ...]:
    return candidates(g)[0].steps


def candidate(g: ir.Graph, name: str | None) -> Candidate:
    cands = candidates(g)
    if name is None:
        return cands[0]
    for c in cands:
        if c.name == name:
            return c
    raise DerivationError(f"graph {g.name!r}: no candidate {name!r} (candidates: {', '.join(c.name for c in cands)})")


# ------------------------------------------------------------------ replay
def _fail(k: int, s: ir.Step, msg: str):
    raise DerivationError(f"derivation step {k + 1} ({s.rule} at {list(s.at)}): {msg}")


def replay(g: ir.Graph, steps, tiles: dict | None = None, name: str = "custom") -> Plan:
    """Check every step against the graph and build the plan it describes."""
    tiles = {**K.DEFAULT_TILES, **(tiles or {})}
    flash_sites = {s.nodes: s for s in find_flash(g)}
    claimed = {i for s in flash_sites.values() for i in s.nodes}
    row_sites = {s.nodes: s for s in find_softmax_rows(g, claimed)}
    online_sites = {**flash_sites, **row_sites}
    softmaxes = [s.softmax if isinstance(s, FlashSite) else s for s in online_sites.values()]
    gemm_sites = find_gemms(g, claimed)
    flash: dict[tuple, dict] = {}
    gemm: dict[int, K.GemmChoice] = {}  # keyed by first matmul

    def choice_for(k, st, mms) -> K.GemmChoice:
        site = next((s for s in gemm_sites if set(mms) <= set(s.matmuls)), None)
        if site is None:
            _fail(k, st, "these matmuls share no LHS and contraction axis")
        return gemm.setdefault(site.matmuls[0], K.GemmChoice(site))

    for k, st in enumerate(steps):
        if st.theorem != rule(st.rule).theorem:
            _fail(k, st, f"cites {st.theorem}, but the rule's theorem is {rule(st.rule).theorem}")
        at = tuple(st.at)
        if st.rule == "online_softmax":
            if at not in online_sites:
                _fail(k, st, "not a softmax (alone, or between two matmuls) with private intermediates")
            flash[at] = {"exp2": False}
        elif st.rule == "softmax_shift":
            if not any(at == (s.mx, s.sub) for s in softmaxes):
                _fail(k, st, "not the max and subtraction of a softmax")
        elif st.rule == "exp_to_exp2":
            key = next((key for key, s in online_sites.items()
                        if at == ((s.softmax if isinstance(s, FlashSite) else s).exp,) and key in flash), None)
            if key is None:
                _fail(k, st, "not the exp of a softmax already streamed by online_softmax")
            flash[key]["exp2"] = True
        elif st.rule in ("scale_pullout", "mean_pullout"):
            c = choice_for(k, st, at[1:])
            kind = "scale" if st.rule == "scale_pullout" else "mean"
            if not any(p.node == at[0] and p.kind == kind for p in c.site.peels):
                _fail(k, st, f"node {at[0]} is not a per-row {'scale' if kind == 'scale' else 'shift'} of the LHS")
            if kind == "scale":
                c.scale = True
            else:
                c.mean = True
                c.colsum = str(st.params.get("colsum", "streamed"))
                if c.colsum not in ("streamed", "precomputed"):
                    _fail(k, st, f"params.colsum must be streamed or precomputed, got {c.colsum!r}")
        elif st.rule == "dual_gemm":
            c = choice_for(k, st, at)
            if len(at) != 2 or sorted(at) != sorted(c.site.matmuls):
                _fail(k, st, "needs the two matmuls of one LHS")
            c.dual = True
        elif st.rule == "variance_expand":
            c = next((c for c in gemm.values() if at and at[0] in c.site.expandable), None)
            if c is None:
                _fail(k, st, "not a sum of squared deviations under a pulled-out row vector")
            c.expanded.add(at[0])
        elif st.rule == "stream_stats":
            c = next((c for c in gemm.values() if set(at) == set(c.site.stat_reduces + c.site.expandable)), None)
            if c is None:
                _fail(k, st, "not the row statistics of a GEMM with pulled-out vectors")
            if set(c.site.expandable) - c.expanded:
                _fail(k, st, "a variance must be expanded (variance_expand) before it can stream")
            c.stats = str(st.params.get("mode", "fused"))
            if c.stats not in ("fused", "separate"):
                _fail(k, st, f"params.mode must be fused or separate, got {c.stats!r}")
        elif st.rule == "fuse_elementwise":
            c = next((c for c in gemm.values() if set(at) <= set(c.site.epilogue)), None)
            if c is None:
                site = next((s for s in gemm_sites if set(at) <= set(s.epilogue)), None)
                if site is None:
                    _fail(k, st, "these nodes are not an elementwise epilogue of a GEMM")
                c = gemm.setdefault(site.matmuls[0], K.GemmChoice(site))
            c.epilogue = [i for i in c.site.epilogue if i in set(at) | set(c.epilogue)]
        else:
            _fail(k, st, "no replay for this rule")
    for c in gemm.values():
        if len(c.site.matmuls) == 2 and not c.dual:
            raise DerivationError(f"matmuls {c.site.matmuls}: fused with a shared LHS but no dual_gemm step")
    return _assemble(g, [online_sites[k] for k in flash], flash, gemm, tiles, name)


def _assemble(g, flash_list, flash_opts, gemm, tiles, name) -> Plan:
    """Kernels for the fused groups, unfused kernels for everything else, in dependency order."""
    us = g.users()
    # node id (or, for tensors that are no graph node such as a precomputed colsum, the
    # global buffer name) -> kernel that writes it to global memory
    produced: dict[int | str, str] = {}
    kernels, needs = {}, {}  # kernel name -> Kernel, and -> nodes it reads from global

    def add(kern, reads, writes):
        kernels[kern.name] = kern
        needs[kern.name] = set(reads)
        for i in writes:
            produced[i] = kern.name

    for s in flash_list:
        exp2 = flash_opts[s.nodes]["exp2"]
        if isinstance(s, FlashSite):
            qk, pv = g.node(s.qk), g.node(s.pv)
            add(K.flash_kernel(g, s, exp2, tiles), [qk.a, qk.b, pv.b], [s.pv])
        else:
            stats, norm = K.softmax_row_kernels(g, s, exp2, tiles)
            add(stats, [s.src], [s.mx, s.sm])
            add(norm, [s.src, s.mx, s.sm], [s.div])

    extra_globals = []
    for c in gemm.values():
        s = c.site
        inside = set(s.matmuls) | set(c.epilogue)
        outs = set(g.outputs.values())
        stores = [i for i in sorted(inside) if i in outs or any(u not in inside for u in us[i])]
        reads = {s.base} | {g.node(m).b for m in s.matmuls}
        reads |= {a for i in c.epilogue for a in g.node(i).args() if a not in inside and not K.literal(g, a)}
        vecs = {p.vec for p in s.peels}
        if c.stats == "separate":
            sk, stored = K.row_stats_kernel(g, c, tiles)
            add(sk, [s.base], stored)
        elif c.stats != "fused":
            reads |= {v for v in vecs if not K.literal(g, v)}
        if c.mean and c.colsum == "precomputed":
            for m in s.matmuls:
                w = g.node(m).b
                colsum = f"colsum_{K.value_name(g, w)}"
                add(K.colsum_kernel(g, w, g.node(m).axis_b, tiles), [w], [colsum])
                cols = tuple(a for a in g.node(w).axes if a != g.node(m).axis_b)
                extra_globals.append(Buffer(name=colsum, axes=cols, scope="global", dtype="acc"))
                reads.add(colsum)
        gk = K.gemm_kernel(g, c, tiles, stores)
        deps = set(reads) | ({s.base} if c.stats else set())
        add(gk, deps, stores)
        if c.stats == "separate":
            needs[gk.name] |= {v for v in vecs if not K.literal(g, v)}

    # Unfused kernels for every node some kernel or output needs and nobody produces.
    wanted = set(g.outputs.values()) | {i for r in needs.values() for i in r if isinstance(i, int)}
    for n in reversed(g.nodes):
        i = n.id
        if i not in wanted or i in produced or isinstance(n, (ir.Input, ir.Const, ir.SizeConst)):
            continue
        kern = K.node_kernel(g, i, tiles)
        reads = [a for a in (n.args() if not isinstance(n, ir.Matmul) else (n.a, n.b)) if not K.literal(g, a)]
        add(kern, reads, [i])
        wanted |= set(reads)
    order = graphlib.TopologicalSorter()
    for kname, reads in needs.items():
        deps = set()
        for r in reads:
            if r in produced and produced[r] != kname:
                deps.add(produced[r])
        order.add(kname, *sorted(deps))
    ordered = [kernels[k] for k in order.static_order()]
    globals_ = _globals(g, produced, extra_globals)
    return Plan(graph=g.name, candidate=name, axes=dict(g.axes), globals=tuple(globals_),
                outputs={o: K.value_name(g, i) for o, i in g.outputs.items()},
                kernels=tuple(ordered), tiles=tiles)


def _globals(g: ir.Graph, produced: dict, extra) -> list[Buffer]:
    out = [Buffer(name=n.name, axes=n.axes, scope="global", dtype=n.dtype, node=n.id) for n in g.inputs()]
    for i in sorted(i for i in produced if isinstance(i, int)):
        n = g.node(i)
        out.append(Buffer(name=K.value_name(g, i), axes=n.axes, scope="global", dtype="acc", node=i))
    return out + list(extra)


def derive(g: ir.Graph, candidate_name: str | None = None, tiles: dict | None = None) -> Plan:
    """The pipeline: pick a candidate derivation, replay it, return the plan."""
    c = candidate(g, candidate_name)
    return replay(g, c.steps, tiles, c.name)
