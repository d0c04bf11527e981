"""A digest of every emitted module of a fixed corpus: every candidate of every export, of the
soundness classes (tests/soundness_graphs.py), of the built-ins and of the losses reduced to a
scalar (tests/loss_graphs.py), each at its own sizes and at sizes that divide no tile, on f32
and 16-bit inputs, at the default tiles and at tiles that ask for the ping-pong GEMM schedule. For refactors that must not change what the
emitter prints (issue 48: "every emitted kernel of every export byte-identical before and after"):
run it before, keep the file, run it after with --compare. CPU only, no lowering (about a minute).

    PYTHONPATH=python:tests python3 tests/emitted_digest.py --out /tmp/before.json
    PYTHONPATH=python:tests python3 tests/emitted_digest.py --compare /tmp/before.json

Prints the keys whose module changed, appeared or went away; exits 1 if any did.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def corpus():
    """(name, graph) of the fixed corpus, each graph also at odd sizes and on 16-bit inputs."""
    from leantile import architectures, ir
    from soundness_graphs import CLASSES
    from strategies import inputs_in, resized
    base = [(Path(p).stem, ir.load(p)) for p in sorted(glob.glob(str(ROOT / "exports" / "*.json")))]
    base += [(f"class{n}", f()) for n, f in sorted(CLASSES.items())]
    base += [(f"builtin_{n}", architectures.build(n)) for n in architectures.NAMES]
    import loss_graphs
    base += [(f"loss_{n}", loss_graphs.build(n, sizes)) for n, sizes in
             (("cross_entropy", {"b": 300, "c": 70}), ("kl_batchmean", {"b": 33, "c": 1000}), ("triplet_margin", {"b": 20, "d": 129}))]
    for name, g in base:
        yield name, g
        odd = resized(g, lambda a, g=g: max(1, g.axes[a] - 1) if g.axes[a] > 64 else g.axes[a] + 3)
        yield f"{name}@odd", odd
        for dt in ("f16", "bf16"):
            try:
                yield f"{name}@{dt}", inputs_in(g, dt, only="f32")
            except ir.GraphError:
                continue


# the tiles tests/cpu/test_pingpong.py asks the ping-pong GEMM schedule with
PINGPONG = {"block_m": 128, "block_n": 128, "stages": 4, "threads": 256, "pingpong": 1}


def digests() -> dict[str, str]:
    from leantile import ir
    from leantile.derive import DerivationError, candidates, derive
    from leantile.emit import emit_module
    from leantile.emit.common import EmitError
    out = {}
    for name, g in corpus():
        try:
            cands = candidates(g)
        except (DerivationError, ir.GraphError) as e:
            out[name] = f"refused: {type(e).__name__}"
            continue
        for c in cands:
            for tag, tiles in (("", None), ("@pingpong", PINGPONG)):
                key = f"{name}/{c.name}{tag}"
                try:
                    src = emit_module(derive(g, c.name, tiles))
                except (DerivationError, EmitError, ir.GraphError) as e:
                    out[key] = f"refused: {type(e).__name__}: {str(e)[:80]}"
                    continue
                out[key] = hashlib.sha256(src.encode()).hexdigest()[:16]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--compare")
    a = ap.parse_args(argv)
    now = digests()
    if a.out:
        tmp = a.out + ".tmp"
        Path(tmp).write_text(json.dumps(now, indent=1, sort_keys=True))
        os.replace(tmp, a.out)
    print(f"{len(now)} modules or refusals")
    if a.compare:
        before = json.loads(Path(a.compare).read_text())
        changed = sorted(k for k in before.keys() & now.keys() if before[k] != now[k])
        gone, new = sorted(before.keys() - now.keys()), sorted(now.keys() - before.keys())
        for k in changed:
            print(f"changed  {k}: {before[k]} -> {now[k]}")
        for k in gone:
            print(f"gone     {k}")
        for k in new:
            print(f"new      {k}")
        print(f"{len(changed)} changed, {len(gone)} gone, {len(new)} new of {len(before)}")
        return 1 if changed or gone or new else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
