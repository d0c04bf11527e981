"""The GPU differential campaign (issue 46): the soundness generators' graphs (tests/strategies.py's
families, tests/soundness_graphs.py's CLASSES, the losses of tests/loss_graphs.py, long reductions
into 0-d outputs) resized to GPU sizes and compiled with `leantile.compile`, every candidate and
the default plan, f16 / bf16 / f32 (and mixed), each run on fresh random inputs and judged
against a FLOAT64 reference (leantile.reference at compute_dtype float64, not the interpreter) by
leantile.tolerance, as `Kernel.verify` judges (`Kernel.judge`: rel_err beyond the unfused graph's
own rounding, output_tolerances, ill_conditioned).

Sizes cross every place a plan changes shape: one or two axes per graph (reduced and contracted
axes first) take a long length (powers of two up to 2^17, 2^k +- 1, primes, n * block +- 1 for
n in 1, 2, 31, 32, 33 and blocks 64 .. 1024), the others short ones (1 included); then axes
shrink until every tensor has at most --max-elements elements and every GEMM at most --max-flops.
Each graph runs at the natural input scale (reference.natural_scale) and, where the graph's value
stays finite and representable at every node it rounds (outputs, casts, GEMM operands), at a
large one (f16 8, bf16 / f32 32): a stored intermediate that overflows shows there.

Outcomes per plan: `ok`; `mismatch` (an output wrong where the inputs can judge it: not
ill-conditioned, at any of three draws); `crash` (any exception in derive, emit, compile or run
other than a clean refusal; a CUDA fault or a hang included); `refused` (DerivationError, or a
GraphError for tiles that do not fit the target: not failures); `unjudged` (every draw
ill-conditioned); `skipped` (out of memory: the campaign's sizes, not the kernel).

Processes: this one draws graphs and derives plans (no CUDA); a pool (--workers, the CPU cores
but a few) compiles every distinct emitted module into TileLang's disk cache (nvcc is the cost,
~2-5 s a kernel: it bounds the plans per minute, an estimate of ~50-100 on 16 cores not yet
measured, proportionally more on more cores); GPU worker processes (--gpu-workers, two per
GPU) compile again (a cache hit), run and judge, graph by graph. A worker that faults or hangs
is restarted and the graph goes on from its next plan; its output is in a log file named at
the start.

    python3 benchmarks/gpu_fuzz.py --budget-s 420                 # on the GPU, one 10-minute call
    python3 benchmarks/gpu_fuzz.py --budget-s 420 --resume        # the next call adds to the same file
    python3 benchmarks/gpu_fuzz.py --device cpu --max-graphs 5    # dry run: the interpreter, tiny sizes

Writes <out>/gpu-fuzz-<gpu>-<date>.json (atomically, after every graph): gpu, graphs, plans,
mismatch, crash, largest_axis, per-family counts, one record per failure (graph JSON, candidate,
tiles, dtype, sizes, outputs with rel err and tolerance, error text), the graphs run; prints a
line per graph and a table per family.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import queue
import random
import re
import sys
import time
import traceback
from collections import deque
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# ------------------------------------------------------------------------------------ sizes
PRIMES = (3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071)
BLOCKS = (64, 128, 256, 1024)  # stream blocks and grid tiles of the plans (block_n, block_r, a row's 1024)
COUNTS = (1, 2, 31, 32, 33)  # blocks or grid rows: one, two, one short of / at / past a warp's worth
LONG_LIMIT = 2 ** 17 + 1
SHORT = (1, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 127, 128, 129,
         192, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025, 2048, 4096)
CPU_LONG = (1, 2, 3, 7, 16, 31, 32, 33, 63, 64, 65)
CPU_SHORT = (1, 1, 2, 3, 4, 5, 7, 8)
LARGE_SCALE = {"f16": 8.0, "bf16": 32.0, "f32": 32.0, "f64": 32.0}
RETRIES = 2  # more draws for a plan whose every failing output is ill-conditioned
DTYPES = ("f16", "bf16", "f32", "mixed")


def long_lengths(limit: int = LONG_LIMIT) -> list[int]:
    out = set(PRIMES)
    for k in range(18):
        out |= {2 ** k - 1, 2 ** k, 2 ** k + 1}
    for b in BLOCKS:
        for n in COUNTS:
            out |= {n * b - 1, n * b, n * b + 1}
    return sorted(x for x in out if 1 <= x <= limit)


class Profile:
    def __init__(self, device: str, max_elements: int, max_flops: float):
        cpu = device == "cpu"
        self.long = list(CPU_LONG) if cpu else long_lengths()
        self.short = list(CPU_SHORT) if cpu else list(SHORT)
        self.max_elements, self.max_flops = max_elements, max_flops
        self.max_total = 8 * max_elements  # every node's elements together (the unfused plan stores them)


class _Classes:
    """Union-find over axis names: the two axes of a contraction have one size."""

    def __init__(self, names):
        self.parent = {a: a for a in names}

    def find(self, a):
        while self.parent[a] != a:
            a = self.parent[a]
        return a

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def resize(g, rng: random.Random, prof: Profile):
    """g at drawn GPU sizes (see the module docstring), validated (ir.parse); None where the
    resized graph is not valid."""
    from leantile import ir

    cls = _Classes(g.axes)
    reduced = set()
    for n in g.nodes:
        if isinstance(n, ir.Matmul):
            cls.union(n.axis_a, n.axis_b)
            reduced |= {n.axis_a, n.axis_b}
        elif isinstance(n, ir.Reduce):
            reduced.add(n.axis)
    groups = sorted({cls.find(a) for a in g.axes})
    red = [c for c in groups if any(cls.find(a) == c for a in reduced)]
    n_long = rng.choices([0, 1, 2], weights=[1, 6, 3])[0]
    long = []
    for _ in range(min(n_long, len(groups))):
        pool = [c for c in (red if red and rng.random() < 0.75 else groups) if c not in long] or \
               [c for c in groups if c not in long]
        long.append(rng.choice(pool))
    longest = [x for x in prof.long if x >= 2 ** 16] or prof.long[-3:]

    def long_size():  # a third from 2^16 .. 2^17 + 1 (the axes the issue asks for), else any
        return rng.choice(longest if rng.random() < 0.35 else prof.long)
    size = {c: long_size() if c in long else rng.choice(prof.short) for c in groups}
    if rng.random() < 0.2:  # the generator's own sizes (a family drawn for its shapes: overlap, shape tiles)
        size = {c: max(g.axes[a] for a in g.axes if cls.find(a) == c) for c in groups}
        long = [c for c in groups if size[c] >= 1024]

    def axes_of(n):
        return [cls.find(a) for a in n.axes]

    nodes = [axes_of(n) for n in g.nodes]
    mms = [(axes_of(n), cls.find(n.axis_a)) for n in g.nodes if isinstance(n, ir.Matmul)]

    def shrink(c):
        menu = prof.long if c in long else prof.short
        smaller = [x for x in menu if x < size[c]]
        size[c] = max(smaller) if smaller else max(1, size[c] // 2)

    for _ in range(1000):
        elems = [math.prod(size[c] for c in ax) for ax in nodes]
        over = []  # (how far over its cap, the axes to shrink)
        for e, ax in zip(elems, nodes):
            if e > prof.max_elements:
                over.append((e / prof.max_elements, ax))
        for ax, k in mms:
            f = 2.0 * math.prod(size[c] for c in ax) * size[k]
            if f > prof.max_flops:
                over.append((f / prof.max_flops, ax + [k]))
        if sum(elems) > prof.max_total:
            over.append((sum(elems) / prof.max_total, nodes[elems.index(max(elems))]))
        if not over:
            break
        _, ax = max(over, key=lambda o: o[0])
        big = [c for c in set(ax) if size[c] > 1]
        short = [c for c in big if c not in long]
        shrink(max(short or big, key=lambda c: (size[c], c)))
    sizes = {a: size[cls.find(a)] for a in g.axes}
    data = g.model_dump(mode="json", by_alias=True)
    data["axes"], data["derivation"] = sizes, []
    try:
        return ir.parse(data)
    except ir.GraphError:
        return None


# ------------------------------------------------------------------------------- families
def _reduction_graph(rng: random.Random, dtype: str):
    """A long axis reduced into a 0-d or short output (the class of issue 46's miscompile): a row
    statistic (sum, max, mean of squares, log-sum-exp) then a reduction over the rows."""
    from leantile.dag import DagM

    g = DagM("reduce_to_scalar", {"r": 3, "c": 5})
    x = g.input("X", ["r", "c"], dtype)
    inner = rng.choice(["sum", "max", "sumsq", "lse", "none"])
    if inner == "sum":
        row = g.red("sum", x, "c")
    elif inner == "max":
        row = g.red("max", x, "c")
    elif inner == "sumsq":
        row = g.mean_along(g.square(x), "c")
    elif inner == "lse":
        m = g.red("max", x, "c")
        row = g.add(m, g.log(g.red("sum", g.exp(g.sub(x, m)), "c")))
    else:
        row = g.red("sum", g.abs(x), "c")
    outer = rng.choice(["sum", "max", "mean"])
    out = g.mean_along(row, "r") if outer == "mean" else g.red(outer, row, "r")
    g.output("out", out)
    if rng.random() < 0.3:
        g.output("rows", row)  # the per-row value too: several outputs, one 0-d
    return g.graph()


def families() -> dict:
    """{name: draw(seed, round, rng, count) -> [(graph, extra)]}, each family that imports here
    (a family whose generator is missing is left out, named)."""
    import strategies as S

    def hyp(strategy, post=lambda x: (x, {})):
        def draw(seed, rnd, rng, count):
            return [post(x) for x in _examples(strategy, seed * 7919 + rnd, count)]
        return draw

    def first(gc):
        return gc[0], {}

    makers = {
        "random": lambda: hyp(S.random_graphs()),
        "structured": lambda: hyp(S.structured_graphs()),
        "user_attention": lambda: hyp(S._user_attention(S.ALL_CLASSES), first),
        "user_softmax": lambda: hyp(S._user_softmax(S.ALL_CLASSES), first),
        "user_norm_gemm": lambda: hyp(S._user_norm_gemm(S.ALL_CLASSES), first),
        "user_gemm": lambda: hyp(S._user_gemm(S.ALL_CLASSES), first),
        "masked_attention": lambda: hyp(S.masked_attention_graphs(), first),
        "masked_softmax": lambda: hyp(S.masked_softmax_graphs(), lambda gp: (gp[0], {"prefix": True})),
        "shape_tiled_attention": lambda: hyp(S.shape_tiled_attention_graphs(), first),
        "overlap_attention": lambda: hyp(S.overlap_attention_graphs(), first),
        "classes": lambda: _fixed_classes(),
        "losses": lambda: _fixed_losses(),
        "reductions": lambda: (lambda seed, rnd, rng, count: [(_reduction_graph(rng, "f32"), {}) for _ in range(count)]),
        "biased_attention": lambda: (lambda seed, rnd, rng, count: [(S.biased_attention(), {})]),
    }
    out = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except Exception as e:  # a generator renamed or removed by another change: named, not fatal
            print(f"family {name}: left out ({type(e).__name__}: {e})", flush=True)
    return out


def _fixed_classes():
    from soundness_graphs import CLASSES

    def draw(seed, rnd, rng, count):
        return [(CLASSES[rng.choice(sorted(CLASSES))](), {}) for _ in range(count)]
    return draw


def _fixed_losses():
    import loss_graphs

    def draw(seed, rnd, rng, count):
        out = []
        for _ in range(count):
            name = rng.choice(sorted(loss_graphs.LOSSES))
            out.append((loss_graphs.LOSSES[name](3, 5), {"loss": name}))
        return out
    return draw


def _examples(strategy, seed: int, count: int) -> list:
    """`count` examples of a hypothesis strategy, the same for the same seed (hypothesis' own
    generation under @seed, no database, no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    out = []

    @hseed(seed)
    @settings(database=None, max_examples=count, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)
    collect()
    return out


def with_dtype(g, dtype: str, rng: random.Random):
    """g on `dtype` inputs (inputs_in), or each input in a drawn dtype ("mixed", inputs_mixed);
    g unchanged where validation refuses that (a cast feeding a GEMM)."""
    from leantile import ir
    from strategies import inputs_in, inputs_mixed

    try:
        if dtype == "mixed":
            return inputs_mixed(g, lambda _strategy: rng.choice(["f32", "f16", "bf16"]))
        return inputs_in(g, dtype)
    except ir.GraphError:
        return g


def graph_key(g) -> str:
    return hashlib.sha256(g.to_json().encode()).hexdigest()[:20]


def graph_stream(seed: int, fams: dict, dtypes: list, prof: Profile, per_round: int = 10):
    """(family, graph, dtype, extra) forever, the same sequence for the same seed and code:
    each round draws `per_round` examples of every family, then yields them one family after
    another (in an order drawn per round), example by example."""
    names = sorted(fams)
    rnd = 0
    while names:
        batches = {}
        for name in list(names):
            rng = random.Random(f"{seed}:{name}:{rnd}")
            try:
                batches[name] = list(fams[name](seed, rnd, rng, per_round))
            except Exception as e:
                print(f"family {name}: drawing failed, left out ({type(e).__name__}: {str(e)[:200]})", flush=True)
                names.remove(name)
        order = sorted(batches)
        random.Random(f"{seed}:order:{rnd}").shuffle(order)
        for i in range(per_round):
            for name in order:
                if i >= len(batches[name]):
                    continue
                g, extra = batches[name][i]
                r = random.Random(f"{seed}:{name}:{rnd}:{i}")
                dtype = r.choice(dtypes)
                if "loss" in extra:  # the losses take their dtype as they are built (class ids stay f32)
                    import loss_graphs
                    g = loss_graphs.LOSSES[extra["loss"]](3, 5, dtype="f16" if dtype == "mixed" else dtype)
                else:
                    g = with_dtype(g, dtype, r)
                sized = resize(g, r, prof)
                if sized is not None:
                    yield name, sized, dtype, extra
        rnd += 1


# ------------------------------------------------------------------------------- plans
def plans_of(g, max_candidates: int = 0, skip_unfused: bool = False) -> tuple[list, list, list]:
    """(plans, refusals, crashes) of g: plans [{candidate (None: the default), default, key
    (the emitted source's digest), source}], each distinct source once; refusals and crashes
    [{candidate, stage, error}] of derive and emit."""
    from leantile import ir
    from leantile.cost import choose
    from leantile.derive import DerivationError, candidates, derive
    from leantile.emit import emit_module

    plans, refused, crashed, seen = [], [], [], {}
    try:
        cands = [c.name for c in candidates(g)]
    except Exception as e:
        return [], [], [{"candidate": None, "stage": "candidates", "error": _err(e)}]
    if skip_unfused and len(cands) > 1:  # the fallback (many small kernels: half the nvcc time) left out
        cands = [c for c in cands if c != "unfused"]
    if max_candidates and len(cands) > max_candidates:
        cands = cands[:max_candidates - 1] + [cands[-1]]  # the first ones and the unfused fallback
    for name in [*cands, None]:
        stage = "derive"
        try:
            plan = choose(g)[0] if name is None else derive(g, name)
            stage = "emit"
            src = emit_module(plan)
        except (DerivationError, ir.GraphError) as e:
            refused.append({"candidate": name, "stage": stage, "error": _err(e)})
            continue
        except Exception as e:
            crashed.append({"candidate": name, "stage": stage, "error": _err(e), "trace": traceback.format_exc()[-2000:]})
            continue
        key = hashlib.sha256(src.encode()).hexdigest()[:16]
        if key in seen:  # the default is one of the candidates (or two candidates spell one module)
            if name is None:
                seen[key]["default"] = True
            continue
        seen[key] = {"candidate": name, "default": name is None, "key": key, "source": src,
                     "plan_candidate": plan.candidate}
        plans.append(seen[key])
    return plans, refused, crashed


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"


def precompile(source: str) -> tuple[str | None, float]:
    """In a pool process: the emitted module compiled into TileLang's disk cache (the GPU
    worker's compile is then a cache hit). (None or why it failed, seconds)."""
    t0 = time.time()
    try:
        from leantile.runtime import emitted_module

        emitted_module(source).compile_kernels(target="cuda")
        return None, time.time() - t0
    except Exception as e:
        return _err(e), time.time() - t0


# ------------------------------------------------------------------------------- GPU worker
def _to_log(path: str | None) -> None:
    """This process's stdout and stderr (TileLang's and nvcc's chatter, a fault's last words) into
    `path` (appended), or nowhere for None: the campaign's own lines stay readable."""
    fd = os.open(path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _log_tail(path: str | None, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except (OSError, TypeError):
        return ""


def gpu_worker(device: str, index: int, inq, outq, log: str | None = None) -> None:
    """One process: compile (a cache hit), run, judge each plan of each graph sent; messages
    ("hello", gpu, versions), ("start", gid, i), ("plan", gid, i, record), ("done", gid, info).
    Worker `index` runs on GPU index % device_count; its output goes to `log`."""
    if log:
        _to_log(log)
    import torch

    import leantile
    from leantile import ir, runtime

    dev = torch.device("cpu")
    if device == "cuda":
        dev = torch.device("cuda", index % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    name = torch.cuda.get_device_name(dev) if device == "cuda" else "cpu"
    try:
        from importlib import metadata
        versions = {p: metadata.version(p) for p in ("torch",)}
        try:
            versions["tilelang"] = metadata.version("tilelang")
        except Exception:
            versions["tilelang"] = None
    except Exception:
        versions = {}
    outq.put(("hello", name, versions))
    while True:
        job = inq.get()
        if job is None:
            return
        gid = job["gid"]
        try:
            info = _run_graph(job, dev, outq, leantile, ir, runtime, torch)
        except Exception as e:  # outside any plan (inputs, references): the graph is skipped, said why
            info = {"error": _err(e), "trace": traceback.format_exc()[-2000:]}
        outq.put(("done", gid, info))
        runtime._CACHE.clear()  # each graph's modules are its own: do not keep them all
        if dev.type == "cuda":
            torch.cuda.empty_cache()


class _Draw:
    def __init__(self, kind, scale, seed, inputs=None, refs=None, skip=None):
        self.kind, self.scale, self.seed, self.inputs, self.refs, self.skip = kind, scale, seed, inputs, refs, skip


def _inputs(g, seed, scale, dev, torch, prefix=False) -> dict:
    """Normal inputs of standard deviation `scale` drawn on the device (seeded), in each input's
    dtype; cross-entropy's class ids as integers; a masked softmax's rows with a -inf prefix."""
    from leantile.reference import TORCH_DTYPES

    gen = torch.Generator(device=dev).manual_seed(seed)
    out = {}
    for n in g.inputs():
        shape = [g.axes[a] for a in n.axes]
        if g.name == "cross_entropy" and n.name == "T":
            x = torch.randint(0, g.axes["c"], shape, generator=gen, device=dev).to(torch.float32)
        else:
            x = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32) * scale
        out[n.name] = x.to(TORCH_DTYPES[n.dtype])
    if prefix and "X" in out and out["X"].dim() == 2:  # masked_softmax_graphs: X[:, :prefix] = -inf, a finite score kept
        m, t = out["X"].shape
        keep = torch.randint(0, max(t, 1), (m, 1), generator=gen, device=dev)
        out["X"] = out["X"].masked_fill(torch.arange(t, device=dev)[None, :] < keep, float("-inf"))
    return out


def _fits(g, inputs, torch) -> bool:
    """The graph's value (float32) is finite at every node and representable where the graph
    rounds it in every plan (its outputs, its casts, its GEMM operands): a large draw is judged
    only there (tests/cpu/test_intermediate_range.py's criterion)."""
    from leantile import ir, reference
    from leantile.reference import TORCH_DTYPES

    every = {f"v{n.id}": n.id for n in g.nodes if not isinstance(n, (ir.Const, ir.SizeConst))}
    vals = reference.evaluate(g.model_copy(update={"outputs": every}), inputs, compute_dtype=torch.float32, check=False)
    dtypes = ir.value_dtypes(g)
    rounded = (set(g.outputs.values()) | {n.id for n in g.nodes if isinstance(n, ir.Cast)}
               | {a for n in g.nodes if isinstance(n, ir.Matmul) for a in (n.a, n.b)})
    for name, i in every.items():
        v = vals[name]
        if v.numel() and not bool(torch.isfinite(v).all()):
            return False
        if i in rounded and v.numel() and float(v.abs().max()) > torch.finfo(TORCH_DTYPES[dtypes[i]]).max:
            return False
    return True


def _oom(e, torch) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def _die(outq) -> None:
    """End this worker (its CUDA context is lost) once its last words are out of the queue."""
    outq.close()
    outq.join_thread()
    os._exit(3)


def _context_dead(dev, torch) -> bool:
    if dev.type != "cuda":
        return False
    try:
        torch.cuda.synchronize(dev)
        torch.zeros(1, device=dev).item()
        return False
    except Exception:
        return True


def _run_graph(job, dev, outq, leantile, ir, runtime, torch) -> dict:
    from leantile.derive import DerivationError
    from leantile.reference import natural_scale

    g = ir.parse(job["graph"])
    gid, seed = job["gid"], job["seed"]
    prefix = bool(job.get("extra", {}).get("prefix"))
    dtypes = {n.dtype for n in g.inputs()} or {"f32"}
    large = min(LARGE_SCALE[d] for d in dtypes)  # the narrowest input dtype sets the scale
    kinds = [("normal", natural_scale(g))] + ([("large", large)] if job.get("large", True) else [])
    draws: dict[str, _Draw] = {}
    info = {"draws": {}, "ref_s": 0.0}

    def draw(kind, scale, s, k):
        t0 = time.time()
        inputs = _inputs(g, s, scale, dev, torch, prefix)
        if kind == "large" and not _fits(g, inputs, torch):
            return _Draw(kind, scale, s, skip="the graph's value overflows at this scale")
        refs = k.references(inputs, torch.float64)
        info["ref_s"] += time.time() - t0
        return _Draw(kind, scale, s, inputs, refs)

    for i, p in enumerate(job["plans"]):
        if i < job.get("start", 0):
            continue
        outq.put(("start", gid, i))
        rec = {"candidate": p["candidate"], "default": p["default"], "key": p["key"], "failures": []}
        t0 = time.time()
        try:
            k = leantile.compile(g, candidate=p["candidate"], device=dev, tuned=False)
        except (DerivationError, ir.GraphError) as e:
            outq.put(("plan", gid, i, {**rec, "status": "refused", "error": _err(e)}))
            continue
        except Exception as e:
            dead = _context_dead(dev, torch)
            outq.put(("plan", gid, i, {**rec, "status": "crash", "stage": "compile", "error": _err(e),
                                       "trace": traceback.format_exc()[-3000:]}))
            if dead:
                _die(outq)
            continue
        rec.update(compile_s=round(time.time() - t0, 3), tiles=dict(k.plan.tiles or {}),
                   plan_candidate=k.plan.candidate, how=k.how,
                   same_source=hashlib.sha256(k.source.encode()).hexdigest()[:16] == p["key"])
        statuses = []
        for kind, scale in kinds:
            stage = "reference"  # the inputs and the float64 reference (once per graph and draw)
            try:
                if kind not in draws:
                    draws[kind] = draw(kind, scale, seed + (0 if kind == "normal" else 1), k)
                d = draws[kind]
                info["draws"][kind] = d.skip or "judged"
                if d.skip:
                    continue
                stage = "run"
                status, fail = _judge_plan(k, d, g, dev, torch, draw)
            except Exception as e:
                dead = _context_dead(dev, torch)
                if _oom(e, torch) and not dead:
                    statuses.append("skipped")
                    rec["failures"].append({"kind": "skipped", "draw": kind, "error": _err(e)})
                    continue
                rec["failures"].append({"kind": "crash", "stage": stage, "draw": kind, "scale": scale,
                                        "error": _err(e), "trace": traceback.format_exc()[-3000:]})
                outq.put(("plan", gid, i, {**rec, "status": "crash"}))
                if dead:  # a fault poisons the CUDA context: this process is done
                    _die(outq)
                statuses = None
                break
            statuses.append(status)
            if fail:
                rec["failures"].append(fail)
        if statuses is None:
            continue
        status = ("mismatch" if "mismatch" in statuses else "ok" if "ok" in statuses
                  else "unjudged" if "unjudged" in statuses else "skipped")
        rec["run_s"] = round(time.time() - t0, 3)
        outq.put(("plan", gid, i, {**rec, "status": status, "draws": dict(info["draws"])}))
        del k
    return info


def _judge_plan(k, d: _Draw, g, dev, torch, draw):
    """(status, failure record or None) of kernel k at draw d: judged as verify judges, against
    the float64 reference; a failure whose every output is ill-conditioned is drawn again."""
    cur = d
    for attempt in range(1 + RETRIES):
        outs = k.run(cur.inputs, fill=float("nan"))
        v = k.judge(cur.inputs, outs, refs=cur.refs)
        del outs
        if v["ok"]:
            return "ok", None
        failed = [o for o in k.output_names if not v["rel_err"][o] <= v["tolerance"][o]]
        wrong = [o for o in failed if o not in v["ill_conditioned"]]
        if wrong:
            return "mismatch", {
                "kind": "mismatch", "draw": cur.kind, "scale": cur.scale, "seed": cur.seed, "output": wrong[0],
                "rel_err": _num(v["rel_err"][wrong[0]]), "tolerance": v["tolerance"][wrong[0]],
                "outputs": {o: {"rel_err": _num(v["rel_err"][o]), "tolerance": v["tolerance"][o],
                                "plain_rel_err": _num(v["plain_rel_err"][o])} for o in wrong},
                "ill_conditioned": v["ill_conditioned"]}
        if attempt < RETRIES:
            cur = draw(cur.kind, cur.scale, cur.seed + 1000 * (attempt + 1), k)
            if cur.skip:
                break
    return "unjudged", None


def _num(x: float):
    return x if math.isfinite(x) else str(x)


# ------------------------------------------------------------------------------- orchestration
class Worker:
    """A GPU worker process: started, fed one graph at a time, restarted after a fault."""

    def __init__(self, ctx, device: str, index: int, log: str | None = None):
        self.ctx, self.device, self.index, self.log = ctx, device, index, log
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=gpu_worker, args=(device, index, self.inq, self.outq, log), daemon=True)
        self.proc.start()
        self.started, self.gpu, self.versions = time.time(), None, {}
        self.job, self.last = None, time.time()  # the graph it runs, its last word

    def wait_ready(self, timeout: float = 300.0) -> None:
        while self.gpu is None:
            try:
                msg = self.outq.get(timeout=2)
            except queue.Empty:
                if not self.proc.is_alive() or time.time() - self.started > timeout:
                    self.kill()
                    raise RuntimeError(f"GPU worker {self.index} did not start (exit code {self.proc.exitcode})")
                continue
            if msg[0] == "hello":
                self.gpu, self.versions = msg[1], msg[2]

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)


def _pool_init(n_gpus: int) -> None:
    """A compile process sees one GPU (round robin by pid), so that whatever CUDA state TileLang's
    compile makes is spread over the GPUs, not all on the first; its chatter goes nowhere (a
    failed compile's error comes back as its result)."""
    _to_log(None)
    if n_gpus > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(os.getpid() % n_gpus)


def slug(gpu: str) -> str:
    m = re.search(r"\b([a-z]\d{2,4}[a-z]?)\b", gpu.lower())
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"


class Results:
    def __init__(self, path: Path, meta: dict, old: dict | None):
        self.path, self.meta = path, meta
        keep = old or {}
        self.counts = dict(keep.get("counts_by_family", {}))
        self.failures = list(keep.get("failures", []))
        self.runs = list(keep.get("graphs_run", []))
        self.done = set(keep.get("done", []))
        self.largest = int(keep.get("largest_axis", 0))
        self.sessions = list(keep.get("sessions", []))
        self.refusals = list(keep.get("refusals", []))[:200]

    def family(self, name):
        return self.counts.setdefault(name, {"graphs": 0, "plans": 0, "ok": 0, "mismatch": 0, "crash": 0,
                                             "unjudged": 0, "skipped": 0, "refused": 0, "largest_axis": 0,
                                             "graphs_axis_ge_65536": 0, "large_draws": 0})

    def add_graph(self, job, statuses: dict, info: dict):
        fam = self.family(job["family"])
        g_axes = job["sizes"]
        big = max(g_axes.values()) if g_axes else 0
        fam["graphs"] += 1
        fam["largest_axis"] = max(fam["largest_axis"], big)
        fam["graphs_axis_ge_65536"] += big >= 65536
        fam["refused"] += len(job["refused"])
        fam["crash"] += len(job["crashed"])
        fam["plans"] += len(job["crashed"])
        fam["large_draws"] += info.get("draws", {}).get("large") == "judged"
        for st in statuses.values():
            fam["plans"] += st in ("ok", "mismatch", "crash", "unjudged")
            fam[st] = fam.get(st, 0) + 1
        self.largest = max(self.largest, big)
        self.done.add(job["key"])
        self.runs.append({"key": job["key"], "family": job["family"], "name": job["name"], "dtype": job["dtype"],
                          "sizes": g_axes, "plans": {str(k): v for k, v in statuses.items()},
                          "refused": [r["candidate"] for r in job["refused"]],
                          "draws": info.get("draws", {}), "error": info.get("error")})
        for r in job["refused"][:2]:
            if len(self.refusals) < 200:
                self.refusals.append({"family": job["family"], "name": job["name"], "sizes": g_axes, **r})

    def failure(self, job, plan: dict, f: dict):
        self.failures.append({"family": job["family"], "graph_name": job["name"], "dtype": job["dtype"],
                              "sizes": job["sizes"], "candidate": plan.get("candidate"),
                              "default": plan.get("default"), "plan_candidate": plan.get("plan_candidate"),
                              "tiles": plan.get("tiles"), **f, "graph": json.loads(job["graph"])})

    def totals(self) -> dict:
        t = {k: 0 for k in ("graphs", "plans", "ok", "mismatch", "crash", "unjudged", "skipped", "refused", "large_draws",
                            "graphs_axis_ge_65536")}
        for c in self.counts.values():
            for k in t:
                t[k] += c.get(k, 0)
        return t

    def write(self, elapsed: float, final: bool = False):
        from leantile.files import write_atomic

        t = self.totals()
        doc = {**self.meta, "graphs": t["graphs"], "plans": t["plans"], "mismatch": t["mismatch"], "crash": t["crash"],
               "largest_axis": self.largest, "ok": t["ok"], "unjudged": t["unjudged"], "skipped": t["skipped"],
               "refused": t["refused"], "large_draws": t["large_draws"], "graphs_axis_ge_65536": t["graphs_axis_ge_65536"],
               "elapsed_s": round(elapsed, 1), "complete": final,
               "sessions": self.sessions + [{"date": self.meta["date"], "seed": self.meta["seed"], "elapsed_s": round(elapsed, 1)}],
               "counts_by_family": self.counts, "failures": self.failures, "refusals": self.refusals,
               "graphs_run": self.runs, "done": sorted(self.done)}
        write_atomic(self.path, json.dumps(doc, indent=1, default=str) + "\n")


def table(counts: dict) -> str:
    cols = ("graphs", "plans", "ok", "mismatch", "crash", "unjudged", "skipped", "refused", "large_draws", "largest_axis")
    rows = [["family", *cols]]
    tot = {c: 0 for c in cols}
    for name in sorted(counts):
        c = counts[name]
        rows.append([name, *(str(c.get(k, 0)) for k in cols)])
        for k in cols:
            tot[k] = max(tot[k], c.get(k, 0)) if k == "largest_axis" else tot[k] + c.get(k, 0)
    rows.append(["total", *(str(tot[k]) for k in cols)])
    w = [max(len(r[i]) for r in rows) for i in range(len(cols) + 1)]
    return "\n".join("  ".join(x.rjust(w[i]) if i else x.ljust(w[i]) for i, x in enumerate(r)) for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop drawing new graphs after this many seconds")
    ap.add_argument("--drain-s", type=float, default=90.0,
                    help="after the budget, finish graphs already drawn for at most this long, then write and stop")
    ap.add_argument("--seed", type=int, default=None, help="the graph sequence (default 0, or the resumed file's)")
    ap.add_argument("--max-graphs", type=int, default=0, help="draw at most this many graphs (0: the budget decides)")
    ap.add_argument("--dtypes", default="f16,bf16,f32,mixed", help=f"comma list of {', '.join(DTYPES)}")
    ap.add_argument("--families", default="", help="comma list (default: all); see --list-families")
    ap.add_argument("--list-families", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--tag", default="", help="appended to the file name")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run on the interpreter at tiny sizes (no compile pool)")
    ap.add_argument("--workers", type=int, default=0, help="compile processes (default: CPU cores - 2 - GPU workers)")
    ap.add_argument("--gpu-workers", type=int, default=0,
                    help="processes running and judging plans (default: 2 per GPU, spread over the GPUs; 1 on cpu)")
    ap.add_argument("--max-elements", type=int, default=0, help="per tensor (default 2^26; 2^11 on cpu)")
    ap.add_argument("--max-flops", type=float, default=0, help="per GEMM (default 2^37; 2^16 on cpu)")
    ap.add_argument("--max-candidates", type=int, default=0, help="per graph (0: every candidate)")
    ap.add_argument("--skip-unfused", action="store_true",
                    help="leave out the unfused fallback where a fused candidate exists (its many kernels are most of "
                         "the nvcc time; it ships only where nothing else derives)")
    ap.add_argument("--no-large", action="store_true", help="no large-magnitude draws")
    ap.add_argument("--plan-timeout-s", type=float, default=300.0,
                    help="a plan silent this long is a crash (hang); its worker is restarted")
    ap.add_argument("--resume", nargs="?", const="latest", default=None,
                    help="add to a results file (default: the latest gpu-fuzz-<gpu>-*.json in --out), skipping its graphs")
    a = ap.parse_args(argv)

    import multiprocessing as mp

    dtypes = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        ap.error(f"--dtypes: {bad or 'none'}; choose from {', '.join(DTYPES)}")
    fams = families()
    if a.list_families:
        print("\n".join(sorted(fams)))
        return 0
    if a.families:
        want = [f for f in a.families.split(",") if f]
        unknown = [f for f in want if f not in fams]
        if unknown:
            ap.error(f"--families: unknown {unknown}; families: {', '.join(sorted(fams))}")
        fams = {f: fams[f] for f in want}
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("gpu_fuzz: no CUDA GPU here; --device cpu runs the dry run on the interpreter", file=sys.stderr)
            return 2
    cpu = a.device == "cpu"
    prof = Profile(a.device, a.max_elements or (2 ** 11 if cpu else 2 ** 26), a.max_flops or (2.0 ** 16 if cpu else 2.0 ** 37))
    ctx = mp.get_context("spawn")
    t_start = time.time()
    n_gpus = 1
    if not cpu:
        import torch
        n_gpus = max(1, torch.cuda.device_count())
    n_workers = a.gpu_workers or (1 if cpu else 2 * n_gpus)
    import tempfile
    logs = Path(tempfile.gettempdir()) / f"gpu_fuzz_logs_{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    workers = [Worker(ctx, a.device, i, str(logs / f"worker-{i}.log")) for i in range(n_workers)]
    for w in workers:
        w.wait_ready()
    gpu = workers[0].gpu
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    old, path = None, None
    if a.resume:
        if a.resume == "latest":
            found = list(out_dir.glob(f"gpu-fuzz-{slug(gpu)}-*.json"))
            path = max(found, key=lambda f: f.stat().st_mtime) if found else None
        else:
            path = Path(a.resume)
        if path is not None and path.exists():
            old = json.loads(path.read_text())
            print(f"resuming {path}: {old.get('graphs')} graphs, {old.get('plans')} plans done", flush=True)
    if path is None:
        path = out_dir / f"gpu-fuzz-{slug(gpu)}-{date.today().isoformat()}{'-' + a.tag if a.tag else ''}.json"
    seed = a.seed if a.seed is not None else int((old or {}).get("seed", 0))
    versions = dict(workers[0].versions)
    try:
        from leantile import __version__
        versions["leantile"] = __version__
    except Exception:
        pass
    meta = {"gpu": gpu, "gpu_slug": slug(gpu), "gpus": n_gpus, "device": a.device, "date": date.today().isoformat(),
            "seed": seed, "versions": versions, "options": {k: v for k, v in vars(a).items() if k not in ("resume",)},
            "families": sorted(fams), "dtypes": dtypes, "max_elements": prof.max_elements, "max_flops": prof.max_flops}
    res = Results(path, meta, old)
    n_compile = a.workers or max(1, (os.cpu_count() or 2) - 2 - n_workers)
    pool = None
    if not cpu:
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=n_compile, mp_context=ctx, initializer=_pool_init, initargs=(n_gpus,))
    print(f"gpu_fuzz on {n_gpus} x {gpu}: seed {seed}, budget {a.budget_s:.0f} s (+{a.drain_s:.0f} s drain), "
          f"{n_compile if pool else 0} compile processes, {n_workers} GPU workers, families {', '.join(sorted(fams))}, "
          f"dtypes {', '.join(dtypes)}, <= {prof.max_elements} elements per tensor -> {path}; "
          f"GPU workers' output in {logs}", flush=True)

    stream = graph_stream(seed, fams, dtypes, prof)
    compiling: dict[int, dict] = {}  # gid -> job waiting on its compiles
    ready: deque = deque()
    drawn, gid_next, restarts, exhausted = 0, 0, 0, False
    seen_keys = set(res.done)
    compile_s = []

    def elapsed():
        return time.time() - t_start

    def outstanding():
        return sum(len(j["futures"]) for j in compiling.values())

    def draw_next():
        nonlocal drawn, gid_next, exhausted
        for fam, g, dtype, extra in stream:
            key = graph_key(g)
            if key in seen_keys:
                continue
            seen_keys.add(key)
            plans, refused, crashed = plans_of(g, a.max_candidates, a.skip_unfused)
            job = {"gid": gid_next, "key": key, "family": fam, "name": g.name, "dtype": dtype, "sizes": dict(g.axes),
                   "graph": g.to_json(), "extra": extra, "seed": int(key[:8], 16),
                   "large": not a.no_large, "plans": plans, "refused": refused, "crashed": crashed, "statuses": {},
                   "futures": {}, "start": 0, "running": None, "reported": set(), "draws": {}}
            gid_next += 1
            drawn += 1
            if pool is not None:
                for p in plans:
                    job["futures"][p["key"]] = pool.submit(precompile, p["source"])
            compiling[job["gid"]] = job
            return True
        exhausted = True
        return False

    def send(w, job):
        msg = {k: job[k] for k in ("gid", "graph", "extra", "seed", "large", "start")}
        msg["plans"] = [{k: p[k] for k in ("candidate", "default", "key")} for p in job["plans"]]
        w.inq.put(msg)
        w.job, w.last = job, time.time()
        job["running"] = None

    def finish(job, info):
        fam = job["family"]
        for c in job["crashed"]:
            res.failure(job, {"candidate": c["candidate"]}, {"kind": "crash", **c})
        res.add_graph(job, job["statuses"], {**info, "draws": {**job["draws"], **info.get("draws", {})}})
        sts = list(job["statuses"].values())
        line = (f"[{len(res.runs):5d} {elapsed():7.1f}s] {fam:<22} {job['dtype']:<5} "
                f"{' '.join(f'{k}={v}' for k, v in job['sizes'].items())[:70]:<70} | {len(sts)} plans: "
                + ", ".join(f"{n} {s}" for s, n in sorted({s: sts.count(s) for s in set(sts)}.items()))
                + (f"; refused {len(job['refused'])}" if job["refused"] else "")
                + (f"; derive crash {len(job['crashed'])}" if job["crashed"] else "")
                + (f"; graph skipped: {info['error'][:120]}" if info.get("error") else ""))
        print(line, flush=True)
        res.write(elapsed())

    def on_plan(job, i, rec):
        job["reported"].add(i)
        job["draws"].update(rec.get("draws") or {})
        p = job["plans"][i]
        job["statuses"][p["candidate"] if p["candidate"] is not None else "(default)"] = rec["status"]
        plan = {**p, **{k: rec.get(k) for k in ("tiles", "plan_candidate")}}
        plan.pop("source", None)
        for f in rec.get("failures", []):
            if f["kind"] in ("mismatch", "crash"):
                res.failure(job, plan, f)
                what = (f"{f.get('output')} rel err {f['outputs'][f['output']]['rel_err']} > {f['outputs'][f['output']]['tolerance']}"
                        if f["kind"] == "mismatch" else f.get("error", "")[:200])
                print(f"    {f['kind'].upper()} {job['family']}/{job['name']} {job['dtype']} candidate "
                      f"{p['candidate'] or '(default)'} draw {f.get('draw', '-')}: {what}", flush=True)
        if rec["status"] == "crash" and not any(f["kind"] == "crash" for f in rec.get("failures", [])):
            res.failure(job, plan, {"kind": "crash", "stage": rec.get("stage"), "error": rec.get("error"),
                                    "trace": rec.get("trace")})
            print(f"    CRASH {job['family']}/{job['name']} {job['dtype']} candidate {p['candidate'] or '(default)'}: "
                  f"{(rec.get('error') or '')[:200]}", flush=True)
        if rec.get("compile_s") is not None:
            compile_s.append(rec["compile_s"])

    def restart(k: int, why: str):
        nonlocal restarts
        w = workers[k]
        job = w.job
        w.kill()
        restarts += 1
        i = job["running"]
        if i is not None and i not in job["reported"]:
            on_plan(job, i, {"status": "crash", "stage": "run", "error": why, "trace": _log_tail(w.log)})
        print(f"    GPU worker {k} restarted ({why}); graph {job['name']} goes on from plan {(i or 0) + 1}", flush=True)
        workers[k] = Worker(ctx, a.device, w.index, w.log)
        workers[k].wait_ready()
        for other in workers:  # their words waited in their queues meanwhile: no hang of theirs
            other.last = max(other.last, time.time())
        if i is None:  # it died before any plan of this graph: the graph is skipped
            finish(job, {"error": f"GPU worker died before its first plan: {why}"})
            return
        job["start"] = i + 1
        if job["start"] < len(job["plans"]):
            send(workers[k], job)
        else:
            finish(job, {"error": None})

    hard_end = a.budget_s + a.drain_s
    try:
        while restarts <= 20:
            drawing = elapsed() < a.budget_s and not exhausted and (not a.max_graphs or drawn < a.max_graphs)
            while drawing and (outstanding() < 2 * n_compile if pool else len(compiling) + len(ready) < 2 * n_workers):
                if not draw_next():
                    break
                drawing = not a.max_graphs or drawn < a.max_graphs
            for gid in [gid for gid, j in compiling.items() if all(f.done() for f in j["futures"].values())]:
                job = compiling.pop(gid)
                for p in job["plans"]:
                    f = job["futures"].get(p["key"])
                    if f is not None:
                        err, secs = f.result()
                        p["precompile_s"], p["precompile_error"] = round(secs, 2), err
                job["futures"] = {}
                if job["plans"]:
                    ready.append(job)
                else:
                    finish(job, {"error": None})
            for w in workers:
                if w.job is None and ready:
                    send(w, ready.popleft())
            busy = [w for w in workers if w.job is not None]
            if not busy and not ready and not compiling and not drawing:
                break
            if elapsed() >= hard_end:
                print(f"drain over at {elapsed():.0f} s: {len(compiling)} graphs compiling, {len(ready)} ready and "
                      f"{len(busy)} at the GPU workers are left for a --resume run", flush=True)
                break
            heard = False
            for k, w in enumerate(workers):
                if w.job is None:
                    continue
                try:
                    msg = w.outq.get_nowait()
                except queue.Empty:
                    if not w.proc.is_alive():
                        restart(k, f"worker exited with code {w.proc.exitcode}")
                    elif time.time() - w.last > a.plan_timeout_s:
                        restart(k, f"no word for {a.plan_timeout_s:.0f} s (a hang)")
                    continue
                heard, w.last = True, time.time()
                if msg[0] == "start":
                    w.job["running"] = msg[2]
                elif msg[0] == "plan":
                    on_plan(w.job, msg[2], msg[3])
                elif msg[0] == "done":
                    job, w.job = w.job, None
                    finish(job, msg[2])
            if not heard:
                time.sleep(0.05)
        else:
            print("gpu_fuzz: more than 20 GPU worker restarts; stopping", flush=True)
    except KeyboardInterrupt:
        print("interrupted: writing what was judged", flush=True)
    finally:
        res.write(elapsed(), final=True)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list((getattr(pool, "_processes", None) or {}).values()):  # nvcc of graphs left over: ended now
                if proc.is_alive():
                    proc.kill()
        for w in workers:
            try:
                w.inq.put(None)
                w.proc.join(timeout=5)
            finally:
                w.kill()
    print()
    print(table(res.counts))
    t = res.totals()
    print(f"\n{t['graphs']} graphs, {t['plans']} plans: {t['mismatch']} mismatch, {t['crash']} crash, "
          f"{t['unjudged']} unjudged, {t['refused']} refused; largest axis {res.largest}; "
          f"{t['graphs_axis_ge_65536']} graphs with an axis >= 65536; {t['large_draws']} large-magnitude draws judged"
          + (f"; median compile (worker) {sorted(compile_s)[len(compile_s) // 2]:.2f} s" if compile_s else "")
          + f"\n-> {path}", flush=True)
    return 1 if t["mismatch"] or t["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
