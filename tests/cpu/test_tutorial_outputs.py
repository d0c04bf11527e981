"""The tutorial's command outputs are what the commands print (issue 47: several had drifted).
Every fenced block of docs/tutorial.md whose lines are `$ leantile show|validate|derive|export|list`
commands is run (export into a scratch folder) and compared with the block, line by line; the
shipped tuned folder prints as `.../leantile/tuned_configs` (it depends on the installation).
After a change that moves an output, regenerate the blocks and read the diff:

    python tests/cpu/test_tutorial_outputs.py --write
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tutorial.md"
RUNNABLE = re.compile(r"^\$ leantile (show|validate|derive|export|list)\b")
SHIPPED = ".../leantile/tuned_configs"


def blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) line indices of the body of each fenced block made only of runnable commands."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith("```"):  # an opening fence, with or without a language
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = lines[i + 1:j]
            cmds = [ln for ln in body if ln.startswith("$ ")]
            # runnable, on sources in the repository (not the tutorial's own my_geglu.py)
            if cmds and all(RUNNABLE.match(c) and _sources_exist(c) for c in cmds):
                out.append((i + 1, j))
            i = j + 1
        else:
            i += 1
    return out


def _sources_exist(cmd: str) -> bool:
    """Every file the command reads is in the repository (the tutorial's my_geglu.py is not)."""
    return all((ROOT / a.split(":")[0]).exists() for a in cmd.split()[2:] if a.endswith(".json") or ".py" in a)


def run_block(body: list[str], scratch: Path) -> list[str]:
    """The block as the commands print it now: each `$ command`, its stdout and stderr, `[exit N]`."""
    from leantile.tuned import shipped_dir

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'python'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("LEANTILE_TUNED_DIR", None)
    out = []
    for cmd in (ln[2:] for ln in body if ln.startswith("$ ")):
        argv = cmd.split()[1:]
        cwd = ROOT
        if argv[0] == "export":  # writes: into a scratch folder that sees the repository's sources
            cwd = scratch
            for name in ("examples", "exports"):
                if not (scratch / name).exists():
                    (scratch / name).symlink_to(ROOT / name) if name == "examples" else (scratch / name).mkdir()
        r = subprocess.run([sys.executable, "-m", "leantile", *argv], capture_output=True, text=True, env=env, cwd=cwd)
        text = (r.stdout + r.stderr).replace(str(shipped_dir()), SHIPPED).replace(str(ROOT) + "/", "")
        out += [f"$ {cmd}", *text.rstrip("\n").split("\n"), f"[exit {r.returncode}]"]
    return out


def _cases():
    text = DOC.read_text()
    lines = text.split("\n")
    return [pytest.param(s, e, id=lines[s][2:60]) for s, e in blocks(text)]


@pytest.mark.parametrize("start,end", _cases())
def test_tutorial_block_matches_the_commands(start, end, tmp_path):
    body = DOC.read_text().split("\n")[start:end]
    now = run_block(body, tmp_path)
    assert [ln.rstrip() for ln in now] == [ln.rstrip() for ln in body], "\n".join(
        f"{'+' if a != b else ' '} {a}" for a, b in zip(now, body + [""] * len(now)))


def test_the_tutorial_has_runnable_blocks():
    assert len(blocks(DOC.read_text())) >= 3


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile
    text = DOC.read_text()
    lines = text.split("\n")
    for s, e in reversed(blocks(text)):
        with tempfile.TemporaryDirectory() as tmp:
            lines[s:e] = run_block(lines[s:e], Path(tmp))
    DOC.write_text("\n".join(lines))
    print(f"rewrote {len(blocks(text))} blocks of {DOC.relative_to(ROOT)}")
