"""Online softmax's per-block state update (running max m, running sum l, the rescale of what
was summed before) and its exponent, shared by the flash kernel and the row softmax kernels
(derive/kernels.py). Why the exponent takes x - m first: _exponent's docstring."""
from __future__ import annotations

import math

from ..plan import Fill, Map, Mask, Reduce, State
from .sites import SoftmaxSite


def _exponent(sm: SoftmaxSite, dst: str, x: str, m: str, exp2: bool) -> list:
    """dst = exp(c (x - m)): x - m first (exact near the max, Sterbenz), then the scale (c, or
    c' = c log2 e for exp2). Never the one-multiply-add form exp2(x c' - round(m c')) of FA2/FA3:
    its shift rounds m c' and leaves d = m c' - round(m c') in every P. d cancels in o / l, but it
    is up to half a unit of m c', and exp2(d) overflows (or flushes to 0) once |m c'| passes
    2^32: f32 scores of 5e11 gave NaN in every row (gpu-fuzz 2026-11-28, an H200, and the
    interpreter alike; tests/cpu/test_softmax_large_scores.py). Nor may two kernels each round
    their own shift (l summed in one, P normalised in another: a factor 2^(the difference) between
    them; 113x off at bf16 scores of 1e4). The price is one add per score (measured:
    benchmarks/fma_contraction/results/flash-exponent-ab-h200-2026-11-28.json)."""
    c = sm.scale / math.log(2.0) if exp2 else sm.scale
    out = [Map(dst=dst, fn="sub", args=(x, m))]
    if c != 1.0:
        out.append(Map(dst=dst, fn="mul", args=(dst, f"#{repr(c)}")))
    return out + [Map(dst=dst, fn="exp2" if exp2 else "exp", args=(dst,))]


def online_update(g, kb, sm: SoftmaxSite, S: str, P: str, exp2: bool, row_axes) -> tuple[list, str, str, str]:
    """The per-block state update of online softmax over raw scores S (the max is taken of the
    raw scores: with c > 0, c max(s) = max(c s)): P = exp(c (S - m)) and the sums before
    rescaled by exp(c (m_prev - m)), both relative to the exact m (_exponent). Returns
    (statements, m, l, rescale)."""
    t = sm.axis
    m = kb.buf(g.value(sm.mx), row_axes, "fragment", "acc", sm.mx, key=("value", sm.mx))
    m_prev = kb.buf(f"{m}_prev", row_axes, "fragment", "acc", key=("prev", sm.mx))
    alpha = kb.buf("rescale", row_axes, "fragment", "acc", key=("rescale",))
    l = kb.buf(g.value(sm.sm), row_axes, "fragment", "acc", sm.sm, key=("value", sm.sm))
    kb.states += [State(buffer=m, init="-inf", combine="max"), State(buffer=l, init="0", combine="rescaled_sum")]
    kb.prologue += [Fill(dst=m, value="-inf"), Fill(dst=l, value="0")]
    body = []
    if g.axes[t] % kb.stream.block:
        body.append(Mask(dst=S, axis=t, value="-inf"))  # padded positions must not win the max
    body += [Map(dst=m_prev, fn="copy", args=(m,)),
             Reduce(dst=m, src=S, kind="max", axis=t, accumulate=True)]
    body += _exponent(sm, alpha, m_prev, m, exp2)
    body += _exponent(sm, P, S, m, exp2)
    body += [Map(dst=l, fn="mul", args=(l, alpha)),
             Reduce(dst=l, src=P, kind="sum", axis=t, accumulate=True)]
    return body, m, l, alpha
