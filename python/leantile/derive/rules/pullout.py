"""The pullout rules: scale_pullout and mean_pullout, gain_fold, and the walk that finds them.

The pullouts move a per-row vector out of a GEMM's LHS: matmul(X * s, W) = s * matmul(X, W) and
matmul(X - mu, W) = matmul(X, W) - mu colsum(W). Their side condition is the lemma's: the
vector is constant along the contraction axis (it has no such axis, and only axes of X).
gain_fold moves a vector over the contraction axis alone (a norm's gain) into the weight:
matmul(X * g, W) = matmul(X, g W), W's rows scaled once by a map kernel.
"""
from __future__ import annotations

from ... import ir
from ..context import Ctx
from ..sites import Peel, row_vector
from .base import Rule, sym


class _Pullout(Rule):
    op: str  # the graph op the rule peels: mul (scale) or sub (mean)
    kind: str  # Peel.kind

    def match(self, cx: Ctx, node, axis: str) -> Peel | None:
        """The peel when `node` is op(X, v) with v a row vector of X constant along `axis`."""
        if not (isinstance(node, ir.Binary) and node.op == self.op):
            return None
        a = cx.node(node.a)
        if axis in a.axes and row_vector(cx, node.b, a.axes, axis):
            return Peel(self.kind, node.id, node.b)
        return None

    def _peeled(self, g, at):
        S = sym()
        node, *mms = at
        peel = g.node(node)
        mm = g.node(mms[0])
        k = S.sp.Symbol(mm.axis_a + "'")
        leaves = S.Exprs(g)
        x, vec = leaves(peel.a).subs(S.sp.Symbol(mm.axis_a), k), leaves(peel.b)
        ws = [leaves(g.node(i).b).subs(S.sp.Symbol(g.node(i).axis_b), k) for i in mms]
        return mms, k, S.size(mm.axis_a), x, vec, ws


def _pairs(g, mms, exprs) -> str:
    S = sym()
    return r" \qquad ".join(f"{S.out(g, i)} = {S.tex(e)}" for i, e in zip(mms, exprs))


class ScalePullout(_Pullout):
    name = "scale_pullout"
    theorem = "LeanTile.scale_pullout_right"
    lean_file = "ScalePullout.lean"
    pattern = "matmul(mul(X, s), W) with s constant along the contraction axis"
    rewrite = "s * matmul(X, W): the per-row scale moves to the GEMM epilogue"
    statement = "sum_k (x_k s) w_k = s sum_k x_k w_k (the graph's mul(X, s) has the scale second)"
    op, kind = "mul", "scale"

    def apply(self, choice, step):
        choice.scale = True

    def formula(self, g, at, params):
        S = sym()
        mms, k, K, x, s, ws = self._peeled(g, at)
        before = [S.Sum(s * x * w, (k, 1, K)) for w in ws]
        after = [S.sp.Mul(s, S.Sum(x * w, (k, 1, K)), evaluate=False) for w in ws]
        return _pairs(g, mms, before), _pairs(g, mms, after)

    def check(self) -> bool:
        """2x3 times 3x2: scaling row i of X by r_i scales row i of XW by r_i."""
        S = sym()
        scaled = S.sp.Matrix(2, 3, lambda i, k: S.R[i] * S.X[i, k])
        return (scaled * S.W - S.sp.diag(*S.R) * (S.X * S.W)).expand() == S.sp.zeros(2, 2)


class MeanPullout(_Pullout):
    name = "mean_pullout"
    theorem = "LeanTile.mean_pullout"
    lean_file = "MeanPullout.lean"
    pattern = "matmul(sub(X, mu), W) with mu constant along the contraction axis"
    rewrite = "matmul(X, W) - mu * colsum(W)"
    statement = "sum_k (x_k - mu) w_k = sum_k x_k w_k - mu sum_k w_k"
    params = {"colsum": "how the weight's column sums are computed"}
    op, kind = "sub", "mean"

    def match(self, cx: Ctx, node, axis: str) -> Peel | None:
        """Accuracy (issue 46): matmul(X, W) - mu colsum(W) cancels the mu colsum(W) that X W
        carries, so its error is that of X W, relative to |X| rather than to |X - mu|. With 16-bit
        X the products are exact and only the float32 accumulation rounds: see pullout_error. A
        float32 X centred on its own row statistic (a norm's mean) is refused: the GPU's TF32 MMA
        truncates X to 10 mantissa bits before the product, an error of |mu| 2^-11 per element
        that no later subtraction removes (relative error 1.9 on rows of mean 3000, std 1, H100,
        layernorm_linear_gelu 64 x 256 x 128, against 7.9e-4 for the candidates that subtract mu
        first). That the mean is large is a fact of the data, not of the graph: the refusal is
        by dtype, and the 16-bit bound is the user's to check. A centre the user gives (an input,
        a constant) is pulled out on float32 too: it carries the same |mu| / |X - mu| 2^-11."""
        peel = super().match(cx, node, axis)
        if peel is not None and cx.dtype_of(node.a) == "f32" and _reduces_over(cx, peel.vec, axis):
            self.refuse(cx, (node.id,), f"X ({cx.value(node.a)}) is float32 and mu its row statistic: the GEMM's "
                        "TF32 operands would truncate X, not X - mu, to 10 mantissa bits (relative error "
                        "|mu| / std * 2^-11: 1.9 at a row mean of 3000, std 1)")
            return None
        if peel is not None and cx.axes[axis] == 1 and _reduces_over(cx, peel.vec, axis):
            # a row of one element centred on a statistic over it (its mean) is exactly 0; pulled
            # out, it would be the difference of two rounded products (x w - mu w: a residue where
            # the GPU's TF32 rounds one of them), an output that is exactly 0 would not be
            self.refuse(cx, (node.id,), f"the contraction axis {axis!r} has size 1 and mu is a statistic "
                        "over it: X - mu is exactly 0 there, matmul(X, W) - mu colsum(W) would not be")
            return None
        return peel

    def apply(self, choice, step):
        choice.mean = True
        choice.colsum = step.params["colsum"]

    def formula(self, g, at, params):
        S = sym()
        mms, k, K, x, mu, ws = self._peeled(g, at)
        before = [S.Sum((x - mu) * w, (k, 1, K)) for w in ws]
        after = [S.Sum(x * w, (k, 1, K)) - mu * S.Sum(w, (k, 1, K)) for w in ws]
        return _pairs(g, mms, before), _pairs(g, mms, after)

    def check(self) -> bool:
        """2x3 times 3x2: (X - mu 1^T) W = X W - mu colsum(W)."""
        S = sym()
        centred = S.sp.Matrix(2, 3, lambda i, k: S.X[i, k] - S.MU[i])
        colsum = S.sp.Matrix(1, 2, lambda _, j: sum(S.W[k, j] for k in range(3)))
        return (centred * S.W - (S.X * S.W - S.MU * colsum)).expand() == S.sp.zeros(2, 2)


def pullout_error(d: int, mean_over_std: float) -> float:
    """Upper estimate of the relative error mean_pullout adds on 16-bit rows of d elements whose
    mean is `mean_over_std` times their standard deviation: float32 accumulation of X W, whose
    terms are |mu| / std times larger than those of (X - mu) W, 2^-24 sqrt(d) |mu| / std.
    Measured on f16 rows of mean 3000, std 1 (layernorm_linear_gelu): 4.2e-4 at d = 256 and
    5.9e-4 at d = 4096 on the CPU interpreter, 8.7e-4 at d = 256 on an H100, against 2.7e-4 for
    the candidates that centre first; the estimate is 2.9e-3 and 1.2e-2. Past f16's tolerance
    (2e-2) only where |mu| / std > 1e4: rows of mean 30000 whose f16 elements are all equal
    (std 0) gave a relative error of 36, where the centred candidates are exact."""
    return 2.0 ** -24 * d ** 0.5 * mean_over_std


def _reduces_over(cx: Ctx, i: int, axis: str) -> bool:
    """Whether node i is computed from a reduction over `axis`."""
    from .stats import row_ancestors  # stats builds on the pullouts' sites
    return any(isinstance(cx.node(j), ir.Reduce) and cx.node(j).axis == axis for j in row_ancestors(cx, [i], axis))


class GainFold(Rule):
    name = "gain_fold"
    theorem = "LeanTile.gain_fold"
    lean_file = "GainFold.lean"
    pattern = "matmul(mul(X, g), W) with g a vector over the contraction axis alone (a norm's gain)"
    rewrite = "matmul(X, g W): the weight's rows scaled once by a map kernel, the row scale behind g still pulls out"
    statement = "sum_k (x_k g_k) w_kj = sum_k x_k (g_k w_kj)"
    params = {"into": "where the gain is applied: 'operand' scales the LHS's tile by its k slice of the gain "
                      "each k step, in registers before the tensor cores read it (one kernel); absent, the "
                      "weight's rows once, by a map kernel before the GEMM"}

    def apply(self, choice, step):
        choice.gain_into = step.params.get("into", "weight")

    def match(self, cx: Ctx, node, axis: str) -> Peel | None:
        """Peel(kind "gain") when node is X * g or g * X with g over `axis` alone (not a
        constant: that is a scale), X over `axis`."""
        if not (isinstance(node, ir.Binary) and node.op == "mul"):
            return None
        for x, g in ((node.a, node.b), (node.b, node.a)):
            if cx.node(g).axes == (axis,) and axis in cx.node(x).axes and not cx.literal(g) and \
                    len(cx.node(x).axes) > 1:
                return Peel("gain", node.id, g, x)
        return None

    def formula(self, g, at, params):
        S = sym()
        node, *mms = at
        peel, mm = g.node(node), g.node(mms[0])
        k = S.sp.Symbol(mm.axis_a + "'")
        leaves = S.Exprs(g)
        gain = next(a for a in (peel.a, peel.b) if g.node(a).axes == (mm.axis_a,))
        x = leaves(peel.b if gain == peel.a else peel.a).subs(S.sp.Symbol(mm.axis_a), k)
        gv = leaves(gain).subs(S.sp.Symbol(mm.axis_a), k)
        ws = [leaves(g.node(i).b).subs(S.sp.Symbol(g.node(i).axis_b), k) for i in mms]
        K = S.size(mm.axis_a)
        before = [S.Sum(x * gv * w, (k, 1, K)) for w in ws]
        # the regrouping is the point: sympy would flatten x (g w) back to x g w
        after = r" \qquad ".join(r"%s = \sum_{%s=1}^{%s} %s \left(%s\right)" % (
            S.out(g, i), S.tex(k), S.tex(K), S.tex(x), S.tex(gv * w)) for i, w in zip(mms, ws))
        return _pairs(g, mms, before), after + r"\quad\text{(the weight's rows scaled once)}"

    def check(self) -> bool:
        """2x3 times 3x2: (X diag(g)) W = X (diag(g) W)."""
        S = sym()
        G = S.sp.diag(*[S.sp.Symbol(f"g{k}", real=True) for k in range(3)])
        return ((S.X * G) * S.W - S.X * (G * S.W)).expand() == S.sp.zeros(2, 2)


def _refuse_gain(cx: Ctx, node: ir.Binary, axis: str) -> None:
    """Say why a gain stops the walk (issue 49: RMSNorm with a gain before a GEMM got two kernels
    and `derive --all-candidates` named no refused rule): X * g with g over the contraction axis
    and more, or a second gain, scales X's columns, not its rows; gain_fold folds one vector over
    that axis alone into the weight, so no pullout gets past this one, nor the row scale behind it."""
    if node.op != "mul":
        return
    for x, g in ((node.a, node.b), (node.b, node.a)):
        ga, xa = cx.node(g).axes, cx.node(x).axes
        if axis in ga and set(ga) < set(xa) and not cx.literal(g):
            GAIN.refuse(cx, (node.id,), f"{cx.value(g)} varies along the contraction axis {axis} (a gain over "
                        f"{list(ga)}): it scales the columns of {cx.value(x)}, not its rows, and gain_fold folds one "
                        f"vector over {axis} alone into the weight: the GEMM reads this LHS from a kernel before it")
            return


def peel_lhs(cx: Ctx, mm: ir.Matmul) -> tuple[int, list[Peel]]:
    """Walk from the matmul's LHS through the nodes a pullout rule peels (outermost first)."""
    node, peels = cx.node(mm.a), []
    while isinstance(node, ir.Binary) and mm.axis_a in node.axes:
        peel = SCALE.match(cx, node, mm.axis_a) or MEAN.match(cx, node, mm.axis_a)
        if peel is None and not any(p.kind == "gain" for p in peels):  # one gain folds into the weight
            peel = GAIN.match(cx, node, mm.axis_a)
        if peel is None:
            _refuse_gain(cx, node, mm.axis_a)
            break
        peels.append(peel)
        node = cx.node(peel.rest if peel.kind == "gain" else node.a)
    # the GEMM multiplies the base: keep the peels down to the last base in the operand's dtype
    # (gamma_bf16 * (x_f32 * r) is a bf16 operand; its base x is f32, a mixed GEMM the tensor cores
    # refuse, and rounding x instead of x * r to 16 bits is not the graph's rounding: a large x
    # overflows f16 where x * r does not). GPU campaign s95, user_norm_gemm's mixed draws.
    bases = [mm.a]
    for p in peels:
        bases.append(p.rest if p.kind == "gain" else cx.node(bases[-1]).a)
    keep = max(j for j, b in enumerate(bases) if cx.dtype_of(b) == cx.dtype_of(mm.a))
    if keep < len(peels):
        rule = {"scale": SCALE, "mean": MEAN, "gain": GAIN}[peels[keep].kind]
        rule.refuse(cx, (bases[keep],), f"behind {cx.value(bases[keep])} ({cx.dtype_of(mm.a)}, the GEMM's operand) the "
                    f"LHS is {cx.dtype_of(bases[keep + 1])}: pulling the {peels[keep].kind} out would multiply "
                    f"{cx.dtype_of(bases[-1])} by {cx.dtype_of(mm.b)} and move the graph's rounding")
    return bases[keep], peels[:keep]


SCALE, MEAN, GAIN = ScalePullout(), MeanPullout(), GainFold()
