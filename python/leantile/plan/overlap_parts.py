"""FlashAttention-3's cut of an online-softmax stream body (overlap_parts) and the order a
kernel runs its stream's statements in (stream_steps): block by block, or the rotated loop of
the overlapped schedule (Kernel.overlap, emit.overlap), which the interpreter runs too."""
from __future__ import annotations

from typing import NamedTuple

from .. import ir
from . import Gemm, Kernel, Load, Map, Store, statement_effects


class OverlapParts(NamedTuple):
    """An online-softmax stream body cut where FlashAttention-3's rotated loop cuts it:
    load_k; gemm_s (S = Q K^T); softmax; moved; load_v; gemm_o (O += P V). `moved` are the
    statements that write what gemm_o reads or accumulates (O's rescale, P's cast): the rotated
    loop runs them after the wait for the previous block's P V, so they move past `softmax`."""
    load_k: Load
    gemm_s: Gemm
    softmax: tuple
    moved: tuple
    load_v: Load
    gemm_o: Gemm


def overlap_parts(k: Kernel) -> OverlapParts | None:
    """The FA3 cut of k's stream body, or None where k is no online-softmax stream of that shape:
    a split stream (decode), packed heads, a third load or GEMM in the body (an additive bias
    tile), a GEMM off the tensor cores, or a moved statement that does not commute with the
    softmax statements after it. Key bounds (a mask's skipped blocks) are kept: the rotated loop
    runs over the same range of blocks."""
    b = k.body
    if not k.stream or k.stream.split or k.packed or len(b) < 4:
        return None
    load_k, gemm_s, load_v, gemm_o = b[0], b[1], b[-2], b[-1]
    if not (isinstance(load_k, Load) and isinstance(load_v, Load) and isinstance(gemm_s, Gemm)
            and isinstance(gemm_o, Gemm) and gemm_s.mma and gemm_o.mma and gemm_s.clear and not gemm_o.clear
            and gemm_s.b == load_k.dst and gemm_o.b == load_v.dst and load_k.dst != load_v.dst):
        return None
    local = {x.name: x for x in k.buffers}
    q = local.get(gemm_s.a)
    if (q is None or q.scope != "shared" or local[gemm_o.a].scope != "fragment"
            or {q.dtype, local[load_k.dst].dtype, local[load_v.dst].dtype, local[gemm_o.a].dtype} - ir.HALF_DTYPES):
        return None  # 16-bit operands only: the tf32 wgmma of f32 attention is not measured
    middle = b[2:-2]
    # a mask's register tile loaded on boundary blocks alone (document ids) belongs to the softmax
    fragments = {x.name for x in k.buffers if x.scope == "fragment"}
    if any(isinstance(s, (Store, Gemm)) or (isinstance(s, Load) and not (s.boundary_only and s.dst in fragments))
           for s in middle):
        return None
    effects = [tuple(map(set, statement_effects(s))) for s in middle]  # (reads, writes)
    if any(gemm_s.a in w or {load_k.dst, load_v.dst} & (r | w) for r, w in effects):
        return None  # the stream's operands are the producer's and the GEMMs' alone
    touch = {gemm_o.a, gemm_o.acc}
    moved = [i for i, (_, w) in enumerate(effects) if w & touch]
    for i in moved:
        reads, writes = effects[i]
        if not isinstance(middle[i], Map) or middle[i].boundary_only:
            return None
        for j in range(i + 1, len(middle)):  # the softmax statements it moves past
            r2, w2 = effects[j]
            if j not in moved and (w2 & reads or (r2 | w2) & writes):
                return None
    kept = [j for j in range(len(middle)) if j not in moved]
    if any(effects[j][0] & touch for j in kept):  # only the moved ones see O and P
        return None
    kept = [middle[j] for j in kept]
    return OverlapParts(load_k, gemm_s, tuple(kept), tuple(middle[i] for i in moved), load_v, gemm_o)


def stream_steps(k: Kernel, blocks: list[int]) -> list[tuple[int, object]]:
    """(stream block, statement) in the order kernel k runs its stream body over `blocks`: block
    by block, or under FA3's schedule (k.overlap, emit.overlap) the rotated loop: block j's K load
    and Q K^T, its softmax, then the previous block's P V, then block j's moved statements (O's
    rescale, P's cast: overlap_parts checks that they commute with the softmax they pass), the
    last block's P V after the loop. The GPU issues the previous P V before block j's softmax and
    runs the two at once (wgmma reads P and accumulates O while the softmax runs): of the orders
    that allows, this one puts every softmax write before the P V's reads, so a softmax statement
    that wrote P or O would change the result here. interp runs these steps: every check of a plan
    against the reference checks the rotation too."""
    if not k.overlap:
        return [(j, s) for j in blocks for s in k.body]
    p = overlap_parts(k)
    steps: list[tuple[int, object]] = []
    for n, j in enumerate(blocks):
        steps += [(j, p.load_k), (j, p.gemm_s), *((j, s) for s in p.softmax)]
        if n:
            steps += [(blocks[n - 1], p.load_v), (blocks[n - 1], p.gemm_o)]
        steps += [(j, s) for s in p.moved]
    if blocks:
        steps += [(blocks[-1], p.load_v), (blocks[-1], p.gemm_o)]
    return steps
