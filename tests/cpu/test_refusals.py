"""Issue 13: `derive --all-candidates` lists every candidate and every rule that does not fire
where its pattern almost matches, with the reason; what is refused is never offered."""
import subprocess
import sys

from leantile import architectures
from leantile.dag import build_graph
from leantile.derive import candidates, derive, refusals


def _softmax_with_shared_exp():
    """A softmax whose exponentials are also read by another output: not streamed."""
    def body(d):
        x = d.input("X", ["m", "k"])
        e = d.exp(d.sub(x, d.red("max", x, "k")))
        d.output("p", d.div(e, d.red("sum", e, "k")))
        d.output("e2", d.mul(e, e))
    return build_graph("shared_exp", {"m": 8, "k": 16}, body)


def _decode():
    def body(d):
        q, k, v = d.input("Q", ["h", "d"]), d.input("K", ["h", "t", "d"]), d.input("V", ["h", "t", "e"])
        d.output("out", d.matmul(d.softmax(d.matmul(q, k, "d", "d"), "t"), v, "t", "t"))
    return build_graph("decode", {"h": 2, "d": 16, "t": 40, "e": 16}, body)


def _dependent_dual():
    def body(d):
        x, w = d.input("X", ["m", "k"]), d.input("W", ["k", "k2"])
        a = d.matmul(x, w, "k", "k")  # [m, k2]
        d.output("out", d.matmul(x, d.mul(w, d.red("sum", a, "m")), "k", "k"))
    return build_graph("dependent", {"m": 8, "k": 16, "k2": 16}, body)


def _rmsnorm_gain_gemm(gain_first: bool, per_head: bool = False):
    """RMSNorm with a gain before a GEMM (issue 49): the gain runs over the contraction axis
    (per_head: over a head axis too, which gain_fold does not take)."""
    def body(d):
        x, w = d.input("X", ["h", "m", "k"] if per_head else ["m", "k"]), d.input("W", ["k", "n"])
        gamma = d.input("gamma", ["h", "k"] if per_head else ["k"])
        r = d.rsqrt(d.add(d.div(d.red("sum", d.square(x), "k"), d.size_const("k")), d.const("1e-05")))
        h = d.mul(gamma, d.mul(x, r)) if gain_first else d.mul(d.mul(x, r), gamma)
        d.output("out", d.matmul(h, w, "k", "k"))
    return build_graph("rmsnorm_gain_gemm", {"m": 8, "k": 16, "n": 16, **({"h": 2} if per_head else {})}, body)


def test_each_near_miss_is_refused_with_its_reason_and_not_offered():
    cases = [(_softmax_with_shared_exp(), "online_softmax", "also read outside the softmax"),
             (_rmsnorm_gain_gemm(False, per_head=True), "gain_fold", "varies along the contraction axis k (a gain over"),
             (_decode(), "online_softmax", "no query axis to tile"),
             (_dependent_dual(), "dual_gemm", "its weight depends on the first product"),
             (architectures.build("attention", h=2, t_q=8, t_kv=8, d_h=1024), "online_softmax", "shared memory")]
    for g, rule, why in cases:
        lines = refusals(g)
        assert any(line.startswith(rule) and why in line for line in lines), (g.name, lines)
    # a flash kernel over 227 KiB is refused; its softmax row is still offered
    names = [c.name for c in candidates(cases[-1][0])]
    assert "online" not in names and "online_row" in names


def test_a_gain_over_the_contraction_axis_folds_into_the_weight():
    """RMSNorm with a gain, then a GEMM (issue 49): gain_fold offers the GEMM with the norm's row
    scale pulled out and its statistics in the GEMM's stream, reading the weight with its rows
    scaled by the gain; the norm's own kernel before the GEMM (prenorm) stays a candidate."""
    for first in (False, True):
        g = _rmsnorm_gain_gemm(first)
        by_name = {c.name: c for c in candidates(g)}
        assert {"stats_fused", "prenorm"} <= set(by_name)
        assert {s.rule for s in by_name["stats_fused"].steps} >= {"gain_fold", "scale_pullout", "stream_stats"}
        kernels = [k.name for k in derive(g, "stats_fused").kernels]
        assert len(kernels) == 2 and kernels[0] == "gain_fold_W" and kernels[1].startswith("gemm_"), kernels


def test_the_builtins_refuse_nothing():
    for name in architectures.NAMES:
        assert refusals(architectures.build(name)) == [], name


def test_derive_all_candidates_cli():
    out = subprocess.run([sys.executable, "-m", "leantile", "derive", "attention", "--size", "d_h=1024",
                          "--all-candidates"], capture_output=True, text=True, check=True).stdout
    assert "  offered  online_row:" in out and "  offered  unfused:" in out
    assert "  refused  online_softmax at" in out and "over the limit of 232448 bytes" in out
