"""Hypothesis strategies shared by the test suite: random valid graphs built through
leantile.dag, covering elementwise chains, reductions, matmuls and the subdags."""
from __future__ import annotations

from hypothesis import reject, strategies as st

from leantile import ir
from leantile.dag import DagM
from mask_strategies import masked_scores

AXES = ("i", "j", "k", "l")
SAFE_UNARY = ("exp", "neg", "square", "silu", "gelu_tanh", "tanh", "erf", "sigmoid", "abs")
BINARY = ("add", "sub", "mul", "max", "min")


@st.composite
def sizes(draw, names=AXES, lo=1, hi=9):
    return {a: draw(st.integers(lo, hi)) for a in names}


# random_graphs' input dtypes with f64 among them (issue 46: f64 graphs take default tiles of their
# own), for the derive suites; the lowering suites keep f32 (plan.verify counts two staged f64
# stores of a GEMM as 128 KiB where TileLang gives them one place: 96 KiB with the operands)
WITH_F64 = ("f32", "f32", "f32", "f64")


@st.composite
def random_graphs(draw, max_ops=8, dtypes=("f32",)):
    """A random graph over axes i, j, k, l, its inputs in one of `dtypes`. Values stay bounded:
    exp only follows a normalising step (softmax, rms_norm, layer_norm), division only by safe
    positives."""
    axes = draw(sizes())
    g = DagM("random", axes)
    dt = draw(st.sampled_from(dtypes))
    x = g.input("X", ["i", "k"], dt)
    w = g.input("W", ["k", "j"], dt)
    pool = [x, w]
    growth = 0  # products that can grow magnitudes; capped so float64 never overflows
    for _ in range(draw(st.integers(1, max_ops))):
        choice = draw(st.sampled_from(
            ["unary", "binary", "reduce", "matmul", "softmax", "rms_norm", "layer_norm", "mean", "const",
             "log", "mask", "log_softmax", "mse", "cast", "scale"]))
        a = draw(st.sampled_from(pool))
        ax = g.nodes[a].axes
        if choice == "unary":
            op = draw(st.sampled_from(SAFE_UNARY))
            if op == "exp":
                if not ax:
                    continue
                a = g.softmax(a, ax[-1])  # exp of a probability: bounded
            elif op == "square":
                if growth >= 2:
                    continue
                growth += 1
            pool.append(getattr(g, op)(a))
        elif choice == "binary":
            b = draw(st.sampled_from(pool))
            op = draw(st.sampled_from(BINARY))
            if op == "mul":
                if growth >= 2:
                    continue
                growth += 1
            pool.append(getattr(g, op)(a, b))
        elif choice == "reduce" and ax:
            pool.append(g.red(draw(st.sampled_from(["sum", "max"])), a, draw(st.sampled_from(ax))))
        elif choice == "matmul" and ax and growth < 2:
            growth += 1
            other = [p for p in pool if any(g.axes[q] == g.axes[c] for q in g.nodes[p].axes for c in ax)]
            b = draw(st.sampled_from(other))
            pairs = [(c, q) for c in ax for q in g.nodes[b].axes
                     if g.axes[c] == g.axes[q] and (c == q or q not in ax)]
            if pairs:
                ca, cb = draw(st.sampled_from(pairs))
                pool.append(g.matmul(a, b, ca, cb))
        elif choice in ("softmax", "rms_norm", "layer_norm", "mean") and ax:
            axis = draw(st.sampled_from(ax))
            if choice == "mean":  # offset: the mean of a normalised row is 0 up to rounding, no example
                pool.append(g.mean_along(g.add(a, g.const("1.5")), axis))
            else:
                pool.append(getattr(g, choice)(a, axis))
        elif choice == "const":
            c = g.const(draw(st.sampled_from(["0.5", "2.0", "1e-05", "-3.25"])))
            if draw(st.booleans()):
                c = g.neg(c)  # a computed scalar: folded, never a kernel
            pool.append(g.add(a, c))
        elif choice == "cast":  # a round trip through f16: a cast inside a fused region, dtype kept
            pool.append(g.cast(g.cast(a, "f16"), dt))
        elif choice == "scale" and ax:  # by a constant or a vector along one axis: a GEMM reading it
            # pulls the scale out (scale_pullout) and reads `a`, maybe another GEMM's product
            by = g.const("0.5") if draw(st.booleans()) else g.input(f"s{len(g.nodes)}", [draw(st.sampled_from(ax))], dt)
            pool.append(g.mul(a, by))
        elif choice == "log":  # log of a positive value
            pool.append(g.log(g.add(g.abs(a), g.const("0.5"))))
        elif choice == "mask" and ax:  # where(position < c, a, b): exact positions, no rounding flips it
            axis = draw(st.sampled_from(ax))
            cond = draw(st.sampled_from(["lt", "le", "eq", "ge", "gt"]))
            pos = getattr(g, cond)(g.iota(axis), g.const(str(draw(st.integers(0, 4)))))
            b = draw(st.sampled_from(pool))
            pool.append(g.select(pos, a, b))
        elif choice == "log_softmax" and ax:
            axis = draw(st.sampled_from(ax))
            z = g.sub(a, g.red("max", a, axis))
            pool.append(g.sub(z, g.log(g.red("sum", g.exp(z), axis))))
        elif choice == "mse" and ax:
            b = draw(st.sampled_from([p for p in pool if g.nodes[p].axes == ax] or [a]))
            d = g.square(g.sub(a, b))
            for axis in ax:
                d = g.red("sum", d, axis)
            pool.append(g.div(d, g.const("4.0")))
    g.output("out", pool[-1])
    computed = [p for p in pool[2:-1] if p != pool[-1]]
    if computed and draw(st.booleans()):  # an intermediate that is an output too: stored with its true value
        g.output("aux", draw(st.sampled_from(computed)))
    try:
        return g.graph()
    except ir.GraphError as e:
        # later ops can join a contracted axis with the one the matmul keeps (same name): the IR
        # refuses that graph (no plan could tile and stream one axis), so it is no example
        if not all("is contracted and also kept" in p for p in e.problems):
            raise
        reject()


@st.composite
def structured_graphs(draw):
    """The fused patterns with the operands users build around them: attention whose Q, K, V
    are projections (computed operands, not inputs), scaled scores; a norm feeding two GEMMs
    of one (possibly the same) weight, with an intermediate also returned as an output;
    size-1 axes."""
    kind = draw(st.sampled_from(["attention", "norm_dual"]))
    if kind == "attention":
        axes = {"h": draw(st.integers(1, 2)), "t_q": draw(st.integers(1, 6)), "t_kv": draw(st.integers(1, 9)),
                "d": draw(st.integers(1, 5)), "d_h": draw(st.integers(1, 5))}
        g = DagM("attention_proj", axes)
        x = g.input("X", ["h", "t_q", "d"], "f32")
        kv = g.input("KV", ["h", "t_kv", "d"], "f32")
        proj = {n: g.input(f"W{n}", ["d", "d_h"], "f32") for n in "QKV"}
        q = g.matmul(x, proj["Q"], "d", "d") if draw(st.booleans()) else g.input("Q", ["h", "t_q", "d_h"], "f32")
        k = g.matmul(kv, proj["K"], "d", "d")
        v = g.matmul(kv, proj["V"], "d", "d") if draw(st.booleans()) else g.input("V", ["h", "t_kv", "d_h"], "f32")
        s = g.matmul(q, k, "d_h", "d_h")
        if draw(st.booleans()):
            s = g.div(s, g.sqrt(g.size_const("d_h")))
        g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
        return g.graph()
    axes = {"m": draw(st.integers(1, 6)), "d": draw(st.integers(1, 9)), "n": draw(st.integers(1, 6)),
            "p": draw(st.integers(1, 6))}
    g = DagM("norm_dual", axes)
    x = g.input("X", ["m", "d"], "f32")
    w = g.input("W", ["d", "n"], "f32")
    # the same weight, another of its shape (a dual GEMM), or one of other columns p (two GEMM
    # sites of one norm: their statistics are computed once and shared, issue 46)
    cols = draw(st.sampled_from(["n", "n", "p"]))
    u = w if cols == "n" and draw(st.booleans()) else g.input("U", ["d", cols], "f32")
    h = getattr(g, draw(st.sampled_from(["layer_norm", "rms_norm"])))(x, "d")
    a, b = g.matmul(h, w, "d", "d"), g.matmul(h, u, "d", "d")
    if cols == "p":
        g.output("other", b)
    g.output("out", g.mul(g.silu(a), b) if cols == "n" else g.silu(a))
    if draw(st.booleans()):
        g.output("gate", a)  # an intermediate of the fused region is also an output
    return g.graph()


# ---------------------------------------------------------------------------- issue 13
# What users build (issue 13): every `user_graphs` example is (graph, classes), `classes` the
# numbered issue-13 classes whose structure the graph contains, so a test can leave out the
# classes still open and a report can count failures per class. Structures: computed Q/K/V,
# decode attention (no query axis), scaled softmax with its statistics as outputs, a norm
# (layer, rms, centred on a constant) into one or two GEMMs with the weight reused, casts in
# epilogues, constants as outputs, renamed and clashing contraction axes, dependent GEMMs.
# Class 15 (issue 17): attention scores under a mask or bias (causal at any offset, a sliding
# window, per-head lengths, a keep-mask input, an additive bias), masked with -inf or a finite
# value, the scale before or after the mask, rows that are wholly masked included.
# Class 16 (issue 17): grouped-query attention, Q with a head axis g that K and V lack (the heads
# of a group share K and V: packed into one CTA where g sits just before the query axis, and
# tiled one head per CTA where it does not), masks and biases whose inputs lack g included.
# Issue 46 (derive crashes): class 17, a GEMM's product scaled by a constant or a per-row input
# (or centred on one) feeding a second GEMM, which pulls the scale out and reads the first
# product; class 18, a norm's rows into two GEMMs of different weights and columns (two sites
# needing one set of row statistics); class F64 (19), f32 inputs made f64 (default tiles of their
# own): asked for by the derive suites (user_graphs(ALL_CLASSES | {F64})), not by the lowering
# ones (see WITH_F64).
# Issue 49: class 20, a GEMM's epilogue masked by positions (select(iota(j) >= iota(m), ., 0):
# a triu product), which the epilogue computes from the tile's coordinates.
# Issue 51: class 21, attention whose values have another head dim than q.k's (MLA: q.k over
# 192, v over 128), the output along the values' head axis.
F64 = 19
MLA = 21
ALL_CLASSES = frozenset([*range(1, 12), 15, 16, 17, 18, 20, MLA])


def _maybe(draw, cls, allow):
    """Draw whether to build the structure of issue-13 class `cls` (never when not allowed)."""
    return cls in allow and draw(st.booleans())


@st.composite
def _user_attention(draw, allow, always: frozenset = frozenset(), shaped: bool = False, overlap: bool = False):
    built = set()
    decode = _maybe(draw, 6, allow) and not (shaped or overlap)
    axes = {"h": draw(st.integers(1, 2)), "t_q": draw(st.integers(1, 5)), "t_kv": draw(st.integers(1, 9)),
            "d": draw(st.integers(1, 5)), "d_h": draw(st.integers(1, 5))}
    if shaped:  # the sizes at which derive/shape_tiles.py gives attention other tiles
        axes.update(draw(_shape_tiled_sizes()))
    if overlap:  # 65.. query rows (no small-m tiles), keys across 1..9 blocks of 128, MMA-sized heads
        axes.update({"t_q": draw(st.integers(65, 300)), "t_kv": draw(st.integers(1, 1100)),
                     "d_h": 16 * draw(st.integers(1, 8)), "d": 16 * draw(st.integers(1, 4))})
    if _maybe(draw, MLA, allow):  # the values' own head dim (MLA), of the sizes q.k's head draws from
        axes["d_v"] = (16 * draw(st.integers(1, 8)) if overlap else
                       draw(st.sampled_from([64, 128, 96, 192, 256])) if shaped else draw(st.integers(1, 5)))
        built.add(MLA)
    g = DagM("user_attention", axes)
    computed = set(draw(st.sets(st.sampled_from("QKV")))) if 5 in allow else set()

    def operand(name, rows):
        head = "d_v" if name == "V" and "d_v" in axes else "d_h"
        if name not in computed:
            return g.input(name, ["h", rows, head] if rows else ["h", head], "f32")
        x = g.input(f"X{name}", ["h", rows, "d"] if rows else ["h", "d"], "f32")
        return g.matmul(x, g.input(f"W{name}", ["d", head], "f32"), "d", "d")  # name = X W (a projection)

    group = _maybe(draw, 16, allow)
    if group:  # Q[h, g, t_q, d_h] (or g elsewhere) against K, V[h, t_kv, d_h]
        g.axes["g"] = draw(st.integers(1, 4))
        rows = [] if decode else ["t_q"]
        where = draw(st.sampled_from(["before_query", "before_query", "first", "last"]))
        q_axes = {"before_query": ["h", "g", *rows, "d_h"], "first": ["g", "h", *rows, "d_h"],
                  "last": ["h", *rows, "d_h", "g"]}[where]
        q = g.input("Q", q_axes, "f32")
        built.add(16)
    else:
        q = operand("Q", None if decode else "t_q")
    k, v = operand("K", "t_kv"), operand("V", "t_kv")
    built |= {5} if computed else set()
    built |= {6} if decode else set()
    s = g.matmul(q, k, "d_h", "d_h")
    scale_first = draw(st.booleans())
    if scale_first and draw(st.booleans()):
        s = g.div(s, g.sqrt(g.size_const("d_h")))
    if 15 in always or _maybe(draw, 15, allow):
        s = draw(masked_scores(g, s, decode))
        built.add(15)
        if not scale_first and draw(st.booleans()):
            s = g.mul(s, g.const("0.25"))  # after the mask: -inf * c stays -inf
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph(), frozenset(built)


def overlap_attention_graphs():
    """(graph, classes): user attention in f16 at sizes FlashAttention-3's schedule serves
    (plan.passes.overlap: 128-row query tiles, heads of 16..128 in 16s), partial tiles included."""
    return _user_attention(ALL_CLASSES, overlap=True).map(lambda gc: (inputs_in(gc[0], "f16"), gc[1]))


# user_gemm's renamed or clashing contraction axes: one size, whatever sizes a test draws
TIED_AXES = ("k", "kk", "j")


def resized(g: ir.Graph, size_of) -> ir.Graph:
    """g with each axis at size_of(axis), asked in sorted axis order, except that its tied
    contraction axes (TIED_AXES) all take the first one's size."""
    sizes = {a: size_of(a) for a in sorted(g.axes)}
    tied = [a for a in TIED_AXES if a in sizes]
    sizes.update({a: sizes[tied[0]] for a in tied})
    return g.model_copy(update={"axes": sizes})


def inputs_in(g: ir.Graph, dtype: str, only: str | None = None) -> ir.Graph:
    """g with every input (every input of dtype `only`, where given) in `dtype`, validated again
    through ir.parse; casts keep their dtypes. `inputs_in(g, "f16", only="f32")` puts a generated
    graph on 16-bit operands: the tensor cores take them in either major order, so it gets the
    kernels a float32 graph never does (a swapped GEMM, plan.passes.swap_operands; one wave of
    64-row tiles, shape_tiles.wave_tiles)."""
    data = g.model_dump(mode="json", by_alias=True)
    for n in data["nodes"]:
        if n["op"] == "input" and (only is None or n.get("dtype") == only):
            n["dtype"] = dtype
    data["derivation"] = []
    return ir.parse(data)


def inputs_mixed(g: ir.Graph, draw, tries: int = 3) -> ir.Graph:
    """g with each input in a dtype drawn from f32, f16 and bf16 (a mixed graph: an f32 path beside
    an f16 one, a 16-bit input added to an f32 one). A draw that puts a GEMM's operands in two
    dtypes is refused by validation (one tensor-core dtype): drawn again, `tries` times, then
    every input takes the first drawn dtype. `draw`: a composite's draw, or st.data()'s."""
    base = g.model_dump(mode="json", by_alias=True)
    base["derivation"] = []
    first = None
    for _ in range(tries):
        drawn = [draw(st.sampled_from(["f32", "f16", "bf16"])) for n in base["nodes"] if n["op"] == "input"]
        first = first or drawn[0]
        it = iter(drawn)
        nodes = [dict(n, dtype=next(it)) if n["op"] == "input" else n for n in base["nodes"]]
        try:
            return ir.parse(dict(base, nodes=nodes))
        except ir.GraphError:
            continue
    try:
        return inputs_in(g, first)
    except ir.GraphError:  # a cast feeds a GEMM: its other operand keeps the generated dtype
        return g



def _shape_tiled_sizes():
    """More than 64 query rows (no SMALL_M_TILES) and either 128-wide heads over >= 2048 keys
    (256-key tiles), narrow heads on a small grid (64 x 256 tiles), or heads past 128 (Gemma's
    256: FLASH_LARGE_HEAD_TILES, a flash kernel that the default tiles would not fit), keys past
    a whole tile."""
    from leantile.derive.shape_tiles import FLASH_LARGE_HEAD, FLASH_WIDE_KEYS
    wide = st.fixed_dictionaries({"t_q": st.integers(65, 140), "t_kv": st.integers(FLASH_WIDE_KEYS, FLASH_WIDE_KEYS + 300),
                                  "d_h": st.just(128)})
    narrow = st.fixed_dictionaries({"t_q": st.integers(65, 200), "t_kv": st.integers(1, 600),
                                    "d_h": st.integers(16, 64)})
    large = st.fixed_dictionaries({"t_q": st.integers(65, 200), "t_kv": st.integers(1, 300),
                                   "d_h": st.sampled_from([FLASH_LARGE_HEAD + 16, 192, 256, 250])})
    return st.one_of(wide, narrow, large)


def shape_tiled_attention_graphs():
    """(graph, classes): user attention (computed operands, masks, biases, grouped heads) at the
    sizes where the default plan takes the shape's attention tiles (derive/shape_tiles.py)."""
    return _user_attention(ALL_CLASSES, shaped=True)


@st.composite
def _user_softmax(draw, allow):
    """Softmax of scaled scores (z = x c, x an input or a GEMM), statistics also outputs (2, 3)."""
    built = set()
    g = DagM("user_softmax", {"m": draw(st.integers(1, 5)), "k": draw(st.integers(1, 5)), "t": draw(st.integers(1, 9))})
    gemm = draw(st.booleans())
    x = g.matmul(g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "t"], "f32"), "k", "k") if gemm \
        else g.input("X", ["m", "t"], "f32")
    scaled = draw(st.booleans())
    z = g.mul(x, g.const(draw(st.sampled_from(["0.5", "2.0", "0.125"])))) if scaled else x
    m = g.red("max", z, "t")
    sh = g.sub(z, m)
    e = g.exp(sh)
    g.output("out", g.div(e, g.red("sum", e, "t")))
    stats = [n for n, i in (("mx", m), ("shifted", sh), ("e", e)) if _maybe(draw, 2, allow)]
    for name, i in (("mx", m), ("shifted", sh), ("e", e)):
        if name in stats:
            g.output(name, i)
    if stats and scaled:
        built.add(2)
    if gemm and scaled and _maybe(draw, 3, allow):
        g.output("scores", z)
        built.add(3)
    return g.graph(), frozenset(built)


@st.composite
def _user_norm_gemm(draw, allow):
    """A norm into one or two GEMMs, the weight possibly reused (1), centred on a constant (7),
    intermediates as outputs, a cast in the epilogue (8); the norm with a gain over d (either
    operand order: gain_fold folds it into the weight) and a bias after it; the weight a vector."""
    built = set()
    g = DagM("user_norm", {"m": draw(st.integers(1, 5)), "d": draw(st.integers(1, 9)), "n": draw(st.integers(1, 5))})
    # a quarter of the time the weight is a vector (a value head: one output a row, whose column sum
    # is a scalar the GEMM's stream defers: the emitter once took its partials for shared memory)
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d"] if draw(st.integers(0, 3)) == 0 else ["d", "n"], "f32")
    kind = draw(st.sampled_from(["layer_norm", "rms_norm"] + (["centred_const"] if 7 in allow else [])))
    if kind == "centred_const":
        var = g.mean_along(g.square(g.sub(x, g.const("0.25"))), "d")
        h = g.mul(x, g.rsqrt(g.add(var, g.const("1e-05"))))
        built.add(7)
    else:
        h = getattr(g, kind)(x, "d")
    affine = draw(st.sampled_from(["none", "gain", "gain_first", "gain_bias"]))
    if affine != "none":
        gamma = g.input("gamma", ["d"], "f32")
        h = g.mul(gamma, h) if affine == "gain_first" else g.mul(h, gamma)
        if affine == "gain_bias":
            h = g.add(h, g.input("beta", ["d"], "f32"))
    a = g.matmul(h, w, "d", "d")
    out = a
    if _maybe(draw, 18, allow):  # a second GEMM of other columns: two sites, one norm's statistics
        g.axes["p"] = draw(st.integers(1, 5))
        g.output("other", g.matmul(h, g.input("V", ["d", "p"], "f32"), "d", "d"))
        if affine != "gain_bias":  # a bias after the gain stops the pullouts: the norm is its own kernel
            built.add(18)
    if draw(st.booleans()):  # dual GEMM
        same = _maybe(draw, 1, allow)
        built |= {1} if same else set()
        b = g.matmul(h, w if same else g.input("U", ["d", "n"], "f32"), "d", "d")
        out = g.mul(g.silu(a), b)
    else:
        out = g.gelu_tanh(out)
    if _maybe(draw, 8, allow):
        out = g.silu(g.cast(out, "f32"))
        built.add(8)
    g.output("out", out)
    if draw(st.booleans()):
        g.output("gate", a)  # an intermediate of the fused region is also an output
    return g.graph(), frozenset(built)


@st.composite
def _user_gemm(draw, allow):
    """One GEMM with an epilogue: renamed (11) or clashing (4) contraction axes, a cast (8),
    a constant output (10), a dependent second GEMM (9); inputs f32 or f16, the LHS possibly
    scaled constant-first (`0.5 * X`: its tile keeps X's dtype, ir.value_dtype)."""
    built = set()
    n = draw(st.integers(1, 5))
    dt = draw(st.sampled_from(["f32", "f16"]))
    g = DagM("user_gemm", {"m": draw(st.integers(1, 5)), "k": n, "kk": n, "j": n})
    x = g.input("X", ["m", "k"], dt)
    lhs = g.mul(g.const("0.5"), x) if draw(st.booleans()) else x
    naming = draw(st.sampled_from(["plain"] + [s for c, s in ((11, "renamed"), (4, "clash")) if c in allow]))
    if naming == "plain":
        a = g.matmul(lhs, g.input("W", ["k", "j"], dt), "k", "k")
    elif naming == "renamed":
        a = g.matmul(lhs, g.input("W", ["kk", "j"], dt), "k", "kk")
        built.add(11)
    else:  # W[j, k] contracted over j: its free axis is named like X's contracted axis
        a = g.matmul(lhs, g.input("W", ["j", "k"], dt), "k", "j")
        built.add(4)
    out = g.add(a, g.input("bias", [g.nodes[a].axes[-1]], dt)) if draw(st.booleans()) else a
    if _maybe(draw, 8, allow):
        out = g.cast(g.silu(out), "f32")
        built.add(8)
    if _maybe(draw, 20, allow):  # what the tile computes from its coordinates, constants and inputs alone
        col = g.nodes[a].axes[-1]
        source = draw(st.sampled_from(["triu", "lengths", "scaled"]))
        if source == "triu":  # a triu (or shifted) mask
            keep = g.ge(g.add(g.iota(col), g.const(str(draw(st.integers(-2, 2))))), g.iota("m"))
        else:  # padding from a lengths input (|len[m]| n: a cut anywhere in the row), built (j, m) or (m, j)
            cut = g.mul(g.abs(g.input("len", ["m"], "f32")), g.size_const(col))
            keep = g.lt(g.iota(col), cut) if draw(st.booleans()) else g.gt(cut, g.iota(col))
        if source == "scaled":  # and a loss's d_out / m scaling the product (a backward's)
            out = g.mul(out, g.div(g.input("d_out", [], "f32"), g.size_const("m")))
        out = g.select(keep, out, g.const(draw(st.sampled_from(["0", "-1"]))))
        built.add(20)
    if naming == "plain" and _maybe(draw, 9, allow):  # second weight W + a depends on the first product
        w2 = g.add(g.input("W2", ["k", "j"], dt), a)  # [k, j, m]: m becomes a batch axis of the GEMM
        out = g.mul(out, g.matmul(x, w2, "k", "k"))
        built.add(9)
    g.output("out", out)
    if _maybe(draw, 10, allow):
        g.output("c", g.const("0.5"))
        built.add(10)
    return g.graph(), frozenset(built)


@st.composite
def _user_gemm_chain(draw, allow):
    """Class 17: X W, maybe activated, scaled by a constant or a per-row input or centred on one
    (once or twice), into a second GEMM: that GEMM pulls the scale out and reads the first
    product, which the first GEMM's kernel must then store though no graph edge asks for it. The
    scaled product possibly an output too; or the chain unused (the output reads X W only)."""
    if 17 not in allow:
        return draw(_user_gemm(allow))
    g = DagM("user_chain", {a: draw(st.integers(1, 5)) for a in ("m", "k", "n", "p")})
    x, w, u = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32"), g.input("U", ["n", "p"], "f32")
    y = g.matmul(x, w, "k", "k")
    base = g.silu(y) if draw(st.booleans()) else y
    s = base
    for j in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["const", "row", "centred"]))
        s = g.mul(s, g.const("0.5")) if kind == "const" else \
            getattr(g, "mul" if kind == "row" else "sub")(s, g.input(f"r{j}", ["m"], "f32"))
    z = g.matmul(s, u, "n", "n")
    use = draw(st.sampled_from(["product", "scaled_too", "unused"]))
    g.output("out", g.gelu_tanh(base) if use == "unused" else z)
    if use == "scaled_too":
        g.output("scaled", s)
    return g.graph(), frozenset({17})


@st.composite
def user_graphs(draw, allow=ALL_CLASSES):
    """(graph, issue-13 classes it contains), building only the classes in `allow`; where F64 is
    allowed, a quarter of them with their f32 inputs in f64."""
    allow = frozenset(allow)
    maker = draw(st.sampled_from([_user_attention, _user_softmax, _user_norm_gemm, _user_gemm, _user_gemm_chain]))
    g, built = draw(maker(allow))
    if F64 in allow and draw(st.integers(0, 3)) == 0:
        try:
            return inputs_in(g, "f64", only="f32"), built | {F64}
        except ir.GraphError:  # a cast to f32 feeds a GEMM beside an f64 operand: kept as drawn
            pass
    return g, built


@st.composite
def issue46_graphs(draw):
    """(graph, classes): issue 46's structures alone, each half the time in f64 (F64): a scaled
    GEMM into a second GEMM (17), a norm into GEMMs of different weights (18), or a user graph."""
    kind = draw(st.sampled_from(["chain", "norm", "any"]))
    if kind == "chain":
        g, built = draw(_user_gemm_chain(frozenset({17})))
    elif kind == "norm":
        g, built = draw(_user_norm_gemm(frozenset({1, 7, 18})).filter(lambda gc: 18 in gc[1]))
    else:  # no masks (15): a wholly masked row is NaN, which the derive suites' checks refuse
        g, built = draw(user_graphs(ALL_CLASSES - {15}))
    if draw(st.booleans()):
        try:
            return inputs_in(g, "f64", only="f32"), built | {F64}
        except ir.GraphError:  # a cast to f32 feeds a GEMM beside an f64 operand: kept as drawn
            pass
    return g, built


def masked_attention_graphs():
    """(graph, classes): attention whose scores always pass a mask or bias (class 15), Q/K/V
    possibly computed, decode or not."""
    return _user_attention(ALL_CLASSES, always=frozenset({15}))


@st.composite
def masked_softmax_graphs(draw):
    """A row softmax of an input X[m, t] (scaled or not, statistics possibly outputs) and a
    prefix length per row: the tests set X[:, :prefix] = -inf (a masked prefix, issue 13)."""
    g, _ = draw(_user_softmax(ALL_CLASSES).filter(lambda gc: gc[0].node(0).axes == ("m", "t")))
    t = g.axes["t"]
    return g, [draw(st.integers(0, t - 1)) for _ in range(g.axes["m"])]  # every row keeps a finite score


def biased_attention(**sizes) -> ir.Graph:
    """softmax(Q K^T + B) V, 128-wide heads over the keys where shape_tiles widens the plain loop:
    the bias is a third tile per key block, so no FA3 cut (the plain loop keeps 256-key tiles)."""
    from leantile.derive.shape_tiles import FLASH_WIDE_KEYS
    g = DagM("biased_attention", {"h": 2, "t_q": 256, "t_kv": FLASH_WIDE_KEYS, "d_h": 128, **sizes})
    q, k, v = (g.input(n, ["h", t, "d_h"]) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.add(g.matmul(q, k, "d_h", "d_h"), g.input("B", ["h", "t_q", "t_kv"]))
    g.output("O", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()



def differentiable_graphs():
    """Forward graphs whose backward the suites take: user graphs (no fully masked rows: their NaN
    has no gradient to compare), random and structured graphs."""
    return st.one_of(user_graphs(ALL_CLASSES - {15}).map(lambda gc: gc[0]), random_graphs(), structured_graphs())


@st.composite
def backward_graphs(draw):
    """The backward (leantile.autodiff.vjp: primal inputs and cotangents in, gradients out) of a
    differentiable graph: graphs of the shapes training derives (issue 50)."""
    from leantile.autodiff import vjp
    bw = vjp(draw(differentiable_graphs())).graph
    if bw is None:  # nothing differentiable reaches an output
        reject()
    return bw
