"""The best configuration found by `leantile search`, per workload and GPU.

Where they live, and the one lookup (`load_tuned` without `root`), in this precedence:
  1. the user's folder, `user_dir()`: $LEANTILE_TUNED_DIR, else $XDG_DATA_HOME/leantile/tuned
     (~/.local/share/leantile/tuned). `leantile search` and `leantile tune` write here by
     default: a user's own measurements, on the user's GPU.
  2. the shipped folder, `shipped_dir()`: leantile/tuned_configs/ inside the installed package
     (package data, so a wheel keeps them), written by the project's `make kernels`.
For a (shape, dtype, GPU) that the user's folder has an entry for, that entry is used, even
when a shipped one is faster (it was measured later, with this installation); otherwise the
shipped entry. `root=` reads one folder only (tests, `search --out`).

<folder>/<arch>.json (schema "leantile-tuned/v1"):
    {"schema": ..., "arch": "attention", "entries": [
        {"arch", "shape": {axis: size}, "dtype": "f16", "gpu": "NVIDIA H200",
         "candidate": "online_exp2", "tiles": {"block_m": 128, ...}, "time_ms": 0.24, ...}]}
One entry per (shape, dtype, gpu); a new search result for the same key replaces it, so an
entry of a `--fake` search (gpu "fake") never replaces one measured on a GPU.

Reading is strict (`TunedEntry`): the required keys, positive integer sizes, a known dtype,
only the tunable tile names (leantile.emit.tilelang.TUNABLE) with integer values in range
(`true` is not 1), a finite positive time. An entry that fails is ignored, with one warning
line on stderr naming the file, the entry's index and the problem (each line once per process).
A stored entry with an impossible time (-1 ms, NaN) is therefore absent: it never blocks a search.

A file that cannot be parsed (not UTF-8, not JSON, truncated, another schema, a folder) is
never overwritten: `save_tuned` warns (one line naming it) and writes the entry to
`<arch>.new.json` beside it, leaving `<arch>.json` byte for byte as it was. `load_tuned` reads
both files and takes the fastest valid entry. Once `<arch>.json` parses again (fixed or removed
by hand), the next save merges `<arch>.new.json` into it (its entries win: they are the newer)
and removes it. When both files are unparsable nothing is written (GraphError naming both).
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .tiles import Tiles, UserTiles  # the one definition of tile names, ranges and allowed blocks

SCHEMA = "leantile-tuned/v1"
BESIDE = ".new.json"  # <arch>.new.json: where entries go while <arch>.json cannot be parsed


class TunedEntry(BaseModel):
    """One entry as read from a tuned file; other keys (roofline_ms, search, source) are kept."""
    model_config = ConfigDict(extra="allow", strict=True)
    # the strings are printed (derive's tuned lines, search, warnings): printable ASCII only, so
    # a file cannot reach the terminal with escape codes or a forged "error:" line of its own
    arch: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    shape: dict[str, Annotated[int, Field(strict=True, gt=0)]]
    dtype: Literal["f16", "bf16", "f32", "f64"]
    gpu: Annotated[str, Field(min_length=1, max_length=120, pattern=r"^[ -~]+$")]
    candidate: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_+.-]+$")]
    tiles: UserTiles  # blocks the kernels can use (tiles.BLOCK_RULE)
    time_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    @field_validator("shape")
    @classmethod
    def _shape(cls, v):
        if not v:
            raise ValueError("empty shape")
        return v


def valid_time(t) -> bool:
    """A time that can be a result: a finite positive number (not a bool, not a string)."""
    return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0


def entry_problem(e) -> str | None:
    """Why e is not a usable tuned entry (one line), or None."""
    if not isinstance(e, dict):
        return f"not an object but {type(e).__name__}"
    try:
        TunedEntry.model_validate(e)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) if str(x).isidentifier() or isinstance(x, int) else repr(x)[:40]
                         for x in first["loc"]) or "entry"  # a key from the file never breaks the line
        if first["type"] == "extra_forbidden":
            return f"{where}: unknown tile parameter (known: {', '.join(Tiles.model_fields)})"
        if first["type"] == "missing":
            return f"{where}: missing"
        return f"{where}: {first['msg']} (got {first.get('input')!r:.40})"
    return None


def check_entry(e: dict) -> dict:
    """e, or ValueError naming its problem (what writers call before saving)."""
    problem = entry_problem(e)
    if problem is not None:
        raise ValueError(f"refusing to save a tuned entry: {problem}")
    return e


# ------------------------------------------------------------------------ warnings
_WARNED: set[str] = set()
_WARN_PER_FILE = 20
_WARN_COUNT: dict[str, int] = {}


def _warn(path: Path, text: str) -> None:
    """One line on stderr, each at most once per process, at most _WARN_PER_FILE per file."""
    line = f"warning: {path}: {text}"
    if line in _WARNED:
        return
    _WARNED.add(line)
    n = _WARN_COUNT[str(path)] = _WARN_COUNT.get(str(path), 0) + 1
    if n < _WARN_PER_FILE:
        print(line, file=sys.stderr)
    elif n == _WARN_PER_FILE:
        print(f"warning: {path}: further problems not shown", file=sys.stderr)


# ------------------------------------------------------------------------ reading
def shipped_dir() -> Path:
    """The tuned configurations that ship with the package (package data)."""
    return Path(__file__).resolve().parent / "tuned_configs"


def user_dir() -> Path:
    """Where a user's search results go: $LEANTILE_TUNED_DIR, else the XDG data folder."""
    env = os.environ.get("LEANTILE_TUNED_DIR")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "leantile" / "tuned"


def lookup_dirs() -> list[Path]:
    """The folders the lookup reads, first wins: the user's, then the shipped one."""
    user, shipped = user_dir(), shipped_dir()
    return [user] if user.resolve() == shipped.resolve() else [user, shipped]


MAX_TUNED_BYTES = 16 << 20  # a tuned file is kilobytes (one entry per workload and GPU)


def _paths(arch: str, root) -> tuple[Path, Path]:
    """(<root>/<arch>.json, <root>/<arch>.new.json); ValueError for an arch that is not a plain name."""
    from .files import under

    root = Path(root or user_dir())
    return under(root, f"{arch}.json"), under(root, f"{arch}{BESIDE}")


def _parse(path: Path, arch: str) -> tuple[list | None, str | None]:
    """(the file's entries, None), ([], None) when it does not exist, or (None, why it cannot be parsed)."""
    from .files import NotReadable, load_json, read_capped

    if not path.exists() and not path.is_symlink():
        return [], None
    try:  # a FIFO, a device, an 8 GiB sparse file: refused, not read
        data = load_json(read_capped(path, MAX_TUNED_BYTES, "tuned file").decode("utf-8"))
    except NotReadable as e:
        return None, str(e).split(": ", 1)[-1]
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError as e:  # load_json: nesting past the stack too
        return None, f"not JSON ({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})"
    if not isinstance(data, dict):
        return None, f"not a {SCHEMA} object"
    if data.get("schema") != SCHEMA:
        return None, f"schema {data.get('schema')!r:.40}, expected {SCHEMA!r}"
    if not isinstance(data.get("entries"), list):
        return None, "no list of entries"
    if data.get("arch", arch) != arch:
        return None, f"holds arch {data.get('arch')!r:.40}, not {arch!r}"
    return data["entries"], None


def _valid(path: Path, entries: list, arch: str) -> list[dict]:
    """The entries that pass TunedEntry and belong to arch; a warning for each other one."""
    out = []
    for i, e in enumerate(entries):
        problem = entry_problem(e)
        if problem is None and e["arch"] != arch:
            problem = f"arch {e['arch']!r:.40}, not {arch!r}"
        if problem is None:
            out.append(e)
        else:
            _warn(path, f"entry {i}: {problem}; ignored")
    return out


def _stored(arch: str, root) -> list[dict]:
    """Every valid entry of <arch>.json and <arch>.new.json (unparsable files warned about, skipped)."""
    out = []
    main, beside = _paths(arch, root)
    for path in (main, beside):
        entries, problem = _parse(path, arch)
        if problem is not None:
            _unparsable(path, problem, beside if path == main else None)
        else:
            out += _valid(path, entries, arch)
    return out


def _unparsable(path: Path, problem: str, beside: Path | None) -> None:
    """The one warning about a file that cannot be parsed (the same line when read and written)."""
    _warn(path, f"cannot be parsed: {problem}; left as it is" +
          (f", entries are saved to {beside.name} beside it" if beside is not None else ", ignored"))


def _key(e) -> tuple[str, str, str] | None:
    """What one entry is for: (shape, dtype, gpu); None for something that is not an entry."""
    if not isinstance(e, dict):
        return None
    return json.dumps(e.get("shape"), sort_keys=True, default=str), str(e.get("dtype")), str(e.get("gpu"))


# ------------------------------------------------------------------------ writing
def _dump(arch: str, entries: list) -> str:
    entries = sorted(entries, key=lambda e: _key(e) or ("", "", ""))
    return json.dumps({"schema": SCHEMA, "arch": arch, "entries": entries}, indent=1, sort_keys=True) + "\n"


def save_tuned(entry: dict, root: str | Path | None = None) -> Path:
    """Insert or replace the entry for its (shape, dtype, gpu) in <root>/<arch>.json, atomically.
    Other entries are kept as they are (invalid ones too: ignored on read, never deleted).
    Returns the file written (<arch>.new.json where <arch>.json cannot be parsed)."""
    from . import ir
    from .files import write_atomic

    check_entry(entry)
    arch = entry["arch"]
    main, beside = _paths(arch, root)
    m_entries, m_problem = _parse(main, arch)
    b_entries, b_problem = _parse(beside, arch)
    if m_problem is None:
        keys = {_key(e) for e in (b_entries or [])} | {_key(entry)}
        merged = [e for e in m_entries if _key(e) is None or _key(e) not in keys]
        merged += [e for e in (b_entries or []) if _key(e) != _key(entry)] + [entry]
        write_atomic(main, _dump(arch, merged))
        if b_problem is None and beside.exists():  # merged into <arch>.json: the stand-in is done
            beside.unlink()
        return main
    _unparsable(main, m_problem, beside)
    if b_problem is not None:
        raise ir.GraphError([f"{main}: cannot be parsed ({m_problem}) and neither can {beside.name} "
                             f"({b_problem}); fix or remove one of them (nothing was saved)"])
    write_atomic(beside, _dump(arch, [e for e in b_entries if _key(e) != _key(entry)] + [entry]))
    return beside


def save_if_faster(entry: dict, root: str | Path | None = None, replace: bool = False) -> tuple[Path | None, dict | None]:
    """Save entry unless a valid stored one for its (shape, dtype, gpu) is faster (a short or
    interrupted search must not replace what a longer one found); `replace` saves anyway.
    Returns (the file written, or None; the faster entry kept, or None)."""
    check_entry(entry)
    same = [e for e in _stored(entry["arch"], root) if _key(e) == _key(entry)]
    stored = min(same, key=lambda e: e["time_ms"], default=None)
    if not replace and stored is not None and stored["time_ms"] < entry["time_ms"]:
        return None, stored
    return save_tuned(entry, root), None


def tuned_entries(arch: str, shape: dict, dtype: str = "f16", gpu: str | None = None,
                  root: str | Path | None = None) -> list[tuple[dict, Path]]:
    """Every usable (entry, folder) for this shape and dtype, in lookup precedence (the user's
    folder before the shipped one; `root`: that folder only), fastest first within a folder.

    gpu: a name or part of one ("H200"), case-insensitive; None takes any real GPU (entries
    from `--fake` searches, gpu "fake", and of an "unknown" measurer are used only when asked
    for by name). Invalid entries and unparsable files are skipped with a warning."""
    try:
        want = {k: int(v) for k, v in shape.items()}
    except (ValueError, TypeError):  # a size that is no integer
        return []
    found = []
    for folder in ([Path(root)] if root is not None else lookup_dirs()):
        try:
            stored = _stored(arch, folder)
        except ValueError:  # an arch that is no file name
            return []
        here = []
        for e in stored:
            if e["shape"] != want or e["dtype"] != dtype:
                continue
            name = e["gpu"]
            if gpu is None and name in ("fake", "unknown"):
                continue
            if gpu is not None and gpu.lower() not in name.lower():
                continue
            here.append((e, folder))
        found += sorted(here, key=lambda ef: ef[0]["time_ms"])
    return found


def load_tuned(arch: str, shape: dict, dtype: str = "f16", gpu: str | None = None,
               root: str | Path | None = None) -> tuple[str, dict] | None:
    """(candidate, tiles) of the entry the lookup picks for this shape, dtype and gpu, or None:
    the fastest of the first folder (user's, then shipped; or `root` alone) that has one."""
    found = tuned_entries(arch, shape, dtype, gpu, root)
    if not found:
        return None
    best = found[0][0]
    return best["candidate"], dict(best["tiles"])


def shipped_plan(g, gpu: str | None = None, tuned: bool = True):
    """(plan, how): THE plan leantile runs for g where nothing is asked, shared by
    leantile.compile, `leantile derive` and `leantile kernels`: the tuned entry for g's shape,
    dtype and `gpu` (user folder, then shipped; a usable one: its candidate exists for g), how
    "tuned"; else the candidate the cost model ranks first at the shape's default tiles
    (cost.choose), how "default". It lives with the tuned store, above the derivation and the
    cost model it calls."""
    from .cost import choose
    from .derive import DerivationError, derive

    if tuned and gpu:
        best = load_tuned(g.name, g.axes, g.inputs()[0].dtype if g.inputs() else "f16", gpu)
        if best:
            try:  # an entry of another graph of the same name may name a candidate g does not have
                return derive(g, best[0], best[1]), "tuned"
            except DerivationError:
                pass
    return choose(g)[0], "default"
