"""The graph families (tests/strategies.py's generators, tests/soundness_graphs.py's CLASSES,
tests/loss_graphs.py's losses, long reductions into 0-d outputs or few rows) and `graph_stream`, the
seeded sequence of their graphs at the campaign's dtypes and sizes."""
from __future__ import annotations

import hashlib
import random

from .sizes import Profile, resize


def _reduction_graph(rng: random.Random, dtype: str):
    """A long axis reduced into a 0-d or short output (the class of issue 46's miscompile): a row
    statistic (sum, max, mean of squares, log-sum-exp) then a reduction over the rows."""
    from leantile.dag import DagM

    g = DagM("reduce_to_scalar", {"r": 3, "c": 5})
    x = g.input("X", ["r", "c"], dtype)
    inner = rng.choice(["sum", "max", "sumsq", "lse", "none"])
    if inner == "sum":
        row = g.red("sum", x, "c")
    elif inner == "max":
        row = g.red("max", x, "c")
    elif inner == "sumsq":
        row = g.mean_along(g.square(x), "c")
    elif inner == "lse":
        m = g.red("max", x, "c")
        row = g.add(m, g.log(g.red("sum", g.exp(g.sub(x, m)), "c")))
    else:
        row = g.red("sum", g.abs(x), "c")
    outer = rng.choice(["sum", "max", "mean"])
    out = g.mean_along(row, "r") if outer == "mean" else g.red(outer, row, "r")
    g.output("out", out)
    if rng.random() < 0.3:
        g.output("rows", row)  # the per-row value too: several outputs, one 0-d
    return g.graph()


def _decode_graph(rng: random.Random):
    """Decode attention with wide heads: one query row per head (no query axis), keys and head
    dimension in the thousands, every GEMM a SIMT kernel, split over k or not, the softmax on
    chip or split (gpu-fuzz 2026-11-28, two H200s: two plans of h 1, t_kv 8192, d_h 8192 without
    a scale wrong by 2-3%, the default among them: benchmarks/results/gpu-fuzz-h200-2026-11-28-s26.json).
    Its own sizes (which resize keeps a fifth of the time) are those of that class."""
    from leantile.dag import DagM

    g = DagM("decode_attention", {"h": rng.choice([1, 2, 3, 8]), "t_kv": rng.choice([4097, 8191, 8192]),
                                  "d_h": rng.choice([2048, 4096, 8192])})
    q = g.input("Q", ["h", "d_h"], "f16")
    k, v = (g.input(n, ["h", "t_kv", "d_h"], "f16") for n in ("K", "V"))
    s = g.matmul(q, k, "d_h", "d_h")
    if rng.random() < 0.5:
        s = g.mul(s, g.const(rng.choice([0.125, 0.0110485])))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def families() -> dict:
    """{name: draw(seed, round, rng, count) -> [(graph, extra)]}, each family that imports here
    (a family whose generator is missing is left out, named)."""
    import gemm_strategies as G
    import reduction_strategies as R
    import strategies as S

    def hyp(strategy, post=lambda x: (x, {})):
        def draw(seed, rnd, rng, count):
            return [post(x) for x in _examples(strategy, seed * 7919 + rnd, count)]
        return draw

    def first(gc):
        return gc[0], {}

    makers = {
        "random": lambda: hyp(S.random_graphs()),
        "structured": lambda: hyp(S.structured_graphs()),
        "user_attention": lambda: hyp(S._user_attention(S.ALL_CLASSES), first),
        "user_softmax": lambda: hyp(S._user_softmax(S.ALL_CLASSES), first),
        "user_norm_gemm": lambda: hyp(S._user_norm_gemm(S.ALL_CLASSES), first),
        "user_gemm": lambda: hyp(S._user_gemm(S.ALL_CLASSES), first),
        # a GEMM's rows or columns over several axes (X[b, t, k], W[k, h, d]): one GEMM over their
        # product where nothing keeps them apart (merge_gemm_axes)
        "multi_axis_gemm": lambda: hyp(G.multi_axis_gemm_graphs(64)),
        # sums of GEMM products over one output (W x + U h, dX of an input two GEMMs read): the later
        # product's epilogue adds the earlier ones (rules.gemm.earlier_product)
        "gemm_sums": lambda: hyp(G.gemm_sum_graphs(64)),
        "masked_attention": lambda: hyp(S.masked_attention_graphs(), first),
        "masked_softmax": lambda: hyp(S.masked_softmax_graphs(), lambda gp: (gp[0], {"prefix": True})),
        "shape_tiled_attention": lambda: hyp(S.shape_tiled_attention_graphs(), first),
        "overlap_attention": lambda: hyp(S.overlap_attention_graphs(), first),
        # heads past 128 (Gemma's 256: one flash kernel at FLASH_LARGE_HEAD_TILES), the head kept at its
        # drawn 144..256 while the rest is resized (else a resize almost never lands there)
        "large_head_attention": lambda: hyp(S.shape_tiled_attention_graphs().filter(
            lambda gc: gc[0].axes["d_h"] > 128), lambda gc: (gc[0], {"keep": ["d_h"]})),
        "classes": lambda: _fixed_classes(),
        "losses": lambda: _fixed_losses(),
        "reductions": lambda: (lambda seed, rnd, rng, count: [(_reduction_graph(rng, "f32"), {}) for _ in range(count)]),
        # a long axis into a scalar or a few rows behind a prologue, before an epilogue (split_reduction)
        "long_reductions": lambda: hyp(R.long_reduction_graphs(), lambda g: (g, {"prefix": g.name == "long_reduction_lse"})),
        # norms over several axes (c, h, w), a GroupNorm's group: one kernel on chip where it fits
        "axis_norms": lambda: hyp(R.axis_norm_graphs()),
        # nested reductions over adjacent axes merged into one (flatten_reduction), or kept apart
        "nested_reductions": lambda: hyp(R.nested_reduction_graphs()),
        # norms over rows too long for the chip: the variance from pivoted sums in the mean's pass
        "long_norms": lambda: hyp(R.long_norm_graphs()),
        # an epilogue over long rows themselves (log-softmax): one kernel streaming the rows twice
        "row_epilogues": lambda: hyp(R.row_epilogue_graphs()),
        # reductions over the outer axis, the contiguous one kept (a norm's gain gradient): streamed
        # over coalesced column tiles, split over CTAs
        "column_reductions": lambda: hyp(R.column_reduction_graphs()),
        # reductions over a short axis before two kept ones (GQA's group sums of dK and dV): the
        # kept axis before the innermost tiled too (rules.row_tiles.outer_row_block)
        "head_reductions": lambda: hyp(R.head_reduction_graphs()),
        # max / average pooling over a split axis of a GEMM's output (fuse_pool_epilogue)
        "pooled_gemm": lambda: hyp(R.pooled_gemm_graphs(), lambda g: (g, {"keep": ["p"]})),
        # a norm or softmax over a GEMM's columns, whole in one tile (fuse_row_epilogue); c kept
        "normed_gemm": lambda: hyp(R.normed_gemm_graphs(), lambda g: (g, {"keep": ["c"]})),
        "biased_attention": lambda: (lambda seed, rnd, rng, count: [(S.biased_attention(), {})]),
        "decode_attention": lambda: (lambda seed, rnd, rng, count: [(_decode_graph(rng), {}) for _ in range(count)]),
        # training (issue 50): the backward graphs leantile.autodiff.vjp writes, derived like any graph;
        # the forward is kept so that the backward is taken of it in the drawn dtype (graph_stream)
        "backward": lambda: hyp(S.differentiable_graphs(), _backward),
        # attention's backward (flash_backward: statistics, dQ and dK/dV kernels, masks skipped in
        # both streams), masked forwards included: a wholly masked row is NaN in the reference too
        "attention_backward": lambda: hyp((S._user_attention(S.ALL_CLASSES) | S.masked_attention_graphs()).map(
            lambda gc: gc[0]), _backward),
        # a loss's training step in one graph (leantile.train_step: the LM head's and the losses'
        # loss and gradients): GEMMs reading a row kernel's second pass, written over the logits
        # it streams (plan.storage.written_over) where the vocabulary is long
        "loss_steps": lambda: _loss_steps(),
    }
    out = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except Exception as e:  # a generator renamed or removed by another change: named, not fatal
            print(f"family {name}: left out ({type(e).__name__}: {e})", flush=True)
    return out


def _backward(g):
    """(the backward of g, {"forward": g}); graph_stream takes it again of g in the drawn dtype."""
    from leantile.autodiff import vjp
    return vjp(g).graph, {"forward": g}


def _fixed_classes():
    from soundness_graphs import CLASSES

    def draw(seed, rnd, rng, count):
        return [(CLASSES[rng.choice(sorted(CLASSES))](), {}) for _ in range(count)]
    return draw


def _fixed_losses():
    import loss_graphs

    def draw(seed, rnd, rng, count):
        out = []
        for _ in range(count):
            name = rng.choice(sorted(loss_graphs.LOSSES))
            out.append((loss_graphs.LOSSES[name](3, 5), {"loss": name}))
        return out
    return draw


def _loss_steps():
    import loss_graphs
    from leantile.train_bench import row_graphs
    from leantile.train_step import step_graph

    lm_head = row_graphs()[0]["lm_head_ce"]

    def draw(seed, rnd, rng, count):
        out = []
        for _ in range(count):
            if rng.random() < 0.6:  # a vocabulary kept long: the row kernel streams it twice, its
                # second pass written over the logits (written_over), past LONG_ROW in longer blocks
                d = rng.choice([16, 17000, 33001, 50257, 70001, 128256])
                out.append((step_graph(lm_head({"m": 4, "k": 8, "d": d}))[0], {"keep": ["d"]} if d > 16 else {}))
            else:
                g = loss_graphs.LOSSES[rng.choice(sorted(loss_graphs.LOSSES))](3, 5)
                out.append((step_graph(g)[0], {}))
        return out
    return draw


def _examples(strategy, seed: int, count: int) -> list:
    """`count` examples of a hypothesis strategy, the same for the same seed (hypothesis' own
    generation under @seed, no database, no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    out = []

    @hseed(seed)
    @settings(database=None, max_examples=count, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)
    collect()
    return out


def with_dtype(g, dtype: str, rng: random.Random):
    """g on `dtype` inputs (inputs_in), or each input in a drawn dtype ("mixed", inputs_mixed);
    g unchanged where validation refuses that (a cast feeding a GEMM)."""
    from leantile import ir
    from strategies import inputs_in, inputs_mixed

    try:
        if dtype == "mixed":
            return inputs_mixed(g, lambda _strategy: rng.choice(["f32", "f16", "bf16"]))
        return inputs_in(g, dtype)
    except ir.GraphError:
        return g


def graph_key(g) -> str:
    return hashlib.sha256(g.to_json().encode()).hexdigest()[:20]


def graph_stream(seed: int, fams: dict, dtypes: list, prof: Profile, per_round: int = 10):
    """(family, graph, dtype, extra) forever, the same sequence for the same seed and code:
    each round draws `per_round` examples of every family, then yields them one family after
    another (in an order drawn per round), example by example."""
    names = sorted(fams)
    rnd = 0
    while names:
        batches = {}
        for name in list(names):
            rng = random.Random(f"{seed}:{name}:{rnd}")
            try:
                batches[name] = list(fams[name](seed, rnd, rng, per_round))
            except Exception as e:
                print(f"family {name}: drawing failed, left out ({type(e).__name__}: {str(e)[:200]})", flush=True)
                names.remove(name)
        order = sorted(batches)
        random.Random(f"{seed}:order:{rnd}").shuffle(order)
        for i in range(per_round):
            for name in order:
                if i >= len(batches[name]):
                    continue
                g, extra = batches[name][i]
                r = random.Random(f"{seed}:{name}:{rnd}:{i}")
                dtype, ties = r.choice(dtypes), ()
                if "loss" in extra:  # the losses take their dtype as they are built (class ids stay f32)
                    import loss_graphs
                    g = loss_graphs.LOSSES[extra["loss"]](3, 5, dtype="f16" if dtype == "mixed" else dtype)
                elif "forward" in extra:  # a backward: of the forward in the drawn dtype
                    from leantile import ir
                    from leantile.autodiff import vjp
                    fwd = with_dtype(extra["forward"], dtype, r)
                    bw = vjp(fwd)
                    # the judge runs this forward at the backward's sizes on the backward's own inputs
                    # (judge.saved_from_forward): the axes the forward contracts together, and an input's
                    # axes in the forward and under another name in the backward (vjp renames an axis a
                    # gradient contracts over: W[k, j] read as W[k_1, j]), keep one size
                    ties = [(n.axis_a, n.axis_b) for n in fwd.nodes if isinstance(n, ir.Matmul)]
                    if bw.graph is not None:
                        inputs_bw = {n.name: n.axes for n in bw.graph.inputs()}
                        ties += [t for n in fwd.inputs() if n.name in inputs_bw for t in zip(n.axes, inputs_bw[n.name])]
                    g = bw.graph or g
                    extra = {k: v for k, v in extra.items() if k != "forward"}
                    if bw.saved:  # the judge feeds the saved inputs from this forward (judge.saved_from_forward)
                        extra.update(forward=fwd.to_json(), saved=dict(bw.saved))
                else:
                    g = with_dtype(g, dtype, r)
                if g is None:
                    continue
                sized = resize(g, r, prof, extra.get("keep", ()), ties)
                if sized is not None:
                    yield name, sized, dtype, extra
        rnd += 1
