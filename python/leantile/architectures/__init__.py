"""The built-in architectures: name -> module with DEFAULT_SIZES, body and build(**sizes)."""
from importlib import import_module

from ..ir import GraphError

NAMES = ("attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp", "layernorm_linear_gelu", "causal_attention",
         "sliding_window_attention", "gqa_attention")


def module(name: str):
    if name not in NAMES:
        raise GraphError([f"architecture {name!r} is not built in (built-ins: {', '.join(NAMES)})"])
    return import_module(f"{__name__}.{name}")


def build(name: str, **sizes):
    """The graph of a built-in, with any axis size overridden."""
    mod = module(name)
    unknown = sorted(set(sizes) - set(mod.DEFAULT_SIZES))
    if unknown:
        raise GraphError([f"architecture {name!r}: unknown size {unknown[0]!r} "
                          f"(axes: {', '.join(mod.DEFAULT_SIZES)})"])
    bad = [k for k, v in sizes.items() if not isinstance(v, int) or v < 1]
    if bad:
        raise GraphError([f"architecture {name!r}: size {bad[0]}={sizes[bad[0]]!r} must be a positive integer"])
    return mod.build(**sizes)
