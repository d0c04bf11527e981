"""TileLang -> CUDA C -> cubin, on a machine without a GPU.

Used by the emitter tests and CI: a kernel that lowers and compiles here is one
that the GPU run will not reject for codegen reasons. Verified against
TileLang 0.1.15 and nvcc 13.0 (see docs/tilelang-notes.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .target import DEFAULT

__all__ = ["LoweringError", "lower_to_cuda", "compile_cuda", "hopper_features", "nvcc_path",
           "include_flags"]


class LoweringError(RuntimeError):
    """TileLang could not lower a kernel, or nvcc rejected the generated CUDA."""


def lower_to_cuda(func: Any, arch: str = DEFAULT.arch, pass_configs: dict | None = None, info: dict | None = None,
                  repair: bool = True) -> str:
    """Return the device CUDA C source TileLang generates for ``func``.

    ``func`` is a ``T.prim_func`` (or an IRModule), or an already compiled
    ``JITKernel`` whose source is returned as is. ``arch`` "sm_90" and "sm_90a"
    give identical source; "sm_80" gives the cp.async + mma.sync path.
    ``pass_configs`` are TileLang pass options, e.g.
    ``{"tl.disable_warp_specialized": True}`` (see tilelang.PassConfigKey). ``info`` (a dict)
    receives "shared_bytes": the dynamic shared memory TileLang allocated (its
    `dyn_shared_memory_buf`, 0 where none), what plan.verify.shared_bytes estimates, and "grid":
    the launch's (gridDim.x, .y, .z). ``repair=False`` returns TileLang's own source, without
    leantile.codegen_repair (to count what the repair changes; never compiled for a GPU).
    """
    if hasattr(func, "get_kernel_source"):  # JITKernel from tilelang.compile / @tilelang.jit
        return func.get_kernel_source()
    import tilelang
    from tilelang import tvm
    from tvm.target import Target

    # An explicit target avoids "auto", which probes for a GPU. Lowering passes
    # read Target.current(), so the target must also be entered as a context,
    # and opt_level=3 matches what tilelang.compile uses.
    target = Target({"kind": "cuda", "arch": arch})
    from .codegen_nan import nan_dropping_extrema
    from .codegen_repair import install, stale_ssa_uses, unfenced_releases, uninstall
    from .codegen_retire import unretired_releases
    (install if repair else uninstall)()  # repaired: the source the GPU path compiles
    try:
        with tvm.transform.PassContext(opt_level=3, config=pass_configs or {}), target:
            artifact = tilelang.lower(func, target=target)
    except Exception as e:  # TVM raises its own error types; keep the useful last lines
        lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.lstrip().startswith("File ")]
        raise LoweringError("TileLang lowering failed: " + "\n".join(lines[-6:])) from e
    finally:
        install()
    if info is not None:
        device = str(artifact.device_mod)
        found = re.search(r'"dyn_shared_memory_buf": (\d+)', device)
        info["shared_bytes"] = int(found.group(1)) if found else 0
        # the launch's gridDim (x, y, z): what CUDA bounds by 2^31 - 1, 65535, 65535 (plan.GRID_X_MAX)
        info["grid"] = tuple(max([int(n) for n in re.findall(rf'"blockIdx\.{d}": (\d+)', device)] or [1])
                             for d in "xyz")
    stale = stale_ssa_uses(artifact.kernel_source) if repair else []
    if stale:  # the repair missed a case: a kernel that would compute a wrong value
        raise LoweringError("internal error: stale cached vector load after codegen_repair: " + "; ".join(map(str, stale[:3])))
    dropping = nan_dropping_extrema(artifact.kernel_source) if repair else []
    if dropping:  # a max or min that returns the other operand where one is NaN (torch's propagate it)
        raise LoweringError(f"internal error: a max or min that drops NaN after codegen_repair, lines {dropping[:3]}")
    unfenced = unfenced_releases(artifact.kernel_source) if repair else []
    if unfenced:  # a TMA stage released with no proxy fence: a race with a generic-proxy consumer
        raise LoweringError(f"internal error: pipeline stage released without a proxy fence after codegen_repair, lines {unfenced[:3]}")
    unretired = unretired_releases(artifact.kernel_source) if repair else []
    if unretired:  # a stage handed back to the producer while a wgmma may still read it
        raise LoweringError(f"internal error: pipeline stage released before its wgmma retired after codegen_repair, lines {unretired[:3]}")
    return artifact.kernel_source


def nvcc_path() -> str | None:
    """nvcc from PATH, else CUDA_HOME/bin, else /usr/local/cuda/bin."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def include_flags() -> list[str]:
    """-I flags for the headers TileLang's source includes (shipped in the wheel).

    <tl_templates/cuda/...> lives in tilelang/src, CuTe/CUTLASS in
    tilelang/3rdparty/cutlass/include; tilelang.env resolves both at import.
    """
    from tilelang import env

    return [f"-I{env.TILELANG_TEMPLATE_PATH}", f"-I{env.CUTLASS_INCLUDE_DIR}"]


def compile_cuda(source: str, arch: str = DEFAULT.arch_features, out: str | Path | None = None, report: list | None = None,
                 flags: list[str] | None = None, ptx: bool = False) -> bytes:
    """Compile TileLang CUDA source to a cubin with nvcc; return its bytes.

    The Hopper path needs sm_90a, not sm_90: warp-specialised kernels call
    setmaxnreg (tl::warpgroup_reg_alloc) and wgmma, which static_assert on plain
    sm_90. If ``out`` is given the cubin is also written there. With ``report`` (a list), ptxas
    runs verbose and its lines are appended: registers, spills, and warnings such as C7514
    (wgmma serialised: accumulator registers touched while in flight). ``flags``: the kernel's own
    nvcc flags beyond these (an emitted module's NVCC_FLAGS[kernel], e.g. -ftz=true). ``ptx``: the
    PTX text's bytes instead of a cubin (what nvcc asked ptxas to do: a mul/add without .rn may
    still be contracted there).
    """
    nvcc = nvcc_path()
    if nvcc is None:
        raise LoweringError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    cc = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory(prefix="leantile_nvcc_") as tmp:
        cu, cubin = Path(tmp, "kernel.cu"), Path(tmp, "kernel.ptx" if ptx else "kernel.cubin")
        cu.write_text(source)
        # Same flags as tilelang/cuda/backend.py (C++20 is required by
        # tl_templates/cuda/reduce.h); -w hides the hundreds of header warnings.
        cmd = [nvcc, "-ptx" if ptx else "-cubin", "-O3", "-std=c++20", "-w",
               f"-gencode=arch=compute_{cc},code=sm_{cc}", *include_flags(), *(flags or ()),
               *(["-Xptxas", "-v"] if report is not None else []), "-o", str(cubin), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not cubin.exists():
            text = (proc.stderr or "") + (proc.stdout or "")
            errs = [ln for ln in text.splitlines() if "error" in ln.lower()] or text.splitlines()
            raise LoweringError(f"nvcc failed (rc={proc.returncode}) for {arch}:\n" + "\n".join(errs[:8]))
        data = cubin.read_bytes()
        if report is not None:
            report += [ln for ln in (proc.stderr or "").splitlines() if "ptxas" in ln or "spill" in ln]
    if out is not None:
        Path(out).write_bytes(data)
    return data


# Strings TileLang 0.1.15 emits (tl_templates/cuda/copy_sm90.h, instruction/wgmma.h).
_MARKERS = {
    "tma": ("tl::tma_load", "tl::tma_store", "CUtensorMap"),
    "wgmma": ("tl::wgmma_ss", "tl::wgmma_rs", "initialize_wgmma_descriptor"),
    # producer/consumer warpgroups with register rebalancing (automatic for T.Pipelined + TMA)
    "warp_specialized": ("tl::warpgroup_reg_alloc", "tl::warpgroup_reg_dealloc"),
    "mbarrier": ("mbarrier",),
    # the pre-Hopper path (sm_80, or when TMA/wgmma do not apply)
    "cp_async": ("tl::cp_async_gs",),
    "mma_sync": ("tl::mma_sync",),
}


def hopper_features(source: str) -> dict:
    """Which Hopper mechanisms the generated source uses, plus the matched markers."""
    found = {k: [m for m in ms if m in source] for k, ms in _MARKERS.items()}
    report: dict[str, Any] = {k: bool(v) for k, v in found.items()}
    report["markers"] = {k: v for k, v in found.items() if v}
    return report
