"""fail-node-replacement (recovery path): a node dies and its replacement goes wrong.

The target rank's node is declared dead (marked bad in the job's node pool) and the rank
SIGKILLed; the node-replacement provider is made to misbehave for the next ``count``
requests: ``fail`` (no capacity), ``hang`` (never answers) or ``same-node`` (hands the bad
node back). OPT-175B: replacement "can take hours" and often returned the same bad
machine; a 5-host burst once met a 4-host spare pool (FACTS.md). A recovery stack must
time out, check what it got, try another spare, or escalate — not wait.

The provider's misbehaviour is a chaos file beside the pool (``pool.json.chaos``); heal
removes it (or puts back what was there, byte for byte). The node's bad mark is the dead
node's, and stays.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Literal

from pydantic import Field

from drillbit.errors import FaultError
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.proc import ProcRef
from drillbit.reference import nodepool


class ReplacementParams(Params):
    mode: Literal["fail", "hang", "same-node"] = "hang"
    count: int = Field(1, ge=1, description="how many replacement requests misbehave")
    node_pool: str | None = Field(None, description="default: the job profile's node_pool")


class ReplacementState(State):
    chaos: str
    previous: str | None
    written: str
    node: str
    killed: bool


class FailNodeReplacement(Fault[ReplacementParams, ReplacementState]):
    name = "fail-node-replacement"
    fault_class = "recovery-path"
    Params = ReplacementParams
    State = ReplacementState
    expects = "crash"
    max_targets = 1  # one checkpoint file (or node pool) for every target

    def plan(self, targets: list[ProcRef], params: ReplacementParams) -> Plan:
        return Plan(fault=self.name, targets=targets,
                    action=f"mark the target's node bad, SIGKILL it; the next {params.count} replacement "
                           f"request(s) {params.mode}",
                    heal="remove the provider's chaos file (or restore the previous one byte for byte)")

    def prepare(self, target: ProcRef, params: ReplacementParams) -> ReplacementState:
        if not params.node_pool or not Path(params.node_pool).exists():
            raise FaultError(f"fail-node-replacement needs the job's node pool; {params.node_pool!r} does not exist "
                             "(set node_pool in the job profile)")
        pool = Path(params.node_pool)
        chaos = nodepool.chaos_path(pool)
        return ReplacementState(chaos=str(chaos), previous=chaos.read_text() if chaos.exists() else None,
                                written=json.dumps({"mode": params.mode, "remaining": params.count}),
                                node=nodepool.read(pool)["active"], killed=False)

    def act(self, target: ProcRef, params: ReplacementParams, intent: ReplacementState) -> ReplacementState:
        Path(intent.chaos).write_text(intent.written)
        nodepool.mark_bad(Path(params.node_pool or ""), intent.node)
        return intent.model_copy(update={"killed": target.send(signal.SIGKILL)})

    def confirm(self, target: ProcRef, params: ReplacementParams, state: ReplacementState) -> Evidence | None:
        chaos = Path(state.chaos)
        pool = chaos.with_name(chaos.name[: -len(".chaos")])
        if not chaos.exists() or state.node not in nodepool.read(pool)["bad"]:
            return None
        if not (state.killed and wait_gone(target)):
            return None
        return Evidence(what=f"node {state.node} dead; replacement provider set to {params.mode}",
                        data={"node": state.node, "provider": json.loads(chaos.read_text())})

    def heal(self, target: ProcRef, params: ReplacementParams, state: ReplacementState) -> HealReport:
        chaos = Path(state.chaos)
        fired = None
        if chaos.exists():
            remaining = json.loads(chaos.read_text()).get("remaining")
            fired = params.count - (remaining or 0)
        if state.previous is None:
            chaos.unlink(missing_ok=True)
            ok = not chaos.exists()
        else:
            chaos.write_text(state.previous)
            ok = chaos.read_text() == state.previous
        detail = "provider restored" + (f"; it misbehaved on {fired} request(s)" if fired is not None else "")
        return HealReport(healed=ok, verified=ok, detail=detail)
