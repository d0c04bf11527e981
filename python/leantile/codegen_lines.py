"""Reading TileLang's printed CUDA line by line, for the source repairs (codegen_repair,
codegen_retire): a line's code without its strings and comments, and where each kernel's body is."""
from __future__ import annotations

import re

__all__ = ["code", "kernel_ranges"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def code(line: str) -> str:
    """The line without string literals (inline asm) and // comments."""
    return _STRING.sub('""', line).split("//", 1)[0]


def kernel_ranges(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of each __global__ kernel body of `lines` (a kernel runs to the next)."""
    starts = [i for i, ln in enumerate(lines) if "__global__" in ln and "{" in ln]
    return [(a, b) for a, b in zip(starts, starts[1:] + [len(lines)])]
