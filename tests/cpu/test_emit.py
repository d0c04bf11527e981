"""leantile.emit.tilelang: every built-in and every candidate emits TileLang that lowers to
CUDA C for sm_90 on this CPU-only machine, GEMM kernels take the Hopper path (wgmma, TMA),
and one candidate per built-in compiles with nvcc for sm_90a.

Sizes are reduced but GPU-sensible: multiples of 64, plus one axis per built-in that is NOT
a multiple of its block, so the partial-tile code (masked reductions, bounds-checked copies)
is lowered too. Numerics are checked on the GPU (issue 5, item 3), not here.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from leantile import architectures as A
from leantile.derive import candidates, derive
from leantile.emit import emit_module, emit_plan_to_dir, load_module
from leantile.plan import Gemm, Load
from profiles import examples  # noqa: E402

SIZES = {
    "attention": dict(h=2, t_q=256, t_kv=200, d_h=128),   # t_kv: partial key tile (block_n 128)
    "swiglu": dict(m=200, n=256, d=256),                   # m: partial row tile
    "matmul": dict(m=200, d=256, n=256),
    "rmsnorm": dict(m=256, d=200, n=256),                  # d: partial streamed (reduced) axis
    "rmsnorm_mlp": dict(m=200, d=256, n=192),
    "layernorm_linear_gelu": dict(m=256, d=192, n=200),    # n: partial column tile
    "causal_attention": dict(h=2, t_q=200, t_kv=328, d_h=64),  # t_q < t_kv: offset diagonal, partial tiles
    "sliding_window_attention": dict(h=2, t_q=1100, t_kv=1300, d_h=64),  # both window bounds inside
    "gqa_attention": dict(h_kv=2, g=4, t_q=100, t_kv=300, d_h=64),  # packed heads, partial query tiles
}
CASES = [(a, c.name) for a in A.NAMES for c in candidates(A.build(a, **SIZES[a]))]
# one candidate per built-in, the fused one, for the nvcc check
NVCC_CASES = [(a, candidates(A.build(a, **SIZES[a]))[0].name) for a in A.NAMES]


def _ids(cases):
    return [f"{a}-{c}" for a, c in cases]


@functools.lru_cache(maxsize=None)
def plan_of(arch: str, cand: str):
    return derive(A.build(arch, **SIZES[arch]), cand)


@functools.lru_cache(maxsize=None)
def source_of(arch: str, cand: str) -> str:
    return emit_module(plan_of(arch, cand))


def _tilelang():
    return pytest.importorskip("tilelang", reason="tilelang not installed: TileLang lowering checks skipped")


@functools.lru_cache(maxsize=None)
def lowered(arch: str, cand: str) -> dict[str, str]:
    """{kernel name: CUDA C} for the plan's default tiles."""
    from leantile.lower import lower_to_cuda

    mod = load_module(source_of(arch, cand), f"{arch}_{cand}".replace("+", "_"))
    return {name: lower_to_cuda(f, arch="sm_90") for name, f in mod.build_kernel().items()}


def test_builtin_coverage():
    assert set(SIZES) == set(A.NAMES)
    for a, sz in SIZES.items():  # at least one axis is not a multiple of 64
        assert any(v % 64 for v in sz.values()), a


# -- emission alone (no TileLang needed) ----------------------------------------------

@pytest.mark.parametrize("arch,cand", CASES, ids=_ids(CASES))
def test_emitted_source_is_python_and_names_buffers_after_the_graph(arch, cand):
    plan, src = plan_of(arch, cand), source_of(arch, cand)
    tree = ast.parse(src)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"build_kernel", "get_configs", "run", "allocate"} <= defs
    assert {k.name for k in plan.kernels} <= defs  # one factory per kernel, named after it
    idents = set(re.findall(r"\b\w+\b", src))
    for k in plan.kernels:
        for b in k.buffers:  # on-chip buffers keep the plan's (graph-derived) names
            if b.scope != "global":
                assert b.name in idents or f"{b.name}_frag" in idents or f"{b.name}_smem" in idents, (k.name, b.name)
    for g in plan.globals:  # prim_func parameters are the global buffers
        assert re.search(rf"\b{re.escape(g.name)}: T\.Tensor\(", src), g.name


def test_names_follow_graph_nodes():
    src = source_of("attention", "online_exp2")
    for name in ("red_max_4", "red_sum_7", "matmul_3", "exp_6", "Q_shared", "K_shared", "V_shared"):
        assert re.search(rf"\b{name} = T\.alloc_(shared|fragment)\(", src), name
    # the output tensor and the accumulator share a name in the plan: the local one is renamed
    assert "matmul_9: T.Tensor(" in src and "matmul_9_frag = T.alloc_fragment(" in src
    assert "def flash_9(" in src
    src = source_of("rmsnorm", "stats_fused")
    assert "matmul_10_frag" in src and "rsqrt_8" in src and "def gemm_10(" in src


def test_module_tables_describe_launch_order_and_globals():
    for arch, cand in [("attention", "unfused"), ("layernorm_linear_gelu", "stats_fused+colsum_precomputed")]:
        plan = plan_of(arch, cand)
        ns: dict = {}
        # the tables are plain literals: evaluate them without importing tilelang
        for node in ast.parse(source_of(arch, cand)).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                    node.targets[0].id in ("GLOBALS", "KERNELS", "OUTPUTS", "AXES", "TILE_PARAMS"):
                ns[node.targets[0].id] = ast.literal_eval(node.value)
        assert [k["name"] for k in ns["KERNELS"]] == [k.name for k in plan.kernels]
        assert ns["OUTPUTS"] == plan.outputs
        kinds = {g["name"]: g["kind"] for g in ns["GLOBALS"]}
        assert set(kinds) == {g.name for g in plan.globals}
        for g in ns["GLOBALS"]:
            assert g["shape"] == tuple(plan.axes[a] for a in g["axes"])
            # intermediates in the graph's dtype, except row statistics and f16 values the graph does
            # not round (attention's scores, exp: issue 46), kept float32 (the plan says why)
            wide = plan.global_buffer(g["name"]).why is not None
            assert g["dtype"] == ("float32" if wide else "float16"), g["name"]
            assert wide == (g["kind"] == "intermediate" and plan.global_buffer(g["name"]).dtype == "acc")
        written = set()
        for k in ns["KERNELS"]:  # a kernel reads only what an earlier one wrote, or an input
            for r in k["reads"]:
                assert kinds[r] == "input" or r in written, (k["name"], r)
            written |= set(k["writes"])
        assert set(plan.outputs.values()) <= written


def test_partial_tiles_mask_reductions():
    src = source_of("attention", "online_exp2")  # t_kv = 200, block_n = 128
    assert "pad_t_kv = size_t_kv % block_n != 0" in src
    # padded key columns never win the max (a Mask from the plan, or the masked reduction)
    assert re.search(r"T\.if_then_else\(k \* block_n \+ j < size_t_kv, matmul_3\[i, j\], -T\.infinity", src)
    assert "T.reduce_max(matmul_3, red_max_4, dim=1, clear=False)" in src
    # padded columns of exp_6 are left out of the row sum when the last tile is partial (in
    # every copy of the body: the overlapped schedule's first key block is k = 0)
    # (only the stream's last key block can be partial: the others reduce exp_6 itself)
    assert re.search(r"if pad_t_kv:\n\s+if k == T\.ceildiv\(size_t_kv, block_n\) - 1:.*\n.*\n.*\n"
                     r"\s+exp_6_masked\w*\[i, j\] = T\.if_then_else\(k \* block_n \+ j < size_t_kv, "
                     r"exp_6\[i, j\], 0\.0\)\n.*\n\s+else:\n\s+T\.reduce_sum\(exp_6, red_sum_7", src)
    src = source_of("rmsnorm", "stats_fused")  # d = 200 streamed by block_k = 64
    assert "pad_d = size_d % block_k != 0" in src
    assert "T.if_then_else(k * block_k + j < size_d, sum_square_X_terms[i, j], 0.0)" in src


def test_emit_plan_to_dir(tmp_path):
    path = emit_plan_to_dir(plan_of("matmul", "direct"), tmp_path / "matmul")
    assert path == tmp_path / "matmul" / "direct.py"
    assert path.read_text() == source_of("matmul", "direct")
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left


# -- TileLang lowering (CPU only) -------------------------------------------------------

@pytest.mark.parametrize("arch,cand", CASES, ids=_ids(CASES))
def test_every_candidate_lowers_for_sm90(arch, cand):
    _tilelang()
    from leantile.lower import hopper_features

    plan = plan_of(arch, cand)
    srcs = lowered(arch, cand)
    assert list(srcs) == [k.name for k in plan.kernels]
    for k in plan.kernels:
        cu = srcs[k.name]
        assert f"{k.name}_kernel" in cu
        feats = hopper_features(cu)
        if any(isinstance(s, Gemm) for s in k.statements()):
            assert feats["wgmma"], (k.name, feats["markers"])
            assert not feats["mma_sync"], k.name
            # GEMM operands copied without a dtype change are TMA loads
            same_dtype = [s for s in k.statements() if isinstance(s, Load)
                          and plan.global_buffer(s.src).dtype == k.buffer(s.dst).dtype]
            if same_dtype and k.stream:
                assert feats["tma"], (k.name, feats["markers"])


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_tile_params_override_and_configs():
    _tilelang()
    from leantile.lower import lower_to_cuda

    mod = load_module(source_of("swiglu", "fused"), "swiglu_fused_cfg")
    cfgs = mod.get_configs()
    assert cfgs[0] == mod.TILE_PARAMS and 2 <= len(cfgs) <= 14
    assert all(set(c) == set(mod.TILE_PARAMS) for c in cfgs)
    with pytest.raises(TypeError):
        mod.build_kernel(block_q=64)
    alt = next(c for c in cfgs if c["block_m"] == 64)
    cu = lower_to_cuda(mod.build_kernel(**alt)["gemm_3_5"])
    assert "tl::wgmma" in cu
    # every config offered for flash attention lowers (FullRow GEMMs limit warps to block_m/16)
    mod = load_module(source_of("attention", "online_exp2"), "attention_cfg")
    for cfg in mod.get_configs():
        assert "tl::wgmma" in lower_to_cuda(mod.build_kernel(**cfg)["flash_9"]), cfg


@pytest.mark.parametrize("arch,cand", [("layernorm_linear_gelu", "stats_separate+colsum_precomputed")])
def test_reduction_kernels_take_their_own_row_block(arch, cand):
    """block_r sizes the grid of the column-sum kernel, not of the GEMM: every block_r the
    search may pick lowers, and the GEMM's launch does not change with it. (The row-statistics
    kernel's tiles are fixed from the shape: test_row_statistics_kernels_fill_the_gpu.)"""
    _tilelang()
    from leantile.lower import lower_to_cuda

    mod = load_module(source_of(arch, cand), f"{arch}_{cand}_block_r".replace("+", "_"))
    assert any(c.get("block_r") == 16 for c in mod.get_configs())
    gemm = [k["name"] for k in mod.KERNELS if k["name"].startswith("gemm")]
    reductions = [k["name"] for k in mod.KERNELS if k["name"] not in gemm]
    assert reductions and gemm
    for r in (16, 64):
        kernels = mod.build_kernel(block_r=r)
        for name in reductions:
            cu = lower_to_cuda(kernels[name], arch="sm_90")
            assert f"{name}_kernel" in cu, (name, r)
    assert "T.Kernel(T.ceildiv(size_n, block_r)" in source_of(arch, cand)  # column sums: n / block_r CTAs
    g16, g64 = (mod.build_kernel(block_r=r)[gemm[0]].script() for r in (16, 64))
    assert g16 == g64


def _nvcc_available() -> bool:
    from leantile.lower import nvcc_path

    return nvcc_path() is not None


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_representative_kernels_compile_with_nvcc():
    _tilelang()
    if not _nvcc_available():
        pytest.skip("nvcc not found: CUDA compile check skipped")
    from leantile.lower import compile_cuda

    jobs = [(f"{a}/{c}/{name}", cu) for a, c in NVCC_CASES for name, cu in lowered(a, c).items()]
    with ThreadPoolExecutor(max_workers=2) as ex:  # nvcc is a subprocess: threads overlap it
        cubins = list(ex.map(lambda j: compile_cuda(j[1], arch="sm_90a"), jobs))
    for (name, _), cubin in zip(jobs, cubins):
        assert len(cubin) > 1000, name


def test_generated_file_imports(tmp_path):
    _tilelang()
    path = emit_plan_to_dir(plan_of("rmsnorm", "stats_separate"), tmp_path)
    spec = importlib.util.spec_from_file_location("rmsnorm_stats_separate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert list(mod.build_kernel()) == ["row_stats_10", "gemm_10"]


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
def test_random_graphs_lower():
    """A sample of random graphs (vectors, scalars, softmax/norm chains, matmuls) at sizes
    from 64 to ~250: every candidate's kernels emit and lower."""
    _tilelang()
    from hypothesis import HealthCheck, assume, given, settings, strategies as st
    from strategies import random_graphs

    from leantile.derive import DerivationError
    from leantile.lower import lower_to_cuda

    @settings(max_examples=examples(8), deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(random_graphs(max_ops=6), st.sampled_from([64, 96, 200]))
    def check(g, base):
        g = g.model_copy(update={"axes": {a: base + 16 * n for n, a in enumerate(g.axes)}})
        try:
            plans = [derive(g, c.name) for c in candidates(g)]
        except DerivationError:
            assume(False)
        for plan in plans:
            mod = load_module(emit_module(plan), "random_graph")
            for name, f in mod.build_kernel().items():
                assert f"{name}_kernel" in lower_to_cuda(f), (plan.candidate, name)

    check()


def test_kernels_command_writes_modules_cuda_and_index(tmp_path):
    _tilelang()
    import json

    from leantile.cli.kernels import build_kernels

    lines: list[str] = []
    index = build_kernels(["matmul"], tmp_path, {"m": 200, "d": 256, "n": 256}, log=lines.append)
    assert json.loads((tmp_path / "index.json").read_text()) == index
    (entry,) = index["candidates"]
    assert entry["arch"] == "matmul" and entry["candidate"] == "direct" and entry["lowered"] is True
    assert entry["kernels"] == [{"name": "gemm_2", "role": "GEMM over d"}]
    assert entry["hopper"]["gemm_2"]["wgmma"] and entry["hopper"]["gemm_2"]["tma"]
    assert (tmp_path / "matmul" / "direct.py").exists()
    assert "gemm_2_kernel" in (tmp_path / "matmul" / "direct.cu").read_text()


@pytest.mark.slow  # make test runs it; make test-fast does not (two builds of four candidates)
def test_kernels_command_lowers_in_worker_processes_as_in_one(tmp_path, monkeypatch):
    """`leantile kernels` lowers its candidates in spawned processes, one per core (cli.kernels.
    _lower_all): the same index, modules and CUDA C as lowered one after another here, in the
    candidates' order, with a failing candidate recorded in place."""
    _tilelang()
    import os

    from leantile.cli import kernels

    src, sizes = "rmsnorm", {"m": 3, "d": 70, "n": 40}
    pooled, lines = kernels.build_kernels([src], tmp_path / "pool", sizes, log=[].append), []
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    alone = kernels.build_kernels([src], tmp_path / "one", sizes, log=lines.append)
    drop = lambda index: [{k: v for k, v in e.items() if k != "seconds"} for e in index["candidates"]]  # noqa: E731
    assert len(pooled["candidates"]) >= 3 and drop(pooled) == drop(alone)
    assert all(e["lowered"] for e in alone["candidates"]), lines
    for e in alone["candidates"]:
        for suffix in (".py", ".cu"):
            f = e["module"].removesuffix(".py") + suffix
            assert (tmp_path / "pool" / f).read_text() == (tmp_path / "one" / f).read_text(), f
    assert [ln.split(":")[0] for ln in lines[:-1]] == [f"rmsnorm/{e['candidate']}" for e in alone["candidates"]]


class _FakePool:
    """A ProcessPoolExecutor stand-in that runs each job here; the job at index `broken` fails as
    when its worker process dies (every later one too: a broken pool stays broken)."""
    broken: int | None = None

    def __init__(self, **_kw):
        self.n, self._processes = 0, {}

    def submit(self, fn, *args):
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool
        f, i = Future(), self.n
        self.n += 1
        if self.broken is not None and i >= self.broken:
            f.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
        else:
            f.set_result(fn(*args))
        return f

    def shutdown(self, wait=True, cancel_futures=False):
        pass


@pytest.mark.slow  # make test runs it; make test-fast does not (two builds of four candidates)
def test_kernels_command_survives_a_dead_worker_and_a_machine_without_processes(tmp_path, monkeypatch):
    """A worker killed mid-lowering (out of memory, a crash in TileLang) breaks the pool: the
    candidates it left are recorded as not lowered, with the reason, and the rest of the index
    is written (the command then exits 1, as for any candidate that fails to lower). Where no
    process can be started (a sandbox), the candidates are lowered in the command's process."""
    _tilelang()
    import concurrent.futures
    import os

    from leantile.cli import kernels

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(_FakePool, "broken", 2)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _FakePool)
    index = kernels.build_kernels(["rmsnorm"], tmp_path / "a", {"m": 3, "d": 70, "n": 40}, log=[].append)
    got = [(e["lowered"], e["error"]) for e in index["candidates"]]
    assert got[:2] == [(True, None)] * 2 and len(got) >= 3, got
    assert all(g == (False, f"LoweringError: {kernels.WORKER_DIED}") for g in got[2:]), got

    def no_processes(**_kw):
        raise OSError(38, "Function not implemented")  # sem_open where no /dev/shm is mounted
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_processes)
    index = kernels.build_kernels(["rmsnorm"], tmp_path / "b", {"m": 3, "d": 70, "n": 40}, log=[].append)
    assert [e["lowered"] for e in index["candidates"]] == [True] * len(got)
