"""leantile.codegen_repair's second repair: a warp-specialised TMA pipeline whose consumer reads a
stage with ordinary loads releases it with no proxy fence, and the next TMA load can overwrite it
before those reads are performed (issue 46: decode attention at t_kv = d_h = 8192 was 1-3% off on
an H200, differently on every run; `fence.proxy.async` before the release made it exact).

Checked on hand-written CUDA in the shape TileLang prints, and on the real kernels of the class
(decode attention's SIMT GEMMs, lowered raw and repaired): every release of a TMA kernel is
fenced after the repair, none before, nothing else changes, and nvcc compiles the result."""

from leantile.codegen_repair import fence_stage_releases, unfenced_releases

HEAD = ('extern "C" __global__ void __launch_bounds__(256, 1) k(__grid_constant__ const CUtensorMap K_desc, '
        "float* __restrict__ out) {\n")
# the shape of the failing kernel: producer TMA loads + arrive_and_expect_tx, consumer reads and a plain arrive
PIPELINE = HEAD + """  if (((int)threadIdx.x) < 128) {
    for (int ks = 0; ks < 64; ++ks) {
      mbarrier[((ks & 3) + 4)].wait((((ks & 7) >> 2) ^ 1));
      if (tl::tl_shuffle_elect<128>()) {
        mbarrier[(ks & 3)].arrive_and_expect_tx(16384);
        tl::tma_load(K_desc, mbarrier[(ks & 3)], (&(((half_t*)K_shared)[((ks & 3) * 8192)])), (ks * 64), 0, 0);
      }
    }
  } else {
    for (int ks_1 = 0; ks_1 < 64; ++ks_1) {
      mbarrier[(ks_1 & 3)].wait(((ks_1 & 7) >> 2));
      acc = acc + ((float)((half_t*)K_shared)[(ks_1 & 3) * 8192 + ((int)threadIdx.x)]);
      mbarrier[((ks_1 & 3) + 4)].arrive();
    }
    out[((int)threadIdx.x)] = acc;
  }
}
"""


def test_a_tma_pipelines_stage_release_is_found_and_fenced():
    assert unfenced_releases(PIPELINE) == [PIPELINE.splitlines().index("      mbarrier[((ks_1 & 3) + 4)].arrive();") + 1]
    fixed = fence_stage_releases(PIPELINE)
    assert unfenced_releases(fixed) == []
    lines = fixed.splitlines()
    at = lines.index("      mbarrier[((ks_1 & 3) + 4)].arrive();")
    assert lines[at - 1] == "      tl::fence_proxy_async();"
    # nothing but the one fence added: the producer's arrive_and_expect_tx is not a release
    assert [ln for ln in lines if ln not in PIPELINE.splitlines()] == ["      tl::fence_proxy_async();"]
    assert fence_stage_releases(fixed) == fixed  # idempotent: a repaired kernel is left alone


def test_kernels_without_tma_loads_are_left_alone():
    # cp.async writes through the generic proxy: the arrive's release is enough there
    no_tma = PIPELINE.replace("tl::tma_load(K_desc, mbarrier[(ks & 3)], ", "tl::cp_async_gs<16>(")
    assert unfenced_releases(no_tma) == [] and fence_stage_releases(no_tma) == no_tma
    # two kernels in one source: only the one that issues TMA loads is fenced
    both = no_tma + PIPELINE.replace("void __launch_bounds__(256, 1) k(", "void __launch_bounds__(256, 1) k2(")
    assert len(unfenced_releases(both)) == 1 and unfenced_releases(both)[0] > len(no_tma.splitlines())


def _decode(h, t_kv, d_h):
    from leantile import dag

    def body(b):
        q = b.input("Q", ["h", "d_h"], "f16")
        k, v = (b.input(n, ["h", "t_kv", "d_h"], "f16") for n in ("K", "V"))
        return b.matmul(b.softmax(b.matmul(q, k, "d_h", "d_h"), "t_kv"), v, "t_kv", "t_kv")
    return dag.build_graph_with_output(f"decode_{h}_{t_kv}_{d_h}", {"h": h, "t_kv": t_kv, "d_h": d_h}, body)


def test_decode_attentions_simt_gemms_are_fenced_when_lowered():
    """The class on real kernels: decode attention's score and P V GEMMs (one query row: SIMT,
    a TMA producer and a consumer reading shared memory with ordinary loads), at sizes that do
    not divide the tiles; lowered raw they release unfenced, lowered as shipped every release is
    fenced, and the repaired source compiles."""
    from leantile.derive import candidates, derive
    from leantile.emit import emit_module
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    from leantile.runtime import emitted_module

    g = _decode(3, 1000, 520)
    funcs = {}
    for c in candidates(g):  # the GEMM kernels of every plan (on chip, split softmax, ...), each name once
        for name, f in emitted_module(emit_module(derive(g, c.name))).build_kernel(pdl=True).items():
            funcs.setdefault(name, f)
    gemms = [n for n in funcs if n.startswith("gemm_")]
    assert len(gemms) >= 2
    for name in gemms:
        raw, shipped = lower_to_cuda(funcs[name], repair=False), lower_to_cuda(funcs[name])
        assert "tma_load" in raw and unfenced_releases(raw), name  # the class: a TMA ring, released unfenced
        assert unfenced_releases(shipped) == [] and shipped == fence_stage_releases(shipped)
        assert shipped.count("tl::fence_proxy_async();") >= len(unfenced_releases(raw))
        if nvcc_path():
            assert compile_cuda(shipped, arch="sm_90a")[:4] == b"\x7fELF"
