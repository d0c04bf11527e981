"""Files the commands write: atomically (a reader never sees a half-written output) and only
under the folder the user chose (a name taken from a graph can never point elsewhere)."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from .errors import GraphError


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


# -- whole output folders: built in a stage beside --out, published in one rename ---------------
#
# A command that writes a folder (kernels, report) checks --out first (check_out_dir), builds
# the complete new folder in a hidden stage next to it (make_stage), and publishes it with one
# rename (publish): a reader, or a kill at any moment, sees the old folder or the new one, never
# a mix. A stage is named `.<out>.<pid>-<start>.<random>.tmp` after the process that made it
# (pid and start time, so a reused pid is not mistaken for it); the next run beside the same
# --out removes stages whose process is gone (clean_stale).

STAGE_MAX_AGE_S = 6 * 3600  # stages with no owner recorded (older leantile versions) are removed after this
_STAGE_REST = re.compile(r"(?:(?P<pid>\d+)-(?P<start>\d+)\.[A-Za-z0-9_]+(?P<old>\.old)?|(?P<legacy>[a-z0-9_]{8}))")
_MINE: set[str] = set()  # stages made by this process and not yet published or removed


def _bad_out(flag: str, out, why: str):
    return GraphError([f"{flag} {_shown(out)}: {why}"])


def read_only(p: Path) -> bool:
    """A file or folder not writable by us, or marked read-only by its owner (root writes
    anywhere, but what the user made read-only is not ours to change)."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return True
    need = os.W_OK | (os.X_OK if stat.S_ISDIR(mode) else 0)  # a folder must also be enterable
    return not os.access(p, need) or not mode & stat.S_IWUSR


def check_out_dir(out, flag: str = "--out") -> Path:
    """The output folder named by `flag`, as an absolute path with symlinks resolved; bad
    ones raise GraphError with one line naming the flag (NUL, a file, under a file, a symlink
    loop or under one, read-only, a name too long). Nothing is created here."""
    s = os.fspath(out) if not isinstance(out, str) else out
    if "\x00" in s:
        raise _bad_out(flag, out, "a path cannot contain a NUL character")
    if not s.strip():
        raise _bad_out(flag, out, "empty path")
    try:
        p = Path(os.path.realpath(os.path.abspath(s)))
        if p.parent == p:
            raise _bad_out(flag, out, "is the root folder")
        if len(os.fsencode(str(p))) > 3800 or any(len(os.fsencode(c)) > 255 for c in p.parts):
            raise _bad_out(flag, out, "path or a name in it is too long")
        # realpath leaves a symlink loop unresolved, and exists() says False for it: the loop
        # was taken for a folder still to be made (publish then swapped the link itself away)
        looked = _lookup(p)
        if looked == errno.ELOOP:
            where = "is a symlink loop" if os.path.islink(p) else "is under a symlink loop"
            raise _bad_out(flag, out, f"{where}, not a folder")
        if looked not in (0, errno.ENOENT, errno.ENOTDIR):  # under a file: named below
            raise _bad_out(flag, out, f"cannot use it ({os.strerror(looked)})")
        if p.exists():
            if not p.is_dir():
                raise _bad_out(flag, out, "exists and is not a folder")
            if read_only(p) or not os.access(p, os.R_OK):
                raise _bad_out(flag, out, "folder is read-only")
        anc = p.parent
        while not anc.exists() and anc.parent != anc:
            anc = anc.parent
        if not anc.is_dir():
            raise _bad_out(flag, out, f"is under {anc}, which is not a folder")
        if read_only(anc):
            raise _bad_out(flag, out, f"cannot write in {anc} (read-only)")
    except OSError as e:  # a folder on the way we may not even look into
        raise _bad_out(flag, out, f"cannot use it ({e.strerror or e})") from None
    return p


def _lookup(p: Path) -> int:
    """0 where p exists, else the errno of looking it up (ENOENT: absent; ELOOP: a symlink loop
    on the way; ENOTDIR: a file on the way)."""
    try:
        os.stat(p)
    except OSError as e:
        return e.errno or errno.EIO
    return 0


MAX_MARKER_BYTES = 64 << 20  # index.json / reports.json of a folder a command wrote: kilobytes


def check_replaceable(out: Path, marker: str, key: str, flag: str, command: str) -> None:
    """A folder that publish() may replace: absent, empty, or written by this command (its
    `marker` file is a JSON object with `key`). Anything else holds someone's files: refused,
    never deleted."""
    try:
        if not out.is_dir() or not any(out.iterdir()):
            return
    except OSError as e:
        raise _bad_out(flag, out, f"cannot read it ({e.strerror})") from None
    try:  # a FIFO or a huge file put there as the marker is refused, never read
        data = load_json(read_capped(out / marker, MAX_MARKER_BYTES, "marker file"))
    except (NotReadable, ValueError):
        data = None
    if not (isinstance(data, dict) and key in data):
        raise _bad_out(flag, out, f"folder has files not written by leantile {command} (no {marker} of its own); "
                       "refusing to replace it: choose a new or empty folder")


def _proc_start(pid: int) -> str:
    """The start time of process pid (clock ticks since boot, Linux), '' where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return ""


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError, OSError):
        return False
    now = _proc_start(pid)
    return not (now and start != "0" and now != start)


def _stage_prefix(out: Path) -> str:
    return f".{out.name[:80]}."


def clean_stale(out: Path, max_age_s: float = STAGE_MAX_AGE_S) -> list[Path]:
    """Remove the stages next to out left by runs that were killed: those whose process is
    gone, and those with no owner recorded that are older than max_age_s. A folder set aside
    by a publish that was killed (`.old.tmp`) is put back when out is missing."""
    out = Path(out)
    prefix, removed = _stage_prefix(out), []
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return removed
    for p in siblings:
        name = p.name
        if not (name.startswith(prefix) and name.endswith(".tmp")) or str(p) in _MINE:
            continue
        m = _STAGE_REST.fullmatch(name[len(prefix):-4])
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m["pid"]:
            if _alive(int(m["pid"]), m["start"]):
                continue
        else:
            try:
                if time.time() - p.stat().st_mtime < max_age_s:
                    continue
            except OSError:
                continue
        if m["old"] and not os.path.lexists(out):
            try:
                os.rename(p, out)  # the previous output, set aside by a publish that was killed
                continue
            except OSError:
                pass
        shutil.rmtree(p, ignore_errors=True)
        if not os.path.lexists(p):
            removed.append(p)
    return removed


def make_stage(out: Path, flag: str = "--out") -> Path:
    """A new empty stage beside out (its parent is created), after removing stale ones."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        pid = os.getpid()
        stage = Path(tempfile.mkdtemp(dir=out.parent, suffix=".tmp",
                                      prefix=f"{_stage_prefix(out)}{pid}-{_proc_start(pid) or 0}."))
    except OSError as e:
        raise _bad_out(flag, out, f"cannot create a folder there ({e.strerror or e})") from None
    _MINE.add(str(stage))
    umask = os.umask(0)
    os.umask(umask)
    try:  # mkdtemp makes 0700; the published folder gets the old one's mode, else the usual one
        os.chmod(stage, stat.S_IMODE(out.stat().st_mode) if out.is_dir() else 0o777 & ~umask)
    except OSError:
        pass
    return stage


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0


def publish(stage: Path, out: Path) -> None:
    """Make the finished stage the folder out, in one rename; the old out is removed after.
    Where an atomic swap is not available, the old out is renamed aside first (a kill between
    the two renames leaves it as `.<out>.<owner>.old.tmp`, which the next run puts back)."""
    stage, out = Path(stage), Path(out)
    if not os.path.lexists(out):
        os.rename(stage, out)
    elif _exchange(stage, out):
        shutil.rmtree(stage, ignore_errors=True)  # now the old output
    else:
        aside = stage.with_name(stage.name[:-len(".tmp")] + ".old.tmp")
        os.rename(out, aside)
        os.rename(stage, out)
        shutil.rmtree(aside, ignore_errors=True)
    _MINE.discard(str(stage))


def discard(stage: Path) -> None:
    """Remove a stage that will not be published (an error, an interrupt)."""
    shutil.rmtree(stage, ignore_errors=True)
    _MINE.discard(str(stage))


# -- files the commands read: regular files only, and no more than a cap ------------------------
#
# A FIFO given as a graph or tuned file blocked `validate` forever; an 8 GiB sparse file as the
# tuned file was read whole by every command. Every file a command reads from the user goes
# through read_capped: opened without blocking, refused unless it is a regular file, refused
# past its cap before anything is read.

class NotReadable(ValueError):
    """A path that is not a regular file, is larger than its cap, or cannot be opened."""


def regular_file(path, cap: int, what: str = "file") -> int:
    """The size of `path`, a regular file of at most `cap` bytes; NotReadable names the problem
    (no read, and no open that could block: a FIFO, a device, a folder are refused by stat)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise NotReadable(f"{_shown(path)}: cannot read the {what} ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise NotReadable(f"{_shown(path)}: {kind}, not a {what}")
    if st.st_size > cap:
        raise NotReadable(f"{_shown(path)}: {st.st_size} bytes, more than a {what} may have ({_human(cap)})")
    return st.st_size


def read_capped(path, cap: int, what: str = "file") -> bytes:
    """The bytes of `path`, a regular file of at most `cap` bytes (regular_file's checks; the
    open does not block on a FIFO swapped in after the check, and no more than cap + 1 bytes are
    read even if the file grows meanwhile)."""
    regular_file(path, cap, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise NotReadable(f"{_shown(path)}: cannot read the {what} ({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
            raise NotReadable(f"{_shown(path)}: not a regular file, not a {what}")
        chunks, left = [], cap + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError as e:
        raise NotReadable(f"{_shown(path)}: cannot read the {what} ({e.strerror or e})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise NotReadable(f"{_shown(path)}: more than a {what} may have ({_human(cap)})")
    return data


def _human(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes"


def _shown(path) -> str:
    s = os.fspath(path) if not isinstance(path, str) else path
    s = s if isinstance(s, str) else os.fsdecode(s)
    return s if s.isprintable() and len(s) <= 200 else (repr(s)[:197] + "...")


# -- JSON from the user's files: every failure a ValueError -----------------------------------
#
# json.loads recurses once per nesting level: a 50,000-deep array in a search database's row
# raised RecursionError, which no reader caught, and the command ended in "internal error".
# Every JSON that comes from a file the user gave or may have edited (a tuned file, a search
# database's rows, the marker of an output folder, a results file) is decoded here. Graph files
# have their own decoder with a depth limit and duplicate keys refused (ir.decode_json).

def load_json(text: str | bytes | bytearray):
    """json.loads(text); whatever makes text unusable is a ValueError (one line): a syntax error,
    bytes that are not UTF-8, an integer too long to convert, nesting deeper than the stack."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None
