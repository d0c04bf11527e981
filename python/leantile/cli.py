"""The `leantile` command. Every subcommand turns bad input into one line per problem
(naming the node, field or file) and exit status 1, never a traceback; an internal error
is reported as a bug in one line with exit status 2 (LEANTILE_DEBUG=1 shows its traceback).

This module imports neither torch nor tilelang: `leantile --help`, `list`, `validate` and
`show` work where only pydantic is installed; commands that need more import it when run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import architectures, ir
from .files import UnsafePath, check_out_dir, under, write_atomic
from .sources import load_json, load_source, parse_sizes

EXIT_BAD_INPUT = 1
EXIT_BUG = 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 1 (bad input), so that
    status 2 means only "a bug in leantile"."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _fail(e: ir.GraphError) -> int:
    for p in e.problems:
        print(f"error: {_one_line(p)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _one_line(msg: str) -> str:
    return " ".join(str(msg).split()) if "\n" in str(msg) or "\r" in str(msg) else str(msg)


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
    # every path is checked before anything is written (a name can never leave --out)
    out = check_out_dir(args.out, "--out")
    paths = [under(out, f"{g.name}.json") for g in graphs]
    for g, path in zip(graphs, paths):
        write_atomic(path, g.to_json(), root=out)
        print(f"wrote {Path(args.out) / path.name}")
    return 0


def cmd_validate(args) -> int:
    """Everything `derive` and `kernels` would refuse is refused here: the JSON Schema's rules
    (strict types, identifier names), the graph's semantics, and the derivation it carries
    (each step's rule, theorem, sites and params replayed against the graph)."""
    status = 0
    for f in args.files:
        try:
            g = load_json(f)
            print(f"{f}: ok ({g.name}, {len(g.nodes)} nodes"
                  + (f", derivation of {len(g.derivation)} steps" if g.derivation else "") + ")")
        except ir.GraphError as e:
            status = 1
            for p in e.problems:
                p = _one_line(p)
                print(p if p.startswith(str(f)) else f"{f}: {p}")
    return status


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="leantile", description=__doc__.splitlines()[0])
    from . import __version__
    p.add_argument("--version", action="version", version=f"leantile {__version__}")
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
    for name, (module, help) in LAZY_PASSTHROUGH.items():
        add_passthrough(sub, name, help, _lazy_main(module))
    return p


def _lazy_main(module: str):
    """main(argv) of a command module that imports torch: imported only when run."""
    def run(argv):
        from importlib import import_module

        return import_module(f"{__package__}.{module}").main(argv)
    return run


# Commands that parse their own arguments and import torch at the top: imported when run.
LAZY_PASSTHROUGH = {
    "tune": ("tune", "sweep tile configs on a GPU and store the best (the user's tuned folder)"),
    "bench": ("bench", "check and time kernels against torch and vendor libraries (GPU)"),
}


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
    "derive.command", "lean_command", "kernels_command", "report.command", "search.command")


def main(argv=None) -> int:
    try:
        parser = build_parser()
        argv = sys.argv[1:] if argv is None else list(argv)
        if argv and argv[0] in PASSTHROUGH:  # these parse their own arguments, options included
            args = parser.parse_args(argv[:1])
            args.rest = argv[1:]
        else:
            args = parser.parse_args(argv)
        return args.fn(args)
    except SystemExit as e:  # argparse (--help, bad arguments) and commands that exit early
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    except ir.GraphError as e:
        return _fail(e)
    except UnsafePath as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        from .derive import DerivationError

        if isinstance(e, DerivationError):
            print(f"error: {_one_line(e.args[0] if e.args else e)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(e, OSError) and e.filename is not None:  # the disk, a folder: the user's to fix
            print(f"error: {_one_line(e.filename)}: {e.strerror or e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if os.environ.get("LEANTILE_DEBUG"):
            raise
        where = _last_frame(e)
        print(f"internal error (a bug in leantile, please report it with the command that caused it): "
              f"{type(e).__name__}: {_one_line(str(e))[:300]}{where} (LEANTILE_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return EXIT_BUG


def _last_frame(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    return f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"


if __name__ == "__main__":
    sys.exit(main())
