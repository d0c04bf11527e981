"""The user architectures that are not built in (issue 8): name -> source spec, as a user
passes it to `leantile kernels` / `export` / `derive`. Their Lean sources live in
lean/LeanTile/Architectures/ and their committed exports in exports/."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_DIR = REPO / "examples" / "architectures"

EXAMPLES = {name: f"{EXAMPLE_DIR / name}.py:build" for name in ("geglu", "attention_scaled", "softmax_row")}


def example_module(name: str):
    """The user's module (DEFAULT_SIZES, body, build), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"byo_example_{name}", EXAMPLE_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
