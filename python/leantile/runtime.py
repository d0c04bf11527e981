"""The one path from a graph to running kernels: choose the plan, emit, compile, allocate,
launch, verify, time. `leantile.compile` is this module's `compile`.

    k = leantile.compile("attention")            # built-in, exports/*.json, module.py:fn, Graph, DagM
    O = k(Q, K, V)                               # or k(Q=Q, K=K, V=V); a dict for several outputs
    k.verify(); k.benchmark(); k.plan; k.source
    k = leantile.compile(g, check=True)          # the first call of each input shape is verified

The plan: an explicit candidate and tiles when given; else the tuned entry for this graph's
shape, dtype and GPU (leantile.tuned: the user's `leantile search` results, then the shipped
configurations); else the default derivation.
Kernels are compiled by TileLang, whose disk cache (~/.tilelang/cache, keyed by the kernel's
TVMScript, target and TileLang version) lets a second process skip nvcc; within a process
compiled kernels are kept by emitted source and device.

On a machine without a GPU, `device="cpu"` runs the graph's float reference (leantile.reference,
float32 arithmetic rounded where every plan rounds), not the fused plan: fast, for testing a
model's wiring (validation, outputs, torch ops). `interpret=True` runs the plan itself with the
interpreter (leantile.interp): slow, for checking the plan. Either refuses a run whose estimated
memory passes `cpu_memory_limit()` before it allocates anything.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from . import interp, ir, reference
from .binding import GraphInputs
from .chunked import auto_chunks, chunked_kernel, in_place_sums
from .chunking import chunk as chunk_along
from .derive import DerivationError, derive
from .emit import emit_module, load_module
from .plan.storage import in_place, storage
from .judging import ILL_CONDITIONED_PROBES, Judging, ieee_fp32_matmuls  # noqa: F401  (re-exported)
from .tolerance import CAP, NOISE, TOLERANCE, output_tolerances, rel_err, tolerance as _tolerance  # noqa: F401  (the one accuracy check, re-exported)



class CompileError(ValueError):
    """What the user asked for cannot run here (no GPU, an unknown device kind): one line."""


def _graph(source, sizes: dict | None) -> ir.Graph:
    """The graph of compile()'s source, validated whole (one GraphError for every misuse)."""
    if isinstance(source, ir.Graph) or (hasattr(source, "graph") and callable(source.graph)):
        if sizes:
            raise ir.GraphError(["leantile.compile: sizes= applies to a built-in name or a module.py:function; "
                                 "a Graph (or DagM) has its own sizes: build it at the sizes wanted"])
        g = source if isinstance(source, ir.Graph) else source.graph()  # leantile.dag.DagM
        if not isinstance(g, ir.Graph):
            raise ir.GraphError([f"leantile.compile: {type(source).__name__}.graph() returned "
                                 f"{type(g).__name__}, not a leantile Graph"])
        try:  # a graph made or changed with model_construct / model_copy skipped validation
            data = g.model_dump(mode="json", by_alias=True)
        except Exception as e:
            raise ir.GraphError([f"leantile.compile: the graph does not serialise ({type(e).__name__}); "
                                 "build it with leantile.dag"]) from None
        return ir.parse(data)
    if not isinstance(source, (str, os.PathLike)):
        raise ir.GraphError([f"leantile.compile: source is a {type(source).__name__}; expected a Graph, a "
                             "leantile.dag.DagM, a built-in name, a .json path or module.py:function"])
    if sizes is not None and not isinstance(sizes, dict):
        raise ir.GraphError([f"leantile.compile: sizes= is a {type(sizes).__name__}; expected a dict axis -> size"])
    from .sources import load_source
    return load_source(os.fspath(source), sizes)


def _arguments(candidate, tiles, check, interpret=False) -> None:
    """compile()'s other arguments, each of the type it takes (GraphError naming the one that is not)."""
    if candidate is not None and not isinstance(candidate, str):
        raise ir.GraphError([f"leantile.compile: candidate= is a {type(candidate).__name__}; expected a "
                             "candidate's name (str; `leantile derive SOURCE` lists them)"])
    if tiles is not None and not isinstance(tiles, dict):
        raise ir.GraphError([f"leantile.compile: tiles= is a {type(tiles).__name__}; expected a dict such as "
                             "{'block_m': 128}"])
    if tiles:  # names, ranges and blocks the kernels can use (tiles.UserTiles), as --tile
        from .tiles import check_tiles
        check_tiles(tiles, "leantile.compile: tiles=")
    if not isinstance(check, bool):
        raise ir.GraphError([f"leantile.compile: check= is a {type(check).__name__}; expected True or False"])
    if not isinstance(interpret, bool):
        raise ir.GraphError([f"leantile.compile: interpret= is a {type(interpret).__name__}; expected True or False"])


def choose_plan(g: ir.Graph, candidate: str | None = None, tiles: dict | None = None,
                gpu: str | None = None, tuned: bool = True):
    """(plan, how): the asked candidate/tiles, how "asked"; else tuned.shipped_plan (the tuned
    entry for g's shape, dtype and `gpu`, else the cost model's first candidate at the shape's
    default tiles: the plan `leantile derive` shows by default too)."""
    if candidate is not None or tiles:
        return derive(g, candidate, tiles), "asked"  # an unknown candidate: DerivationError listing them
    from .tuned import shipped_plan
    return shipped_plan(g, gpu, tuned)


@dataclass
class _Compiled:
    module: Any
    launchers: dict = field(default_factory=dict)  # kernel name -> compiled TileLang kernel


_CACHE: dict[tuple, _Compiled] = {}


def emitted_module(source: str):
    """The emitted module of `source`, loaded under the name every process gives it (so that a
    compile in another process, the search's CPU stage, fills the disk cache this one reads)."""
    return load_module(source, f"leantile_{hashlib.sha256(source.encode()).hexdigest()[:12]}")


def _compiled(source: str, device: torch.device) -> _Compiled:
    key = (hashlib.sha256(source.encode()).hexdigest(), str(device))
    hit = _CACHE.get(key)
    if hit is None:
        module = emitted_module(source)
        launchers = {}
        if device.type == "cuda":
            with torch.cuda.device(device):
                launchers = module.compile_kernels(target="cuda")
        hit = _CACHE[key] = _Compiled(module, launchers)
    return hit


# A CPU run (reference or interpreter) estimated past this is refused before it allocates: past
# it torch raises an allocation error deep in a run, or the machine swaps (issue: verify on the
# CPU drew its inputs and ran before any estimate, past 5 GiB or into a torch RuntimeError).
MAX_CPU_BYTES = 8 << 30


def cpu_memory_limit() -> int:
    """The bytes a CPU run may take: MAX_CPU_BYTES, or half this machine's physical memory where
    that is less (the other half is the caller's: its model, its own tensors)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return MAX_CPU_BYTES
    return min(MAX_CPU_BYTES, physical // 2) if physical > 0 else MAX_CPU_BYTES


def _bytes(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else (f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n} bytes")


class Kernel(GraphInputs, Judging):
    """A derived plan, compiled for one device, called like a function."""

    def __init__(self, graph: ir.Graph, plan, how: str, device: torch.device, check: bool = False,
                 interpret: bool = False):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # "cuda" is the current GPU: tensors say cuda:N
            device = torch.device("cuda", torch.cuda.current_device())
        self.graph, self.plan, self.how, self.device = graph, plan, how, device
        self.check = check  # compile(check=True): run() verifies the first call of each input shape
        self._free_checked: int | None = None  # _fits_gpu's last estimate that fitted
        if interpret and device.type == "cuda":
            raise CompileError("leantile.compile: interpret=True runs the plan on the CPU; pass device='cpu'")
        self.interpret = interpret  # on the CPU: the plan interpreter (True) or the graph's reference
        self._checked: set[tuple] = set()  # the input shapes whose first call was judged right
        self.source = emit_module(plan)
        self._c = _compiled(self.source, device)
        m = self._c.module
        self._bind_to(graph)
        dts = {b["name"]: getattr(torch, b["dtype"]) for b in m.GLOBALS}
        # the graph's shapes (an output over a merged axis, flatten_reduction, comes back as the graph's)
        shapes = {b["name"]: tuple(m.USER_SHAPES.get(b["name"], b["shape"])) for b in m.GLOBALS}
        self.output_specs = {o: (shapes[b], dts[b]) for o, b in m.OUTPUTS.items()}

    def __repr__(self) -> str:
        path = "" if self.device.type == "cuda" else (" (interpreter)" if self.interpret else " (reference)")
        return (f"<leantile.Kernel {self.graph.name} / {self.plan.candidate} ({self.how}) on {self.device}{path}: "
                f"{', '.join(self.input_names)} -> {', '.join(self.output_names)}>")

    def run(self, inputs: dict[str, torch.Tensor], fill: float | None = None) -> dict[str, torch.Tensor]:
        """Launch every kernel on checked inputs; new outputs and intermediates (torch.empty, or
        filled with `fill`: NaN shows an element no kernel writes). {output name: tensor}.
        With compile(check=True), the first run of each input shape is verified (`checked`)."""
        if self.check:
            shapes = tuple((n, tuple(t.shape)) for n, t in sorted(inputs.items()))
            if shapes not in self._checked:
                outs = self._launch(inputs, float("nan"))  # NaN-poisoned, as verify runs it
                if self.checked(inputs, outs):
                    self._checked.add(shapes)
                return outs
        return self._launch(inputs, fill)

    def _launch(self, inputs: dict[str, torch.Tensor], fill: float | None = None) -> dict[str, torch.Tensor]:
        if self.device.type != "cuda":
            self._fits_cpu()
            if self.interpret:  # the interpreter runs the plan itself (its buffers start as NaN)
                outs = interp.run(self.plan, inputs)
                return {o: t.to(self.output_specs[o][1]) for o, t in outs.items()}
            return self._reference_outputs(inputs)
        m = self._c.module  # the emitted module's own allocate and launch loop
        self._fits_gpu()
        return m.run(self._c.launchers, m.allocate(inputs, device=self.device, fill=fill), fill=fill)

    def gpu_bytes(self) -> tuple[int, str, int]:
        """(bytes, the largest tensor, its bytes) a GPU run allocates: every output and global
        intermediate of the plan, at once (the emitted module's allocate), float32 for "acc"."""
        tensors = []
        guests = storage(self.plan)  # kept in a host's bytes (plan.storage): nothing of their own
        for b in self.plan.globals:
            if b.name in self.input_names or b.name in guests or b.name in self.plan.in_place:  # the caller's
                continue
            dt = torch.float32 if b.dtype == "acc" else reference.TORCH_DTYPES[b.dtype]
            tensors.append((math.prod(self.plan.axes[a] for a in b.axes) * dt.itemsize,
                            f"plan buffer {b.name!r} {list(b.axes)} in {dt}"))
        size, largest = max(tensors, default=(0, "nothing"))
        return sum(t for t, _ in tensors), largest, size

    def _fits_gpu(self) -> None:
        """One GraphError, before anything is allocated, where a GPU run's outputs and
        intermediates (gpu_bytes) pass the device's free memory (issue 49: a norm over
        112 x 64 x 512 x 512 must fail clearly where it cannot run, not in a torch OOM half-way)."""
        if self._free_checked is not None or torch.cuda.is_current_stream_capturing():
            return  # it fitted before (the plan's sizes are fixed: gpu_bytes, 10-120 us of Python
            # over the plan's storage, is not asked again); under CUDA graph capture: no query
        need, largest, size = self.gpu_bytes()
        free, _ = torch.cuda.mem_get_info(self.device)
        # what torch's caching allocator holds but does not use is free to this run too
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        if need > free:
            raise ir.GraphError([
                f"{self.graph.name}: a run on {self.device} would allocate about {_bytes(need)} of outputs and "
                f"intermediates, past the {_bytes(free)} free on it; the largest is {largest} ({_bytes(size)}): "
                f"compile smaller sizes or free memory"])
        self._free_checked = need

    def _reference_dtype(self) -> torch.dtype:
        """The CPU default's arithmetic: float32, as the kernels' registers (float64 where the
        graph has an f64 value, which float32 would round)."""
        return torch.float64 if "f64" in ir.value_dtypes(self.graph) else torch.float32

    def _reference_outputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The CPU default: the unfused graph in float32, rounded to its IR dtype where every plan
        rounds (reference.plan_rounded: outputs, casts, GEMM operands), each output a new
        contiguous tensor of its output_specs shape and dtype. One torch op per node where the
        interpreter runs one per tile step (at docs/pytorch.md's sizes: 0.26 s a call, against 255 s)."""
        g = self.graph
        ref = reference.evaluate(g, inputs, compute_dtype=self._reference_dtype(), check=False,
                                 round_at=reference.plan_rounded(g))
        # copied into fresh tensors: an output that is an input (or two outputs of one node)
        # would otherwise come back as the same storage, which no kernel returns
        return {o: torch.empty(self.output_specs[o][0], dtype=self.output_specs[o][1]).copy_(ref[o])
                for o in self.output_names}

    def cpu_bytes(self, verify: bool = False) -> tuple[int, str, int]:
        """(bytes, the largest tensor named, its bytes): an upper bound of what one CPU run takes,
        from the shapes alone. The inputs and outputs; with the interpreter every global buffer of
        the plan (all allocated at once), else the reference's peak (reference.peak_bytes). verify
        adds its float64 draw of an input, the float32 oracle's outputs, the larger of its
        references' peaks (the oracle, the graph in its own dtypes: one after the other) and the
        float64 copies rel_err makes of an output and its two references."""
        g = self.graph
        own = ir.value_dtypes(g)

        def dtype(i: int) -> torch.dtype:
            return reference.TORCH_DTYPES[own[i]]

        def named(n, dt: torch.dtype) -> tuple[int, str]:  # one tensor: bytes, what it is
            what = f"input {n.name!r}" if isinstance(n, ir.Input) else f"node {n.id} ({n.op})"
            return math.prod(g.shape(n.id)) * dt.itemsize, f"{what} {list(n.axes)} in {dt}"

        def peak(dtype_of) -> tuple[int, tuple[int, str]]:
            total, (size, i) = reference.peak_bytes(g, dtype_of)
            return total, ((size, named(g.nodes[i], dtype_of(i))[1]) if i >= 0 else (0, ""))

        def output(o: str, dt: torch.dtype) -> tuple[int, str]:
            shape = self.output_specs[o][0]
            return math.prod(shape) * dt.itemsize, f"output {o!r} {list(shape)} in {dt}"

        tensors = [named(n, dtype(n.id)) for n in g.inputs()]
        tensors += [output(o, dt) for o, (_, dt) in self.output_specs.items()]
        total = sum(b for b, _ in tensors)
        if self.interpret:
            for b in self.plan.globals:
                if b.name not in self.input_names:  # the inputs' buffers are the caller's tensors
                    dt = torch.float32 if b.dtype == "acc" else reference.TORCH_DTYPES[b.dtype]
                    tensors.append((math.prod(self.plan.axes[a] for a in b.axes) * dt.itemsize,
                                    f"plan buffer {b.name!r} {list(b.axes)} in {dt}"))
                    total += tensors[-1][0]
        else:
            computed = self._reference_dtype()
            work, largest = peak(lambda i: computed)
            total, tensors = total + work, tensors + [largest]
        if verify:  # references(): the float32 oracle, then the graph in its own dtypes
            oracle, own_dtypes = peak(lambda i: torch.float32), peak(dtype)
            drawn = max((named(n, torch.float64) for n in g.inputs()), default=(0, ""))
            judged = max((output(o, torch.float64) for o in self.output_specs), default=(0, ""))
            total += (drawn[0] + sum(output(o, torch.float32)[0] for o in self.output_specs)
                      + max(oracle[0], own_dtypes[0]) + 3 * judged[0])
            tensors += [drawn, judged, oracle[1], own_dtypes[1]]
        size, largest = max(tensors, default=(0, "nothing"))
        return total, largest, size

    def _fits_cpu(self, verify: bool = False) -> None:
        """One GraphError, before anything is allocated, where a CPU run's estimate (cpu_bytes)
        passes cpu_memory_limit()."""
        need, largest, size = self.cpu_bytes(verify)
        limit = cpu_memory_limit()
        if need > limit:
            how = "the plan interpreter" if self.interpret else "the graph's reference"
            raise ir.GraphError([
                f"{self.graph.name}: {'verify' if verify else 'a run'} on the CPU ({how}) would need about "
                f"{_bytes(need)}, past the limit of {_bytes(limit)} (leantile.runtime.cpu_memory_limit); the largest "
                f"tensor is {largest} ({_bytes(size)}): compile smaller sizes, or run on a GPU"])

    def __call__(self, *args, **kwargs):
        outs = self.run(self.bind(args, kwargs))
        return outs[self.output_names[0]] if len(outs) == 1 else outs

    # -- checking and timing
    def verify(self, inputs: dict | None = None, seed: int = 0, tolerance: float | None = None,
               scale: float | None = None) -> dict:
        """Every output against the float32 reference on the same inputs (fresh random ones by
        default, of standard deviation `scale`: random_inputs' natural one unless given; scale=8
        probes large magnitudes, |x| past 20, where an f16 exp(x) overflows), outputs NaN-poisoned
        first, judged by leantile.tolerance (each output at the
        tolerance of the least precise value it is computed from, output_tolerances; the unfused
        graph in its own dtypes gives the rounding that is forgiven; `tolerance` overrides):
        {"ok", "rel_err": {output: error judged}, "tolerance": {output: tolerance},
        "plain_rel_err": {output: ||out - ref|| / ||ref||, nothing forgiven (what tables show)},
        "ill_conditioned": [failing outputs these inputs cannot judge (ill_conditioned)]}."""
        if self.device.type != "cuda":  # before its inputs are drawn: those may be what does not fit
            self._fits_cpu(verify=True)
        inputs = self.bind((), inputs) if inputs is not None else self.random_inputs(seed, scale)
        return self.judge(inputs, self._launch(inputs, fill=float("nan")), tolerance)

    def checked(self, inputs: dict, outs: dict) -> bool:
        """compile(check=True)'s check of one call: raise one GraphError naming every output of
        `outs` that verify's judgement finds wrong on the caller's own `inputs` (its error, its
        tolerance, the candidate). True where every output is judged right; False where some
        failing output is one these inputs cannot judge (ill_conditioned): it is let through,
        and the shape stays unchecked (its next call is judged again)."""
        v = self.judge(inputs, outs)
        wrong = [o for o in self.output_names if not v["rel_err"][o] <= v["tolerance"][o]
                 and o not in v["ill_conditioned"]]
        if wrong:
            raise ir.GraphError([
                f"leantile.compile(check=True): graph {self.graph.name!r}, candidate {self.plan.candidate!r} "
                f"({self.how}, tiles {dict(self.plan.tiles or {})}) on {self.device}: output {o!r} is wrong on these "
                f"inputs: rel err {v['rel_err'][o]:.3g} > tolerance {v['tolerance'][o]:.3g} against the float32 reference"
                for o in wrong])
        return v["ok"]

    def benchmark(self, inputs: dict | None = None, seed: int = 0, rep: int = 100) -> float:
        """GPU time in ms (triton's do_bench_cudagraph median: launch overhead excluded)."""
        if self.device.type != "cuda":
            raise CompileError("benchmark: needs a CUDA GPU (on the CPU this kernel runs the reference or the interpreter)")
        import triton.testing as tt
        inputs = self.bind((), inputs) if inputs is not None else self.random_inputs(seed)
        self._launch(inputs)  # the launches alone (a check=True kernel's check is no part of its time)
        return tt.do_bench_cudagraph(lambda: self._launch(inputs), rep=rep, return_mode="median")


def compile(source, *, candidate: str | None = None, tiles: dict | None = None, device=None,
            sizes: dict | None = None, tuned: bool = True, check: bool = False,
            interpret: bool = False, chunk: dict | bool | None = None):
    """A Kernel for `source` (a Graph, a leantile.dag.DagM, a built-in name, an exports/*.json
    path or module.py:function, at `sizes` where given). device: a CUDA device (default: the
    current one), or "cpu".

    On the CPU the default runs the graph's float reference, NOT the fused plan: the unfused graph
    in float32, rounded where every plan rounds, outputs of the kernel's dtypes and shapes (fast:
    one torch op per node; for a model's wiring). interpret=True runs the derived plan itself with
    the interpreter, tile by tile (slow: minutes at model sizes; for checking the plan). Either
    raises one GraphError, before allocating, where a run's estimated memory passes
    cpu_memory_limit() (MAX_CPU_BYTES, 8 GiB, or half the machine's memory). On a GPU the
    plan's TileLang kernels run; interpret=True there is a CompileError.

    check=True: the first call of each input shape (through the kernel, `run`, or
    leantile.torch.op) runs NaN-poisoned and is judged as `verify` judges, on the caller's own
    inputs (references computed beside it: about the time and memory of the unfused graph, twice);
    a wrong output raises one GraphError naming it, its rel err and tolerance, and the candidate.
    Later calls of that shape run unchecked (an output those inputs could not judge,
    ill_conditioned, leaves the shape to be checked at its next call). The check synchronises
    the device: make the first call outside CUDA graph capture.

    chunk: where the plan's intermediates pass chunked.CHUNK_BYTES (1 GiB) and the graph allows it,
    the kernel runs in chunks of one axis (a chunked.ChunkedKernel: called as a Kernel; an LM
    head's logits a chunk at a time), unless a candidate or tiles were named (True chunks those
    too); {axis: size} asks for those chunks (GraphError naming the node where the graph cannot be
    chunked so), False never chunks."""
    _arguments(candidate, tiles, check, interpret)
    g = _graph(source, sizes)
    if device is None:
        if not torch.cuda.is_available():
            raise CompileError("leantile.compile: no CUDA GPU here; pass device='cpu' to run the graph's reference "
                               "(or interpret=True: the plan with the interpreter, slow)")
        device = torch.device("cuda", torch.cuda.current_device())
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ir.GraphError([f"leantile.compile: device={device!r:.60} is no device ({' '.join(str(e).split())[:120]})"]) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CompileError(f"leantile.compile: device {device} asked, but there is no CUDA GPU here")
    if device.type not in ("cuda", "cpu"):
        raise CompileError(f"leantile.compile: device {device}: only CUDA GPUs and the CPU")
    if device.type == "cuda" and device.index is None:  # "cuda": the current GPU, as tensors name it (cuda:N)
        device = torch.device("cuda", torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    if chunk is not None and not isinstance(chunk, bool) and not (
            isinstance(chunk, dict) and len(chunk) == 1 and all(isinstance(v, int) for v in chunk.values())):
        raise ir.GraphError([f"leantile.compile: chunk={chunk!r:.60}; expected {{axis: size}}, True/None (automatic) "
                             "or False"])
    plan, how = choose_plan(g, candidate, tiles, gpu, tuned)
    # automatic where no plan was named: a candidate or tiles asked for run as they are (the GPU
    # campaign judges each candidate's own plan, whatever its intermediates)
    automatic = chunk is True or (chunk is None and candidate is None and not tiles)
    chunks = chunk_along(g, *next(iter(chunk.items())), in_place_sums(g, next(iter(chunk)))) if isinstance(chunk, dict) else \
        auto_chunks(g, plan) if automatic else None
    if chunks is not None:
        def make(cg):  # a chunk's kernel: its sums added in place written over the sums so far
            plan, how = choose_plan(cg, candidate, tiles, gpu, tuned)
            return Kernel(cg, in_place(plan, chunks.into), how, device, check=check, interpret=interpret)
        return chunked_kernel(g, chunks, make)
    return Kernel(g, plan, how, device, check=check, interpret=interpret)
