"""GPU checks (marker gpu; skipped without CUDA) of the three losses issue 46 found miscompiled,
at the sizes where the default plan gave a wrong number on the H100 (tests/loss_graphs.py:
FAILING): cross-entropy as a user writes it (P[b, c] f16, class ids T[b]) at b = 32768 with
c = 64 and c = 4096, and at b = 20000 and 65537; KL divergence with batchmean over 16384 x 16384;
a triplet margin loss over 32768 x 8192. Each is a long axis reduced into a 0-d output (the
fused plan streams the batch in one CTA). Every candidate and the default plan, checked against
a float64 reference: torch.nn.functional's loss in float64 (the graph is that loss) and the graph
in float64 (leantile.reference), judged as Kernel.verify judges (Kernel.judge), outputs
NaN-poisoned; and compile(check=True) passes on the same inputs.

    pytest -m gpu tests/gpu/test_losses_gpu.py   (on the device)
"""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import leantile
from leantile.derive import candidates
from leantile.tolerance import output_tolerances, rel_err

from loss_graphs import FAILING, build, loss_inputs, torch_loss

pytestmark = pytest.mark.gpu


def _ids(v):
    return v if isinstance(v, str) else "x".join(map(str, v.values()))


@pytest.mark.parametrize("name,sizes", FAILING, ids=_ids)
def test_loss_is_right_at_its_failing_size(name, sizes):
    g = build(name, sizes)
    cands = [c.name for c in candidates(g)]

    def make(cand):
        try:
            return cand, leantile.compile(g, candidate=cand, tuned=False)
        except Exception as e:  # a candidate that does not compile is a failure, named
            return cand, e
    with ThreadPoolExecutor(8) as pool:  # nvcc is the cost: the candidates' kernels side by side
        kernels = list(pool.map(make, [None, *cands]))
    inputs = loss_inputs(g, seed=0, device="cuda")
    want = torch_loss(name, inputs)  # torch.nn.functional, float64
    tol = output_tolerances(g)["loss"]
    refs = None
    bad = []
    for cand, k in kernels:
        label = cand or ("default" if isinstance(k, Exception) else f"default ({k.plan.candidate})")
        if isinstance(k, Exception):
            bad.append((label, f"{type(k).__name__}: {str(k)[:300]}"))
            continue
        refs = refs or k.references(inputs, torch.float64)  # one float64 reference for every plan
        if refs[0]["loss"].shape != () or rel_err(refs[0]["loss"], want) > 1e-9:
            bad.append(("graph", f"the graph in float64 is {float(refs[0]['loss'])}, torch's loss {float(want)}"))
            break
        out = k.run(inputs, fill=float("nan"))
        v = k.judge(inputs, out, refs=refs)
        plain = rel_err(out["loss"], want)
        if not v["ok"] or not plain <= tol:
            bad.append((label, f"{float(out['loss'])} against {float(want)}: rel err {plain:.3g} "
                               f"(judged {v['rel_err']['loss']:.3g}) > {tol}"))
    assert bad == [], f"{name} {sizes}: {bad}"
    k = leantile.compile(g, check=True)  # the user's switch: the first call judged, on these inputs
    assert rel_err(k(**inputs), want) <= tol


def test_cross_entropy_is_right_in_bf16_and_f32_past_the_streamed_threshold():
    """The same form on the other dtypes, at the batch the f16 plan failed at first."""
    for dtype in ("bf16", "f32"):
        g = build("cross_entropy", {"b": 32768, "c": 64}, dtype)
        inputs = loss_inputs(g, seed=1, device="cuda")
        want = torch_loss("cross_entropy", inputs)
        out = leantile.compile(g, tuned=False)(**inputs)
        assert rel_err(out, want) <= output_tolerances(g)["loss"], (dtype, float(out), float(want))
