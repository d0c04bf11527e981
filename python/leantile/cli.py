"""The `leantile` command. Every subcommand turns bad input into one line per problem
(naming the node, field or file) and exit status 1, never a traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import architectures, ir
from .derive import DerivationError
from .files import write_atomic
from .sources import load_source, parse_sizes


def _fail(e: ir.GraphError) -> int:
    for p in e.problems:
        print(f"error: {p}", file=sys.stderr)
    return 1


def cmd_list(args) -> int:
    for name in architectures.NAMES:
        mod = architectures.module(name)
        sizes = " ".join(f"{k}={v}" for k, v in mod.DEFAULT_SIZES.items())
        doc = (mod.__doc__ or "").strip().splitlines()[0]
        print(f"{name:<24} {sizes:<36} {doc}")
    return 0


def cmd_show(args) -> int:
    from .show import graph_text

    print(graph_text(load_source(args.source, parse_sizes(args.size))))
    return 0


def exported_graph(source: str, sizes: dict | None = None) -> ir.Graph:
    """A graph with its default derivation attached, as `leantile export` writes it.
    `source`: a built-in name, file.json or module.py:function (see leantile.sources).
    A JSON file that already carries a derivation (a Lean export) keeps it."""
    from .derive import default_steps

    g = load_source(source, sizes)
    return g if g.derivation else g.with_derivation(default_steps(g))


def cmd_export(args) -> int:
    sources = args.sources or list(architectures.NAMES)
    sizes = parse_sizes(args.size)
    # build (and derive) everything first: a failing source leaves nothing written
    graphs = [exported_graph(s, sizes) for s in sources]
    names = [g.name for g in graphs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ir.GraphError([f"export: two sources build a graph named {dup[0]!r}; "
                             "each writes <name>.json"])
    out = Path(args.out)
    for g in graphs:
        write_atomic(out / f"{g.name}.json", g.to_json())
        print(f"wrote {out / (g.name + '.json')}")
    return 0


def cmd_validate(args) -> int:
    status = 0
    for f in args.files:
        try:
            g = ir.load(f)
            print(f"{f}: ok ({g.name}, {len(g.nodes)} nodes)")
        except ir.GraphError as e:
            status = 1
            for p in e.problems:
                print(p if p.startswith(str(f)) else f"{f}: {p}")
    return status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="leantile", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    sub.add_parser("list", help="list the built-in architectures").set_defaults(fn=cmd_list)

    s = sub.add_parser("show", help="print a graph as readable text")
    s.add_argument("source", help="built-in name, file.json, or module.py:function")
    s.add_argument("--size", nargs="*", metavar="K=V", help="override axis sizes")
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("export", help="write <out>/<name>.json (graph + default derivation)")
    s.add_argument("sources", nargs="*", metavar="SOURCE",
                   help="built-in name, file.json or module.py:function (default: every built-in)")
    s.add_argument("--out", default="exports")
    s.add_argument("--size", nargs="*", metavar="K=V", help="override axis sizes")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("validate", help="validate graph JSON files")
    s.add_argument("files", nargs="+")
    s.set_defaults(fn=cmd_validate)

    for extra in _extra_commands():
        extra(sub)
    return p


def _extra_commands():
    """Subcommands that live in their own modules (derive, check-lean, kernels, ...)."""
    from importlib import import_module

    return [import_module(f"{__package__}.{mod}").register for mod in EXTRA_COMMAND_MODULES]


PASSTHROUGH: set[str] = set()  # subcommands with their own argument parser (add_passthrough)


def add_passthrough(sub, name: str, help: str, main) -> None:
    """A subcommand that parses its own arguments, options and --help included:
    `leantile NAME ARGS...` calls main(ARGS)."""
    PASSTHROUGH.add(name)
    s = sub.add_parser(name, add_help=False, help=help)
    s.set_defaults(fn=lambda args: main(args.rest))

# Each module defines register(subparsers), keeping this file about the graph basics.
EXTRA_COMMAND_MODULES: tuple[str, ...] = (
    "derive.command", "lean_command", "kernels_command", "report.command", "search.command", "tune", "bench")


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PASSTHROUGH:  # these parse their own arguments, options included
        args = parser.parse_args(argv[:1])
        args.rest = argv[1:]
    else:
        args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ir.GraphError as e:
        return _fail(e)
    except (DerivationError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
