"""The launch grid of a kernel (a mixin of emit.kernel._KernelWriter): the T.Kernel extents and
the names of each grid axis's index. The plan's last grid axis is blockIdx.x (as in hand-written
GEMMs), the one before it blockIdx.y, the rest flattened into blockIdx.z; where y or z would pass
CUDA's 65535 (plan.grid_folded), every axis folds into blockIdx.x instead, each index recovered by
div/mod, the last axis fastest: the walk interp runs (plan.grid_walk). A factory whose grid is
not folded at its plan's tiles refuses tiles that would put y or z past the limit (grid_guard)."""
from __future__ import annotations

import math

from .. import plan as _plan
from ..plan import FIXED, grid_folded
from .common import GRID_VARS, _ident, _size


class GridWriter:
    def grid_count(self, g) -> str:
        """The T.Kernel extent of grid axis g: its tiles."""
        return f"T.ceildiv({_size(g.axis)}, {self.extent(g.axis)})" if g.block > 1 else _size(g.axis)

    def lay_out_grid(self, rev: list) -> tuple[list[str], list, str | None]:
        """(T.Kernel extents, the grid axes flattened into one launch index, that index), rev the
        grid in launch order (blockIdx.x first); sets self.grid_var (axis -> its index's name)."""
        k = self.k
        counts = [self.grid_count(g) for g in rev]
        flat: list = []
        if grid_folded(self.plan, k):
            flat, counts = rev, [" * ".join(counts)]
        elif len(rev) > 3:
            flat, counts = rev[2:], counts[:2] + [" * ".join(counts[2:])]
        self.grid_var: dict[str, str] = {}
        for g, v in zip(rev[:len(rev) - len(flat)], GRID_VARS):
            self.grid_var[g.axis] = v
        for g in flat:
            self.grid_var[g.axis] = self.fresh(f"b_{g.axis}")
        return counts, flat, GRID_VARS[len(counts) - 1] if flat else None

    def emit_grid_indices(self, flat: list, flat_var: str, d: int) -> None:
        """The flattened axes' indices from their launch index: div/mod, the first of `flat` fastest."""
        rem = flat_var
        for n, g in enumerate(flat):
            if n == len(flat) - 1:
                self.emit(f"{self.grid_var[g.axis]} = {rem}", d)
            else:
                self.emit(f"{self.grid_var[g.axis]} = {rem} % {self.grid_count(g)}", d)
                rem = f"({rem} // {self.grid_count(g)})"

    def grid_guard(self, rev: list) -> None:
        """A factory check that blockIdx.y and .z stay within CUDA's limit (plan.GRID_YZ_MAX) where
        tile parameters other than the plan's (build_kernel's overrides) could pass it: the grid is
        laid out at the plan's tiles, and a plan derived at the others folds it."""
        def worst(g) -> int:  # a tunable block may shrink to 1: every position a tile
            tunable = g.block > 1 and g.param != FIXED and g.axis in self.params
            return self.plan.axes[g.axis] if tunable else -(-self.plan.axes[g.axis] // g.block)
        limit = _plan.GRID_YZ_MAX
        if self.k.pingpong or grid_folded(self.plan, self.k) or len(rev) < 2 or \
                max(worst(rev[1]), math.prod(worst(g) for g in rev[2:])) <= limit:
            return

        def count(g) -> str:
            return f"-(-{_size(g.axis)} // {self.extent(g.axis)})" if g.block > 1 else _size(g.axis)
        yz = f"({count(rev[1])}, {' * '.join(count(g) for g in rev[2:]) or '1'})"
        self.pre.append(f"if max({yz}) > {limit}:  # blockIdx.y, .z: CUDA's launch limit")
        self.pre.append(f'    raise ValueError(f"kernel {_ident(self.k.name)}: grid y, z = {{{yz}}} tiles, over '
                        f'CUDA\'s {limit} at these tiles: derive the plan at them (its grid folds into x)")')
