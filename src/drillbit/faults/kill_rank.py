"""kill-rank (fail-stop): SIGKILL or SIGTERM one or more rank processes.

Models the ~2 machine losses a day on OPT-175B's 128 hosts and Llama 3's 419 unexpected
interruptions in 54 days (FACTS.md). Confirmed when the process is gone. Nothing to heal:
bringing the rank back is the job's recovery path, which the drill judges.
"""
from __future__ import annotations

import signal
from typing import Literal

from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.faults.ckptfile import wait_gone
from drillbit.proc import ProcRef


class KillParams(Params):
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    confirm_timeout_s: float = 10.0


class KillRank(Fault):
    name = "kill-rank"
    fault_class = "fail-stop"
    Params = KillParams
    expects = "crash"

    def plan(self, targets: list[ProcRef], params: KillParams) -> Plan:
        return Plan(fault=self.name, targets=targets, action=f"send {params.signal} to each target",
                    heal="nothing to undo; the job's own restart brings the rank back")

    def inject(self, target: ProcRef, params: KillParams) -> Handle:
        sent = target.send(signal.Signals[params.signal])
        return Handle(fault=self.name, target=target, params=params.model_dump(), state={"sent": sent})

    def confirm(self, handle: Handle) -> Evidence | None:
        if not handle.state.get("sent"):
            return None
        if wait_gone(handle.target, float(handle.params.get("confirm_timeout_s", 10.0))):
            return Evidence(what="process gone", data={"pid": handle.target.pid})
        return None

    def heal(self, handle: Handle) -> HealReport:
        return HealReport(healed=True, verified=True, detail="nothing to undo (the process was killed)")
