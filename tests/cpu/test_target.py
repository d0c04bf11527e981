"""The GPU is described once (leantile.target, issue 48): no other module holds a hardware number,
and derive, the verifier and the cost model follow the target they are given."""
from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from leantile import ir
from leantile.cost import choose, plan_seconds
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.target import DEFAULT, H100, H200, current

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "leantile"
# every number of target.py's H100 / H200: as a literal anywhere else, one would go stale (but
# 2048 and 65536, threads and registers per SM, too common to police: read from the target
# where they are meant)
HARDWARE = {v for t in (H100, H200) for v in vars(t).values()
            if isinstance(v, (int, float)) and not isinstance(v, bool)} - {2048, 65536}
ARCH = re.compile(r"^sm_\d+a?$")


def _value(node):
    """A number written as a constant expression (227 * 1024), else None."""
    try:
        v = ast.literal_eval(node) if isinstance(node, ast.Constant) else eval(compile(ast.Expression(node), "", "eval"), {})
    except Exception:
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _found(tree) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = bool(ARCH.match(node.value))
        elif isinstance(node, ast.Constant) or (isinstance(node, ast.BinOp) and
                                                all(isinstance(x, ast.Constant) for x in (node.left, node.right))):
            hit = _value(node) in HARDWARE
        else:
            continue
        if hit:
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_but_target_holds_a_hardware_number():
    """The SM count, shared memory, bandwidths, rates and the architecture strings appear as
    literals only in target.py."""
    bad = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "target.py":
            continue
        found = _found(ast.parse(path.read_text()))
        if found:
            bad[str(path.relative_to(PACKAGE))] = found
    assert not bad, f"hardware numbers outside leantile/target.py: {bad}"


def test_the_policing_finds_a_planted_number():
    assert len(_found(ast.parse("SMS = 132\nLIMIT = 227 * 1024\nARCH = 'sm_90a'\nBW = 4.2e12\n"))) == 4
    assert not _found(ast.parse("x = 131\n'''docstring: sm_90 and 132 SMs'''\ny = 'on sm_90a'\n"))


def _skinny_gemm() -> ir.Graph:
    """128 x 65536 x 256, f16: two output tiles of 128 x 128, a long contraction: split over k
    on a GPU of many SMs, not on one of two."""
    g = DagM("skinny", {"m": 128, "k": 65536, "n": 256})
    g.output("y", g.matmul(g.input("X", ["m", "k"], "f16"), g.input("W", ["k", "n"], "f16"), "k", "k"))
    return g.graph()


def test_derive_splits_for_the_sms_of_its_target():
    g = _skinny_gemm()
    assert any("split_k" in c.name for c in candidates(g))
    assert candidates(g) == candidates(g, target=DEFAULT)
    two = replace(DEFAULT, name="two SMs", sms=2)
    assert not any("split_k" in c.name for c in candidates(g, target=two))
    plan, _ = choose(g, target=two)
    assert not any(k.stream and k.stream.split for k in plan.kernels)


def test_derive_and_the_verifier_hold_plans_to_the_targets_shared_memory():
    from leantile.derive import refusals
    from leantile.plan.verify import verify
    g = _skinny_gemm()
    plan = derive(g)
    assert verify(plan, g) == []  # fits 227 KiB
    small = replace(DEFAULT, name="16 KiB", smem_per_cta=16 * 1024)
    problems = verify(plan, g, target=small)
    assert problems and all("16384 bytes" in p for p in problems), problems
    assert "split_k" in {c.name for c in candidates(g)} - {c.name for c in candidates(g, target=small)}
    assert any("16384 bytes" in r for r in refusals(g, target=small))


def test_the_cost_model_reads_the_targets_bandwidth():
    g = DagM("copy", {"m": 4096, "d": 4096})
    g.output("y", g.mul(g.input("X", ["m", "d"], "f16"), g.const("2.0")))
    plan = derive(g.graph())
    slow = replace(DEFAULT, dram_bps=DEFAULT.dram_bps / 4, l2_bps=DEFAULT.l2_bps / 4)
    assert plan_seconds(plan, target=slow) > 2 * plan_seconds(plan)
    assert H100.dram_bps < H200.dram_bps and H100.sms == H200.sms


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU answer: no GPU to describe")
def test_current_without_a_gpu_is_the_default():
    assert current() == DEFAULT
