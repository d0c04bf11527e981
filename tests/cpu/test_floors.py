"""Floors (issue 48; the code layout of the project's design notes): a module imports only from its own floor or the
floors below it, imports inside functions included (an AST walk of every module).

    1 target, interrupts, progress, errors, process_pool
    2 ir (the package: the graph IR, the op registry, axis names, sympy forms, the JSON schema), tiles,
      dag, files, autodiff (reverse mode: a graph's backward, another graph), chunking (a graph in chunks of
      an axis, another graph), train_step (a loss and its gradients, one graph)
    3 plan (the package: the plan IR, its passes, verifier and shared buffers), interp, reference, tolerance
    4 derive, architectures, sources
    5 cost, tuned (how a plan is picked: the model's choice, or a measured entry the runtime reads)
    6 emit, lower, codegen_repair, codegen_nan, codegen_retire, codegen_lines
    7 runtime, torch, binding, judging, chunked (a Kernel's input binding, its verdict, chunked kernels)
    8 bench, suite, train_bench, precompile, search, report, show, lean
    9 cli, entry, __main__

Within a floor (and within a package) no modules import each other in a circle either
(test_no_import_circle).

The package's __init__ is its facade (it re-exports every floor) and is not walked. The upward
arrows that remain are listed in KNOWN_UP, each with the step of issue 48 that removes it; the
test fails on any other, and on a listed one that is gone (so the list only shrinks)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "leantile"
FLOOR = {
    "target": 1, "interrupts": 1, "progress": 1, "errors": 1, "process_pool": 1,
    "ir": 2, "tiles": 2, "dag": 2, "files": 2, "autodiff": 2, "chunking": 2, "train_step": 2,
    "plan": 3, "interp": 3, "reference": 3, "tolerance": 3,
    "derive": 4, "architectures": 4, "sources": 4,
    "cost": 5, "tuned": 5,  # the tuned store is read by the runtime; search (8) writes it
    "emit": 6, "lower": 6, "codegen_repair": 6, "codegen_nan": 6, "codegen_retire": 6, "codegen_lines": 6,
    "runtime": 7, "torch": 7, "binding": 7, "judging": 7, "chunked": 7,
    "bench": 8, "suite": 8, "train_bench": 8, "precompile": 8, "search": 8, "report": 8, "show": 8, "lean": 8,
    "cli": 9, "entry": 9, "__main__": 9,
}
KNOWN_UP: dict = {}  # none left: step 2 made the plan list its shared temporaries (plan.shared)


def _imports(path: Path, package_root: Path = PACKAGE) -> list[tuple[list[str], int]]:
    """(module path inside leantile, line) of every import of the package in `path`."""
    parts = list(path.relative_to(package_root).with_suffix("").parts)
    package = parts[:-1]  # the module's own package (for relative imports)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                if node.module:
                    out.append((base + node.module.split("."), node.lineno))
                else:
                    out += [(base + [a.name], node.lineno) for a in node.names]
            elif node.module and node.module.split(".")[0] == "leantile":
                mod = node.module.split(".")[1:]
                out += [(mod, node.lineno)] if mod else [([a.name], node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name.split(".")[1:], node.lineno) for a in node.names if a.name.startswith("leantile.")]
    return out


def _arrows() -> tuple[dict, list[str]]:
    """({(module, target): [lines]} of upward imports, modules with no floor)."""
    up: dict[tuple[str, str], list[str]] = {}
    unplaced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel == Path("__init__.py"):
            continue
        top = rel.parts[0].removesuffix(".py")
        if top not in FLOOR:
            unplaced.append(str(rel))
            continue
        for mod, line in _imports(path):
            if not mod or mod[0].startswith("__"):
                continue
            if mod[0] not in FLOOR:
                unplaced.append(f"{rel}:{line} imports {'.'.join(mod)}")
            elif FLOOR[mod[0]] > FLOOR[top]:
                up.setdefault((top, ".".join(mod)), []).append(f"{rel}:{line}")
    return up, unplaced


def test_every_module_has_a_floor():
    assert _arrows()[1] == []


def test_no_module_imports_from_a_floor_above_it():
    up, _ = _arrows()
    new = {k: v for k, v in up.items() if k not in KNOWN_UP}
    assert not new, f"imports from a higher floor: {new}"
    gone = set(KNOWN_UP) - set(up)
    assert not gone, f"KNOWN_UP lists arrows that are gone (remove them): {sorted(gone)}"


def test_the_walk_sees_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "leantile"
    (pkg / "derive").mkdir(parents=True)
    f = pkg / "derive" / "x.py"
    f.write_text("from ..cost import choose\nfrom . import rules\ndef g():\n    from ..emit.kernel import k\n"
                 "    import leantile.cli\n")
    assert [m for m, _ in _imports(f, pkg)] == [["cost"], ["derive", "rules"], ["emit", "kernel"], ["cli"]]


MAX_LINES = 600  # the project's rule for a module's size (small modules, one concern each)


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def _module_graph(package_root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package modules it imports (dotted paths inside leantile; a package is its
    __init__), module- and function-level. `from .rules import group` is an arrow to rules.group:
    the import machinery runs rules/__init__ first, but a package's __init__ imports its own
    modules, so counting that arrow would make every package a circle of its own."""
    mods = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:  # the facade (leantile/__init__) is not walked
            mods[name] = path

    def resolve(parts: list[str]) -> str | None:
        for k in range(len(parts), 0, -1):  # `from .x import name`: x.name if a module, else x
            if ".".join(parts[:k]) in mods:
                return ".".join(parts[:k])
        return None

    return {name: {t for parts, _ in _imports(path, package_root) if (t := resolve(parts)) not in (None, name)}
            for name, path in mods.items()}


def test_no_import_circle():
    import graphlib
    try:
        graphlib.TopologicalSorter(_module_graph()).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"modules that import each other in a circle: {' -> '.join(e.args[1])}") from None


def test_the_circle_check_sees_a_function_level_circle(tmp_path):
    pkg = tmp_path / "leantile"
    pkg.mkdir()
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    assert _module_graph(pkg) == {"a": {"b"}, "b": {"a"}}
