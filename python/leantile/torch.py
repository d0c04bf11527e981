"""leantile kernels as PyTorch operators and modules.

    op = leantile.torch.op(leantile.compile("swiglu"))     # a torch.library custom op
    y = op(X, W_gate, W_up)                                # works under torch.compile(fullgraph=True)
    mlp = leantile.torch.Module("swiglu")                  # weights as nn.Parameters
    y = mlp(X)

Each compiled kernel becomes one custom op `leantile::<graph>_<digest>` (the digest of its
emitted source: another plan or shape is another op), with a fake implementation from the
graph's shapes and dtypes, so torch.compile traces through it without a graph break and CUDA
graphs capture it (outputs are allocated with torch.empty inside the op, on the current stream).
In eager mode the op calls the same function, and the same autograd formula through a
torch.autograd.Function, without the dispatcher's custom-op layers (_Op: host time).

Each op trains: its autograd formula is the graph's backward (leantile.autodiff.vjp), derived,
compiled and run as another leantile op, made on the first backward for the set of inputs that
need a gradient (forward-only users never pay for it). The backward recomputes what it reads of
the forward from its inputs, except the GEMM products autodiff.default_saved keeps: those a
training forward stores (TrainingOp). `Module` parameters train with any optimizer.
"""
from __future__ import annotations

import hashlib
import inspect
import math

import torch

from .autodiff import default_saved, training_forward, vjp
from .ir import GraphError
from .reference import TORCH_DTYPES
from .runtime import Kernel, compile as _compile
from .train_step import loss_output, step_graph

_OPS: dict[str, object] = {}  # op name -> registered op (registering twice is an error in torch)
_BACKWARDS: dict[tuple[str, frozenset], tuple] = {}  # (forward op, inputs wanting a gradient) -> backward


def op(kernel: Kernel, *, differentiable: bool = True):
    """The op that runs `kernel`: positional tensors in the graph's input order; returns the output
    tensor, or a tuple in the graph's output order. differentiable: it trains (its backward is the
    graph's vjp; the backward ops themselves have none: no double backward). Where the backward
    reads GEMM products of the forward (autodiff.default_saved), the op is a TrainingOp: under
    autograd it runs a second forward that also stores them, compiled beside the first."""
    # the CPU's two paths (reference, interpreter) are two ops: the op calls the kernel it was made for
    path = "\0interpret" if kernel.interpret else ""
    digest = hashlib.sha256(f"{kernel.source}\0{kernel.device}{path}".encode()).hexdigest()[:12]
    name = f"leantile::{kernel.graph.name}_{digest}"
    if name in _OPS:
        return _OPS[name]
    custom = _custom_op(kernel, name)
    step = step_graph(kernel.graph) if differentiable and getattr(kernel, "chunks", None) is not None else None
    if step is not None:
        # a loss too large to run whole (an LM head's logits): its gradients computed in the
        # forward, a chunk at a time (leantile.train_step), the backward scaling them
        custom = StepOp(custom, kernel, name, step)
    elif differentiable:
        g, extra = training_forward(kernel.graph)
        if g is not None:  # values the backward reads: stored by a training forward beside its outputs
            train = _compile(g, device=kernel.device, check=kernel.check, interpret=kernel.interpret)
            trained = _custom_op(train, f"{name}_train")
            _register_backward(trained, name, kernel, default_saved(kernel.graph), extra)
            custom = TrainingOp(custom, trained, len(kernel.output_names))
        else:  # nothing saved, or only outputs (a log-softmax's): the inference forward serves
            _register_backward(custom, name, kernel, default_saved(kernel.graph), {})
    _OPS[name] = custom
    return custom


class TrainingOp:
    """An op whose backward reads values of its forward (GEMM products): without autograd (no
    input needs a gradient, or torch.no_grad) it runs the inference kernel; with it, the training
    forward, which stores those values too and hands them to the backward. Returns what the
    inference op returns; works under torch.compile(fullgraph=True) (grad mode and requires_grad
    are guarded)."""

    def __init__(self, inference, training, outputs: int):
        self.inference, self.training, self.outputs = inference, training, outputs

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            r = self.training(*args)
            return r[0] if self.outputs == 1 else tuple(r[:self.outputs])
        return self.inference(*args)


class StepOp:
    """The op of a scalar loss whose forward runs in chunks (a chunked.ChunkedKernel: an LM head
    with its cross-entropy): under autograd it runs the loss's training step instead
    (train_step.step_graph: the loss and the gradients of the inputs that need one, in one graph,
    in chunks of tokens), keeps the gradients and hands them to the backward scaled by the loss's
    cotangent: three GEMM passes where a forward and a backward make four, and the [tokens,
    vocabulary] values a chunk at a time. Without autograd, the inference op."""

    def __init__(self, inference, kernel, name: str, step: tuple):
        self.inference, self.kernel, self.name = inference, kernel, name
        self.steps: dict[frozenset, object] = {}  # the inputs wanting a gradient -> the step's op
        self.step_kernels: dict[frozenset, object] = {}  # ... -> its kernel (chunked where it needs to be)
        # every input a gradient reaches: its step made now, as TrainingOp's training forward is (a
        # step made on the first call would be traced by torch.compile); another set on first use
        self.differentiable = frozenset(step[1])  # (step: step_graph(kernel.graph), every input)
        self.steps[self.differentiable] = self._step(self.differentiable, step)

    def __call__(self, *args):
        names = self.kernel.input_names
        wanted = frozenset(n for n, a in zip(names, args) if isinstance(a, torch.Tensor) and a.requires_grad
                           and n in self.differentiable) if torch.is_grad_enabled() else frozenset()
        if not wanted:
            return self.inference(*args)
        if wanted not in self.steps:
            self.steps[wanted] = self._step(wanted)
        return self.steps[wanted](*args)[0]

    def _step(self, wanted: frozenset, made: tuple | None = None):
        k = self.kernel
        step, grads = made or step_graph(k.graph, wrt=wanted)
        sk = self.step_kernels[wanted] = _compile(step, device=k.device, check=k.check, interpret=k.interpret)
        digest = hashlib.sha256(sk.source.encode()).hexdigest()[:12]
        custom = _custom_op(sk, f"{self.name}_step_{digest}")
        names, g = k.input_names, k.graph
        axes = {n.name: n.axes for n in g.inputs()}
        order = [n for n in names if n in grads]  # the step's gradient outputs, after its loss
        if sk.output_names != [loss_output(g), *(grads[n].output for n in order)]:
            raise AssertionError(f"{g.name}: step outputs {sk.output_names} out of order")

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*output[1:])
            ctx.scaled = False
            # the gradient outputs take no cotangent: materialized, each would be a zero tensor of
            # its size made for the backward (the LM head's dW: 1 GiB, g39's backward peak doubled)
            ctx.set_materialize_grads(False)

        def backward(ctx, d_loss, *_unused):
            if d_loss is None:  # the loss reached nothing that asked for a gradient
                return tuple(None for _ in names)
            if ctx.scaled:  # the gradients were scaled in place by the first backward
                raise RuntimeError(f"{g.name}: the fused loss step's backward runs once (retain_graph is not supported)")
            ctx.scaled = True
            got = dict(zip(order, ctx.saved_tensors))
            # in place (a second dW of 1 GiB would double the peak), and by _foreach_mul_: t.mul_
            # of a 0-d CUDA tensor broadcasts it at stride 0, torch's unvectorized elementwise
            # kernel (g39: 1.5 ms for the LM head's dW, a read and a write of 1 GiB)
            torch._foreach_mul_(list(got.values()), d_loss)
            return tuple(grads[n].like_input(got[n], axes[n], g.axes) if n in got else None for n in names)

        custom.register_autograd(backward, setup_context=setup_context)
        return custom


def _custom_op(kernel: Kernel, name: str):
    """kernel as a torch.library custom op `name`, with a fake implementation from its shapes."""
    names, outs = kernel.input_names, kernel.output_names
    single = len(outs) == 1

    def impl(*args):
        r = kernel.run(kernel.bind(args, {}))
        got = _unaliased([r[o] for o in outs], args)
        return got[0] if single else tuple(got)

    ret = torch.Tensor if single else tuple[tuple(torch.Tensor for _ in outs)]
    impl.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor) for n in names],
        return_annotation=ret)
    impl.__name__ = name.split("::", 1)[1]
    custom = torch.library.custom_op(name, mutates_args=())(impl)

    def fake(*args):
        dev = args[0].device if args else kernel.device
        made = [torch.empty(kernel.output_specs[o][0], dtype=kernel.output_specs[o][1], device=dev) for o in outs]
        return made[0] if single else tuple(made)

    fake.__signature__ = impl.__signature__
    custom.register_fake(fake)
    return _Op(custom, impl)


class _Op:
    """A kernel's op: the torch.library custom op, which torch.compile traces (its fake
    implementation gives the shapes), and in eager mode the same function and autograd formula
    called directly, through a torch.autograd.Function: the dispatcher's custom-op layers
    (autograd_impl, redispatch, backend_impl, the dynamo-disable wrapper) were most of a training
    step's host time (g42, rmsnorm_gain on the H200: 0.654 ms a step against 0.121 of GPU time;
    benchmarks/train_rows/results/dispatch-profile-h200-2026-11-30-b14e9c1.json)."""

    def __init__(self, custom, impl):
        self.custom, self.impl = custom, impl
        self._function = None  # the eager autograd.Function, once a formula is registered

    def register_autograd(self, backward, *, setup_context):
        self.custom.register_autograd(backward, setup_context=setup_context)
        impl = self.impl

        def forward(ctx, *args):  # ctx first, no setup_context: Function.apply then binds no
            out = impl(*args)  # signature per call (inspect.signature, 22 us of a 100 us step)
            setup_context(ctx, args, out)
            return out
        self._function = type(f"{impl.__name__}_eager", (torch.autograd.Function,), {
            "forward": staticmethod(forward), "backward": staticmethod(backward)})

    def __call__(self, *args):
        if torch.compiler.is_compiling():
            return self.custom(*args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            # no formula registered (a backward op): the custom op, which refuses a backward through it
            return self._function.apply(*args) if self._function is not None else self.custom(*args)
        return self.impl(*args)


def _unaliased(outputs: list, inputs) -> list:
    """outputs, each sharing memory with an input or an earlier output copied: a custom op may
    return neither (torch.library checks it). A plan's output can be an input's buffer (a
    backward whose gradient is the cotangent itself: d_X = d_out of X + R, twice for X and R), and
    the interpreter hands an input back as it came."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.numel()}
    out = []
    for t in outputs:
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr is not None and ptr in seen:
            t = t.clone()
            ptr = t.untyped_storage().data_ptr()
        if ptr is not None:
            seen.add(ptr)
        out.append(t)
    return out


def _backward(name: str, kernel: Kernel, wanted: frozenset, save: frozenset):
    """(autodiff.Backward, its kernel, its op) for the inputs in `wanted`, reading the forward
    values `save`: derived and compiled once, with the forward kernel's device and paths."""
    key = (name, wanted)
    if key not in _BACKWARDS:
        bw = vjp(kernel.graph, wrt=wanted, save=save)
        if bw.graph is None:  # nothing differentiable reaches an output: every gradient is zero
            _BACKWARDS[key] = (bw, None, None)
        else:
            k = _compile(bw.graph, device=kernel.device, check=kernel.check, interpret=kernel.interpret)
            _BACKWARDS[key] = (bw, k, op(k, differentiable=False))
    return _BACKWARDS[key]


def _register_backward(custom, name: str, kernel: Kernel, save: frozenset, saved_outputs: dict) -> None:
    """custom's autograd: its inputs (and, for a training forward, the saved values it outputs
    after the graph's own: saved_outputs, {output name: forward node}) kept for the backward op."""
    g = kernel.graph
    names, outs = kernel.input_names, kernel.output_names
    axes = {n.name: n.axes for n in g.inputs()}
    reads_outputs = bool(save & set(g.outputs.values()))

    def setup_context(ctx, inputs, output):
        output = output if isinstance(output, tuple) else (output,)
        # the outputs too where the backward reads one (a saved value that is an output)
        ctx.save_for_backward(*inputs, *(output if reads_outputs else output[len(outs):]))
        # no cotangent made for the outputs nothing differentiates: a training forward's saved
        # values (SwiGLU's two GEMM products, 86 MiB each at 4096 x 11008) would each get a zero
        # tensor of its size, every step; a graph output the loss does not read gets its zeros below
        ctx.set_materialize_grads(False)

    def backward(ctx, *grads):
        kept = ctx.saved_tensors
        inputs = dict(zip(names, kept[:len(names)]))
        rest = kept[len(names):]
        by_node = {g.outputs[o]: t for o, t in zip(outs, rest)} if reads_outputs else {}
        # the extra outputs, in the training forward's output order
        by_node.update(zip(saved_outputs.values(), rest[len(outs):] if reads_outputs else rest))
        wanted = frozenset(n for n, need in zip(names, ctx.needs_input_grad) if need)
        if not wanted:
            return tuple(None for _ in names)
        bw, k, bop = _backward(name, kernel, wanted, save)
        if k is None:
            return tuple(None for _ in names)
        feed = dict(inputs)
        feed.update({bw_name: by_node[i] for bw_name, i in bw.saved.items()})
        for o, grad in zip(outs, grads):
            if o in bw.cotangents:
                feed[bw.cotangents[o]] = grad.contiguous() if grad is not None else \
                    torch.zeros(kernel.output_specs[o][0], dtype=kernel.output_specs[o][1], device=kept[0].device)
        r = bop(*[feed[n] for n in k.input_names])
        r = (r,) if len(k.output_names) == 1 else r
        got = dict(zip(k.output_names, r))
        result = []
        for n in names:
            gr = bw.grads.get(n) if n in wanted else None
            if gr is None:
                result.append(None if n not in wanted else torch.zeros_like(inputs[n]))
            else:
                result.append(gr.like_input(got[gr.output], axes[n], g.axes))
        return tuple(result)

    custom.register_autograd(backward, setup_context=setup_context)


def _iterable(x) -> list:
    try:
        return list(x)
    except TypeError:
        return [None]  # not iterable: refused by the caller as not a list of names


def _is_weight(name: str) -> bool:
    """Inputs named W..., b or b_... are weights (the built-ins' convention); the rest are
    activations passed to forward."""
    return name.startswith("W") or name == "b" or name.startswith("b_")


def initial_value(g, n) -> str:
    """How a parameter starts, from what the graph does with it: "ones" where every reader
    multiplies a value over more axes by it (a gain: a norm's gamma), "zeros" where every reader
    adds it to one, or subtracts it from one (a bias), else "normal" (N(0, 1/fan_in) over its first
    axis: a projection). A gain drawn N(0, 1/d) would start the layer near zero."""
    readers = [r for r in g.nodes if n.id in r.args()]

    def broadcast(r, other) -> bool:
        return set(n.axes) < set(g.nodes[other].axes)
    if readers and all(r.op == "mul" and broadcast(r, r.b if r.a == n.id else r.a) for r in readers):
        return "ones"
    if readers and all((r.op == "add" and broadcast(r, r.b if r.a == n.id else r.a))
                       or (r.op == "sub" and r.b == n.id and broadcast(r, r.a)) for r in readers):
        return "zeros"
    return "normal"


class Module(torch.nn.Module):
    """A graph as an nn.Module: the inputs named in `weights` are parameters, initialised from what
    the graph does with them (initial_value: a gain at 1, a bias at 0, a projection N(0, 1/fan_in)
    over its first axis); forward takes the others, in graph order, and returns what the op
    returns. Without `weights` the built-ins' naming convention decides (W..., b, b_...): any other
    parameter (a norm's `gamma`) must be listed, e.g. Module(g, weights=["W_up", "gamma"]); the
    parameters are `module.weight_names`."""

    def __init__(self, source, *, weights=None, device=None, **compile_args):
        super().__init__()
        self.kernel = _compile(source, device=device, **compile_args)
        self.op = op(self.kernel)
        g = self.kernel.graph
        if weights is not None and (isinstance(weights, (str, bytes)) or not all(isinstance(w, str) for w in
                                                                                 _iterable(weights))):
            raise GraphError([f"leantile.torch.Module: weights= is {weights!r}; expected a list of input names "
                              f"such as {self.kernel.input_names[-1:]!r}"])
        wanted = set(weights) if weights is not None else {n for n in self.kernel.input_names if _is_weight(n)}
        unknown = wanted - set(self.kernel.input_names)
        if unknown:
            raise GraphError([f"{g.name}: weights {sorted(unknown)} are not inputs (inputs: "
                              f"{', '.join(self.kernel.input_names)})"])
        self.weight_names = [n for n in self.kernel.input_names if n in wanted]
        self.activation_names = [n for n in self.kernel.input_names if n not in wanted]
        for n in g.inputs():
            if n.name in wanted:
                shape, how = g.shape(n.id), initial_value(g, n)
                w = torch.ones(shape) if how == "ones" else torch.zeros(shape) if how == "zeros" else \
                    torch.randn(shape, dtype=torch.float32) / math.sqrt(max(1, shape[0] if shape else 1))
                self.register_parameter(n.name, torch.nn.Parameter(
                    w.to(TORCH_DTYPES[n.dtype]).to(self.kernel.device)))

    def forward(self, *activations):
        given = dict(zip(self.activation_names, activations))
        if len(activations) != len(self.activation_names):
            raise TypeError(f"{self.kernel.graph.name}: forward takes {', '.join(self.activation_names)} "
                            f"({len(self.activation_names)} tensors), got {len(activations)}")
        return self.op(*[given[n] if n in given else getattr(self, n) for n in self.kernel.input_names])
