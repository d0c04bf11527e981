"""A Kernel that runs its graph in chunks of one axis (leantile.chunking): one compiled plan per
chunk size (the graph at the chunk's size, derived as any graph), launched once per chunk on
slices of the inputs; row outputs written into their slice of the whole output, sum outputs
accumulated in float32 (float64 for an f64 output). leantile.compile chooses it where a plan's
intermediates pass CHUNK_BYTES and the graph can be chunked (auto_chunks), or where asked
(compile(..., chunk={axis: size})).

What it saves: an LM head with its cross-entropy at 8192 tokens x 128256 words keeps 2 GiB of bf16
logits in its forward and their gradient in its backward; in chunks of 256 tokens (forward) and
5344 words (backward) a chunk's 96 MiB at most at a time.
"""
from __future__ import annotations

import math

import torch

from . import ir, reference
from .binding import GraphInputs
from .judging import Judging
from .chunking import ROW, SUM, Chunks, chunk, classify, even_size

# a plan whose global intermediates (neither inputs nor outputs) pass this runs in chunks where
# its graph allows (a GPU's memory is 80-141 GiB; an intermediate of a GiB is a [tokens, vocabulary]
# tensor, which the fused LM head + cross-entropy must not hold: issue 50)
CHUNK_BYTES = 1 << 30
# the intermediates a chunk holds at most, where the axis allows (a chunk's GEMMs stay large: 256
# tokens x 128256 words x 4096 is a quarter of a TFLOP). The LM head's training step (8192 x 4096 x
# 128256) on the H200 peaked at 818 MiB with chunks of 256 MiB and 505 MiB with 128 MiB (16 chunks
# of 8016 words in its backward), against torch.compile's 2004 (issue 50's bound is a quarter: 501);
# at 96 MiB its backward runs 24 chunks of 5344 words, a chunk's dlogits and dW slice a third
# smaller: 401 MiB (0.20 of torch.compile's peak) at 64.6 ms against 39.3 (0.61x; 0.65x at 128 MiB),
# benchmarks/results/train-suite-h200-2026-11-30-7ce4185-lm_head-96.md; at 64 MiB 48 chunks, each
# adding its dH into the float32 sum
CHUNK_TARGET = 96 << 20
# where each chunk adds into a sum output in place (in_place_sums), a chunk's intermediates may reach
# this fraction of that output's bytes: each chunk reads and writes the whole sum once, and its GEMM
# into that sum contracts only the chunk. The LM head's training step (train_step: 8192 x 4096 x
# 128256 bf16, dW 1 GiB) runs 8 chunks of 1024 tokens: on the H200 (g39,
# benchmarks/train_rows/results/step-kernels-h200-2026-11-30-lm-head-step-{512,1024}.json) 48.3 ms
# against 57.7 at 16 chunks of 512 (dW's GEMM 23.2 against 37.0 ms, dH's 11.8 against 19.5, the row
# kernel 4.6 against 8.6), torch.compile 41.0; its logits and their gradient, 250 MiB each, share
# their bytes (plan.storage.written_over), so a chunk holds about 283 MiB (issue 50's bound: a
# quarter of torch.compile's 2004)
IN_PLACE_SHARE = 1.5


def _buffer_bytes(plan, b) -> int:
    dt = torch.float32 if b.dtype == "acc" else reference.TORCH_DTYPES[b.dtype]
    return math.prod(plan.axes[a] for a in b.axes) * dt.itemsize


def in_place_sums(g: ir.Graph, axis: str, kind: dict | None = None) -> set[str]:
    """The sum outputs over `axis` each chunk adds into the output itself (chunking.chunk's
    in_place): those whose float32 sum would pass CHUNK_TARGET (an LM head's dW, [4096, 128256]:
    2 GiB in float32, past issue 50's memory bound on its own), where no final rounding follows.
    `kind`: classify(g, axis)'s, where the caller has it."""
    if kind is None:
        kind, why = classify(g, axis)
        if why:
            return set()
    return {o for o, i in g.outputs.items() if kind[i] == SUM and not isinstance(g.nodes[i], ir.Cast)
            and 4 * math.prod(g.axes[a] for a in g.nodes[i].axes) > CHUNK_TARGET}


def _output_bytes(g: ir.Graph, o: str) -> int:
    i = g.outputs[o]
    return math.prod(g.axes[a] for a in g.nodes[i].axes) * reference.TORCH_DTYPES[ir.value_dtypes(g)[i]].itemsize


def auto_chunks(g: ir.Graph, plan) -> Chunks | None:
    """The chunking compile uses by default: None where the plan's intermediates fit CHUNK_BYTES;
    else, among the axes the graph can be chunked along that its large intermediates are over,
    the one whose chunks hold least (what stays whole, a chunk of what scales, twice a sum
    output: its float32 sum and a chunk's; nothing for a sum added in place), with chunks of
    about CHUNK_TARGET intermediates, or the largest sum added in place over IN_PLACE_SHARE (1.5):
    each chunk reads and writes that sum once, so few large chunks."""
    names = {n.name for n in g.inputs()} | set(plan.outputs.values())
    inter = [b for b in plan.globals if b.name not in names]
    whole = sum(_buffer_bytes(plan, b) for b in inter)
    if whole <= CHUNK_BYTES:
        return None
    best = None
    for axis in sorted(g.axes):
        scales = sum(_buffer_bytes(plan, b) for b in inter if axis in b.axes)
        if scales * 2 < whole:  # most of it does not shrink with this axis
            continue
        kind, why = classify(g, axis)
        if why:
            continue
        total, into = g.axes[axis], in_place_sums(g, axis, kind)
        target = max([CHUNK_TARGET] + [int(_output_bytes(g, o) / IN_PLACE_SHARE) for o in into])
        size = even_size(total, max(1, total * target // scales))
        if size >= total:
            continue
        sums = sum(2 * 4 * math.prod(g.axes[a] for a in g.nodes[i].axes)
                   for o, i in g.outputs.items() if kind[i] == SUM and o not in into)
        held = whole - scales + scales * size // total + sums
        if held < whole and (best is None or held < best[0]):
            best = (held, axis, size, into)
    return chunk(g, best[1], best[2], best[3]) if best else None


class ChunkedKernel(GraphInputs, Judging):
    """The graph's kernel run in chunks: called, bound and checked as a runtime.Kernel (the whole
    graph's inputs and outputs), launched as len(chunks.starts()) runs of the chunk plans."""

    def __init__(self, graph: ir.Graph, chunks: Chunks, kernels: dict, device: torch.device):
        self.graph, self.chunks, self.kernels, self.device = graph, chunks, kernels, device
        main = kernels[chunks.size]
        self.plan, self.how = main.plan, f"{main.how}, in chunks of {chunks.axis} = {chunks.size}"
        self.check, self.interpret = main.check, main.interpret
        # lt.op names the op by a digest of this: every chunk plan, and how they are put together
        spec = (f"{chunks.axis}:{chunks.size}:{sorted(chunks.outputs.items())}:{sorted(chunks.cast.items())}"
                f":{sorted(chunks.into.items())}")
        self.source = "\n".join([spec, *(kernels[s].source for s in sorted(kernels))])
        self._bind_to(graph)
        dtypes = ir.output_dtypes(graph)
        self.output_specs = {o: (graph.shape(i), reference.TORCH_DTYPES[dtypes[o]]) for o, i in graph.outputs.items()}
        self._offsets: dict[int, torch.Tensor] = {}  # made before any CUDA-graph capture: no copy from the host in it
        if chunks.offset:
            self._offsets = {s: torch.tensor(float(s), device=device) for s in chunks.starts()}

    def __repr__(self) -> str:
        return (f"<leantile.ChunkedKernel {self.graph.name}: {len(self.chunks.starts())} chunks of "
                f"{self.chunks.axis} = {self.chunks.size} ({self.plan.candidate}) on {self.device}>")

    def run(self, inputs: dict[str, torch.Tensor], fill: float | None = None) -> dict[str, torch.Tensor]:
        c = self.chunks
        outs, sums = {}, {}
        for o, (how, _) in c.outputs.items():
            shape, dtype = self.output_specs[o]
            if how == ROW:
                outs[o] = torch.empty(shape, dtype=dtype, device=self.device)
            elif o in c.into:  # each chunk adds into the output itself (its kernels write over the sum so far)
                outs[o] = torch.zeros(shape, dtype=dtype, device=self.device)
            elif how == SUM:  # float32 at least (float64 for an f64 output: float32 would round it)
                wide = torch.float64 if dtype == torch.float64 else torch.float32
                sums[o] = torch.zeros(shape, dtype=wide, device=self.device)
        for start in c.starts():
            size = min(c.size, c.total - start)
            k = self.kernels[size]
            feed = {}
            for n, pos in c.inputs.items():
                t = inputs[n]
                if pos is not None:
                    t = t.narrow(pos, start, size)
                    if not t.is_contiguous() or (t.numel() and t.data_ptr() % 16):
                        t = t.contiguous() if not t.is_contiguous() else t.clone()
                feed[n] = t
            if c.offset:
                feed[c.offset] = self._offsets[start]
            for o, name in c.into.items():
                feed[name] = outs[o]
            got = k.run(feed, fill)
            for o, (how, pos) in c.outputs.items():
                if o in c.into:  # written over the sum so far (a plan's in-place output), else copied there
                    if got[o].data_ptr() != outs[o].data_ptr():
                        outs[o].copy_(got[o])
                elif how == ROW:
                    outs[o].narrow(pos, start, size).copy_(got[o])
                elif how == SUM:
                    sums[o].add_(got[o])  # (cast as it adds: no float32 copy of the chunk's sum)
                elif start == 0:  # FREE: every chunk's is the same
                    outs[o] = got[o]
        for o, s in sums.items():
            outs[o] = s.to(self.output_specs[o][1])
        return {o: outs[o] for o in self.output_names}

    def __call__(self, *args, **kwargs):
        outs = self.run(self.bind(args, kwargs))
        return outs[self.output_names[0]] if len(outs) == 1 else outs

    def verify(self, inputs: dict | None = None, seed: int = 0, tolerance: float | None = None,
               scale: float | None = None) -> dict:
        """Every output of the whole graph against its float32 reference, judged as
        runtime.Kernel.verify judges (each chunk's plan NaN-poisoned)."""
        inputs = self.bind((), inputs) if inputs is not None else self.random_inputs(seed, scale)
        return self.judge(inputs, self.run(inputs, fill=float("nan")), tolerance)

    def benchmark(self, inputs: dict | None = None, seed: int = 0, rep: int = 100) -> float:
        """GPU time in ms of every chunk's launches (do_bench_cudagraph median)."""
        import triton.testing as tt
        inputs = self.bind((), inputs) if inputs is not None else self.random_inputs(seed)
        self.run(inputs)
        return tt.do_bench_cudagraph(lambda: self.run(inputs), rep=rep, return_mode="median")


def chunked_kernel(g: ir.Graph, chunks: Chunks, make) -> ChunkedKernel:
    """The ChunkedKernel of g in `chunks`, its chunk kernels from make(graph) (a runtime.Kernel
    for that graph: compile's own choice of plan), one per chunk size."""
    kernels = {s: make(cg) for s, cg in chunks.graphs().items()}
    device = kernels[chunks.size].device
    return ChunkedKernel(g, chunks, kernels, device)

