"""GPU check of the stable LayerNorm statistics (issue 13; marker gpu, skipped without CUDA):
with X = mu + N(0, 1) in float16, every layernorm_linear_gelu candidate's compiled kernels
stay within 10x the error of torch's own float16 LayerNorm -> GEMM -> GELU, against the
float64 reference on the same (rounded) inputs, and write no NaN."""
import pytest
import torch

import leantile
from leantile import architectures, reference
from leantile.derive import candidates

pytestmark = pytest.mark.gpu


def _rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("mu", [100.0, 1000.0])
def test_layernorm_candidates_within_10x_of_torch_on_gpu(mu):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = architectures.build("layernorm_linear_gelu", m=256, d=1000, n=520)
    inputs = {k: v.cuda() for k, v in reference.random_inputs(g, seed=7).items()}
    inputs["X"] = (inputs["X"].double() + mu).half()
    ref = reference.evaluate(g, {k: v.double() for k, v in inputs.items()}, compute_dtype=torch.float64,
                             check=False)["out"]
    y = torch.nn.functional.layer_norm(inputs["X"], (g.axes["d"],), eps=1e-5)
    yardstick = _rel(torch.nn.functional.gelu(y @ inputs["W"] + inputs["b"], approximate="tanh"), ref)
    for c in candidates(g):
        k = leantile.compile(g, candidate=c.name)
        out = k.run(k.bind((), inputs), fill=float("nan"))["out"]  # NaN-filled: unwritten elements show
        assert torch.isfinite(out).all(), f"{c.name}: NaN or inf at mu={mu}"
        err = _rel(out, ref)
        assert err <= 10 * yardstick, f"{c.name}, mu={mu}: {err:.2e} against torch's {yardstick:.2e}"
