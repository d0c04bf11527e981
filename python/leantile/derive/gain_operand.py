"""Where a GEMM reads a norm's gain from (gain_fold): the weight with its rows scaled once by a map
kernel (region_kernels.gain_fold_kernel), or the LHS's tile scaled each k step by its slice of the
gain, in registers before the tensor cores read it (GemmChoice.gain_into "operand": one kernel for
RMSNorm-with-gain before a GEMM, where the weight's fold costs a pass over W as the normalised rows
cost one over X). Both compute sum_k (x_k g_k) w_kj (LeanTile.gain_fold): the operand form as the
graph writes it, a k block at a time."""
from __future__ import annotations

from ..plan import Load, Map
from .context import Ctx


def _gain(c):
    return next((p for p in c.site.peels if p.kind == "gain"), None)


def weight_gain(c):
    """The gain peel GEMM choice c folds into its weights (a map kernel writes them), or None."""
    return _gain(c) if c.gain_into == "weight" else None


def weight_source(g: Ctx, c, w: int) -> str:
    """The global GEMM choice c reads weight w from: w, or w with its rows scaled by the site's
    gain (gain_fold into the weight: region_kernels.gain_fold_kernel writes it)."""
    return g.gained(w) if weight_gain(c) is not None else g.value(w)


def gained_lhs(g: Ctx, c, kb, xs: str) -> str:
    """The LHS tile c's GEMMs read: xs, or (gain_fold into the operand) a register tile of xs
    times this k block's slice of the gain, in xs's dtype (the tensor cores' operand), computed in
    the stream body after xs is loaded (the statistics still read xs itself)."""
    gain = _gain(c)
    if gain is None or c.gain_into != "operand":
        return xs
    base = g.node(c.site.base)
    gv = kb.buf(f"{g.value(gain.vec)}_shared", g.node(gain.vec).axes, "shared", g.dtype_of(gain.vec), gain.vec,
                key=("tile", gain.vec))
    xg = kb.buf(f"{g.value(c.site.base)}_gained", base.axes, "fragment", g.dtype_of(c.site.base),
                key=("gained", c.site.base))
    kb.body += [Load(src=g.value(gain.vec), dst=gv), Map(dst=xg, fn="mul", args=(xs, gv))]
    return xg
