"""GPU checks (marker gpu; skipped without CUDA) that max and min hand NaN on as torch's do
(leantile.codegen_nan; GPU campaign seed 70: a column max came back finite where the reference is
NaN, on every candidate): a graph per max path of the emitter (tests/nan_graphs.py: column, row
and scalar reductions split over CTAs, an elementwise clamp, a pooled GEMM epilogue, a softmax in
a GEMM's epilogue) and causal attention, each candidate run on inputs with NaN sprinkled in and
judged as Kernel.verify judges (outputs NaN-poisoned; the NaN positions must be the reference's).

    pytest -m gpu tests/gpu/test_nan_gpu.py   (on the device)
"""
import pytest
import torch

import leantile
from leantile import architectures
from leantile.derive import candidates

from nan_graphs import max_graphs, with_nans

pytestmark = pytest.mark.gpu


def _graphs():
    return max_graphs() + [architectures.build("causal_attention", h=2, t_q=300, t_kv=300, d_h=64)]


@pytest.mark.parametrize("n", range(len(_graphs())))
def test_every_candidate_hands_nan_on_where_torch_does(n):
    g = _graphs()[n]
    for every in (1e-4, 0.02):
        inputs = with_nans(g, seed=n, every=every, device="cuda")
        for c in candidates(g):
            k = leantile.compile(g, candidate=c.name, tuned=False)
            v = k.verify(inputs)
            assert v["ok"], f"{g.name} {c.name} at NaN density {every}: {v['rel_err']}"
            assert any(bool(t.isnan().any()) for t in k.references(inputs, torch.float64)[0].values()), \
                "no NaN reached an output: the check checks nothing"
