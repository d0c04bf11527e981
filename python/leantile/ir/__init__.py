"""The graph IR: pydantic models of the "leantile/v1" JSON, and its validation.

A graph is a list of numbered nodes over named axes. Every node records the axes of
its result, so a JSON file is self-describing and the validator can check that the
writer (Lean or Python) inferred the same shapes we do.

Byte layout (shared with the Lean exporter, which cannot do anything fancier):
compact JSON, keys sorted, one trailing newline. Constants are decimal strings so that
Lean and Python never disagree on how a float prints.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Literal, Union

from . import ops
from .axis_names import clash_problems
from ..errors import GraphError  # noqa: F401  (ir.GraphError: what callers catch)
from ..files import NotReadable, read_capped
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, TypeAdapter, ValidationError, field_validator

SCHEMA_ID = "leantile/v1"

DTYPES = ("f16", "bf16", "f32", "f64")
# every fact of a dtype, in one place: bytes per element, and the name torch and TileLang both give
# it (torch.float16, 'float16'); reference.TORCH_DTYPES, emit.common.TL_DTYPES and
# plan.verify.DTYPE_BYTES (which adds the accumulator's, "acc") are built from these
DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}
DTYPE_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}
# the 16-bit dtypes: what Hopper's wgmma multiplies from shared memory in either major order, the
# operands of the swapped, ping-pong and FA3-overlap schedules
HALF_DTYPES = frozenset({"f16", "bf16"})
UNARY_OPS = ops.UNARY  # from the one op registry (leantile.ir.ops)
BINARY_OPS = ops.BINARY
REDUCE_KINDS = ("sum", "max")
MAX_AXIS_SIZE = 1 << 31  # anything larger is a typo, not a tensor
# a tensor the kernels read or write: their index arithmetic is 32-bit (TileLang's int32 indices;
# 2^31 elements failed inside TileLang's lowering or with an OverflowError). Inputs and outputs
# are checked here; intermediates where a plan stores them (plan.verify: INDEX_PREFIX), so that
# flash attention's never-stored 2^32 scores stay allowed
MAX_TENSOR_ELEMENTS = (1 << 31) - 1

# Every name (graph, axis, input, output) is an identifier: names reach file names, generated
# Python and CUDA, reports and shell lines, and an identifier is safe in all of them (no
# quotes, newlines, NUL, path separators or Python syntax). The JSON Schema carries the same
# pattern, and the Lean exporter refuses other names (Export.lean, `isIdent`).
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_NAME = 64
# nodes of one graph: a transformer block is ~100; 10,000 is a whole model's worth of ops, and
# each kernel it leads to is seconds of lowering (docs/ir.md, Limits)
MAX_NODES = 10_000

# The Literal types are built from the tuples above, so each op list is written once.
# Strict types: the JSON Schema says integer and string, so "2048" is not a size and true
# is not 1 (pydantic's lax mode would coerce both).
Dtype = Literal[DTYPES]
Name = Annotated[StrictStr, Field(pattern=IDENTIFIER, min_length=1, max_length=MAX_NAME)]
AxisName = Name


def _json_integer(v):
    """An integer as JSON Schema defines one: a number with no fractional part (8 and 8.0),
    never a bool or a string (pydantic's lax mode would take true and "8")."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("Input should be a valid integer")
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError("Input should be a valid integer, got a number with a fractional part")
        v = int(v)
    return v


def json_int(**bounds):
    """An integer field with bounds (ge/le), in the JSON Schema as integer + minimum/maximum."""
    return Annotated[int, Field(**bounds), BeforeValidator(_json_integer)]


NodeId = json_int(ge=0)
DECIMAL = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"
# the one non-finite constant: the value a mask writes where a score must not count (exp(-inf) = 0,
# torch's masked_fill(~keep, -inf)); +inf and NaN have no use in a graph and stay refused
NEG_INF = "-inf"
CONST_VALUE = r"^([+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?|-inf)$"


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: NodeId
    axes: tuple[AxisName, ...]

    def args(self) -> tuple[int, ...]:
        """Ids of the nodes this node reads."""
        return ()


class Input(_Node):
    op: Literal["input"]
    name: Name
    dtype: Dtype


class Const(_Node):
    op: Literal["const"]
    # a decimal literal, e.g. "1e-05", or "-inf" (a mask value); the pattern is checked by
    # _finite_decimal (clearer message)
    value: Annotated[StrictStr, Field(max_length=64, json_schema_extra={"pattern": CONST_VALUE})]

    @field_validator("value")
    @classmethod
    def _finite_decimal(cls, v: str) -> str:
        if v == NEG_INF:
            return v
        if not re.fullmatch(DECIMAL, v):
            raise ValueError(f"const value {shown(v)} is not a decimal number (nor \"-inf\", the mask value)")
        x = float(v)
        if not math.isfinite(x):
            raise ValueError(f"const value {v!r} is not finite")
        return v

    @property
    def number(self) -> float:
        return float(self.value)


class SizeConst(_Node):
    op: Literal["sizeConst"]
    axis: AxisName


class Iota(_Node):
    """The position along `axis` (0, 1, ..., n-1): masks, clamps and one-hot labels."""
    op: Literal["iota"]
    axis: AxisName


class Unary(_Node):
    op: Literal[UNARY_OPS]
    x: NodeId

    def args(self):
        return (self.x,)


class Cast(_Node):
    op: Literal["cast"]
    x: NodeId
    dtype: Dtype

    def args(self):
        return (self.x,)


class Binary(_Node):
    op: Literal[BINARY_OPS]
    a: NodeId
    b: NodeId

    def args(self):
        return (self.a, self.b)


class Select(_Node):
    """a where cond != 0, else b (torch.where), broadcasting by axis name."""
    op: Literal["select"]
    cond: NodeId
    a: NodeId
    b: NodeId

    def args(self):
        return (self.cond, self.a, self.b)


class Reduce(_Node):
    op: Literal["reduce"]
    kind: Literal[REDUCE_KINDS]
    x: NodeId
    axis: AxisName

    def args(self):
        return (self.x,)


class Matmul(_Node):
    op: Literal["matmul"]
    a: NodeId
    b: NodeId
    axis_a: AxisName
    axis_b: AxisName

    def args(self):
        return (self.a, self.b)


Node = Annotated[
    Union[Input, Const, SizeConst, Iota, Unary, Cast, Binary, Select, Reduce, Matmul], Field(discriminator="op")
]


def _param_value(v):
    """A step parameter: an integer (not a bool) or a short string."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"a step parameter is an integer or a string, not {type(v).__name__}")
    if isinstance(v, str) and len(v) > MAX_NAME:
        raise ValueError(f"a string parameter has at most {MAX_NAME} characters")
    return v


class Step(BaseModel):
    """One derivation step: `rule` fired at nodes `at`, justified by Lean `theorem`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rule: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)]
    theorem: Annotated[StrictStr, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_.']*$")]
    at: tuple[NodeId, ...] = ()
    params: dict[Name, Annotated[Union[int, str], BeforeValidator(_param_value)]] = {}


class Graph(BaseModel):
    schema_: Literal["leantile/v1"] = Field(SCHEMA_ID, alias="schema")
    name: Name
    axes: dict[AxisName, json_int(ge=1, le=MAX_AXIS_SIZE)]
    nodes: tuple[Node, ...]
    outputs: dict[Name, NodeId]
    derivation: tuple[Step, ...] = ()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # -- convenience ---------------------------------------------------------
    def node(self, i: int):
        return self.nodes[i]

    def inputs(self) -> list[Input]:
        return [n for n in self.nodes if isinstance(n, Input)]

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.axes[a] for a in self.nodes[i].axes)

    def users(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args():
                out[a].append(n.id)
        return out

    def with_derivation(self, steps) -> "Graph":
        return self.model_copy(update={"derivation": tuple(steps)})

    def to_json(self) -> str:
        """Canonical bytes: compact, keys sorted, trailing newline (the Lean exporter's layout)."""
        data = self.model_dump(mode="json", by_alias=True)
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


# ---------------------------------------------------------------------------
# Shape rules: what axes a node's result has. Shared by the builder and validator.

def binary_axes(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """Broadcast by name: a's axes, then b's axes that a lacks."""
    return tuple(a) + tuple(x for x in b if x not in a)


def select_axes(cond: tuple[str, ...], a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """a's axes, then b's that a lacks, then cond's that neither has."""
    return binary_axes(binary_axes(a, b), cond)


def matmul_axes(a: tuple[str, ...], b: tuple[str, ...], axis_a: str, axis_b: str) -> tuple[str, ...]:
    """a's free axes, then b's axes that are neither contracted nor shared (batch) with a."""
    free_a = tuple(x for x in a if x != axis_a)
    return free_a + tuple(x for x in b if x != axis_b and x not in free_a)


def _infer_axes(n, prev: dict[int, tuple[str, ...]], axes: dict[str, int]) -> tuple[list[str], tuple | None]:
    """Return (problems, inferred axes) for node n given its arguments' axes."""
    where = f"node {n.id} ({n.op})"
    if isinstance(n, Input):
        if len(set(n.axes)) != len(n.axes):
            return [f"{where}: field 'axes' repeats an axis name {list(n.axes)}"], None
        return [], n.axes
    if isinstance(n, (Const,)):
        return [], ()
    if isinstance(n, SizeConst):
        if n.axis not in axes:
            return [f"{where}: field 'axis' names unknown axis {n.axis!r}"], None
        return [], ()
    if isinstance(n, Iota):
        if n.axis not in axes:
            return [f"{where}: field 'axis' names unknown axis {n.axis!r}"], None
        return [], (n.axis,)
    if isinstance(n, (Unary, Cast)):
        return [], prev[n.x]
    if isinstance(n, Select):
        return [], select_axes(prev[n.cond], prev[n.a], prev[n.b])
    if isinstance(n, Binary):
        return [], binary_axes(prev[n.a], prev[n.b])
    if isinstance(n, Reduce):
        if n.axis not in prev[n.x]:
            return [f"{where}: reduces over axis {n.axis!r}, which node {n.x} does not have {list(prev[n.x])}"], None
        return [], tuple(a for a in prev[n.x] if a != n.axis)
    if isinstance(n, Matmul):
        pa, pb = prev[n.a], prev[n.b]
        problems = []
        if n.axis_a not in pa:
            problems.append(f"{where}: field 'axis_a' {n.axis_a!r} is not an axis of node {n.a} {list(pa)}")
        if n.axis_b not in pb:
            problems.append(f"{where}: field 'axis_b' {n.axis_b!r} is not an axis of node {n.b} {list(pb)}")
        if problems:
            return problems, None
        if axes.get(n.axis_a) != axes.get(n.axis_b):
            return [f"{where}: contraction axes {n.axis_a}={axes.get(n.axis_a)} and "
                    f"{n.axis_b}={axes.get(n.axis_b)} differ in size"], None
        if n.axis_a != n.axis_b and n.axis_b in pa:
            return [f"{where}: contraction axis {n.axis_b!r} of node {n.b} also names a free axis of node {n.a}"], None
        return [], matmul_axes(pa, pb, n.axis_a, n.axis_b)
    return [f"{where}: unknown op"], None  # unreachable: pydantic rejects unknown ops


def value_dtype(n, dtypes: dict[int, str], nodes) -> str:
    """The dtype node n's value has on the GPU (the one rule; derive's Ctx.dtype_of uses it):
    an input's or a cast's own; else that of its first argument that is not a constant
    (2 * x has x's dtype); else f32. `dtypes` maps the earlier nodes (a dict or a list)."""
    if isinstance(n, (Input, Cast)):
        return n.dtype
    for a in ((n.a, n.b, n.cond) if isinstance(n, Select) else n.args()):  # select: its values' dtype
        if not isinstance(nodes[a], (Const, SizeConst)):
            return dtypes[a]
    return "f32"


def value_dtypes(g: Graph) -> list[str]:
    """Every node's value_dtype, by node id."""
    dtypes: list[str] = []
    for n in g.nodes:
        dtypes.append(value_dtype(n, dtypes, g.nodes))
    return dtypes


def output_dtypes(g: Graph) -> dict[str, str]:
    """Each output's dtype: its value's (what the kernels write and the reference returns)."""
    dtypes = value_dtypes(g)
    return {o: dtypes[i] for o, i in g.outputs.items()}


ARG_FIELDS = ("x", "a", "b", "cond")  # the fields by which a node names the nodes it reads


def with_args(n, new, **update):
    """Node n with each node it reads renamed by `new` (old id -> new id), and `update`'s fields:
    how a rewrite that renumbers a graph's nodes carries one over."""
    moved = {f: new[getattr(n, f)] for f in ARG_FIELDS if f in type(n).model_fields and getattr(n, f) is not None}
    return n.model_copy(update={**moved, **update})


def check(g: Graph) -> list[str]:
    """Semantic validation beyond the JSON shape. Returns one line per problem."""
    problems: list[str] = []
    prev: dict[int, tuple[str, ...]] = {}
    dtypes: dict[int, str] = {}
    if not g.nodes:
        problems.append("field 'nodes': a graph needs at least one node")
    if len(g.nodes) > MAX_NODES:
        return [f"field 'nodes': {len(g.nodes)} nodes, past the limit of {MAX_NODES} (ir.MAX_NODES): "
                "compile the model block by block"]
    for pos, n in enumerate(g.nodes):
        where = f"node {n.id} ({n.op})"
        if n.id != pos:
            problems.append(f"nodes[{pos}]: field 'id' is {n.id}, expected {pos} (ids are dense and in order)")
            return problems  # later messages would all be noise
        bad = False
        for a in n.args():
            if a >= len(g.nodes):
                problems.append(f"{where}: argument {a} is a dangling id (the graph has {len(g.nodes)} nodes)")
                bad = True
            elif a >= n.id:
                problems.append(f"{where}: argument {a} is not an earlier node (cycle or forward reference)")
                bad = True
            elif a not in prev:
                bad = True  # the argument itself was invalid; already reported
        unknown = [a for a in n.axes if a not in g.axes]
        if unknown:
            problems.append(f"{where}: field 'axes' names unknown axis {unknown[0]!r}")
            bad = True
        if bad:
            continue
        errs, inferred = _infer_axes(n, prev, g.axes)
        problems += errs
        if inferred is None:
            continue
        if tuple(inferred) != tuple(n.axes):
            problems.append(f"{where}: field 'axes' is {list(n.axes)} but the op gives {list(inferred)}")
            continue
        dtypes[n.id] = value_dtype(n, dtypes, g.nodes)
        if isinstance(n, Matmul) and dtypes[n.a] != dtypes[n.b]:
            # tensor-core GEMMs multiply one dtype (TileLang refuses f16 x bf16 on sm_90)
            problems.append(f"{where}: operands have different dtypes, {dtypes[n.a]} (node {n.a}) and "
                            f"{dtypes[n.b]} (node {n.b}); cast one to the other's dtype (op 'cast')")
            continue
        prev[n.id] = tuple(inferred)
    big = {n.id: n for n in g.nodes if isinstance(n, Input)} | {i: g.nodes[i] for i in g.outputs.values() if i < len(g.nodes)}
    for i, n in sorted(big.items()):
        count = math.prod(g.axes.get(a, 1) for a in n.axes)
        if count > MAX_TENSOR_ELEMENTS:
            what = f"input {n.name!r}" if isinstance(n, Input) else \
                f"output {next(o for o, j in g.outputs.items() if j == i)!r} (node {i})"
            problems.append(f"{what}: {count} elements, more than the {MAX_TENSOR_ELEMENTS} (2^31 - 1) a kernel "
                            "indexes with 32-bit integers; split it along an axis")
    names = [n.name for n in g.inputs()]
    for name in sorted({x for x in names if names.count(x) > 1}):
        problems.append(f"input {name!r}: declared more than once")
    if not g.outputs:
        problems.append("field 'outputs': a graph needs at least one output")
    for name, i in g.outputs.items():
        if i >= len(g.nodes):
            problems.append(f"output {name!r}: node {i} does not exist")
    for k, s in enumerate(g.derivation):
        for i in s.at:
            if i >= len(g.nodes):
                problems.append(f"derivation[{k}] ({s.rule}): field 'at' names missing node {i}")
    if not problems:  # a contraction that keeps its own axis: no plan can tile and stream it at once
        problems += clash_problems(g)
    return problems


_graph_adapter = TypeAdapter(Graph)


def shown(x) -> str:
    """A name from a document, safe to print on one line: itself when it is an identifier or
    a number, else its repr, shortened (it may hold newlines, NUL or megabytes)."""
    s = str(x)
    if isinstance(x, int) or re.fullmatch(IDENTIFIER, s) and len(s) <= MAX_NAME:
        return s
    r = repr(s)
    return r if len(r) <= 40 else r[:37] + "..."


def _pydantic_problems(e: ValidationError) -> list[str]:
    out = []
    for err in e.errors(include_url=False):
        loc = list(err["loc"])
        key = None
        if loc and loc[-1] == "[key]":  # a bad dict key: name it once, after the field
            loc, key = loc[:-2], loc[-2]
        # nodes.3.matmul.axis_a -> "node 3 field 'axis_a'"
        parts = [shown(p) for p in loc]
        if len(parts) >= 2 and parts[0] == "nodes":
            field = parts[3:] or parts[2:]
            label = f"node {parts[1]}" + (f" ({parts[2]})" if len(parts) > 2 else "")
            where = f"{label}: field '{'.'.join(field)}'" if field else label
        else:
            where = f"field '{'.'.join(parts)}'" if parts else "document"
        if key is not None:
            where += f" key {shown(key)}"
        msg = err["msg"]
        if err["type"] == "union_tag_invalid":  # the list of every op is too long for one line
            msg = f"unknown op {shown(err['ctx']['tag'])} (see docs/ir.md for the ops)"
        line = f"{where}: {msg}"
        if line not in out:
            out.append(line)
    return out


MAX_DOCUMENT_BYTES = 64 << 20  # a graph file is kilobytes; anything this large is not one
MAX_DEPTH = 64  # the format nests 4 deep; deeper is not a graph (and would exhaust the stack)


def _no_duplicate_keys(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):  # rare: find the key that repeats
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {shown(dup)} appears twice in one object")
    return d


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _depth_ok(text: str) -> bool:
    """Nesting depth of brackets is at most MAX_DEPTH, found without recursion (json.loads
    recurses once per level) and without a Python loop per character (a 100k-node graph is
    7 MB). Fast path: brackets counted over the raw text, in numpy; only when that says too
    deep are strings removed and the brackets counted again (a bracket inside a string is
    not nesting). Whatever a string could hide from the fast path, json.loads still stops at
    the recursion limit, and decode_json turns that into one line."""
    import numpy as np

    def deepest(t: str) -> int:
        b = np.frombuffer(t.encode("utf-8", "replace"), dtype=np.uint8)
        steps = (b == 91).astype(np.int32) + (b == 123) - (b == 93) - (b == 125)
        return int(steps.cumsum().max()) if len(b) else 0

    if deepest(text) <= MAX_DEPTH:
        return True
    return deepest(_NOT_BRACKET.sub("", _STRING.sub("", text))) <= MAX_DEPTH


def decode_json(text: str | bytes, what: str = "document"):
    """JSON text -> Python objects, every failure one GraphError line: not UTF-8, too large,
    nested too deep, integers too long to convert, duplicate keys, syntax errors."""
    if isinstance(text, bytes):
        if len(text) > MAX_DOCUMENT_BYTES:
            raise GraphError([f"{what}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB; not a graph file"])
        if text[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise GraphError([f"{what}: UTF-16 text; save it as UTF-8"])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GraphError([f"{what}: not UTF-8 text (byte {e.start}: {e.reason})"]) from None
    if len(text) > MAX_DOCUMENT_BYTES:
        raise GraphError([f"{what}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB; not a graph file"])
    if not _depth_ok(text):
        raise GraphError([f"{what}: JSON nested deeper than {MAX_DEPTH} levels; not a graph file"])
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise GraphError([f"{what}: not JSON ({e.msg} at line {e.lineno} column {e.colno})"]) from None
    except (ValueError, RecursionError) as e:  # a 5000-digit integer, a duplicate key
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "integer string conversion" in msg:
            msg = "an integer too long to be a size or an id"
        raise GraphError([f"{what}: not a valid graph document ({msg})"]) from None


def parse(data) -> Graph:
    """Validate a decoded JSON object (or a JSON string) and return the Graph."""
    if isinstance(data, (str, bytes)):
        data = decode_json(data)
    if not isinstance(data, dict):
        raise GraphError([f"document: expected a JSON object, got {type(data).__name__}"])
    if data.get("schema") != SCHEMA_ID:
        got = data.get("schema")
        got = "nothing" if got is None else shown(got) if isinstance(got, str) else f"a {type(got).__name__}"
        raise GraphError([f"field 'schema': expected {SCHEMA_ID!r}, got {got}"])
    try:
        g = Graph.model_validate(data)
    except ValidationError as e:
        raise GraphError(_pydantic_problems(e)) from None
    problems = check(g)
    if problems:
        raise GraphError(problems)
    return g


def load(path) -> Graph:
    """Read and validate a graph file; errors name the file."""
    from pathlib import Path

    p = Path(path)
    try:
        raw = read_capped(p, MAX_DOCUMENT_BYTES, "graph file")  # a FIFO or device is refused, not waited on
    except NotReadable as e:
        raise GraphError([str(e)]) from None
    try:
        return parse(raw)
    except GraphError as e:
        raise GraphError([f"{p}: {x}" for x in e.problems]) from None


def json_schema() -> dict:
    """The JSON Schema of a graph file. pydantic leaves out two rules the models enforce, so
    they are added here: dict keys (axis, output and parameter names) are identifiers
    (`propertyNames`), and `schema` is required."""
    s = Graph.model_json_schema(by_alias=True)
    names = {"pattern": IDENTIFIER, "maxLength": MAX_NAME, "minLength": 1}
    s["properties"]["axes"]["propertyNames"] = names
    s["properties"]["outputs"]["propertyNames"] = names
    s["$defs"]["Step"]["properties"]["params"]["propertyNames"] = names
    s["required"] = sorted(set(s.get("required", [])) | {"schema"})
    return s
