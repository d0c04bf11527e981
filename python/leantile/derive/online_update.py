"""Online softmax's per-block state update (running max m, running sum l, the rescale of what
was summed before) and the two forms of its exponent, shared by the flash kernel and the row
softmax kernels (derive/kernels.py). Why two forms: _exponent's docstring."""
from __future__ import annotations

import math

from ..plan import Fill, Map, Mask, Reduce, State
from .sites import SoftmaxSite


def _exponent(kb, sm: SoftmaxSite, dst: str, x: str, m_scaled: str | None, m: str, exp2: bool,
              fma: bool = True) -> list:
    """dst = exp(c (x - m)). With exp2 and `fma`, one multiply-add exp2(x c' - m c'), c' = c log2 e
    (flash: the rounding of m c' is one factor of every P and of l in the same kernel, so o / l
    cancels it). Without `fma`, x - m first (exact near the max, Sterbenz): where l is summed in one
    kernel and P normalised in another, each kernel's own rounding of m c' would be a factor of
    2^(its error) between them, and at scores of 1e4 and more that error is a unit or more of the
    exponent (the fuzz campaign measured 113x off at bf16 attention scores of that size)."""
    if exp2 and fma:
        return [Map(dst=dst, fn="fma", args=(x, f"#{repr(sm.scale / math.log(2.0))}", m_scaled)),
                Map(dst=dst, fn="exp2", args=(dst,))]
    c = sm.scale / math.log(2.0) if exp2 else sm.scale
    out = [Map(dst=dst, fn="sub", args=(x, m))]
    if c != 1.0:
        out.append(Map(dst=dst, fn="mul", args=(dst, f"#{repr(c)}")))
    return out + [Map(dst=dst, fn="exp2" if exp2 else "exp", args=(dst,))]


def online_update(g, kb, sm: SoftmaxSite, S: str, P: str, exp2: bool, row_axes,
                   fma: bool = True) -> tuple[list, str, str, str]:
    """The per-block state update of online softmax over raw scores S (the max is taken of the
    raw scores: with c > 0, c max(s) = max(c s)); `fma` as _exponent's. Returns (statements, m,
    l, rescale)."""
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
    if exp2 and fma:
        # P = exp2(s c' - M) with M = round(m c'), and the sums rescaled by exp2(M_prev - M): the
        # rescales telescope, so every block's P ends relative to the last M (o / l cancels it).
        # exp2(m_prev c' - M) would be exp2(the rounding of M) != 1 while the max stays put,
        # compounding over the blocks (tests/cpu/test_softmax_large_scores.py)
        neg = f"#{repr(-sm.scale / math.log(2.0))}"
        m_scaled = kb.buf(f"{m}_scaled", row_axes, "fragment", "acc", key=("scaled", sm.mx))
        prev_scaled = kb.buf(f"{m}_prev_scaled", row_axes, "fragment", "acc", key=("prev_scaled", sm.mx))
        # mul_rn: M is rounded once, one value in P's fma and in the rescale, whatever the compiler
        # (a product contracted into the subtraction would be exp2(m c' - round(m c')) again)
        body += [Map(dst=m_scaled, fn="mul_rn", args=(m, neg)), Map(dst=prev_scaled, fn="mul_rn", args=(m_prev, neg)),
                 Map(dst=alpha, fn="sub", args=(m_scaled, prev_scaled)), Map(dst=alpha, fn="exp2", args=(alpha,))]
        body += _exponent(kb, sm, P, S, m_scaled, m, exp2, fma)
    else:
        body += _exponent(kb, sm, alpha, m_prev, None, m, exp2, fma)
        body += _exponent(kb, sm, P, S, None, m, exp2, fma)
    body += [Map(dst=l, fn="mul", args=(l, alpha)),
             Reduce(dst=l, src=P, kind="sum", axis=t, accumulate=True)]
    return body, m, l, alpha
