"""leantile.codegen_repair: TileLang 0.1.15 caches a vector load in a variable that no later store
invalidates (issue 46: three losses reduced to a scalar came back 2.3x-14000x off on an H100); the
repair reloads the variable after every statement that may write what it caches.

The scanner is checked on hand-written CUDA in the shape TileLang prints, and on the real kernel
that failed: lowered raw (the hook replaced by the identity) it reads the stale copy, repaired it
does not, and the repaired source is what lower_to_cuda returns and nvcc compiles."""
import re

import pytest

from leantile.codegen_nan import propagate_nan
from leantile.codegen_repair import refresh_stale_ssa, stale_ssa_uses

KERNEL_HEAD = ('extern "C" __global__ void __launch_bounds__(256, 1) k(float* __restrict__ out, '
               "const float* __restrict__ x) {\n"
               "  extern __shared__ __align__(1024) uchar buf_dyn_shmem[];\n"
               "  void* s = ((void*)((char*)buf_dyn_shmem + 0));\n"
               "  float a[4];\n  float b[4];\n")

# the failing pattern: log of a fragment in place, then a binary op reading it through the cache
IN_PLACE = KERNEL_HEAD + """  *(float4*)(a + 0) = *(float4*)(x + (((int)threadIdx.x) * 4));
  float4 __1;
  float4 v_ = *(float4*)(a + 0);
  __1.x = logf(v_.x);
  __1.y = logf(v_.y);
  *(float4*)(a + 0) = __1;
  float4 __2;
    float4 v__1 = *(float4*)(b + 0);
    __2.x = (v__1.x+v_.x);
  *(float4*)(out + 0) = __2;
}
"""


def _refreshes(src: str) -> list[str]:
    return [ln.strip() for ln in src.splitlines() if "leantile: refresh" in ln]


def test_in_place_update_then_cached_read_is_found_and_repaired():
    stale = stale_ssa_uses(IN_PLACE)
    assert [(s.var, s.expr) for s in stale] == [("v_", "*(float4*)(a + 0)")]
    fixed = refresh_stale_ssa(IN_PLACE)
    assert stale_ssa_uses(fixed) == []
    lines = fixed.splitlines()
    store = next(i for i, ln in enumerate(lines) if ln.strip() == "*(float4*)(a + 0) = __1;")
    assert lines[store + 1].strip().startswith("v_ = *(float4*)(a + 0);")  # reloaded right after the store


def test_writes_to_other_storage_leave_a_local_cache_alone():
    # b and the result temporaries are written; v_ caches a: nothing to reload
    src = KERNEL_HEAD + """  float4 __1;
  float4 v_ = *(float4*)(a + 0);
  __1.x = expf(v_.x);
  *(float4*)(b + 0) = __1;
  *(float4*)(out + 0) = *(float4*)(b + 0);
  __syncthreads();
  __1.y = (v_.y * 2.0f);
}
"""
    assert stale_ssa_uses(src) == []
    assert _refreshes(refresh_stale_ssa(src)) == []


def test_cache_of_shared_memory_is_reloaded_after_a_barrier_and_a_store():
    src = KERNEL_HEAD + """  float4 __1;
  float4 v_ = *(float4*)(((float*)s) + (((int)threadIdx.x) * 4));
  __1.x = expf(v_.x);
  __syncthreads();
  ((float*)s)[((int)threadIdx.x)] = 1.0f;
  __1.y = expf(v_.y);
}
"""
    assert {s.var for s in stale_ssa_uses(src)} == {"v_"}
    fixed = refresh_stale_ssa(src)
    assert len(_refreshes(fixed)) == 2  # after the barrier and after the store
    assert stale_ssa_uses(fixed) == []


def test_a_write_late_in_a_loop_stales_the_next_iterations_first_read():
    src = KERNEL_HEAD + """  float4 __1;
  float4 v_ = *(float4*)(a + 0);
  for (int k = 0; k < 4; ++k) {
    __1.x = (v_.x + 1.0f);
    a[0] = __1.x;
  }
}
"""
    stale = stale_ssa_uses(src)
    assert len(stale) == 1 and stale[0].var == "v_" and "__1.x = (v_.x" in src.splitlines()[stale[0].line - 1]
    fixed = refresh_stale_ssa(src)
    assert stale_ssa_uses(fixed) == []
    body = fixed[fixed.index("for (int k"):]
    assert re.search(r"a\[0\] = __1\.x;\n\s*v_ = \*\(float4\*\)\(a \+ 0\);", body)


def test_a_variable_ends_with_its_block():
    src = KERNEL_HEAD + """  if (((int)threadIdx.x) < 8) {
    float4 __1;
    float4 v_ = *(float4*)(a + 0);
    __1.x = expf(v_.x);
  }
  a[0] = 2.0f;
}
"""
    assert _refreshes(refresh_stale_ssa(src)) == []  # v_ is out of scope at the store


# ------------------------------------------------------------------ the kernel that failed
tilelang = pytest.importorskip("tilelang", reason="tilelang is not installed")


def _cross_entropy(b, c):
    from loss_graphs import cross_entropy  # tests/loss_graphs.py: the losses as a user writes them
    return cross_entropy(b, c)


def _raw_and_repaired(func):
    from leantile.lower import lower_to_cuda
    return lower_to_cuda(func, repair=False), lower_to_cuda(func)


def test_the_cross_entropy_kernel_that_failed_on_the_gpu():
    from leantile.cost import choose
    from leantile.emit import emit_module
    from leantile.lower import compile_cuda, nvcc_path
    from leantile.runtime import emitted_module
    plan = choose(_cross_entropy(32768, 64))[0]
    streamed = [k for k in plan.kernels if k.stream is not None and k.stream.axis == "b"]
    assert streamed, [k.name for k in plan.kernels]  # the one-CTA reduction of b into the 0-d loss
    mod = emitted_module(emit_module(plan))
    raw, repaired = _raw_and_repaired(mod.build_kernel(pdl=True)[streamed[0].name])
    stale = stale_ssa_uses(raw)
    assert stale and all(s.var.startswith("v_") for s in stale)  # log(sum) read back as sum
    assert stale_ssa_uses(repaired) == [] and _refreshes(repaired)
    assert repaired == propagate_nan(refresh_stale_ssa(raw))  # and max / min propagate NaN (codegen_nan)
    if nvcc_path():
        assert compile_cuda(repaired, arch="sm_90a")[:4] == b"\x7fELF"


def test_emitted_modules_install_the_repair_and_key_the_cache_on_it():
    from leantile.codegen_repair import MARKER_FLAG
    from leantile.cost import choose
    from leantile.emit import emit_module
    src = emit_module(choose(_cross_entropy(1000, 7))[0])
    compile_fn = src[src.index("def compile_kernel("):]
    compile_fn = compile_fn[:compile_fn.index("\ndef ")]
    assert "install()" in compile_fn and "MARKER_FLAG" in compile_fn
    every = src[src.index("def compile_kernels("):]
    assert "compile_kernel(name" in every[:every.index("\ndef ")]  # every kernel through it
    assert MARKER_FLAG.startswith("-D")


def _chain(n: int) -> str:
    """n in-place updates of a, each through its own cached load, read only before its store
    (the shape TileLang prints for a fused chain of n elementwise ops)."""
    body = "".join(f"  float4 __{i};\n  float4 v__{i} = *(float4*)(a + 0);\n  __{i}.x = (v__{i}.x*-1.0f);\n"
                   f"  *(float4*)(a + 0) = __{i};\n" for i in range(1, n + 1))
    return KERNEL_HEAD + body + "  *(float4*)(out + 0) = *(float4*)(a + 0);\n}\n"


def test_a_cache_never_read_again_is_not_refreshed():
    """A refresh after a variable's last read is dead code: emitted after every write, a chain of
    n in-place updates got n^2 of them (a 500-op fused chain: 10.7 MB of CUDA, 36 s to lower).
    The chain needs none; a variable read again after the writes keeps its refresh."""
    src = _chain(300)
    fixed = refresh_stale_ssa(src)
    assert _refreshes(fixed) == [] and stale_ssa_uses(fixed) == []
    assert len(stale_ssa_uses(src)) == 0  # nothing read stale: nothing to repair
    read_late = src.replace("  *(float4*)(out + 0) = *(float4*)(a + 0);\n", "  out[0] = v__1.y;\n")
    assert [s.var for s in stale_ssa_uses(read_late)] == ["v__1"]
    fixed = refresh_stale_ssa(read_late)
    assert stale_ssa_uses(fixed) == [] and len(_refreshes(fixed)) == 300  # v__1 after each write


def test_a_long_fused_chain_lowers_to_linear_size_cuda():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile import dag
    from leantile.derive import derive
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda

    def body(g):
        x = g.input("X", ["m", "d"])
        for _ in range(200):
            x = g.neg(x)
        return x
    plan = derive(dag.build_graph_with_output("chain", {"m": 1024, "d": 1024}, body), "fused")
    mod = load_module(emit_module(plan), "neg_chain")
    # (cut into kernels of at most MAX_REGION_OPS nodes: derive.rules.regions)
    size = sum(len(lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name)))
               for name, f in mod.build_kernel().items())
    assert size < 1000 * 200, size  # 1.8 MB before (n^2 refreshes in one kernel), under 100 KB now
