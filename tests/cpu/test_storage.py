"""plan.storage (issue 49, peak memory): an intermediate whose life ends before a buffer's begins
lives in that buffer's bytes. The places obey the lifetimes for generated graphs, every
candidate computes what the graph computes with its guests inside their hosts (the interpreter
places them as the GPU does), a placement that breaks a lifetime is caught by the interpreter,
and the emitted module's allocate() makes the guests views of their hosts' bytes."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from leantile import interp, reference
from leantile.derive import candidates, derive
from leantile.plan.storage import ALIGN, Place, buffer_bytes, lifetimes, storage, written_over
from plan_checks import rel_err
from reduction_strategies import long_reduction_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
reductions = importlib.import_module("reductions")


def _check_places(plan) -> None:
    """Each guest: an intermediate that ends before its host begins, ALIGN-aligned, inside the
    host's bytes, overlapping no other guest of the host; no host is a guest; no input hosts."""
    places, life = storage(plan), lifetimes(plan)
    inputs = {b.name for b in plan.globals} - set(life)
    size = {b.name: buffer_bytes(plan, b) for b in plan.globals}
    by_host: dict[str, list] = {}
    for g, p in places.items():
        assert g not in plan.outputs.values() and g not in inputs and p.host not in inputs
        assert p.host not in places, f"{p.host} hosts {g} but is a guest itself"
        if written_over(plan, g, p.host):  # from the launch that ends the host's life, over its bytes
            assert life[g][0] == life[p.host][1] and p.offset == 0 and size[g] == size[p.host]
            assert not any(life[o][1] >= life[g][0] for o, q in places.items() if q.host == p.host and o != g)
            continue
        assert life[g][1] < life[p.host][0], f"{g} {life[g]} is live when {p.host} {life[p.host]} begins"
        assert p.offset % ALIGN == 0 and p.offset + size[g] <= size[p.host]
        by_host.setdefault(p.host, []).append((p.offset, p.offset + size[g]))
    for spans in by_host.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def _split_norm():
    """GroupNorm over a group's 4 channels of 33 x 64 positions: a split reduction whose float32
    partials and statistics end before the normalise pass writes the output."""
    return reductions.graph("groupnorm", n=1, g=2, cg=4, h=33, w=64)


def test_a_split_norms_partials_live_in_the_output_it_writes_later():
    plan = derive(_split_norm(), "split")
    places = storage(plan)
    partials = [b.name for b in plan.globals if "partial" in b.name]
    assert partials and set(partials) <= set(places)
    out = next(iter(plan.outputs.values()))
    assert {places[p].host for p in partials} == {out}
    _check_places(plan)


@pytest.mark.parametrize("case,sizes", [("groupnorm", dict(n=1, g=2, cg=4, h=33, w=64)),
                                        ("layernorm_chw", dict(n=2, c=4, h=33, w=64)),
                                        ("batchnorm_train", dict(n=3, c=2, h=17, w=40))])
def test_every_candidate_computes_the_graph_with_its_guests_in_their_hosts(case, sizes):
    g = reductions.graph(case, **sizes)
    inputs = reference.random_inputs(g, seed=7)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    shared = 0
    for c in candidates(g):
        plan = derive(g, c.name)
        _check_places(plan)
        shared += len(storage(plan))
        for dtype in (torch.float64, None):  # every buffer float64; and the GPU's dtypes, bytes shared as there
            out = interp.run(plan, inputs, dtype=dtype)
            for o in g.outputs:
                err = rel_err(out[o].double(), ref[o])
                assert err < (1e-9 if dtype else 5e-3), f"{c.name} {dtype}: {o}: {err:.3g}"
    assert shared  # the split and unfused candidates keep guests


def test_a_guest_placed_in_a_live_host_is_caught(monkeypatch):
    """The interpreter runs the sharing: a guest put in the output while the output is live
    (its partials read by the kernel that writes the output) gives a wrong answer or NaN."""
    g = reductions.graph("layernorm_chw", n=2, c=4, h=33, w=64)
    plan = derive(g, "fused")  # statistics read by the kernel that writes the output
    out = next(iter(plan.outputs.values()))
    stats = [b.name for b in plan.globals if b.dtype == "acc"]
    assert stats and not storage(plan)
    monkeypatch.setattr(interp, "storage", lambda p: {s: Place(out, j * ALIGN) for j, s in enumerate(stats)})
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    got = interp.run(plan, inputs, dtype=torch.float64)
    o = next(iter(g.outputs))
    assert not rel_err(got[o].double(), ref[o]) < 1e-6


@settings(max_examples=12)
@given(long_reduction_graphs())
def test_places_obey_lifetimes_for_generated_reductions(g):
    for c in candidates(g)[:3]:
        _check_places(derive(g, c.name))


def test_allocate_puts_guests_in_their_hosts_bytes_and_gpu_bytes_counts_hosts_alone():
    from leantile.emit import emit_module, load_module
    import leantile as lt

    g = _split_norm()
    plan = derive(g, "split")
    m = load_module(emit_module(plan), "storage_test")
    inputs = {n: t for n, t in reference.random_inputs(g, seed=1).items()}
    t = m.allocate(inputs, device="cpu", fill=float("nan"))
    size = {b.name: buffer_bytes(plan, b) for b in plan.globals}
    for guest, (host, offset) in storage(plan).items():
        assert t[guest].untyped_storage().data_ptr() == t[host].untyped_storage().data_ptr()
        assert t[guest].data_ptr() == t[host].data_ptr() + offset
        assert torch.isnan(t[guest]).all()
    apart = m.allocate(inputs, device="cpu", fill=float("nan"), share=False)
    assert len({apart[n].untyped_storage().data_ptr() for n in size}) == len(size)
    k = lt.compile(g, candidate="split", device="cpu")
    new = [b.name for b in plan.globals if b.name not in inputs]
    assert k.gpu_bytes()[0] == sum(size[n] for n in new if n not in storage(plan))
    assert k.gpu_bytes()[0] < sum(size[n] for n in new)


def test_a_second_pass_writes_its_output_over_the_row_it_reads():
    """The LM head's training step (leantile.train_step) at 300 tokens of a 17000-word vocabulary:
    its row kernel streams the logits for their statistics, then again for dlogits, the GEMMs'
    operand; dlogits take the logits' bytes from that kernel on (plan.storage.written_over: the
    1024-token chunk's 250 MiB, g39). The interpreter runs the sharing as the GPU does, in float64
    and in the plan's dtypes, and equals the reference; allocate() makes dlogits a view of the
    logits' bytes."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_train_step import lm_head
    from leantile.emit import emit_module, load_module
    from leantile.train_step import step_graph

    g, _ = step_graph(lm_head(300, 8, 17000))
    plan = derive(g)
    two_pass = [k for k in plan.kernels if k.second_pass]
    assert two_pass
    over = {gst: p.host for gst, p in storage(plan).items() if written_over(plan, gst, p.host)}
    assert len(over) == 1, storage(plan)
    (guest, host), = over.items()
    assert any(getattr(s, "dst", None) == guest for s in two_pass[0].second_pass)
    _check_places(plan)
    inputs = reference.random_inputs(g, seed=2)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for dtype, tol in ((torch.float64, 1e-9), (None, 5e-2)):
        out = interp.run(plan, inputs, dtype=dtype)
        for o in g.outputs:
            assert rel_err(out[o].double(), ref[o]) < tol, (dtype, o)
    m = load_module(emit_module(plan), "written_over_test")
    t = m.allocate(dict(inputs), device="cpu", fill=float("nan"))
    assert t[guest].data_ptr() == t[host].data_ptr()
