"""Measure each (workload, point) once and hand the result to every run that proposes it.

Used when several runs search the same workload (benchmarks/search_compare/search_compare.py: policies x
seeds): the runs differ only in which points they choose and each still counts every point
it evaluates against its budget, while the GPU time shrinks to the union of their points.
Seeded from a SearchDB, it also answers points that an earlier, stopped comparison measured
under another run's name, by the same measurer (inner.gpu_name: "fake" or the GPU model)
only: a fake comparison and a GPU one on the same DB never answer each other's points.
"""
from __future__ import annotations

from .db import SearchDB
from .space import Point
from .workers import Measurement, measure_batches


class MeasureOnce:
    def __init__(self, inner, db: SearchDB | None = None):
        self.inner = inner
        self.gpu_name = getattr(inner, "gpu_name", None)
        self.versions = getattr(inner, "versions", None)
        self.cache: dict[tuple[str, Point], Measurement] = {}
        self.measured = 0  # points this object sent to `inner`
        if db is not None:  # only rows of the same measurer: fake and GPU times never mix
            self.cache.update(db.measured(self.gpu_name))

    def measure(self, wl, points: list[Point]) -> list[Measurement]:
        return self.measure_many([(wl, points)])[0]

    def measure_many(self, batches: list[tuple]) -> list[list[Measurement]]:
        todo = [(wl, [p for p in dict.fromkeys(points) if (wl.key, p) not in self.cache]) for wl, points in batches]
        todo = [(wl, pts) for wl, pts in todo if pts]
        for (wl, pts), ms in zip(todo, measure_batches(self.inner, todo) if todo else []):
            for p, m in zip(pts, ms):
                self.cache[(wl.key, p)] = m
            self.measured += len(pts)
        return [[self.cache[(wl.key, p)] for p in points] for wl, points in batches]

    def close(self):
        self.inner.close()
