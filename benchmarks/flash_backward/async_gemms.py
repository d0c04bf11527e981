"""A probe's text patch of an emitted attention-backward module: its flash_bwd kernels' GEMMs
issued asynchronously (T.wgmma_gemm), FlashAttention-3's order within a block: S = Q K^T and
dP = dO V^T issued together, P recomputed while dP runs, dV += P^T dO (the dK/dV kernel) issued
and dS computed while it runs; the last product (dK or dQ) stays synchronous, so every GEMM of
the block has retired when the block ends. Stages the asynchronous GEMMs read are released after
they retire by leantile.codegen_retire (the CUDA repair every compile installs).

Measures what the schedule is worth before the emitter writes it (issue 50: attention backward
0.77-0.85x cuDNN's). Used by probe.py --variants.
"""
from __future__ import annotations

import re

_GEMM = re.compile(r"^(?P<ind> *)T\.gemm\((?P<a>\w+), (?P<b>\w+), (?P<c>\w+)(?P<kw>.*?)\)(?:  #.*)?$")


def _patch_kernel(body: list[str]) -> list[str]:
    gemms = [(i, _GEMM.match(ln)) for i, ln in enumerate(body) if _GEMM.match(ln)]
    scores = [(i, m) for i, m in gemms if "transpose_B=True" in m["kw"]]
    accs = [(i, m) for i, m in gemms if "transpose_B=True" not in m["kw"]]
    if len(scores) != 2 or len(accs) not in (1, 2):
        raise ValueError(f"not a flash_bwd body: {len(scores)} score GEMMs, {len(accs)} accumulations")
    (s_at, s), (dp_at, dp) = scores
    mid_acc = [(i, m) for i, m in accs if s_at < i < dp_at]  # dV += P^T dO between them (dK/dV kernel)
    clears = {f"T.clear({s['c']})", f"T.clear({dp['c']})"}
    # copies between S and dP (a late V load) go before S: the producer loads every stage ahead anyway
    moved = [ln for ln in body[s_at + 1:dp_at] if ln.strip().startswith("T.copy(")]
    out = []
    for i, ln in enumerate(body):
        if ln.strip() in clears or ln in moved:
            continue
        if i == s_at:
            out.extend(moved)
            ind = s["ind"]
            out.append(f"{ind}T.wgmma_gemm({s['a']}, {s['b']}, {s['c']}{s['kw']}, clear_accum=True)")
            out.append(f"{ind}T.wgmma_gemm({dp['a']}, {dp['b']}, {dp['c']}{dp['kw']}, clear_accum=True)")
            out.append(f"{ind}T.wait_wgmma(1)  # S retired; dP may still run")
        elif i == dp_at:
            out.append(f"{dp['ind']}T.wait_wgmma({1 if mid_acc else 0})  # dP retired")
        elif mid_acc and i == mid_acc[0][0]:
            m = mid_acc[0][1]
            out.append(f"{m['ind']}T.wgmma_gemm({m['a']}, {m['b']}, {m['c']}{m['kw']})  # asynchronous")
        else:
            out.append(ln)
    return out


def patch_source(src: str) -> str:
    """`src` (an emitted module) with every flash_bwd_dq / flash_bwd_dkdv kernel patched."""
    lines = src.split("\n")
    starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")]
    out, done = [], 0
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        if re.match(r"def flash_bwd_(dq|dkdv)_\d+\(", lines[a]):
            out.extend(lines[done:a])
            out.extend(_patch_kernel(lines[a:b]))
            done = b
            continue
    out.extend(lines[done:])
    return "\n".join(out)
