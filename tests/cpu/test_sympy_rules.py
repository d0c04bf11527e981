"""Exact symbolic checks (sympy) that each rule's rewrite holds on a small unrolled instance.
These complement the Lean proofs: they run everywhere, including where no Lean toolchain is."""
import sympy as sp

from leantile.derive import RULES

s1, s2, s3, s4 = sp.symbols("s1:5", real=True)
v1, v2, v3, v4 = sp.symbols("v1:5", real=True)
c, m0 = sp.symbols("c m0", real=True)


def zero(expr):
    return sp.simplify(sp.expand(expr)) == 0


def test_every_rule_has_a_check():
    checked = {name[len("test_"):] for name in globals() if name.startswith("test_")}
    assert {r.name for r in RULES} <= checked


def test_softmax_shift():
    e = [sp.exp(s) for s in (s1, s2, s3)]
    shifted = [sp.exp(s - c) for s in (s1, s2, s3)]
    for a, b in zip(e, shifted):
        assert zero(sp.simplify(a / sum(e) - b / sum(shifted)))


def test_online_softmax():
    """Two tiles of two scores, any starting shift m0: the folded (m, l, o) gives o / l =
    softmax-weighted sum. Running maxima are symbols m1, m2 (the identity holds for any m)."""
    m1, m2 = sp.symbols("m1 m2", real=True)
    l, o = 0, 0
    m_prev = m0
    for (sa, va), (sb, vb), m_new in (((s1, v1), (s2, v2), m1), ((s3, v3), (s4, v4), m2)):
        alpha = sp.exp(m_prev - m_new)
        l = l * alpha + sp.exp(sa - m_new) + sp.exp(sb - m_new)
        o = o * alpha + sp.exp(sa - m_new) * va + sp.exp(sb - m_new) * vb
        m_prev = m_new
    scores, values = (s1, s2, s3, s4), (v1, v2, v3, v4)
    full = sum(sp.exp(s) * v for s, v in zip(scores, values)) / sum(sp.exp(s) for s in scores)
    assert zero(sp.simplify(sp.powsimp(sp.expand(o / l - full), combine="exp")))
    # and the invariant itself: l = sum exp(s - m2) (the l0 = 0 start makes m0 vanish)
    assert zero(sp.simplify(l - sum(sp.exp(s - m2) for s in scores)))


def test_exp_to_exp2():
    x = sp.symbols("x", real=True)
    assert sp.simplify(sp.exp(x) - 2 ** (x * (1 / sp.log(2)))) == 0


X = sp.Matrix(2, 3, lambda i, k: sp.Symbol(f"x{i}{k}", real=True))
W = sp.Matrix(3, 2, lambda k, j: sp.Symbol(f"w{k}{j}", real=True))
r = sp.Matrix([sp.Symbol("r0", positive=True), sp.Symbol("r1", positive=True)])
mu = sp.Matrix([sp.Symbol("mu0", real=True), sp.Symbol("mu1", real=True)])


def test_scale_pullout():
    lhs = sp.diag(*r) * X * W
    rhs = sp.diag(*r) * (X * W)
    assert (lhs - rhs).expand() == sp.zeros(2, 2)
    scaled_rows = sp.Matrix(2, 3, lambda i, k: r[i] * X[i, k])
    assert (scaled_rows * W - sp.diag(*r) * (X * W)).expand() == sp.zeros(2, 2)


def test_mean_pullout():
    centred = sp.Matrix(2, 3, lambda i, k: X[i, k] - mu[i])
    colsum = sp.Matrix(1, 2, lambda _, j: sum(W[k, j] for k in range(3)))
    assert (centred * W - (X * W - mu * colsum)).expand() == sp.zeros(2, 2)


def test_variance_expand():
    xs = [X[0, k] for k in range(3)]
    n = len(xs)
    lhs = sum((x - mu[0]) ** 2 for x in xs)
    rhs = sum(x**2 for x in xs) - 2 * mu[0] * sum(xs) + n * mu[0] ** 2
    assert zero(lhs - rhs)


def test_stream_stats():
    xs = sp.symbols("a0:7", real=True)
    for split in (2, 3, 5):
        tiles = [xs[i:i + split] for i in range(0, len(xs), split)]
        assert zero(sum(sum(t) for t in tiles) - sum(xs))
        assert zero(sum(sum(x**2 for x in t) for t in tiles) - sum(x**2 for x in xs))


def test_dual_gemm():
    W2 = sp.Matrix(3, 2, lambda k, j: sp.Symbol(f"u{k}{j}", real=True))
    acc1, acc2 = sp.zeros(2, 2), sp.zeros(2, 2)
    for k in range(3):  # one loop over k feeds both products
        acc1 += X[:, k] * W[k, :]
        acc2 += X[:, k] * W2[k, :]
    assert (acc1 - X * W).expand() == sp.zeros(2, 2) and (acc2 - X * W2).expand() == sp.zeros(2, 2)


def test_fuse_elementwise():
    x = sp.symbols("x", real=True)
    silu = x / (1 + sp.exp(-x))
    f = sp.Lambda(x, silu)
    g = sp.Lambda(x, x * 3)
    assert zero(f(g(x)) - silu.subs(x, 3 * x))
