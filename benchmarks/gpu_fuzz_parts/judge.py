"""In a GPU worker: one graph's plans compiled, run on seeded inputs (natural and large scale)
and judged against the float64 reference as `Kernel.verify` judges; a fault that kills the
CUDA context ends the process once its last words are sent."""
from __future__ import annotations

import hashlib
import math
import os
import time
import traceback

from nan_graphs import extremum_inputs  # tests/ (on the campaign's path)

from .plans import error_text

LARGE_SCALE = {"f16": 8.0, "bf16": 32.0, "f32": 32.0, "f64": 32.0}
# graphs of wide-exponent inputs only (no f16) are also drawn at 2^14: projections of 2^30, scores
# past 2^60, the magnitudes where a kernel's own rounding of a shift overflows its exponent (the
# FMA form of online softmax, exp2(m c' - round(m c')): NaN at scores of 5e11, gpu-fuzz 2026-11-28)
HUGE_SCALE = {"bf16": 16384.0, "f32": 16384.0, "f64": 16384.0}
NAN_EVERY = 4096  # the "nan" draw's density (judge._inputs)
RETRIES = 2  # more draws for a plan whose every failing output is ill-conditioned


class _Draw:
    def __init__(self, kind, scale, seed, inputs=None, refs=None, skip=None):
        self.kind, self.scale, self.seed, self.inputs, self.refs, self.skip = kind, scale, seed, inputs, refs, skip


def _inputs(g, seed, scale, dev, torch, prefix=False, nan=()) -> dict:
    """Normal inputs of standard deviation `scale` drawn on the device (seeded), in each input's
    dtype; cross-entropy's class ids as integers; a masked softmax's (a long log-sum-exp's) rows
    with a -inf prefix; about one element in NAN_EVERY of each input named in `nan` NaN (at least
    one: max and min must propagate it as torch's do, leantile.codegen_nan; tests/nan_graphs.py
    extremum_inputs says which)."""
    from leantile.reference import TORCH_DTYPES

    gen = torch.Generator(device=dev).manual_seed(seed)
    out = {}
    for n in g.inputs():
        shape = [g.axes[a] for a in n.axes]
        if g.name == "cross_entropy" and n.name == "T":
            x = torch.randint(0, g.axes["c"], shape, generator=gen, device=dev).to(torch.float32)
        else:
            x = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32) * scale
        if n.name in nan and x.numel():
            hit = torch.rand(shape, generator=gen, device=dev) < 1.0 / NAN_EVERY
            hit.view(-1)[int(torch.randint(0, x.numel(), (1,), generator=gen, device=dev))] = True
            x = x.masked_fill(hit, float("nan"))
        out[n.name] = x.to(TORCH_DTYPES[n.dtype])
    if prefix and "X" in out and out["X"].dim() >= 1:  # X[..., :prefix] = -inf per row, a finite score kept
        # (masked_softmax_graphs' rows; a long log-sum-exp's, where the prefix fills whole slices)
        shape = out["X"].shape
        x = out["X"].reshape(-1, shape[-1])
        m, t = x.shape
        keep = torch.randint(0, max(t, 1), (m, 1), generator=gen, device=dev)
        out["X"] = x.masked_fill(torch.arange(t, device=dev)[None, :] < keep, float("-inf")).reshape(shape)
    return out


def saved_from_forward(g, extra: dict, inputs: dict, torch, seed: int = 0, scale: float = 1.0) -> dict:
    """A backward graph's saved inputs (what the forward hands over: attention's output, its rows'
    max and sum) as its forward computes them from the drawn primal inputs, in place of drawn ones:
    a drawn softmax sum near 0 made P overflow the backward's f16 values where the float64 reference
    stayed finite, every plan (unfused too) "wrong" on inputs no training run hands over (GPU
    campaign s79). `extra` carries the forward (JSON) and {saved input: forward node}; the
    forward is taken at the backward's sizes; its inputs the backward does not read are drawn
    (seeded, at `scale`) for it alone."""
    if not extra.get("forward"):
        return inputs
    from types import SimpleNamespace

    from leantile import ir
    from leantile.reference import saved_from_forward

    fwd = ir.parse(extra["forward"])
    fwd = fwd.model_copy(update={"axes": {a: g.axes[a] for a in fwd.axes}})
    back = SimpleNamespace(saved={k: int(v) for k, v in extra["saved"].items()}, graph=g)
    drawn = _inputs(fwd, seed + 7, scale, next(iter(inputs.values())).device, torch) if any(
        n.name not in inputs for n in fwd.inputs()) else {}
    out = saved_from_forward(fwd, back, {**drawn, **inputs})
    return {k: out[k] for k in inputs}


def _fits(g, inputs, torch) -> bool:
    """The graph's value (float32) is finite at every node and representable where the graph
    rounds it in every plan (its outputs, its casts, its GEMM operands): a large draw is judged
    only there (tests/cpu/test_intermediate_range.py's criterion)."""
    from leantile import ir, reference
    from leantile.reference import TORCH_DTYPES

    every = {f"v{n.id}": n.id for n in g.nodes if not isinstance(n, (ir.Const, ir.SizeConst))}
    vals = reference.evaluate(g.model_copy(update={"outputs": every}), inputs, compute_dtype=torch.float32, check=False)
    dtypes = ir.value_dtypes(g)
    rounded = reference.plan_rounded(g)
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


def run_graph(job, dev, outq, leantile, ir, runtime, torch) -> dict:
    from leantile.derive import DerivationError
    from leantile.reference import natural_scale

    g = ir.parse(job["graph"])
    gid, seed = job["gid"], job["seed"]
    prefix = bool(job.get("extra", {}).get("prefix"))
    dtypes = {n.dtype for n in g.inputs()} or {"f32"}
    large = min(LARGE_SCALE[d] for d in dtypes)  # the narrowest input dtype sets the scale
    kinds = [("normal", natural_scale(g))] + ([("large", large)] if job.get("large", True) else [])
    # (not a backward fed its forward's saved values: it recomputes exp(s - M) from a max the
    # forward computed apart, and at inputs of 2^14 an ulp of scores near 1e9 is exp(64): every
    # plan, unfused too, overflows where float64 does not, GPU campaign s80; no training run has such scores)
    if job.get("large", True) and dtypes <= set(HUGE_SCALE) and not job.get("extra", {}).get("forward"):
        kinds.append(("huge", min(HUGE_SCALE[d] for d in dtypes)))
    if extremum_inputs(g):  # NaN inputs: a max or min must hand them on (GPU campaign s70, leantile.codegen_nan)
        kinds.append(("nan", natural_scale(g)))
    draws: dict[str, _Draw] = {}
    info = {"draws": {}, "ref_s": 0.0}

    def draw(kind, scale, s, k):
        t0 = time.time()
        inputs = _inputs(g, s, scale, dev, torch, prefix, nan=extremum_inputs(g) if kind == "nan" else ())
        inputs = saved_from_forward(g, job.get("extra", {}), inputs, torch, s, scale)
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
            # the CPU dry run checks the plan (the interpreter), not the graph's reference
            k = leantile.compile(g, candidate=p["candidate"], device=dev, tuned=False, interpret=dev.type != "cuda",
                                 tiles=job.get("tiles"))
        except (DerivationError, ir.GraphError) as e:
            outq.put(("plan", gid, i, {**rec, "status": "refused", "error": error_text(e)}))
            continue
        except Exception as e:
            dead = _context_dead(dev, torch)
            outq.put(("plan", gid, i, {**rec, "status": "crash", "stage": "compile", "error": error_text(e),
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
                    draws[kind] = draw(kind, scale, seed + {"normal": 0, "large": 1, "huge": 2, "nan": 3}[kind], k)
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
                    rec["failures"].append({"kind": "skipped", "draw": kind, "error": error_text(e)})
                    continue
                rec["failures"].append({"kind": "crash", "stage": stage, "draw": kind, "scale": scale,
                                        "error": error_text(e), "trace": traceback.format_exc()[-3000:]})
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
