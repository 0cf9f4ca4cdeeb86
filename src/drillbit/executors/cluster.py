"""The controller's side of agents on other nodes (Ray actors or SSH servers).

An :class:`AgentClient` is one node's agent seen from the controller: every call returns
the agent's plain data as drillbit's models, with the agent's timestamps moved onto the
controller's clock by the measured offset. :class:`AgentExecutor` holds one client per
node and is what the runner talks to: it launches the job on every node, finds ranks on
all of them, routes each fault to the node of its target, and heartbeats every agent so
that an agent whose controller is gone heals on its own.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from drillbit.errors import DrillError
from drillbit.faults.base import Evidence, Handle, HealReport
from drillbit.proc import ProcRef
from drillbit.spec.config import JobProfile, RankDiscovery


class AgentClient:
    """One node's agent. Subclasses implement ``call``."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.offset = 0.0  # agent clock minus controller clock, seconds
        self.rtt = 0.0

    def call(self, method: str, *args: Any, timeout: float = 60.0) -> Any:
        raise NotImplementedError

    def beat(self) -> None:
        """Send one heartbeat without waiting for the answer where the transport allows."""
        self.call("heartbeat", timeout=5.0)

    def close(self) -> None:
        pass

    # --- clock ---------------------------------------------------------------------------
    def measure_offset(self, samples: int = 8) -> tuple[float, float]:
        """NTP-style: the sample with the smallest round trip gives the offset."""
        best: tuple[float, float] | None = None
        for _ in range(samples):
            t0 = time.time()
            remote = self.call("clock", timeout=10.0)
            t1 = time.time()
            rtt = t1 - t0
            if best is None or rtt < best[0]:
                best = (rtt, remote - (t0 + t1) / 2)
        assert best is not None
        self.rtt, self.offset = best
        return self.offset, self.rtt

    def local_time(self, t: float) -> float:
        return t - self.offset

    # --- typed calls ---------------------------------------------------------------------
    def find_ranks(self, discovery: RankDiscovery, attach_pid: int | None) -> list[ProcRef]:
        return [ProcRef.model_validate(r) for r in self.call("find_ranks", discovery.model_dump(), attach_pid)]

    def inject(self, fault: str, target: ProcRef, params: dict) -> Handle:
        return Handle.model_validate(self.call("inject", fault, target.model_dump(), params))

    def confirm(self, handle: Handle) -> Evidence | None:
        raw = self.call("confirm", handle.model_dump(mode="json"))
        return None if raw is None else Evidence.model_validate({**raw, "t": self.local_time(raw["t"])})

    def heal(self, handle: Handle) -> HealReport:
        raw = self.call("heal", handle.model_dump(mode="json"))
        return HealReport.model_validate({**raw, "t": self.local_time(raw["t"])})

    def active(self) -> list[Handle]:
        return [Handle.model_validate(h) for h in self.call("active")]


def expand(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def each_node(nodes: list[str], fn) -> tuple[dict[str, Any], list[str]]:
    """``fn(node)`` on every node at once: the results by node, and the errors."""
    results: dict[str, Any] = {}
    errors: list[str] = []

    def one(node: str) -> None:
        try:
            results[node] = fn(node)
        except Exception as exc:
            errors.append(f"{node}: {exc}")

    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


class NodeJobs:
    """The job as one launcher per node; it has exited once every launcher has."""

    def __init__(self, clients: dict[str, AgentClient], refs: dict[str, ProcRef], stop_timeout: float) -> None:
        self.clients = clients
        self.refs = refs
        self.stop_timeout = stop_timeout
        self._codes: dict[str, int | None] = {}

    @property
    def pid(self) -> int:
        return next(iter(self.refs.values())).pid

    def exit_code(self) -> int | None:
        for node in self.refs:
            if self._codes.get(node) is None:
                self._codes[node] = self.clients[node].call("job_status", timeout=10.0)
        codes = list(self._codes.values())
        if any(c is None for c in codes):
            return None
        return next((c for c in codes if c != 0), 0)

    def stop(self) -> int | None:
        codes, _ = each_node(list(self.refs), lambda n: self.clients[n].call(
            "stop_job", self.stop_timeout, timeout=self.stop_timeout + 30))
        return next((c for c in codes.values() if c not in (0, None)), 0 if codes else None)


class AgentExecutor:
    """Drives one agent per node. Subclasses set up the transport in ``connect``."""

    heartbeat_s = 1.0

    def __init__(self, run_dir: Path, *, deadman_s: float = 5.0, job_grace_s: float = 30.0) -> None:
        self.run_dir = run_dir
        self.deadman_s = deadman_s
        self.job_grace_s = job_grace_s
        self.clients: dict[str, AgentClient] = {}
        self.values: dict[str, str] = {"run_dir": str(run_dir), "python": sys.executable}
        self._beating = threading.Event()
        self._beater: threading.Thread | None = None
        self.notes: list[tuple[str, dict]] = []  # (kind, data) for the history, recorded by the runner

    # --- life cycle ----------------------------------------------------------------------
    def connect(self) -> dict[str, AgentClient]:
        raise NotImplementedError

    def start(self, controller: ProcRef) -> None:
        self.clients = self.clients or self.connect()
        for client in self.clients.values():
            info = client.call("info", timeout=120.0)  # the ready handshake: the agent answers
            self.notes.append(("agent.ready", {"node": client.node, "pid": info["pid"], "host": info["host"]}))
            offset, rtt = client.measure_offset()
            self.notes.append(("agent.clock", {"node": client.node, "offset_s": round(offset, 6),
                                               "rtt_s": round(rtt, 6)}))
            client.call("arm", self.deadman_s, self.job_grace_s)
        self._beating.set()
        self._beater = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._beater.start()

    def _beat(self) -> None:
        while self._beating.is_set():
            for client in list(self.clients.values()):
                try:
                    client.beat()
                except Exception:  # a missed beat is what the dead-man's switch is for
                    pass
            self.on_beat()
            time.sleep(self.heartbeat_s)

    def on_beat(self) -> None:
        """Whatever else is kept alive by the heartbeat (a Ray cluster's lease)."""

    def close(self) -> None:
        self._beating.clear()
        if self._beater is not None:
            self._beater.join(timeout=10)
        for client in self.clients.values():
            try:
                client.call("disarm", timeout=10.0)
            except Exception:
                pass
            client.close()

    # --- the job -------------------------------------------------------------------------
    def node_values(self) -> dict[str, dict[str, str]]:
        """Placeholders per node: {node}, {node_rank}, {nnodes}, {head}, {port}."""
        nodes = list(self.clients)
        head = nodes[0]
        port = str(self.clients[head].call("free_port"))
        return {n: {**self.values, "python": self.python_for(n), "node": n, "node_rank": str(i),
                    "nnodes": str(len(nodes)),
                    "head": self.head_host(), "port": port}
                for i, n in enumerate(nodes)}

    def python_for(self, node: str) -> str:
        """The interpreter for {python} on that node."""
        return sys.executable

    def head_host(self) -> str:
        """The address other nodes reach the first node at (the rendezvous host)."""
        return "127.0.0.1"

    def launch(self, profile: JobProfile) -> NodeJobs:
        assert profile.launch is not None
        spec = profile.launch
        (self.run_dir).mkdir(parents=True, exist_ok=True)
        per_node = self.node_values()
        nodes = list(per_node) if spec.per_node else list(per_node)[:1]
        refs = {}
        for node in nodes:
            values = per_node[node]
            argv = [expand(a, values) for a in spec.command]
            env = {k: expand(v, values) for k, v in spec.env.items()}
            cwd = expand(spec.cwd, values) if spec.cwd else None
            out = str(self.run_dir / (f"job-{node}.out" if len(nodes) > 1 else "job.out"))
            refs[node] = ProcRef.model_validate(self.clients[node].call("launch", argv, env, cwd, out))
        return NodeJobs({n: self.clients[n] for n in nodes}, refs, spec.stop_timeout)

    def log_paths(self, profile: JobProfile) -> list[Path]:
        return [Path(expand(p, self.values)) for p in profile.logs]

    # --- faults --------------------------------------------------------------------------
    def _on_all(self, method: str, *args: Any) -> dict[str, Any]:
        results, errors = each_node(list(self.clients), lambda n: getattr(self.clients[n], method)(*args))
        if errors:
            raise DrillError(f"{method} failed on " + "; ".join(errors))
        return results

    def find_ranks(self, discovery: RankDiscovery, attach_pid: int | None = None) -> list[ProcRef]:
        found = [r for refs in self._on_all("find_ranks", discovery, attach_pid).values() for r in refs]
        return sorted(found, key=lambda r: r.rank if r.rank is not None else -1)

    def _client(self, ref: ProcRef) -> AgentClient:
        if ref.node not in self.clients:
            raise DrillError(f"no agent on node {ref.node!r}")
        return self.clients[ref.node]

    def inject(self, fault: str, target: ProcRef, params: dict) -> Handle:
        return self._client(target).inject(fault, target, params)

    def confirm(self, handle: Handle) -> Evidence | None:
        return self._client(handle.target).confirm(handle)

    def heal(self, handle: Handle) -> HealReport:
        return self._client(handle.target).heal(handle)

    def active(self) -> list[Handle]:
        return [h for handles in self._on_all("active").values() for h in handles]
