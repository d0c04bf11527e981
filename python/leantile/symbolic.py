"""Exact sympy checks, one per rewrite rule, on small unrolled instances.

They complement the Lean proofs and run everywhere (no toolchain needed). Each check
returns True when the identity holds; `CHECKS` maps rule name -> check, and `run(rules)`
returns [(rule, holds, what was checked)] for the report.
"""
from __future__ import annotations

import sympy as sp

s1, s2, s3, s4 = sp.symbols("s1:5", real=True)
v1, v2, v3, v4 = sp.symbols("v1:5", real=True)
X = sp.Matrix(2, 3, lambda i, k: sp.Symbol(f"x{i}{k}", real=True))
W = sp.Matrix(3, 2, lambda k, j: sp.Symbol(f"w{k}{j}", real=True))
R = sp.Matrix([sp.Symbol("r0", positive=True), sp.Symbol("r1", positive=True)])
MU = sp.Matrix([sp.Symbol("mu0", real=True), sp.Symbol("mu1", real=True)])


def _zero(expr) -> bool:
    return sp.simplify(sp.expand(expr)) == 0


def check_softmax_shift() -> bool:
    """softmax of 3 scores is unchanged by a symbolic shift c."""
    c = sp.Symbol("c", real=True)
    e = [sp.exp(s) for s in (s1, s2, s3)]
    sh = [sp.exp(s - c) for s in (s1, s2, s3)]
    return all(_zero(a / sum(e) - b / sum(sh)) for a, b in zip(e, sh))


def check_online_softmax() -> bool:
    """2 tiles of 2 scores, symbolic running maxima: folded o / l equals the softmax-weighted sum."""
    m0, m1, m2 = sp.symbols("m0 m1 m2", real=True)
    l, o, m_prev = 0, 0, m0
    for (sa, va), (sb, vb), m_new in (((s1, v1), (s2, v2), m1), ((s3, v3), (s4, v4), m2)):
        alpha = sp.exp(m_prev - m_new)
        l = l * alpha + sp.exp(sa - m_new) + sp.exp(sb - m_new)
        o = o * alpha + sp.exp(sa - m_new) * va + sp.exp(sb - m_new) * vb
        m_prev = m_new
    scores, values = (s1, s2, s3, s4), (v1, v2, v3, v4)
    full = sum(sp.exp(s) * v for s, v in zip(scores, values)) / sum(sp.exp(s) for s in scores)
    return _zero(sp.powsimp(sp.expand(o / l - full), combine="exp")) and \
        _zero(l - sum(sp.exp(s - m2) for s in scores))


def check_exp_to_exp2() -> bool:
    """exp(x) - 2^(x / log 2) simplifies to 0."""
    x = sp.Symbol("x", real=True)
    return sp.simplify(sp.exp(x) - 2 ** (x / sp.log(2))) == 0


def check_scale_pullout() -> bool:
    """2x3 times 3x2: scaling row i of X by r_i scales row i of XW by r_i."""
    scaled = sp.Matrix(2, 3, lambda i, k: R[i] * X[i, k])
    return (scaled * W - sp.diag(*R) * (X * W)).expand() == sp.zeros(2, 2)


def check_mean_pullout() -> bool:
    """2x3 times 3x2: (X - mu 1^T) W = X W - mu colsum(W)."""
    centred = sp.Matrix(2, 3, lambda i, k: X[i, k] - MU[i])
    colsum = sp.Matrix(1, 2, lambda _, j: sum(W[k, j] for k in range(3)))
    return (centred * W - (X * W - MU * colsum)).expand() == sp.zeros(2, 2)


def check_variance_expand() -> bool:
    """3 terms, any pivot p: sum (x - mu)^2 = sum (x - p)^2 - 2 (mu - p) sum (x - p) + n (mu - p)^2
    (p = 0 is the unshifted expansion sum x^2 - 2 mu sum x + n mu^2)."""
    xs = [X[0, k] for k in range(3)]
    p = sp.Symbol("p", real=True)
    d = MU[0] - p
    rhs = sum((x - p) ** 2 for x in xs) - 2 * d * sum(x - p for x in xs) + len(xs) * d ** 2
    return _zero(sum((x - MU[0]) ** 2 for x in xs) - rhs)


def check_stream_stats() -> bool:
    """7 terms split into tiles of 2, 3 and 5: sums and sums of squares of the tiles add up."""
    xs = sp.symbols("a0:7", real=True)
    for b in (2, 3, 5):
        tiles = [xs[i:i + b] for i in range(0, len(xs), b)]
        if not (_zero(sum(sum(t) for t in tiles) - sum(xs))
                and _zero(sum(sum(x**2 for x in t) for t in tiles) - sum(x**2 for x in xs))):
            return False
    return True


def check_dual_gemm() -> bool:
    """One loop over k accumulating X W and X U gives both products."""
    U = sp.Matrix(3, 2, lambda k, j: sp.Symbol(f"u{k}{j}", real=True))
    a, b = sp.zeros(2, 2), sp.zeros(2, 2)
    for k in range(3):
        a += X[:, k] * W[k, :]
        b += X[:, k] * U[k, :]
    return (a - X * W).expand() == sp.zeros(2, 2) and (b - X * U).expand() == sp.zeros(2, 2)


def check_fuse_elementwise() -> bool:
    """silu(3x) evaluated as one composed map equals composing the maps."""
    x = sp.Symbol("x", real=True)
    silu = sp.Lambda(x, x / (1 + sp.exp(-x)))
    triple = sp.Lambda(x, 3 * x)
    return _zero(silu(triple(x)) - (x / (1 + sp.exp(-x))).subs(x, 3 * x))


CHECKS = {name[len("check_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("check_")}


def describe(rule: str) -> str:
    return (CHECKS[rule].__doc__ or "").strip()


def run(rules) -> list[tuple[str, bool | None, str]]:
    """(rule, holds, description) for each rule, in the given order; None: no check exists."""
    out = []
    for r in dict.fromkeys(rules):
        fn = CHECKS.get(r)
        out.append((r, bool(fn()) if fn else None, describe(r) if fn else "no sympy check for this rule"))
    return out
