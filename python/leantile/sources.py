"""Where a graph comes from: a built-in name, a JSON file, or `module.py:function`."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from . import architectures, ir


def parse_sizes(pairs: list[str] | None) -> dict[str, int]:
    """`k=v` strings -> {k: int(v)}; errors name the bad pair."""
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ir.GraphError([f"--size {ir.shown(p)}: expected name=value"])
        if not re.fullmatch(ir.IDENTIFIER, k) or len(k) > ir.MAX_NAME:
            raise ir.GraphError([f"--size {ir.shown(p)}: {ir.shown(k)} is not an axis name"])
        if not re.fullmatch(r"[0-9]{1,12}", v.strip()):
            raise ir.GraphError([f"--size {ir.shown(p)}: {ir.shown(v)} is not a positive integer"])
        if k in out:  # the last one silently winning hides a typo
            raise ir.GraphError([f"--size {ir.shown(p)}: {k} given twice ({k}={out[k]} before)"])
        out[k] = int(v)
        if not 1 <= out[k] <= ir.MAX_AXIS_SIZE:
            raise ir.GraphError([f"--size {ir.shown(p)}: sizes lie in 1..{ir.MAX_AXIS_SIZE}"])
    return out


def _message(e: BaseException) -> str:
    """A user's exception's message on one line, at most 300 characters; its own __str__ may
    raise (it is the user's code): then the type alone is said."""
    try:
        return " ".join(str(e).split())[:300]
    except Exception:
        return "(its message cannot be shown: its __str__ raised)"


def _user_line(e: BaseException, p: Path):
    """The line of the user's file p where e happened, so errors point at their code: for a
    SyntaxError its own line, otherwise the last traceback frame inside p."""
    if isinstance(e, SyntaxError) and e.filename and Path(e.filename).resolve() == p.resolve():
        return e.lineno or "?"
    tb, line = e.__traceback__, None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == p.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return line or "?"


MAX_SOURCE_BYTES = 4 << 20  # a graph builder is a page of Python


def _from_python(spec: str, sizes: dict) -> ir.Graph:
    path, _, func = spec.rpartition(":")
    from .files import NotReadable, regular_file

    p = Path(path)
    if not p.exists():
        raise ir.GraphError([f"{spec}: no such file {path!r}"])
    try:  # Python's import reads it: a FIFO would block it, a huge file would be compiled
        regular_file(p, MAX_SOURCE_BYTES, "Python source")
    except NotReadable as e:
        raise ir.GraphError([str(e)]) from None
    name = f"leantile_user_{p.stem}"
    mod_spec = importlib.util.spec_from_file_location(name, p)
    mod = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = mod
    try:
        mod_spec.loader.exec_module(mod)
    except ir.GraphError as e:  # a graph built at import time
        sys.modules.pop(name, None)
        raise ir.GraphError([f"{path}:{_user_line(e, p)}: {x}" for x in e.problems]) from None
    except SystemExit as e:  # sys.exit() in the user's module: not ours to obey
        sys.modules.pop(name, None)
        raise ir.GraphError([f"{path}: the module called sys.exit({ir.shown(e.code)}) while loading"]) from None
    except (Exception, GeneratorExit) as e:  # the user's module: say where it broke
        sys.modules.pop(name, None)
        msg = e.msg if isinstance(e, SyntaxError) else _message(e)
        raise ir.GraphError([f"{path}:{_user_line(e, p)}: {type(e).__name__}: {msg}"]) from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ir.GraphError([f"{spec}: {path} defines no function {func!r}"])
    try:
        g = fn(**sizes)
    except ir.GraphError as e:  # the builder refused a node: the line that asked for it
        raise ir.GraphError([f"{path}:{_user_line(e, p)}: {func}: {x}" for x in e.problems]) from None
    except SystemExit as e:
        raise ir.GraphError([f"{spec}: the function called sys.exit({ir.shown(e.code)}) instead of "
                             "returning a graph"]) from None
    except (Exception, GeneratorExit) as e:  # GeneratorExit: a BaseException a user's code may raise
        raise ir.GraphError([f"{path}:{_user_line(e, p)}: {func}: {type(e).__name__}: {_message(e)}"]) from None
    if not isinstance(g, ir.Graph):
        raise ir.GraphError([f"{spec}: returned {type(g).__name__}, expected a leantile graph "
                             "(build it with leantile.dag.build_graph_with_output)"])
    # validated again, whole: a graph changed after it was built (model_copy, model_construct)
    # must meet every rule a JSON file meets, its names included, before any of it is used
    try:
        data = g.model_dump(mode="json", by_alias=True)
    except Exception as e:  # a model_construct'ed graph holding objects that do not serialise
        raise ir.GraphError([f"{spec}: the returned graph does not serialise ({type(e).__name__})"]) from None
    try:
        return ir.parse(data)
    except ir.GraphError as e:
        raise ir.GraphError([f"{spec}: returned graph: {x}" for x in e.problems]) from None


def load_json(path) -> ir.Graph:
    """A graph file, valid as `leantile validate` means it: schema, semantics, and the
    derivation it carries (replayed step by step), every problem one line naming the file."""
    return _checked_derivation(ir.load(path), path)


def _checked_derivation(g: ir.Graph, where) -> ir.Graph:
    """g, unless the derivation it carries is not one derive would write for it (every
    source is checked here, once, so no command checks again)."""
    from .derive import check_derivation

    problems = check_derivation(g) if g.derivation else []
    if problems:
        raise ir.GraphError([f"{where}: {p}" for p in problems])
    return g


def load_source(spec: str, sizes: dict | None = None) -> ir.Graph:
    sizes = sizes or {}
    if spec in architectures.NAMES:
        return architectures.build(spec, **sizes)
    if spec.endswith(".json"):
        g = load_json(spec)
        if sizes:
            raise ir.GraphError([f"{spec}: --size applies to built-ins and Python sources, not JSON"])
        return g
    if ".py:" in spec:
        return _checked_derivation(_from_python(spec, sizes), spec)
    raise ir.GraphError([f"{spec!r}: not a built-in ({', '.join(architectures.NAMES)}), "
                         "a .json file, or module.py:function"])


def load_source_at(spec: str, sizes: dict) -> ir.Graph:
    """The graph of `spec` at exactly the full shape `sizes`, in any process (a search's compile
    pool and GPU workers rebuild their workload this way). A JSON source has a fixed shape,
    which must be the one asked for."""
    if spec.endswith(".json"):
        g = load_json(spec)
        if dict(g.axes) != dict(sizes):
            raise ir.GraphError([f"{spec}: shape {dict(g.axes)} is not the requested {dict(sizes)}"])
        return g
    return load_source(spec, sizes)
