"""A derivation replays iff it is exactly one derive would produce for the graph; anything
else (made-up rules or theorems, wrong sites, bogus params, reordered, repeated or missing
steps) is refused with one line naming `derivation[k] (<rule>)` and the field at fault.
Derive stays linear on long chains and never recurses per node."""
import json
import math
import re
import time
import weakref
from pathlib import Path

import pytest
import torch
from hypothesis import assume, event, given, settings, strategies as st

from leantile import architectures, interp, ir, reference
from leantile.dag import build_graph_with_output
from leantile.derive import DerivationError, RULES, THEOREMS, candidates, check_derivation, derive, replay
from leantile.derive.engine import MAX_CANDIDATE_NAME, MAX_CANDIDATES, MAX_UNFUSED_KERNELS
from leantile.derive.rules.regions import MAX_REGION_INPUTS, MAX_REGION_OPS
from plan_checks import check
from strategies import WITH_F64, random_graphs, structured_graphs
from profiles import examples  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _replay_error(g, steps) -> str:
    """The one line replay and check_derivation both give for these steps."""
    steps = [s if isinstance(s, ir.Step) else ir.Step(**s) for s in steps]
    with pytest.raises(DerivationError) as e:
        replay(g, steps)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("derivation[")
    assert check_derivation(g.with_derivation(steps)) == [msg]
    return msg


# -- what derive produces replays ---------------------------------------------------------

@pytest.mark.parametrize("path", sorted((REPO / "exports").glob("*.json")), ids=lambda p: p.stem)
def test_committed_exports_replay(path):
    g = ir.load(path)
    assert check_derivation(g) == []
    plan = replay(g, g.derivation)
    names = [c.name for c in candidates(g) if c.steps == g.derivation]
    assert names and plan.kernels == derive(g, names[0]).kernels


@pytest.mark.parametrize("name", architectures.NAMES)
def test_every_candidate_and_the_empty_derivation_check(name):
    g = architectures.build(name)
    for c in candidates(g):
        assert check_derivation(g.with_derivation(c.steps)) == [], c.name
    assert check_derivation(g.with_derivation(())) == []


# -- what it does not produce is refused, naming the step and the field --------------------

def _att():
    return architectures.build("attention")


def _lnlg():
    return architectures.build("layernorm_linear_gelu")


def _dump(g, cand=None):
    c = candidates(g)[0] if cand is None else next(c for c in candidates(g) if c.name == cand)
    return [s.model_dump() for s in c.steps]


def _set(i, **kw):
    def f(s):
        s[i].update(kw)
    return f


def _params(i, **kw):
    def f(s):
        s[i]["params"] = {**s[i]["params"], **kw}
    return f


def _d(k: int, rule: str, rest: str) -> str:
    """The regex of the line for derivation[k] with this rule."""
    return rf"derivation\[{k}\] \({rule}\): " + rest


def _swiglu():
    return architectures.build("swiglu")


def _matmul():
    return architectures.build("matmul")


def _bogus_dual(s):
    s.append({"rule": "dual_gemm", "theorem": THEOREMS["dual_gemm"], "at": [2, 2], "params": {}})


CASES = [  # (graph, mutation, the one line it must give)
    (_att, _set(0, rule="no_such_rule"), _d(0, "no_such_rule", "field 'rule': unknown rule")),
    (_att, _set(1, theorem="LeanTile.made_up"),
     _d(1, "online_softmax", "field 'theorem': cites LeanTile.made_up, but the theorem of online_softmax is "
                             "LeanTile.online_softmax_ratio")),
    (_att, _set(1, theorem=THEOREMS["dual_gemm"]), _d(1, "online_softmax", "field 'theorem'")),
    (_att, _set(1, at=[3, 4, 5, 6, 7, 8]), _d(1, "online_softmax", r"field 'at'.*\(6 nodes where the site has 7\)")),
    (_att, _set(1, at=[9, 8, 7, 6, 5, 4, 3]), _d(1, "online_softmax", "field 'at'.*same nodes in another order")),
    (_att, _set(0, at=[5, 4]), _d(0, "softmax_shift", "field 'at'.*same nodes in another order")),
    (_att, _set(1, at=list(range(5000))),  # a long list is shortened, not printed whole
     _d(1, "online_softmax", r"field 'at'.*\[0, 1, .*, 11, \.\.\. \(5000 ids\)\] \(5000 nodes")),
    (_att, _set(2, at=[7]), _d(2, "exp_to_exp2", r"field 'at'.*other nodes.*applies at \[6\]")),
    (_att, _params(1, axis="h"), _d(1, "online_softmax", "field 'params.axis': 'h' is not the axis this softmax "
                                                         r"normalises over here \(expected 't_kv'\)")),
    (_att, _params(1, axis=3), _d(1, "online_softmax", "field 'params.axis': expected a string .*got 3")),
    (_att, _params(1, block=64), _d(1, "online_softmax", "field 'params.block': online_softmax takes no parameter "
                                                         r"block here \(it takes axis\)")),
    (_att, lambda s: s[1].update(params={}), _d(1, "online_softmax", "field 'params.axis': missing")),
    (_att, _params(0, axis="t_kv"), _d(0, "softmax_shift", "field 'params.axis'.*it takes none")),
    (_att, lambda s: s.insert(1, dict(s[0])), _d(1, "softmax_shift", r"field 'rule'.*\(it repeats derivation\[0\]\)")),
    (_att, lambda s: s.append(dict(s[2])), _d(3, "exp_to_exp2", r"extra step.*\(it repeats derivation\[2\]\)")),
    (_att, lambda s: s.reverse(), _d(0, "exp_to_exp2", r"field 'rule'.*softmax_shift at \[4, 5\] here")),
    (_att, lambda s: s.pop(0), _d(0, "online_softmax", "field 'rule'")),
    (_att, lambda s: s.pop(), None),  # online without exp2: another candidate, accepted
    (_att, lambda s: s.__delitem__(slice(1, None)),
     _d(1, "online_softmax", r"missing: the derivation ends after 1 steps.*online_softmax at \[3, 4, 5, 6, 7, 8, 9\]")),
    (_lnlg, _params(1, colsum="cached"),
     _d(1, "mean_pullout", r"field 'params.colsum': 'cached' is not .*\(expected 'precomputed' or 'streamed'\)")),
    (_lnlg, lambda s: s[1].update(params={}), _d(1, "mean_pullout", "field 'params.colsum': missing")),
    (_lnlg, _params(3, mode="both"), _d(3, "stream_stats", "field 'params.mode'.*'fused' or 'separate'")),
    (_lnlg, lambda s: s.pop(2), _d(2, "stream_stats", "field 'rule'.*variance_expand")),
    (_lnlg, lambda s: s.insert(0, s.pop(1)), _d(0, "mean_pullout", "field 'rule'.*scale_pullout")),
    (_lnlg, _set(4, at=[16]), _d(4, "fuse_elementwise", "field 'at'.*1 nodes where the site has 2")),
    (_swiglu, lambda s: s.pop(0), _d(0, "fuse_elementwise", "field 'rule'.*dual_gemm")),
    (_matmul, _bogus_dual, _d(0, "dual_gemm", "extra step: no rule applies to this graph")),
]


@pytest.mark.parametrize("make,mutate,msg", CASES)
def test_replay_refuses_what_derive_would_not_write(make, mutate, msg):
    g = make()
    steps = _dump(g)
    mutate(steps)
    if msg is None:
        assert check_derivation(g.with_derivation([ir.Step(**s) for s in steps])) == []
        return
    assert re.search(msg, _replay_error(g, steps)), _replay_error(g, steps)


def _mutations(g):
    """Ways to damage a derivation, each a function of (steps, data) -> steps."""
    n = len(g.nodes)
    rules = [r.name for r in RULES]

    def drop(s, d):
        del s[d.draw(st.integers(0, len(s) - 1))]

    def repeat(s, d):
        k = d.draw(st.integers(0, len(s) - 1))
        s.insert(d.draw(st.integers(0, len(s))), dict(s[k]))

    def swap(s, d):
        i, j = d.draw(st.integers(0, len(s) - 1)), d.draw(st.integers(0, len(s) - 1))
        s[i], s[j] = s[j], s[i]

    def at(s, d):
        k = d.draw(st.integers(0, len(s) - 1))
        s[k]["at"] = d.draw(st.one_of(st.permutations(s[k]["at"]), st.lists(st.integers(0, n - 1), max_size=6)))

    def param(s, d):
        k = d.draw(st.integers(0, len(s) - 1))
        key = d.draw(st.sampled_from(["axis", "mode", "colsum", "block"]))
        s[k]["params"] = {**s[k]["params"], key: d.draw(st.one_of(st.sampled_from(list(g.axes) + [
            "fused", "separate", "streamed", "precomputed"]), st.integers(0, 3)))}

    def unparam(s, d):
        k = d.draw(st.integers(0, len(s) - 1))
        s[k]["params"] = {}

    def rule(s, d):
        k = d.draw(st.integers(0, len(s) - 1))
        r = d.draw(st.sampled_from(rules))
        s[k].update(rule=r, theorem=THEOREMS[r] if d.draw(st.booleans()) else s[k]["theorem"])

    return [drop, repeat, swap, at, param, unparam, rule]


@settings(max_examples=examples(60))
@given(st.one_of(random_graphs(dtypes=WITH_F64), structured_graphs()), st.data())
def test_a_damaged_derivation_replays_iff_it_is_a_candidate(g, data):
    cands = candidates(g)
    assume(len(cands) > 1)
    assert len(cands) - 1 <= MAX_CANDIDATES  # small graphs: every combination is a candidate
    steps = [s.model_dump() for s in data.draw(st.sampled_from(cands)).steps]
    for _ in range(data.draw(st.integers(1, 2))):
        if steps:
            data.draw(st.sampled_from(_mutations(g)))(steps, data)
    steps = [ir.Step(**s) for s in steps]
    typed = lambda ss: [(s.rule, s.theorem, s.at, sorted((k, type(v).__name__, v) for k, v in s.params.items()))
                        for s in ss]
    is_candidate = any(typed(c.steps) == typed(steps) for c in cands)
    problems = check_derivation(g.with_derivation(steps))
    event("refused" if problems else "replays")
    assert (problems == []) == is_candidate, problems
    if problems:
        [line] = problems
        k = int(re.match(r"derivation\[(\d+)\] \(", line).group(1))
        assert k <= len(steps) and "\n" not in line
        # the first k steps agree with some candidate: the blame is on the first bad step
        assert any(typed(c.steps)[:k] == typed(steps)[:k] for c in cands)
        with pytest.raises(DerivationError):
            replay(g, steps)
    else:
        replay(g, steps)


@pytest.mark.parametrize("tiles,msg", [({"block_q": 64}, "tile block_q: unknown tile parameter"),
                                       ({"block_m": 0}, "tile block_m: .*greater than or equal to 1"),
                                       ({"block_m": True}, "tile block_m: .*integer"),
                                       ({"threads": 100}, "tile threads: .*multiple of 32")])
def test_replay_refuses_bad_tiles(tiles, msg):
    """A plan is never built with a tile the emitter does not know or a block of 0."""
    g = _att()
    with pytest.raises(ir.GraphError, match=msg):
        derive(g, None, tiles)
    with pytest.raises(ir.GraphError, match=msg):
        replay(g, candidates(g)[0].steps, tiles)


# -- the commands --------------------------------------------------------------------------

def test_derive_and_kernels_refuse_a_bogus_exported_derivation(tmp_path, capsys):
    from leantile.cli import main
    d = json.loads((REPO / "exports" / "attention.json").read_text())
    d["derivation"][1]["params"]["axis"] = "h"
    bad = tmp_path / "attention.json"
    bad.write_text(json.dumps(d))
    for argv in (["derive", str(bad)], ["derive", str(bad), "--candidate", "online"],
                 ["kernels", str(bad), "--out", str(tmp_path / "k")]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "derivation[1] (online_softmax): field 'params.axis'" in err[0], err
    assert not (tmp_path / "k").exists()


def test_derive_names_the_replayed_export(capsys):
    """The export's own derivation is replayed at load and named as the candidate it is; the
    plan shown is the default one (tests/cpu/test_default_plan.py)."""
    from leantile.cli import main
    assert main(["derive", str(REPO / "exports" / "rmsnorm.json")]) == 0
    out = capsys.readouterr().out
    assert "exported derivation: candidate " in out and "the default plan" in out and "kernel gemm_10" in out


# -- many sites: candidates stay few, names short -------------------------------------------

def _many_softmaxes(n):
    def body(g):
        x = g.input("X", ["r", "c"], "f32")
        return g.add(x, x) if n == 0 else _sum([g.softmax(g.add(x, g.const(str(k))), "c") for k in range(n)], g)
    return build_graph_with_output("many", {"r": 3, "c": 5}, body)


def _sum(xs, g):
    out = xs[0]
    for x in xs[1:]:
        out = g.add(out, x)
    return out


def test_many_sites_do_not_multiply_candidates():
    g = _many_softmaxes(9)  # 2^9 combinations
    cands = candidates(g)
    first = cands[1].steps[0].at[0]
    # each short row's default is one on-chip kernel; its alternatives are the online forms
    assert [c.name for c in cands[:3]] == ["default", f"online_row_exp2_at_{first}", f"online_row_at_{first}"]
    assert len(cands) == 1 + 2 * 9 + 1 and len({c.name for c in cands}) == len(cands)
    assert all(len(c.name) <= MAX_CANDIDATE_NAME for c in cands)
    # a combination no candidate lists is still a derivation derive could write: it replays
    default = cands[0].steps
    alts = [[s for s in cands[j].steps if s not in default] for j in (1, 4)]  # two sites, online
    mixed = []
    for s in default:
        alt = next((a for a in alts if s.rule == "fuse_reduction" and s.at[0] == a[0].at[0]), None)
        mixed += alt if alt else [s]
    assert mixed != list(default) and check_derivation(g.with_derivation(mixed)) == []
    check(g, replay(g, mixed, {"block_m": 2, "block_n": 2}), 3, torch.float64)
    for c in cands[:3] + cands[-1:]:
        check(g, derive(g, c.name, {"block_m": 2, "block_n": 3}), 4, torch.float64)


def test_long_candidate_names_are_shortened():
    def body(g):  # three LayerNorm -> GEMM sites, 4 variants each: labels of ~33 characters (16-bit:
        # a float32 X centred on its mean is not pulled out, derive/rules/pullout.py)
        outs = [g.matmul(g.layer_norm(g.input(f"X{k}", ["m", "d"], "f16"), "d"), g.input(f"W{k}", ["d", "n"], "f16"),
                         "d", "d") for k in range(3)]
        return _sum(outs, g)
    g = build_graph_with_output("three_norms", {"m": 3, "d": 5, "n": 4}, body)
    cands = candidates(g)
    names = [c.name for c in cands]
    # 4^3 pulled-out variants, the prenorm plan (each norm a row kernel before its GEMM), unfused
    assert len(names) == 66 and len(set(names)) == 66 and all(len(n) <= MAX_CANDIDATE_NAME for n in names)
    assert names[0] == "variant_000" and names[-2:] == ["prenorm", "unfused"] and "variant_312" in names
    for c in (cands[0], cands[37], cands[-2]):
        check(g, derive(g, c.name, {"block_m": 2, "block_n": 3, "block_k": 2}), 5, torch.float64)


# -- scale: linear time, no recursion ------------------------------------------------------

def chain_graph(n: int, kind: str = "unary") -> ir.Graph:
    """X -> exp -> neg -> exp ... (unary) or y_k = X + y_{k-1} (add), n nodes, built as JSON."""
    nodes = [{"id": 0, "op": "input", "name": "X", "axes": ["m", "n"], "dtype": "f32"}]
    for i in range(1, n):
        nodes.append({"id": i, "op": ("exp", "neg")[i % 2], "x": i - 1, "axes": ["m", "n"]} if kind == "unary" else
                     {"id": i, "op": "add", "a": 0, "b": i - 1, "axes": ["m", "n"]})
    return ir.parse({"schema": "leantile/v1", "name": "chain", "axes": {"m": 3, "n": 4}, "nodes": nodes,
                     "outputs": {"out": n - 1}})


def _seconds(f, repeat=1):
    best = math.inf
    for _ in range(repeat):
        t = time.process_time()
        f()
        best = min(best, time.process_time() - t)
    return best


def test_derive_is_linear_in_the_chain_length():
    small, large = chain_graph(1_000, "add"), chain_graph(ir.MAX_NODES, "add")
    t_small = _seconds(lambda: derive(small), repeat=3)
    t_large = _seconds(lambda: derive(large))
    # the region is cut into kernels of at most MAX_REGION_OPS nodes (each lowers in seconds)
    assert len(derive(large).kernels) == -(-(ir.MAX_NODES - 1) // MAX_REGION_OPS)
    assert t_large < 30 * t_small, (t_small, t_large)  # 10x the nodes: linear is ~10x, quadratic 100x


def test_graphs_past_the_node_limit_are_refused_in_one_line():
    with pytest.raises(ir.GraphError, match=f"past the limit of {ir.MAX_NODES}"):
        chain_graph(ir.MAX_NODES + 1)


@pytest.mark.parametrize("n_inputs,n_ops", [(100, 0), (0, 500), (40, 300)])
def test_large_regions_are_split_into_bounded_kernels(n_inputs, n_ops):
    """One fused kernel reads at most MAX_REGION_INPUTS global tensors and computes at most
    MAX_REGION_OPS nodes: TileLang lowered a 100-input sum in 80 s and 3.9 GiB, a 500-op chain
    in 11 s (a 300-input one never finished). The split plan computes the graph (interpreter
    against the float64 reference); past MAX_UNFUSED_KERNELS computed nodes the unfused
    candidate (a kernel per node) is not offered."""
    def body(g):
        x = g.input("X", ["m", "d"], "f32")
        for i in range(n_inputs):
            x = g.add(x, g.input(f"Y{i}", ["m", "d"], "f32"))
        for i in range(n_ops):
            x = g.neg(x) if i % 2 else g.mul(x, g.const("0.999"))
        return x
    g = build_graph_with_output("big_region", {"m": 3, "d": 5}, body)
    plan = derive(g)
    for k in plan.kernels:
        loads = {s.src for s in k.statements() if s.op == "load"}
        maps = [s for s in k.statements() if s.op == "map"]
        assert len(loads) <= MAX_REGION_INPUTS and len(maps) <= MAX_REGION_OPS, (k.name, len(loads), len(maps))
    assert len(plan.kernels) > 1
    names = [c.name for c in candidates(g)]
    assert ("unfused" in names) == (n_inputs + n_ops <= MAX_UNFUSED_KERNELS), names
    check(g, plan, 1, torch.float64)


def test_deep_chains_do_not_recurse():
    """Deeper than the recursion limit: a scalar built from 3,000 constant ops scales a
    softmax (folded into its exponent), and a 3,000-node chain runs through interp and the
    reference."""
    def body(g):
        c = g.const("1.0")
        for k in range(3000):
            c = g.sqrt(g.add(c, g.const("0.0")) if k % 2 else c)
        x = g.input("X", ["r", "c"], "f32")
        return g.softmax(g.mul(x, c), "c")
    g = build_graph_with_output("deep_scale", {"r": 2, "c": 7}, body)
    [row] = derive(g).kernels  # the scale folded: the softmax is one site, its row on chip
    assert row.name.startswith("row_")
    [plan_stats, _] = derive(g, "online_row").kernels
    assert plan_stats.name.startswith("softmax_stats")
    check(g, derive(g), 1, torch.float64)
    g = chain_graph(3_000)
    x = {"X": torch.randn(3, 4, dtype=torch.float32) * 0.1}
    ref = reference.evaluate(g, x, compute_dtype=torch.float64)["out"]
    out = interp.run(derive(g), {"X": x["X"].double()}, dtype=torch.float64)["out"]
    assert torch.allclose(out, ref, rtol=1e-12, atol=0)



def test_reference_holds_one_intermediate_of_a_chain(monkeypatch):
    """The oracle drops a value after its last reader: a long chain of large tensors must not
    keep every intermediate alive."""
    made, live = [], []

    def exp(x):
        live.append(sum(r() is not None for r in made))
        r = torch.exp(x)
        made.append(weakref.ref(r))
        return r
    monkeypatch.setitem(reference.UNARY, "exp", exp)
    g = chain_graph(400)
    out = reference.evaluate(g, {"X": torch.randn(3, 4) * 0.1})["out"]
    assert len(made) == 199 and max(live) <= 1 and torch.isfinite(out).all()
