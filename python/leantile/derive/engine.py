"""The derivation engine: enumerate candidate derivations of a graph, and replay a
derivation (a list of steps, each citing its Lean theorem) into a Plan.

    candidates(g)          -> [Candidate(name, steps)], the default first
    replay(g, steps, tiles) -> Plan   (only a derivation derive would produce: steps.match)
    derive(g, candidate, tiles) -> Plan   (the pipeline in one call)
    check_derivation(g)    -> [problem], empty when g.derivation replays

Every site of a graph (`analyse`, by the rules' matchers) has a few options, each a short list of
steps; each step's rule decides its part of the kernel (`decide`); a candidate picks one option per site. Replay matches
the given steps against the options, so a derivation replays iff it is one of them.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from .. import ir
from ..plan import Gemm, Plan, passes
from ..plan.verify import TILE_PROBLEMS, reduce_layout_problem, smem_problem, verify
from ..target import DEFAULT, Target
from ..tiles import check_tiles
from . import kernels as K
from .assemble import assemble
from .context import Ctx, gc_paused
from .rules import BY_NAME, ONLINE, Option
from .region_kernels import region_kernel
from .rules.gemm import EPILOGUE, gemm_options, gemm_sites
from .rules.split import SPLIT_K, SPLIT_KV, SPLIT_REDUCTION, SPLIT_ROW
from .split_kernels import split_flash, split_gemm, split_region, split_row
from .rules.regions import FUSE_REDUCTION, RegionAnalysis, RegionSite, region_options, shifted_exps
from .rules.row_tiles import row_block
from .rules.flatten import FLATTEN, MERGE_AXES, flatten
from .rules.mask_bounds import MASK_BOUNDS
from .rules.softmax import EXP2, online_options
from .rules.stats import row_ancestors
from .shape_tiles import (SMALL_M_GEMM_TILES, SMALL_M_TILES, SWAP_AB_TILES, default_tiles, gemm_judging_tiles, gemm_rows,
                          shape_tiles, swap_rows, wave_tiles)
from .flash_backward_kernels import FlashBackwardChoice, flash_backward
from .rules.flash_backward import FLASH_BWD
from .sites import FlashBackwardSite, FlashSite, GemmSite, Sites, SoftmaxSite, row_peels
from .steps import DerivationError, match  # noqa: F401  (DerivationError: re-exported)

# Candidates are one option per site. Up to this many combinations are all enumerated; past
# it (many softmaxes or norms in one graph) the default plus every one-site variation of it,
# so a graph of 30 softmaxes gets 31 candidates instead of 2^30.
MAX_CANDIDATES = 64
MAX_CANDIDATE_NAME = 100  # names become file names (<candidate>.py)


@dataclass(frozen=True)
class Candidate:
    name: str
    steps: tuple[ir.Step, ...]
    summary: str


# ------------------------------------------------------------------ sites and their options
def analyse(cx: Ctx, peel: bool = True) -> Sites:
    """Every site of the graph, each found (and its side conditions checked) by its rules."""
    flash, rows = ONLINE.match(cx)
    backward = FLASH_BWD.match(cx, rows)  # attention's backward: its softmax row is the site's
    taken = {i for s in backward for i in s.nodes}
    rows = [s for s in rows if s.div not in taken]
    gemms = gemm_sites(cx, {i for s in flash for i in s.nodes} | taken, peel)
    # a softmax over a GEMM's columns that its epilogue computes (fuse_row_epilogue) is no row
    # site; one the epilogue computes in part stays one, and that GEMM keeps its rows apart
    for site in gemms:
        if any(set(s.nodes) & set(site.rows) and not set(s.nodes) <= set(site.rows) for s in rows):
            site.rows = ()
    fused = {i for site in gemms for i in site.rows}
    return Sites(flash, [s for s in rows if not set(s.nodes) <= fused], gemms, backward)


@dataclass
class RegionChoice:
    """A region site's kernel: nothing to decide beyond the site (its steps justify it)."""
    site: RegionSite
    epilogue: list[int] = ()
    split: int = 0  # split_reduction: slices of the streamed axis (0: one CTA runs all of it)
    exp2: tuple[int, ...] = ()  # exp_to_exp2: the shifted exps computed as exp2 (RegionSite.exp2)


def decide(o: Option):
    """What option o's steps decide for the kernel at its site: each step's rule applies its
    part, in order. This is the only place a step turns into a kernel choice."""
    choice = K.GemmChoice(o.site) if isinstance(o.site, GemmSite) else \
        RegionChoice(o.site) if isinstance(o.site, RegionSite) else \
        FlashBackwardChoice(o.site) if isinstance(o.site, FlashBackwardSite) else K.OnlineChoice(o.site)
    for st in o.steps:
        BY_NAME[st.rule].apply(choice, st)
    if isinstance(choice, RegionChoice):  # the kernel computes as exp2 what the steps say, nothing else
        choice.site = replace(choice.site, exp2=choice.exp2)
    return choice


def _site_kernels(cx: Ctx, o: Option, tiles: dict) -> list:
    """The fused kernels option o builds (stores aside): what its shared memory is judged by."""
    c = decide(o)
    s = c.site  # o.site as its steps decided (a region's exp2 exps)
    if isinstance(s, FlashBackwardSite):
        return [k for k, _, _ in flash_backward(cx, c, tiles)[0]]
    if isinstance(s, FlashSite):
        return list(split_flash(cx, c, tiles, {})[:2]) if c.split else [K.flash_kernel(cx, s, c.exp2, tiles, skip=c.skip, pack=c.pack)]
    if isinstance(s, SoftmaxSite):
        return list(split_row(cx, c, tiles, {})[:3]) if c.split else list(K.softmax_row_kernels(cx, s, c.exp2, tiles))
    if isinstance(s, RegionSite):
        return list(split_region(cx, s, c.split, tiles, set(), {})[:2]) if c.split else [region_kernel(cx, s, tiles, set())]
    if c.split:
        return list(split_gemm(cx, c, tiles, [], {})[:2])
    out = [K.gemm_kernel(cx, c, tiles, [])]
    if c.stats == "separate":
        out.append(K.row_stats_kernel(cx, c, tiles)[0])
    return out


def _fits(cx: Ctx, o: Option) -> bool:
    """Whether option o's kernels fit the target's shared memory at the default tiles (a
    head dimension of 1024 makes a flash kernel of 1.3 MB: not offered, the fallback remains).
    A flash option that does not fit there is judged again at the tiles its shape takes
    (shape_tiles.flash_tiles: heads over 128 take FLASH_LARGE_HEAD_TILES, whose kernel fits where
    the defaults' two 128-key stages of K and V do not: Gemma's d_h 256 was refused and ran on_chip)
    where those are the plan's tiles: the graph contracts nothing else (with a projection the plan
    takes the GEMM's tiles, and a flash kernel fitting only at its own was offered, then refused by
    derive: GPU campaign s111) and the option is not split over the keys (a split plan that does not
    verify at the shape's tiles falls back to the defaults, where its combine may have no layout:
    decode at d_h 144, 1152 values on 256 threads, refused by derive in s111)."""
    tiles = default_tiles(cx)
    if isinstance(o.site, FlashBackwardSite):
        return _fits_at(cx, o, {**tiles, **shape_tiles(cx, [decide(o)])}, refuse=True)  # the tiles its plan takes
    if not isinstance(o.site, FlashSite):
        return _fits_at(cx, o, tiles, refuse=True)
    if _fits_at(cx, o, tiles, refuse=False):
        return True
    c = decide(o)
    alone = all(i in (o.site.qk, o.site.pv) for i, n in enumerate(cx.nodes) if isinstance(n, ir.Matmul))
    return _fits_at(cx, o, {**tiles, **shape_tiles(cx, [c])} if alone and not c.split else tiles, refuse=True)


def _fits_at(cx: Ctx, o: Option, tiles: dict, refuse: bool) -> bool:
    """Whether option o's kernels fit the target's shared memory at `tiles`; where not and
    `refuse`, the refusal is recorded (derive --all-candidates names it)."""
    plan = Plan(graph=cx.g.name, candidate="", axes=dict(cx.axes), globals=(), outputs={}, kernels=(), tiles=tiles)
    try:
        kernels = _site_kernels(cx, o, tiles)
    except ir.GraphError as e:  # a kernel these tiles cannot build (split_kernels: the combine's layout)
        if refuse:
            cx.refuse(o.owner, o.owner_at, f"option {o.label or 'fused'}: {e.problems[0]}")
        return False
    for k in kernels:
        problem = smem_problem(plan, k, cx.target)
        if problem:
            if refuse:
                cx.refuse(o.owner, o.owner_at, f"option {o.label or 'fused'}: {problem}")
            return False
    return True


def _options(cx: Ctx, peel: bool = True) -> list[list[Option]]:
    """Every site's options, in the order their steps appear in a derivation; options whose
    kernels exceed shared memory at the default tiles are left out (and sites left without).
    Without `peel` no GEMM pulls a norm's statistics out of its LHS (see _families)."""
    sites = analyse(cx, peel)
    flash = [[o for o in online_options(s, "online") if _fits(cx, o)] for s in sites.flash]
    # a flash site too big for shared memory still has its softmax row
    rows = sorted([*sites.rows, *(s.softmax for s, opts in zip(sites.flash, flash) if not opts)], key=lambda s: s.div)

    out = [FLASH_BWD.options(s) for s in sites.backward]  # (judged by _fits with the rest, below)
    # (a flash site whose softmax statistics are outputs, a training forward's, is never split:
    # the slices' combine stores the output alone)
    out += [opts if any(K.stats_outputs(cx, s)) else _split_first(cx, SPLIT_KV, s, opts)
            for s, opts in zip(sites.flash, flash) if opts]
    out += [_on_chip(cx, s) + _split_first(cx, SPLIT_ROW, s, online_options(s, "online_row")) for s in rows]
    out += [opts for opts in (_gemm_options(cx, s) for s in sites.gemms) if opts]
    out = [[o for o in opts if _fits(cx, o)] for opts in out]
    out = [opts for opts in out if opts]
    recomputed = {i for opts in out if isinstance(opts[0].site, GemmSite) for i in opts[0].site.coordinates}
    regions = RegionAnalysis(cx, _claimed(cx, out), recomputed).sites()
    for opts in region_options(regions):  # a streamed reduction on too few CTAs: split first
        if _fits(cx, opts[0]):
            out.append([o for o in _split_first(cx, SPLIT_REDUCTION, opts[0].site, opts[:1]) if o is opts[0] or _fits(cx, o)])
    return out


def _families(cx: Ctx) -> list[list[list[Option]]]:
    """The option lists the candidates come from. First the pattern rules' (a norm's statistics
    pulled out of the GEMM it feeds: scale_pullout, mean_pullout). Where some GEMM peels such a
    pullout, a second family ("prenorm") in which none does: the norm is a region of its own
    (fuse_reduction: one row kernel storing the normalised rows) and the GEMM reads them as its
    LHS, with its epilogue, and split over k where its tiles leave SMs idle (split_k takes no
    peels). That is torch.compile's plan; it wins where the pulled-out statistics cost the GEMM
    more than the normalised rows' round trip (large GEMMs whose epilogue holds many fragments,
    skinny ones). A derivation replays in the family whose options its steps match (the first
    family's always peel, the second's never)."""
    first = _options(cx)
    if not any(isinstance(o.site, GemmSite) and o.site.peels for opts in first for o in opts):
        return [first]
    return [first, _options(cx, peel=False)]


def _match(families: list[list[list[Option]]], steps) -> tuple[list[list[Option]], list[int]]:
    """(the family, the option each site picks) for the steps; the first family's error if none matches."""
    first_error = None
    for options in families:
        try:
            return options, match([[o.steps for o in opts] for opts in options], steps)
        except DerivationError as e:
            first_error = first_error or e
    raise first_error


def _split_first(cx: Ctx, rule, s, opts: list[Option]) -> list[Option]:
    """A streamed softmax site's options (attention: split_kv; a row alone: split_row), the
    split ones first where its query tiles or row blocks leave SMs idle (decode; a softmax
    over a vocabulary)."""
    n = rule.splits(cx, s, default_tiles(cx))
    return rule.options(s, n, opts) + opts if n else opts


def _gemm_options(cx: Ctx, s) -> list[Option]:
    """A GEMM site's options: split over k first where its output tiles leave SMs idle (a
    plain matmul then has two: split, or the one GEMM); none for a plain unsplit matmul."""
    fused = s.peels or len(s.matmuls) > 1 or s.epilogue or s.pool or s.rows
    opts = gemm_options(s) if fused else []
    # judged at the tiles the shape gets (shape_tiles): a skinny GEMM's 64 x 256, 16 x 128 swapped,
    # a lone GEMM's one wave of 64-row tiles
    mm = cx.node(s.matmuls[0])
    skinny = gemm_rows(cx, mm) <= 64
    tiles = ({**default_tiles(cx), **SMALL_M_TILES, **SMALL_M_GEMM_TILES} if skinny else
             default_tiles(cx) | gemm_judging_tiles(cx)) | (SWAP_AB_TILES if swap_rows(cx, mm) else {}) | wave_tiles(cx)
    n = SPLIT_K.splits(cx, s, tiles)
    if not n or s.pool or s.rows:  # a slice holds a partial product: a pool or a norm of it is no slice's
        return opts
    tail = (EPILOGUE.step(s.epilogue),) if s.epilogue else ()
    split = [SPLIT_K.option(cx, s, n, tail)]
    more = None if skinny else SPLIT_K.more(cx, s, n, tiles)  # skinny: one wave measured best
    if more:
        split.append(SPLIT_K.option(cx, s, more, tail, "split_k_x2"))
    return split + (opts or [Option("", (), s, SPLIT_K.name, tuple(s.matmuls))])


def _on_chip(cx: Ctx, s: SoftmaxSite) -> list[Option]:
    """A softmax row that fits on chip: first, one row kernel (the row read once, max, sum
    and normalisation in registers: fuse_reduction); the two-kernel online form (which reads
    the row twice) stays a candidate."""
    if not row_block(cx, cx.node(s.src).axes, s.axis):
        return []
    members = sorted({s.mx, s.sm, s.div})
    inlined = set(s.nodes) - set(members)
    site = RegionSite(members, "on_chip", cx.node(s.src).axes, s.axis, inlined,
                      exp2=shifted_exps(cx, set(members), inlined, s.axis))
    step = FUSE_REDUCTION.step(members, mode="on_chip")
    steps = (step, *([EXP2.step(site.exp2)] if site.exp2 else []))  # as every row kernel (region_options)
    return [Option("on_chip", steps, site, step.rule, tuple(members))]


def _claimed(cx: Ctx, options: list[list[Option]]) -> set[int]:
    """Nodes the pattern sites compute in their own kernels, whichever option is picked: the
    region rules fuse the rest."""
    out = {n.id for n in cx.nodes if isinstance(n, ir.Matmul)}
    for opts in options:
        s = opts[0].site
        if isinstance(s, FlashBackwardSite):
            out |= set(s.nodes)
        elif isinstance(s, FlashSite):  # (and the statistics a training forward outputs: the flash kernel stores them)
            out |= set(s.nodes) | {i for outs in K.stats_outputs(cx, s) for i in outs}
        elif isinstance(s, (SoftmaxSite, RegionSite)):  # a softmax row: online or on chip
            for o in opts:
                out |= set(o.site.nodes) if isinstance(o.site, SoftmaxSite) else set(o.site.members) | o.site.inlined
        elif isinstance(s, GemmSite):
            # an epilogue's coordinate masks (iotas and constants) are recomputed wherever needed:
            # a region that reads one computes it too (GemmSite.coordinates)
            out |= {p.node for p in s.peels} | (set(s.epilogue) - s.coordinates)
            if all(decide(o).pool is not None for o in opts):  # fuse_pool_epilogue: the pool and what follows it
                out |= set(s.pool)
            if all(decide(o).rows for o in opts):  # fuse_row_epilogue: the reductions and what follows them
                out |= set(s.rows)
            if all(decide(o).stats for o in opts):  # every option computes the statistics itself
                anc = row_ancestors(cx, [p.vec for p in row_peels(s.peels)], s.axis)
                out |= {i for i in anc if not isinstance(cx.node(i), ir.Input)}
                for r in anc:
                    j = cx.node(r).x if isinstance(cx.node(r), ir.Reduce) else None
                    while j is not None and j != s.base and isinstance(cx.node(j), (ir.Unary, ir.Cast)):
                        out.add(j)
                        j = cx.node(j).x
    return out


# ------------------------------------------------------------------ enumeration
def _combos(options: list[list[Option]]) -> list[tuple[str, tuple[Option, ...]]]:
    """(name, one option per site) for the candidates, the default (first options) first."""
    if math.prod(len(o) for o in options) <= MAX_CANDIDATES:
        combos = list(itertools.product(*options))
        names = ["+".join(o.label for o in c if o.label) or "fused" for c in combos]
        # many sites, or labels that do not tell the combinations apart (two plain matmuls, each
        # split or not, both read "split_k"): the index of each choice instead
        if max(map(len, names)) > MAX_CANDIDATE_NAME or len(set(names)) < len(names):
            names = ["variant_" + "".join(str(opts.index(o)) for o, opts in zip(c, options) if len(opts) > 1)
                     for c in combos]
        return list(zip(names, combos))
    default = tuple(o[0] for o in options)
    out = [("default", default)]
    for j, opts in enumerate(options):
        for alt in opts[1:]:
            # (an option of no steps: a plain matmul left unsplit beside its split_k option)
            name = f"{alt.label or 'alt'}_at_{(alt.steps[0].at if alt.steps else alt.owner_at)[0]}"
            out.append((name, default[:j] + (alt,) + default[j + 1:]))
    return out


PRENORM = "prenorm"  # the name of the second family's candidates (_families)


# the unfused candidate is one kernel per computed node: past this many, where a fused candidate
# exists, it is not offered (`leantile kernels` lowered 500 kernels for a 500-op chain)
MAX_UNFUSED_KERNELS = 256


def computed(g: ir.Graph) -> int:
    """The nodes of g a kernel computes (not inputs, constants, size constants)."""
    return sum(not isinstance(n, (ir.Input, ir.Const, ir.SizeConst)) for n in g.nodes)


def _candidates(families: list[list[list[Option]]], computed: int = 0) -> list[Candidate]:
    """The candidates of the families' option combinations, then the unfused one (`direct` where
    nothing fuses), left out where a fused one exists and `computed` (the graph's computed
    nodes) is past MAX_UNFUSED_KERNELS."""
    per_family: list[list[Candidate]] = []
    for f, options in enumerate(families):
        per_family.append([])
        for name, combo in _combos(options):
            steps = tuple(st for o in combo for st in o.steps)
            if f:
                name = PRENORM if name == "fused" else f"{PRENORM}_{name}"
            if steps:
                per_family[-1].append(Candidate(name, steps, ", ".join(sorted({st.rule for st in steps}))))
    # where the first family folds a gain into a weight (gain_fold, not yet timed on a GPU), the
    # prenorm family's plans (measured: the norm's kernel, then the GEMM) come first
    gain = any(p.kind == "gain" for opts in families[0] for o in opts if isinstance(o.site, GemmSite)
               for p in o.site.peels)
    out = [c for fam in (per_family[::-1] if gain and len(per_family) > 1 else per_family) for c in fam]
    # A candidate with no rule applied (for a lone matmul that is already the one GEMM), unless
    # the graph is too large for one kernel per node and something fuses
    if not out or computed <= MAX_UNFUSED_KERNELS:
        out.append(Candidate("unfused" if out else "direct", (), "one kernel per node, global intermediates"))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise RuntimeError(f"leantile bug: two candidates share a name ({names})")
    return out


def candidates(g: ir.Graph, target: Target = DEFAULT) -> list[Candidate]:
    """g's candidate derivations, the default first. Where flatten_reduction merges axes, the
    fused candidates are derived on the merged graph and begin with its steps; the unfused one
    (no steps) stays on g itself."""
    with gc_paused():
        h, flat, _ = flatten(g)
        return _prefixed(_candidates(_families(Ctx(h, target)), computed(h)), flat)


def _prefixed(cands: list[Candidate], flat: tuple) -> list[Candidate]:
    """The candidates of the merged graph, each fused one beginning with the merges' steps
    (flatten_reduction, merge_gemm_axes); the lone GEMM that no other rule fuses ("direct") is
    the merged graph's too (X[b, t, k] W as one GEMM over b t rows)."""
    return [replace(c, steps=flat + c.steps) if c.steps or c.name == "direct" else c for c in cands] if flat else cands


def _flattened(g: ir.Graph, steps, target: Target) -> tuple[Ctx, tuple, dict]:
    """(the context to replay in, the steps left, Plan.merged): the merged graph where the
    steps begin with flatten_reduction's steps for g, else g."""
    steps = tuple(steps)
    if any(st.rule in (FLATTEN.name, MERGE_AXES.name, MASK_BOUNDS.name) for st in steps):
        h, flat, merged = flatten(g)
        if not flat or steps[:len(flat)] != flat:
            raise DerivationError(f"graph {g.name!r}: the derivation's {FLATTEN.name} steps are not the "
                                  f"ones the graph allows ({len(flat)} merges: "
                                  f"{', '.join(st.params['axes'] for st in flat) or 'none'})")
        return Ctx(h, target), steps[len(flat):], merged
    return Ctx(g, target), steps, {}


def refusals(g: ir.Graph, target: Target = DEFAULT) -> list[str]:
    """Where a rule's pattern almost matches but the rule does not fire, and why (a side
    condition of its lemma, or a kernel too big for the target at the default tiles): one
    line each, in graph order. The candidates derive offers are built without them."""
    with gc_paused():
        cx = Ctx(flatten(g)[0], target)
        _families(cx)
        return refusal_lines(cx)


def refusal_lines(cx: Ctx) -> list[str]:
    """cx's refusals (after _options(cx)), one line each, without repeats, in graph order."""
    seen, out = set(), []
    for r in sorted(cx.refused, key=lambda r: (r.at, r.rule)):
        if str(r) not in seen:
            seen.add(str(r))
            out.append(str(r))
    return out


def default_steps(g: ir.Graph) -> tuple[ir.Step, ...]:
    return candidates(g)[0].steps


def _pick(g: ir.Graph, cands: list[Candidate], name: str | None) -> Candidate:
    if name is None:
        return cands[0]
    for c in cands:
        if c.name == name:
            return c
    raise DerivationError(f"graph {g.name!r}: no candidate {name!r} (candidates: {', '.join(c.name for c in cands)})")


def candidate(g: ir.Graph, name: str | None, target: Target = DEFAULT) -> Candidate:
    return _pick(g, candidates(g, target), name)


# ------------------------------------------------------------------ replay
def check_derivation(g: ir.Graph, target: Target = DEFAULT) -> list[str]:
    """One line per problem with g's derivation (empty when it replays; the empty derivation
    does). g must be a valid graph (ir.parse)."""
    with gc_paused():
        try:
            cx, steps, _ = _flattened(g, g.derivation, target)
        except DerivationError as e:
            return [str(e)]
        return _check(_families(cx), steps)


def _check(families: list[list[list[Option]]], steps) -> list[str]:
    try:
        _match(families, steps)
    except DerivationError as e:
        return [str(e)]
    return []


def _replay(cx: Ctx, families: list[list[list[Option]]], steps, tiles: dict | None, name: str,
            merged: dict | None = None) -> Plan:
    options, chosen = _match(families, steps)
    picked = [decide(opts[j]) for opts, j in zip(options, chosen)]
    given = check_tiles(tiles, user=False)  # the interpreter's checks derive at any block; users are held to UserTiles
    plan = _shaped_plan(cx, picked, given, name) or passes.run(
        assemble(cx, picked, {**default_tiles(cx), **given}, name), cx.target)
    problems = verify(plan, cx.g, cx.target)
    bugs = [p for p in problems if not p.startswith(TILE_PROBLEMS)]
    if bugs:  # derive built a plan that is not well formed: ours to fix, never the user's
        more = f" (and {len(bugs) - 1} more)" if len(bugs) > 1 else ""
        raise RuntimeError(f"leantile bug: plan {cx.g.name}/{name} fails verification: {bugs[0]}{more}")
    if problems:  # too big for the target at these tiles: smaller tiles may fit
        raise ir.GraphError([f"graph {cx.g.name!r}, candidate {name!r}: {problems[0]}"])
    return plan.model_copy(update={"merged": merged}) if merged else plan


def _shaped_plan(cx: Ctx, picked: list, given: dict, name: str) -> Plan | None:
    """The plan at the shape's tiles (shape_tiles), or None where the given tiles override them
    or they do not fit the target (a dual GEMM's two B tiles): then the defaults. The swapped
    few-row tiles are taken only where every tensor-core GEMM kernel swaps (a 16-row tile is
    worth it only so: plan.passes.swap_operands); else the shape's unswapped tiles."""
    for swap in (True, False):
        shaped = shape_tiles(cx, picked, swap)
        if not shaped or set(given) & set(shaped):
            return None
        plan = passes.run(assemble(cx, picked, {**default_tiles(cx), **shaped, **given}, name), cx.target)
        problems = verify(plan, cx.g, cx.target)
        if (any(reduce_layout_problem(plan, k) for k in plan.kernels)
                and (pow2 := shape_tiles(cx, picked, swap, pow2=True)) != shaped):
            # a one-wave tile of 96 or 192 columns whose kernel reduces an elementwise tile:
            # TileLang has no layout for it (plan.verify.reduce_layout_problem); power-of-two columns
            shaped, plan = pow2, passes.run(assemble(cx, picked, {**default_tiles(cx), **pow2, **given}, name),
                                                 cx.target)
            problems = verify(plan, cx.g, cx.target)
        fits = not problems
        if not shaped.get("swap_operands"):
            return plan if fits else None
        if fits and all(k.swapped for k in plan.kernels if any(isinstance(s, Gemm) and s.mma for s in k.statements())):
            return plan
    return None


def replay(g: ir.Graph, steps, tiles: dict | None = None, name: str = "custom", target: Target = DEFAULT) -> Plan:
    """Check the steps against the graph (they must be a derivation derive would produce)
    and build the plan they describe."""
    with gc_paused():
        cx, steps, merged = _flattened(g, steps, target)
        return _replay(cx, _families(cx), steps, tiles, name, merged)


def derive(g: ir.Graph, candidate_name: str | None = None, tiles: dict | None = None,
           target: Target = DEFAULT) -> Plan:
    """The pipeline: pick a candidate derivation, replay it, return the plan (for `target`: the
    GPU whose SMs and shared memory the tiles and splits are chosen for)."""
    with gc_paused():
        h, flat, merged = flatten(g)
        cx = Ctx(h, target)
        families = _families(cx)
        c = _pick(g, _prefixed(_candidates(families, computed(h)), flat), candidate_name)
        if flat and not c.steps:  # the unfused candidate: the graph as written
            cx = Ctx(g, target)
            return _replay(cx, _families(cx), (), tiles, c.name)
        return _replay(cx, families, c.steps[len(flat):], tiles, c.name, merged)
