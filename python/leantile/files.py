"""Files the commands write: atomically (a reader never sees a half-written output) and only
under the folder the user chose (a name taken from a graph can never point elsewhere)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


class UnsafePath(ValueError):
    """A path built from untrusted parts (graph names, candidate names) leaves its root."""


def under(root, *parts: str) -> Path:
    """root/parts..., refused unless it resolves to a path inside root (symlinks followed):
    absolute parts, '..', NUL and empty names cannot escape the output folder."""
    root_r = Path(root).resolve()
    for p in parts:
        s = str(p)
        if not s or "\x00" in s or s in (".", "..") or "/" in s or "\\" in s or os.sep in s:
            raise UnsafePath(f"{s!r}: not a plain file name (inside {root})")
    path = Path(root).joinpath(*parts)
    resolved = path.resolve()
    if resolved != root_r and root_r not in resolved.parents:
        raise UnsafePath(f"{path}: resolves outside {root}")
    return path


def write_atomic(path, data: str | bytes, root=None) -> Path:
    """Write path by a rename of a finished temporary file. With `root`, path must lie
    inside it (checked after resolving symlinks)."""
    path = Path(path)
    if root is not None:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
        if rel.startswith(".."):
            raise UnsafePath(f"{path}: outside {root}")
        path = under(root, *Path(rel).parts) if rel != "." else path
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
