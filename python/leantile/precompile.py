"""Compiling ahead, in spawned processes: the plan leantile.compile will choose for a graph, compiled
into TileLang's disk cache, so that the compile in the process that runs it is a cache hit. The
shape suite (leantile.suite), the training suite and the GPU tests overlap nvcc's minutes this way."""
from __future__ import annotations

from . import ir


def _precompile(graph_json: str, gpu: str, tuned: bool) -> str | None:
    """In a pool process: compile the plan leantile.compile will choose into TileLang's disk
    cache (so the GPU loop's compile is a cache hit); None, or why it failed (the loop then
    compiles, and reports, itself)."""
    try:
        from .chunked import auto_chunks
        from .emit import emit_module
        from .plan.storage import in_place
        from .runtime import choose_plan, emitted_module

        g = ir.parse(graph_json)
        plan, _ = choose_plan(g, gpu=gpu, tuned=tuned)
        chunks = auto_chunks(g, plan)  # compile runs these chunks' plans instead (an LM head's), as it makes them
        plans = [plan] if chunks is None else [in_place(choose_plan(cg, gpu=gpu, tuned=tuned)[0], chunks.into)
                                               for cg in chunks.graphs().values()]
        for p in plans:
            emitted_module(emit_module(p)).compile_kernels(target="cuda")
        return None
    except Exception as e:
        return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


def precompile_pool(jobs: list, workers: int | None):
    """(pool, {job index: future}) compiling each (graph json, gpu, tuned) in spawned processes;
    (None, {}) where there is no pool."""
    import os

    from .process_pool import spawn_pool

    if not jobs:
        return None, {}
    pool = spawn_pool(workers or max(1, min(len(jobs), (os.cpu_count() or 2) - 2)))
    if pool is None:  # no processes here: the loop compiles each kernel itself
        return None, {}
    return pool, {i: pool.submit(_precompile, *job) for i, job in enumerate(jobs)}


def training_graphs(g: ir.Graph, wrt=None) -> list[ir.Graph]:
    """The graphs leantile.torch.op compiles to train g: g itself, its training forward where the
    backward reads saved values (autodiff.training_forward), and the backward for `wrt` (default:
    every input); for a loss that runs in chunks, g and its fused step (leantile.torch.StepOp) --
    what to compile ahead of a training run."""
    from .autodiff import default_saved, training_forward, vjp
    from .chunked import auto_chunks
    from .runtime import choose_plan
    from .train_step import step_graph
    step = step_graph(g, wrt)
    if step is not None and auto_chunks(g, choose_plan(g)[0]) is not None:
        return [g, step[0]]
    train, _ = training_forward(g)
    bw = vjp(g, wrt=wrt, save=default_saved(g)).graph
    return [g] + ([train] if train is not None else []) + ([bw] if bw is not None else [])


def precompile_graphs(graphs: list, gpu: str, workers: int | None = None) -> dict[str, str | None]:
    """Each graph's chosen plan compiled ahead (precompile_pool), waited for: {graph name: None, or
    why it failed}. Serially in this process where none can be spawned."""
    pool, futures = precompile_pool([(g.to_json(), gpu, True) for g in graphs], workers)
    if pool is None:
        return {g.name: _precompile(g.to_json(), gpu, True) for g in graphs}
    try:
        return {graphs[i].name: f.result() for i, f in futures.items()}
    finally:
        pool.shutdown()
