"""Which shipped kernels hold too many registers? Every kernel of the default plan of each case
of the reductions and fusion suites (examples/reductions.py, examples/fusion.py) lowered for
sm_90a and compiled by nvcc with its own flags (`ptxas -v`): registers a thread, spilled bytes,
and the CTAs of its threads that fit an SM by registers alone (65536 registers an SM, allocated
in units of 8 a thread). On the CPU, no GPU: a bandwidth-bound row kernel's speed follows the
loads it has in flight, so its CTAs an SM (how many fit) is the first thing to read before a GPU
call (benchmarks/second_pass/VERDICT.md: 61 -> 40 registers, 4 -> 6 CTAs).

    python benchmarks/registers/register_survey.py [--suite reductions|fusion|both] [--only NAME ...] [--out DIR]

Prints a table, writes JSON (benchmarks/registers/results/ by default).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))

REGISTERS_PER_SM = 65536
MAX_THREADS_PER_SM = 2048


def ctas_by_registers(regs: int, threads: int) -> int:
    per_thread = -(-max(regs, 1) // 8) * 8  # allocated in units of 8 a thread (a warp's 256)
    return min(REGISTERS_PER_SM // (per_thread * threads), MAX_THREADS_PER_SM // threads)


def survey(name: str, g) -> list[dict]:
    from leantile.cost import choose
    from leantile.emit import emit_module
    from leantile.lower import compile_cuda, lower_to_cuda
    from leantile.runtime import emitted_module

    plan = choose(g)[0]
    mod = emitted_module(emit_module(plan))
    rows = []
    threads = {k.name: k.threads for k in plan.kernels}
    for kernel, f in mod.build_kernel(pdl=True, sms=mod.SMS).items():
        row = {"case": name, "candidate": plan.candidate, "kernel": kernel, "threads": threads.get(kernel)}
        try:
            cu = lower_to_cuda(f, arch="sm_90a", pass_configs=mod.PASS_CONFIGS.get(kernel))
            report: list[str] = []
            compile_cuda(cu, arch="sm_90a", report=report, flags=mod.NVCC_FLAGS.get(kernel))
            text = "\n".join(report)
            regs = re.findall(r"Used (\d+) registers", text)
            spills = re.findall(r"(\d+) bytes spill stores", text)
            launch = re.search(r"__launch_bounds__\((\d+)", cu)
            row["threads"] = int(launch.group(1)) if launch else row["threads"]
            row["registers"] = int(regs[-1]) if regs else None
            row["spill_bytes"] = int(spills[-1]) if spills else 0
            row["flags"] = list(mod.NVCC_FLAGS.get(kernel, ()))
            if row["registers"] and row["threads"]:
                row["ctas_per_sm"] = ctas_by_registers(row["registers"], row["threads"])
        except Exception as e:  # a kernel that does not lower or compile: recorded, not fatal
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("reductions", "fusion", "both"), default="both")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "registers" / "results"))
    a = ap.parse_args(argv)
    from fusion_suite import workloads

    suites = ("reductions", "fusion") if a.suite == "both" else (a.suite,)
    rows = []
    for suite in suites:
        for name, g, _, _ in workloads(suite):
            if a.only and name not in a.only:
                continue
            for row in survey(name, g):
                row["suite"] = suite
                rows.append(row)
                what = row.get("error") or (f"{row['registers']:>4} regs  {row['spill_bytes']:>5} B spilled  "
                                            f"{row['threads']:>4} threads  {row.get('ctas_per_sm', '-')} CTAs/SM  "
                                            f"{' '.join(row['flags'])}")
                print(f"{suite:<10} {name:<22} {row['kernel']:<32} {what}", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from leantile.files import write_atomic
    name = f"registers-sm90a-{a.suite}-{date.today().isoformat()}.json"
    write_atomic(out / name, json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
