"""The `leantile` command: one module per command in this package, each with register(sub);
the options several commands take are defined once (options.py).

Every command turns bad input into one line per problem (naming the node, field or file) and
exit status 1, never a traceback. An internal error is a bug in leantile: one line saying so,
exit status 2, and the traceback written to a log file (its path is in the line); `--debug`
(or LEANTILE_DEBUG=1) prints the traceback instead.

This package imports neither torch nor tilelang at import: `leantile --help`, `list`,
`validate` and `show` work where only pydantic is installed; commands that need more import
it when run."""
from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from importlib import import_module
from pathlib import Path

from .. import interrupts, ir
from ..files import UnsafePath
from .export import exported_graph  # noqa: F401  (used by tests and docs: the export of a source)
from .options import EXIT_BAD_INPUT, EXIT_BUG, ArgumentParser

# The command modules, in the order `leantile --help` lists them: leantile.cli.<module>.register(sub)
# (`list` is listing.py: a module named list would shadow the builtin in this package).
COMMANDS = ("listing", "show", "export", "validate", "derive", "kernels", "report", "search", "bench",
            "tune", "check_lean")


def build_parser() -> ArgumentParser:
    from .. import __version__

    p = ArgumentParser(prog="leantile", description="Fused GPU kernels for neural-network graphs, derived by "
                       "rewrites proven in Lean 4. `leantile list` shows the built-ins; `leantile derive "
                       "SOURCE` the derivation and plan; `leantile kernels SOURCE` the TileLang kernels.")
    p.add_argument("--version", action="version", version=f"leantile {__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in COMMANDS:
        import_module(f"{__name__}.{name}").register(sub)
    return p


def _one_line(msg) -> str:
    try:
        return " ".join(str(msg).split())
    except Exception:  # an exception whose own __str__ raises (a user's class)
        return f"({type(msg).__name__}: its message cannot be shown)"


def error_log_path() -> Path:
    """Where the traceback of an internal error goes: $XDG_STATE_HOME/leantile/ (~/.local/state)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "leantile" / "last-internal-error.log"


def _log_bug(e: BaseException, argv: list[str]) -> str:
    """Write the traceback; return ' (traceback in PATH)', or '' where it cannot be written."""
    path = error_log_path()
    text = (f"leantile {' '.join(argv)}\n{time.strftime('%Y-%m-%d %H:%M:%S')}\n\n"
            + "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    try:
        from ..files import write_atomic

        write_atomic(path, text)
    except Exception:
        return ""
    return f"; traceback in {path}"


# an OSError with no file named: the machine's, not leantile's (stdout on a full or read-only
# device, a terminal gone): one line, exit 1, not an internal error
ENVIRONMENT_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EIO", "EROFS", "EPIPE", "ENXIO")
                               if hasattr(errno, n))


def main(argv=None) -> int:
    with interrupts.handling():  # Ctrl-C and SIGTERM: "interrupted", 130 / 143 (leantile.interrupts)
        return _main(argv)


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv[:1] or bool(os.environ.get("LEANTILE_DEBUG"))
    try:
        args = build_parser().parse_args(argv)
        return args.fn(args)
    except SystemExit as e:  # argparse (--help, bad arguments) and commands that exit early
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    except ir.GraphError as e:
        for p in e.problems:
            print(f"error: {_one_line(p)}", file=sys.stderr)
        if not e.problems:  # never silent: exit 1 says the input was refused
            print("error: the input was refused (the error carried no message)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnsafePath as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        try:
            print("interrupted", file=sys.stderr)
        except OSError:
            pass
        return interrupts.exit_code(e)
    except BrokenPipeError:
        return 0
    except Exception as e:
        if interrupts.received() is not None:  # an interrupt that surfaced as another exception
            print("interrupted", file=sys.stderr)  # (a process pool broken by its children's SIGINT)
            return interrupts.exit_code()
        from ..derive import DerivationError

        runtime = sys.modules.get("leantile.runtime")  # loaded where a CompileError can come from
        if isinstance(e, DerivationError) or (runtime is not None and isinstance(e, runtime.CompileError)):
            print(f"error: {_one_line(e.args[0] if e.args else e)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(e, OSError) and e.filename is not None:  # the disk, a folder: the user's to fix
            print(f"error: {_one_line(e.filename)}: {e.strerror or e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS:  # stdout on a full disk, a dead terminal
            try:
                print(f"error: cannot write the output: {e.strerror or e}", file=sys.stderr)
            except OSError:
                pass
            return EXIT_BAD_INPUT
        if debug:
            traceback.print_exception(type(e), e, e.__traceback__)
        where = _last_frame(e)
        print(f"internal error (a bug in leantile, please report it with the command that caused it): "
              f"{type(e).__name__}: {_one_line(str(e))[:300]}{where}"
              f"{'' if debug else _log_bug(e, argv) + ' (--debug shows it)'}", file=sys.stderr)
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
