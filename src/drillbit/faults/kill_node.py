"""kill-node (fail-stop): every rank and the launcher on one node die at once.

A host going down takes all of its ranks *and* its elastic agent with it, which is a
different recovery path from one rank dying: no agent on that node restarts anything;
the other nodes must notice, re-rendezvous without it (or with a replacement) and restore.
OPT-175B lost ~2 machines a day on ~128 hosts; Llama 3 405B had 419 unexpected
interruptions in 54 days (metaseq projects/OPT/chronicles; the Llama 3 paper, arXiv 2407.21783, interruption table).

The node's job is the tree under the target rank's launcher: from the rank, climb through
parents whose command line matches ``launcher`` (the profile's, else torchrun), then
SIGKILL that root and every descendant — ranks, helpers, torchrun, the watchdog.
(torchrun starts each worker in a session of its own, so a process group does not span
the node's job.) The drill's own processes are never in that tree.
Nothing to heal: the node stays down until the drill ends, as a dead host would.
"""
from __future__ import annotations

from typing import Literal

import os
import re
import signal
import time

import psutil
from pydantic import Field, field_validator

from drillbit.core.evidence import NodeGone
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.core.proc import ProcRef
from drillbit.spec.models import launcher_regex


TORCHRUN = r"torch\.distributed\.run|torchrun"


# what a launcher regex can match by accident and must never be climbed into: a terminal
# multiplexer, a shell, a login, the init of a container
NEVER_THE_JOB = {"screen", "tmux", "tmux: server", "bash", "sh", "dash", "zsh", "fish", "sshd", "login", "su",
                 "sudo", "init", "systemd", "slurmstepd", "tini", "dumb-init", "nohup", "setsid"}


class KillNodeParams(Params):
    launcher: str | None = Field(None, description="regex of the command lines above a rank that belong to the "
                                                   "node's job (default: the job profile's launcher, else torchrun)")
    root: ProcRef | None = Field(None, description="the job's root on the node (filled by the agent: the launcher "
                                                   "it started, or the attached job's root); never climbed above")

    _launcher = field_validator("launcher")(classmethod(lambda cls, v: launcher_regex(v)))
    confirm_timeout_s: float = Field(10.0, gt=0)


class KillNodeState(State):
    killed: list[ProcRef]
    t_sent: float | None = None  # when the last SIGKILL went


def job_tree(target: ProcRef, launcher: str, bound: ProcRef | None = None) -> list[ProcRef]:
    """The node's job: the top-most launcher above the target, and everything under it —
    never above ``bound`` (the job's root, where the agent knows it), never into a shell, a
    terminal multiplexer or an init (``SCREEN -dmS t torchrun …`` matches torchrun's regex)."""
    proc = target.process()
    if proc is None:
        return []
    pattern = re.compile(launcher)
    mine = {p.pid for p in psutil.Process().parents()} | {os.getpid()}
    top = bound.process() if bound is not None else None
    root = proc
    for parent in proc.parents():
        if root.pid == (top.pid if top is not None else None):
            break  # the job's root: what is above it is not the job's
        try:
            name = parent.name().lower()
            matches = pattern.search(" ".join(parent.cmdline()))
        except psutil.Error:
            break
        if parent.pid in mine or parent.pid == 1 or name in NEVER_THE_JOB or not matches:
            break
        root = parent
    members = []
    for p in [root, *root.children(recursive=True)]:
        try:
            if p.pid not in mine and p.status() != psutil.STATUS_ZOMBIE:
                members.append(ProcRef.of(p, node=target.node))
        except psutil.NoSuchProcess:
            continue
    return members


class KillNode(Fault[KillNodeParams, KillNodeState]):
    name = "kill-node"
    needs = ("to signal the job's processes: the job's user, or root")
    blast_radius = ("every process of the job on the target node (the launcher's tree); the host and other jobs stay "
                    'up')
    binds = ("launcher",)
    evidence = (NodeGone,)
    verb = "killed (with its node)"

    def hurts(self, params: KillNodeParams) -> Literal["rank", "node"]:
        return "node"
    fault_class = "fail-stop"
    Params = KillNodeParams
    State = KillNodeState
    expects = "crash"
    # the survivors' workers lose their peer (a reset connection, else the collective's
    # timeout, or a heartbeat) and their launchers see them fail at the next poll
    detected_by = ("monitor_interval", "heartbeat", "collective")

    def plan(self, targets: list[ProcRef], params: KillNodeParams) -> Plan:
        nodes = sorted({t.node or "?" for t in targets})
        return Plan(fault=self.name, targets=targets,
                    action=f"SIGKILL every process of the job on node(s) {', '.join(nodes)}: ranks and launcher",
                    heal="nothing to undo; the node stays down and the job must go on without it")

    def prepare(self, target: ProcRef, params: KillNodeParams) -> KillNodeState:
        return KillNodeState(killed=job_tree(target, params.launcher or TORCHRUN, params.root))

    def act(self, target: ProcRef, params: KillNodeParams, intent: KillNodeState) -> KillNodeState:
        for member in intent.killed:
            member.send(signal.SIGKILL)
        return intent.model_copy(update={"t_sent": time.time()})

    def confirm(self, target: ProcRef, params: KillNodeParams, state: KillNodeState) -> Evidence | None:
        if not state.killed:
            return None
        if all(wait_gone(m, params.confirm_timeout_s) for m in state.killed):
            return Evidence(t=state.t_sent or time.time(), what="every process of the job on the node is gone",
                            data={"node": target.node, "processes": len(state.killed)})
        return None

    def heal(self, target: ProcRef, params: KillNodeParams, state: KillNodeState) -> HealReport:
        return HealReport(healed=True, verified=True, detail="nothing to undo (the node's processes were killed)")
