"""Hypothesis: random valid graphs evaluate to finite float64 values; random mutations of
valid JSON either validate or are rejected with GraphError, never any other exception."""
import copy
import json

import torch
from hypothesis import given, strategies as st

from leantile import architectures, ir, reference
from strategies import random_graphs


@given(random_graphs(), st.integers(0, 2**31 - 1))
def test_random_graphs_evaluate_finite_in_float64(g, seed):
    inputs = reference.random_inputs(g, seed=seed)
    out = reference.evaluate(g, inputs, compute_dtype=torch.float64)["out"]
    assert out.dtype == torch.float64
    assert tuple(out.shape) == g.shape(g.outputs["out"])
    assert torch.isfinite(out).all()


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                 st.text(max_size=5), st.lists(st.integers(-3, 30), max_size=3), st.just({}))


def _paths(d, prefix=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_documents(draw):
    name = draw(st.sampled_from(architectures.NAMES))
    d = json.loads(architectures.build(name, **{k: 4 for k in architectures.module(name).DEFAULT_SIZES}).to_json())
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(d))
        path = draw(st.sampled_from(paths))
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        kind = draw(st.sampled_from(["drop", "junk", "swap_ids", "size"]))
        if kind == "drop":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif kind == "junk":
            parent[path[-1]] = draw(JUNK)
        elif kind == "swap_ids" and isinstance(d.get("nodes"), list) and len(d["nodes"]) > 2:
            nodes = d["nodes"]  # (an earlier mutation may have made "nodes" junk: then no swap)
            i, j = draw(st.integers(0, len(nodes) - 1)), draw(st.integers(0, len(nodes) - 1))
            if isinstance(nodes[i], dict) and isinstance(nodes[j], dict):
                nodes[i]["id"], nodes[j]["id"] = nodes[j].get("id"), nodes[i].get("id")
        elif kind == "size" and isinstance(d.get("axes"), dict) and d["axes"]:
            ax = draw(st.sampled_from(sorted(d["axes"])))
            d["axes"][ax] = draw(st.sampled_from([0, -1, 2**33, 2**62, 7]))
    return d


@given(mutated_documents())
def test_mutations_validate_or_raise_graph_error(d):
    try:
        g = ir.parse(copy.deepcopy(d))
    except ir.GraphError as e:
        assert e.problems and all(isinstance(p, str) and p for p in e.problems)
        return
    # It validated: then it must be a usable graph.
    assert ir.parse(g.to_json()) == g
