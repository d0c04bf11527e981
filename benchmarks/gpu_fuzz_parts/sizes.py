"""The sizes of the campaign: the long lengths that cross every place a plan changes shape, the
short ones, and `resize`, which draws a graph's sizes from them and shrinks axes until the
caps (elements per tensor, flops per GEMM) hold."""
from __future__ import annotations

import math
import random

PRIMES = (3, 5, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071)
BLOCKS = (64, 128, 256, 1024)  # stream blocks and grid tiles of the plans (block_n, block_r, a row's 1024)
COUNTS = (1, 2, 31, 32, 33)  # blocks or grid rows: one, two, one short of / at / past a warp's worth
# rows held on chip at a multiple of 2048, no power of two (rules/regions.padded: widths that are a multiple of 1024)
EXACT_ROWS = (3072, 5120, 6144, 7168)
LONG_LIMIT = 2 ** 17 + 1
# reduced axes past 2^20: a loss into a scalar split into 256 slices, more than its combine's 128
# planned threads (the lanes race of 2026-11-30, emit.reductions.lanes, lived only there: no
# length the campaign drew reached it). A tenth of the long reduced axes, where the caps allow.
HUGE_REDUCED = (2 ** 20 - 1, 2 ** 20 + 1, 3 * 2 ** 19 + 7, 2 ** 21 + 1)
SHORT = (1, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 127, 128, 129,
         192, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025, 2048, 4096)
CPU_LONG = (1, 2, 3, 7, 16, 31, 32, 33, 63, 64, 65)
CPU_SHORT = (1, 1, 2, 3, 4, 5, 7, 8)
DTYPES = ("f16", "bf16", "f32", "mixed")


def long_lengths(limit: int = LONG_LIMIT) -> list[int]:
    out = set(PRIMES)
    for k in range(18):
        out |= {2 ** k - 1, 2 ** k, 2 ** k + 1}
    for b in BLOCKS:
        for n in COUNTS:
            out |= {n * b - 1, n * b, n * b + 1}
    for n in EXACT_ROWS:
        out |= {n - 1, n, n + 1}
    return sorted(x for x in out if 1 <= x <= limit)


class Profile:
    def __init__(self, device: str, max_elements: int, max_flops: float):
        cpu = device == "cpu"
        self.long = list(CPU_LONG) if cpu else long_lengths()
        self.huge = () if cpu else HUGE_REDUCED
        self.short = list(CPU_SHORT) if cpu else list(SHORT)
        self.max_elements, self.max_flops = max_elements, max_flops
        self.max_total = 8 * max_elements  # every node's elements together (the unfused plan stores them)


class _Classes:
    """Union-find over axis names: the two axes of a contraction have one size."""

    def __init__(self, names):
        self.parent = {a: a for a in names}

    def find(self, a):
        while self.parent[a] != a:
            a = self.parent[a]
        return a

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def resize(g, rng: random.Random, prof: Profile, keep=(), ties=()):
    """g at drawn GPU sizes (see the module docstring), validated (ir.parse); None where the
    resized graph is not valid. The axes in `keep` hold the generator's size (a pool of 2..32
    positions, which a drawn size would almost never be); each pair of `ties` gets one size (a
    backward's axes that its forward contracts together: the judge runs that forward at the
    backward's sizes, judge.saved_from_forward)."""
    from leantile import ir

    cls = _Classes(g.axes)
    for a, b in ties:
        if a in g.axes and b in g.axes:
            cls.union(a, b)
    reduced = set()
    for n in g.nodes:
        if isinstance(n, ir.Matmul):
            cls.union(n.axis_a, n.axis_b)
            reduced |= {n.axis_a, n.axis_b}
        elif isinstance(n, ir.Reduce):
            reduced.add(n.axis)
    groups = sorted({cls.find(a) for a in g.axes})
    red = [c for c in groups if any(cls.find(a) == c for a in reduced)]
    n_long = rng.choices([0, 1, 2], weights=[1, 6, 3])[0]
    long = []
    for _ in range(min(n_long, len(groups))):
        pool = [c for c in (red if red and rng.random() < 0.75 else groups) if c not in long] or \
               [c for c in groups if c not in long]
        long.append(rng.choice(pool))
    longest = [x for x in prof.long if x >= 2 ** 16] or prof.long[-3:]

    def long_size(c):  # a third from 2^16 .. 2^17 + 1 (the axes the issue asks for), else any
        if c in red and prof.huge and rng.random() < 0.1:
            return rng.choice(prof.huge)
        return rng.choice(longest if rng.random() < 0.35 else prof.long)
    size = {c: long_size(c) if c in long else rng.choice(prof.short) for c in groups}
    if rng.random() < 0.2:  # the generator's own sizes (a family drawn for its shapes: overlap, shape tiles)
        size = {c: max(g.axes[a] for a in g.axes if cls.find(a) == c) for c in groups}
        long = [c for c in groups if size[c] >= 1024]

    kept = {cls.find(a) for a in keep if a in g.axes}
    for c in kept:
        size[c] = max(g.axes[a] for a in g.axes if cls.find(a) == c)
    long = [c for c in long if c not in kept]

    def axes_of(n):
        return [cls.find(a) for a in n.axes]

    nodes = [axes_of(n) for n in g.nodes]
    mms = [(axes_of(n), cls.find(n.axis_a)) for n in g.nodes if isinstance(n, ir.Matmul)]

    def shrink(c):
        menu = prof.long if c in long else prof.short
        smaller = [x for x in menu if x < size[c]]
        size[c] = max(smaller) if smaller else max(1, size[c] // 2)

    for _ in range(1000):
        elems = [math.prod(size[c] for c in ax) for ax in nodes]
        over = []  # (how far over its cap, the axes to shrink)
        for e, ax in zip(elems, nodes):
            if e > prof.max_elements:
                over.append((e / prof.max_elements, ax))
        for ax, k in mms:
            f = 2.0 * math.prod(size[c] for c in ax) * size[k]
            if f > prof.max_flops:
                over.append((f / prof.max_flops, ax + [k]))
        if sum(elems) > prof.max_total:
            over.append((sum(elems) / prof.max_total, nodes[elems.index(max(elems))]))
        if not over:
            break
        _, ax = max(over, key=lambda o: o[0])
        big = [c for c in set(ax) if size[c] > 1 and c not in kept] or [c for c in set(ax) if size[c] > 1]
        short = [c for c in big if c not in long]
        shrink(max(short or big, key=lambda c: (size[c], c)))
    sizes = {a: size[cls.find(a)] for a in g.axes}
    data = g.model_dump(mode="json", by_alias=True)
    data["axes"], data["derivation"] = sizes, []
    try:
        return ir.parse(data)
    except ir.GraphError:
        return None

