"""Measuring points: a CPU compile pool and one worker process per GPU, or a fake.

GpuMeasurer.measure(workload, points), or measure_many([(workload, points), ...]) for several
workloads at once (their compiles share the pool):
  1. CPU, in parallel (concurrent.futures processes, one per core): derive the plan at the
     point's tiles, emit the TileLang module to build/search/<arch>/<candidate>_<hash>.py
     (TileLang reads function source from files), then `cpu_stage`: "compile" (the default)
     compiles it with nvcc through tilelang.compile, which stores the binary in TileLang's
     disk cache, so the GPU worker's own compile is a cache hit and the GPUs never wait on
     nvcc; "lower" only lowers every kernel to CUDA C for sm_90 (no GPU needed); "emit" stops
     after emitting. A point that does not compile never reaches a GPU.
  2. GPU, one process per device (CUDA_VISIBLE_DEVICES set before CUDA starts): the point
     goes through the runtime's one GPU path (leantile.runtime.Kernel: compile, a cache hit;
     Kernel.verify, every output NaN-poisoned and judged by leantile.tolerance; only then
     Kernel.benchmark, triton's do_bench_cudagraph median, launch overhead excluded: the
     measurement that separates kernels of tens of microseconds, per the maintainers' H200 notes).
     A worker that dies (a CUDA fault poisons its context) fails its job and is restarted.

FakeMeasurer: a deterministic synthetic cost model over a Space, for CPU tests.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..tuned import valid_time
from .space import Point, Space

@dataclass(frozen=True)
class Measurement:
    compile_ok: bool
    verified_ok: bool
    time_ms: float | None
    error: str | None = None

    @staticmethod
    def checked(compile_ok, verified_ok, time_ms, error=None) -> "Measurement":
        """A measurement whose time is impossible (<= 0, NaN, inf, not a number) is a failed,
        unverified point with no time: it can never become a best."""
        if verified_ok and not valid_time(time_ms):
            return Measurement(bool(compile_ok), False, None, f"impossible time {time_ms!r:.40} ms" + (
                f"; {error}" if error else ""))
        return Measurement(bool(compile_ok), bool(verified_ok), time_ms if valid_time(time_ms) else None, error)

    @property
    def ok(self) -> bool:
        return bool(self.compile_ok and self.verified_ok) and valid_time(self.time_ms)

    @property
    def score(self) -> float:
        """What the policy sees: the time, or +inf for a point that failed."""
        return float(self.time_ms) if self.ok else math.inf


def software_versions() -> dict:
    """What measured a row, beside the GPU: leantile, torch, tilelang and (where torch is
    already imported, as in a GPU worker) the CUDA runtime torch was built with."""
    from importlib import metadata

    from .. import __version__

    out = {"leantile": __version__}
    for pkg in ("torch", "tilelang"):
        try:
            out[pkg] = metadata.version(pkg)
        except Exception:  # not installed, or broken metadata
            out[pkg] = None
    torch = sys.modules.get("torch")
    out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    return out


# ------------------------------------------------------------------------ fake
def _h01(*parts) -> float:
    d = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(d[:8], "big") / 2**64


class FakeMeasurer:
    """time = floor * 1.3 * (1 + distance to a hidden optimum + candidate penalty + bumps).

    The distance is weighted per parameter in domain-index units (to the power 1.5), so the
    landscape is smooth with deterministic hash bumps (local minima); `fail_rate` of the
    points "fail to compile" (never the optimum). Everything depends only on `seed`."""
    gpu_name = "fake"

    def __init__(self, space: Space, floor_ms: float = 0.01, seed: int = 0, fail_rate: float = 0.05,
                 ruggedness: float = 0.08):
        self.space, self.floor, self.seed = space, floor_ms, seed
        self.fail_rate, self.ruggedness = fail_rate, ruggedness
        rng = random.Random(f"fake-{seed}")
        self.hint = rng.choice(space.all)
        self.cand_pen = {c: (0.0 if c == self.hint.candidate else rng.uniform(0.1, 0.4)) for c in space.candidates}
        self.weight = {p: rng.uniform(0.1, 0.4) for p in space.domains}
        self.calls = 0
        self.seen: list[Point] = []
        self.versions = software_versions()

    def fails(self, p: Point) -> bool:
        return p != self.hint and _h01(self.seed, "fail", p.key()) < self.fail_rate

    def cost(self, p: Point) -> float:
        h = self.hint.tile_dict
        idx = self.space.domain_index  # off the domain (the default plan's 16-row tile): the nearest
        d = sum(self.weight[k] * abs(idx(k, v) - idx(k, h[k])) ** 1.5
                for k, v in p.tiles if k in h)
        bump = 0.0 if p == self.hint else self.ruggedness * _h01(self.seed, "bump", p.key())
        return self.floor * 1.3 * (1.0 + d + self.cand_pen.get(p.candidate, 0.4) + bump)

    def optimum(self) -> tuple[Point, float]:
        return min(((p, self.cost(p)) for p in self.space.all if not self.fails(p)), key=lambda x: (x[1], x[0]))

    def measure(self, workload, points: list[Point]) -> list[Measurement]:
        out = []
        for p in points:
            self.calls += 1
            self.seen.append(p)
            if self.fails(p):
                out.append(Measurement(False, False, None, "fake: does not compile"))
            else:
                out.append(Measurement(True, True, self.cost(p)))
        return out

    def close(self):
        pass


# ------------------------------------------------------------------------ CPU compile stage
CPU_STAGES = ("compile", "lower", "emit")


def compile_job(source: str, sizes: dict, candidate: str, tiles: dict, build_dir: str,
                stage: str = "lower") -> dict:
    """Derive and emit one point, then compile it into TileLang's cache or lower it to CUDA C
    (`stage`, one of CPU_STAGES). Runs in a pool process."""
    from ..derive import derive
    from ..emit import emit_module
    from ..sources import load_source_at
    from ..files import write_atomic

    try:
        g = load_source_at(source, sizes)
        plan = derive(g, candidate, tiles)
        src = emit_module(plan)
        h = hashlib.sha1(src.encode()).hexdigest()[:12]
        safe = re.sub(r"[^\w]", "_", candidate)
        path = Path(build_dir) / g.name / f"{safe}_{h}.py"
        if not path.exists():
            write_atomic(path, src)
        if stage == "compile":  # the module as the runtime loads it: the GPU worker's compile hits the cache
            from ..runtime import emitted_module

            emitted_module(src).compile_kernels(target="cuda")
        elif stage == "lower":
            from ..lower import lower_to_cuda
            from ..runtime import emitted_module

            mod = emitted_module(src)
            for name, f in mod.build_kernel().items():
                lower_to_cuda(f, pass_configs=mod.PASS_CONFIGS.get(name))
        return {"ok": True, "path": str(path)}
    except Exception as e:
        msg = str(e).strip().splitlines()
        return {"ok": False, "error": f"{type(e).__name__}: {msg[-1] if msg else ''}"[:500]}


# ------------------------------------------------------------------------ GPU stage
def _measure_on_gpu(source: str, sizes: dict, candidate: str, tiles: dict, graphs: dict, rep: int,
                    tol: float | None) -> dict:
    """One point through leantile.runtime: compile (a cache hit after the CPU stage), verify,
    and only a verified kernel is timed. `graphs` keeps each workload's graph and inputs."""
    import torch

    from ..derive import derive
    from ..runtime import Kernel
    from ..sources import load_source_at

    key = (source, json.dumps(sizes, sort_keys=True))
    if key not in graphs:
        g = load_source_at(source, sizes)
        graphs[key] = (g, None)
    g, inputs = graphs[key]
    device = torch.device("cuda", 0)
    try:
        k = Kernel(g, derive(g, candidate, tiles), "asked", device)
    except Exception as e:
        msg = str(e).strip().splitlines()
        return {"compile_ok": False, "verified_ok": False, "error": f"compile: {type(e).__name__}: {msg[-1] if msg else ''}"[:500]}
    if inputs is None:
        inputs = k.random_inputs(seed=1)
        graphs[key] = (g, inputs)
    v = k.verify(inputs, tolerance=tol)
    if not v["ok"]:
        bad = next(o for o in v["rel_err"] if not v["rel_err"][o] <= v["tolerance"][o])
        return {"compile_ok": True, "verified_ok": False,
                "error": f"output {bad}: rel err {v['rel_err'][bad]:.3g} (tol {v['tolerance'][bad]:g})"}
    return {"compile_ok": True, "verified_ok": True, "time_ms": float(k.benchmark(inputs, rep=rep))}


def gpu_worker(gpu: int, inq, outq, rep: int = 100) -> None:
    """One process per GPU: receive (job id, source, sizes, candidate, tiles, tolerance), send results."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import torch

    outq.put(("hello", gpu, torch.cuda.get_device_name(0), software_versions()))
    graphs: dict = {}
    while True:
        job = inq.get()
        if job is None:
            return
        jid, source, sizes, candidate, tiles, tol = job
        outq.put(("start", gpu, jid))
        fatal = False
        try:
            res = _measure_on_gpu(source, sizes, candidate, tiles, graphs, rep, tol)
        except Exception as e:
            msg = str(e).strip().splitlines()
            res = {"compile_ok": True, "verified_ok": False, "error": f"{type(e).__name__}: {msg[-1] if msg else ''}"[:500]}
            fatal = "cuda" in str(e).lower() or "illegal" in str(e).lower()
        outq.put(("done", gpu, jid, res))
        if fatal:  # a CUDA fault poisons the context: start afresh
            os._exit(3)


def measure_batches(measurer, batches: list[tuple]) -> list[list]:
    """[(workload, points)] -> [measurements per batch]: in one call where the measurer takes
    several workloads at once (GpuMeasurer.measure_many: one pool for every compile), else one
    workload after another."""
    many = getattr(measurer, "measure_many", None)
    if many is not None:
        return many(batches)
    return [measurer.measure(wl, pts) for wl, pts in batches]


class GpuMeasurer:
    def __init__(self, gpus=(0,), compile_workers: int | None = None, build_dir: str = "build/search",
                 cpu_stage: str = "compile", rep: int = 100, job_timeout_s: float = 180.0,
                 tol: float | None = None):
        import multiprocessing as mp

        from ..process_pool import spawn_pool

        self.ctx = mp.get_context("spawn")
        if cpu_stage not in CPU_STAGES:
            raise ValueError(f"cpu_stage {cpu_stage!r}: expected one of {CPU_STAGES}")
        self.gpus, self.build_dir, self.cpu_stage, self.rep = list(gpus), build_dir, cpu_stage, rep
        self.tol = tol  # None: leantile.tolerance's table by output dtype
        self.job_timeout_s = job_timeout_s
        self.pool = spawn_pool(compile_workers or os.cpu_count() or 1)
        if self.pool is None:  # the machine's limit, not the user's input: one line, exit 1
            from ..ir import GraphError
            raise GraphError(["search: no worker process can be started here (multiprocessing is unavailable)"])
        self.inq, self.outq = self.ctx.Queue(), self.ctx.Queue()
        self.procs = {g: self._spawn(g) for g in self.gpus}
        self.gpu_name, self.versions = None, None
        started: set = set()
        t0 = time.time()
        while len(started) < len(self.gpus):  # a worker that dies before saying hello is an error, not a hang
            try:
                kind, gpu, name, versions = self.outq.get(timeout=2)
            except queue.Empty:
                dead = [g for g, p in self.procs.items() if g not in started and not p.is_alive()]
                if dead or time.time() - t0 > 300:
                    self.close()
                    why = f"exited (code {self.procs[dead[0]].exitcode})" if dead else "did not start in 300 s"
                    raise RuntimeError(f"GPU worker for device {dead[0] if dead else '?'} {why}")
                continue
            started.add(gpu)
            self.gpu_name = self.gpu_name or name
            self.versions = self.versions or versions

    def _spawn(self, gpu):
        p = self.ctx.Process(target=gpu_worker, args=(gpu, self.inq, self.outq, self.rep), daemon=True)
        p.start()
        return p

    def measure(self, workload, points: list[Point]) -> list[Measurement]:
        return self.measure_many([(workload, points)])[0]

    def measure_many(self, batches: list[tuple]) -> list[list[Measurement]]:
        """Points of several workloads at once, [(workload, points)] -> [measurements per batch]:
        every compile goes to the pool together (a round of the lockstep search, or the shipped
        default of every workload, compiles on all cores instead of one workload after another),
        and each point goes to the GPUs as soon as it is compiled."""
        from concurrent.futures import as_completed

        jobs = [(wl, p) for wl, points in batches for p in points]
        results: list[Measurement | None] = [None] * len(jobs)
        futs = {self.pool.submit(compile_job, wl.spec, dict(wl.sizes), p.candidate, p.tile_dict,
                                 self.build_dir, self.cpu_stage): i for i, (wl, p) in enumerate(jobs)}
        pending, inflight = set(), {}
        for fut in as_completed(futs):  # a point goes to the GPUs as soon as it is compiled
            i = futs[fut]
            try:
                r = fut.result()
            except Exception as e:  # the pool process died
                r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            if not r["ok"]:
                results[i] = Measurement(False, False, None, r["error"])
                continue
            wl, p = jobs[i]
            self.inq.put((i, wl.spec, dict(wl.sizes), p.candidate, p.tile_dict, self.tol))
            pending.add(i)
        while pending:
            try:
                msg = self.outq.get(timeout=5)
            except queue.Empty:
                for g, p in list(self.procs.items()):
                    jid, t0 = inflight.get(g, (None, None))
                    hung = jid is not None and time.time() - t0 > self.job_timeout_s
                    if p.is_alive() and not hung:
                        continue
                    if hung:  # a kernel that never returns (a deadlock) holds the GPU: kill it
                        p.terminate()
                        p.join(timeout=10)
                    inflight.pop(g, None)
                    if jid is not None and jid in pending:  # its job failed with it
                        why = f"timed out after {self.job_timeout_s:.0f} s" if hung else f"died (exit {p.exitcode})"
                        results[jid] = Measurement(True, False, None, f"GPU worker {g} {why}")
                        pending.discard(jid)
                    self.procs[g] = self._spawn(g)
                continue
            if msg[0] == "start":
                inflight[msg[1]] = (msg[2], time.time())
            elif msg[0] == "done":
                _, g, jid, res = msg
                inflight.pop(g, None)
                results[jid] = Measurement.checked(res["compile_ok"], res["verified_ok"], res.get("time_ms"),
                                                   res.get("error"))
                pending.discard(jid)
        out, start = [], 0
        for _, points in batches:
            out.append(results[start:start + len(points)])
            start += len(points)
        return out  # type: ignore[return-value]

    def close(self):
        for _ in self.procs:
            self.inq.put(None)
        for p in self.procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        from ..process_pool import stop_now
        stop_now(self.pool)  # compiles still running are not waited for
