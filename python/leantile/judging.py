"""Judging a kernel's outputs against the graph's float32 reference (leantile.tolerance): what
verify, compile(check=True) and the GPU campaign decide right or wrong, shared by runtime.Kernel and
chunked.ChunkedKernel (each has `graph`, `device` and `output_names`)."""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from . import ir, reference
from .tolerance import CAP, NOISE, output_tolerances, rel_err

# directions Kernel.ill_conditioned moves the inputs in (each one unit in its last place, a random
# sign per element): a near tie flips in about half of them
ILL_CONDITIONED_PROBES = 8
JITTER_PROBES = 2  # rounding directions (each value one unit off) beside the input ones


@contextmanager
def ieee_fp32_matmuls():
    """torch's float32 GEMMs in float32 (not TF32) for the block, the caller's setting restored."""
    m = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "ieee") if hasattr(m, "fp32_precision") else ("allow_tf32", False)  # torch >= 2.9
    old = getattr(m, name)
    setattr(m, name, value)
    try:
        yield
    finally:
        setattr(m, name, old)


class Judging:
    """verify's judgement of outputs, from the graph alone."""

    def judge(self, inputs: dict, outs: dict, tolerance: float | None = None, refs: tuple | None = None) -> dict:
        """This kernel's outputs `outs` on `inputs` judged as verify judges them (verify's dict).
        refs: (reference, the unfused graph in its own dtypes), as `references` gives them, where
        the caller has them already (a float64 reference shared by every plan of a graph)."""
        ref, same = refs if refs is not None else self.references(inputs)
        errs = {o: rel_err(outs[o], ref[o], same[o]) for o in self.output_names}
        least_precise = output_tolerances(self.graph)
        tol = {o: least_precise[o] if tolerance is None else tolerance for o in self.output_names}
        plain = {o: rel_err(outs[o], ref[o]) for o in self.output_names}
        failed = [o for o in self.output_names if not errs[o] <= tol[o]]
        others = self._other_roundings(inputs, ref) if failed else []
        for other in others:  # the graph's rounding in another correct order forgiven as its own order's is
            for o in failed:
                errs[o] = min(errs[o], rel_err(outs[o], ref[o], other[o], noise_factor=1.0))
        failed = [o for o in failed if not errs[o] <= tol[o]]
        return {"ok": not failed, "rel_err": errs, "tolerance": tol, "plain_rel_err": plain,
                "ill_conditioned": self.ill_conditioned(inputs, failed, ref, same, others=others) if failed else []}

    def _other_roundings(self, inputs: dict, ref: dict) -> list[dict]:
        """The unfused graph with every rounded value one unit off (JITTER_PROBES directions,
        reference.evaluate's jitter): the rounding of another correct order, a kernel's FMA
        d * e - r where the graph rounds d * e first. rel_err forgives NOISE times the graph's own
        rounding error; in the graph's own order an output can cancel exactly where any other order
        leaves a unit of the terms (GPU campaign s105's redraw, g39: d_X of a backward at 2^14,
        its one-hot rows 0 in the graph's order and a unit of 4e4 in the kernel's, 1e-3 of an
        output whose one live row is small): the error of that other order is forgiven too, once
        (each of its values is half a unit off, every rounding at its worst, not NOISE times)."""
        with ieee_fp32_matmuls():
            own = self._own_dtypes_judge(ref, self._unfused(inputs, own=True))  # references' choice
            gen = torch.Generator().manual_seed(1)
            return [self._unfused(inputs, own, jitter=gen) for _ in range(JITTER_PROBES)]

    def references(self, inputs: dict, dtype: torch.dtype = torch.float32) -> tuple[dict, dict]:
        """(the reference computed in `dtype`: float32, or float64 for an oracle; the unfused
        graph in its own dtypes) on these inputs."""
        with ieee_fp32_matmuls():  # float32 products, whatever the caller set
            ref = reference.evaluate(self.graph, inputs, compute_dtype=dtype)
            # the unfused graph in its own dtypes, its float32 contractions rounded as the
            # kernels' are: on the GPU T.gemm of float32 operands runs on TF32 tensor cores (as
            # torch.set_float32_matmul_precision("high")); the interpreter multiplies in float32
            same = self._unfused(inputs, own=True)
            if not self._own_dtypes_judge(ref, same):
                same = self._unfused(inputs, own=False)
        return ref, same

    def _unfused(self, inputs: dict, own: bool, jitter: torch.Generator | None = None) -> dict:
        """The graph's value with the rounding a plan may have: in its own dtypes (own), or in
        float32 rounded only where every plan rounds (reference.plan_rounded: outputs, casts, GEMM
        operands); with `jitter`, every value moved by one unit of rounding (reference.evaluate)."""
        tf32 = self.device.type == "cuda"
        if own:
            return reference.evaluate(self.graph, inputs, check=False, tf32=tf32, jitter=jitter)
        return reference.evaluate(self.graph, inputs, compute_dtype=torch.float32, check=False, tf32=tf32,
                                  round_at=reference.plan_rounded(self.graph), jitter=jitter)

    @staticmethod
    def _own_dtypes_judge(ref: dict, same: dict) -> bool:
        """Whether the graph in its own dtypes is finite wherever the reference is: else an
        intermediate overflows there (f16 scores past 65504) that no kernel stores in f16
        (derive's Ctx.stored_dtype), and it says nothing of the kernels' rounding."""
        return all(bool((torch.isfinite(same[o]) | ~torch.isfinite(ref[o])).all()) for o in ref)

    def ill_conditioned(self, inputs: dict, outputs=None, ref=None, same=None, seed: int = 0,
                        others: list | None = None) -> list[str]:
        """The outputs (of `outputs`, default all) that these inputs leave unjudgeable in the
        graph's own dtypes: moving every input one unit in its last place (a random sign per
        element; ILL_CONDITIONED_PROBES such directions, any one suffices) moves the unfused
        graph's output by more than CAP / NOISE of the output's norm. Its
        own rounding is then about as large, more than leantile.tolerance forgives (CAP of the
        norm), so a right kernel may fail there: a bf16 1 x 1 GEMM output over 77 terms that cancel
        to 0.006 of their size moves by 0.005 (measured: 0.26 rel err at such a draw, 0.0 at the
        next). Also an output the unfused graph in its own dtypes already misses by more than
        CAP / NOISE of its norm: its forgiven rounding (NOISE times that) would pass the CAP, so a
        right kernel, one computing exactly what the graph computes in its own dtypes included,
        may fail (bf16 decode attention at scores of 1e7, where one bf16 unit is 65536: the
        softmax picks among ties). And an output the inputs drive past the graph's own range
        (_out_of_range: an output or a GEMM operand overflows its dtype). A failing output NOT in
        this list is a wrong kernel; one in it asks for other inputs."""
        outputs = self.output_names if outputs is None else outputs
        if ref is None or same is None:
            ref, same = self.references(inputs)
        with ieee_fp32_matmuls():  # which rounding `same` modelled (references' choice; failures only)
            own = self._own_dtypes_judge(ref, self._unfused(inputs, own=True))
        # float32 GEMM operands run on TF32 tensor cores on the GPU (references' `same` models it,
        # though not bit for bit: the MMA drops what cuBLAS rounds): there a unit is TF32's, 2^-10
        # of the value, not float32's (scores of 2^50 pick among rows TF32 cannot tell apart:
        # every candidate, the unfused one included, 10% off at gpu-fuzz 2026-11-28's huge draw)
        tf32 = self.device.type == "cuda" and any(isinstance(n, ir.Matmul) for n in self.graph.nodes)

        def beyond(a, b, o) -> bool:
            # one overflows where the other does not: the graph's own rounding (TF32 scores of 1e6 in
            # exp) is inf across the output where float64 is finite, and no finite element is left to
            # weigh (GPU campaign s99: d_WK of attention_proj_vjp, every element a sum over inf heads)
            if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
                return True
            both = torch.isfinite(a) & torch.isfinite(b)
            return (a[both].double() - b[both].double()).norm().item() > CAP / NOISE * ref[o][both].double().norm().item()
        flagged = self._out_of_range(inputs, ref, outputs) | {o for o in outputs if beyond(same[o], ref[o], o)}
        # Several directions, not one: a near tie (two keys of a hard-max softmax whose scores
        # differ by less than their rounding) flips in some directions only; one direction missed
        # a tie at 1.2e-4 of the scores that TF32 moves by 2.2e-3 (flagged by 2 of 6 directions:
        # benchmarks/near_ties/, gpu-fuzz 2026-11-28 s29), and the campaign counted a right kernel wrong.
        gen = torch.Generator().manual_seed(seed)
        for _ in range(ILL_CONDITIONED_PROBES):
            if set(outputs) <= flagged:
                break
            moved = {}
            for name, t in inputs.items():
                up = torch.rand(t.shape, generator=gen) < 0.5
                if tf32 and t.dtype == torch.float32:
                    moved[name] = t + torch.where(up, 1.0, -1.0).to(t.device) * t.abs() * 2.0 ** -10
                    continue
                way = torch.where(up, math.inf, -math.inf).to(t.dtype)
                moved[name] = torch.nextafter(t.cpu(), way).to(t.device)
            with ieee_fp32_matmuls():
                shifted = self._unfused(moved, own)
            flagged |= {o for o in outputs if o not in flagged and beyond(shifted[o], same[o], o)}
        # The graph computed with each value one unit of rounding off (another correct rounding: a
        # kernel's FMA d * e - r where the graph rounds d * e first): an output that cancels exactly
        # in the graph's own order moves by a unit of the terms it cancels (GPU campaign s105: d_X
        # of a backward at 2^14, s (d e^s - sum d e^s s) with a one-hot s, every fused plan off by
        # 1e-2 of a value the graph rounds to 0; input units leave that softmax one-hot, and zero)
        # (`others`: those evaluations where the caller made them already, judge's _other_roundings)
        if not set(outputs) <= flagged:
            for shifted in others if others is not None else self._other_roundings(inputs, ref):
                flagged |= {o for o in outputs if o not in flagged and beyond(shifted[o], same[o], o)}
        return [o for o in outputs if o in flagged]

    def _out_of_range(self, inputs: dict, ref: dict, outputs) -> set[str]:
        """The outputs these inputs drive past the graph's own range: the value rounded where
        every plan rounds (float64 at reference.plan_rounded: the outputs and the GEMM operands
        beside the casts the reference rounds itself) is inf or NaN where the reference is
        finite. An f16 row sum of 1e5 is inf in every plan's f16 output, finite in the float32
        reference: no kernel can be judged against it there."""
        rounded = reference.evaluate(self.graph, inputs, compute_dtype=torch.float64, check=False,
                                     round_at=reference.plan_rounded(self.graph))
        return {o for o in outputs if bool((~torch.isfinite(rounded[o]) & torch.isfinite(ref[o])).any())}

