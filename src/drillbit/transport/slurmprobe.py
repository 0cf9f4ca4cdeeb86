"""The scheduler's view of the job: ``scontrol show job`` followed every quarter second, its
changes turned into history events (source ``slurm``).

``job.state`` {state, reason, restarts, nodes} on every change; ``requeue`` {restarts,
reason} when Slurm requeued the job (Restarts went up), which is also a ``detect`` by
slurm — the scheduler noticed the failure; ``restart`` {attempt, by: slurm} when the job
runs again after a requeue, and ``job.nodes`` {nodes, restarts} with the allocation it runs
on (the first one included).

The probe holds no engine: it is given ``poll`` (the job's state now, or None) and
``changed`` (called with each state it saw; the Slurm engine gives its agents to a new
allocation there).
"""
from __future__ import annotations

import threading
from typing import Callable

from drillbit.core.history import History
from drillbit.core.slurm.scheduler import JobInfo

SOURCE = "slurm"


class SchedulerProbe:
    interval = 0.25

    def __init__(self, history: History, poll: Callable[[], JobInfo | None],
                 changed: Callable[[JobInfo], None] = lambda info: None) -> None:
        self.history = history
        self.poll = poll
        self.changed = changed
        self.last: JobInfo | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors = 0

    def start(self) -> None:
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="slurm-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def explain(self) -> str:
        if self.last is None:
            return "the scheduler probe has not seen the job"
        return f"Slurm job {self.last.job_id} {self.last.state} ({self.last.reason}) on {','.join(self.last.nodes)}"

    def poll_once(self) -> None:
        with self._lock:
            try:
                info = self.poll()
            except Exception:  # noqa: BLE001 — slurmctld busy or restarting: try again
                self.errors += 1
                return
            if info is None:
                return
            self._changes(self.last, info)
            self.last = info
        self.changed(info)

    def _changes(self, old: JobInfo | None, new: JobInfo) -> None:
        rec = self.history.record
        if old is None or (old.state, old.reason, old.restarts, old.nodes) != (new.state, new.reason, new.restarts,
                                                                               new.nodes):
            rec(SOURCE, "job.state", state=new.state, reason=new.reason, restarts=new.restarts, nodes=list(new.nodes),
                eligible=new.eligible)
        if old is not None and new.restarts > old.restarts:
            rec(SOURCE, "requeue", restarts=new.restarts, reason=new.reason, previous_nodes=list(old.nodes))
            rec(SOURCE, "detect", by="slurm", how="requeue")
        running_again = new.state == "RUNNING" and new.nodes and (
            old is None or old.state != "RUNNING" or old.restarts != new.restarts or old.nodes != new.nodes)
        if running_again:
            if old is not None and new.restarts > 0:
                rec(SOURCE, "restart", attempt=new.restarts, by="slurm")
            rec(SOURCE, "job.nodes", nodes=list(new.nodes), restarts=new.restarts)
