"""Repair of TileLang 0.1.15's stage release after an asynchronous wgmma: a release is moved to
where every wgmma issued before it has retired.

TileLang pipelines a T.Pipelined loop whose copies can use TMA as a producer warp group and
consumers that release each stage (`mbarrier[s].arrive();`) right after the statement that last
reads it. For a synchronous `T.gemm` that is right: its `warpgroup_wait<0>()` comes first. For an
asynchronous one (`T.wgmma_gemm`, whose wait the kernel places later with `T.wait_wgmma`), the
release lands between the issue and the wait: the producer may then load the next block into the
stage while the tensor cores still read it (a write-after-read race; emit.overlap's comment on the
same behaviour). The attention backward's kernels issue their GEMMs asynchronously so that the
softmax's recomputation runs while the next GEMM does (emit.kernel, `async_gemms`).

`retire_before_release` moves every release issued while some wgmma group is outstanding to just
after the first `wait<0>` that follows it, at the release's own brace depth (after the block that
holds the wait closes). Moving a release later is always safe for the values (the producer only
waits longer) and cannot deadlock as long as it stays in the same loop iteration: the producer
fills this iteration's other stages from releases of earlier iterations. A release with no such
wait before its own block ends is left where it is and reported by `unretired_releases`, which
lower.lower_to_cuda runs on every kernel (a kernel that would race is an internal error).

Groups are counted by `warpgroup_commit_batch()`; `warpgroup_wait<N>()` / `wait_wgmma<N>()` leave
at most N outstanding. A loop whose body ends with groups outstanding is counted conservatively:
its body starts with them outstanding too.
"""
from __future__ import annotations

import re

from .codegen_lines import code as _code, kernel_ranges as _kernels

__all__ = ["retire_before_release", "unretired_releases"]

# a stage release of TileLang's own pipeline (its barriers are the array `mbarrier`); the barriers an
# emitter names itself (emit.overlap's k_free, v_free) are released where that emitter decided, after
# the wgmma reading the stage has retired: emit.overlap releases K after wait<1> while P V (which
# reads V, not K) still runs, which a count of groups alone cannot tell from a race
_RELEASE = re.compile(r"^(?P<indent>\s*)mbarrier\[[^\]]*\]\.arrive\(\);\s*$")

_COMMIT = re.compile(r"\bwarpgroup_commit_batch\(\)")
_WAIT = re.compile(r"\b(?:warpgroup_wait|wait_wgmma)<(\d+)>\(\)")
_LOOP = re.compile(r"^\s*for\s*\(")


def _effect(line: str, outstanding: int) -> int:
    code = _code(line)
    for m in re.finditer(rf"{_COMMIT.pattern}|{_WAIT.pattern}", code):
        outstanding = outstanding + 1 if m.group(0).startswith("warpgroup_commit") else min(outstanding, int(m.group(1)))
    return outstanding


def _depths(lines: list[str]) -> list[int]:
    """The brace depth at the start of each line."""
    out, d = [], 0
    for ln in lines:
        out.append(d)
        code = _code(ln)
        d += code.count("{") - code.count("}")
    return out


def _loop_carry(lines: list[str], depths: list[int], a: int, b: int) -> dict[int, int]:
    """{first line of a loop body: groups outstanding when its body ends} for loops of [a, b) whose
    body ends with some outstanding (counted from 0 at the body's start: a lower bound)."""
    carry = {}
    for i in range(a, b):
        if not (_LOOP.match(_code(lines[i])) and "{" in _code(lines[i])):
            continue
        n, j = 0, i + 1
        while j < b and depths[j] > depths[i]:
            n = _effect(lines[j], n)
            j += 1
        if n:
            carry[i + 1] = n
    return carry


def _scan(lines: list[str]) -> tuple[dict[int, int], list[int]]:
    """({release line: line to move it after}, [release lines that cannot be moved])."""
    depths = _depths(lines)
    moves, stuck = {}, []
    for a, b in _kernels(lines):
        carry = _loop_carry(lines, depths, a, b)
        outstanding = 0
        for i in range(a, b):
            outstanding = max(outstanding, carry.get(i, 0))
            if _RELEASE.match(_code(lines[i])) and outstanding:
                target = _retired_at(lines, depths, i, b, outstanding)
                (stuck.append(i) if target is None else moves.__setitem__(i, target))
            outstanding = _effect(lines[i], outstanding)
    return moves, stuck


def _retired_at(lines, depths, i, b, outstanding) -> int | None:
    """The line after which a release at line i (with `outstanding` groups) may stand: the end of
    the block at the release's depth that holds the first wait retiring every group; None where the
    release's own block ends first."""
    n, j = outstanding, i + 1
    while j < b and depths[j] >= depths[i]:
        n = _effect(lines[j], n)
        if n == 0:
            while j + 1 < b and depths[j + 1] > depths[i]:  # to the end of the block holding the wait
                j += 1
            return j
        j += 1
    return None


def retire_before_release(source: str) -> str:
    """`source` with every stage release issued while a wgmma group is outstanding moved after
    the wait that retires it (see the module docstring); releases that cannot move stay."""
    lines = source.split("\n")
    moves, _ = _scan(lines)
    if not moves:
        return source
    after: dict[int, list[str]] = {}
    for i, j in moves.items():
        indent = _RELEASE.match(_code(lines[i])).group("indent")
        after.setdefault(j, []).append(indent + lines[i].strip())
    out = []
    for no, line in enumerate(lines):
        if no not in moves:
            out.append(line)
        out.extend(after.get(no, ()))
    return "\n".join(out)


def unretired_releases(source: str) -> list[int]:
    """1-based lines of every stage release issued while a wgmma group may be outstanding."""
    moves, stuck = _scan(source.split("\n"))
    return sorted(i + 1 for i in (*moves, *stuck))
