"""Engine ``slurm``: jobs submitted with ``sbatch`` (or attached to by job id), one agent per
node of the job's allocation through ``srun --overlap``, and a scheduler agent on the
controller's machine for the faults that go through the scheduler (node-down, node-crash).

No SSH and no Ray: the agents run inside the job (``python -m drillbit.agent serve
--slurm-job J`` in a step of its own beside the job's steps, JSON lines over srun's stdin
and stdout) and so end with the job's allocation. When Slurm requeues the job and runs it
again, the scheduler probe sees the new allocation and the agents are started again there
(``agent.ready`` with ``restarts``). A fault held by an agent whose allocation ended is
over: Slurm ended every process of the job on that node with it.

The scheduler agent is an agent in the controller's own process, armed like the others:
if the controller is killed, its guardian heals the node faults from its registry (the
node is resumed, a crashed slurmd started again).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from drillbit.agent.service import AgentService
from drillbit.core.atomic import write_private
from drillbit.core.errors import ConfigError, DrillError
from drillbit.faults import get as get_fault
from drillbit.faults.base import Handle, HealReport
from drillbit.core.history import History
from drillbit.core.proc import ProcRef
from drillbit.core.slurm.scheduler import JobInfo, Slurm
from drillbit.spec.config import ENV_NAME, JobProfile, RankDiscovery, SlurmCluster, SlurmJob
from drillbit.spec.placeholders import expand
from drillbit.transport.client import AgentClient
from drillbit.transport.inprocess import InProcessClient
from drillbit.transport.jsonlines import JsonLinesClient
from drillbit.transport.nodes import Nodes, with_python
from drillbit.transport.slurmprobe import SchedulerProbe
import contextlib

SCHEDULER = "slurmctld"  # the scheduler agent's name among the nodes
# Placeholders that name a node: in a batch script they are the node's own Slurm variables
_PER_NODE = {"node": "SLURMD_NODENAME", "node_rank": "SLURM_NODEID", "nnodes": "SLURM_JOB_NUM_NODES",
             "head": "SLURM_SUBMIT_HOST"}
# in the tasks srun starts on every node (a per-node launch), {head} is the address of the node
# srun ran on: the batch host, the allocation's first node, where a rendezvous host belongs
_PER_NODE_TASK = {**_PER_NODE, "head": "SLURM_LAUNCH_NODE_IPADDR"}


def is_scheduler_fault(fault: str) -> bool:
    return getattr(get_fault(fault), "acts_through", "node") == "scheduler"


class SrunAgentClient(JsonLinesClient):
    channel = "agent's srun step"

    def __init__(self, slurm: Slurm, job_id: str, node: str, python: str, state_dir: str | None,
                 err_path: Path) -> None:
        super().__init__(node)
        argv = slurm.srun_argv(job_id, node, [python, "-m", "drillbit.agent", "serve", "--node", node,
                                              *(["--state-dir", state_dir] if state_dir else []),
                                              "--slurm-job", job_id])
        self.err_path = err_path
        with open(err_path, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=slurm.env, text=True, bufsize=1, start_new_session=True)
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self._begin(self.proc.stdin, self.proc.stdout, greeting_timeout=60.0)
        except DrillError:
            self._end()
            raise

    def _stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-1000:].strip()
        except OSError:
            return ""

    def _end(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._post("exit", {})
        self._end()


def _render(arg: str, values: dict[str, str], variables: dict[str, str] = _PER_NODE) -> str:
    """One argument of the batch script, double-quoted: the user's text taken literally, the
    per-node placeholders as the node's Slurm variables (expanded where the line runs)."""
    marks = {name: f"\x00{name}\x00" for name in variables}
    text = expand(arg, {**values, **marks})
    for ch in ("\\", '"', "$", "`"):
        text = text.replace(ch, "\\" + ch)
    for name, var in variables.items():
        text = text.replace(marks[name], "${" + var + "}")
    return f'"{text}"'


def batch_script(profile: JobProfile, values: dict[str, str]) -> str:
    """The sbatch script for a profile's launch command: its environment, its folder, and the
    command (on every node through srun when the launch is per node)."""
    assert profile.launch is not None
    spec = profile.launch
    values = with_python(spec, values)
    lines = ["#!/bin/bash", "# written by drillbit: the job profile's launch command under sbatch"]
    nodes = profile.slurm.nodes if profile.slurm else 1
    # per node, the environment is set in each node's task too: {node_rank} there is that node's
    variables = _PER_NODE_TASK if spec.per_node and nodes > 1 else _PER_NODE
    exports = []
    for key, value in spec.env.items():
        if not ENV_NAME.fullmatch(key):  # refused at load; a profile built in code is held to it too
            raise ConfigError(f"launch.env: {key[:40]!r} is not an environment variable name")
        exports.append(f"export {key}={_render(value, values, variables)}")
    if spec.cwd:
        lines.append(f"cd {_render(spec.cwd, values)} || exit 2")
    line = " ".join(_render(a, values, variables) for a in spec.command)
    if spec.per_node and nodes > 1:
        task = "; ".join([*exports, f"exec {line}"])
        lines.append(f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c {shlex.quote(task)}")
    else:
        lines += [*exports, f"exec {line}"]
    return "\n".join(lines) + "\n"


class SlurmJobHandle:
    """The job as Slurm sees it: running (or pending again after a requeue) until Slurm
    says it finished."""

    def __init__(self, nodes: "SlurmNodes", job_id: str, stop_timeout: float, attached: bool = False) -> None:
        self.nodes = nodes
        self.job_id = job_id
        self.attached = attached  # a job the drill did not submit is never cancelled by it
        self.stop_timeout = stop_timeout
        self.pid = 0  # no process of the controller's: the job is Slurm's

    def exit_code(self) -> int | None:
        info = self.nodes.slurm.job(self.job_id)
        if info is None:
            return -1  # gone from slurmctld's memory
        return (info.exit_code or 0) if info.finished else None

    def stop(self) -> int | None:
        info = self.nodes.slurm.job(self.job_id)
        if info is None or info.finished or self.attached:
            return None if info is None or not info.finished else info.exit_code
        self.nodes.slurm.scancel(self.job_id)
        end = time.time() + self.stop_timeout + 30
        while time.time() < end:
            info = self.nodes.slurm.job(self.job_id)
            if info is None or info.finished:
                return None if info is None else info.exit_code
            time.sleep(0.2)
        self.nodes.slurm.scancel(self.job_id, signal="KILL", full=True)
        raise DrillError(f"Slurm job {self.job_id} still {info.state if info else '?'} "
                         f"{self.stop_timeout + 30:g} s after scancel (sent SIGKILL)")


class SlurmNodes(Nodes):
    engine = "slurm"

    def __init__(self, run_dir: Path, cluster_name: str, cluster: SlurmCluster) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=cluster.deadman, job_grace_s=cluster.job_grace)
        self.cluster = cluster
        self.slurm = Slurm(cluster.slurm_conf, cluster.partition, cluster.slurm_via)
        self.python = cluster.python or sys.executable
        self.job_id: str | None = None
        self.info: JobInfo | None = None
        self.allocation: tuple[str, ...] = ()
        self.restarts_seen = -1
        self.history: History | None = None
        self.max_duration_s = 3600.0  # the drill's abort limit (set by check())
        self._agents_lock = threading.Lock()
        self.values["python"] = self.python

    # --- life cycle ----------------------------------------------------------------------
    def connect(self) -> dict[str, Any]:
        why = self.slurm.reachable()
        if why is not None:
            conf = f"SLURM_CONF={self.slurm.conf}" if self.slurm.conf else "its default configuration"
            raise DrillError(f"Slurm does not answer ({conf}): {why}")
        return {SCHEDULER: InProcessClient(AgentService(SCHEDULER, self.run_dir, scheduler=True))}

    def node_agents(self) -> dict[str, Any]:
        return {n: c for n, c in self.clients.items() if n != SCHEDULER}

    def head_host(self) -> str:
        return self.info.batch_host if self.info and self.info.batch_host else "127.0.0.1"

    def python_for(self, node: str) -> str:
        return self.python

    # --- the job -------------------------------------------------------------------------
    def launch(self, profile: JobProfile) -> SlurmJobHandle:  # type: ignore[override]
        sj = profile.slurm or SlurmJob()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if sj.job_id is not None:
            self.job_id = sj.job_id
        else:
            assert profile.launch is not None
            values = {**self.values, "port": str(self.clients[SCHEDULER].free_port())}
            script = self.run_dir / "sbatch.sh"
            write_private(script, batch_script(profile, values))  # launch.env may hold secrets
            output = self.launch_outputs(profile)[SCHEDULER]
            args = ["-N", str(sj.nodes), "-o", output, "--open-mode=append", "-J", f"drill-{self.run_dir.name}",
                    "--requeue" if sj.requeue else "--no-requeue", *self._time_limit(sj), *sj.args, str(script)]
            self.job_id = self.slurm.sbatch(args)
            self.note("slurm.submit", {"job_id": self.job_id, "sbatch": args, "t": time.time()})
        info = self._wait_running(120.0)
        self._start_agents(info)
        return SlurmJobHandle(self, self.job_id, profile.launch.stop_timeout if profile.launch else 20.0,
                              attached=sj.job_id is not None)

    def launch_outputs(self, profile: JobProfile) -> dict[str, str]:
        """The batch job's output (``slurm.output``, sbatch -o: every node's srun task writes there
        too), read by the controller; none for a job attached to by id."""
        sj = profile.slurm or SlurmJob()
        if profile.launch is None or sj.job_id is not None:
            return {}
        return {SCHEDULER: os.path.abspath(expand(sj.output, self.values))}

    def log_nodes(self) -> list[str]:
        """The job's allocation, in Slurm's order ({node_rank}: SLURM_NODEID)."""
        return list(self.allocation) or list(self.node_agents()) or [SCHEDULER]

    def _time_limit(self, sj: SlurmJob) -> list[str]:
        """Unless the profile sets one, a time limit past the drill's own (its abort limit and
        the job's stop time): a controller killed outright leaves a job Slurm still ends."""
        if any(a == "-t" or a.startswith(("--time", "-t")) for a in sj.args):
            return []
        minutes = int((self.max_duration_s + 300) // 60) + 1
        return [f"--time={minutes}"]

    def _wait_running(self, timeout: float) -> JobInfo:
        assert self.job_id is not None
        end = time.time() + timeout
        info = None
        while time.time() < end:
            info = self.slurm.job(self.job_id)
            if info is None:
                raise DrillError(f"Slurm job {self.job_id} is unknown to slurmctld")
            if info.state == "RUNNING" and info.nodes:
                return info
            if info.finished:
                raise DrillError(f"Slurm job {self.job_id} ended ({info.state}, exit {info.exit_code}) before it ran")
            if "held" in info.reason.lower() or info.reason.startswith("launch_failed"):
                raise DrillError(f"Slurm job {self.job_id} is {info.state} ({info.reason}): Slurm could not start it; "
                                 "see the node's slurmd log")
            time.sleep(0.2)
        raise DrillError(f"Slurm job {self.job_id} not running after {timeout:g} s "
                         f"(state {info.state if info else '?'}, reason {info.reason if info else '?'})")

    def _start_agents(self, info: JobInfo) -> None:
        """Agents on every node of the job's current allocation (those of an earlier one are
        gone with it)."""
        assert self.job_id is not None
        with self._agents_lock:
            for node, client in list(self.node_agents().items()):
                client.close()
                del self.clients[node]
            started: dict[str, Any] = {}
            try:
                for node in info.nodes:
                    err = self.run_dir / f"agent-{node}-{self.job_id}.{info.restarts}.err"
                    client = SrunAgentClient(self.slurm, self.job_id, node, self.python, self.cluster.state_dir, err)
                    started[node] = client
                    self._ready(client, restarts=info.restarts, job_id=self.job_id)
            except Exception:
                for client in started.values():
                    client.close()
                raise
            self.clients.update(started)
            self.allocation = info.nodes
            self.restarts_seen = info.restarts
            self.info = info

    def on_job(self, info: JobInfo) -> None:
        """The scheduler probe's news: a new allocation after a requeue gets its agents."""
        self.info = info
        if info.state == "RUNNING" and info.nodes and info.restarts != self.restarts_seen:
            try:
                self._start_agents(info)
            except Exception as exc:
                self.note("agent.failed", {"detail": f"agents on the new allocation: {exc}", "t": time.time()})

    def probes(self, history: History) -> list[Any]:
        self.attach(history)
        assert self.job_id is not None
        return [SchedulerProbe(history, poll=lambda: self.slurm.job(self.job_id or ""), changed=self.on_job)]

    def find_ranks(self, discovery: RankDiscovery, attach: ProcRef | None = None) -> list[ProcRef]:
        found = []
        for node, client in self.node_agents().items():
            try:
                found += client.find_ranks(discovery, None)
            except DrillError as exc:
                raise DrillError(f"{node}: {exc}") from None
        return sorted(found, key=lambda r: r.rank if r.rank is not None else -1)

    # --- faults: node faults through the scheduler agent ---------------------------------
    def _fault_params(self, fault: str, params: dict) -> dict:
        if not is_scheduler_fault(fault):
            return params
        return {**params, "slurm_conf": params.get("slurm_conf") or self.slurm.conf, "job_id": self.job_id,
                "slurm_via": params.get("slurm_via") or self.slurm.via}

    def _agent_for(self, fault: str, target: ProcRef) -> AgentClient:
        if is_scheduler_fault(fault):
            return self.clients[SCHEDULER]
        return super()._agent_for(fault, target)

    def route(self, fault: str, target: ProcRef) -> str:
        return SCHEDULER if is_scheduler_fault(fault) else super().route(fault, target)

    def heal(self, handle: Handle) -> HealReport:
        return self.heal_group([handle])[0]

    def heal_group(self, handles: list[Handle]) -> list[HealReport]:
        """A node agent that ended with the allocation (srun's step gone) took its faults with it."""
        if not handles:
            return []
        client = self._agent_for(handles[0].fault, handles[0].target)
        if isinstance(client, SrunAgentClient) and client.closed.is_set():
            return [self._ended_with_allocation(h) for h in handles]
        try:
            return client.heal_all(handles) if len(handles) > 1 else [client.heal(handles[0])]
        except DrillError:
            if isinstance(client, SrunAgentClient) and client.closed.is_set():
                return [self._ended_with_allocation(h) for h in handles]
            raise

    def _client(self, ref: ProcRef):
        client = self.clients.get(ref.node or "")
        if client is None:
            raise DrillError(f"no agent on node {ref.node!r} (the job's allocation is {', '.join(self.allocation)})")
        return client

    def _ended_with_allocation(self, handle: Handle) -> HealReport:
        """The agent's srun step is gone: healed only if Slurm says the job no longer runs on
        that node (its processes ended with the allocation). A step that died while the job
        still runs there left the fault in place, and that is said."""
        node = handle.target.node or "?"
        try:
            info = self.slurm.job(self.job_id or "")
        except DrillError as exc:
            return HealReport(healed=False, verified=False, t=time.time(),
                              detail=f"the agent on {node} is gone and Slurm could not be asked about job "
                                     f"{self.job_id} ({exc}); check the node by hand")
        if info is not None and info.state in ("RUNNING", "SUSPENDED", "COMPLETING") and node in info.nodes:
            return HealReport(healed=False, verified=False, t=time.time(),
                              detail=f"the agent on {node} is gone but job {self.job_id} still runs there "
                                     f"({info.state}): {handle.fault} may still be in place; run `python -m "
                                     f"drillbit.agent heal` on {node}")
        state = "gone from Slurm" if info is None else f"{info.state} on {', '.join(info.nodes) or 'no nodes'}"
        return HealReport(healed=True, verified=True, t=time.time(),
                          detail=f"the agent on {node} ended with the job's allocation there; Slurm says job "
                                 f"{self.job_id} is {state}, so its processes on {node} ended with it")

    def active_by_node(self) -> dict[str, list[Handle] | Exception]:
        out: dict[str, list[Handle] | Exception] = {}
        for node, client in self.clients.items():
            if isinstance(client, SrunAgentClient) and client.closed.is_set():
                continue  # its allocation ended, and the faults it held with it
            try:
                out[node] = client.active()
            except Exception as exc:
                if isinstance(client, SrunAgentClient) and client.closed.is_set():
                    continue
                out[node] = exc
        return out

    def close(self) -> None:
        for node, client in list(self.node_agents().items()):
            if isinstance(client, SrunAgentClient) and client.closed.is_set():
                client.close()
                del self.clients[node]
        super().close()

    # --- preflight -------------------------------------------------------------------------
    def launches(self, profile: JobProfile) -> str | None:
        if profile.launch is None and profile.slurm is not None and profile.slurm.job_id is not None:
            return f"attaching to Slurm job {profile.slurm.job_id}"
        return super().launches(profile)

    def check_engine(self, profile: JobProfile, fault: str, max_duration_s: float) -> None:
        self.max_duration_s = max_duration_s
        if profile.launch is None and (profile.slurm is None or profile.slurm.job_id is None):
            raise ConfigError("on engine slurm a job profile needs launch (submitted with sbatch) or slurm.job_id")
        self.check_rights(fault)

    def check_rights(self, fault: str) -> None:
        """Node faults need ``scontrol update``: root or SlurmUser (a Slurm administrator of
        another name runs the drill as one of those)."""
        if not is_scheduler_fault(fault) or os.geteuid() == 0:
            return
        import pwd

        me = pwd.getpwuid(os.geteuid()).pw_name
        slurm_user = self.slurm.config().get("SlurmUser", "").split("(")[0]
        if me != slurm_user:
            raise ConfigError(f"{fault} changes node states with scontrol update, which Slurm allows root, "
                              f"SlurmUser ({slurm_user}) and its administrators; this drill runs as {me}. "
                              "Nothing was submitted")
