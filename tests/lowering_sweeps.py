"""What the generated lowering sweeps share (tests/cpu/test_lower_generated*.py): the graphs they
draw, the sizes that reach TileLang's odd cases, and `Sweep`, which lowers a plan's kernels for
sm_90 and checks the shared memory the verifier counts against what TileLang allocates.

Each sweep counts what it saw in its own `Sweep` and asserts its coverage itself, so the files
run in any order and on any worker (make test hands files to two workers). A kernel whose
TileLang script was already lowered in this process is not lowered again (identical script ->
identical CUDA): lowering costs ~0.3-1.5 s per kernel on a 2-core machine."""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from leantile.emit import emit_module, load_module
from leantile.lower import lower_to_cuda
from leantile.plan.verify import shared_bytes

from strategies import random_graphs, structured_graphs, user_graphs

GRAPHS = st.one_of(
    user_graphs().map(lambda gc: gc[0]),
    structured_graphs(),
    random_graphs(max_ops=5),
)

SWEEP = dict(deadline=None, derandomize=True,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def sweep_settings(max_examples: int):
    """The settings every sweep runs under: repeatable, no deadline (a lowering takes seconds)."""
    return settings(max_examples=max_examples, **SWEEP)


_LOWERED: dict[str, str] = {}  # TileLang script + pass options -> the kernel name it lowered as (this process)


class Sweep:
    """One sweep's counts (graphs, candidates, kernels, swapped, ...) and its lowering."""

    def __init__(self) -> None:
        self.seen: Counter = Counter()

    def kernels_of(self, plan, module_name: str, only: set[str] | None = None, **build):
        """Emits `plan`, builds its kernels and lowers each (or those named in `only`); returns
        the emitted module and its kernels."""
        mod = load_module(emit_module(plan), module_name.replace("+", "_"))
        kernels = mod.build_kernel(**build)
        for name, f in kernels.items():
            if only is None or name in only:
                self.lowers(name, f, plan, mod)
        return mod, kernels

    def lowers(self, name: str, func, plan, mod) -> None:
        """Lowers with the pass options the emitted module `mod` compiles it with, and TileLang
        allocates the shared memory plan.verify.shared_bytes counts (within the ~1 KiB of row-vector
        mirrors it leaves out): an undercount lets the verifier pass tiles that fail at launch, as
        the emitter's layout bridges once did (32 KiB each)."""
        configs = mod.PASS_CONFIGS.get(name)
        script = func.script() + repr(configs)
        self.seen["kernels"] += 1
        if script in _LOWERED:
            return
        info: dict = {}
        cu = lower_to_cuda(func, arch="sm_90", info=info, pass_configs=configs)
        assert f"{name}_kernel" in cu, (name, cu[:400])  # the device entry point TileLang names after the func
        assert "__global__" in cu
        k = next(k for k in plan.kernels if k.name == name)
        counted, allocated = shared_bytes(plan, k), info["shared_bytes"]
        assert counted >= allocated - 1024, (plan.graph, plan.candidate, name, counted, allocated)
        # without async copies (emit.common.pass_configs) TileLang may give two operand tiles one
        # allocation, their loads no longer in flight together; and a stream of one block (a
        # pipelined loop of one iteration, lowered as straight-line code) lets TileLang reuse one
        # layout bridge's memory for the next (a softmax over one position: 4608 bytes allocated,
        # 9216 counted). The verifier's count is then high, which at worst refuses a tile near the
        # limit that would fit; elsewhere the two agree
        one_block = k.stream is not None and not k.stream.split and plan.axes[k.stream.axis] <= k.stream.block
        assert configs or one_block or counted <= allocated + 1024, (plan.graph, plan.candidate, name, counted, allocated)
        _LOWERED[script] = name
        self.seen["lowered"] += 1
