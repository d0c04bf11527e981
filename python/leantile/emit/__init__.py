"""Backends that turn a Plan into source code. `tilelang` is the GPU path."""
from .tilelang import EmitError, emit_module, emit_plan_to_dir, load_module  # noqa: F401
