"""`leantile derive SOURCE [--candidate K] [--tile k=v ...] [--json]`: the steps and the plan."""
from __future__ import annotations

from ..sources import load_source, parse_sizes
from ..tiles import parse_tiles
from ..derive.context import Ctx, gc_paused
from ..derive.engine import _families, _pick, candidates, derive, refusal_lines
from ..derive.rules.flatten import flatten
from ..derive.rules import rule
from .options import add_size, add_tile

_FORMATS: dict[tuple[str, type], str] = {}


def _format(part: str, s) -> str:
    """'    <part> <op> field=value ...' for a statement (model_dump's fields but op, in their
    order), from one template per statement kind: a 100k-kernel plan prints ~10^6 lines."""
    fmt = _FORMATS.get((part, type(s)))
    if fmt is None:
        fields = " ".join(f"{f}={{{f}}}" for f in type(s).model_fields if f not in ("op", "boundary_only"))
        fmt = _FORMATS[part, type(s)] = f"    {part:<8} {s.op:<6} ".replace("{", "{{").replace("}", "}}") + fields
    # skip_masked_tiles: a mask statement interior key blocks do not run
    return fmt.format_map(vars(s)) + ("  (boundary blocks only)" if getattr(s, "boundary_only", False) else "")


def plan_text(plan) -> str:
    lines = [f"plan {plan.graph} / {plan.candidate}  tiles: "
             + ", ".join(f"{k}={v}" for k, v in plan.tiles.items())]
    outs = set(plan.outputs.values())
    for b in plan.globals:  # global memory: inputs, outputs, and what crosses kernels, with its dtype
        kind = "output" if b.name in outs else "input" if b.node is not None and b.dtype != "acc" and \
            not any(s.op == "store" and s.dst == b.name for k in plan.kernels for s in k.statements()) else "intermediate"
        lines.append(f"  global {kind:<12} {b.name}[{', '.join(b.axes)}] {b.dtype}" + (f"  ({b.why})" if b.why else ""))
    grids: dict[tuple, str] = {}  # kernels share their tiles and streams: format each once
    axes: dict[tuple, str] = {}
    for k in plan.kernels:
        key = (*map(id, k.grid), id(k.stream), k.packed)
        grid = grids.get(key)
        if grid is None:
            grid = " x ".join(f"{t.axis}/{t.block}" for t in k.grid) or "1"
            if k.packed:  # pack_query_group: these tiles are one row dimension on chip
                grid += f" (rows packed: {' x '.join(k.packed)})"
            stream = f"  stream {k.stream.axis} by {k.stream.block} ({k.stream.stages} stages)" if k.stream else ""
            if k.stream and k.stream.skip:
                from ..derive.rules.masks import describe
                stream += f", only key blocks with {describe(k.stream.skip, k.stream.axis)}"
            grid = grids[key] = f"    grid {grid}{stream}"
        lines.append(f"  kernel {k.name}: {k.role}")
        lines.append(grid)
        if k.swapped:  # plan.passes.swap_operands: acc^T = b^T a^T, (column, row) on chip
            lines.append(f"    accumulator [{', '.join(k.swapped)}] kept transposed (swap_operands)")
        if k.tail_of:  # plan.passes.last_arrival
            lines.append(f"    no launch of its own: run in {k.tail_of}'s, by the last of each tile's slices to finish "
                         "(last_arrival)")
        if k.wait_previous or k.launch_next:  # plan.passes.dependent_launch
            lines.append("    dependent launch: " + ", ".join(
                w for w, on in (("waits for the kernel before", k.wait_previous),
                                ("lets the next launch early", k.launch_next)) if on) + " (dependent_launch)")
        if k.flush_subnormals:  # plan.passes.flush_subnormals
            lines.append("    compiled with -ftz=true: exp2 is one MUFU.EX2, float32 subnormals flush to 0 (ftz)")
        if k.fast_math:  # plan.passes.fast_math
            lines.append("    compiled with --use_fast_math: exp, log, tanh as MUFU instructions, 16-bit stores (fast_math)")
        for b in k.buffers:
            if b.scope == "global":
                continue
            ax = axes.get(b.axes)
            if ax is None:
                ax = axes[b.axes] = ", ".join(b.axes)
            lines.append(f"    {b.scope:<8} {b.name}[{ax}] {b.dtype}")
        for part in ("prologue", "body", "epilogue", "second_pass"):
            lines += [_format(part, s) for s in getattr(k, part)]
    return "\n".join(lines)


def tuned_lines(g, candidates: set[str]) -> list[str]:
    """One line per tuned entry for g's shape and dtype, in lookup order (leantile.tuned):
    what leantile.compile runs on that GPU, and the folder it comes from."""
    from ..tuned import shipped_dir, tuned_entries

    dtype = g.inputs()[0].dtype if g.inputs() else "f16"
    lines = []
    for e, folder in tuned_entries(g.name, dict(g.axes), dtype):
        origin = "shipped" if folder.resolve() == shipped_dir().resolve() else "user"
        tiles = ", ".join(f"{k}={v}" for k, v in e["tiles"].items())
        note = "" if e["candidate"] in candidates else "; not a candidate of this graph, ignored"
        lines.append(f"  tuned    {e['gpu']}: {e['candidate']} {tiles} ({e['time_ms']:.4f} ms; "
                     f"{origin}, {folder / (g.name + '.json')}{note})")
    return lines


def cmd_derive(args) -> int:
    with gc_paused():  # a short-lived command building up to ~10^6 acyclic objects: see gc_paused
        return _derive(args)


def _derive(args) -> int:
    g = load_source(args.source, parse_sizes(args.size))
    tiles = parse_tiles(args.tile)
    # the candidates leantile.compile offers: on the graph with its reduced axes merged where
    # flatten_reduction merges them (a norm over (c, h, w)), each beginning with those steps
    cands = candidates(g)
    # nothing asked: the plan leantile.compile and `leantile kernels` ship (tuned.shipped_plan at
    # no GPU: the cost model's pick; the tuned entries per GPU are listed below). A carried
    # derivation (Lean's export) was checked at load (sources.load_source) and is named, not run
    how = "asked"
    if args.candidate or tiles:
        chosen = _pick(g, cands, args.candidate)
        plan = derive(g, chosen.name, tiles)
    else:
        from ..tuned import shipped_plan
        plan, how = shipped_plan(g, tuned=False)
        chosen = _pick(g, cands, plan.candidate)
    if args.json:
        print(plan.model_dump_json(indent=1))
        return 0
    print(f"graph {g.name}: candidates " + ", ".join(c.name for c in cands))
    for line in tuned_lines(g, {c.name for c in cands}):
        print(line)
    if args.all_candidates:
        for c in cands:
            print(f"  offered  {c.name}: {c.summary}")
        cx = Ctx(flatten(g)[0])
        _families(cx)
        refused = refusal_lines(cx)
        for line in refused:
            print(f"  refused  {line}")
        if not refused:
            print("  refused  (none: every rule whose pattern appears fires)")
    if g.derivation:
        same = [c.name for c in cands if tuple(c.steps) == tuple(g.derivation)]
        print(f"  exported derivation: candidate {same[0] if same else '(none of these)'}")
    print(f"derivation ({chosen.name}{', the default plan' if how == 'default' else ''}):")
    for k, s in enumerate(chosen.steps, 1):
        print(f"  {k}. {s.rule:<17} {s.theorem:<36} at {list(s.at)}"
              + (f" {dict(s.params)}" if s.params else ""))
        print(f"     {rule(s.rule).rewrite}")
    if not chosen.steps:
        print("  (no rule applied)")
    print(plan_text(plan))
    return 0


def register(sub):
    s = sub.add_parser("derive", help="show a derivation (rule, Lean theorem, site) and its tile plan")
    s.add_argument("source", help="built-in name, file.json, or module.py:function")
    s.add_argument("--candidate", default=None,
                   help="derivation candidate (default: the plan leantile.compile runs where no tuned entry "
                        "exists, the cost model's pick; tuned entries are listed)")
    add_size(s)
    add_tile(s)
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s.add_argument("--all-candidates", action="store_true",
                   help="list every candidate, and every rule that does not fire where its pattern almost "
                        "matches, with the reason")
    s.set_defaults(fn=cmd_derive)
