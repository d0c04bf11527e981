"""The sites rules fire at: plain records of node ids by role, and the graph walks the rule
matchers share. Which nodes form a site, and the side conditions that refuse one, are the
rules' own (derive/rules/): this module decides nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir

ELEMENTWISE = (ir.Unary, ir.Binary, ir.Cast, ir.Select, ir.Iota)


@dataclass(frozen=True)
class SoftmaxSite:
    """exp(z - max_t z) / sum_t exp(z - max_t z), z = src or src scaled by a constant c > 0."""
    mx: int
    sub: int
    exp: int
    sm: int
    div: int
    axis: str
    src: int  # the raw scores the kernel reads
    scale_node: int | None = None  # mul(src, c) or div(src, c) folded into the exponent
    scale: float = 1.0

    @property
    def nodes(self) -> tuple[int, ...]:
        head = (self.scale_node,) if self.scale_node is not None else ()
        return (*head, self.mx, self.sub, self.exp, self.sm, self.div)


@dataclass(frozen=True)
class FlashSite:
    """O = matmul(softmax_t(z), V) over t, z = matmul(Q, K) [* c], or z = f(matmul(Q, K), ...)
    for an elementwise score function f (a mask, a bias, a scale: `score`, computed on each
    tile of scores in registers; `leaves` are the tensors it reads from device memory)."""
    qk: int
    softmax: SoftmaxSite
    pv: int
    score: tuple[int, ...] = ()  # elementwise nodes between the scores and the softmax, ascending
    leaves: tuple[int, ...] = ()  # their operands computed elsewhere (inputs, other kernels' values)
    row: str = ""  # the query axis the kernel tiles
    skip_at: tuple[int, ...] = ()  # skip_masked_tiles: the mask's select and comparison nodes
    bounds: tuple = ()  # and the key bounds they give (plan.KeyBound)
    exact: tuple[int, ...] = ()  # the selects whose keep is exactly the bounds (run on boundary blocks only)
    group: str = ""  # pack_query_group: Q's axis of query heads sharing one K and V (GQA), else ""

    @property
    def axis(self) -> str:
        return self.softmax.axis

    @property
    def nodes(self) -> tuple[int, ...]:
        return (self.qk, *self.score, *self.softmax.nodes, self.pv)


@dataclass(frozen=True)
class FlashBackwardSite:
    """Attention's backward as reverse mode writes it (leantile.autodiff.vjp): the softmax P of
    the scores recomputed (S = Q K^T, the score function, the row), dP = dO V^T, the row term
    D = sum_t dP P, dS0 = P (dP - D), the score function's cotangent from dS0 to dS (a scale, a
    mask's select), and the products dQ = dS K, dK = dS^T Q, dV = P^T dO (any may be absent:
    an input needing no gradient). `tile` is every node computed on a tile of scores, in id order
    (coordinates such as a causal mask's positions recomputed there); `leaves` what those read
    from device memory beside Q, K, V and dO."""
    qk: int
    softmax: SoftmaxSite
    dp: int
    prod: int | None  # dP * P, where D is sum_t dP P here; None where D is read (rowsum(dO O))
    dsum: int  # D: sum over t of dP * P (prod), or a row vector computed elsewhere
    diff: int  # dP - D
    ds0: int  # P * (dP - D)
    ds: int  # the cotangent of the scores the products read (ds0, or past the score function's)
    tile: tuple[int, ...]
    leaves: tuple[int, ...]
    row: str  # the query axis
    dq: int | None = None
    dk: int | None = None
    dv: int | None = None
    # skip_masked_tiles: the forward mask's select and comparison nodes and the key bounds they
    # give (plan.KeyBound), where dS is zero wherever the mask drops a key (the cotangent's chain
    # ends in the mask's select with 0): a block no row keeps adds nothing to dQ, dK, dV or D
    skip_at: tuple[int, ...] = ()
    bounds: tuple = ()
    # the selects (the forward's and the cotangent's) whose keep is exactly the bounds: run on
    # boundary blocks only (Map.boundary_only), as the forward's flash kernel runs its mask
    exact: tuple[int, ...] = ()
    # softmax.mx and softmax.sm are the forward's max and sum, read as leaves (saved_rows): no
    # statistics kernel
    saved_stats: bool = False
    # why dQ cannot be added atomically from the dK/dV kernel (FlashBackward.atomic_dq_refusal), or None
    no_atomic_dq: str | None = None

    @property
    def axis(self) -> str:
        return self.softmax.axis

    @property
    def nodes(self) -> tuple[int, ...]:
        """Every node the site's kernels compute (the products included)."""
        return tuple(sorted({*self.tile, *(i for i in (self.dq, self.dk, self.dv) if i is not None)}))


@dataclass(frozen=True)
class Peel:
    kind: str  # "scale" (mul by s), "mean" (sub mu) or "gain" (mul by g over the contraction axis)
    node: int  # the mul / sub node
    vec: int  # the per-row vector s or mu, or the gain g
    rest: int | None = None  # gain: the other operand of the mul (the walk goes on from it)


@dataclass
class GemmSite:
    """One or two matmuls of the same (peeled) LHS over the same axis, with the
    per-row pullouts, row statistics and elementwise epilogue that can fuse with them."""
    matmuls: list[int]
    base: int  # LHS after peeling the pullouts
    axis: str  # contraction axis of the LHS
    peels: list[Peel]
    stat_reduces: list[int] = field(default_factory=list)  # row sums the pullout vectors need
    expandable: list[int] = field(default_factory=list)  # sum((x - mu)^2) reduces
    epilogue: list[int] = field(default_factory=list)
    # the epilogue's nodes made of tile coordinates and constants (a triu mask): recomputed by
    # every kernel that needs them, never stored for the GEMM (rules.gemm.coordinate_nodes)
    coordinates: frozenset[int] = frozenset()
    # fuse_pool_epilogue: (the reduce over the GEMM's innermost weight axis, then the
    # elementwise nodes over its result) computed in the GEMM's epilogue; () where it does not fire
    pool: tuple[int, ...] = ()
    # fuse_row_epilogue: the reductions over the GEMM's column axis (whole in one tile) and the
    # elementwise nodes after them, in id order, computed in its epilogue; () where it does not fire
    rows: tuple[int, ...] = ()


def row_peels(peels) -> list[Peel]:
    """The peels whose vector runs over the rows (scale, mean): the ones statistics compute and
    the epilogue undoes; a gain (gain_fold) is folded into the weight instead."""
    return [p for p in peels if p.kind != "gain"]


def row_vector(g, i: int, base_axes, axis: str) -> bool:
    """Node i is constant along `axis` and broadcasts over base's axes only (the side
    condition shared by the pullouts and the variance expansion)."""
    ax = g.node(i).axes
    return axis not in ax and all(a in base_axes for a in ax)


def depends_on(g, i: int, j: int) -> bool:
    """Whether node i reads node j, directly or not (j < i). Ids are topological, so the
    walk stops below j: it visits only what lies between the two nodes."""
    seen, stack = set(), [i]
    while stack:
        n = stack.pop()
        for a in g.node(n).args():
            if a == j:
                return True
            if a > j and a not in seen:
                seen.add(a)
                stack.append(a)
    return False


@dataclass
class Sites:
    """Every site of a graph: attention patterns, lone softmax rows, GEMM groups."""
    flash: list[FlashSite]
    rows: list[SoftmaxSite]
    gemms: list[GemmSite]  # every matmul group, fused or not
    backward: list[FlashBackwardSite] = field(default_factory=list)  # attention backwards (flash_backward)
