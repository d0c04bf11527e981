"""leantile: fused GPU kernels derived from neural-network graphs by proven rewrites.

    import leantile
    k = leantile.compile("attention")    # or a Graph, a leantile.dag.DagM, exports/*.json, module.py:fn
    O = k(Q, K, V)

`leantile.torch` turns a compiled kernel into a torch custom op or nn.Module. torch is imported
only when `compile`/`Kernel` are first used (`import leantile` stays light).
"""
from .ir import Graph, GraphError, load, parse  # noqa: F401

__version__ = "0.1.0"

_LAZY = {"compile": "runtime", "Kernel": "runtime", "CompileError": "runtime"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'leantile' has no attribute {name!r}")
