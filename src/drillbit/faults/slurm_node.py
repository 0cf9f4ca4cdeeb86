"""Node faults through the Slurm scheduler (engine ``slurm``): they act on the target rank's
node as Slurm knows it, from the controller's machine (the scheduler agent), never from
inside the job — the job's own agents end with its allocation.

``node-down``: an administrator's ``scontrol update nodename=N state=down`` — Slurm kills
the job's steps on N and, for a job submitted with ``--requeue``, requeues it (Restarts+1);
the healing is ``state=resume``, always. ``node-crash``: the node dies the way a machine
does — its slurmd and every process of the job on it are frozen and killed at once, so
nothing reports; slurmctld notices only when the node stops answering (SlurmdTimeout),
then sets it DOWN and requeues the job. The heal starts that slurmd again with the
command line it had (and resumes the node if Slurm does not return it to service itself).
Measured on Slurm 22.05 (this project's issue 16): a requeued job is held for the credential
lifetime (~121 s by default) before it may run again; ReturnToService=2 puts a DOWN node's
still-running slurmd back at once, so the rerun can land on the node that failed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Literal, TypeVar

import psutil
from pydantic import Field

from drillbit.core.errors import FaultError
from drillbit.core.evidence import NodeGone, NodeState
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.faults.partition import netns_of
from drillbit.core.netns import inode_of
from drillbit.core.proc import ProcRef
from drillbit.core.slurm.scheduler import Slurm, job_processes

_UP = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")
S = TypeVar("S", bound=State)


class NodeFaultParams(Params):
    reason: str = Field("drillbit drill", description="the Reason Slurm shows for the node")
    slurm_conf: str | None = Field(None, description="filled in from the cluster entry")
    slurm_via: list[str] = Field(default_factory=list, description="filled in from the cluster entry: the prefix "
                                                                   "Slurm's commands run through")
    job_id: str | None = Field(None, description="filled in: the drilled job")
    confirm_timeout_s: float = Field(30.0, gt=0)
    heal_timeout_s: float = Field(40.0, gt=0, description="how long the node may take to be up again")


def _slurm(params: NodeFaultParams):

    return Slurm(params.slurm_conf, via=params.slurm_via)


def _up(state: str) -> bool:
    flags = state.split("+")
    return flags[0] in _UP and not any(f in ("DRAIN", "NOT_RESPONDING", "DOWN") for f in flags[1:]) \
        and not state.endswith("*")


# the reasons slurmctld itself gives a node it found dead: a crash's DOWN is ours only with one of them
_CRASH_REASONS = ("Not responding", "Node unexpectedly rebooted", "Kill task failed", "Prolog error",
                  "Epilog error", "")


def _resume_and_wait(params: NodeFaultParams, node: str, ours: Callable[[str], bool]) -> HealReport:
    """Resume the node if it is still DOWN and the DOWN is ours (``ours(Reason)``), then wait
    until it is up. A node someone else took down or drained since — an administrator, or a
    real failure with its own reason — is theirs: left as it is, and said so."""
    slurm = _slurm(params)
    end = time.time() + params.heal_timeout_s
    resumed = False
    state, error = "?", ""
    while time.time() < end:
        info = slurm.nodes().get(node, {})
        state = info.get("State", "UNKNOWN")
        reason = info.get("Reason", "") or ""
        if _up(state):
            return HealReport(healed=True, verified=True, detail=f"node {node} is {state}"
                              + (" (resumed)" if resumed else " (returned to service by Slurm)"))
        if not resumed and ("DOWN" in state or "DRAIN" in state) and not ours(reason):
            return HealReport(healed=True, verified=False, detail=(
                f"node {node} is {state} with Reason={reason!r}, which is not this fault's: someone or something "
                "else took it down or drained it since; left as it is, for its owner (the fault's own DOWN is "
                "superseded)"))
        if not resumed and ("DOWN" in state or "DRAIN" in state) and not state.endswith("*"):
            try:
                slurm.update_node(node, "resume")
                resumed = True
            except Exception as exc:  # noqa: BLE001 — a slurmd just started may not have registered yet
                error = f"; scontrol update {node} state=resume: {exc}"
        time.sleep(0.25)
    return HealReport(healed=False, verified=False, detail=f"node {node} still {state} after "
                                                           f"{params.heal_timeout_s:g} s{error}")


class NodeDownState(State):
    node: str
    before: str = ""
    seen: str | None = None  # the node's state right after the update (ReturnToService=2 may undo it at once)
    job_restarts: int | None = None  # the drilled job's Restarts before the update, when it ran on the node


class SchedulerNodeFault(Fault[NodeFaultParams, S]):
    """What the node faults share: they take the target rank's whole node, act through the
    Slurm scheduler from the controller's machine, one node a drill."""

    fault_class = "fail-stop"
    Params = NodeFaultParams
    expects = "crash"
    acts_through = "scheduler"
    needs_engine = "slurm"
    max_targets = 1

    def hurts(self, params: NodeFaultParams) -> Literal["rank", "node"]:
        return "node"

    @staticmethod
    def nodes(targets: list[ProcRef]) -> list[str]:
        return sorted({t.node or "?" for t in targets})


class NodeDown(SchedulerNodeFault[NodeDownState]):
    name = "node-down"
    needs = ("a Slurm operator or administrator (scontrol update state=down) on the controller's machine")
    blast_radius = ("one Slurm node: Slurm kills every job step on it, other users' jobs included; heal sets it "
                    'state=resume')
    evidence = (NodeState,)
    State = NodeDownState
    verb = "taken down (with its node)"

    def plan(self, targets: list[ProcRef], params: NodeFaultParams) -> Plan:
        return Plan(fault=self.name, targets=targets,
                    action=f"scontrol update nodename={','.join(self.nodes(targets))} state=down "
                           f"reason='{params.reason}'",
                    heal="scontrol update state=resume (unless Slurm returned the node to service first)")

    def prepare(self, target: ProcRef, params: NodeFaultParams) -> NodeDownState:
        node = target.node or ""
        state = _slurm(params).nodes().get(node, {}).get("State")
        if state is None:
            raise FaultError(f"node-down: Slurm knows no node {node!r}")
        if "DOWN" in state or "DRAIN" in state:
            raise FaultError(f"node-down: node {node} is already {state}; nothing was changed")
        restarts = None
        if params.job_id:
            job = _slurm(params).job(params.job_id)
            if job is not None and node in job.nodes and not job.finished:
                restarts = job.restarts
        return NodeDownState(node=node, before=state, job_restarts=restarts)

    def act(self, target: ProcRef, params: NodeFaultParams, intent: NodeDownState) -> NodeDownState:
        slurm = _slurm(params)
        slurm.update_node(intent.node, "down", reason=params.reason)
        state = intent.model_copy()
        end = time.time() + 2.0  # read at once: with ReturnToService=2 a DOWN lasts until slurmd next answers
        while time.time() < end and state.seen is None:
            now = slurm.node_state(intent.node)
            if "DOWN" in now:
                state.seen = now
            else:
                time.sleep(0.02)
        return state

    def confirm(self, target: ProcRef, params: NodeFaultParams, state: NodeDownState) -> Evidence | None:
        if state.seen is not None:
            return Evidence(what=f"Slurm showed node {state.node} {state.seen} right after the update",
                            data={"node": state.node, "state": state.seen})
        slurm = _slurm(params)
        end = time.time() + params.confirm_timeout_s
        while time.time() < end:
            now = slurm.node_state(state.node)
            if "DOWN" in now:
                return Evidence(what=f"Slurm shows node {state.node} {now}", data={"node": state.node, "state": now})
            # With ReturnToService=2 the DOWN can be over before a loaded controller reads it
            # back; Slurm's own record of what it did to the job on the node still shows it.
            job = slurm.job(params.job_id) if params.job_id and state.job_restarts is not None else None
            if job is not None and job.restarts > state.job_restarts:
                return Evidence(what=f"Slurm requeued job {job.job_id} (Restarts {state.job_restarts} -> "
                                     f"{job.restarts}) after node {state.node} was set down; the node is {now} again",
                                data={"node": state.node, "state": now, "job_id": job.job_id,
                                      "restarts": job.restarts})
            time.sleep(0.1)
        return None

    def heal(self, target: ProcRef, params: NodeFaultParams, state: NodeDownState) -> HealReport:
        return _resume_and_wait(params, state.node, ours=lambda reason: reason.startswith(params.reason))


class NodeCrashState(State):
    node: str
    slurmd: ProcRef
    argv: list[str]
    cwd: str
    env: dict[str, str]
    killed: list[ProcRef] = []
    netns: str | None = None  # slurmd's named network namespace (/run/netns/…), where it is not the agent's


def find_slurmd(node: str) -> psutil.Process | None:
    """The slurmd of ``node`` on this machine: one started with ``-N node``, else the only
    slurmd here when this machine's hostname is the node's."""
    import socket

    plain = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] != "slurmd":
                continue
            argv = proc.info["cmdline"] or []
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "-N" in argv and argv.index("-N") + 1 < len(argv):
            if argv[argv.index("-N") + 1] == node:
                return proc
        elif not any(a.startswith("-N") for a in argv):
            plain.append(proc)
    if len(plain) == 1 and socket.gethostname().split(".")[0] == node:
        return plain[0]
    return None


def node_job_tree(job_id: str | None, node: str) -> list[psutil.Process]:
    """Every process of the job on ``node`` on this machine, and the slurmstepd above them."""
    if job_id is None:
        return []

    procs = {p.pid: p for p in job_processes(job_id, node)}
    for proc in list(procs.values()):
        try:
            for parent in proc.parents():
                if parent.name() == "slurmstepd":
                    procs.setdefault(parent.pid, parent)
                    break
        except psutil.NoSuchProcess:
            continue
    return list(procs.values())


class NodeCrash(SchedulerNodeFault[NodeCrashState]):
    name = "node-crash"
    needs = ('root on the node (slurmd and every job process on it are frozen and killed)')
    blast_radius = ("one Slurm node and everything running on it, other users' jobs included, until heal starts its "
                    'slurmd again')
    evidence = (NodeGone,)
    State = NodeCrashState
    verb = "crashed (with its node)"

    def plan(self, targets: list[ProcRef], params: NodeFaultParams) -> Plan:
        return Plan(fault=self.name, targets=targets,
                    action=f"freeze, then SIGKILL, the slurmd of {', '.join(self.nodes(targets))} and every process "
                           "of the job "
                           "there (its slurmstepd and tasks) at once",
                    heal="start that slurmd again with its command line; resume the node if Slurm does not")

    def prepare(self, target: ProcRef, params: NodeFaultParams) -> NodeCrashState:
        node = target.node or ""
        proc = find_slurmd(node)
        if proc is None:
            raise FaultError(f"node-crash: no slurmd of node {node!r} on this machine; node-crash stops the slurmd "
                             "where the drill's controller runs (a local or single-host cluster). On a real cluster "
                             "drill node-down, or kill-node inside the job")
        try:
            env = {k: v for k, v in proc.environ().items() if k.startswith("SLURM") or k in ("PATH", "HOME")}
            state = NodeCrashState(node=node, slurmd=ProcRef.of(proc, node=node), argv=proc.cmdline(),
                                   cwd=proc.cwd(), env=env)
        except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
            raise FaultError(f"node-crash: cannot read slurmd of {node}: {exc}") from None
        inode = inode_of(proc.pid)
        if inode is not None and inode != inode_of(os.getpid()):
            # its node is a network namespace: the heal must start it there again, which only a
            # named one (/run/netns) outlives the crash to allow
            where = netns_of(inode) or ""
            if not where.startswith("/run/netns/"):
                raise FaultError(f"node-crash: the slurmd of {node} is in a network namespace with no name in "
                                 "/run/netns; once it is killed nothing could start it there again")
            state.netns = where
        state.killed = [ProcRef.of(p, node=node) for p in node_job_tree(params.job_id, node)]
        return state

    def act(self, target: ProcRef, params: NodeFaultParams, intent: NodeCrashState) -> NodeCrashState:
        everything = [intent.slurmd, *intent.killed]
        for ref in everything:  # frozen first: nothing of the node may report its own death
            ref.send(signal.SIGSTOP)
        for ref in everything:
            ref.send(signal.SIGKILL)
        return intent

    def confirm(self, target: ProcRef, params: NodeFaultParams, state: NodeCrashState) -> Evidence | None:
        gone = all(wait_gone(ref, 10.0) for ref in [state.slurmd, *state.killed])
        if not gone:
            return None
        return Evidence(what=f"the slurmd of {state.node} and {len(state.killed)} process(es) of the job there are "
                             "gone", data={"node": state.node, "processes": len(state.killed) + 1})

    def heal(self, target: ProcRef, params: NodeFaultParams, state: NodeCrashState) -> HealReport:
        current = find_slurmd(state.node)
        if current is None:
            argv = state.argv
            if state.netns is not None:
                if not os.path.exists(state.netns):
                    return HealReport(healed=False, verified=False, detail=f"the network namespace of {state.node}'s "
                                      "slurmd is gone; it cannot be started there again")
                argv = ["nsenter", f"--net={state.netns}", *argv]
            try:
                subprocess.Popen(argv, cwd=state.cwd if os.path.isdir(state.cwd) else "/",
                                 env={**os.environ, **state.env}, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                return HealReport(healed=False, verified=False, detail=f"could not start slurmd again: {exc}")
        report = _resume_and_wait(params, state.node,
                                  ours=lambda reason: reason.startswith(params.reason) or
                                  any(reason.startswith(r) for r in _CRASH_REASONS if r) or not reason)
        started = "" if current is not None else "slurmd started again; "
        return report.model_copy(update={"detail": started + report.detail})

