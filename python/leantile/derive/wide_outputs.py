"""Graph outputs of a narrow dtype that other kernels read: those kernels read a float32 copy.

A statistic that is also an output (a softmax's row max, a LayerNorm mean asked for in f16) is
stored in the output's dtype, which is what the user gets back; the kernels that read it back
need the value their producer computed. The row softmax's normaliser read the f16-rounded max:
exp(x - round_f16(m)) against a sum l taken relative to the exact m, a factor exp(m - round(m))
on every output, up to 6% at scores of 100 (gpu-fuzz 2026-11-28, f16 user_softmax with its max
as an output, 4% off where the graph's own rounding is 0.2%). The producer now stores both, and
every other kernel loads the float32 one."""
from __future__ import annotations

from ..plan import Buffer, Kernel, Load, Store
from .context import Ctx

WIDE_OUTPUT_WHY = ("float32 copy of a graph output stored in its own narrower dtype: the kernels that read it "
                   "take the value its producer computed, not the rounded one the user gets")


def wide_copies(cx: Ctx, kernels: list[Kernel], globals_: list[Buffer]) -> tuple[list[Kernel], list[Buffer]]:
    """(kernels, extra globals): for each output global narrower than its value's internal dtype
    (Ctx.internal_dtype) that a kernel other than its producer loads, a float32 twin `<name>_wide`
    stored next to it and loaded instead."""
    outputs = set(cx.g.outputs.values())
    extra: list[Buffer] = []
    for b in globals_:
        i = b.node
        if i is None or i not in outputs or b.dtype == "acc" or cx.internal_dtype(i) != "acc":
            continue
        writers = {k.name for k in kernels if any(isinstance(s, Store) and s.dst == b.name for s in k.statements())}
        readers = {k.name for k in kernels if k.name not in writers
                   and any(isinstance(s, Load) and s.src == b.name for s in k.statements())}
        if not readers or cx.literal(i):
            continue
        wide = cx.names.extra(("wide", i), f"{b.name}_wide")
        extra.append(Buffer(name=wide, axes=b.axes, scope="global", dtype="acc", why=WIDE_OUTPUT_WHY))
        kernels = [_twin_stores(k, b.name, wide) if k.name in writers else
                   _renamed_loads(k, b.name, wide) if k.name in readers else k for k in kernels]
    return kernels, extra


def _sections(k: Kernel, f) -> Kernel:
    return k.model_copy(update={part: tuple(x for s in getattr(k, part) for x in f(s))
                                for part in ("prologue", "body", "epilogue")})


def _twin_stores(k: Kernel, name: str, wide: str) -> Kernel:
    return _sections(k, lambda s: (s, Store(src=s.src, dst=wide)) if isinstance(s, Store) and s.dst == name else (s,))


def _renamed_loads(k: Kernel, name: str, wide: str) -> Kernel:
    return _sections(k, lambda s: (s.model_copy(update={"src": wide}),) if isinstance(s, Load) and s.src == name else (s,))
