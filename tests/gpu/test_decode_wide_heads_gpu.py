"""GPU checks (marker gpu; skipped without CUDA) of decode attention with wide heads: one query
row per head, keys and head dimension in the thousands, no score scale, f16 inputs, so that the
scores, the probabilities (stored f16 between kernels: a GEMM operand) and P V run on the SIMT
GEMM path, split over k or not, with the softmax on chip or split. The GPU campaign of
2026-11-28 (benchmarks/results/gpu-fuzz-h200-2026-11-28-s26.json) found two candidates of this
graph at h 1, t_kv 8192, d_h 8192 wrong by 2-3% of the output's norm, the default plan among
them, while the interpreter runs the same plan to 3e-4 (benchmarks/gpu_fuzz_localize.py takes a
failing plan apart kernel by kernel): the score GEMM's warp-specialised TMA pipeline released a
stage with no proxy fence while its SIMT consumer still read it (leantile.codegen_repair). Every
candidate and the default plan, three draws each, run three times each against one float64
reference per draw (a race shows as a draw that fails only sometimes; nothing is forgiven as
ill-conditioned: these draws are well inside f16's range).

    pytest -m gpu tests/gpu/test_decode_wide_heads_gpu.py   (on the device)
"""
import pytest
import torch

import leantile
from leantile import dag
from leantile.derive import candidates

pytestmark = pytest.mark.gpu


def _decode(h: int, t_kv: int, d_h: int):
    def body(b):
        q = b.input("Q", ["h", "d_h"], "f16")
        k, v = (b.input(n, ["h", "t_kv", "d_h"], "f16") for n in ("K", "V"))
        return b.matmul(b.softmax(b.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv")
    return dag.build_graph_with_output(f"decode_{h}_{t_kv}_{d_h}", {"h": h, "t_kv": t_kv, "d_h": d_h}, body)


@pytest.mark.parametrize("h,t_kv,d_h", [(1, 8192, 8192), (2, 4097, 4096)])
def test_decode_attention_with_wide_heads_every_candidate(h, t_kv, d_h):
    g = _decode(h, t_kv, d_h)
    plans = [(c.name, leantile.compile(g, candidate=c.name, tuned=False)) for c in candidates(g)]
    plans.append(("(default)", leantile.compile(g, tuned=False)))
    wrong = []
    for seed in range(3):
        inputs = plans[0][1].random_inputs(seed)
        refs = plans[0][1].references(inputs, torch.float64)  # one graph: one reference per draw
        for name, k in plans:
            for run in range(3):
                v = k.judge(inputs, k.run(inputs, fill=float("nan")), refs=refs)
                bad = [o for o in v["rel_err"] if not v["rel_err"][o] <= v["tolerance"][o]]
                if bad:
                    wrong.append(f"{name} seed {seed} run {run}: " + ", ".join(
                        f"{o} rel err {v['rel_err'][o]:.3g} (plain {v['plain_rel_err'][o]:.3g}) > {v['tolerance'][o]}"
                        for o in bad))
    assert not wrong, "\n".join(wrong)
