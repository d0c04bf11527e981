"""benchmarks/gpu_fuzz.py on the CPU: its sizes cross the lengths issue 46 asks for and respect
the caps, its graph sequence is the same for the same seed, and its dry run (the interpreter,
tiny sizes, the GPU worker process and the results file) works end to end, and a resumed
file is refused where other compiler code wrote it."""
import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from leantile import ir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_fuzz  # noqa: E402


def test_long_lengths_cross_where_plans_change_shape():
    ls = set(gpu_fuzz.long_lengths())
    assert {1, 2, 2 ** 16, 2 ** 17, 2 ** 16 + 1, 2 ** 17 - 1, 65521, 31, 32, 33} <= ls
    assert {31 * 1024 - 1, 32 * 1024, 33 * 1024 + 1, 2 * 64 + 1} <= ls
    assert max(ls) == 2 ** 17 + 1


def test_resize_respects_the_caps_and_ties_contraction_axes():
    from soundness_graphs import CLASSES
    prof = gpu_fuzz.Profile("cuda", 2 ** 20, 2.0 ** 30)
    big = 0
    for k, make in CLASSES.items():
        for i in range(20):
            g = gpu_fuzz.resize(make(), random.Random(f"{k}:{i}"), prof)
            assert g is not None
            for n in g.nodes:
                assert math.prod(g.axes[a] for a in n.axes) <= prof.max_elements
                if isinstance(n, ir.Matmul):
                    assert g.axes[n.axis_a] == g.axes[n.axis_b]
                    assert 2 * math.prod(g.axes[a] for a in n.axes) * g.axes[n.axis_a] <= prof.max_flops
            big = max(big, *g.axes.values())
    assert big >= 2 ** 16  # some graph keeps a long axis past 65536


def test_long_reductions_reach_a_combine_of_more_slices_than_its_planned_threads():
    """The lanes race (emit.reductions.lanes) lived only where a split reduction takes more than
    128 slices (a scalar past 2^20): the campaign draws such reduced axes now (sizes.HUGE_REDUCED)."""
    from hypothesis import HealthCheck, given, settings
    from leantile.derive import derive
    from reduction_strategies import long_reduction_graphs
    prof = gpu_fuzz.Profile("cuda", 2 ** 26, 2.0 ** 37)
    seen, draws = [], iter(range(10 ** 6))

    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(g=long_reduction_graphs())
    def draw(g):
        for _ in range(16):
            sized = gpu_fuzz.resize(g, random.Random(next(draws)), prof)
            if sized is not None and max(sized.axes.values()) >= 2 ** 20:
                seen.append(max((v for a, v in derive(sized).axes.items() if a.startswith("split_")), default=0))
    draw()
    assert any(s > 128 for s in seen), seen


def test_a_backward_is_sized_so_its_forward_runs_on_its_inputs():
    """The judge runs a backward's forward at the backward's sizes on the backward's inputs
    (judge.saved_from_forward). vjp renames an axis a gradient contracts over (W[k, j] read as
    W[k_1, j]) and contracts others no more: sized apart, the forward's einsum failed (a CPU dry
    run, seed 88: 6 of 820 graphs, every plan "crashed"). Resized with the forward's ties, every
    forward input the backward reads has the backward's shape and every forward contraction
    one size."""
    from gpu_fuzz_parts import families as F
    prof = gpu_fuzz.Profile("cpu", 2 ** 11, 2.0 ** 16)
    fams = {k: v for k, v in F.families().items() if k == "backward"}
    checked = 0
    for _, g, _, extra in F.graph_stream(88, fams, ["f16", "mixed"], prof):
        if not extra.get("forward"):
            continue
        fwd = ir.parse(extra["forward"])
        shapes = {n.name: tuple(g.axes[a] for a in n.axes) for n in g.inputs()}
        for n in fwd.inputs():
            if n.name in shapes:
                assert tuple(g.axes[a] for a in n.axes) == shapes[n.name], (n.name, g.axes)
        for n in fwd.nodes:
            if isinstance(n, ir.Matmul):
                assert g.axes[n.axis_a] == g.axes[n.axis_b], (n.axis_a, n.axis_b, g.axes)
        checked += 1
        if checked >= 150:
            break
    assert checked >= 150


def test_the_graph_sequence_is_the_same_for_a_seed():
    prof = gpu_fuzz.Profile("cpu", 2 ** 11, 2.0 ** 16)
    fams = gpu_fuzz.families()

    def first(seed, n=20):
        out = []
        for fam, g, dtype, extra in gpu_fuzz.graph_stream(seed, fams, ["f16", "f32", "mixed"], prof):
            out.append((fam, gpu_fuzz.graph_key(g), dtype))
            if len(out) == n:
                return out
    a = first(3)
    assert a == first(3) and a != first(4)
    assert len({f for f, _, _ in a}) >= 10  # the families interleave


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_dry_run_writes_the_results_file(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_fuzz.py"), "--device", "cpu", "--max-graphs", "3",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (path,) = tmp_path.glob("gpu-fuzz-cpu-*.json")
    d = json.loads(path.read_text())
    assert {"gpu", "graphs", "plans", "mismatch", "crash", "largest_axis", "failures"} <= set(d)
    assert d["graphs"] == 3 and d["plans"] >= 3 and d["mismatch"] == d["crash"] == 0
    assert "total" in r.stdout
    # the file names the compiler code it ran; a resume by other code is refused, not mixed in
    assert d["code"] == gpu_fuzz.code_fingerprint(ROOT / "python" / "leantile")
    d["code"] = "another-version"
    path.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_fuzz.py"), "--device", "cpu", "--max-graphs", "1",
                        "--out", str(tmp_path), "--resume", str(path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 2 and "another-version" in r.stderr
    assert json.loads(path.read_text())["graphs"] == 3


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_dry_run_huge_draws_of_attention_and_softmax(tmp_path):
    """f32 graphs of the attention and softmax families at the huge draw (inputs of 2^14: scores
    past 2^60) on the interpreter: every plan right where the graph's value fits. The class it
    pins: flash kernels' FMA exponent exp2(s c' - round(m c')) carried exp2(m c' - round(m c')),
    inf past |m c'| of 2^32 (this run found 7 of 42 plans NaN on that code)."""
    fams = "overlap_attention,user_attention,biased_attention,masked_attention,user_softmax,masked_softmax"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_fuzz.py"), "--device", "cpu", "--max-graphs", "12",
                        "--dtypes", "f32", "--families", fams, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (path,) = tmp_path.glob("gpu-fuzz-cpu-*.json")
    d = json.loads(path.read_text())
    assert d["mismatch"] == d["crash"] == 0 and d["huge_draws"] >= 6, {k: d[k] for k in ("mismatch", "crash", "huge_draws")}


def test_code_version_ignores_comments_and_docstrings_only(tmp_path):
    """The campaign's code version (results.code_fingerprint) stays where only comments and
    docstrings change, and moves for any change to what runs: a constant, a name, an argument,
    a statement added where the docstring was."""
    import shutil
    from gpu_fuzz_parts.results import code_fingerprint
    pkg = tmp_path / "leantile"
    shutil.copytree(ROOT / "python" / "leantile", pkg, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    base = code_fingerprint(pkg)
    f = pkg / "plan" / "__init__.py"
    text = f.read_text()
    f.write_text('"""Another module docstring."""\n# a new comment\n' + text.split('"""', 2)[2].replace(
        "def row_bytes(plan: Plan, b) -> int:\n", "def row_bytes(plan: Plan, b) -> int:  # why\n", 1))
    assert code_fingerprint(pkg) == base
    for old, new in [("\"acc\": 4}", "\"acc\": 8}"),
                     ("def row_bytes(plan: Plan, b)", "def row_bytes(plan: Plan, c)"),
                     ("FIXED = \"fixed\"", "FIXED = \"fixed\"\n\"\"\"now a statement\"\"\"")]:
        f.write_text(text.replace(old, new, 1))
        assert new in f.read_text() and code_fingerprint(pkg) != base, new
    f.write_text(text)
    assert code_fingerprint(pkg) == base


def test_code_version_reads_f_strings_alike_on_every_python():
    """Python 3.12 parses an f-string with a format spec into an extra empty text piece (3.11
    and 3.13 do not): the GPU machine (3.12) and this one must name one version alike."""
    import ast
    from gpu_fuzz_parts.results import _tree_text
    parsed = ast.parse('f"<{w[0]}{r:>{n}}"')
    extra = ast.parse('f"<{w[0]}{r:>{n}}"')
    joined = extra.body[0].value
    joined.values[1:1] = [ast.Constant(value="")]  # what 3.12 adds
    joined.values.append(ast.Constant(value=""))
    assert _tree_text(parsed) == _tree_text(extra)
    assert _tree_text(parsed) != _tree_text(ast.parse('f"<{w[0]}{r:<{n}}"'))


def test_localize_names_the_kernel_that_is_wrong():
    """benchmarks/gpu_fuzz_localize.py with the interpreter standing in for the GPU: every
    kernel of a plan of several kernels agrees with the interpreter (no false alarm), and a
    kernel made wrong (its stores scaled by 1.03, the size of the campaign's decode-attention
    mismatch) is the one named, in isolation, while the kernels before it stay right."""
    import torch
    import gpu_fuzz_localize as loc
    from leantile import architectures
    from leantile.derive import derive
    from leantile.emit import emit_module
    from leantile.plan import Store
    from leantile.runtime import emitted_module
    g = architectures.build("attention", h=2, t_q=3, t_kv=37, d_h=8)
    plan = derive(g, "unfused")
    assert len(plan.kernels) >= 4, [k.name for k in plan.kernels]
    module = emitted_module(emit_module(plan))
    gen = torch.Generator().manual_seed(5)
    inputs = {n.name: (torch.randn([g.axes[a] for a in n.axes], generator=gen) * 0.7).to(torch.float16)
              for n in g.inputs()}
    cpu = torch.device("cpu")
    clean = loc.localize(plan, module, inputs, loc.InterpreterLaunch(plan), cpu, 1,
                         {"plain": loc.InterpreterLaunch(plan)})
    assert clean["first_wrong"] is None, clean
    judged = loc.judged(g, "unfused", inputs, cpu)["out"]  # the campaign's judgement of the plan, interpreted
    assert 0 < judged["plain_rel_err"] and judged["rel_err"] <= judged["tolerance"], judged
    assert all(e == 0.0 for errs in clean["isolated"].values() for e in errs.values()), clean["isolated"]
    bad_kernel = plan.kernels[2].name

    class Wrong(loc.InterpreterLaunch):
        def launch(self, name, tensors):
            super().launch(name, tensors)
            if name == bad_kernel:
                for s in plan.kernels[2].statements():
                    if isinstance(s, Store):
                        tensors[s.dst].mul_(1.03)

    rep = loc.localize(plan, module, inputs, Wrong(plan), cpu, 2, {"plain": Wrong(plan)})
    mode, kernel, buffer, err = rep["first_wrong"]
    assert (mode, kernel) == ("isolated", bad_kernel) and 0.02 < err < 0.04, rep["first_wrong"]
    assert all(e == 0.0 for k in plan.kernels[:2] for e in rep["isolated"][k.name].values())
    out = plan.outputs["out"]
    assert all(run[out] > 0.01 for run in rep["shipped"]["plain"]), rep["shipped"]


def test_decode_family_draws_the_wide_head_class():
    """The decode_attention family (the campaign's 2026-11-28 mismatch class): graphs with one
    query row per head whose GEMMs are SIMT kernels, some candidate splitting the contraction
    and one not, and, at the GPU profile, draws of the class's own sizes (K of 2^26 elements)."""
    import random as r
    from leantile.derive import candidates, derive
    fams = gpu_fuzz.families()
    assert "decode_attention" in fams
    graphs = [g for g, _ in fams["decode_attention"](1, 0, r.Random(1), 12)]
    assert {g.axes["d_h"] for g in graphs} >= {2048, 8192} and all(g.axes["t_kv"] > 4096 for g in graphs)
    g = max(graphs, key=lambda g: (g.axes["d_h"], -g.axes["h"]))  # the widest head, fewest heads
    plans = [derive(g, c.name) for c in candidates(g)]
    gemms = [s for p in plans for k in p.kernels for s in k.statements() if s.op == "gemm"]
    assert gemms and not any(s.mma for s in gemms)  # one query row: no tensor-core tile
    assert any(k.stream and k.stream.split for p in plans for k in p.kernels)
    prof = gpu_fuzz.Profile("cuda", 2 ** 26, 2.0 ** 37)
    seen = []
    for _, g, _, _ in gpu_fuzz.graph_stream(5, {"decode_attention": fams["decode_attention"]}, ["f16"], prof):
        seen.append(g)
        if len(seen) == 40:
            break
    assert any(g.axes["t_kv"] * g.axes["d_h"] >= 2 ** 25 for g in seen), [dict(g.axes) for g in seen]


def test_loss_steps_family_draws_the_written_over_and_long_block_classes():
    """The loss_steps family (training steps in one graph, leantile.train_step): at the GPU profile
    some default plans write a row kernel's second pass over the logits it streams
    (plan.storage.written_over) and some stream vocabulary-long rows in two_pass_block's long
    blocks: the classes of 2026-11-30's LM-head step reach the campaign."""
    from leantile.derive import derive
    from leantile.derive.rules import row_tiles
    from leantile.plan.storage import storage, written_over
    fams = gpu_fuzz.families()
    prof = gpu_fuzz.Profile("cuda", 2 ** 26, 2.0 ** 37)
    over = long = 0
    for _, g, _, _ in itertools.islice(gpu_fuzz.graph_stream(108, {"loss_steps": fams["loss_steps"]}, ["f16", "bf16"],
                                                             prof), 20):
        p = derive(g)
        over += any(written_over(p, a, b.host) for a, b in storage(p).items())
        long += any(k.second_pass and k.stream.block == row_tiles.LONG_ROW_BLOCK for k in p.kernels)
    assert over and long, (over, long)


def test_large_head_attention_family_keeps_its_heads_past_128():
    """The large_head_attention family: resized for the GPU, the heads stay at 144..256 and some
    default plans are one flash kernel at FLASH_LARGE_HEAD_TILES (the class of issue 51's d_h 256,
    which a resize of shape_tiled_attention almost never drew)."""
    from leantile.cost import choose
    from leantile.derive.shape_tiles import FLASH_LARGE_HEAD, FLASH_LARGE_HEAD_TILES
    fams = gpu_fuzz.families()
    prof = gpu_fuzz.Profile("cuda", 2 ** 26, 2.0 ** 37)
    flash = 0
    for _, g, _, _ in itertools.islice(gpu_fuzz.graph_stream(110, {"large_head_attention": fams["large_head_attention"]},
                                                             ["f16", "bf16"], prof), 12):
        assert g.axes["d_h"] > FLASH_LARGE_HEAD, g.axes
        p = choose(g)[0]
        flash += len(p.kernels) == 1 and {k: p.tiles.get(k) for k in FLASH_LARGE_HEAD_TILES} == FLASH_LARGE_HEAD_TILES
    assert flash, flash


def test_kernel_digests_share_a_compile_only_between_identical_kernels():
    """The compile pool runs nvcc once per digest: a kernel two plans spell alike gets one digest,
    a kernel at other tiles another (sharing a wrong compile would only slow the GPU worker, which
    compiles what the cache lacks, but the digest must not merge kernels that differ)."""
    from gpu_fuzz_parts.plans import kernel_digests, plans_of

    from leantile.derive import derive
    from leantile.emit import emit_module
    from leantile.sources import load_source

    g = load_source(str(ROOT / "exports" / "rmsnorm_mlp.json"), None)
    plans, _, crashed = plans_of(g, skip_unfused=True)
    assert plans and not crashed
    for p in plans:
        d = kernel_digests(p["source"])
        assert list(d) == p["kernels"] and len(set(d.values())) == len(d)
        assert kernel_digests(p["source"]) == d  # a second emit of one module: the same keys
    name = plans[0]["plan_candidate"]
    base = kernel_digests(emit_module(derive(g, name)))
    other = kernel_digests(emit_module(derive(g, name, {"block_m": 64})))
    assert base.keys() == other.keys() and any(base[k] != other[k] for k in base)


@pytest.mark.slow  # 30 s of a process pool (the fast tier's slowest test): make test runs it, make test-fast does not
def test_dry_run_through_the_compile_pool(tmp_path):
    """The pool's bookkeeping (one job per distinct kernel, shared between plans, seconds counted
    once) on the CPU: its nvcc fails without a GPU, the interpreter still judges every plan."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_fuzz.py"), "--device", "cpu", "--max-graphs", "3",
                        "--workers", "2", "--skip-unfused", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(next(tmp_path.glob("gpu-fuzz-cpu-*.json")).read_text())
    assert d["graphs"] == 3 and d["plans"] >= 3 and d["mismatch"] == d["crash"] == 0
    assert d["stage_seconds"]["digest_s"] > 0 and d["stage_seconds"]["precompile_s"] > 0


def test_replay_builds_its_jobs_and_its_pool_job_takes_a_module():
    """benchmarks/gpu_fuzz_replay.py over a campaign's failure records: one job per failing graph
    with the failing candidates' modules, and the pool's job (precompile_all) takes a module's
    source alone (a changed signature left the replay failing with a TypeError, 2026-11-29): here,
    without a GPU, it returns why the compile failed instead of raising."""
    import gpu_fuzz_replay
    from gpu_fuzz_parts.plans import precompile_all
    failures = json.loads((ROOT / "benchmarks/results/gpu-fuzz-h200-2026-11-29-s70.json").read_text())["failures"]
    jobs = gpu_fuzz_replay.jobs_of(failures)
    assert len(jobs) == 1 and sorted(p["candidate"] for p in jobs[0]["plans"]) == ["fused", "split", "unfused"]
    source = next(iter(jobs[0]["sources"].values()))
    err, secs = precompile_all(source)
    assert secs >= 0 and (err is None or isinstance(err, str))


def test_a_backward_failure_record_carries_its_forward_to_the_replay():
    """A backward graph's saved inputs are computed by its forward (judge.saved_from_forward): a
    failure record without it replayed the case on drawn statistics, not the failing ones (the
    CPU dry run's bf16 fill failure, seed 7, was found by replaying the stream instead)."""
    import gpu_fuzz_replay
    from gpu_fuzz_parts.results import Results
    from leantile import architectures
    from leantile.autodiff import vjp

    fwd = architectures.build("causal_attention", h=2, t_q=5, t_kv=7, d_h=8)
    bw = vjp(fwd)
    assert bw.saved
    extra = {"forward": fwd.to_json(), "saved": dict(bw.saved)}
    job = {"family": "attention_backward", "name": "a_vjp", "dtype": "bf16", "sizes": dict(bw.graph.axes),
           "graph": bw.graph.to_json(), "extra": extra}
    r = Results.__new__(Results)
    r.failures = []
    r.failure(job, {"candidate": "unfused", "default": False}, {"kind": "mismatch", "seed": 5, "draw": "normal"})
    record = json.loads(json.dumps(r.failures[0]))  # as the results file holds it
    assert gpu_fuzz_replay.jobs_of([record])[0]["extra"] == extra


def test_backward_graphs_are_judged_on_the_saved_values_their_forward_computes():
    """The backward families hand the judge their forward and {saved input: forward node}; the
    judge replaces the drawn saved inputs by the forward's values (judge.saved_from_forward): a
    drawn softmax sum near 0 made every plan of a user attention's backward, unfused too, "wrong"
    at d_WK (GPU campaign s79), on inputs no training run hands over. Drawn: an attention's saved
    row sums are >= 1 (the row's max contributes exp(0)) and its saved output is the forward's."""
    import torch

    from gpu_fuzz_parts import judge
    from leantile import reference
    prof = gpu_fuzz.Profile("cpu", 2 ** 11, 2.0 ** 16)
    seen = 0
    fams = {"attention_backward": gpu_fuzz.families()["attention_backward"]}
    for fam, g, dtype, extra in gpu_fuzz.graph_stream(5, fams, ["f32"], prof):
        assert extra.get("forward") and extra.get("saved"), sorted(extra)
        drawn = judge._inputs(g, 1, 1.0, torch.device("cpu"), torch)
        fed = judge.saved_from_forward(g, extra, drawn, torch)
        fwd = ir.parse(extra["forward"])
        ref = reference.evaluate(fwd.model_copy(update={"axes": {a: g.axes[a] for a in fwd.axes}}),
                                 {n.name: drawn[n.name] for n in fwd.inputs()}, compute_dtype=torch.float32, check=False)
        for name, node in extra["saved"].items():
            assert fed[name].shape == drawn[name].shape and not torch.equal(fed[name], drawn[name]), name
            if node in fwd.outputs.values():  # the forward's output, handed over as it is
                out = next(o for o, i in fwd.outputs.items() if i == node)
                assert torch.allclose(fed[name].float(), ref[out].float(), rtol=1e-5, atol=1e-6), name
        sums = [fed[n] for n, i in extra["saved"].items() if fwd.nodes[i].op == "reduce" and fwd.nodes[i].kind == "sum"]
        assert sums and all(bool((s >= 1 - 1e-5).all()) for s in sums)
        seen += 1
        if seen == 3:
            break
    assert seen == 3


def test_the_saved_values_fed_are_packed_and_a_forward_input_the_backward_never_reads_is_drawn():
    """GPU campaign s80: a saved value the reference returned as a permuted view (an attention
    whose query rows come after a group axis, Q[g, h, d_h]: its output [g, h, d_h] strided) reached
    a kernel that refuses its strides ("violates packed ABI constraint"); a forward input its
    backward does not read was a KeyError. Both fed now."""
    import torch

    from gpu_fuzz_parts import judge
    from leantile import reference
    from leantile.autodiff import forward_saving, vjp
    from leantile.dag import DagM
    m = DagM("attention_unused_input", {"g": 3, "h": 2, "t_kv": 7, "d": 3, "d_h": 5})
    m.input("X", ["h", "d"], "f32")  # read by nothing (structured_graphs' attention with Q an input)
    q = m.input("Q", ["g", "h", "d_h"], "f32")
    k, v = (m.input(n, ["h", "t_kv", "d_h"], "f32") for n in "KV")
    m.output("out", m.matmul(m.softmax(m.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv"))
    fwd = m.graph()
    bw = vjp(fwd)
    assert bw.saved and "X" not in {n.name for n in bw.graph.inputs()}
    raw = reference.evaluate(forward_saving(fwd, bw), reference.random_inputs(fwd), compute_dtype=torch.float32,
                             check=False)
    assert not all(raw[n].is_contiguous() for n in bw.saved)  # the class this pins is drawn
    extra = {"forward": fwd.to_json(), "saved": dict(bw.saved)}
    drawn = judge._inputs(bw.graph, 1, 1.0, torch.device("cpu"), torch)
    fed = judge.saved_from_forward(bw.graph, extra, drawn, torch, 1, 1.0)
    for name in bw.saved:
        assert fed[name].is_contiguous() and fed[name].shape == drawn[name].shape
