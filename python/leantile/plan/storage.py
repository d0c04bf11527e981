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
    launch: dict[str, int] = {}
    for k in plan.kernels:
        launch[k.name] = launch[k.tail_of] if k.tail_of else len(set(launch.values()))
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
    hosts = [b.name for b in plan.globals if b.name in written and b.name in life]
    hosts.sort(key=lambda n: (n not in outputs, -size[n], n))
    guests = sorted((n for n in hosts if n not in outputs), key=lambda n: (-size[n], n))
    used = dict.fromkeys(hosts, 0)
    place: dict[str, Place] = {}
    for g in guests:
        if used[g]:  # it holds guests already: its bytes are not free before its own first launch
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
