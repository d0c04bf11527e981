"""The plans of a graph (every candidate and the default, each distinct emitted module once),
derived in the driver, and `precompile`, the compile pool's job (nvcc into TileLang's disk cache,
one kernel a job, each distinct kernel once per campaign)."""
from __future__ import annotations

import hashlib
import time
import traceback


def parse_tiles(text: str) -> dict | None:
    """`k=v,k=v` (the campaigns' --tiles) as {k: int(v)}; None for ''."""
    return {k: int(v) for k, v in (x.split("=") for x in text.split(",") if x)} or None


def plans_of(g, max_candidates: int = 0, skip_unfused: bool = False, tiles: dict | None = None) -> tuple[list, list, list]:
    """(plans, refusals, crashes) of g: plans [{candidate (None: the default), default, key
    (the emitted source's digest), source, kernels (their names)}], each distinct source once;
    refusals and crashes [{candidate, stage, error}] of derive and emit. `tiles`: every plan
    derived with these tile parameters (a schedule switch to judge before it ships, e.g.
    stage_loads=1; the default is then the default candidate at them, as leantile.compile(tiles=)
    derives it)."""
    from leantile import ir
    from leantile.cost import choose
    from leantile.derive import DerivationError, candidates, derive
    from leantile.emit import emit_module

    plans, refused, crashed, seen = [], [], [], {}
    try:
        cands = [c.name for c in candidates(g)]
    except Exception as e:
        return [], [], [{"candidate": None, "stage": "candidates", "error": error_text(e)}]
    if skip_unfused and len(cands) > 1:  # the fallback (many small kernels: half the nvcc time) left out
        cands = [c for c in cands if c != "unfused"]
    if max_candidates and len(cands) > max_candidates:
        cands = cands[:max_candidates - 1] + [cands[-1]]  # the first ones and the unfused fallback
    for name in [*cands, None]:
        stage = "derive"
        try:
            plan = choose(g)[0] if name is None and not tiles else derive(g, name, tiles)
            stage = "emit"
            src = emit_module(plan)
        except (DerivationError, ir.GraphError) as e:
            refused.append({"candidate": name, "stage": stage, "error": error_text(e)})
            continue
        except Exception as e:
            crashed.append({"candidate": name, "stage": stage, "error": error_text(e), "trace": traceback.format_exc()[-2000:]})
            continue
        key = hashlib.sha256(src.encode()).hexdigest()[:16]
        if key in seen:  # the default is one of the candidates (or two candidates spell one module)
            if name is None:
                seen[key]["default"] = True
            continue
        seen[key] = {"candidate": name, "default": name is None, "key": key, "source": src,
                     "plan_candidate": plan.candidate, "kernels": [k.name for k in plan.kernels]}
        plans.append(seen[key])
    return plans, refused, crashed


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"


def kernel_digests(source: str) -> dict[str, str]:
    """{kernel name: digest of its TileLang script, nvcc flags and pass options} of an emitted
    module: two kernels of one digest are one nvcc run (candidates of one graph share a third of
    their kernels, measured over the families). Built in the driver without a GPU (the SM count
    the module assumes, dependent launch on): a key for sharing compiles, not the cache's own."""
    from leantile.runtime import emitted_module

    m = emitted_module(source)
    return {name: hashlib.sha256("\n".join([f.script(), repr(m.NVCC_FLAGS.get(name)),
                                            repr(m.PASS_CONFIGS.get(name))]).encode()).hexdigest()[:24]
            for name, f in m.build_kernel(pdl=True, sms=m.SMS).items()}


def precompile_all(source: str) -> tuple[str | None, float]:
    """`precompile` of every kernel of the emitted module, in launch order: (the first failure or
    None, seconds) (the replay's pool job: a module per failing plan)."""
    from leantile.runtime import emitted_module

    done = [precompile(source, name) for name in emitted_module(source).build_kernel(pdl=True)]
    return next((err for err, _ in done if err), None), sum(secs for _, secs in done)


def precompile(source: str, name: str) -> tuple[str | None, float]:
    """In a pool process: the kernel `name` of the emitted module compiled into TileLang's disk
    cache, as the module's compile_kernels compiles it (the GPU worker's compile is then a cache
    hit). (None or why it failed, seconds)."""
    t0 = time.time()
    try:
        from leantile.runtime import emitted_module

        m = emitted_module(source)
        m.compile_kernel(name, m.build_kernel(pdl=m.has_pdl("cuda"))[name], "cuda")
        return None, time.time() - t0
    except Exception as e:
        return error_text(e), time.time() - t0
