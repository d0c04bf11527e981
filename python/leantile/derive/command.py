"""`leantile derive SOURCE [--candidate K] [--tile k=v ...] [--json]`: the steps and the plan."""
from __future__ import annotations

from ..sources import load_source, parse_sizes
from .engine import Candidate, candidates, derive, replay
from .rules import rule


def plan_text(plan) -> str:
    lines = [f"plan {plan.graph} / {plan.candidate}  tiles: "
             + ", ".join(f"{k}={v}" for k, v in plan.tiles.items())]
    for k in plan.kernels:
        grid = " x ".join(f"{t.axis}/{t.block}" for t in k.grid) or "1"
        stream = f"  stream {k.stream.axis} by {k.stream.block} ({k.stream.stages} stages)" if k.stream else ""
        lines.append(f"  kernel {k.name}: {k.role}")
        lines.append(f"    grid {grid}{stream}")
        for b in k.buffers:
            lines.append(f"    {b.scope:<8} {b.name}[{', '.join(b.axes)}] {b.dtype}")
        for part in ("prologue", "body", "epilogue"):
            for s in getattr(k, part):
                fields = s.model_dump(exclude={"op"})
                desc = " ".join(f"{a}={v}" for a, v in fields.items())
                lines.append(f"    {part:<8} {s.op:<6} {desc}")
    return "\n".join(lines)


def cmd_derive(args) -> int:
    g = load_source(args.source, parse_sizes(args.size))
    tiles = parse_sizes(args.tile)
    cands = candidates(g)
    if g.derivation and not args.candidate:  # the file carries its derivation (Lean's): replay it
        chosen = Candidate("exported", tuple(g.derivation), "the derivation in the file")
        plan = replay(g, chosen.steps, tiles, chosen.name)
    else:
        plan = derive(g, args.candidate, tiles)
        chosen = next(c for c in cands if c.name == plan.candidate)
    if args.json:
        print(plan.model_dump_json(indent=1))
        return 0
    print(f"graph {g.name}: candidates " + ", ".join(c.name for c in cands))
    print(f"derivation ({chosen.name}):")
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
    s.add_argument("--candidate", help="candidate name (default: the first)")
    s.add_argument("--size", nargs="*", metavar="K=V", help="override axis sizes")
    s.add_argument("--tile", nargs="*", metavar="K=V", help="tile parameters: block_m block_n block_k stages threads")
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s.set_defaults(fn=cmd_derive)
