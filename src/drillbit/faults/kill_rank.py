"""kill-rank (fail-stop): SIGKILL or SIGTERM one or more rank processes.

Models the ~2 machine losses a day on OPT-175B's 128 hosts and Llama 3's 419 unexpected
interruptions in 54 days (metaseq projects/OPT/chronicles; the Llama 3 paper, arXiv 2407.21783, interruption table).
Confirmed when the process is gone. Nothing to heal:
bringing the rank back is the job's recovery path, which the drill judges.
"""
from __future__ import annotations

import signal
import time
from typing import Literal

from pydantic import Field

from drillbit.core.evidence import ProcessGone
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.core.proc import ProcRef


class KillParams(Params):
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    confirm_timeout_s: float = Field(10.0, gt=0)


class KillState(State):
    sent: bool
    t_sent: float | None = None  # when the signal went: the fault's moment, not when confirm saw it gone


class KillRank(Fault[KillParams, KillState]):
    name = "kill-rank"
    needs = ("to signal the job's processes: the job's user, or root")
    blast_radius = ("the target ranks' processes (each checked by pidfd before the signal); nothing else on the node")
    evidence = (ProcessGone,)
    verb = "killed"
    fault_class = "fail-stop"
    Params = KillParams
    State = KillState
    expects = "crash"

    def plan(self, targets: list[ProcRef], params: KillParams) -> Plan:
        return Plan(fault=self.name, targets=targets, action=f"send {params.signal} to each target",
                    heal="nothing to undo; the job's own restart brings the rank back")

    def prepare(self, target: ProcRef, params: KillParams) -> KillState:
        return KillState(sent=False)

    def act(self, target: ProcRef, params: KillParams, intent: KillState) -> KillState:
        sent = target.send(signal.Signals[params.signal])
        return KillState(sent=sent, t_sent=time.time())

    def confirm(self, target: ProcRef, params: KillParams, state: KillState) -> Evidence | None:
        if state.sent and wait_gone(target, params.confirm_timeout_s):
            return Evidence(t=state.t_sent or time.time(), what="process gone", data={"pid": target.pid})
        return None

    def heal(self, target: ProcRef, params: KillParams, state: KillState) -> HealReport:
        return HealReport(healed=True, verified=True, detail="nothing to undo (the process was killed)")
