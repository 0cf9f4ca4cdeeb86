"""The dead-man's switch: one routine, two ways to trip it, one record shape.

An agent whose controller is gone — no heartbeat for ``deadman_s`` (the agent notices), or
the process the guardian watches has died (the guardian notices: the agent itself, or the
controller when the agent lives in it) — runs :func:`orphan`: heal every fault it holds,
each with a deadline and on its own (one failing heal does not stop the others), let the
job run ``job_grace_s`` more so its recovery can be seen, stop the job it launched, and
write ``orphan.done``.

Everything it does is a :class:`~drillbit.agent.api.Record` line in
``agent-<node>.deadman.jsonl``, with ``t`` on the controller's clock (the offset the
controller measured is given to the agent when it arms). The controller collects those
records into ``history.jsonl`` when it can still talk to the agent; ``drill report``
merges them from the run folder when it could not.

The guardian is ``python -m drillbit.agent guard`` (:mod:`drillbit.agent.guardian`), a
process in a session of its own started when the agent is armed, released (SIGTERM) when the
controller disarms it.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable

from drillbit.agent.api import Record
from drillbit.agent.jobcgroup import from_record
from drillbit.agent.jobproc import stop_job as stop_tree
from drillbit.agent.node import NodeAgent
from drillbit.faults.base import Handle, HealReport
from drillbit.core.proc import ProcRef

HEAL_DEADLINE_S = 60.0
BACKOFF_CAP_S = 60.0


class DeadmanLog:
    """Appends Records, fsynced: they may be the only account of what happened."""

    def __init__(self, path: Path, node: str, offset_s: float = 0.0, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.node = node
        self.offset_s = offset_s
        self.clock = clock

    def note(self, kind: str, rank: int | None = None, t: float | None = None, **data: object) -> Record:
        agent_t = self.clock() if t is None else t
        record = Record(t=agent_t - self.offset_s, kind=kind, node=self.node, rank=rank,
                        data={"by": "dead-man", "agent_t": agent_t, **data})
        with open(self.path, "a") as out:
            out.write(record.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())
        return record


def read_records(path: Path) -> list[Record]:
    """The records of one agent; a torn last line (the writer died mid-line) is skipped."""
    records = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            records.append(Record.model_validate_json(line))
        except ValueError:
            continue
    return records


def heal_with_deadline(heal: Callable[[Handle], HealReport], handle: Handle,
                       timeout: float = HEAL_DEADLINE_S) -> HealReport:
    """One heal, bounded: a heal that blocks or raises becomes a failed report."""
    return heal_all_with_deadline(lambda handles: [heal(handles[0])], [handle], timeout)[0]


def heal_all_with_deadline(heal_all: Callable[[list[Handle]], list[HealReport]], handles: list[Handle],
                           timeout: float = HEAL_DEADLINE_S) -> list[HealReport]:
    """Several heals in one call, bounded by ``timeout`` in all: a call that blocks, raises or
    answers for other than its handles makes each of them a failed report (each has its retry)."""
    box: list = []

    def work() -> None:
        try:
            got = heal_all(handles)
            if len(got) != len(handles):
                raise ValueError(f"{len(got)} heal reports for {len(handles)} faults")
            box.append(got)
        except Exception as exc:  # reported as failed heals, the next fault still gets healed
            detail = f"heal raised {exc.__class__.__name__}: {exc}"
            box.append([HealReport(healed=False, verified=False, detail=detail) for _ in handles])

    worker = threading.Thread(target=work, daemon=True, name=f"heal-{handles[0].fault if handles else ''}")
    worker.start()
    worker.join(timeout)
    if not box:
        return [HealReport(healed=False, verified=False, detail=f"the heal did not finish in {timeout:g} s")
                for _ in handles]
    return box[0]


def backoff(attempt: int) -> float:
    """Seconds before heal attempt ``attempt`` + 1: 1, 2, 4, … capped at a minute."""
    return min(BACKOFF_CAP_S, 2.0 ** max(0, attempt - 1))


def orphan(log: DeadmanLog, reason: str, pending: Callable[[], list[Handle]], heal: Callable[[Handle], HealReport],
           job_running: Callable[[], bool], stop_job: Callable[[], int | None], job_grace_s: float,
           wait: Callable[[float], object], stopped: Callable[[], bool] = lambda: False) -> bool:
    """The controller is gone: heal, let the job show its recovery, stop it, say so.

    A fault that does not heal is tried again, with backoff, until it heals or leaves
    ``pending()`` (the registry: ``drill heal`` healed it, or an operator abandoned it with
    ``drill heal --abandon``) — never dropped. A fault whose heal waits for the job to stop
    (``after_job``) is healed after the job is stopped. Returns False when ``stopped()``
    ended the retries first (whoever stopped this takes the registry over)."""
    log.note("agent.lost", reason=reason)
    running = job_running()
    if not heal_until_done(log, lambda: [h for h in pending() if not (running and h.after_job)], heal, wait,
                           stopped):
        return False
    if running:
        wait(job_grace_s)
        log.note("job.stop", code=stop_job())
        if not heal_until_done(log, pending, heal, wait, stopped):
            return False
    log.note("orphan.done")
    return True


def heal_until_done(log: DeadmanLog, pending: Callable[[], list[Handle]], heal: Callable[[Handle], HealReport],
                    wait: Callable[[float], object], stopped: Callable[[], bool]) -> bool:
    """Heal each of ``pending()``, again and again with backoff, until none is left; False
    if ``stopped()`` first."""
    attempt = 0
    while left := pending():
        attempt += 1
        for handle in left:
            report = heal_with_deadline(heal, handle)
            kind = "fault.heal" if report.healed else "heal.failed"
            log.note(kind, rank=handle.target.rank, fault=handle.fault, pid=handle.target.pid, attempt=attempt,
                     healed=report.healed, verified=report.verified, detail=report.detail)
        if not (still := pending()):
            break
        delay = backoff(attempt)
        log.note("heal.retry", attempt=attempt + 1, in_s=delay, faults=[h.fault for h in still])
        wait(delay)
        if stopped():
            return False
    return True


def heal_orphaned(registry: Path, told: set[str], lost: str, stop: threading.Event) -> None:
    """The guardian tripped (:func:`drillbit.agent.guardian.guard`): the agent whose registry
    this is lost its controller (``lost`` says how). Unless it was disarmed before, heal every
    fault it holds and stop the job it launched, as :func:`orphan` does; ``told`` is every
    handle digest the agent told the guardian (a state it told but did not write still counts)."""
    try:
        payload = json.loads(registry.read_text())
    except (OSError, ValueError):
        payload = {}
    armed = payload.get("armed")
    if not armed:
        return  # disarmed before it died: nothing is ours to heal
    agent = NodeAgent(payload.get("node", "?"), registry)
    handles = [Handle.model_validate(h) for h in payload.get("faults", [])]
    agent.restore(handles, payload.get("job"), armed, told=told)
    job = payload.get("job")
    log = DeadmanLog(agent.log_path, agent.node, float(armed.get("offset_s", 0.0)))

    def stop_job() -> int | None:
        cgroup = from_record(job.get("cgroup"), job.get("mark"))
        stop_tree(ProcRef.model_validate(job["proc"]), job.get("mark"), timeout=20.0, cgroup=cgroup)
        if cgroup is not None:
            cgroup.remove()
        agent.release_job()
        return None

    orphan(log, lost, agent.pending, agent.heal,
           job_running=lambda: bool(job), stop_job=stop_job,
           job_grace_s=float(armed.get("job_grace_s", 0.0)), wait=stop.wait, stopped=stop.is_set)
