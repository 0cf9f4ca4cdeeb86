"""hang-collective (fail-hang): freeze one rank so its peers block inside the collective.

SIGSTOP the rank: its peers wait in the all-reduce and spin, and no collective timeout
fires for 10 min (NCCL) or 30 min (gloo) — BLOOM's 2022-04-30 hang cost ~18 h this way
(FACTS.md). Confirmed when the rank is in the stopped state (and, by the runner, when
global progress stalls). Heal: SIGCONT, then verify it runs again; a no-op when the rank
is gone, and never sent to a process that reused its pid.
"""
from __future__ import annotations

import signal
import time
from typing import Literal

import psutil

from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.proc import ProcRef


class HangParams(Params):
    method: Literal["sigstop"] = "sigstop"
    confirm_timeout_s: float = 5.0


class HangCollective(Fault):
    name = "hang-collective"
    fault_class = "fail-hang"
    Params = HangParams
    expects = "stall"

    def plan(self, targets: list[ProcRef], params: HangParams) -> Plan:
        return Plan(fault=self.name, targets=targets, action="SIGSTOP each target",
                    heal="SIGCONT each target still alive (same pid and start time)")

    def inject(self, target: ProcRef, params: HangParams) -> Handle:
        sent = target.send(signal.SIGSTOP)
        return Handle(fault=self.name, target=target, params=params.model_dump(), state={"sent": sent})

    def confirm(self, handle: Handle) -> Evidence | None:
        if not handle.state.get("sent"):
            return None
        deadline = time.time() + float(handle.params.get("confirm_timeout_s", 5.0))
        while time.time() < deadline:
            status = handle.target.status()
            if status is None:
                return None
            if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                return Evidence(what="process stopped", data={"pid": handle.target.pid, "status": status})
            time.sleep(0.01)
        return None

    def heal(self, handle: Handle) -> HealReport:
        return resume(handle.target)


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
