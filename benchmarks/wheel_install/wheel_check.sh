#!/usr/bin/env bash
# Issue 14's install check, on a GPU machine: a non-editable install of the built wheel
# (dist/leantile-*.whl, `pip wheel --no-deps .`), run from a folder outside the checkout
# with the checkout's python/ NOT on the path, must find the shipped tuned entry and
# `leantile bench attention` must run the tuned plan. Usage: bash benchmarks/wheel_install/wheel_check.sh OUTDIR
set -euo pipefail
out=${1:?OUTDIR}
wheel=$(ls dist/leantile-*.whl | head -1)
# installed into a folder of its own with the python that has torch (a venv would not see a
# torch that lives in another environment); not editable: a copy of the wheel's files
site=$(mktemp -d)/site
python -m pip install -q --no-deps --no-index --target "$site" "$wheel"
here=$(mktemp -d) && cd "$here"
# keep what the machine lends (tilelang, pydantic), drop the checkout
export PYTHONPATH=$site:$(echo "${PYTHONPATH:-}" | tr ':' '\n' | grep -v "/python$" | paste -sd: -)
export XDG_DATA_HOME=$here/xdg  # an empty user tuned folder: only the shipped entries
python -c "import leantile, leantile.tuned as t; print('leantile from', leantile.__file__); print('shipped', t.shipped_dir())"
python -m leantile derive attention | sed -n 1,2p
python -m leantile bench attention --out "$out"
python - "$out" <<'PY'
import glob, json, sys
from leantile.tuned import load_tuned
row = json.load(open(glob.glob(sys.argv[1] + "/bench-*.json")[0]))["rows"][0]
import torch
want = load_tuned("attention", row["shape"], "f16", torch.cuda.get_device_name())
print("row:", row["candidate"], row["tiles"], "tuned" if row["tuned"] else "NOT tuned", "ok" if row["ok"] else "FAILED")
print("shipped entry:", want)
assert row["tuned"] and want and row["candidate"] == want[0] and all(row["tiles"][k] == v for k, v in want[1].items())
print("wheel check: the installed package ran the shipped tuned entry")
PY
