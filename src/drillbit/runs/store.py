"""The results store: every drill run recorded in SQLite (reports/drills.db by default).

``drill history`` reads the trend from it, and the regression SLOs (and the gate) take
their baseline from it: the last passing runs of the same drill on the same cluster and job.

It is opened only as a real file (a link at its name is refused, never followed), in a folder
root may write in (:mod:`drillbit.core.trust`); a drill refused with exit 2 is no verdict and
is not recorded in it (:func:`drillbit.runs.session.execute`).
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from drillbit.core import trust
from drillbit.core.errors import ConfigError
from drillbit.judging.checks.baseline import RUNS, Baseline
from drillbit.judging.checks.recovery import Measurements
from drillbit.spec.config import DrillConfig

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    drill TEXT NOT NULL,
    cluster TEXT NOT NULL,
    job TEXT NOT NULL,
    verdict TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    run_dir TEXT,
    time_to_detect REAL,
    time_to_first_step REAL,
    lost_steps INTEGER,
    goodput REAL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_key ON runs (drill, cluster, job, id);
"""


def store_path(config: DrillConfig, reports_dir: str | None = None, db: str | None = None) -> Path:
    """Where the store is: --db, else the config's results_db (unless --reports moved the
    run folders), else <reports>/drills.db. Absolute, its links not yet followed: the
    :class:`Store` follows them, each checked."""
    if db:
        return Path(os.path.abspath(db))
    if config.results_db and not reports_dir:
        return Path(os.path.abspath(config.results_db))
    return Path(os.path.abspath(reports_dir or config.reports_dir)) / "drills.db"


class Store:
    def __init__(self, path: Path) -> None:
        path = Path(path)
        with trust.folder(path.parent, "results store folder", create=True) as folder:
            self.path = folder.path / path.name  # real: every folder on the way checked, every link followed
            try:
                os.close(trust.open_file(path.name, os.O_RDWR | os.O_CREAT, 0o644, dir_fd=folder.fd))
            except OSError as exc:
                raise ConfigError(f"results store {path}: {exc.strerror}; remove what is there, or name "
                                  "another store with --db") from None
            trust.check(self.path, "results store")  # its owner and mode too
            self._db = sqlite3.connect(self.path)
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, payload: dict[str, Any], run_dir: str) -> int:
        m = payload.get("measurements", {})
        with self._db:
            cur = self._db.execute(
                "INSERT INTO runs (drill, cluster, job, verdict, started_at, finished_at, run_dir, time_to_detect,"
                " time_to_first_step, lost_steps, goodput, result) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (payload["drill"], payload["cluster"], payload["job"], payload["verdict"], payload.get("started_at"),
                 payload.get("finished_at"), run_dir, m.get("time_to_detect"), m.get("time_to_first_step"),
                 m.get("lost_steps"), m.get("goodput"), json.dumps(payload)))
        assert cur.lastrowid is not None  # an INSERT just ran
        return int(cur.lastrowid)

    def baseline(self, drill: str, cluster: str, job: str, runs: int = RUNS) -> Baseline | None:
        """The last ``runs`` passing runs of this drill on this cluster and job, newest first."""
        rows = self._db.execute(
            "SELECT id, result FROM runs WHERE drill=? AND cluster=? AND job=? AND verdict='pass' "
            "ORDER BY id DESC LIMIT ?", (drill, cluster, job, runs)).fetchall()
        if not rows:
            return None
        samples = []
        for _, result in rows:
            fields = json.loads(result)["measurements"]
            samples.append(Measurements.model_validate(fields))
        return Baseline(runs=[int(r[0]) for r in rows], samples=samples)

    def last_passing(self, drill: str, cluster: str, job: str) -> dict[str, Any] | None:
        """result.json of the latest passing run of this drill on this cluster and job."""
        row = self._db.execute("SELECT result FROM runs WHERE drill=? AND cluster=? AND job=? AND verdict='pass' "
                               "ORDER BY id DESC LIMIT 1", (drill, cluster, job)).fetchone()
        return json.loads(row[0]) if row else None

    def last_result(self, drill: str) -> dict[str, Any] | None:
        """result.json of the latest run of a drill, whatever its verdict."""
        row = self._db.execute("SELECT result FROM runs WHERE drill=? ORDER BY id DESC LIMIT 1", (drill,)).fetchone()
        return json.loads(row[0]) if row else None

    def result(self, run_id: int) -> dict[str, Any] | None:
        row = self._db.execute("SELECT result FROM runs WHERE id=?", (run_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def drill_names(self) -> list[str]:
        """Every drill the store holds a run of."""
        return [row[0] for row in self._db.execute("SELECT DISTINCT drill FROM runs ORDER BY drill")]

    def runs(self, drill: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        query = ("SELECT id, drill, cluster, job, verdict, started_at, time_to_detect, time_to_first_step, "
                 "lost_steps, goodput, run_dir FROM runs")
        args: tuple = ()
        if drill:
            query += " WHERE drill=?"
            args = (drill,)
        query += " ORDER BY id DESC LIMIT ?"
        cols = ("id", "drill", "cluster", "job", "verdict", "started_at", "time_to_detect", "time_to_first_step",
                "lost_steps", "goodput", "run_dir")
        return [dict(zip(cols, row, strict=False)) for row in self._db.execute(query, args + (limit,))]

    def series(self) -> tuple[list[dict[str, Any]], dict[tuple[str, ...], dict[str, int]]]:
        """Each drill's latest result on each cluster and job, and the runs of each by verdict
        (keyed like the metrics: drill, job, cluster, the latest run's fault)."""
        latest = [json.loads(row[0]) for row in self._db.execute(
            "SELECT result FROM runs WHERE id IN (SELECT MAX(id) FROM runs GROUP BY drill, cluster, job) ORDER BY id")]
        fault = {(r["drill"], r["job"], r["cluster"]): (r.get("fault") or {}).get("type", "") for r in latest}
        counts: dict[tuple[str, ...], dict[str, int]] = {}
        for drill, cluster, job, verdict, n in self._db.execute(
                "SELECT drill, cluster, job, verdict, COUNT(*) FROM runs GROUP BY drill, cluster, job, verdict"):
            key = (drill, job, cluster, fault.get((drill, job, cluster), ""))
            counts.setdefault(key, {})[verdict] = n
        return latest, counts

    def all_results(self):
        """Every run's result.json, oldest first, with its id."""
        for run_id, result in self._db.execute("SELECT id, result FROM runs ORDER BY id"):
            yield int(run_id), json.loads(result)
