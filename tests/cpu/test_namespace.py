"""Internal buffer names never collide with the user's: a graph whose inputs (and outputs)
are named like the buffers of its own plans (`matmul_3`, `X_shared`, `colsum_W`,
`red_max_4_prev`, ...) derives the same candidates, computes the same values, and emits a
module that compiles with distinct global names."""
import ast
import keyword

import pytest
import torch
from hypothesis import assume, event, given, settings, strategies as st

from leantile import architectures, ir
from leantile.derive import candidates, derive
from leantile.derive.context import Names
from leantile.derive.kernels import KernelBuilder
from leantile.emit import emit_module
from plan_checks import check
from strategies import random_graphs, structured_graphs
from profiles import examples  # noqa: E402

TILES = {"block_m": 2, "block_n": 3, "block_k": 2, "block_r": 2}


def plan_names(g: ir.Graph) -> set[str]:
    """Every name the plans of g use: global buffers, each kernel's buffers, kernel names."""
    out = set()
    for c in candidates(g):
        plan = derive(g, c.name, TILES)
        out |= {b.name for b in plan.globals}
        out |= {b.name for k in plan.kernels for b in k.buffers} | {k.name for k in plan.kernels}
    return out


def renamed(g: ir.Graph, inputs: dict[str, str], outputs: dict[str, str] | None = None) -> ir.Graph:
    """g with inputs (and outputs) renamed, re-validated from its JSON."""
    nodes = tuple(n.model_copy(update={"name": inputs[n.name]}) if isinstance(n, ir.Input) and n.name in inputs
                  else n for n in g.nodes)
    outs = {(outputs or {}).get(k, k): v for k, v in g.outputs.items()}
    return ir.parse(g.model_copy(update={"nodes": nodes, "outputs": outs, "derivation": ()}).to_json())


def check_plans(g: ir.Graph, seed: int):
    """Every candidate: interp == reference, distinct names, emitted module compiles."""
    user = {n.name for n in g.inputs()} | set(g.outputs)
    for c in candidates(g):
        plan = derive(g, c.name, TILES)
        check(g, plan, seed, torch.float64)
        names = [b.name for b in plan.globals]
        assert len(set(names)) == len(names), names
        for b in plan.globals:  # a user's name is only ever its own input
            assert b.name not in user or (b.node is not None and isinstance(g.node(b.node), ir.Input)
                                          and g.node(b.node).name == b.name), b
        for k in plan.kernels:
            local = [b.name for b in k.buffers]
            assert len(set(local)) == len(local) and not set(local) & user, (k.name, local)
        assert len({k.name for k in plan.kernels}) == len(plan.kernels)
        tree = ast.parse(emit_module(plan))
        compile(tree, f"<{g.name}/{c.name}>", "exec")  # duplicate parameters would not compile
        assert sorted(emitted_globals(tree)) == sorted(names)


def emitted_globals(tree: ast.Module) -> list[str]:
    """The 'name' of every entry of the generated module's GLOBALS list."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GLOBALS" for t in node.targets):
            return [v.value for d in ast.walk(node.value) if isinstance(d, ast.Dict)
                    for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant) and k.value == "name"]
    raise AssertionError("the generated module has no GLOBALS")


def _small(name):
    sizes = {a: 3 + k % 3 for k, a in enumerate(architectures.module(name).DEFAULT_SIZES)}
    return architectures.build(name, **sizes)


graphs = st.one_of(st.sampled_from(architectures.NAMES).map(_small), random_graphs(max_ops=6), structured_graphs())


@settings(max_examples=examples(50))
@given(graphs, st.data())
def test_inputs_named_like_internal_buffers(g, data):
    pool = sorted(n for n in plan_names(g) if n.isidentifier() and not keyword.iskeyword(n) and len(n) <= 64
                  and n not in {i.name for i in g.inputs()} | set(g.outputs))
    assume(pool)
    ins = [n.name for n in g.inputs()]
    picks = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(ins), unique=True), label="names")
    which = data.draw(st.permutations(ins), label="inputs")[:len(picks)]
    outputs = {}
    if data.draw(st.booleans(), label="rename an output"):
        spare = [n for n in pool if n not in picks]
        if spare:
            outputs = {next(iter(g.outputs)): data.draw(st.sampled_from(spare), label="output")}
    g2 = renamed(g, dict(zip(which, picks)), outputs)
    for name in picks:
        event(f"input named like {'a kernel' if name.split('_')[0] in ('map', 'gemm', 'flash') else 'a buffer'}")
    assert [(c.name, c.steps) for c in candidates(g2)] == [(c.name, c.steps) for c in candidates(g)]
    check_plans(g2, data.draw(st.integers(0, 2**31 - 1), label="seed"))


@pytest.mark.parametrize("name,inputs", [
    ("swiglu", {"X": "matmul_3", "W_gate": "X_shared", "W_up": "matmul_3_shared"}),
    ("swiglu", {"X": "mul_6", "W_gate": "silu_4", "W_up": "matmul_5"}),
    ("layernorm_linear_gelu", {"X": "colsum_W", "W": "W_shared"}),
    ("layernorm_linear_gelu", {"W": "colsum_X", "X": "sum_square_W"}),
    ("rmsnorm", {"X": "red_sum_3", "W": "row_stats_10"}),
    ("attention", {"Q": "red_max_4", "K": "red_max_4_prev", "V": "rescale"}),
])
def test_named_collisions(name, inputs):
    g = renamed(_small(name), inputs)
    check_plans(g, 11)


def test_a_user_name_pushes_the_internal_one_aside():
    g = renamed(_small("swiglu"), {"X": "matmul_3", "W_gate": "matmul_3_"}, {"out": "silu_4"})
    names = Names(g)
    assert [names.value(i) for i in range(len(g.nodes))][3:] == ["matmul_3__", "silu_4_", "matmul_5", "mul_6"]
    assert names.extra(("colsum", 1), "colsum_matmul_3_") == "colsum_matmul_3_"
    assert names.extra(("colsum", 2), "colsum_matmul_3_") == "colsum_matmul_3__"  # fresh, never shared
    plan = derive(g)
    assert plan.outputs == {"silu_4": "mul_6"} and "matmul_3__" in {b.name for k in plan.kernels for b in k.buffers}


def test_one_buffer_for_two_values_is_a_bug():
    kb = KernelBuilder(frozenset({"X"}), "k", "test", [])
    assert kb.buf("X", ("m",), "fragment", "acc", 0, key=("frag", 0)) == "X_"  # a user's name: pushed aside
    assert kb.buf("X", ("m",), "fragment", "acc", 0, key=("frag", 0)) == "X_"  # the same buffer again
    assert kb.buf("X", ("m",), "fragment", "acc", 0, key=("tile", 0)) == "X__"  # another buffer, another name
    assert kb.buf("X_", ("m",), "fragment", "acc", 1, key=("frag", 1)) == "X___"
    with pytest.raises(RuntimeError, match="bug.*'X_'"):
        kb.buf("X", ("n",), "fragment", "acc", 0, key=("frag", 0))
