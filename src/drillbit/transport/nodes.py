"""Nodes: the controller's side of a drill's agents, one AgentClient per node.

This is what the drill loop talks to (the "executor"): it connects the agents through a
transport (in-process, Ray, SSH — see :mod:`drillbit.transport`), shakes hands with each
(version and fault registry), measures its clock offset and arms its dead-man's switch,
heartbeats them, launches the job on every node, finds ranks on all of them, routes each
fault to the node of its target, and on close heals whatever is still active before it
releases anything. Transports subclass it only to connect and to hold the lease.
"""
from __future__ import annotations

import fnmatch
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import psutil

from drillbit.agent.api import Record
from drillbit.agent.deadman import heal_with_deadline
from drillbit.core.errors import ConfigError, DrillError
from drillbit.faults import get as get_fault
from drillbit.faults.base import Evidence, Handle, HealReport, PlanStep
from drillbit.core.lease import Lease
from drillbit.core.proc import ProcRef
from drillbit.core.pystacks import RankStack
from drillbit.spec.config import JobProfile, RankDiscovery, heartbeat_period
from drillbit.spec.placeholders import expand
from drillbit.transport.client import AgentClient
import contextlib

# a placeholder only some engine fills: (what the job runs on, a cluster that has it)
PLACEHOLDER_ENGINES = {"ray_address": ("Ray", "local"),
                       "service_host": ("a namespace cluster's service address", "local-netns")}


def refuse_shared_network(fault: str, node_netns: bool | None, cluster_name: str) -> None:
    """A fault that cuts a node's network, on a cluster whose nodes share this machine's: a
    config error (the cut would cut the drill itself)."""
    if get_fault(fault).needs_node_netns and node_netns is False:
        raise ConfigError(f"{fault} cuts a node's network, and every node of cluster {cluster_name!r} shares this "
                          "machine's or its agent's network: a cut would cut the drill itself; use --cluster "
                          "local-netns (nodes that are network namespaces, their agents in drillbit's process; root)")


FAN_OUT = 32  # agent calls in flight at once: a fleet's nodes are asked in parallel, never all at once


def fan_out(items: list[str], fn: Callable[[str], Any], limit: int | None = None,
            stop: threading.Event | None = None) -> tuple[dict[str, Any], dict[str, Exception]]:
    """``fn(item)`` on every item, at most ``limit`` at a time (one item: on this thread): the
    results, and what each failed item raised, both in the items' order. A controller that
    asked a thousand agents one after the other waited a thousand round trips; one thread per
    agent is a thousand threads. A BaseException here (the operator's Ctrl-C, raised in this
    thread) sets ``stop``, makes no call not yet begun, and waits for the calls in flight
    before it goes on: a fault one of them injects after it was raised would be missing from
    the caller's handles, and could land after the heal's census."""
    results: dict[str, Any] = {}
    failed: dict[str, Exception] = {}
    stopping = stop if stop is not None else threading.Event()
    idle = threading.Condition()
    busy = 0  # calls begun and not ended (counted here: a pool's own threads may be unknown to it
    # when the stop lands in its submit, so its shutdown(wait=True) does not wait for them)

    def one(item: str) -> None:
        nonlocal busy
        with idle:
            if stopping.is_set():
                return
            busy += 1
        try:
            results[item] = fn(item)
        except Exception as exc:  # noqa: BLE001 — each item's failure is that item's
            failed[item] = exc
        finally:
            with idle:
                busy -= 1
                idle.notify_all()

    if len(items) <= 1:
        for item in items:
            one(item)
    else:
        pool = ThreadPoolExecutor(max_workers=min(limit or FAN_OUT, len(items)), thread_name_prefix="fan-out")
        try:
            for future in [pool.submit(one, item) for item in items]:
                future.result()
        except BaseException:  # the operator's stop: the calls not yet made are not made
            with idle:
                stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            with idle:  # the ones in flight end (a second Ctrl-C leaves them)
                while busy:
                    idle.wait()
            raise
        pool.shutdown()
    return ({i: results[i] for i in items if i in results}, {i: failed[i] for i in items if i in failed})


def fan_out_or_raise(items: list[str], fn: Callable[[str], Any]) -> dict[str, Any]:
    """:func:`fan_out`, then the first failure in the items' order raised as it was (its type
    kept: a version mismatch is still exit 2) once every item is done; else the results."""
    results, failed = fan_out(items, fn)
    if failed:
        raise next(iter(failed.values()))
    return results


def each_node(nodes: list[str], fn: Callable[[str], Any]) -> tuple[dict[str, Any], list[str]]:
    """``fn(node)`` on every node, in parallel (:func:`fan_out`): the results by node, and the
    errors."""
    results, failed = fan_out(nodes, fn)
    return results, [f"{node}: {exc}" for node, exc in failed.items()]


def per_node(items: list[Any], node_of: Callable[[Any], str | None], fn: Callable[[Any], Any]) -> list[Any]:
    """``fn(item)`` for every item, the nodes in parallel (:func:`fan_out`) and each node's
    items one after the other, in their order (one agent's registry is written by one call at
    a time); the results in the items' order. The first failure, in the items' order, is
    raised once every node is done."""
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(str(node_of(item)), []).append(i)
    out: list[Any] = [None] * len(items)
    errors: dict[int, Exception] = {}
    stopped = threading.Event()  # the operator's stop: a node's next item is not begun

    def run(node: str) -> None:
        for i in groups[node]:
            if stopped.is_set():
                return
            try:
                out[i] = fn(items[i])
            except Exception as exc:  # noqa: BLE001 — raised below, in the items' order
                errors[i] = exc
                return  # the rest of this node's items wait for the next call, as they would have

    fan_out(list(groups), run, stop=stopped)
    if errors:
        raise errors[min(errors)]
    return out


def with_python(spec: Any, values: dict[str, str]) -> dict[str, str]:
    """A node's placeholder values with {python} the launch's own interpreter, where it names one."""
    return {**values, "python": expand(spec.python, values)} if spec.python else values


class NodeJobs:
    """The job as one launcher per node; it has exited once every launcher has."""

    job_id: str | None = None  # a scheduler's id for the job (a Slurm job's handle has one); the agents' has none

    def __init__(self, clients: dict[str, AgentClient], refs: dict[str, ProcRef], stop_timeout: float) -> None:
        self.clients = clients
        self.refs = refs
        self.stop_timeout = stop_timeout
        self._codes: dict[str, int | None] = {}
        self._asked = float("-inf")  # when the running launchers were last asked
        self.contained: dict[str, str] = {}  # by node: what holds every process of the job (its cgroup, or why none)

    @property
    def pid(self) -> int:
        return next(iter(self.refs.values())).pid

    def exit_code(self) -> int | None:
        """The job's exit code once every launcher has exited. The loop asks on every tick; the
        nodes still running are asked in parallel, at most once per millisecond per node
        asked (a thousand nodes: once a second), so a fleet's launchers cost the loop no more
        than a few calls at a time."""
        running = [n for n in self.refs if self._codes.get(n) is None]
        now = time.monotonic()
        if running and now >= self._asked + 0.001 * len(running):
            self._asked = now
            answered, failed = fan_out(running, lambda n: self.clients[n].job_status())
            self._codes.update(answered)  # what was answered is kept, whichever node failed
            if failed:
                raise next(iter(failed.values()))
        codes = [self._codes.get(n) for n in self.refs]
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c != 0), 0)

    def stop(self) -> int | None:
        """Stop the launcher on every node (all of them, even when one fails)."""
        codes, errors = each_node(list(self.refs), lambda n: self.clients[n].stop_job(self.stop_timeout))
        if errors:
            raise DrillError("could not stop the job on " + "; ".join(errors))
        return next((c for c in codes.values() if c not in (0, None)), 0 if codes else None)


class Nodes:
    """Drives one agent per node. Transports implement ``connect`` (and ``acquire``); where
    an engine differs from the others it says so through the hooks here (``engine``,
    ``local``, ``provides``, ``launches``, ``check_engine``, ``probes``), never through a branch in the
    loop."""

    engine = "process"
    local = False  # the job's processes are on this machine: a pid alone names one
    provides: frozenset[str] = frozenset()  # placeholders only this engine fills ({ray_address})
    # whether each node has a network namespace of its own, apart from its agent's: True (a
    # namespace cluster), False (every node is this machine's network), None (real hosts: the
    # agent finds out at inject, and refuses a rank in its own namespace); set by
    # transport.connect from the cluster's config (transport.node_netns), the one place it is known
    node_netns: bool | None = None
    heartbeat_s: float | None = None  # the beat's period; None: heartbeat_period(deadman_s)
    heal_timeout = 60.0  # per fault, when close() finds one still active

    def __init__(self, run_dir: Path, cluster_name: str, *, deadman_s: float = 5.0, job_grace_s: float = 30.0) -> None:
        self.run_dir = run_dir
        self.cluster_name = cluster_name
        self.deadman_s = deadman_s
        self.job_grace_s = job_grace_s
        self.clients: dict[str, AgentClient] = {}
        self.values: dict[str, str] = {"run_dir": str(run_dir), "python": sys.executable}
        # each node's placeholder values as the job was launched with them ({port}: the
        # rendezvous port chosen then), for what is bound to the profile after launch
        self.launched_values: dict[str, dict[str, str]] = {}
        self._beating = threading.Event()
        self._beat_woken = threading.Event()  # set by close(): the beater's wait ends at once
        self._beater: threading.Thread | None = None
        self.notes: list[tuple[str, dict]] = []  # (kind, data) not yet in the history
        self.records: list[Record] = []  # what the agents' dead-man's switches did, collected on close
        self.history: Any = None  # where notes and records go, once the loop attached it
        self._notes_lock = threading.Lock()
        self.allowed_hosts: list[str] | None = None  # host patterns drills may touch (the cluster's config)
        self.problem: str | None = None  # set when the drill must stop (the lease was lost)
        self.hosts: dict[str, str] = {}  # node -> the host its agent reported

    # --- the history: one path for what the engine learns ----------------------------------
    def attach(self, history: Any) -> None:
        """The drill's history: what the engine learns (agents ready, clock offsets, a
        submission, heals left to a switch) and what the agents' switches did are recorded
        there as they come, from any thread. Without one (drill heal, a dry run) they wait."""
        self.history = history
        self.flush()

    def note(self, kind: str, data: dict) -> None:
        self.notes.append((kind, data))
        self.flush()

    def flush(self) -> None:
        with self._notes_lock:
            if self.history is None:
                return
            notes, self.notes = self.notes, []
            records, self.records = self.records, []
        for kind, data in notes:
            data = dict(data)
            node = data.pop("node", None)
            self.history.record("harness", kind, node=node, **data)
        for rec in records:
            self.history.record(f"agent:{rec.node}", rec.kind, t=rec.t, node=rec.node, rank=rec.rank, **rec.data)

    # --- life cycle ----------------------------------------------------------------------
    def connect(self) -> dict[str, AgentClient]:
        raise NotImplementedError

    def acquire(self, holder: str) -> Any:
        """The cluster lease; by default a file lock on this host."""
        lease = Lease(self.cluster_name, holder)
        lease.acquire()
        return lease

    def start(self, controller: ProcRef) -> None:
        self.clients = self.clients or self.connect()
        # the beat starts before the handshake: an agent armed early hears it while the rest of
        # the fleet still answers (32 raylets on 2 cores took 136 s to hand-shake, and the switch
        # of an agent armed in the first minute tripped 10 s later, its actor gone)
        self._beating.set()
        self._beater = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._beater.start()
        fan_out_or_raise(list(self.clients), lambda n: self._ready(self.clients[n]))

    def _ready(self, client: AgentClient, **about: Any) -> None:
        """One agent's handshake: version, allowed host, clock offset; then arm its switch."""
        info = client.handshake()
        if self.allowed_hosts is not None and not any(
                fnmatch.fnmatch(name, pattern) for pattern in self.allowed_hosts for name in (info.host, client.node)):
            raise ConfigError(f"node {client.node} is on host {info.host!r}, which is not in the cluster's "
                              f"allowed_hosts {self.allowed_hosts}; nothing was started")
        self.hosts[client.node] = info.host
        self.note("agent.ready", {"node": client.node, "pid": info.pid, "host": info.host,
                                  "version": info.version, **about})
        offset, rtt = client.measure_offset()
        self.note("agent.clock", {"node": client.node, "offset_s": round(offset, 6),
                                  "rtt_s": round(rtt, 6)})
        client.arm(self.deadman_s, self.job_grace_s)

    def check(self, profile: JobProfile, fault: str, max_duration_s: float, job_name: str = "the job") -> None:
        """Preflight on this engine (the drill's job, fault and abort limit), before anything
        starts: what every engine refuses, then the engine's own (``check_engine``)."""
        if self.launches(profile) is None and profile.attach_pid is None:
            raise ConfigError(f"job profile {job_name!r} has neither launch nor attach_pid (nor slurm.job_id)")
        refuse_shared_network(fault, self.node_netns, self.cluster_name)
        needs = get_fault(fault).needs_engine
        if needs is not None and needs != self.engine:
            raise ConfigError(f"{fault} works on clusters of engine {needs}; cluster {self.cluster_name!r} is "
                              f"engine {self.engine}")
        if profile.launch is not None:
            wanted = {name for name in PLACEHOLDER_ENGINES if any(f"{{{name}}}" in a for a in profile.launch.command)}
            for name in sorted(wanted - self.provides):
                raise ConfigError(f"job profile {job_name!r} runs on {PLACEHOLDER_ENGINES[name][0]}; cluster "
                                  f"{self.cluster_name!r} is engine {self.engine} "
                                  f"(try --cluster {PLACEHOLDER_ENGINES[name][1]})")
        self.check_engine(profile, fault, max_duration_s)

    def check_engine(self, profile: JobProfile, fault: str, max_duration_s: float) -> None:
        """What this engine alone refuses (Slurm: a profile it can neither submit nor attach)."""

    def launches(self, profile: JobProfile) -> str | None:
        """How this engine starts the profile's job, in words for the launch phase; None: it
        does not (the job is attached to by pid)."""
        return " ".join(profile.launch.command) if profile.launch is not None else None

    def attach_root(self, pid: int, start_time: float | None) -> ProcRef:
        """An attached job's root, named by pid *and* start time. Where the job runs on this
        machine the start time can be read here; elsewhere a pid alone could name a process on
        any node."""
        if start_time is not None:
            return ProcRef(pid=pid, start_time=start_time)
        if not self.local:
            raise ConfigError(f"attach_pid {pid} needs attach_start_time on a cluster of several machines (the "
                              "process's create time, e.g. python -c 'import psutil; print(psutil.Process(PID)"
                              ".create_time())' on its node)")
        try:
            return ProcRef.of(psutil.Process(pid))
        except psutil.NoSuchProcess:
            raise ConfigError(f"attach_pid {pid}: no such process on this machine") from None

    def probes(self, history: Any) -> list[Any]:
        """Probes this engine adds to the job's own (a scheduler's view of the job)."""
        return []

    def _beat(self) -> None:
        """Every agent once a period (a quarter of the dead-man's deadline, 1 to 5 s), in
        parallel: asked one after the other, a thousand agents over a wire took longer than the
        switch's deadline. A beat that takes longer than the period starts the next at once."""
        period = self.beat_period()
        while self._beating.is_set():
            began = time.monotonic()
            fan_out(list(self.clients), self._beat_one)
            self.on_beat()
            self._beat_woken.wait(max(0.0, period - (time.monotonic() - began)))  # close() wakes it

    def beat_period(self) -> float:
        """Seconds between two beats: ``heartbeat_s`` where a transport sets it, else a
        quarter of the dead-man's deadline (:func:`heartbeat_period`)."""
        return self.heartbeat_s or heartbeat_period(self.deadman_s)

    def _beat_one(self, node: str) -> None:
        client = self.clients.get(node)
        if client is not None:
            client.beat()  # one that fails is a missed beat: what the dead-man's switch is for

    def on_beat(self) -> None:
        """Whatever else is kept alive by the heartbeat (a Ray cluster's lease)."""

    def close(self) -> None:
        """Heal what is still active, collect the dead-man records, then release each agent.
        A node whose faults could not be healed is not disarmed: its switch heals them."""
        fan_out(list(self.clients), lambda n: self._close_one(self.clients[n]))
        self.flush()
        self._beating.clear()
        self._beat_woken.set()
        if self._beater is not None:
            self._beater.join(timeout=10)
        for client in self.clients.values():
            client.close()

    def _close_one(self, client: AgentClient) -> None:
        try:
            left = client.active()
            failed = [h for h in left if not heal_with_deadline(client.heal, h, self.heal_timeout).healed]
            records = client.records()
            with self._notes_lock:
                self.records += records
            if failed:
                self.note("heal.failed", {"node": client.node, "detail": "still active at close; "
                                          "left to the agent's dead-man's switch",
                                          "faults": [h.fault for h in failed]})
                return
        except Exception as exc:
            self.note("heal.failed", {"node": client.node, "detail": f"agent unreachable at close: {exc}"})
            return
        with contextlib.suppress(Exception):
            client.disarm()

    # --- the job -------------------------------------------------------------------------
    def node_values(self) -> dict[str, dict[str, str]]:
        """Placeholders per node: {node}, {node_rank}, {nnodes}, {head}, {port}."""
        nodes = list(self.clients)
        port = str(self.clients[nodes[0]].free_port())
        return {n: {**self.values, "python": self.python_for(n), "node": n, "node_rank": str(i),
                    "nnodes": str(len(nodes)), "head": self.head_host(), "port": port}
                for i, n in enumerate(nodes)}

    def node_launch_values(self) -> dict[str, dict[str, str]]:
        """Each node's placeholder values as the job was launched (an attached job: the
        cluster's own, node by node, in the nodes' order)."""
        return self.launched_values or {n: dict(self.values) for n in self.clients}

    def python_for(self, node: str) -> str:
        """The interpreter for {python} on that node."""
        return sys.executable

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        """The launch command as it runs on that node (a namespace cluster: inside the node's
        network namespace)."""
        return argv

    def node_env(self, node: str) -> dict[str, str]:
        """Environment this engine gives the job on that node, under the profile's own."""
        return {}

    def head_host(self) -> str:
        """The address other nodes reach the first node at (the rendezvous host)."""
        return "127.0.0.1"

    def launch(self, profile: JobProfile) -> NodeJobs:
        assert profile.launch is not None
        spec = profile.launch
        self.run_dir.mkdir(parents=True, exist_ok=True)
        per_node = self.launched_values = self.node_values()
        outputs = self.launch_outputs(profile)

        def launch_on(node: str) -> Any:
            values = with_python(spec, per_node[node])
            argv = self.wrap(node, [expand(a, values) for a in spec.command])
            return self.clients[node].launch(
                argv, {**self.node_env(node), **self._env(profile, values)},
                expand(spec.cwd, values) if spec.cwd else None, outputs[node], spec.stop_timeout)

        # one launcher a node, the nodes in parallel (a thousand launches in a row were a thousand round
        # trips); where one node's fails, the launchers the others started are stopped before it is raised
        launched, failed = fan_out(list(outputs), launch_on)
        jobs = NodeJobs({n: self.clients[n] for n in launched}, {n: launched[n].proc for n in launched},
                        spec.stop_timeout)
        if failed:
            if launched:
                with contextlib.suppress(Exception):
                    jobs.stop()
            raise next(iter(failed.values()))
        jobs.contained = {n: launched[n].contained for n in launched if launched[n].contained is not None}
        return jobs

    def launch_outputs(self, profile: JobProfile) -> dict[str, str]:
        """The file each launcher's output goes to, by the node it runs on: the run folder's
        ``job.out`` for one launcher, ``job-<node>.out`` for one per node (``per_node``, on more
        than one node); none for a job attached to. Read without being named in ``logs``."""
        if profile.launch is None:
            return {}
        nodes = list(self.clients) if profile.launch.per_node else list(self.clients)[:1]
        return {n: str(self.run_dir / (f"job-{n}.out" if len(nodes) > 1 else "job.out")) for n in nodes}

    @staticmethod
    def _env(profile: JobProfile, values: dict[str, str]) -> dict[str, str]:
        """The launch's environment; with a replacement hook, its stand-in's folder first on
        PATH (the agent fills $PATH with the node's own)."""
        assert profile.launch is not None
        env = {k: expand(v, values) for k, v in profile.launch.env.items()}
        if profile.replacement is not None:
            env["PATH"] = expand(profile.replacement.shim_dir, values) + ":" + env.get("PATH", "$PATH")
        return env

    def expand(self, text: str) -> str:
        return expand(text, self.values)

    def log_nodes(self) -> list[str]:
        """The nodes whose values fill the placeholders of the paths the drill follows, in
        their order ({node_rank})."""
        return list(self.clients)

    def log_values(self) -> dict[str, dict[str, str]]:
        """Each node's placeholder values for the logs: as the job was launched with them, else
        (a job attached to, or not launched yet) the cluster's own, node by node."""
        if self.launched_values:
            return self.launched_values
        nodes = self.log_nodes()
        return {n: {**self.values, "node": n, "node_rank": str(i), "nnodes": str(len(nodes)),
                    "head": self.head_host()} for i, n in enumerate(nodes)}

    def logs_of_nodes(self, profile: JobProfile) -> dict[str, list[str]]:
        """What the drill follows on each node: the profile's ``logs`` filled in with the node's
        values ({node}, {node_rank}; a glob stays a glob, matched where it is read), then the
        launcher's output on that node (``launch_outputs``) unless ``launcher_log`` is off."""
        outputs = self.launch_outputs(profile) if profile.launcher_log else {}
        out: dict[str, list[str]] = {}
        for node, values in self.log_values().items():
            out[node] = [expand(p, values) for p in profile.logs]
            if node in outputs:
                out[node].append(outputs[node])
        for node, path in outputs.items():
            if node not in out:  # a launcher that is no node's: Slurm's batch output, read by the controller
                out[node] = [path]
        return out

    def log_paths(self, profile: JobProfile) -> list[Path]:
        """The logs as the controller follows them (a cluster whose files this machine sees):
        every node's, each file once."""
        paths = [p for paths in self.logs_of_nodes(profile).values() for p in paths]
        return [Path(p) for p in dict.fromkeys(os.path.normpath(p) for p in paths)]

    def logs_by_node(self, profile: JobProfile) -> dict[str, list[str]]:
        """The log files each agent follows: the profile's paths filled in for its node, each
        (host, path) given to one agent only (simulated nodes share a host)."""
        taken: set[tuple[str, str]] = set()
        out: dict[str, list[str]] = {}
        for node, paths in self.logs_of_nodes(profile).items():
            host = self.hosts.get(node, node)
            for path in paths:
                key = (host, os.path.normpath(path))
                if key not in taken:
                    taken.add(key)
                    out.setdefault(node, []).append(path)
        return out

    # --- faults --------------------------------------------------------------------------
    def _on_all(self, fn: Callable[[AgentClient], Any]) -> dict[str, Any]:
        results, errors = each_node(list(self.clients), lambda n: fn(self.clients[n]))
        if errors:
            raise DrillError("; ".join(errors))
        return results

    def find_ranks(self, discovery: RankDiscovery, attach: ProcRef | None = None) -> list[ProcRef]:
        found = [r for refs in self._on_all(lambda c: c.find_ranks(discovery, attach)).values() for r in refs]
        return sorted(found, key=lambda r: r.rank if r.rank is not None else -1)

    def stacks(self, ranks: list[ProcRef]) -> list[RankStack]:
        """Each live rank's Python stacks, dumped by the agent on its node (py-spy); a node
        whose agent cannot answer gives its ranks' dumps as failed, with why."""
        by_node: dict[str, list[ProcRef]] = {}
        for r in ranks:
            by_node.setdefault(r.node or "", []).append(r)
        # the nodes in parallel: a job stuck on a thousand nodes was a thousand py-spy runs in a row
        dumped, failed = fan_out(list(by_node), lambda node: self.clients[node].stacks(by_node[node]))
        out: list[RankStack] = [s for stacks in dumped.values() for s in stacks]
        for node, exc in failed.items():  # one node's failure is that node's dumps' reason
            out += [RankStack(node=node, pid=r.pid, rank=r.rank, ok=False, error=f"agent on {node}: {exc}")
                    for r in by_node[node]]
        return sorted(out, key=lambda s: (s.rank is None, s.rank or 0, s.pid))

    def _client(self, ref: ProcRef) -> AgentClient:
        if ref.node not in self.clients:
            raise DrillError(f"no agent on node {ref.node!r}")
        return self.clients[ref.node]

    def route(self, fault: str, target: ProcRef) -> str:
        """Which agent acts for a fault on a target: calls to one agent go one at a time
        (:func:`per_node`), different agents' in parallel."""
        return str(target.node)

    def _agent_for(self, fault: str, target: ProcRef) -> AgentClient:
        """The agent that acts for a fault on a target: the target's node's (an engine may send
        some faults elsewhere, as Slurm sends node faults to its scheduler agent)."""
        return self._client(target)

    def _fault_params(self, fault: str, params: dict) -> dict:
        """A fault's params as its agent needs them (an engine may add what only it knows)."""
        return params

    def plan(self, fault: str, target: ProcRef, params: dict) -> PlanStep:
        return self._agent_for(fault, target).plan(fault, target, self._fault_params(fault, params))

    def inject(self, fault: str, target: ProcRef, params: dict) -> Handle:
        return self._agent_for(fault, target).inject(fault, target, self._fault_params(fault, params))

    def confirm(self, handle: Handle) -> Evidence | None:
        return self._agent_for(handle.fault, handle.target).confirm(handle)

    def heal(self, handle: Handle) -> HealReport:
        return self._agent_for(handle.fault, handle.target).heal(handle)

    # One agent's targets in one call (the nemesis groups them by :meth:`route`): a node with
    # eight ranks is one round trip, not eight (#60: through Ray, a node's calls wait for each
    # other, about 14 ms each with 8 raylets on 2 cores).
    def plan_group(self, fault: str, targets: list[ProcRef], params: dict) -> list[PlanStep]:
        return self._agent_for(fault, targets[0]).plan_all(fault, targets, self._fault_params(fault, params))

    def inject_group(self, fault: str, targets: list[ProcRef], params: dict) -> tuple[list[Handle], Exception | None]:
        """:meth:`inject` on each target in order, to the first that fails: the handles of
        those injected, and that failure (None if none failed)."""
        return self._agent_for(fault, targets[0]).inject_all(fault, targets, self._fault_params(fault, params))

    def confirm_group(self, handles: list[Handle]) -> list[Evidence | None]:
        return self._agent_for(handles[0].fault, handles[0].target).confirm_all(handles)

    def heal_group(self, handles: list[Handle]) -> list[HealReport]:
        """:meth:`heal` on each handle in order: every report (one that failed is its own)."""
        if not handles:
            return []
        return self._agent_for(handles[0].fault, handles[0].target).heal_all(handles)

    def active_by_node(self) -> dict[str, list[Handle] | Exception]:
        """Each node's active faults, or why its agent could not say: one dead agent does not
        hide the others'."""
        held, failed = fan_out(list(self.clients), lambda n: self.clients[n].active())
        return {node: held[node] if node in held else failed[node] for node in self.clients}
