"""Where each global intermediate lives: in bytes of its own, or inside a buffer whose life has
not yet begun (issue 49: peak memory no more than the plan needs).

    storage(plan) -> {guest: Place(host, offset)}

A global intermediate is live from the first launch that touches it (loads or stores it) to
the last; an output from its first launch to the end. Launches run in order, each finishing
before the next touches memory (plan.passes.dependent_launch: the wait is a kernel's first
statement), so a guest whose last launch comes before a host's first may sit in the host's
bytes: a split reduction's float32 partials inside the output its normalise pass writes later
(LayerNorm over (c, h, w) allocated 30 KB of partials beside a 128 MiB output that torch.compile
did without). Graph inputs are the caller's and never host; a buffer that holds guests is not
itself a guest (one level: a host's bytes are its own from its first launch on).

The emitted module's allocate() and the interpreter both place guests so (the interpreter
runs the sharing the GPU runs, so a wrong lifetime shows as a wrong value in every CPU test);
Kernel.gpu_bytes counts hosts alone.

    in_place(plan, {output: input}) -> plan

A guest may also take a host's bytes from the launch where the host's life ends (written_over):
a row kernel's second pass reading the host block by block and writing the guest, of the same
shape and dtype, over the block it has just read (the LM head's dlogits over its logits: 250 MiB
of its 1024-token chunk, g39). Each element is read before it is written, by the thread that
writes it or before a barrier, and nothing reads the host after that kernel.

An output may also take the bytes of an input of the same shape (Plan.in_place): a chunk of an
LM head's dW added to the sum so far, written over it (leantile.chunking's in-place sums: no
second 1 GiB buffer). Where one kernel reads each element of the input and then writes the
same element of the output, once, and nothing else touches either, writing over the input
changes no value any kernel reads.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from . import DTYPE_BYTES, Load, Plan, Store

ALIGN = 256  # bytes: a guest starts where cudaMalloc would start a buffer (TMA and 16-byte vectors need less)


class Place(NamedTuple):
    host: str
    offset: int  # bytes from the start of the host's storage


def buffer_bytes(plan: Plan, b) -> int:
    return math.prod(plan.axes[a] for a in b.axes) * DTYPE_BYTES[b.dtype]


def lifetimes(plan: Plan) -> dict[str, tuple[int, int]]:
    """{global name: (first launch, last launch)} over the launches that touch it; a tail
    (Kernel.tail_of) counts as its launch. Outputs live to the end."""
    launch = _launches(plan)
    life: dict[str, tuple[int, int]] = {}
    for k in plan.kernels:
        j = launch[k.name]
        for s in k.statements():
            name = s.src if isinstance(s, Load) else s.dst if isinstance(s, Store) else None
            if name is not None:
                first, last = life.get(name, (j, j))
                life[name] = (min(first, j), max(last, j))
    end = len(set(launch.values()))
    for buf in plan.outputs.values():
        if buf in life:
            life[buf] = (life[buf][0], end)
    return life


def storage(plan: Plan) -> dict[str, Place]:
    """{guest: Place}: each intermediate placed, largest first, in the first host (outputs,
    then the largest intermediates) whose first launch follows the guest's last and whose
    bytes have room for it at the next ALIGN boundary."""
    life = lifetimes(plan)
    outputs = set(plan.outputs.values())
    written = {s.dst for k in plan.kernels for s in k.statements() if isinstance(s, Store)}
    size = {b.name: buffer_bytes(plan, b) for b in plan.globals}
    # an input returned as an output is the caller's: never a host
    # (an output written over an input is the caller's bytes too)
    hosts = [b.name for b in plan.globals if b.name in written and b.name in life and b.name not in plan.in_place]
    hosts.sort(key=lambda n: (n not in outputs, -size[n], n))
    guests = sorted((n for n in hosts if n not in outputs), key=lambda n: (-size[n], n))
    used = dict.fromkeys(hosts, 0)
    place: dict[str, Place] = {}
    for g in guests:
        if used[g] or g in {p.host for p in place.values()}:  # it holds guests: its bytes are its own
            continue
        h = next((h for h in guests if h != g and h not in place and life[h][1] == life[g][0]
                  and written_over(plan, g, h, life)), None)
        if h is not None:  # at offset 0: h's earlier guests are dead before h begins
            place[g] = Place(h, 0)
            continue
        for h in hosts:
            if h == g or h in place or life[h][0] <= life[g][1]:
                continue
            offset = -(-used[h] // ALIGN) * ALIGN
            if offset + size[g] <= size[h]:
                place[g] = Place(h, offset)
                used[h] = offset + size[g]
                break
    return place


def written_over(plan: Plan, g: str, h: str, life: dict | None = None) -> bool:
    """Whether intermediate g may take intermediate h's bytes from h's last launch on: the same
    axes and dtype; one kernel k at that launch (no tail) reads h and stores g once, in its second
    pass, over a grid that keeps each row's stream whole (no split), after its loads of h there;
    k reads no g and writes no h; h is no output and its life ends at k."""
    life = life or lifetimes(plan)
    names = {b.name: b for b in plan.globals}
    if g not in life or h not in life or h in plan.outputs.values() or life[h][1] != life[g][0]:
        return False
    if (names[g].axes, names[g].dtype) != (names[h].axes, names[h].dtype):
        return False
    launch = _launches(plan)
    at = [k for k in plan.kernels if launch[k.name] == life[h][1]]
    if len(at) != 1 or at[0].tail_of:
        return False
    k = at[0]
    if k.stream is None or k.stream.split or any(t.axis in (k.stream.axis, *k.stream.aliases) for t in k.grid):
        return False
    stores = [s for s in k.statements() if isinstance(s, Store) and s.dst in (g, h)]
    if len(stores) != 1 or stores[0].dst != g or stores[0].accumulate or stores[0] not in k.second_pass:
        return False
    if any(isinstance(s, Load) and s.src == g for s in k.statements()):
        return False
    order = list(k.second_pass)
    return all(order.index(s) < order.index(stores[0]) for s in order if isinstance(s, Load) and s.src == h)


def _launches(plan: Plan) -> dict[str, int]:
    """{kernel name: its launch}: a tail (Kernel.tail_of) shares its kernel's."""
    launch: dict[str, int] = {}
    for k in plan.kernels:
        launch[k.name] = launch[k.tail_of] if k.tail_of else len(set(launch.values()))
    return launch


def in_place(plan: Plan, pairs: dict[str, str]) -> Plan:
    """plan with each graph output of `pairs` written over the graph input it names
    (Plan.in_place), where that is safe (in_place_refusal); the others keep bytes of their own
    (the caller copies them: nothing depends on it but memory)."""
    take = {}
    for out, inp in pairs.items():
        buf = plan.outputs.get(out)
        if buf is not None and in_place_refusal(plan, buf, inp) is None:
            take[buf] = inp
    return plan.model_copy(update={"in_place": {**plan.in_place, **take}}) if take else plan


def in_place_refusal(plan: Plan, out: str, inp: str) -> str | None:
    """Why output buffer `out` may not take input `inp`'s bytes, or None: the same axes and dtype;
    one kernel stores `out`, once, after the stream (not per block, not an atomic add), over a grid
    of `out`'s own axes (each element one CTA's), and reads `inp` before it as the only reader;
    no kernel reads `out`."""
    names = {b.name: b for b in plan.globals}
    if out not in names or inp not in names:
        return "no such buffer"
    if names[out].axes != names[inp].axes or names[out].dtype != names[inp].dtype:
        return "another shape or dtype"
    stores = [(k, s) for k in plan.kernels for s in k.statements() if isinstance(s, Store) and s.dst == out]
    if len(stores) != 1:
        return "stored by several statements"
    k, store = stores[0]
    if store.accumulate or store not in k.epilogue or any(t.axis not in names[out].axes for t in k.grid):
        return "not stored once per element after the stream"
    for j in plan.kernels:
        loads = [s for s in j.statements() if isinstance(s, Load) and s.src in (inp, out)]
        if loads and (j is not k or any(s.src == out or (k.stream is not None and s in k.body) for s in loads)):
            return "read elsewhere"
    order = list(k.statements())
    if any(order.index(s) > order.index(store) for s in order if isinstance(s, Load) and s.src == inp):
        return "read after the store"
    return None
