"""Calling a compiled graph: its inputs bound by name and position and checked once, with one
GraphError listing every problem, and fresh inputs for it (shared by runtime.Kernel and
chunked.ChunkedKernel)."""
from __future__ import annotations

import torch

from . import ir, reference


class GraphInputs:
    """What binds a call's tensors to a graph's inputs: `graph` and `device` are set by the
    subclass, then _bind_to(graph)."""
    graph: ir.Graph
    device: torch.device

    def _bind_to(self, graph: ir.Graph) -> None:
        self.input_names = [n.name for n in graph.inputs()]
        self.output_names = list(graph.outputs)
        # bind's quick path: each input's (shape, dtype) in order (reference.check_inputs' rules)
        self._expected = [(graph.shape(n.id), reference.TORCH_DTYPES[n.dtype]) for n in graph.inputs()]

    def _other_sizes_hint(self, inputs: dict) -> str | None:
        """Where the inputs are of the graph's ranks but other sizes: the sizes they imply, and
        how to get a kernel for them (every size is compiled into the kernel)."""
        implied = dict(self.graph.axes)
        for n in self.graph.inputs():
            t = inputs.get(n.name)
            if not isinstance(t, torch.Tensor) or t.dim() != len(n.axes):
                return None
            for a, size in zip(n.axes, t.shape):
                if implied[a] != self.graph.axes[a] and implied[a] != size:
                    return None  # two inputs disagree on an axis: no one set of sizes
                implied[a] = int(size)
        changed = {a: v for a, v in implied.items() if v != self.graph.axes[a]}
        if not changed:
            return None
        return (f"this kernel was compiled for {', '.join(f'{a}={v}' for a, v in self.graph.axes.items())}; the inputs "
                f"are {', '.join(f'{a}={v}' for a, v in changed.items())}: compile one for them with "
                f"leantile.compile(source, sizes={implied}) (a Graph: build it at those sizes)")

    def bind(self, args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
        """The inputs by name, checked: one GraphError listing every problem (missing or extra,
        shape, dtype, device, strides)."""
        if not kwargs and self._well_formed(args):  # every call of a training step: attributes only
            return dict(zip(self.input_names, args))
        if len(args) > len(self.input_names):
            raise ir.GraphError([f"{self.graph.name}: {len(args)} positional inputs, the graph takes "
                                 f"{len(self.input_names)} ({', '.join(self.input_names)})"])
        inputs = dict(zip(self.input_names, args))
        twice = sorted(set(inputs) & set(kwargs))
        if twice:
            raise ir.GraphError([f"input {twice[0]!r}: given both by position and by name"])
        inputs.update(kwargs)
        try:
            reference.check_inputs(self.graph, inputs, device=self.device)
        except ir.GraphError as e:
            hint = self._other_sizes_hint(inputs)
            raise ir.GraphError(e.problems + ([hint] if hint else [])) from None
        bad = [n for n, t in inputs.items() if not t.is_contiguous()]
        if bad:
            raise ir.GraphError([f"input {bad[0]!r}: not contiguous (strides {list(inputs[bad[0]].stride())}); "
                                 "pass .contiguous()"])
        # the kernels read and write 16-byte vectors from each tensor's start (TMA, vector
        # copies, emit.unaligned's windows): a view that starts between two such boundaries
        # would fault on the GPU (a misaligned address, which ends the CUDA context)
        off = [n for n, t in inputs.items() if t.numel() and t.data_ptr() % 16]
        if off:
            t = inputs[off[0]]
            raise ir.GraphError([f"input {off[0]!r}: its data starts {t.data_ptr() % 16} bytes past a 16-byte "
                                 f"boundary (a view at storage offset {t.storage_offset()}); pass .clone()"])
        return inputs

    def _well_formed(self, args: tuple) -> bool:
        """Whether positional `args` pass every check of bind's full path (shape, dtype, device,
        contiguous, 16-byte aligned) -- compared attribute by attribute, none of its error
        building: bind ran 35 us a call, most of an op's own overhead in a training step. False
        sends bind down the full path, which names what is wrong."""
        if len(args) != len(self._expected):
            return False
        for t, (shape, dtype) in zip(args, self._expected):
            if not (isinstance(t, torch.Tensor) and t.dtype == dtype and t.shape == shape
                    and t.device == self.device and t.is_contiguous() and (not t.numel() or t.data_ptr() % 16 == 0)):
                return False
        return True

    def random_inputs(self, seed: int = 0, scale: float | None = None) -> dict[str, torch.Tensor]:
        """Fresh normal inputs on the kernel's device, of standard deviation `scale` (default
        reference.natural_scale: contractions of about unit variance, no f16 overflow)."""
        scale = reference.natural_scale(self.graph) if scale is None else scale
        return reference.random_inputs(self.graph, seed=seed, device=self.device, scale=scale)
