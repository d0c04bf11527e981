"""Repair of a TileLang 0.1.15 CUDA code-generation bug: stale SSA copies of vector loads.

The bug (issue 46: cross-entropy, KL divergence and a triplet loss reduced to a scalar came back
2.8x-1249x off on the GPU, deterministically, while the plan and the interpreter were right).
TVM's C code generator caches a vector expression it has printed once in a variable
(`CodeGenC::SSAGetID`: `float4 v_ = *(float4*)(x_frag + 0);`) and, within the same codegen
scope, answers every later occurrence of the same text with that variable. Most vector
paths open a scope of their own, but TileLang 0.1.15's per-lane extern calls (`logf`, `expf`,
... on a float4), vector casts, reinterprets and vector selects do not
(src/cuda/codegen/codegen_cuda.cc: PrintCallExtern, VisitExpr_(CastNode), ...): their
variable stays visible to the statements that follow, and no store invalidates it. A fragment
updated in place and read again in the same scope then reads its OLD value:

    float4 v_ = *(float4*)(red_sum_5_frag + 0);          // log's argument, cached
    ... __1.x = logf(v_.x); ...
    *(float4*)(red_sum_5_frag + 0) = __1;                // red_sum_5 = log(red_sum_5)
    ... __2.x = (v__1.x+v_.x); ...                        // red_max + red_sum_5: reads the pre-log value

It shows only where a thread's share of a fragment is exactly one vector (no loop left to open
a scope), e.g. a 1024-row block over 256 threads, which is why b <= 20000 was right and 32768 wrong.

The repair (`refresh_stale_ssa`, installed as TileLang's CUDA post-processing hook by
`install()`, which the emitted modules call before compiling) keeps every such variable equal to
the memory it caches: after each statement that may write that memory (a store to a local array
the expression reads; for an expression that reads through a pointer, any store through a
pointer, any call, any barrier), `v = <its expression>;` is re-executed. That is what the IR
means (each load reads memory where it stands); where nothing reads the variable again, nvcc
drops the reload. `stale_ssa_uses` is the matching check: every use of such a variable after a
possibly conflicting write with no refresh between (CI runs it over every kernel it lowers).

A second repair: the release of a warp-specialised pipeline stage has no proxy fence (issue 46:
decode attention at t_kv = d_h = 8192 came back 1-3% off, differently on every run; the GPU
campaign of 2026-11-28, benchmarks/results/gpu-fuzz-h200-2026-11-28-s26.json). TileLang 0.1.15
pipelines a T.Pipelined loop whose copies can use TMA as a producer warp group (TMA loads into a
ring of stages, `mbarrier[s]` full) and consumer threads that release a stage with a plain
`mbarrier[s + n].arrive()` once they have read it. TMA writes shared memory through the async
proxy; a consumer that reads the stage with ordinary loads (a SIMT GEMM, an elementwise or a
reduction over a shared tile: anything but wgmma) reads through the generic proxy, and the
arrive's release orders those reads only within the generic proxy: the next TMA load into the
stage can land before they are performed (a write-after-read race across proxies; PTX ISA,
"Memory Consistency Model", proxies: a `fence.proxy.async` is what orders them). Measured on an
H200: 1000-2000 of 16384 scores wrong per run without a fence; with `fence.proxy.async.shared::cta`
before the release, exact over 6 runs at +4% kernel time (a compiler-only memory clobber or a
`__syncwarp` did not fix it). `fence_stage_releases` puts `tl::fence_proxy_async();` before every
plain mbarrier arrive of a kernel that issues TMA loads (a wgmma consumer needs no fence, but
pays one fence per stage: cheaper than telling the two apart from the printed source);
`unfenced_releases` is the matching check, run by lower.lower_to_cuda on every kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .codegen_lines import code as _code, kernel_ranges as _kernels
from .codegen_retire import retire_before_release

__all__ = ["StaleUse", "stale_ssa_uses", "refresh_stale_ssa", "fence_stage_releases", "unfenced_releases",
           "install", "uninstall", "MARKER_FLAG"]

# nvcc flag added to every kernel compiled after install(): it puts the repairs into TileLang's
# kernel-cache key, so that no binary compiled before them is reused from its disk cache (2: the
# stage-release fence; 1 was the SSA refresh alone; 3: max and min propagate NaN, leantile.codegen_nan;
# 4: a stage is released only after the asynchronous wgmma reading it retires, leantile.codegen_retire).
MARKER_FLAG = "-DLEANTILE_CODEGEN_REPAIR=4"

_SSA_DECL = re.compile(r"^(?P<indent>\s*)(?P<type>[A-Za-z_][\w:<>, ]*?)\s+(?P<name>v_(?:_\d+)?)\s*=\s*(?P<expr>.+);\s*$")
_RELOAD = re.compile(r"^(v_(?:_\d+)?)\s*=[^=]")
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
# a declaration: `type name;`, `type name[N];`, `type name = ...;` (type may carry * and qualifiers)
_DECL = re.compile(r"^\s*(?:(?:const|volatile|static|__shared__|extern|signed|unsigned|register|alignas\(\d+\)|__align__\(\d+\))\s+)*"
                   r"(?P<type>[A-Za-z_][\w:<>]*(?:\s*<[^;=]*>)?)(?P<ptr>[\s*&]+)(?P<name>[A-Za-z_]\w*)\s*(?P<array>\[[^\]]*\])*\s*(?:=\s*(?P<init>.*))?;\s*$")
_PARAMS = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?\w+\s*\((?P<params>[^)]*)\)\s*\{")
_CALL = re.compile(r"(?<![\w.])(?P<fn>[A-Za-z_][\w:]*)\s*\(")
_KEYWORDS = {"for", "if", "while", "else", "return", "switch", "case", "do", "sizeof", "break", "continue"}
# calls that only compute (no memory effect): an assignment whose right side calls only these is a plain store
_PURE_CALL = re.compile(r"^(?:__)?(?:[a-z0-9_]*(?:exp|log|sqrt|rsqrt|tanh|sin|cos|erf|pow|fabs|abs|max|min|floor|ceil|round|"
                        r"fma|rcp|div|fdividef|saturate|float2half|half2float|float2bfloat16|bfloat162float|int2float|"
                        r"float2int|isnan|isinf|signbit|copysign)[a-z0-9_]*|make_\w+|half_t|bfloat16_t|float|int|uint|"
                        r"(?:tl::|lt::)?(?:from_uint1|to_uint1|max|min|infinity)|static_cast|reinterpret_cast|\w+_t)$")


@dataclass
class StaleUse:
    """A cached vector load read after a statement that may have changed what it caches."""
    line: int        # 1-based line of the read
    var: str         # the cached variable, e.g. "v_"
    expr: str        # the expression it caches
    write_line: int  # the 1-based line of the write it missed

    def __str__(self) -> str:
        return f"line {self.line}: {self.var} (= {self.expr}) read after a write at line {self.write_line}"


@dataclass
class _Cached:
    name: str
    expr: str
    depth: int                 # brace depth of its declaration: live until that block closes
    locals_read: set = field(default_factory=set)   # local arrays/values the expression reads
    via_pointer: bool = False  # the expression reads through a pointer (shared or global memory)
    dirty_at: int = 0          # 1-based line of a write since the last (re)load, 0 if none
    last_use: int = 1 << 62    # 1-based line of its last read (_last_uses): no refresh after it


def _idents(text: str) -> set[str]:
    return {m.group(0) for m in _IDENT.finditer(text)}


def _split_assignment(code: str):
    """(left, op, right) of `left op right;` at the top level (op: =, +=, <<=, ...), else None."""
    depth, i = 0, 0
    while i < len(code):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0:
            prev = code[i - 1] if i else ""
            if code[i + 1:i + 2] == "=" or prev in "=!":  # == or !=
                i += 2
                continue
            if prev in "<>":
                if i < 2 or code[i - 2] != prev:  # <= or >=
                    i += 1
                    continue
                start = i - 2  # <<= or >>=
            else:
                start = i - 1 if prev and prev in "+-*/%&|^" else i
            return code[:start], code[start:i + 1], code[i + 1:]
        i += 1
    return None


class _Kernel:
    """What one kernel body declares: local storage (arrays, values) and pointers."""

    def __init__(self):
        self.local: set[str] = set()
        self.pointers: set[str] = set()

    def params(self, line: str) -> None:
        m = _PARAMS.search(line)
        if not m:
            return
        for p in m.group("params").split(","):
            names = re.findall(r"[A-Za-z_]\w*", p)
            if names and "*" in p:
                self.pointers.add(names[-1])

    def declare(self, code: str) -> bool:
        """Record a declaration on this line; True if the line is one."""
        m = _DECL.match(code)
        if not m or m.group("type") in _KEYWORDS or m.group("name") in _KEYWORDS:
            return False
        memory = "*" in m.group("ptr") or "__shared__" in code
        (self.pointers if memory else self.local).add(m.group("name"))
        return True


def _writes(code: str, k: _Kernel):
    """(local names written, writes through a pointer or has a memory effect, names passed to a
    call) for one statement (a line ending in ';' that declares nothing)."""
    parts = _split_assignment(code)
    calls = [m.group("fn") for m in _CALL.finditer(code) if m.group("fn") not in _KEYWORDS]
    impure = [c for c in calls if not _PURE_CALL.match(c)]
    if parts is None:  # a call, a barrier, inline asm: whatever it names may be written, and memory
        names = _idents(code)
        return names & k.local, True, names
    left = _idents(parts[0])
    wrote_local = left & k.local
    through_pointer = bool(left & k.pointers) or not (left & (k.local | k.pointers))  # unknown lvalue: assume memory
    if impure:  # e.g. x = atomicAdd(p, v): the call's arguments may be written too
        return wrote_local | (_idents(parts[2]) & k.local), True, _idents(parts[2])
    return wrote_local, through_pointer, set()


@dataclass
class _Block:
    loop: bool                                   # opened by a for / while header
    used: dict = field(default_factory=dict)    # cached variable -> first line it is read in this block


def _effects(code: str, stripped: str, k: _Kernel):
    """(local names written, memory written, names passed to a call) of one line; None if the line
    writes nothing (a header, a declaration without a call that touches memory, no statement)."""
    if not stripped.endswith(";") or stripped.startswith(("for ", "for(", "if ", "if(", "while", "} else", "else", "#", "return")):
        return None
    if k.declare(code):  # a new variable; only a call in its initialiser (atomics) can write memory
        m = _DECL.match(code)
        init = (m.group("init") or "") if m else ""
        impure = any(not _PURE_CALL.match(f.group("fn")) and f.group("fn") not in _KEYWORDS for f in _CALL.finditer(init))
        return (set(), True, set()) if impure else None
    return _writes(stripped, k)


def _last_uses(lines: list[str]) -> dict[int, int]:
    """{declaration line: the last line that reads the variable} for each cached vector load,
    scope by scope; a read inside a loop the variable was declared outside of lasts until that
    loop closes (the next iteration reads it again). A refresh after the last read is dead code:
    emitted eagerly after every write, a chain of n in-place updates got n^2 of them (a 500-op
    fused chain lowered to 10.7 MB of CUDA in 36 s)."""
    last: dict[int, int] = {}
    blocks: list[tuple[bool, dict, set]] = [(False, {}, set())]  # (loop, {name: decl line}, decls to extend)
    for no, line in enumerate(lines, 1):
        code = _code(line)
        stripped = code.strip()
        if "__global__" in code and "(" in code:
            blocks = [(False, {}, set())]
        decl = _SSA_DECL.match(code) if stripped.endswith(";") else None
        for name in _idents(code) - ({decl.group("name")} if decl else set()):
            if not name.startswith("v_"):
                continue
            at = next((i for i in range(len(blocks) - 1, -1, -1) if name in blocks[i][1]), None)
            if at is None:
                continue
            d = blocks[at][1][name]
            last[d] = max(last.get(d, d), no)
            loop = next((j for j in range(at + 1, len(blocks)) if blocks[j][0]), None)
            if loop is not None:
                blocks[loop][2].add(d)
        if decl:
            blocks[-1][1][decl.group("name")] = no
            last.setdefault(no, no)
        for ch in re.findall(r"[{}]", stripped):
            if ch == "{":
                blocks.append((stripped.startswith(("for", "while")), {}, set()))
            elif len(blocks) > 1:
                for d in blocks.pop()[2]:
                    last[d] = max(last[d], no)
    return last


def _scan(source: str, repair: bool):
    """Walk the source once: (repaired lines, stale uses found). A stale use is a read of a dirty
    variable, or a variable read in a loop that leaves it dirty at the end of its body (the next
    iteration reads it first)."""
    out: list[str] = []
    found: list[StaleUse] = []
    k, live, blocks = _Kernel(), [], []
    lines = source.split("\n")
    last_use = _last_uses(lines) if repair else {}
    for no, line in enumerate(lines, 1):
        code = _code(line)
        stripped = code.strip()
        if "__global__" in code and "(" in code:
            k, live, blocks = _Kernel(), [], []
            k.params(code)
        decl = _SSA_DECL.match(code) if stripped.endswith(";") else None
        reload = _RELOAD.match(stripped)
        reloaded = reload.group(1) if reload else None
        uses = _idents(code)
        for c in live:  # reads first: this line reads what the lines before left
            if c.name == reloaded:
                c.dirty_at = 0
            elif c.name in uses:
                if c.dirty_at:
                    found.append(StaleUse(no, c.name, c.expr, c.dirty_at))
                    c.dirty_at = 0  # one report per missed write
                for b in blocks:
                    b.used.setdefault(c.name, no)
        out.append(line)
        if decl:
            names = _idents(decl.group("expr"))
            # through a pointer: it names a pointer, or no local storage at all (assume memory)
            live.append(_Cached(decl.group("name"), decl.group("expr"), len(blocks), names & k.local,
                                bool(names & k.pointers) or not names & k.local, last_use=last_use.get(no, 1 << 62)))
            k.local.add(decl.group("name"))
        else:
            effects = _effects(code, stripped, k)
            if effects:
                wrote_local, memory, passed = effects
                indent = line[:len(line) - len(line.lstrip())]
                for c in live:
                    if c.name != reloaded and ((c.locals_read & (wrote_local | passed)) or (c.via_pointer and memory)):
                        if repair and c.last_use <= no:  # never read again: a refresh would be dead code
                            continue
                        if repair:
                            out.append(f"{indent}{c.name} = {c.expr};  // leantile: refresh (codegen_repair)")
                        else:
                            c.dirty_at = c.dirty_at or no
        for ch in re.findall(r"[{}]", stripped):
            if ch == "{":
                blocks.append(_Block(loop=stripped.startswith(("for", "while"))))
                continue
            b = blocks.pop() if blocks else _Block(False)
            if b.loop:  # the next iteration reads first what this one left dirty
                for c in live:
                    if c.depth <= len(blocks) and c.dirty_at and c.name in b.used:
                        found.append(StaleUse(b.used[c.name], c.name, c.expr, c.dirty_at))
            live = [c for c in live if c.depth <= len(blocks)]
    return out, found


def stale_ssa_uses(source: str) -> list[StaleUse]:
    """Every read of a cached vector load (`v_...`) after a statement that may have written what it
    caches, with no reload between: each one is a wrong value on the GPU unless the write did not
    in fact touch those elements."""
    return _scan(source, repair=False)[1]


def refresh_stale_ssa(source: str) -> str:
    """`source` with every cached vector load reloaded after each statement that may write what it
    caches (see the module docstring): the code TileLang meant to generate."""
    return "\n".join(_scan(source, repair=True)[0])


# a plain arrive on a pipeline barrier (a stage release): `mbarrier[...].arrive();`, the cluster
# form `.arrive(cta, pred)`, or the free function; not arrive_and_expect_tx (the producer's)
_RELEASE = re.compile(r"^(?P<indent>\s*)(?:[A-Za-z_]\w*\[[^\]]*\]\.arrive\(|(?:tl::)?mbarrier_arrive\()[^;]*\);\s*$")
_FENCE = "tl::fence_proxy_async();"
_TMA_LOAD = re.compile(r"\btma_load(?:_multicast)?\(|cp\.async\.bulk\.")


def unfenced_releases(source: str) -> list[int]:
    """1-based lines of every stage release (a plain mbarrier arrive) in a kernel that issues TMA
    loads, not preceded by a proxy fence: a race wherever the consumer read the stage with
    ordinary loads (see the module docstring)."""
    lines = source.split("\n")
    found = []
    for a, b in _kernels(lines):
        if not any(_TMA_LOAD.search(_code(ln)) for ln in lines[a:b]):
            continue
        for i in range(a, b):
            if _RELEASE.match(_code(lines[i])) and not (i > 0 and lines[i - 1].strip() == _FENCE):
                found.append(i + 1)
    return found


def fence_stage_releases(source: str) -> str:
    """`source` with `tl::fence_proxy_async();` before every stage release of every kernel that
    issues TMA loads (see the module docstring)."""
    lines = source.split("\n")
    bad = set(unfenced_releases(source))
    out = []
    for no, line in enumerate(lines, 1):
        if no in bad:
            out.append(_RELEASE.match(_code(line)).group("indent") + _FENCE)
        out.append(line)
    return "\n".join(out)


def _postproc(code: str, target) -> str:  # noqa: ARG001  (TileLang's hook signature)
    from .codegen_nan import propagate_nan
    return propagate_nan(fence_stage_releases(retire_before_release(refresh_stale_ssa(code))))


def install() -> None:
    """Register the repair as TileLang's CUDA post-processing hook (idempotent): every kernel this
    process compiles or lowers afterwards is repaired. The emitted modules call it first."""
    from tilelang.engine import register_cuda_postproc
    register_cuda_postproc(_postproc, override=True)


def uninstall() -> None:
    """TileLang's own output again (the identity hook): lower.lower_to_cuda(repair=False) only."""
    from tilelang.engine import register_cuda_postproc
    register_cuda_postproc(lambda code, _target: code, override=True)
