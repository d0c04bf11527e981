"""Packaging (issue 14): the tuned configurations ship inside the package, a user's search
results go to a user folder, and one lookup reads both with a stated precedence
(leantile.tuned: the user's entry for a (shape, dtype, GPU) first, then the shipped one).

The wheel test builds the wheel from a copy of the sources, installs it (not editable) into a
fresh venv, and runs the installed `leantile` from another folder: it must find the shipped
configurations inside the installed package, not in a checkout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from leantile import architectures, tuned

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"m": 64, "d": 96, "n": 80}
TILES_A = {"block_m": 64, "block_n": 64, "block_k": 32, "stages": 2, "threads": 128}
TILES_B = {"block_m": 128, "block_n": 128, "block_k": 64, "stages": 3, "threads": 256}


def entry(tiles, time_ms, gpu="NVIDIA H200", candidate="direct", shape=SHAPE):
    return {"arch": "matmul", "shape": shape, "dtype": "f16", "gpu": gpu,
            "candidate": candidate, "tiles": tiles, "time_ms": time_ms}


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """(user folder, shipped folder), both empty and private to the test."""
    user, shipped = tmp_path / "user", tmp_path / "shipped"
    monkeypatch.setenv("LEANTILE_TUNED_DIR", str(user))
    monkeypatch.setattr(tuned, "shipped_dir", lambda: shipped)
    return user, shipped


def test_user_entry_wins_over_a_faster_shipped_one_for_the_same_key(folders):
    user, shipped = folders
    tuned.save_tuned(entry(TILES_A, 0.010), shipped)
    assert tuned.load_tuned("matmul", SHAPE, "f16", "H200") == ("direct", TILES_A)
    tuned.save_tuned(entry(TILES_B, 0.020), user)  # slower, but measured on this installation
    assert tuned.load_tuned("matmul", SHAPE, "f16", "H200") == ("direct", TILES_B)
    got = tuned.tuned_entries("matmul", SHAPE, "f16", "H200")
    assert [f for _, f in got] == [user, shipped]  # both listed, in lookup order
    assert tuned.load_tuned("matmul", SHAPE, "f16", "H200", root=shipped) == ("direct", TILES_A)


def test_shipped_entry_is_used_where_the_user_folder_has_none_for_that_key(folders):
    user, shipped = folders
    tuned.save_tuned(entry(TILES_A, 0.010), shipped)
    tuned.save_tuned(entry(TILES_B, 0.005, gpu="NVIDIA H100 80GB HBM3"), user)  # another GPU
    tuned.save_tuned(entry(TILES_B, 0.005, shape={**SHAPE, "m": 65}), user)  # another shape
    assert tuned.load_tuned("matmul", SHAPE, "f16", "H200") == ("direct", TILES_A)
    assert tuned.load_tuned("matmul", SHAPE, "f16", "H100") == ("direct", TILES_B)
    assert tuned.load_tuned("matmul", SHAPE, "bf16", "H200") is None


def test_writers_default_to_the_user_folder_and_never_the_package(folders):
    user, shipped = folders
    written = tuned.save_tuned(entry(TILES_A, 0.01))
    assert written == user / "matmul.json" and not shipped.exists()


def test_user_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("LEANTILE_TUNED_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert tuned.user_dir() == tmp_path / "xdg" / "leantile" / "tuned"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuned.user_dir() == tmp_path / "home" / ".local" / "share" / "leantile" / "tuned"
    monkeypatch.setenv("LEANTILE_TUNED_DIR", str(tmp_path / "mine"))
    assert tuned.user_dir() == tmp_path / "mine"
    assert tuned.lookup_dirs() == [tmp_path / "mine", tuned.shipped_dir()]


def test_every_shipped_file_is_valid_and_belongs_to_the_package():
    shipped = tuned.shipped_dir()
    assert shipped.parent == Path(tuned.__file__).resolve().parent
    files = sorted(shipped.glob("*.json"))
    assert {f.stem for f in files} >= set(architectures.NAMES)  # every built-in has its tuned entries
    for f in files:
        data = json.loads(f.read_text())
        assert data["schema"] == tuned.SCHEMA and data["entries"], f
        assert all(tuned.entry_problem(e) is None for e in data["entries"]), f


# ------------------------------------------------------------------ the wheel, installed
def _outer_site_dirs() -> list[str]:
    """Where this interpreter finds torch, pydantic, ...: lent to the fresh venv as plain path
    entries (so their .pth files, the editable install of leantile among them, are not run)."""
    import site

    dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    dirs += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


@pytest.mark.slow
def test_installed_wheel_finds_the_shipped_configurations(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "python", src / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LEANTILE_TUNED_DIR")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")  # an empty user folder: only the shipped entries
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)], check=True, env=env, cwd=tmp_path)
    wheel = next(dist.glob("leantile-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("leantile/tuned_configs/") and n.endswith(".json"))
    assert {Path(n).stem for n in shipped} == {f.stem for f in tuned.shipped_dir().glob("*.json")}
    assert any(n.startswith("leantile/report/assets/") for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site_dir = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    (site_dir / "outer_deps.pth").write_text("\n".join(_outer_site_dirs()) + "\n")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, env=env, cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    exe = env_dir / "bin" / "leantile"

    def run(*argv):
        r = subprocess.run([str(exe), *argv], capture_output=True, text=True, env=env, cwd=elsewhere)
        assert r.returncode == 0, (argv, r.stdout, r.stderr)
        return r.stdout

    where = subprocess.run([py, "-c", "import leantile.tuned as t; print(t.shipped_dir())"],
                           check=True, capture_output=True, text=True, env=env, cwd=elsewhere).stdout.strip()
    assert Path(where).is_relative_to(site_dir) and Path(where).is_dir()
    assert run("list").split()[0] == architectures.NAMES[0]
    out = run("derive", "attention")
    stored = json.loads((Path(where) / "attention.json").read_text())["entries"]
    assert stored
    for e in stored:  # each shipped entry for the published shape is listed, from the installed package
        line = next(x for x in out.splitlines() if x.strip().startswith("tuned") and e["gpu"] in x)
        assert e["candidate"] in line and f"shipped, {where}/attention.json" in line
    assert not list(elsewhere.iterdir())  # nothing written where it ran
