"""The shared-memory temporaries a kernel's plan implies beyond its own buffers (issue 48, step
2: the plan lists them, the emitter allocates what is listed, plan_verify sums the list).

Listed here so far: the windows of copies between a register tile and a global tensor whose
rows are no whole 16-byte granules (emit.unaligned says why and how they are used): which copy
takes one (`window_granule`), how wide it is (`window_width`), and the kernel's list of them
(`windows`), each in the phase that uses it. The emitter's other temporaries (a reduction's
mirror beside a GEMM layout, a store's staging tile, a serial reduction's partials) are still
chosen while it prints (emit.kernel.shared_temps)."""
from __future__ import annotations

from typing import NamedTuple

from .plan import DTYPE_BYTES, FIXED, Buffer, Kernel, Load, Plan, Store, on_chip_dims, row_bytes, swapped_layout

VECTOR_BYTES = 16  # one LDG.128 / STG.128


class Window(NamedTuple):
    """A shared window of one copy: the global it copies, the on-chip tile, whether it is a
    store, its granule (elements per 16 bytes), and whether it lives in the epilogue's phase
    (after the stream: it reuses the pipelined memory) rather than beside the stream's buffers."""
    buffer: str
    local: str
    store: bool
    granule: int
    epilogue: bool


def window_width(extent: int, v: int) -> int:
    """Columns of a window over a run of `extent` elements that may start anywhere in a granule
    of v: the granules such a run can touch, whole (the emitted factory computes the same from
    its block size; plan_verify.shared_bytes calls this)."""
    return (extent + 2 * v - 2) // v * v


def one_block_stream(plan: Plan, k: Kernel) -> bool:
    """Whether k's stream is one block over its whole axis (a row on chip: a plain loop, no
    pipeline), where a body load may take a window."""
    st = k.stream
    return st is not None and st.param == FIXED and st.block >= plan.axes.get(st.axis, 0)


def window_granule(plan: Plan, k: Kernel, g: Buffer, local: Buffer) -> int | None:
    """Elements per granule where the copy between global g and on-chip tile `local` of kernel k
    takes the window path, else None: a register tile of g's last two axes (rows, then the row's
    contiguous axis) whose row length in bytes is no multiple of 16, every other axis of g a
    batch index, in a kernel of the plain schedule."""
    if k.overlap or local.scope != "fragment" or len(g.axes) < 2:
        return None
    if tuple(local.axes) != tuple(g.axes[-2:]) or any(len(d) > 1 for d in on_chip_dims(k, tuple(local.axes))):
        return None
    if swapped_layout(k, local.axes):
        return None
    if k.stream and not one_block_stream(plan, k) and local.name in {x.dst for x in k.body if isinstance(x, Load)}:
        # a load of the stream's body stays a T.copy: measured slower through a window
        # (fill, two barriers per block, 96 registers instead of 72; H100, the statistics
        # kernel of a softmax over 2048 x 50257: 0.1026 ms as T.copy, 0.2012 through windows)
        return None
    block = {gr.axis: gr.block for gr in k.grid}
    if k.stream:
        block.update({a: k.stream.block for a in (k.stream.axis, *k.stream.aliases)})
    for a in g.axes[:-2]:  # batch axes: one position per CTA (or per stream step)
        if block.get(a) != 1:
            return None
    nbytes = DTYPE_BYTES.get(g.dtype)
    if nbytes is None or nbytes > VECTOR_BYTES:
        return None
    if row_bytes(plan, g) % VECTOR_BYTES == 0:
        return None
    return VECTOR_BYTES // nbytes


def windows(plan: Plan, k: Kernel) -> tuple[Window, ...]:
    """The windows kernel k's copies take, in statement order (prologue, body, epilogue): one per
    Load or Store whose copy takes the window path. A ping-pong kernel's epilogue runs under the
    other warpgroup's mainloop: its windows live beside the ring, as the stream's do."""
    local = {b.name: b for b in k.buffers if b.scope != "global"}
    names = {b.name for b in plan.globals}
    out = []
    for part, stmts in (("prologue", k.prologue), ("body", k.body), ("epilogue", k.epilogue)):
        for s in stmts:
            if not isinstance(s, (Load, Store)):
                continue
            gname, lname = (s.src, s.dst) if isinstance(s, Load) else (s.dst, s.src)
            if gname not in names or lname not in local:
                continue  # a plan still being built
            v = window_granule(plan, k, plan.global_buffer(gname), local[lname])
            if v:
                out.append(Window(gname, lname, isinstance(s, Store), v, part == "epilogue" and not k.pingpong))
    return tuple(out)


def window_facts(plan: Plan, k: Kernel) -> tuple:
    """What window_granule decides from beyond kernel k's statements and buffers: each global it
    copies (axes, dtype, whether a row is whole granules) and whether its stream is one block.
    Part of the key under which emit.kernel.shared_temps remembers the kernel's temps: the same
    kernel over 50257 and over 50264 columns differs."""
    copied = {s.src if isinstance(s, Load) else s.dst for s in k.statements() if isinstance(s, (Load, Store))}
    facts = []
    for b in plan.globals:
        if b.name in copied and b.axes:
            facts.append((b.name, b.axes, b.dtype, row_bytes(plan, b) % VECTOR_BYTES == 0))
    return tuple(facts), one_block_stream(plan, k)
