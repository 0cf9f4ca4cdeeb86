"""kill-node (fail-stop): every rank and the launcher on one node die at once.

A host going down takes all of its ranks *and* its elastic agent with it, which is a
different recovery path from one rank dying: no agent on that node restarts anything;
the other nodes must notice, re-rendezvous without it (or with a replacement) and restore.
OPT-175B lost ~2 machines a day on ~128 hosts; Llama 3 405B had 419 unexpected
interruptions in 54 days (FACTS.md).

The node's job is the target rank's process group: the launcher a node agent (or Slurm)
started in a session of its own, with torchrun, the ranks and their helpers under it.
Everything in that group gets SIGKILL. The drill's own processes are never in it.
Nothing to heal: the node stays down until the drill ends, as a dead host would.
"""
from __future__ import annotations

import os
import signal

import psutil

from drillbit.faults.base import Evidence, Fault, Handle, HealReport, Params, Plan
from drillbit.faults.ckptfile import wait_gone
from drillbit.proc import ProcRef


class KillNodeParams(Params):
    confirm_timeout_s: float = 10.0


def group_of(target: ProcRef) -> list[ProcRef]:
    """Every live process in the target's process group (the node's job)."""
    proc = target.process()
    if proc is None:
        return []
    pgid = os.getpgid(proc.pid)
    if pgid in (os.getpgid(0), 1):
        raise ValueError(f"rank {target.rank} shares process group {pgid} with the drill itself; "
                         "kill-node needs the job launched in a session of its own")
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(ProcRef.of(p, node=target.node))
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


class KillNode(Fault):
    name = "kill-node"
    fault_class = "fail-stop"
    Params = KillNodeParams
    expects = "crash"

    def plan(self, targets: list[ProcRef], params: KillNodeParams) -> Plan:
        nodes = sorted({t.node or "?" for t in targets})
        return Plan(fault=self.name, targets=targets,
                    action=f"SIGKILL every process of the job on node(s) {', '.join(nodes)}: ranks and launcher",
                    heal="nothing to undo; the node stays down and the job must go on without it")

    def inject(self, target: ProcRef, params: KillNodeParams) -> Handle:
        members = group_of(target)
        for member in members:
            member.send(signal.SIGKILL)
        return Handle(fault=self.name, target=target, params=params.model_dump(),
                      state={"killed": [m.model_dump() for m in members]})

    def confirm(self, handle: Handle) -> Evidence | None:
        killed = [ProcRef.model_validate(m) for m in handle.state.get("killed", [])]
        if not killed:
            return None
        timeout = float(handle.params.get("confirm_timeout_s", 10.0))
        if all(wait_gone(m, timeout) for m in killed):
            return Evidence(what="every process of the job on the node is gone",
                            data={"node": handle.target.node, "processes": len(killed)})
        return None

    def heal(self, handle: Handle) -> HealReport:
        return HealReport(healed=True, verified=True, detail="nothing to undo (the node's processes were killed)")
