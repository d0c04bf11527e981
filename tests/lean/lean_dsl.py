"""A small reader of the Lean DSL subset used by lean/LeanTile/DagM.lean and
lean/LeanTile/Architectures/*.lean, and an interpreter that replays it on the Python
builder (`leantile.dag.DagM`).

Subset: definitions whose body is a sequence of `let x ← op args` lines ending in
`pure x`; graph definitions `buildGraphWithOutput "name" [("axis", size), ...] do`.
Arguments are identifiers, string literals, `.sum`/`.max`, natural numbers and
lists of string literals. Anything else in a body line is an error, so the reader
cannot silently skip a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LEAN = REPO / "lean"
DAGM_FILE = LEAN / "LeanTile" / "DagM.lean"
ARCH_DIR = LEAN / "LeanTile" / "Architectures"

# Lean primitive builder -> Python DagM method.
# (maximum/minimum/absVal/castTo: the Lean names avoid the root names max/min/abs/cast.)
PRIMITIVES = {
    "input": "input", "const": "const", "epsConst": "eps_const", "sizeConst": "size_const",
    "iota": "iota",
    "exp": "exp", "exp2": "exp2", "neg": "neg", "square": "square", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "recip": "recip", "silu": "silu", "geluTanh": "gelu_tanh",
    "log": "log", "tanh": "tanh", "erf": "erf", "sigmoid": "sigmoid", "absVal": "abs",
    "castTo": "cast", "add": "add", "sub": "sub", "mul": "mul", "div": "div",
    "maximum": "max", "minimum": "min", "lt": "lt", "le": "le", "eq": "eq", "ge": "ge", "gt": "gt",
    "select": "select", "red": "red", "matmul": "matmul",
}
# Lean subdag -> Python DagM method (the Python mirror of the same subdag).
SUBDAGS = {
    "softmaxSubdag": "softmax", "meanAlongSubdag": "mean_along",
    "rmsNormSubdag": "rms_norm", "layerNormSubdag": "layer_norm",
}

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<list>\[[^\]]*\])|(?P<dot>\.[A-Za-z_]\w*)'
                    r'|(?P<num>\d+)|(?P<id>[A-Za-z_][\w\']*))')
_LET = re.compile(r'^\s*let\s+(?P<var>[A-Za-z_][\w\']*)\s*←\s*(?P<op>[A-Za-z_]\w*)(?P<args>.*)$')
_PURE = re.compile(r'^\s*pure\s+(?P<var>[A-Za-z_][\w\']*)\s*$')
_DEF = re.compile(r'^def\s+(?P<name>\w+)(?P<params>.*?):\s*(?P<ret>DagM Nat|Except String Graph)\s*:=\s*(?P<rest>.*)$')
_PARAM = re.compile(r'\((?P<names>[^:()]+):\s*(?P<type>[^:=()]+?)\s*(?::=\s*(?P<default>"[^"]*"|\S+))?\)')
_GRAPH = re.compile(r'buildGraphWithOutput\s+"(?P<name>[^"]+)"\s+\[(?P<axes>[^\]]*)\]\s+do\s*$')
_AXIS = re.compile(r'\(\s*"(?P<axis>[^"]+)"\s*,\s*(?P<size>\d+)\s*\)')


class DslError(ValueError):
    pass


@dataclass
class Call:
    var: str
    op: str
    args: list
    line: int


@dataclass
class Body:
    name: str
    params: list[tuple[str, str | None]]     # (name, default literal or None)
    calls: list[Call] = field(default_factory=list)
    result: str | None = None
    graph: str | None = None                 # graph name for buildGraphWithOutput defs
    axes: dict[str, int] = field(default_factory=dict)
    file: str = ""
    error: str | None = None                 # first line outside the subset, if any


def _strip_comment(line: str) -> str:
    i = line.find("--")
    return line if i < 0 else line[:i]


def parse_args(text: str, where: str) -> list:
    args, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise DslError(f"{where}: cannot read arguments {text[pos:]!r}")
        pos = m.end()
        if m.group("str") is not None:
            args.append(("str", m.group("str")[1:-1]))
        elif m.group("list") is not None:
            inner = m.group("list")[1:-1].strip()
            items = [s.strip() for s in inner.split(",")] if inner else []
            if not all(re.fullmatch(r'"[^"]*"', s) for s in items):
                raise DslError(f"{where}: only lists of string literals are supported: {m.group('list')}")
            args.append(("strs", [s[1:-1] for s in items]))
        elif m.group("dot") is not None:
            args.append(("ctor", m.group("dot")[1:]))
        elif m.group("num") is not None:
            args.append(("num", int(m.group("num"))))
        else:
            args.append(("var", m.group("id")))
    return args


def parse_file(path: Path) -> dict[str, Body]:
    """Every DSL definition in a file: def name -> Body."""
    out: dict[str, Body] = {}
    cur: Body | None = None
    lines = path.read_text().splitlines()
    for no, raw in enumerate(lines, 1):
        line = _strip_comment(raw)
        where = f"{path.relative_to(REPO)}:{no}"
        d = _DEF.match(line)
        if d:
            params = []
            for pm in _PARAM.finditer(d.group("params")):
                for n in pm.group("names").split():
                    default = pm.group("default")
                    params.append((n, default.strip('"') if default else None))
            cur = Body(d.group("name"), params, file=str(path.relative_to(REPO)))
            out[cur.name] = cur
            rest = d.group("rest").strip()
            if d.group("ret") == "Except String Graph":
                g = _GRAPH.search(rest) or (_GRAPH.search(lines[no].strip()) if no < len(lines) else None)
                if not g:
                    raise DslError(f"{where}: graph definition must be `buildGraphWithOutput \"name\" [axes] do`")
                cur.graph = g.group("name")
                cur.axes = {a.group("axis"): int(a.group("size")) for a in _AXIS.finditer(g.group("axes"))}
            continue
        if cur is None:
            continue
        if not line.strip():
            if cur.result is not None:
                cur = None
            continue
        lm = _LET.match(line)
        if lm:
            if cur.result is not None:
                cur.error = cur.error or f"{where}: `let` after `pure` in {cur.name}"
                continue
            try:
                args = parse_args(lm.group("args"), where)
            except DslError as e:
                cur.error = cur.error or str(e)
                continue
            cur.calls.append(Call(lm.group("var"), lm.group("op"), args, no))
            continue
        pm = _PURE.match(line)
        if pm:
            cur.result = pm.group("var")
            continue
        if line.startswith((" ", "\t")) and (cur.calls or cur.graph):
            stripped = line.strip()
            if stripped.startswith("buildGraphWithOutput"):
                continue
            cur.error = cur.error or f"{where}: line outside the DSL subset in {cur.name}: {stripped!r}"
            continue
        if cur.result is not None or not line.startswith((" ", "\t")):
            cur = None
    return out


def subdag_defs() -> dict[str, Body]:
    defs = parse_file(DAGM_FILE)
    return {k: v for k, v in defs.items() if k in SUBDAGS}


def architecture_defs() -> dict[str, Body]:
    """graph name -> Body, from every file under Architectures/."""
    out = {}
    for p in sorted(ARCH_DIR.glob("*.lean")):
        for body in parse_file(p).values():
            if body.graph is not None:
                if body.graph in out:
                    raise DslError(f"graph {body.graph!r} defined twice")
                out[body.graph] = body
    return out


class Interpreter:
    """Replays parsed Lean bodies on a Python DagM."""

    def __init__(self, g, subdags: dict[str, Body]):
        self.g = g
        self.subdags = subdags

    def _value(self, arg, env, where):
        kind, v = arg
        if kind == "var":
            if v not in env:
                raise DslError(f"{where}: unknown variable {v!r}")
            return env[v]
        if kind == "ctor":
            if v not in ("sum", "max"):
                raise DslError(f"{where}: unknown constructor .{v}")
            return v
        return v

    def call(self, op: str, values: list, where: str):
        if op in PRIMITIVES:
            from leantile.ir import GraphError

            try:
                return getattr(self.g, PRIMITIVES[op])(*values)
            except GraphError as e:  # the builder refused: name the Lean file and line
                raise DslError(f"{where}: {'; '.join(e.problems)}") from None
        if op in self.subdags:
            return self.run(self.subdags[op], values)
        raise DslError(f"{where}: {op!r} is neither a DagM builder nor a known subdag")

    def run(self, body: Body, values: list):
        if body.error:
            raise DslError(body.error)
        env = {}
        params = body.params
        if len(values) > len(params):
            raise DslError(f"{body.name}: too many arguments")
        for i, (name, default) in enumerate(params):
            if i < len(values):
                env[name] = values[i]
            elif default is not None:
                env[name] = default
            else:
                raise DslError(f"{body.name}: missing argument {name}")
        for c in body.calls:
            where = f"{body.file}:{c.line}"
            env[c.var] = self.call(c.op, [self._value(a, env, where) for a in c.args], where)
        if body.result is None or body.result not in env:
            raise DslError(f"{body.name}: no `pure x` result")
        return env[body.result]


def build_from_lean(graph_name: str):
    """The Python graph the Lean architecture file describes."""
    from leantile.dag import DagM

    body = architecture_defs()[graph_name]
    g = DagM(graph_name, body.axes)
    out = Interpreter(g, subdag_defs()).run(body, [])
    g.output("out", out)
    return g.graph()
