"""SQLite log of a search: every measurement appended, never updated.

One row per measurement: workload, run (policy, islands, seed), point (candidate, tiles),
compile ok, verified ok, time in ms, island, step, why, GPU name, timestamp. Interventions
of the momentum policy go to `events`. A stopped search resumes by replaying its run's rows
(driver.py); plots read the same rows (plot.py).
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from .space import Point
from .workers import Measurement

SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload TEXT NOT NULL, run TEXT NOT NULL, point TEXT NOT NULL,
  candidate TEXT NOT NULL, tiles TEXT NOT NULL,
  compile_ok INTEGER NOT NULL, verified_ok INTEGER NOT NULL, time_ms REAL, error TEXT,
  island INTEGER, step INTEGER, why TEXT, gpu TEXT, timestamp REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS m_run ON measurements (workload, run, id);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload TEXT NOT NULL, run TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  island INTEGER, step INTEGER, detail TEXT NOT NULL, timestamp REAL NOT NULL,
  UNIQUE (workload, run, seq)
);
"""


class SearchDB:
    def __init__(self, path: str | Path = ":memory:"):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.con = sqlite3.connect(self.path)
        self.con.executescript(SCHEMA)
        self.con.commit()

    def close(self):
        self.con.close()

    def append(self, workload: str, run: str, point: Point, m: Measurement, island: int | None = None,
               step: int | None = None, why: str | None = None, gpu: str | None = None) -> None:
        self.con.execute(
            "INSERT INTO measurements (workload, run, point, candidate, tiles, compile_ok, verified_ok,"
            " time_ms, error, island, step, why, gpu, timestamp) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (workload, run, point.key(), point.candidate, json.dumps(point.tile_dict), int(m.compile_ok),
             int(m.verified_ok), m.time_ms, m.error, island, step, why, gpu, time.time()))
        self.con.commit()  # one commit per row: a killed search loses at most the row in flight

    def rows(self, workload: str | None = None, run: str | None = None) -> list[dict]:
        where, args = _where(workload, run)
        cur = self.con.execute("SELECT * FROM measurements" + where + " ORDER BY id", args)
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def results(self, workload: str, run: str) -> dict[Point, Measurement]:
        """The first measurement of each point in one run (what a resumed search replays)."""
        out: dict[Point, Measurement] = {}
        for r in self.rows(workload, run):
            p = Point.from_key(r["point"])
            if p not in out:
                out[p] = Measurement(bool(r["compile_ok"]), bool(r["verified_ok"]), r["time_ms"], r["error"])
        return out

    def add_events(self, workload: str, run: str, events: list[dict]) -> None:
        """Store events by their sequence number in the run; replayed ones are skipped."""
        for seq, ev in enumerate(events):
            self.con.execute(
                "INSERT OR IGNORE INTO events (workload, run, seq, kind, island, step, detail, timestamp)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (workload, run, seq, ev.get("kind", "?"), ev.get("island"), ev.get("step"),
                 json.dumps(ev, sort_keys=True), time.time()))
        self.con.commit()

    def events(self, workload: str | None = None, run: str | None = None) -> list[dict]:
        where, args = _where(workload, run)
        return [{"workload": w, "run": r, "seq": s, **json.loads(d)}
                for w, r, s, d in self.con.execute("SELECT workload, run, seq, detail FROM events" + where
                                                   + " ORDER BY workload, run, seq", args)]

    def runs(self) -> list[tuple[str, str]]:
        return list(self.con.execute("SELECT DISTINCT workload, run FROM measurements ORDER BY workload, run"))


def _where(workload: str | None, run: str | None) -> tuple[str, list]:
    """A WHERE clause selecting one workload and/or one run (both optional)."""
    conds = [(c, v) for c, v in (("workload = ?", workload), ("run = ?", run)) if v is not None]
    return (" WHERE " + " AND ".join(c for c, _ in conds) if conds else ""), [v for _, v in conds]
