"""The unfused graph in torch: the oracle every fused plan is checked against.

A value is a torch tensor whose dimensions follow the node's `axes` list. Broadcasting
and contraction go by axis name, so we line operands up with `align` before each op.
"""

from __future__ import annotations

import math

import torch

from . import ir
from .ir import ops

TORCH_DTYPES = {d: getattr(torch, name) for d, name in ir.DTYPE_NAMES.items()}
_RANK = {torch.float16: 0, torch.bfloat16: 0, torch.float32: 1, torch.float64: 2}


def align(t: torch.Tensor, have: tuple[str, ...], want: tuple[str, ...]) -> torch.Tensor:
    """View t (axes `have`) as a tensor over `want`: permute, then size-1 dims for missing axes."""
    order = [have.index(a) for a in want if a in have]
    t = t.permute(order) if order != list(range(len(order))) else t
    shape, it = [], iter(t.shape)
    for a in want:
        shape.append(next(it) if a in have else 1)
    return t.reshape(shape)


gelu_tanh = ops.BY_NAME["gelu_tanh"].torch
UNARY = {n: ops.TORCH[n] for n in ops.UNARY}
BINARY = {n: ops.TORCH[n] for n in ops.BINARY}


def _promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    if a == b:
        return a
    return a if _RANK[a] > _RANK[b] else (b if _RANK[b] > _RANK[a] else torch.float32)


def check_inputs(g: ir.Graph, inputs: dict, device=None) -> None:
    """One clear error per bad input: missing, not a tensor, wrong shape, dtype or device."""
    problems = []
    devices = set()
    for n in g.inputs():
        if n.name not in inputs:
            problems.append(f"input {n.name!r}: missing (expected shape {list(g.shape(n.id))} over {list(n.axes)})")
            continue
        t = inputs[n.name]
        if not isinstance(t, torch.Tensor):
            problems.append(f"input {n.name!r}: expected a torch.Tensor, got {type(t).__name__}")
            continue
        if tuple(t.shape) != g.shape(n.id):
            problems.append(f"input {n.name!r}: shape {list(t.shape)}, expected {list(g.shape(n.id))} over {list(n.axes)}")
        if t.dtype != TORCH_DTYPES[n.dtype]:
            problems.append(f"input {n.name!r}: dtype {t.dtype}, expected {TORCH_DTYPES[n.dtype]} ({n.dtype})")
        devices.add(t.device)
        if device is not None and t.device != torch.device(device):
            problems.append(f"input {n.name!r}: on device {t.device}, expected {device}")
    extra = sorted(set(inputs) - {n.name for n in g.inputs()})
    if extra:
        problems.append(f"input {extra[0]!r}: not an input of graph {g.name!r}")
    if device is None and len(devices) > 1:
        problems.append(f"inputs: on several devices {sorted(map(str, devices))}")
    if problems:
        raise ir.GraphError(problems)


def plan_rounded(g: ir.Graph) -> frozenset[int]:
    """The nodes every plan rounds to their IR dtype: the outputs, the casts and the GEMM
    operands. Everything else a kernel holds in float32 (registers, and stored intermediates
    widened: derive's Ctx.stored_dtype)."""
    return frozenset(set(g.outputs.values()) | {n.id for n in g.nodes if isinstance(n, ir.Cast)}
                     | {a for n in g.nodes if isinstance(n, ir.Matmul) for a in (n.a, n.b)})


def evaluate(g: ir.Graph, inputs: dict, compute_dtype: torch.dtype | None = None,
             check: bool = True, tf32: bool = False, round_at: frozenset[int] = frozenset(),
             jitter: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Evaluate every output of g. With compute_dtype (float64 for oracles) all arithmetic
    runs in that dtype, except that a cast rounds to its own dtype (the user's rounding: inf past
    its range, as torch's .to(); every plan rounds it too, derive.kernels.node_map); otherwise
    each node's value has the IR's dtype (`ir.value_dtype`: a
    constant takes its operand's dtype, `x - 0.25` on an f16 x is f16), as the unfused graph
    computes it and as the kernels write their outputs. With tf32, a float32 contraction's
    operands are first rounded to TF32 (10-bit mantissa), as the GPU's tensor cores take them.
    round_at (with compute_dtype): these nodes' values are rounded to their IR dtype (as
    plan_rounded: what the kernels round, computing the rest in float32). jitter: every computed
    value moved by one unit of its dtype's rounding (2^-24 of itself in float32, a random sign
    per element, from this generator): the graph as another correct rounding computes it (a
    kernel's FMA, its own order of a sum), for judging.Judging (judge, ill_conditioned)."""
    if check:
        check_inputs(g, inputs)
    last = {}  # node -> the last node that reads it: its value is dropped after that one
    for n in g.nodes:
        for a in n.args():
            last[a] = n.id
    keep = set(g.outputs.values())
    vals: dict[int, torch.Tensor] = {}
    dtypes = ir.value_dtypes(g)
    scalars: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def arg(i: int, dt: torch.dtype) -> torch.Tensor:
        """Node i's value for a consumer computing in dt. A constant is made in dt (one fill per
        constant and dtype): in the IR, as in torch's `x - 0.25`, a constant never widens x."""
        c = g.nodes[i]
        if not isinstance(c, (ir.Const, ir.SizeConst)):
            return vals[i]
        if (i, dt) not in scalars:
            number = c.number if isinstance(c, ir.Const) else float(g.axes[c.axis])
            scalars[i, dt] = _scalar(number, inputs, _size_dtype(dt) if isinstance(c, ir.SizeConst) else dt)
        return scalars[i, dt]

    def dtype_of(i: int) -> torch.dtype:
        return compute_dtype or TORCH_DTYPES[dtypes[i]]

    for n in g.nodes:
        if isinstance(n, (ir.Const, ir.SizeConst)):
            continue  # made where it is used, in its user's dtype
        dt = dtype_of(n.id)
        vals[n.id] = _eval_node(g, n, lambda i, dt=dt: arg(i, dt), inputs, dt,
                                tf32 and (compute_dtype is None or bool(round_at)))
        if compute_dtype is not None and (n.id in round_at or isinstance(n, ir.Cast)):
            vals[n.id] = vals[n.id].to(TORCH_DTYPES[dtypes[n.id]]).to(dt)
        if jitter is not None and _rounds(n) and vals[n.id].is_floating_point():
            v = vals[n.id]
            unit = torch.finfo(v.dtype).eps / 2
            sign = torch.where(torch.rand(v.shape, generator=jitter) < 0.5, -1.0, 1.0).to(device=v.device, dtype=v.dtype)
            vals[n.id] = v + v * sign * unit
        for a in set(n.args()):  # a long chain holds one intermediate at a time, not all of them
            if last[a] == n.id and a not in keep:
                vals.pop(a, None)
    return {name: arg(i, dtype_of(i)) for name, i in g.outputs.items()}


# operations whose result every correct implementation gives exactly (a max, a comparison, a
# sign): evaluate's jitter leaves them, and an input, an iota's indices and a cast (the graph's own
# rounding, which every plan makes), alone
_EXACT = frozenset({"max", "min", "neg", "abs", *ops.COMPARISONS})


def _rounds(n) -> bool:
    """Whether node n's value is a rounded result that another correct order or fusion may round
    otherwise (a sum, a product, a transcendental, a contraction)."""
    if isinstance(n, ir.Reduce):
        return n.kind == "sum"
    if isinstance(n, (ir.Unary, ir.Binary)):
        return n.op not in _EXACT
    return isinstance(n, ir.Matmul)


def peak_bytes(g: ir.Graph, dtype_of) -> tuple[int, tuple[int, int]]:
    """An upper bound of the bytes `evaluate` holds at once (inputs not counted), from the shapes
    alone, so that a run too large is refused before it allocates (runtime.cpu_memory_limit):
    each value from its node until its last reader (outputs to the end), as evaluate frees them,
    plus, while a node is computed, a converted copy of each argument (align and .to may copy).
    dtype_of(i): the dtype node i's value has. (peak, (bytes, node id) of the largest value)."""
    last = {a: n.id for n in g.nodes for a in n.args()}
    keep = set(g.outputs.values())
    size = {n.id: math.prod(g.shape(n.id)) * dtype_of(n.id).itemsize for n in g.nodes
            if not isinstance(n, (ir.Const, ir.SizeConst))}  # a constant is a 0-d fill
    live = peak = 0
    for n in g.nodes:
        if n.id not in size:
            continue
        args = set(a for a in n.args() if a in size)
        live += size[n.id]
        peak = max(peak, live + sum(size[a] for a in args))
        live -= sum(size[a] for a in args if last[a] == n.id and a not in keep)
    return peak, max(((b, i) for i, b in size.items()), default=(0, -1))


def _scalar(value: float, like: dict, dtype: torch.dtype) -> torch.Tensor:
    """A 0-d tensor on the inputs' device, made by a fill (torch.full), not a host copy: the
    eager graph stays capturable in a CUDA graph (the benchmarks time it that way). A constant
    beyond the dtype's range rounds to +-inf, as a cast would (torch.full would raise)."""
    device = next((t.device for t in like.values()), "cpu")
    if dtype.is_floating_point and math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
        return torch.full((), value, dtype=torch.float64, device=device).to(dtype)
    return torch.full((), value, dtype=dtype, device=device)


def _size_dtype(dt: torch.dtype) -> torch.dtype:
    """The dtype a sizeConst (an axis length: a count, exact) is applied in by a node computing
    in dt: the accumulator's (float32) below float32, as every kernel computes `x / n` (the emitter
    writes `x / 131072.0` in float32 and rounds only what it stores). A count of 131072 in f16
    would be inf (issue 46: the reference crashed on a mean over 2^17 rows in an f16 graph)."""
    return torch.float32 if dt.is_floating_point and dt.itemsize < 4 else dt


def to_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 t as a TF32 tensor-core MMA reads it: the top 19 bits (sign, 8 exponent, 10
    mantissa), the low 13 ignored (rounded toward zero)."""
    bits = t.contiguous().view(torch.int32)
    return (bits & ~0x1FFF).view(torch.float32)


def _eval_node(g, n, arg, inputs, dt: torch.dtype, tf32: bool = False):
    """Node n's value in dt (its IR dtype, or the oracle's compute dtype); arg(i) gives an
    argument's value (a constant already in dt)."""
    if isinstance(n, ir.Input):
        return inputs[n.name].to(dt)
    if isinstance(n, ir.Iota):
        like = next((t for t in inputs.values()), None)
        return torch.arange(g.axes[n.axis], dtype=dt, device=like.device if like is not None else "cpu")
    if isinstance(n, ir.Unary):
        return UNARY[n.op](arg(n.x))
    if isinstance(n, ir.Cast):
        return arg(n.x).to(dt)
    ax = {i: g.nodes[i].axes for i in n.args()}
    if isinstance(n, ir.Binary):  # mixed operands take the IR's dtype (its first non-constant one's)
        a = align(arg(n.a), ax[n.a], n.axes)
        b = align(arg(n.b), ax[n.b], n.axes)
        sizes = [isinstance(g.nodes[i], ir.SizeConst) for i in (n.a, n.b)]
        if any(sizes):  # a count is exact, applied in float32 below it (see _size_dtype), rounded after
            wide = _size_dtype(dt)
            a, b = (t.to(wide) if size else t.to(dt).to(wide) for t, size in zip((a, b), sizes))
            return BINARY[n.op](a, b).to(dt)
        return BINARY[n.op](a.to(dt), b.to(dt))
    if isinstance(n, ir.Select):
        c, a, b = (align(arg(i), ax[i], n.axes) for i in (n.cond, n.a, n.b))
        return ops.TORCH["select"](c, a.to(dt), b.to(dt))
    if isinstance(n, ir.Reduce):
        dim = ax[n.x].index(n.axis)
        x = arg(n.x)
        return x.sum(dim) if n.kind == "sum" else x.amax(dim)
    if isinstance(n, ir.Matmul):
        a, b = arg(n.a).to(dt), arg(n.b).to(dt)
        if tf32 and dt == torch.float32:
            a, b = to_tf32(a), to_tf32(b)
        return contract(a, ax[n.a], b, ax[n.b], n.axis_a, n.axis_b, n.axes)
    raise ir.GraphError([f"node {n.id} ({n.op}): no reference semantics"])


def contract(a, axes_a, b, axes_b, axis_a, axis_b, out_axes):
    """Contract axis_a of a with axis_b of b; other shared names are batch axes."""
    names = {}

    def letter(name):
        return names.setdefault(name, chr(ord("a") + len(names)))

    k = letter("__k")
    sa = "".join(k if x == axis_a else letter(x) for x in axes_a)
    sb = "".join(k if x == axis_b else letter(x) for x in axes_b)
    so = "".join(letter(x) for x in out_axes)
    dt = _promote(a.dtype, b.dtype)
    return torch.einsum(f"{sa},{sb}->{so}", a.to(dt), b.to(dt))


def natural_scale(g: ir.Graph) -> float:
    """A standard deviation for random inputs: K^-1/4 for the largest contraction K, so that a
    product of two inputs summed over K has about unit variance, as a model's activations do.
    N(0, 1) inputs at LLaMA widths overflow f16 (GeGLU at d=4096: an output of 7.5e4 > 65504;
    an MLP at d=8192, n=28672 is inf almost everywhere) and a check would judge the overflow,
    not the kernel."""
    ks = [g.axes[n.axis_a] for n in g.nodes if isinstance(n, ir.Matmul)]
    return max(ks) ** -0.25 if ks else 1.0


def random_inputs(g: ir.Graph, seed: int = 0, dtype: str | None = None, device="cpu",
                  scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Fresh normal inputs (never zeros), in each input's dtype unless overridden."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for n in g.inputs():
        dt = TORCH_DTYPES[dtype or n.dtype]
        t = torch.randn(g.shape(n.id), generator=gen, dtype=torch.float64) * scale
        out[n.name] = t.to(dt).to(device)
    return out


def saved_from_forward(forward: ir.Graph, backward, inputs: dict) -> dict:
    """`inputs` of a backward graph (autodiff.vjp's `backward`) with its saved inputs (attention's
    O, its rows' max and sum) computed by the forward from the primal inputs, in float32, in
    place of drawn ones: drawn statistics are no training step's (a row sum near 0 overflows P;
    every plan, the unfused too, judged "wrong": benchmarks/flash_backward/variants.py at 2048,
    2026-11-30). The GPU campaign does the same from a campaign record (gpu_fuzz_parts.judge)."""
    from .autodiff import forward_saving
    out = evaluate(forward_saving(forward, backward), {n.name: inputs[n.name] for n in forward.inputs()},
                   compute_dtype=torch.float32, check=False)
    return {**inputs, **{k: out[k].to(inputs[k].dtype).reshape(inputs[k].shape).contiguous() for k in backward.saved}}
