"""Max and min that propagate NaN in every emitted kernel, as torch's do (a repair of TileLang's
CUDA source, applied by codegen_repair's post-processing hook with the others).

Why: torch.maximum, amax, clamp and relu return NaN where an operand is NaN, and so does
torch.compile (Inductor's maximum propagates it); the interpreter runs torch, so a plan's value is
NaN there too. TileLang 0.1.15 prints a float max as CUDA's `max(a, b)` (fmaxf) and reduces with
`tl::MaxOp` (`tl::fast_max`: fmaxf; its `MaxOpNan` too, for floats), which return the other
operand: a column max of values some of which were NaN (rsqrt of a negative) came back finite on
every candidate where the reference is NaN (GPU campaign seed 70, 2026-11-29,
benchmarks/results/gpu-fuzz-h200-2026-11-29-s70.json). A NaN that a max hides is how a diverging
training run goes unnoticed.

How: `propagate_nan` prefixes the source with `lt::max` / `lt::min` (float: PTX `max.NaN.f32`,
one instruction from sm_80, a test before; half and bfloat16: `__hmax_nan`; double: a test;
integers: CUDA's own) and `lt::MaxOp` / `lt::MinOp` (TileLang's AllReduce functor interface), then sends every
unqualified `max(` / `min(` call of the kernels, `tl::fast_max` / `fmaxf`, and TileLang's
reduction functors (`tl::MaxOp`, `tl::MaxOpNan`, the packed half ones) to them.
`nan_dropping_extrema` is the matching check (lower.lower_to_cuda runs it on every kernel, so CI
fails on a max that would drop a NaN). A use that must drop NaN says so in the plan's own terms
(emit.streams.runtime_offset tests the leaf itself).
"""
from __future__ import annotations

import re

__all__ = ["PRELUDE", "propagate_nan", "nan_dropping_extrema"]

MARK = "// leantile.codegen_nan: max / min propagate NaN"
PRELUDE = MARK + r"""
namespace lt {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ float max(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float min(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#else
__device__ __forceinline__ float max(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float min(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
#endif
__device__ __forceinline__ double max(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
__device__ __forceinline__ double min(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
__device__ __forceinline__ half_t max(half_t a, half_t b) { return half_t(__hmax_nan(a.to_half(), b.to_half())); }
__device__ __forceinline__ half_t min(half_t a, half_t b) { return half_t(__hmin_nan(a.to_half(), b.to_half())); }
__device__ __forceinline__ bfloat16_t max(bfloat16_t a, bfloat16_t b) { return bfloat16_t(__hmax_nan(a.to_nv_bfloat16(), b.to_nv_bfloat16())); }
__device__ __forceinline__ bfloat16_t min(bfloat16_t a, bfloat16_t b) { return bfloat16_t(__hmin_nan(a.to_nv_bfloat16(), b.to_nv_bfloat16())); }
template <typename A, typename B> __device__ __forceinline__ auto max(A a, B b) { return ::max(a, b); }
template <typename A, typename B> __device__ __forceinline__ auto min(A a, B b) { return ::min(a, b); }
struct MaxOp { template <typename T> __device__ __forceinline__ T operator()(T const &x, T const &y) { return lt::max(x, y); } };
struct MinOp { template <typename T> __device__ __forceinline__ T operator()(T const &x, T const &y) { return lt::min(x, y); } };
}  // namespace lt
"""

# an unqualified call max( / min( (not x.max(, p->max(, ns::max(, fmax(, __hmax()
_CALL = re.compile(r"(?<![\w:.>])(max|min)\s*\(")
_RENAMES = [
    (re.compile(r"\btl::fast_(max|min)\s*\("), r"lt::\1("),
    (re.compile(r"(?<![\w:.>])f(max|min)f?\s*\("), r"lt::\1("),
    (re.compile(r"\btl::(Max|Min)Op(?:Nan)?\b(?!_)"), r"lt::\1Op"),
    (re.compile(r"\btl::(Max|Min)Op_(fp16x2|bf16x2)\b"), r"tl::\1OpNan_\2"),
    (re.compile(r"(?<!\w)__h(max|min)(2?)\s*\("), r"__h\1\2_nan("),
]
# what still drops a NaN operand after the repair (outside the prelude)
_DROPPING = re.compile(r"(?<![\w:.>])(?:max|min|fmaxf?|fminf?)\s*\(|\btl::fast_(?:max|min)\b|\btl::(?:Max|Min)Op(?:Nan)?\b(?!_)"
                       r"|\btl::(?:Max|Min)Op_(?:fp16x2|bf16x2|f32x2)\b|\btl::(?:max|min)2\s*\(|__h(?:max|min)2?\s*\(")


def _body_start(lines: list[str]) -> int:
    """The index of the first line past the last #include and outside every #if block around
    it (the prelude goes there: after the types it names, compiled whatever is defined)."""
    depth, last, at = 0, -1, 0
    for i, ln in enumerate(lines):
        d = ln.lstrip()
        if d.startswith(("#if", "#ifdef", "#ifndef")):
            depth += 1
        elif d.startswith("#endif"):
            depth -= 1
        elif d.startswith("#include"):
            last = i
        if last >= 0 and depth == 0 and i >= last and at <= last:
            at = i + 1
    return at


def propagate_nan(source: str) -> str:
    """`source` with NaN-propagating max and min (see the module docstring); idempotent."""
    if MARK in source:
        return source
    lines = source.split("\n")
    at = _body_start(lines)
    body = "\n".join(lines[at:])
    body = _CALL.sub(r"lt::\1(", body)
    for pattern, repl in _RENAMES:
        body = pattern.sub(repl, body)
    return "\n".join([*lines[:at], PRELUDE, body])


def nan_dropping_extrema(source: str) -> list[int]:
    """1-based lines (outside the prelude) of a max or min that would drop a NaN operand."""
    found = []
    in_prelude = False
    for no, line in enumerate(source.split("\n"), 1):
        if line.startswith(MARK):
            in_prelude = True
        elif in_prelude and line.startswith("}  // namespace lt"):
            in_prelude = False
            continue
        if in_prelude:
            continue
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line).split("//", 1)[0]
        if _DROPPING.search(code):
            found.append(no)
    return found
