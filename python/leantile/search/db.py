"""SQLite log of a search: every measurement appended, never updated.

One row per measurement: workload, run (policy, islands, seed), point (candidate, tiles),
compile ok, verified ok, time in ms, island, step, why, GPU name, timestamp, and who measured
it: `measurer` ("fake" or the GPU model, e.g. "NVIDIA H200") and `versions` (JSON: leantile,
torch, tilelang, CUDA runtime). Interventions of the momentum policy go to `events`. A stopped
search resumes by replaying its run's rows (driver.py); plots read the same rows (plot.py).

Rows are keyed by measurer: `results` and `measured` (resume, MeasureOnce) return only rows
of the measurer (and GPU) asked for, so a `--fake` search and a GPU search on the same file
never exchange rows; rows of an unknown measurer (NULL) are never resumed. A row whose time is
impossible (<= 0, NaN, inf) reads back as a failed, unverified point.

Databases written before the measurer columns existed are migrated in place when opened
(ALTER TABLE; `measurer` := `gpu`, so legacy rows with gpu NULL stay unknown and gpu "fake"
stay fake). Opening checks the file (a database, intact, writable, not locked) and raises
DBError, one line naming the file, instead of sqlite3's errors; every later sqlite3 error is
a DBError too.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path

from ..files import load_json, read_only
from .space import Point
from .workers import Measurement

MEASUREMENTS = """CREATE TABLE IF NOT EXISTS measurements (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload TEXT NOT NULL, run TEXT NOT NULL, point TEXT NOT NULL,
  candidate TEXT NOT NULL, tiles TEXT NOT NULL,
  compile_ok INTEGER NOT NULL, verified_ok INTEGER NOT NULL, time_ms REAL, error TEXT,
  island INTEGER, step INTEGER, why TEXT, gpu TEXT, timestamp REAL NOT NULL,
  measurer TEXT, versions TEXT
)"""
EVENTS = """CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload TEXT NOT NULL, run TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
  island INTEGER, step INTEGER, detail TEXT NOT NULL, timestamp REAL NOT NULL,
  measurer TEXT NOT NULL DEFAULT '',
  UNIQUE (workload, run, measurer, seq)
)"""
SCHEMA = (MEASUREMENTS, "CREATE INDEX IF NOT EXISTS m_run ON measurements (workload, run, id)", EVENTS)
VERSION = 1  # PRAGMA user_version once migrated
LOCK_TIMEOUT_S = 10.0  # how long to wait for another writer before "locked"
MAX_DB_BYTES = 4 << 30  # a search database holds thousands of rows: megabytes


class DBError(Exception):
    """The search log cannot be used; str() is one line naming the file."""


class SearchDB:
    def __init__(self, path: str | Path = ":memory:", timeout: float | None = None):
        self.path = str(path)
        with self._guard(""):
            if "\x00" in self.path:
                raise DBError(f"{self.path!r}: a path cannot contain a NUL character")
            if self.path != ":memory:":
                p = Path(self.path)
                if p.is_dir():
                    raise DBError(f"{self.path}: a folder, not a database file")
                if p.exists():  # sqlite would block reading a FIFO, or scan a device
                    from ..files import NotReadable, regular_file
                    try:
                        regular_file(p, MAX_DB_BYTES, "search database")
                    except NotReadable as e:
                        raise DBError(str(e)) from None
                for q, what in ((p, "the file"), (p.parent, "its folder")):  # sqlite writes a journal beside it
                    if q.exists() and read_only(q):
                        raise DBError(f"{self.path}: read-only ({what} cannot be written)")
                try:
                    p.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    up = next((q for q in p.parents if q.exists()), None)
                    why = f"{up} is a file, not a folder" if up is not None and not up.is_dir() else (
                        f"cannot create its folder {p.parent} ({e.strerror or e})")
                    raise DBError(f"{self.path}: {why}") from None
            self.con = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S if timeout is None else timeout)
            try:
                self._open()
            except BaseException:
                self.con.close()
                raise

    def _open(self) -> None:
        """Check the file, create or migrate the tables, and make sure it can be written."""
        con = self.con
        ok = con.execute("PRAGMA quick_check").fetchall()  # "file is not a database", truncation
        if ok != [("ok",)]:
            raise DBError(f"{self.path}: damaged ({str(ok[0][0])[:80] if ok else 'no answer'})")
        con.isolation_level = None  # explicit transactions while opening
        con.execute("BEGIN IMMEDIATE")  # takes the write lock: read-only files and folders, locks
        try:
            if con.execute("PRAGMA user_version").fetchone()[0] < VERSION:
                self._migrate()
            for stmt in SCHEMA:
                con.execute(stmt)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        con.isolation_level = ""  # back to sqlite3's default (a transaction per write, commit())

    def _migrate(self) -> None:
        """Bring a database of an older schema to VERSION (inside the open transaction)."""
        con = self.con
        cols = {r[1] for r in con.execute("PRAGMA table_info(measurements)")}
        if cols:  # an existing log: add the measurer columns, legacy rows measured by their `gpu`
            for c in ("measurer", "versions"):
                if c not in cols:
                    con.execute(f"ALTER TABLE measurements ADD COLUMN {c} TEXT")
            con.execute("UPDATE measurements SET measurer = gpu WHERE measurer IS NULL")
        ev = {r[1] for r in con.execute("PRAGMA table_info(events)")}
        if ev and "measurer" not in ev:  # the unique key gains the measurer: rebuild the table
            con.execute("ALTER TABLE events RENAME TO events_v0")
            con.execute(EVENTS)
            con.execute(
                "INSERT INTO events (workload, run, seq, kind, island, step, detail, timestamp, measurer) "
                "SELECT workload, run, seq, kind, island, step, detail, timestamp, COALESCE((SELECT m.gpu FROM "
                "measurements m WHERE m.workload = e.workload AND m.run = e.run AND m.gpu IS NOT NULL "
                "LIMIT 1), '') FROM events_v0 e")
            con.execute("DROP TABLE events_v0")
        con.execute(f"PRAGMA user_version = {VERSION}")

    @contextlib.contextmanager
    def _guard(self, doing: str):
        """sqlite3 errors (and a NUL in a path) as DBError, one line naming the file."""
        try:
            yield
        except DBError:
            raise
        except sqlite3.Error as e:
            raise DBError(f"{self.path}: {doing}{_explain(e)}") from None
        except ValueError as e:  # "embedded null character" and the like
            raise DBError(f"{self.path!r}: {doing}{e}") from None

    def close(self):
        with contextlib.suppress(sqlite3.Error):
            self.con.close()

    def append(self, workload: str, run: str, point: Point, m: Measurement, island: int | None = None,
               step: int | None = None, why: str | None = None, gpu: str | None = None,
               measurer: str | None = None, versions: dict | None = None) -> None:
        """Log one measurement; `measurer` defaults to `gpu` (what measured it)."""
        with self._guard("cannot write a row: "):
            self.con.execute(
                "INSERT INTO measurements (workload, run, point, candidate, tiles, compile_ok, verified_ok,"
                " time_ms, error, island, step, why, gpu, timestamp, measurer, versions)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (workload, run, point.key(), point.candidate, json.dumps(point.tile_dict), int(m.compile_ok),
                 int(m.verified_ok), m.time_ms, m.error, island, step, why, gpu, time.time(),
                 measurer if measurer is not None else gpu,
                 json.dumps(versions, sort_keys=True) if versions is not None else None))
            self.con.commit()  # one commit per row: a killed search loses at most the row in flight

    def rows(self, workload: str | None = None, run: str | None = None, measurer: str | None = None) -> list[dict]:
        where, args = _where(workload, run, measurer)
        with self._guard("cannot be read: "):
            cur = self.con.execute("SELECT * FROM measurements" + where + " ORDER BY id", args)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def results(self, workload: str, run: str, measurer: str | None, gpu: str | None = None) -> dict[Point, Measurement]:
        """The first measurement of each point in one run by this measurer (and GPU: default
        the measurer's name): what a resumed search replays. None: unknown, nothing."""
        return {p: m for (_, p), m in self.measured(measurer, gpu, workload, run).items()}

    def measured(self, measurer: str | None, gpu: str | None = None, workload: str | None = None,
                 run: str | None = None) -> dict[tuple[str, Point], Measurement]:
        """{(workload, point): its first measurement} over the rows of one measurer (and GPU),
        in every run unless `run` is given (MeasureOnce seeds from it)."""
        out: dict[tuple[str, Point], Measurement] = {}
        if measurer is None:
            return out
        gpu = measurer if gpu is None else gpu
        for r in self.rows(workload, run, measurer):
            if r["gpu"] != gpu:
                continue
            try:
                p = Point.from_key(r["point"])
            except (ValueError, TypeError, KeyError, AttributeError):  # edited by hand, nested too deep: no point
                continue
            out.setdefault((r["workload"], p), Measurement.checked(
                bool(r["compile_ok"]), bool(r["verified_ok"]), r["time_ms"], r["error"]))
        return out

    def add_events(self, workload: str, run: str, events: list[dict], measurer: str | None = None) -> None:
        """Store events by their sequence number in the run; replayed ones are skipped."""
        with self._guard("cannot write an event: "):
            for seq, ev in enumerate(events):
                self.con.execute(
                    "INSERT OR IGNORE INTO events (workload, run, seq, kind, island, step, detail, timestamp,"
                    " measurer) VALUES (?,?,?,?,?,?,?,?,?)",
                    (workload, run, seq, ev.get("kind", "?"), ev.get("island"), ev.get("step"),
                     json.dumps(ev, sort_keys=True), time.time(), measurer or ""))
            self.con.commit()

    def events(self, workload: str | None = None, run: str | None = None, measurer: str | None = None) -> list[dict]:
        """The events, in order; a row whose detail is not a JSON object (edited by hand, nested
        past the stack) is skipped, as `measured` skips a row that is not a point."""
        where, args = _where(workload, run, measurer)
        with self._guard("cannot be read: "):
            rows = list(self.con.execute("SELECT workload, run, seq, measurer, detail FROM events" + where
                                         + " ORDER BY workload, run, measurer, seq", args))
        out = []
        for w, r, s, ms, d in rows:
            try:
                detail = load_json(d)
            except (ValueError, TypeError):
                continue
            if isinstance(detail, dict):
                out.append({"workload": w, "run": r, "seq": s, "measurer": ms or None, **detail})
        return out

    def runs(self) -> list[tuple[str, str]]:
        with self._guard("cannot be read: "):
            return list(self.con.execute("SELECT DISTINCT workload, run FROM measurements ORDER BY workload, run"))

    def measurers(self) -> list[tuple[str | None, int]]:
        """(measurer, rows), most rows first."""
        with self._guard("cannot be read: "):
            return list(self.con.execute("SELECT measurer, COUNT(*) FROM measurements GROUP BY measurer "
                                         "ORDER BY COUNT(*) DESC, measurer"))


def _explain(e: sqlite3.Error) -> str:
    """sqlite3's message, with what it means for a search log."""
    msg = str(e) or type(e).__name__
    hints = {"file is not a database": "not an SQLite database (or encrypted)",
             "database disk image is malformed": "damaged (truncated or overwritten)",
             "attempt to write a readonly database": "read-only (the file or its folder cannot be written)",
             "database is locked": f"locked by another process (waited {LOCK_TIMEOUT_S:g} s)",
             "unable to open database file": "cannot be opened or created (is its folder writable?)"}
    return next((v for k, v in hints.items() if k in msg), msg.splitlines()[0][:120])


def _where(workload: str | None, run: str | None, measurer: str | None = None) -> tuple[str, list]:
    """A WHERE clause selecting a workload, a run and/or a measurer (each optional)."""
    conds = [(c, v) for c, v in (("workload = ?", workload), ("run = ?", run), ("measurer = ?", measurer))
             if v is not None]
    return (" WHERE " + " AND ".join(c for c, _ in conds) if conds else ""), [v for _, v in conds]
