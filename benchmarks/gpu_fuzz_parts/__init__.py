"""The parts of benchmarks/gpu_fuzz.py (issue 46's GPU differential campaign), split by what they do:

    sizes.py     the lengths the campaign crosses and `resize`, which puts a graph at them under the caps
    families.py  the graph families (the soundness generators, CLASSES, the losses, long reductions)
                 and `graph_stream`, their seeded sequence
    plans.py     the plans of a graph (every candidate and the default) and the compile pool's job
    judge.py     one graph's plans run and judged against the float64 reference (in a GPU worker)
    worker.py    the GPU worker process: its body, its handle in the driver, the compile pool's set-up
    results.py   the results file and the per-family table

benchmarks/gpu_fuzz.py stays the entry point (arguments, the main loop). The worker and pool
processes are spawned and find their functions by module path (gpu_fuzz_parts.worker...), so
this package puts the repository's python/ and tests/ on sys.path itself: a spawned process
imports these modules before anything else could.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
for p in (ROOT / "python", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
