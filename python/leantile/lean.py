"""Proof status of the Lean lemmas that the rule table cites (`leantile check-lean`).

Each cited theorem is reported as

* ``checked``   -- Lean elaborated it and `#print axioms` lists only the standard axioms
                   ``propext``, ``Classical.choice``, ``Quot.sound`` (``ALLOWED_AXIOMS``);
                   ``axioms`` holds what it printed;
* ``failed``    -- with the message: a build error in its file, an unknown name, a
                   dependency on any other axiom (``sorryAx``: a ``sorry`` is left; a user
                   ``axiom``; ``Lean.ofReduceBool`` from ``native_decide``; ...), named in the
                   message, or no answer from Lean;
* ``unchecked`` -- there is no Lean toolchain here (``lake`` is not on PATH), so
                   nothing was checked. Never reported as proven.

When ``lake`` exists: ``lake build``, then (through ``leanclient``, imported lazily) the
diagnostics of every lemma file and the `#print axioms` output of every cited theorem.
Without ``leanclient`` the same information is read from ``lake env lean`` on a scratch
file. This module imports nothing heavy at import time.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Checked as well, though no rule cites them directly (rule -> theorem and the theorem's file
# come from the rules themselves: leantile.derive.rules).
EXTRA_THEOREMS: dict[str, str] = {
    "online_softmax_fold": "LeanTile.online_softmax_fold",  # the state (l, o) the ratio rests on
    "scale_pullout_left": "LeanTile.scale_pullout",  # the scale-first form
    "sum_sq_sub_const": "LeanTile.sum_sq_sub_const",  # sum_sq_sub_pivot is proven from it
    "end_to_end": "LeanTile.tiled_attention_eq_softmax",
    "fuse_reduction_shared_pass": "LeanTile.fuse_reduction_shared_pass",  # one pass, several sums
    "fuse_reduction_eval_max": "LeanTile.fuse_reduction_eval_max",
    "bias_fold": "LeanTile.bias_fold",  # a norm's bias through the GEMM's weight (not cited yet)
    "softmax_state_merge": "LeanTile.softmax_state_merge",  # split_kv: a merge is the concatenation's state
    "softmax_state_merge_assoc": "LeanTile.softmax_state_merge_assoc",
    # split_kv in the kernels' form: (o / l, lse), weights exp(lse - max lse), empty slices at -inf
    "split_kv_lse_combine": "LeanTile.split_kv_lse_combine",
    "split_kv_lse_eval": "LeanTile.split_kv_lse_eval",
    "combine_empty_slice": "LeanTile.combine_empty_slice",
    "lse_combine_eq_merge": "LeanTile.lse_combine_eq_merge",
    "merge_lse": "LeanTile.merge_lse",
    # split_reduction: maxima over WithBot ℝ (⊥ the -inf a max starts from), the generic fold
    "split_reduction_max": "LeanTile.split_reduction_max",
    "foldl_flatten": "LeanTile.foldl_flatten",
    # masks over the graph's masked semantics (Graph.evalM: "-inf" is -inf, exp(-inf) = 0)
    "graph_masked_block_nil": "LeanTile.graph_masked_block_nil",
    "fold_skip_masked_graph": "LeanTile.fold_skip_masked_graph",
    "masked_score_node": "LeanTile.masked_score_node",
    "evalM_eq_eval": "LeanTile.evalM_eq_eval",  # no "-inf": the masked semantics is Graph.eval
}

RULES_DIR = "lean/LeanTile/Rules"

# The file that proves each extra theorem, in RULES_DIR.
EXTRA_FILES: dict[str, str] = {
    "LeanTile.online_softmax_fold": "OnlineSoftmax.lean",
    "LeanTile.scale_pullout": "ScalePullout.lean",
    "LeanTile.sum_sq_sub_const": "VarianceExpand.lean",
    "LeanTile.tiled_attention_eq_softmax": "TiledAttention.lean",
    "LeanTile.fuse_reduction_shared_pass": "FuseReduction.lean",
    "LeanTile.fuse_reduction_eval_max": "FuseReduction.lean",
    "LeanTile.gain_fold": "GainFold.lean",
    "LeanTile.bias_fold": "GainFold.lean",
    "LeanTile.softmax_state_merge": "SplitKV.lean",
    "LeanTile.softmax_state_merge_assoc": "SplitKV.lean",
    "LeanTile.split_kv_lse_combine": "SplitKV.lean",
    "LeanTile.split_kv_lse_eval": "SplitKV.lean",
    "LeanTile.combine_empty_slice": "SplitKV.lean",
    "LeanTile.lse_combine_eq_merge": "SplitKV.lean",
    "LeanTile.merge_lse": "SplitKV.lean",
    "LeanTile.split_reduction_max": "SplitReduction.lean",
    "LeanTile.foldl_flatten": "SplitReduction.lean",
    "LeanTile.graph_masked_block_nil": "MaskSkip.lean",
    "LeanTile.fold_skip_masked_graph": "MaskSkip.lean",
    "LeanTile.masked_score_node": "Masked.lean",
    "LeanTile.evalM_eq_eval": "Masked.lean",
}

# The axioms a checked theorem may rest on: Lean's three standard ones (what Mathlib's
# classical mathematics uses). Anything else `#print axioms` lists fails the theorem:
# `sorryAx` (a `sorry`), a user `axiom`, `Lean.ofReduceBool` / `Lean.trustCompiler`
# (`native_decide`: trusts the compiler), ...
ALLOWED_AXIOMS: tuple[str, ...] = ("propext", "Classical.choice", "Quot.sound")

SCRATCH = ".lake/leantile-check/AxiomCheck.lean"
NO_LAKE = "no Lean toolchain: `lake` is not on PATH, nothing was checked"

_AXIOMS_RE = re.compile(r"'?(?P<name>[^'\s]+)'? depends on axioms: \[(?P<axioms>[^\]]*)\]")
_NO_AXIOMS_RE = re.compile(r"'?(?P<name>[^'\s]+)'? does not depend on any axioms")


def cited_theorems() -> dict[str, str]:
    """Rule name -> theorem, as the rules cite them (imported here, not at module import)."""
    from .derive.rules import THEOREMS
    return dict(THEOREMS)


def theorem_files() -> dict[str, str]:
    """Theorem -> the file that proves it (relative to the repository root): every cited and
    extra theorem."""
    from .derive.rules import THEOREM_FILES
    return {thm: f"{RULES_DIR}/{f}" for thm, f in {**THEOREM_FILES, **EXTRA_FILES}.items()}


def theorems_to_check() -> dict[str, str]:
    """Label -> theorem: every cited theorem plus the extra ones, without duplicates."""
    out = dict(cited_theorems())
    seen = set(out.values())
    for label, thm in EXTRA_THEOREMS.items():
        if thm not in seen:
            out[label] = thm
            seen.add(thm)
    return out


@dataclasses.dataclass
class TheoremStatus:
    label: str          # rule name (or extra label)
    theorem: str        # fully qualified Lean name
    status: str         # "checked" | "failed" | "unchecked"
    axioms: list[str] = dataclasses.field(default_factory=list)
    message: str = ""
    file: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def find_root(start: str | Path | None = None) -> Path:
    """The directory holding lakefile.lean: from `start` (or this package, then the cwd) up."""
    candidates = [Path(start)] if start is not None else [Path(__file__).resolve().parent, Path.cwd()]
    for c in candidates:
        for d in [c.resolve(), *c.resolve().parents]:
            if (d / "lakefile.lean").is_file():
                return d
    return (Path(start) if start is not None else Path.cwd()).resolve()


def axioms_check_source(theorems) -> str:
    """A Lean file printing the axioms of each theorem, one `#print axioms` per line."""
    lines = ["import LeanTile", ""]
    lines += [f"#print axioms {t}" for t in theorems]
    return "\n".join(lines) + "\n"


def parse_axioms_output(text: str) -> dict[str, list[str]]:
    """Theorem -> axioms, from `#print axioms` messages."""
    out: dict[str, list[str]] = {}
    for m in _AXIOMS_RE.finditer(text):
        out[m.group("name")] = [a.strip() for a in m.group("axioms").split(",") if a.strip()]
    for m in _NO_AXIOMS_RE.finditer(text):
        out.setdefault(m.group("name"), [])
    return out


def disallowed_axioms(axioms) -> list[str]:
    """The axioms outside ALLOWED_AXIOMS, in the order printed (`sorryAx`, user axioms, ...)."""
    return [a for a in axioms if a not in ALLOWED_AXIOMS]


def axioms_message(axioms) -> str:
    """Why a theorem resting on `axioms` fails, naming every axiom outside ALLOWED_AXIOMS
    ("" when there is none)."""
    bad = disallowed_axioms(axioms)
    if not bad:
        return ""
    notes = []
    if "sorryAx" in bad:
        notes.append("sorryAx: a `sorry` is left")
    others = [a for a in bad if a != "sorryAx"]
    if others:
        notes.append(f"{', '.join(others)}: not among {', '.join(ALLOWED_AXIOMS)}")
    return f"depends on axiom{'s' if len(bad) > 1 else ''} {', '.join(bad)} ({'; '.join(notes)})"


def _verdict(label: str, thm: str, axioms: list[str] | None, file_errors: list[str],
             name_error: str | None, file: str | None = None) -> TheoremStatus:
    f = file if file is not None else theorem_files().get(thm)
    if name_error:
        return TheoremStatus(label, thm, "failed", message=name_error, file=f)
    if axioms is None:
        msg = file_errors[0] if file_errors else "Lean printed no axioms for it (not found or timed out)"
        return TheoremStatus(label, thm, "failed", message=msg, file=f)
    bad = axioms_message(axioms)
    if bad:
        return TheoremStatus(label, thm, "failed", axioms, bad, f)
    if file_errors:
        return TheoremStatus(label, thm, "failed", axioms, f"errors in {f}: {file_errors[0]}", f)
    return TheoremStatus(label, thm, "checked", axioms, "", f)


def verdicts_from_axioms_output(text: str, theorems: dict[str, str]) -> list[TheoremStatus]:
    """Label -> theorem judged from recorded `#print axioms` output alone (pure Python, no Lean):
    checked when its axioms are among ALLOWED_AXIOMS, failed naming any other axiom, failed
    when the output says nothing about it."""
    axioms = parse_axioms_output(text)
    return [_verdict(label, thm, axioms.get(thm), [], None, file=theorem_files().get(thm))
            for label, thm in theorems.items()]


def _unchecked(items: dict[str, str], why: str) -> list[TheoremStatus]:
    return [TheoremStatus(k, v, "unchecked", message=why, file=theorem_files().get(v)) for k, v in items.items()]


def _one_line(s: str) -> str:
    return " ".join(str(s).split())[:300]


def _lemma_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / RULES_DIR).glob("*.lean"))


def _check_with_leanclient(root: Path, items: dict[str, str], timeout: float, leanclient):
    """Diagnostics of the lemma files and `#print axioms` through the language server."""
    files = _lemma_files(root)
    errors: dict[str, list[str]] = {}
    name_errors: dict[str, str] = {}
    axioms: dict[str, list[str]] = {}
    scratch = root / SCRATCH
    client = leanclient.LeanLSPClient(str(root), initial_build=False, prevent_cache_get=True)
    try:
        for f in files:
            res = client.get_diagnostics(f, inactivity_timeout=60, max_timeout=timeout)
            diags = list(getattr(res, "diagnostics", res))
            errs = [_one_line(d.get("message", "")) for d in diags if d.get("severity") == 1]
            if getattr(res, "timed_out", False):
                errs.append("timed out waiting for Lean")
            errors[f] = errs
            try:
                client.close_files([f])
            except Exception:
                pass
        thms = list(items.values())
        scratch.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(axioms_check_source(thms))
        rel = str(scratch.relative_to(root))
        client.open_file(rel, force_reopen=True)
        res = client.get_diagnostics(rel, inactivity_timeout=60, max_timeout=timeout)
        first_line = 2  # 0-based line of the first #print (after the import and a blank line)
        for d in getattr(res, "diagnostics", res):
            msg = d.get("message", "")
            line = d.get("range", {}).get("start", {}).get("line", -1)
            k = line - first_line
            thm = thms[k] if 0 <= k < len(thms) else None
            if d.get("severity") == 1 and thm is not None:
                name_errors[thm] = _one_line(msg)
            for name, ax in parse_axioms_output(msg).items():
                axioms[thm or name] = ax
    finally:
        try:
            client.close()
        finally:
            scratch.unlink(missing_ok=True)
    return errors, name_errors, axioms


def _check_with_lake_env(root: Path, lake: str, items: dict[str, str], timeout: float):
    """The same without leanclient: `lake env lean` on the lemma files and a scratch file."""
    errors: dict[str, list[str]] = {}
    for f in _lemma_files(root):
        p = subprocess.run([lake, "env", "lean", f], cwd=root, capture_output=True, text=True,
                           timeout=timeout)
        text = p.stdout + p.stderr
        errors[f] = [_one_line(l) for l in text.splitlines() if ": error" in l or l.startswith("error")]
    scratch = root / SCRATCH
    scratch.parent.mkdir(parents=True, exist_ok=True)
    scratch.write_text(axioms_check_source(items.values()))
    try:
        p = subprocess.run([lake, "env", "lean", str(scratch.relative_to(root))], cwd=root,
                           capture_output=True, text=True, timeout=timeout)
    finally:
        scratch.unlink(missing_ok=True)
    text = p.stdout + p.stderr
    axioms = parse_axioms_output(text)
    name_errors = {}
    for thm in items.values():
        if thm not in axioms:
            hit = [l for l in text.splitlines() if thm.split(".")[-1] in l and "error" in l]
            if hit:
                name_errors[thm] = _one_line(hit[0])
    return errors, name_errors, axioms


def theorem_status(root: str | Path | None = None, theorems: dict[str, str] | None = None, *,
                   lake: str | None = None, build: bool = True, timeout: float = 1800.0,
                   use_leanclient: bool = True) -> list[TheoremStatus]:
    """Status of every theorem to check (label -> Lean name; default: `theorems_to_check()`).

    Without `lake` on PATH every theorem is "unchecked" and nothing is run.
    """
    items = dict(theorems) if theorems is not None else theorems_to_check()
    lake = lake if lake is not None else shutil.which("lake")
    if not lake:
        return _unchecked(items, NO_LAKE)
    root = find_root(root)
    if not (root / "lakefile.lean").is_file():
        return [TheoremStatus(k, v, "failed", message=f"no lakefile.lean at or above {root}",
                              file=theorem_files().get(v)) for k, v in items.items()]
    build_msg = ""
    if build:
        try:
            p = subprocess.run([lake, "build"], cwd=root, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return [TheoremStatus(k, v, "failed", message=f"`lake build` did not finish: {_one_line(e)}",
                                  file=theorem_files().get(v)) for k, v in items.items()]
        if p.returncode != 0:
            tail = [l for l in (p.stdout + p.stderr).splitlines() if "error" in l]
            build_msg = _one_line(tail[0] if tail else f"`lake build` exited {p.returncode}")
    leanclient = None
    if use_leanclient:
        try:
            import leanclient  # noqa: F401  (lazy: it may be absent where lake is absent)
        except ImportError:
            leanclient = None
    try:
        if leanclient is not None:
            errors, name_errors, axioms = _check_with_leanclient(root, items, timeout, leanclient)
        else:
            errors, name_errors, axioms = _check_with_lake_env(root, lake, items, timeout)
    except Exception as e:  # the server died, a timeout, ...: report, never crash
        why = f"could not query Lean: {type(e).__name__}: {_one_line(e)}"
        return [TheoremStatus(k, v, "failed", message=why, file=theorem_files().get(v)) for k, v in items.items()]
    out = []
    for label, thm in items.items():
        f = theorem_files().get(thm)
        ferrs = list(errors.get(f, [])) if f else []
        if build_msg and not ferrs and thm not in axioms:
            ferrs = [build_msg]
        out.append(_verdict(label, thm, axioms.get(thm), ferrs, name_errors.get(thm)))
    return out


def _lean_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def lean_step_literal(step) -> str:
    """One derivation step (ir.Step or dict) as a `LeanTile.Step` literal for Derivation.lean."""
    d = step.model_dump() if hasattr(step, "model_dump") else dict(step)
    params = []
    for k, v in sorted(dict(d.get("params", {})).items()):
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise ValueError(f"param {k!r}: only strings and non-negative ints are exported, got {v!r}")
        if isinstance(v, int):
            if v < 0:
                raise ValueError(f"param {k!r}: negative ints have no Lean `.nat` form")
            params.append(f"({_lean_str(k)}, .nat {v})")
        else:
            params.append(f"({_lean_str(k)}, .str {_lean_str(v)})")
    sites = ", ".join(str(int(i)) for i in d.get("at", ()))
    return (f"{{ rule := {_lean_str(d['rule'])}, thm := {_lean_str(d['theorem'])}, "
            f"sites := [{sites}], params := [{', '.join(params)}] }}")


def lean_derivation_def(arch: str, steps) -> str:
    """`def <arch>Derivation : List Step := [...]`, to paste into lean/LeanTile/Derivation.lean."""
    name = "".join(w[:1].upper() + w[1:] for w in arch.split("_"))
    name = name[:1].lower() + name[1:]
    items = [lean_step_literal(s) for s in steps]
    if not items:
        return f"def {name}Derivation : List Step := []"
    body = "\n  , ".join(items)
    return f"def {name}Derivation : List Step :=\n  [ {body} ]"


def format_table(statuses: list[TheoremStatus]) -> str:
    rows = [("rule", "theorem", "status", "detail")]
    for s in statuses:
        detail = ", ".join(s.axioms) if s.status == "checked" else s.message
        if s.status == "checked" and not s.axioms:
            detail = "(no axioms)"
        rows.append((s.label, s.theorem, s.status, detail))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}" for r in rows)


def add_arguments(s) -> None:
    """check-lean's options (the CLI's subcommand and `python -m leantile.lean` share them)."""
    s.add_argument("--root", default=None, help="Lean project root (default: the one holding lakefile.lean)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--no-build", action="store_true", help="skip `lake build`")
    s.add_argument("--timeout", type=float, default=1800.0, help="seconds per Lean step")
    s.add_argument("--require-checked", action="store_true",
                   help="exit 1 unless every theorem is checked (no toolchain counts as failure)")
    s.add_argument("--write-axioms-file", metavar="PATH", default=None,
                   help="only write a Lean file with `#print axioms` for each theorem, then exit")


def check_lean_main(argv=None) -> int:
    """`python -m leantile.lean ARGS` = `leantile check-lean ARGS` (the Lean CI workflow calls
    this): the same options and exit codes, without the CLI above this floor."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m leantile.lean", description="proof status of every cited theorem")
    add_arguments(p)
    return run_check_lean(**options_of(p.parse_args(sys.argv[1:] if argv is None else argv)))


def options_of(args) -> dict:
    """run_check_lean's keywords from the parsed options of add_arguments."""
    return {"root": args.root, "as_json": args.json, "build": not args.no_build, "timeout": args.timeout,
            "require_checked": args.require_checked, "write_axioms_file": args.write_axioms_file}


def run_check_lean(*, root: str | None = None, as_json: bool = False, build: bool = True, timeout: float = 1800.0,
                   require_checked: bool = False, write_axioms_file: str | None = None) -> int:
    """`leantile check-lean`: 0 unless a theorem failed (or, with require_checked, is unchecked).
    write_axioms_file: only write a Lean file with `#print axioms` for each theorem there."""
    if write_axioms_file:
        Path(write_axioms_file).parent.mkdir(parents=True, exist_ok=True)
        Path(write_axioms_file).write_text(axioms_check_source(theorems_to_check().values()))
        return 0
    statuses = theorem_status(root, build=build, timeout=timeout)
    if as_json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        print(format_table(statuses))
        if all(s.status == "unchecked" for s in statuses):
            print(f"\n{NO_LAKE}.")
    if any(s.status == "failed" for s in statuses):
        return 1
    if require_checked and any(s.status != "checked" for s in statuses):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(check_lean_main(sys.argv[1:]))
