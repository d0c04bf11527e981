"""leantile: fused GPU kernels derived from neural-network graphs by proven rewrites."""
from .ir import Graph, GraphError, load, parse  # noqa: F401

__version__ = "0.1.0"
