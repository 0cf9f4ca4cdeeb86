"""hang-collective (fail-hang): freeze one rank so its peers block inside the collective.

SIGSTOP the rank: its peers wait in the all-reduce and spin, and no collective timeout
fires for 10 min (NCCL) or 30 min (gloo) — BLOOM's 2022-04-30 hang cost ~18 h this way
(bigscience train/tr11-176B-ml/chronicles.md; the NCCL and gloo process-group timeouts are PyTorch's defaults).
Confirmed when the rank is in the stopped state and (``confirm_progress``)
when the job's global progress stalls too. Heal: SIGCONT, then verify it runs again; a
no-op when the rank is gone, and never sent to a process that reused its pid.
"""
from __future__ import annotations

import signal
import time
from typing import Any, ClassVar, Literal

import psutil
from pydantic import Field

from drillbit.core.evidence import ProcessStopped
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, Progress, State
from drillbit.core.proc import ProcRef


class HangParams(Params):
    method: Literal["sigstop"] = "sigstop"
    confirm_timeout_s: float = Field(5.0, gt=0)


class HangState(State):
    stopped: ProcRef  # the process actually frozen: the rank, or a helper of it
    sent: bool
    t_sent: float | None = None  # when SIGSTOP went: the stall's moment, not when confirm saw it


class HangCollective(Fault[HangParams, HangState]):
    name = "hang-collective"
    needs = ("to signal the job's processes: the job's user, or root")
    blast_radius = ("one rank, stopped (SIGSTOP) until the heal's SIGCONT; its peers block in the collective")
    evidence = (ProcessStopped,)
    verb = "stopped"
    fault_class = "fail-hang"
    Params = HangParams
    State = HangState
    expects = "stall"
    # a stopped process stops heartbeating too
    detected_by: ClassVar[tuple[str, ...] | None] = ("watchdog", "collective", "heartbeat")

    def plan(self, targets: list[ProcRef], params: HangParams) -> Plan:
        return Plan(fault=self.name, targets=targets, action="SIGSTOP each target",
                    heal="SIGCONT each target still alive (same pid and start time)")

    def frozen(self, target: ProcRef) -> ProcRef:
        """Which process to stop for this target (the rank itself)."""
        return target

    def prepare(self, target: ProcRef, params: HangParams) -> HangState:
        return HangState(stopped=self.frozen(target), sent=False)

    def act(self, target: ProcRef, params: HangParams, intent: HangState) -> HangState:
        sent = intent.stopped.send(signal.SIGSTOP)
        return HangState(stopped=intent.stopped, sent=sent, t_sent=time.time())

    def confirm(self, target: ProcRef, params: HangParams, state: HangState) -> Evidence | None:
        if not state.sent:
            return None
        status = wait_stopped(state.stopped, params.confirm_timeout_s)
        if status is None:
            return None
        return Evidence(t=state.t_sent or time.time(), what="process stopped", data={"pid": state.stopped.pid, "status": status})

    def heal(self, target: ProcRef, params: HangParams, state: HangState) -> HealReport:
        return resume(state.stopped)

    def confirm_progress(self, progress: Progress, t_effect: float, params: Any = None) -> dict[str, Any] | None:
        """Global progress stalls: no step for several baseline step times after the effect
        (a step already in flight when the rank stopped belongs before the fault)."""
        quiet = progress.wait_quiet(t_effect)
        return None if quiet is None else {"progress_quiet_s": round(quiet, 3)}


def wait_stopped(target: ProcRef, timeout: float) -> str | None:
    """Its status once it is stopped (state T); None if it never was within ``timeout``, or
    it is gone."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = target.status()
        if status is None:
            return None
        if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return status
        time.sleep(0.01)
    return None


def resume(target: ProcRef, timeout: float = 5.0) -> HealReport:
    """SIGCONT a stopped rank (the same pid and start time only) and verify it runs again."""
    if not target.send(signal.SIGCONT):
        return HealReport(healed=True, verified=True, detail="target gone; nothing to resume")
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = target.status()
        if status is None or status not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return HealReport(healed=True, verified=True, detail=f"resumed (status {status or 'gone'})")
        time.sleep(0.01)
    return HealReport(healed=False, verified=False, detail="SIGCONT sent but the process is still stopped")
