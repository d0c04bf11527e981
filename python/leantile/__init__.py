"""leantile: fused GPU kernels derived from neural-network graphs by proven rewrites.

    import leantile
    k = leantile.compile("attention")    # or a Graph, a leantile.dag.DagM, exports/*.json, module.py:fn
    O = k(Q, K, V)

`leantile.torch` turns a compiled kernel into a torch custom op or nn.Module. torch is imported
only when `compile`/`Kernel` are first used (`import leantile` stays light).
"""
__version__ = "0.1.0"

# loaded on first use: `import leantile` (and the command's entry point, leantile.entry) runs
# nothing slow, so that Ctrl-C is handled from the first moment (leantile.interrupts)
_LAZY = {"compile": "runtime", "Kernel": "runtime", "CompileError": "runtime",
         "Graph": "ir", "GraphError": "ir", "load": "ir", "parse": "ir", "vjp": "autodiff"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'leantile' has no attribute {name!r}")
