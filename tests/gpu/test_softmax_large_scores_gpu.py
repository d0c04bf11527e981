"""GPU checks (marker gpu; skipped without CUDA) of softmax at scores past 2^22, over hundreds of
key or column blocks, every candidate and the default plan: the class nvcc's multiply-add
contraction opened (tests/cpu/test_rounded_products.py says how; gpu-fuzz 2026-11-28 on an H100:
f32 attention with d_h = 2, scores of 1e7 over 65536 keys, `online_exp2` gave inf in 59 of 1000
rows). The inputs are exact (integers in float32 / float16) and every row has one score 64 c or
more above the rest: softmax is one-hot to within e^-23, the exact output is the value at the
row's argmax (attention) or 1 there and 0 elsewhere (a softmax row), whatever the rounding of
the scores. A scale c = 0.37 (not a power of two) keeps c x rounded.

    pytest -m gpu tests/gpu/test_softmax_large_scores_gpu.py   (on the device)
"""
import pytest
import torch

import leantile
from leantile import dag
from leantile.derive import candidates
from leantile.reference import to_tf32

pytestmark = pytest.mark.gpu
SCALE = 0.37


def _attention(dtype: str, d_h: int, t_kv: int):
    def body(b):
        q, k, v = (b.input(n, ["h", t, "d_h"], dtype) for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
        return b.matmul(b.softmax(b.mul(b.matmul(q, k, "d_h", "d_h"), b.const(SCALE)), "t_kv"), v, "t_kv", "t_kv")
    return dag.build_graph_with_output(f"attention_{dtype}_{d_h}", {"h": 2, "t_q": 5, "t_kv": t_kv, "d_h": d_h}, body)


def _softmax_rows(rows: int, cols: int):
    def body(g):
        return g.softmax(g.mul(g.input("X", ["rows", "cols"], "f32"), g.const(SCALE)), "cols")  # f32: exact integers
    return dag.build_graph_with_output("softmax_rows", {"rows": rows, "cols": cols}, body)


def _plans(g):
    names = [c.name for c in candidates(g)]
    return [(n, leantile.compile(g, candidate=n, tuned=False)) for n in names] + [("(default)", leantile.compile(g, tuned=False))]


@pytest.mark.parametrize("dtype,d_h,t_kv,q_mult", [("f32", 2, 65536, 1), ("f32", 1, 40001, 1), ("f16", 64, 65536, 1),
                                                  ("f32", 2, 4099, 2048)])
def test_attention_one_hot_at_scores_past_2_22(dtype, d_h, t_kv, q_mult):
    """Q = (q, 0, ..), K = (k_j, 0, ..): scores q k_j, integers below 2^24 (f32) or products of
    float16 integers (exact in the float32 accumulator); k_j multiples of 2048 below one unique
    maximum 2^22 (f32: exact in TF32, as some plans' GEMMs read float32) or float16 integers below
    one unique maximum 65504, q 64 .. 128 (f16). q_mult 2048: scores past 2^34, where the FMA form
    exp2(s c' - round(m c')) carried exp2(m c' - round(m c')) = inf (gpu-fuzz 2026-11-28, an H200)."""
    g = _attention(dtype, d_h, t_kv)
    dt = {"f32": torch.float32, "f16": torch.float16}[dtype]
    gen = torch.Generator().manual_seed(t_kv)
    q = torch.randint(1, 4, (2, 5), generator=gen).double() * q_mult
    if dtype == "f16":
        q = 32.0 * (q + 1)  # 64 .. 128: scores up to 2^23
    if dtype == "f32":  # exact in TF32 too (11 significant bits): the GEMMs of some plans round to it
        k = 2048.0 * torch.randint(0, 2048, (2, t_kv), generator=gen).double()
        k[:, 12345 % t_kv] = 2.0 ** 22  # the unique maximum: scores up to 3 2^22
    else:
        k = torch.randint(-60000, 60000, (2, t_kv), generator=gen).double().to(torch.float16).double()
        k = k.clamp(max=65472.0)
        k[:, 12345 % t_kv] = 65504.0
    Q = torch.zeros(2, 5, d_h, dtype=torch.float64)
    Q[..., 0] = q
    K = torch.zeros(2, t_kv, d_h, dtype=torch.float64)
    K[..., 0] = k
    V = torch.randn(2, t_kv, d_h, generator=gen, dtype=torch.float64)
    inputs = {"Q": Q, "K": K, "V": V}
    assert all(torch.equal(t.to(dt).double(), t) for t in (Q, K))
    assert dtype != "f32" or all(torch.equal(to_tf32(t.float()).double(), t) for t in (Q, K))
    S = torch.einsum("hqd,hkd->hqk", Q, K)
    top2 = S.topk(2, dim=-1).values
    assert bool(((top2[..., 0] - top2[..., 1]) * SCALE >= 23).all())  # one-hot to within e^-23
    want = torch.gather(V.to(dt).double(), 1, S.argmax(-1)[..., None].expand(-1, -1, d_h))
    dev = {n: t.to(dt).cuda() for n, t in inputs.items()}
    # where P V runs on tensor cores P is rounded to the MMA's operand type (TF32 for f32: 2^-11,
    # f16: 2^-11) and o / l keeps that rounding. The class this pins is off by factors (inf, 13%),
    # far past either limit
    limit = {"f32": 1e-3, "f16": 2e-3}[dtype]
    for name, k in _plans(g):
        out = k.run(dev, fill=float("nan"))[next(iter(g.outputs))].double().cpu()
        assert torch.isfinite(out).all(), f"{name}: {(~torch.isfinite(out)).sum().item()} non-finite outputs"
        err = ((out - want).abs().max() / want.abs().max()).item()
        assert err <= limit, f"{name}: rel err {err:.3g} against the one-hot value"


@pytest.mark.parametrize("rows,cols,base", [(9, 65539, 2.0 ** 22), (3, 200003, -(2.0 ** 23))])
def test_softmax_rows_one_hot_at_scores_past_2_22(rows, cols, base):
    """x = base + 64 n_j (n a permutation of 0 .. cols - 1 per row: integers below 2^24, exact)."""
    g = _softmax_rows(rows, cols)
    gen = torch.Generator().manual_seed(cols)
    n = torch.stack([torch.randperm(cols, generator=gen) for _ in range(rows)]).double()
    x = base + 64.0 * n * min(1.0, 2.0 ** 23 / (64.0 * cols))
    x = x.round()
    assert torch.equal(x.float().double(), x)
    want = torch.zeros_like(x)
    want.scatter_(1, x.argmax(-1, keepdim=True), 1.0)
    X = x.float().cuda()
    for name, k in _plans(g):
        out = k.run({"X": X}, fill=float("nan"))[next(iter(g.outputs))].double().cpu()
        assert torch.isfinite(out).all(), f"{name}: {(~torch.isfinite(out)).sum().item()} non-finite outputs"
        err = (out - want).abs().max().item()
        assert err <= 1e-5, f"{name}: max abs err {err:.3g} against the one-hot row"
