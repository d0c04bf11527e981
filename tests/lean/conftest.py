import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


# A fake `lake` (logic only, no Lean): `build` succeeds; `env lean FILE` answers every
# `#print axioms NAME` in FILE with the line of the first suffix of `answers` NAME ends with
# (`{name}` and `{file}` filled in), else the three standard axioms. Shared by test_check_lean
# and test_axioms.
_FAKE_LAKE = '''#!{python}
import re, sys
answers = {answers!r}
args = sys.argv[1:]
if args[:1] == ["build"]:
    sys.exit(0)
if args[:2] == ["env", "lean"]:
    for name in re.findall(r"#print axioms (\\S+)", open(args[2]).read()):
        line = next((v for k, v in answers.items() if name.endswith(k)),
                    "'{{name}}' depends on axioms: [propext, Classical.choice, Quot.sound]")
        print(line.format(name=name, file=args[2]))
    sys.exit(0)
sys.exit(2)
'''


def fake_lake_project(tmp_path, answers: dict) -> tuple[str, "Path"]:
    """(path of a fake lake, a copy of the Lean project for it to 'check')."""
    import shutil
    import stat

    repo = HERE.parents[1]
    lake = tmp_path / "bin" / "lake"
    lake.parent.mkdir()
    lake.write_text(_FAKE_LAKE.format(python=sys.executable, answers=answers))
    lake.chmod(lake.stat().st_mode | stat.S_IEXEC)
    proj = tmp_path / "proj"
    shutil.copytree(repo / "lean", proj / "lean")
    shutil.copy(repo / "lakefile.lean", proj / "lakefile.lean")
    return str(lake), proj
