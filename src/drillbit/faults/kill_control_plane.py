"""kill-control-plane (fail-stop): take away one process of the job's recovery machinery.

A job's control plane is what its recovery needs and no rank is: torchrun's c10d
rendezvous store lives inside the elastic agent on the rendezvous host, torchft has its
lighthouse, DLRover its master, an etcd rendezvous its etcd. Losing one costs nothing at the
next step and everything at the next membership check or restart (DESIGN.md; torchrun's
agents poll the store every monitor interval). The job profile names them
(``control_plane: {name: {cmdline | port | pidfile, node}}``); the fault finds the one the
drill names on its node, through a rank there, among the node's job (the launcher's tree,
never a scan of the node) or by its pid file, and sends it SIGKILL (gone, as a host that
died), SIGTERM, or SIGSTOP (hung, until the heal's SIGCONT).

What the drill judges is whether the job goes on: ``keep_stepping`` over ``observe.at_least``.
"""
from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field, field_validator

from drillbit.core.errors import ConfigError, FaultError
from drillbit.core.evidence import ControlPlaneDown
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, PlanStep, State
from drillbit.faults.ckptfile import wait_gone
from drillbit.faults.hang_collective import resume, wait_stopped
from drillbit.faults.kill_node import TORCHRUN, job_tree
from drillbit.core.proc import ProcRef, named_by
from drillbit.spec.config import ControlPlaneProcess
from drillbit.spec.models import launcher_regex


class ControlPlaneParams(Params):
    name: str | None = Field(None, description="which of the job profile's control_plane entries (default: its only "
                                               "one)")
    process: ControlPlaneProcess | None = Field(None, description="how it is found (filled from the job profile)")
    node: str | None = Field(None, description="the node it runs on (filled from the job profile: its node, else "
                                               "the first)")
    signal: Literal["SIGKILL", "SIGTERM", "SIGSTOP"] = "SIGKILL"
    launcher: str | None = Field(None, description="regex of the node's launcher, climbed from the rank when the "
                                                   "agent does not know the job's root (default: torchrun)")
    root: ProcRef | None = Field(None, description="the job's root on the node (filled by the agent); the search "
                                                   "never leaves its tree")
    confirm_timeout_s: float = Field(10.0, gt=0)

    _launcher = field_validator("launcher")(classmethod(lambda cls, v: launcher_regex(v)))


def where_node(params: ControlPlaneParams) -> str:
    if params.node is not None:
        return params.node
    index = params.process.node if params.process is not None else None
    return f"node {index} (counted from 0)" if isinstance(index, int) and index else "the first node"


class ControlPlaneState(State):
    name: str
    process: ProcRef
    cmdline: str
    signal: str
    sent: bool
    t_sent: float | None = None


def _pidfile(path: str) -> psutil.Process | None:
    """The process a pid file names: a number, or JSON {pid, start_time[, boot_start]} (the
    start must match, so a reused pid is never taken)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    pid, named = (info.get("pid"), info) if isinstance(info, dict) else (info, {})
    if pid is None:
        return None
    try:
        proc = psutil.Process(int(pid))
        if not named_by(proc, named):
            return None
        return proc
    except (psutil.Error, TypeError, ValueError):
        return None


def described(spec: ControlPlaneProcess | None) -> str:
    """How the profile names it, in words: "cmdline torchft_lighthouse, port 29500"."""
    if spec is None:
        return ""
    return ", ".join(f"{k} {v}" for k, v in (("cmdline", spec.cmdline), ("port", spec.port), ("pidfile", spec.pidfile))
                     if v is not None)


def listens_on(proc: psutil.Process, port: int) -> bool:
    """Whether the process holds a listening TCP socket on ``port`` (read from its own
    network namespace's tables)."""
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in proc.net_connections(kind="tcp"))
    except psutil.Error:
        return False


def find(target: ProcRef, params: ControlPlaneParams) -> psutil.Process:
    """The control-plane process on the target's node: all that the profile gives must match;
    exactly one process may. None or several is the profile's description not fitting the
    job (a config error, exit 2), found before anything is sent."""
    spec = params.process
    if spec is None:
        raise ConfigError("kill-control-plane: no control-plane process to look for (the job profile's control_plane "
                         "was not bound)")
    if isinstance(spec.port, str):
        raise ConfigError(f"kill-control-plane: port {spec.port!r} of control_plane.{params.name} was not filled (a "
                         "placeholder is known only for a job drillbit launched); give the port's number")
    if spec.pidfile is not None:
        named = _pidfile(spec.pidfile)
        candidates = [named] if named is not None else []
        where = f"the pid file {spec.pidfile}"
    else:
        root = params.root.process() if params.root is not None else None
        members = ([root, *root.children(recursive=True)] if root is not None else
                   [m.process() for m in job_tree(target, params.launcher or TORCHRUN)])
        candidates = [p for p in members if p is not None]
        where = f"the job's {len(candidates)} process(es) on node {target.node or '?'}"
    pattern = re.compile(spec.cmdline) if spec.cmdline else None
    found = []
    for proc in candidates:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if pattern is not None and not pattern.search(" ".join(proc.cmdline())):
                continue
        except psutil.Error:
            continue
        if spec.port is not None and not listens_on(proc, int(spec.port)):
            continue
        found.append(proc)
    what = described(spec)
    if not found:
        raise ConfigError(f"kill-control-plane: control_plane.{params.name} ({what}) matched no process among {where}")
    if len(found) > 1:
        listed = "; ".join(f"pid {p.pid}: {' '.join(p.cmdline())[:80]}" for p in found[:4])
        raise ConfigError(f"kill-control-plane: control_plane.{params.name} ({what}) matched {len(found)} processes "
                         f"({listed}); name it more narrowly")
    return found[0]


class KillControlPlane(Fault[ControlPlaneParams, ControlPlaneState]):
    name = "kill-control-plane"
    needs = ('to signal the control-plane process: its user, or root')
    blast_radius = ("one process of the job's control plane (rendezvous store, lighthouse, master, etcd)")
    fault_class = "fail-stop"
    Params = ControlPlaneParams
    State = ControlPlaneState
    evidence = (ControlPlaneDown,)
    binds = ("control_plane", "launcher")
    verb = "lost its control plane"
    expects = "crash"
    # the launchers notice at their next poll of the store or the master; a liveness
    # heartbeat to it sees it too
    detected_by = ("monitor_interval", "heartbeat")

    def hurts(self, params: ControlPlaneParams) -> Literal["rank", "node"]:
        return "node"

    def target_nodes(self, params: ControlPlaneParams) -> list[str] | None:
        return [params.node] if params.node is not None else None

    def plan(self, targets: list[ProcRef], params: ControlPlaneParams) -> Plan:
        how = described(params.process)
        nodes = sorted({t.node or "?" for t in targets})
        heal = ("SIGCONT it (same pid and start time) and verify it runs" if params.signal == "SIGSTOP" else
                "nothing to undo; the job must go on without it, or bring it back")
        return Plan(fault=self.name, targets=targets,
                    action=f"send {params.signal} to the job's control plane {params.name or '?'} ({how}) on node(s) "
                           f"{', '.join(nodes)}; no rank is touched", heal=heal)

    def plan_lines(self, params: ControlPlaneParams) -> list[str]:
        spec = params.process
        if spec is None:
            return []
        where = "named by its pid file" if spec.pidfile else "among that node's job"
        return [f"{params.signal} to control_plane.{params.name} ({described(spec)}) on "
                f"{where_node(params)}, {where}"]

    def describe(self, target: ProcRef, params: ControlPlaneParams) -> PlanStep:
        plan = self.plan([target], params)
        try:
            proc = find(target, params)
            pid, cmd = proc.pid, " ".join(proc.cmdline())[:200]
        except (ConfigError, psutil.Error) as exc:
            pid, cmd = target.pid, f"(not found: {exc})"
        return PlanStep(node=target.node, pid=pid, rank=None, cmdline=cmd, action=plan.action, heal=plan.heal)

    def prepare(self, target: ProcRef, params: ControlPlaneParams) -> ControlPlaneState:
        proc = find(target, params)
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.Error as exc:
            raise FaultError(f"kill-control-plane: control_plane.{params.name} (pid {proc.pid}) went away: {exc}") from exc
        return ControlPlaneState(name=params.name or "?", process=ProcRef.of(proc, node=target.node),
                                 cmdline=cmdline[:300], signal=params.signal, sent=False)

    def act(self, target: ProcRef, params: ControlPlaneParams, intent: ControlPlaneState) -> ControlPlaneState:
        sent = intent.process.send(signal.Signals[params.signal])
        return intent.model_copy(update={"sent": sent, "t_sent": time.time()})

    def confirm(self, target: ProcRef, params: ControlPlaneParams, state: ControlPlaneState) -> Evidence | None:
        if not state.sent:
            return None
        if params.signal == "SIGSTOP":
            status = wait_stopped(state.process, params.confirm_timeout_s)
            if status is None:
                return None
            what = "stopped"
        elif wait_gone(state.process, params.confirm_timeout_s):
            status, what = "gone", "gone"
        else:
            return None
        return Evidence(t=state.t_sent or time.time(), what=f"control plane {state.name} {what}",
                        data={"name": state.name, "pid": state.process.pid, "cmdline": state.cmdline[:200],
                              "signal": state.signal, "status": status})

    def heal(self, target: ProcRef, params: ControlPlaneParams, state: ControlPlaneState) -> HealReport:
        if state.signal == "SIGSTOP":
            return resume(state.process)
        if state.process.alive():
            return HealReport(healed=True, verified=True,
                              detail=f"{state.signal} did not end {state.name} (pid {state.process.pid}); nothing "
                                     "to undo")
        return HealReport(healed=True, verified=True, detail=f"nothing to undo ({state.name} was killed)")
