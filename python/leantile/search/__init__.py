"""Correct-by-construction search for the fastest kernel of a workload.

Every point of the space is a derivation candidate (correct by its Lean lemmas, checked by
the interpreter) with tile parameters; search spends GPU time only on measuring.

    space.py     the points: candidates x tile parameters valid for the shape
    roofline.py  the target: FLOP / byte floor of the workload on the GPU
    policy.py    momentum islands (after PACEvolve) and random search
    db.py        SQLite log of every measurement (resume, plots)
    workers.py   CPU compile pool, one GPU worker per device, FakeMeasurer for tests
    driver.py    the loop: propose -> (replay from DB | compile + measure) -> observe;
                 several runs in lockstep share one measurer (one batch per round)
    command.py   `leantile search`
"""
from .driver import SearchResult, SearchRun, Workload, run_lockstep, run_search  # noqa: F401
from .policy import MomentumParams, MomentumPolicy, RandomPolicy, make_policy  # noqa: F401
from .roofline import H200, Ceilings, workload_cost  # noqa: F401
from .space import Point, Space  # noqa: F401
