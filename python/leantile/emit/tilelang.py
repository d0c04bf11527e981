"""Plan -> TileLang: a Python module that reads like a hand-written TileLang kernel.

`emit_module(plan)` returns the source of one module per candidate:

  - a header comment (graph, candidate, kernels in launch order and their roles);
  - constants: AXES, TILE_PARAMS (defaults = plan.tiles), DTYPE / ACCUM_DTYPE,
    GLOBALS (every device tensor: name, axes, shape, dtype, kind), OUTPUTS, KERNELS
    (launch order, prim_func parameters, which globals each kernel reads and writes);
  - one factory per kernel, `def <kernel>(block_m=..., ..., threads=...)`, returning a
    `@T.prim_func` named after the kernel;
  - `build_kernel(pdl=True, sms=None, **tile_params)` -> {kernel name: prim_func} (pdl: the
    kernels' dependent launch, Kernel.wait_previous / launch_next, spelled or not; sms: the SM
    count a persistent kernel (Kernel.pingpong) launches one CTA each for, by default the GPU's,
    `sm_count()`), `get_configs()` -> a short list of tile-parameter dicts to tune over, and
    `has_pdl(target)` / `compile_kernels` (dependent launch where the target is sm_90 or newer;
    `compile_kernel(name, f)` one of them) / `allocate` / `run` helpers for a GPU.

Statement translation follows leantile.interp exactly (the executable semantics):
loads zero-fill past an axis end (TileLang's bounds-checked T.copy does that), reductions
ignore positions past the end (the emitter masks the reduced operand into a temporary
when the axis can be partial for the chosen block size), Mask sets them, stores write only
the valid part (T.copy's bounds check). Map arguments are converted to the destination's
dtype before the function is applied, as interp does. A deferred reduction (Reduce.deferred)
sums the same values in another order: blockwise into a tile of partials, reduced after the stream.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..files import under, write_atomic
from ..target import DEFAULT
from ..plan import Plan, launches, user_shape
from ..plan.storage import lifetimes, storage
from .common import (TL_DTYPES, TUNABLE, EmitError, _global_dtype, _global_kinds, _ident, nvcc_flags, pass_configs,  # noqa: F401
                     _graph_dtype, _size, tile_param_of)
from .kernel import _KernelWriter
from .tail import ARRIVALS_SOURCE, arrivals_count, arrivals_name

__all__ = ["EmitError", "emit_module", "emit_plan_to_dir", "load_module", "tile_param_of"]


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _configs(plan: Plan, used: set[str], full_row: bool = False) -> list[dict]:
    base = {p: v for p, v in (plan.tiles or {}).items() if p in used}
    # the largest axis each block parameter tiles: a block far beyond it only wastes work
    limit: dict[str, int] = {}
    for k in plan.kernels:
        for a, p in tile_param_of(plan, k).items():
            limit[p] = max(limit.get(p, 0), plan.axes[a])
    options = {"block_m": (64, 128), "block_n": (64, 128, 256), "block_k": (32, 64), "block_r": (16, 32, 64),
               "stages": (2, 3, 4),
               "threads": (128, 256), "swizzle": (0, 10)}
    out = [base]
    for p in TUNABLE:
        if p not in base:
            continue
        for v in options[p]:
            if p in limit and v > max(16, _next_pow2(limit[p])):
                continue
            c = {**base, p: v}
            if full_row and "block_m" in c and "threads" in c and c["block_m"] * 2 < c["threads"]:
                # FullRow GEMMs give each warp 16-row slices of block_m: at most block_m/16 warps
                c["threads"] = max(128, c["block_m"] * 2)
            if c not in out:
                out.append(c)
    # the combinations that won on the H200 for large GEMMs (anchors: 128x256x64, 3 stages)
    for combo in ({"block_n": 256, "stages": 3}, {"block_n": 256, "stages": 4}, {"stages": 3, "block_k": 32}):
        if all(p in base for p in combo):
            c = {**base, **combo}
            if all(p not in limit or v <= max(16, _next_pow2(limit[p])) for p, v in combo.items()) and c not in out:
                out.append(c)
    if any(k.overlap for k in plan.kernels):  # two consumer warpgroups of 64 rows (emit.overlap)
        out = [c for c in out if c.get("block_m", 128) == 128 and c.get("threads", 256) == 256]
    if any(k.pingpong for k in plan.kernels):  # two consumer warpgroups of a 128 x 128 tile each (emit.pingpong)
        out = [c for c in out if c.get("block_m", 128) == 128 and c.get("threads", 256) == 256
               and c.get("block_n", 128) <= 128]
    return out[:14]


# Text the emitter may write raw into docstrings and comments: printable ASCII without the
# two characters that end or escape a docstring (a newline would end a comment). Graph names
# are identifiers (leantile.ir); everything else reaches the module through repr().
_PLAIN_TEXT = re.compile(r'[ -!#-\[\]-~]*')


def _check_plain_text(plan: Plan) -> None:
    """Refuse a plan holding text that could escape a docstring or comment of the module.
    Validation upstream makes this unreachable; it guards the generated module, which
    `leantile kernels` imports, against any path that skipped validation."""
    def walk(x, where):
        if isinstance(x, str):
            if not _PLAIN_TEXT.fullmatch(x):
                raise EmitError(f"internal error (a bug in leantile): plan {where} holds text that is not "
                                f"plain ASCII ({x[:40]!r}); names must be validated before emitting")
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k, where)
                walk(v, f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{where}[{i}]")
    walk(plan.model_dump(mode="json"), "plan")


def emit_module(plan: Plan) -> str:
    """The TileLang source (a Python module) for every kernel of the plan."""
    _check_plain_text(plan)
    runs = launches(plan)  # a tail (Kernel.tail_of) is written into the launch before it (emit.tail)
    writers = [_KernelWriter(plan, k) for k in runs]
    kernel_src = [w.write() for w in writers]
    counters = {w.k.name: arrivals_name(plan, w.k) for w in writers if w.tail}
    out_dt = _graph_dtype(plan)
    used = {"threads"}
    for w in writers:
        used |= set(w.params.values())
        if w.k.stream:
            used.add("stages")
    tiles = {p: v for p, v in (plan.tiles or {}).items() if p in used}

    L: list[str] = []
    L.append(f'"""{plan.graph} / {plan.candidate}: TileLang kernels generated by leantile from a derived plan.')
    L.append("")
    L.append("Kernels, in launch order:")
    for n, (w, k) in enumerate(zip(writers, runs), 1):
        grid = " x ".join(f"{g.axis}/{w.extent(g.axis)}" if g.block > 1 else g.axis for g in k.grid)
        st = f"; streams {k.stream.axis} by {w.extent(k.stream.axis)}" if k.stream else ""
        L.append(f"  {n}. {k.name}: {k.role}")
        if w.tail:
            L.append(f"     and, by the last slice of each tile to finish, {w.tail.name}: {w.tail.role}")
        L.append(f"     grid {grid}{st}; reads {', '.join(w.reads) or '-'}; writes {', '.join(w.writes) or '-'}")
    L.append("")
    L.append(f"Outputs: {', '.join(f'{o} = {b}' for o, b in plan.outputs.items())}. Intermediate global buffers")
    L.append("(GLOBALS with kind 'intermediate') and outputs are allocated by the caller (see allocate()).")
    L.append("Generated code: edit the plan or the emitter (leantile.emit.tilelang), not this file.")
    L.append('"""')
    L.append("from functools import reduce")
    L.append("")
    L.append("import tilelang")
    L.append("import tilelang.language as T")
    L.append("")
    L.append(f"GRAPH = {plan.graph!r}")
    L.append(f"CANDIDATE = {plan.candidate!r}")
    L.append(f"AXES = {dict(plan.axes)!r}")
    L.append(f"TILE_PARAMS = {tiles!r}  # defaults, from the plan")
    L.append(f"DTYPE = {out_dt!r}  # the graph's inputs (each output has its value's dtype: GLOBALS)")
    L.append('ACCUM_DTYPE = "float32"  # "acc" buffers: accumulators and intermediate results')
    L.append("")
    for a in plan.axes:
        L.append(f"{_size(a)} = AXES[{a!r}]")
    L.append("dtype, accum_dtype = DTYPE, ACCUM_DTYPE")
    L.append("")
    L.append("# every tensor in device memory: graph inputs, intermediates between kernels, outputs")
    L.append("GLOBALS = [")
    kinds = _global_kinds(plan)
    places = storage(plan)  # 'within': (host, byte offset): an intermediate kept in bytes not yet live (plan.storage)
    for b in plan.globals:
        dt = _global_dtype(plan, b)
        dt = {"DTYPE": out_dt, "ACCUM_DTYPE": "float32"}.get(dt, dt.strip("'\""))
        shape = tuple(plan.axes[a] for a in b.axes)
        within = f", 'within': {tuple(places[b.name])!r}" if b.name in places else \
            f", 'alias': {plan.in_place[b.name]!r}" if b.name in plan.in_place else ""  # written over that input
        L.append(f"    {{'name': {b.name!r}, 'axes': {tuple(b.axes)!r}, 'shape': {shape!r}, 'dtype': {dt!r}, "
                 f"'kind': {kinds[b.name]!r}{within}}},")
    for w in writers:  # emit.tail: a launch's arrival counters, kept zeroed by allocate()
        if w.tail:
            L.append(f"    {{'name': {counters[w.k.name]!r}, 'axes': (), 'shape': ({arrivals_count(plan, w.tail)},), "
                     "'dtype': 'int32', 'kind': 'arrivals'},")
    L.append("]")
    L.append(f"OUTPUTS = {dict(plan.outputs)!r}")
    # run(fill=...) poisons a host again as its first kernel starts: its guests' values are dead by then
    poison: dict[str, list[str]] = {}
    first = {n: life[0] for n, life in lifetimes(plan).items()}
    for host in sorted({p.host for p in places.values()}):
        poison.setdefault(runs[first[host]].name, []).append(host)
    L.append(f"POISON = {poison!r}  # kernel -> hosts whose first kernel it is (GLOBALS' 'within')")
    # flatten_reduction (Plan.merged): the graph's shapes of the globals the kernels see merged
    views = {b.name: user_shape(plan, b) for b in plan.globals if plan.merged and set(b.axes) & set(plan.merged)}
    L.append(f"USER_SHAPES = {views!r}  # a global's shape in the graph where its kernels view it merged")
    L.append("")
    L.append("# launch order; 'params' are the prim_func's arguments (global buffer names), in order")
    L.append("KERNELS = [")
    for w, k in zip(writers, runs):
        params = [b.name for b in w.globals] + ([counters[k.name]] if w.tail else [])
        L.append(f"    {{'name': {k.name!r}, 'role': {k.role!r},")
        L.append(f"     'params': {params!r}, 'reads': {w.reads!r}, 'writes': {w.writes!r}}},")
    L.append("]")
    L.append("# nvcc flags per kernel, beyond TileLang's own (plan.passes.flush_subnormals: -ftz=true makes exp2")
    L.append("# one MUFU.EX2, float32 subnormals flushed to zero; plan.passes.fast_math: --use_fast_math on a")
    L.append("# transcendental epilogue that stores 16-bit floats)")
    L.append(f"NVCC_FLAGS = {nvcc_flags(plan)!r}")
    L.append("# TileLang pass options per kernel, for every lowering of it (emit.common.pass_configs: cp.async off")
    L.append("# where a copy into shared memory reads rows of an odd number of 16-bit elements)")
    L.append(f"PASS_CONFIGS = {pass_configs(plan)!r}")
    L.append(f"SMS = {DEFAULT.sms}  # SMs assumed where no GPU says (H100 / H200 SXM): see sm_count()")
    L.append("")
    for src in kernel_src:
        L.append("")
        L.extend(src)
        L.append("")
    L.append("")
    L.append("def sm_count(default=SMS):")
    L.append('    """The current GPU\'s SM count (a persistent kernel launches one CTA per SM: on a GPU with fewer')
    L.append('    SMs than it assumed, the last CTAs would run in a second wave); `default` without a GPU."""')
    L.append("    try:")
    L.append("        import torch")
    L.append("        if torch.cuda.is_available():")
    L.append("            return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count")
    L.append("    except Exception:  # no torch or no driver: the default")
    L.append("        pass")
    L.append("    return default")
    L.append("")
    L.append("")
    L.append("def build_kernel(pdl=True, sms=None, **tile_params):")
    L.append('    """{kernel name: T.prim_func} in launch order, for TILE_PARAMS overridden by tile_params; pdl:')
    L.append('    programmatic dependent launch between the kernels (sm_90 and newer only); sms: the SM count the')
    L.append('    persistent kernels launch one CTA each for (None: the current GPU\'s, SMS without one)."""')
    L.append("    unknown = set(tile_params) - set(TILE_PARAMS)")
    L.append("    if unknown:")
    L.append("        raise TypeError(f'unknown tile parameters {sorted(unknown)}; known: {sorted(TILE_PARAMS)}')")
    L.append("    p = {**TILE_PARAMS, **tile_params}")
    if any(k.pingpong for k in plan.kernels):
        L.append("    sms = sms or sm_count()")
    L.append("    return {")
    for k in runs:
        L.append(f"        {k.name!r}: {_ident(k.name)}(pdl=pdl, {'sms=sms, ' if k.pingpong else ''}**p),")
    L.append("    }")
    L.append("")
    L.append("")
    L.append("def get_configs():")
    L.append('    """A short list of tile parameters to tune over (the plan\'s own first)."""')
    L.append("    return [")
    for c in _configs(plan, used, any(k.warp_policy == "full_row" for k in plan.kernels)):
        L.append(f"        {c!r},")
    L.append("    ]")
    L.append("")
    L.append("")
    L.append("def has_pdl(target):")
    L.append('    """Whether the target runs programmatic dependent launch (sm_90 and newer; TileLang refuses it')
    L.append('    below): the sm_XX the target names, else the one TileLang detects for the current GPU."""')
    L.append("    import re")
    L.append("    arch = re.search(r'sm_(\\d+)', str(target))")
    L.append("    if arch is None:")
    L.append("        try:")
    L.append("            from tilelang.backend.target import determine_target")
    L.append("            arch = re.search(r'sm_(\\d+)', str(determine_target(target, return_object=True).attrs.get('arch', '')))")
    L.append("        except Exception:  # another TileLang, no GPU: the plain launch")
    L.append("            return False")
    L.append("    return arch is not None and int(arch.group(1)) >= 90")
    L.append("")
    L.append("")
    L.append("def compile_kernel(name, f, target='auto'):")
    L.append('    """The kernel `name` of build_kernel() (its prim_func f) compiled: a tilelang JITKernel. One kernel at a')
    L.append('    time for whoever compiles a module\'s kernels in parallel (the GPU campaign\'s compile pool)."""')
    L.append("    from leantile.codegen_repair import MARKER_FLAG, install")
    L.append("    install()  # TileLang 0.1.15 can read a stale copy of a fragment updated in place (see there)")
    L.append("    return tilelang.compile(f, target=target, compile_flags=[*NVCC_FLAGS.get(name, ()), MARKER_FLAG],")
    L.append("                            pass_configs=PASS_CONFIGS.get(name))")
    L.append("")
    L.append("")
    L.append("def compile_kernels(target='auto', sms=None, **tile_params):")
    L.append('    """{kernel name: tilelang JITKernel}; needs nvcc (and a GPU for target \'auto\'); sms: build_kernel\'s."""')
    L.append("    kernels = build_kernel(pdl=has_pdl(target), sms=sms, **tile_params)")
    L.append("    return {name: compile_kernel(name, f, target) for name, f in kernels.items()}")
    L.append("")
    L.append("")
    L.extend(ARRIVALS_SOURCE)
    L.append("def allocate(inputs, device='cuda', fill=float('nan'), share=True):")
    L.append('    """Every global buffer as a torch tensor: the given inputs, new intermediates and outputs filled with')
    L.append('    `fill` (NaN by default: an element no kernel writes shows), or torch.empty for fill=None. share: an')
    L.append("    intermediate with a 'within' lives in its host's bytes (False: every buffer its own, to read all after a run).\"\"\"")
    L.append("    import math")
    L.append("    import torch")
    L.append("    shapes = {g['name']: g['shape'] for g in GLOBALS}")
    L.append("    tensors = {n: t.reshape(shapes[n]) if n in USER_SHAPES else t for n, t in inputs.items()}")
    L.append("    for g in sorted(GLOBALS, key=lambda g: share and 'within' in g):  # hosts first")
    L.append("        dt = getattr(torch, g['dtype'])")
    L.append("        if g['kind'] == 'arrivals':")
    L.append("            tensors[g['name']] = arrivals(g, device)")
    L.append("        elif g['name'] in tensors:")
    L.append("            continue")
    L.append("        elif 'alias' in g:  # an output written over the input it names (the caller's tensor)")
    L.append("            tensors[g['name']] = tensors[g['alias']]")
    L.append("        elif share and 'within' in g:")
    L.append("            host, offset = g['within']")
    L.append("            nbytes = math.prod(g['shape']) * dt.itemsize")
    L.append("            raw = tensors[host].reshape(-1).view(torch.uint8)[offset:offset + nbytes]")
    L.append("            tensors[g['name']] = raw.view(dt).view(g['shape'])")
    L.append("            if fill is not None:")
    L.append("                tensors[g['name']].fill_(fill)")
    L.append("        else:")
    L.append("            tensors[g['name']] = (torch.empty(g['shape'], dtype=dt, device=device) if fill is None else")
    L.append("                                  torch.full(g['shape'], fill, dtype=dt, device=device))")
    L.append("    return tensors")
    L.append("")
    L.append("")
    L.append("def run(kernels, tensors, fill=None):")
    L.append('    """Launch every kernel in order. kernels: {name: compiled kernel}; tensors: {global name: tensor}')
    L.append("    (see allocate()); a 0-D tensor is passed as shape (1,). fill: allocate()'s, given again to poison each")
    L.append('    host of shared bytes as its first kernel starts (POISON). Returns {output name: tensor}."""')
    L.append("    for k in KERNELS:")
    L.append("        for host in POISON.get(k['name'], ()) if fill is not None else ():")
    L.append("            tensors[host].fill_(fill)")
    L.append("        kernels[k['name']](*[tensors[n] if tensors[n].dim() else tensors[n].reshape(1) for n in k['params']])")
    L.append("    return {out: tensors[buf].reshape(USER_SHAPES[buf]) if buf in USER_SHAPES else tensors[buf]")
    L.append("            for out, buf in OUTPUTS.items()}")
    return "\n".join(L) + "\n"


def load_module(source: str, name: str = "leantile_kernels"):
    """Execute generated source as a fresh module object (no file needed)."""
    import linecache
    import types

    # TVMScript re-reads each prim_func's source through inspect/linecache: register it
    import hashlib

    # the same name in every process (hash() is salted per process): TileLang's disk cache and
    # tracebacks see one file per source
    fname = f"/leantile-generated/{name}_{hashlib.sha256(source.encode()).hexdigest()[:16]}.py"
    linecache.cache[fname] = (len(source), None, source.splitlines(True), fname)
    mod = types.ModuleType(name)
    mod.__file__ = fname
    exec(compile(source, fname, "exec"), mod.__dict__)
    return mod


def emit_plan_to_dir(plan: Plan, out_dir) -> Path:
    """Write <out_dir>/<candidate>.py atomically; return its path (always inside out_dir)."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", plan.candidate).lstrip(".") or "plan"
    return write_atomic(under(out_dir, f"{name}.py"), emit_module(plan))
