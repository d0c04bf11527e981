"""The one equivalence check the CPU suites share: interp(plan) against reference(graph),
judged by leantile.tolerance (one error definition, one tolerance table)."""
import torch

from leantile import interp, reference
from leantile.tolerance import rel_err, tolerance  # noqa: F401  (rel_err re-exported for the suites)


def check(g, plan, seed, dtype, scale=1.0):
    """interp(plan) in `dtype` against the float64 reference; below float64 the reference
    computed in `dtype` gives the rounding that is forgiven (an output that cancels to ~0)."""
    inputs = reference.random_inputs(g, seed=seed, scale=scale)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    same = None if dtype == torch.float64 else reference.evaluate(g, inputs, compute_dtype=dtype, check=False)
    out = interp.run(plan, {k: v.to(dtype) for k, v in inputs.items()}, dtype=dtype)
    for name in g.outputs:
        assert out[name].dtype == dtype
        # finite wherever the graph is (a wholly masked softmax row is NaN in both: rel_err checks it)
        assert (torch.isfinite(out[name]) | ~torch.isfinite(ref[name])).all(), \
            f"{plan.candidate}: non-finite output (unwritten tile?)"
        err = rel_err(out[name], ref[name], None if same is None else same[name])
        assert err <= tolerance(dtype), f"{g.name}/{plan.candidate}: relative error {err:.3g} in {dtype}"


def check_every_candidate(g, seed: int, tiles_list):
    """Every candidate of g at each tiles of `tiles_list` (None: the plan's own) equals the graph in
    float64 through the interpreter, to 1e-9 relative, on fresh inputs of `seed`."""
    from leantile.derive import candidates, derive
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for name in [c.name for c in candidates(g)]:
        for tiles in tiles_list:
            out = interp.run(derive(g, name, tiles), inputs, dtype=torch.float64)
            for o in g.outputs:
                assert out[o].shape == ref[o].shape, f"{name} {tiles}: output {o} of shape {tuple(out[o].shape)}"
                err = rel_err(out[o].double(), ref[o])
                assert err < 1e-9, f"{name} {tiles}: output {o}: relative error {err:.3g}"


def refusal_reasons(g, rule: str) -> list[str]:
    """What rule `rule` said when it refused a site of g (the engine's option pass, every site)."""
    from leantile.derive.context import Ctx
    from leantile.derive.engine import _options
    cx = Ctx(g)
    _options(cx)
    return [r.reason for r in cx.refused if r.rule == rule]
