"""The Ray executor: one NodeAgent actor per node, and the embedded local Ray cluster.

Each agent is a detached actor (``num_cpus=0``, pinned to its node by a hard node-affinity
strategy) so it outlives a controller that was killed: then it misses the heartbeats,
heals what it holds, and exits. The embedded cluster is several simulated nodes on
127.0.0.1, each with a ``drillbit-node-<i>`` resource, owned by a keeper process
(``python -m drillbit.executors.ray keep``) that the harness starts and stops. Ray's
processes share the keeper's fate; when the controller dies the keeper waits for the
agents to finish their dead-man's work and then shuts the cluster down.

Seen with Ray 2.60: nodes bind the machine's non-loopback address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set; ``ray start`` of a second node on the same
host then refuses, so the keeper builds the nodes with ``ray.cluster_utils.Cluster``.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from drillbit.agent import AgentService
from drillbit.errors import DrillError, LeaseError
from drillbit.executors.cluster import AgentClient, AgentExecutor
from drillbit.lease import Lease
from drillbit.proc import ProcRef

NAMESPACE = "drillbit"
NODE_RESOURCE = "drillbit-node-"


def _ray():
    loopback_env()  # read by ray when it is imported
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency; a broken install lands here
        raise DrillError("the Ray engine needs the ray package: pip install 'ray>=2.40'") from None
    return ray


def loopback_env() -> None:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keeps every node on 127.0.0.1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


# --- the agent actor ------------------------------------------------------------------------
class RayAgent(AgentService):
    """AgentService in a Ray actor: exits once orphaned work is done."""

    def __init__(self, node: str, state_dir: str, skew_s: float = 0.0) -> None:
        super().__init__(node, state_dir, skew_s)
        self.on_orphaned = lambda: os._exit(0)
        self.agent.node_id = _ray().get_runtime_context().get_node_id()


class RayAgentClient(AgentClient):
    def __init__(self, node: str, actor: Any) -> None:
        super().__init__(node)
        self.actor = actor

    def call(self, method: str, *args: Any, timeout: float = 60.0) -> Any:
        ray = _ray()
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise DrillError(f"agent on {self.node}: {method} gave no answer in {timeout:g} s") from None
        except ray.exceptions.RayActorError as exc:
            raise DrillError(f"agent on {self.node} is gone: {exc}") from None

    def beat(self) -> None:
        self.actor.heartbeat.remote()  # fire and forget: a slow answer must not delay the next beat


# --- the cluster lease ----------------------------------------------------------------------
class LeaseActor:
    """One per cluster, named and detached: who holds the cluster, and since when."""

    def __init__(self) -> None:
        self.holder: dict | None = None
        self.renewed = 0.0

    def acquire(self, holder: dict, ttl: float) -> dict | None:
        now = time.time()
        if self.holder is not None and now - self.renewed < ttl:
            return {**self.holder, "silent_s": round(now - self.renewed, 1)}
        self.holder, self.renewed = holder, now
        return None

    def renew(self, token: str) -> bool:
        if self.holder is None or self.holder["token"] != token:
            return False
        self.renewed = time.time()
        return True

    def release(self, token: str) -> None:
        if self.holder is not None and self.holder["token"] == token:
            self.holder = None


class RayLease:
    """Lease on a Ray cluster; the holder renews it with every heartbeat. A holder that
    died stops renewing, and after ``ttl`` seconds the next drill may take the cluster."""

    def __init__(self, cluster: str, holder: str, ttl: float = 15.0) -> None:
        self.cluster = cluster
        self.holder = holder
        self.ttl = ttl
        self.token = f"{socket.gethostname()}:{os.getpid()}:{time.time()}"
        self._actor: Any = None

    def acquire(self) -> None:
        ray = _ray()
        self._actor = ray.remote(num_cpus=0)(LeaseActor).options(
            name=f"drillbit-lease-{self.cluster}", namespace=NAMESPACE, lifetime="detached",
            get_if_exists=True).remote()
        who = ray.get(self._actor.acquire.remote(
            {"holder": self.holder, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
             "token": self.token}, self.ttl), timeout=60)
        if who is not None:
            self._actor = None
            raise LeaseError(
                f"cluster {self.cluster!r} is held by {who['holder']} (pid {who['pid']} on {who['host']}, "
                f"since {time.ctime(who['since'])}, last renewed {who['silent_s']:g} s ago); wait for it to "
                f"finish, or stop it — a lease not renewed for {self.ttl:g} s expires")

    def renew(self) -> None:
        if self._actor is not None:
            self._actor.renew.remote(self.token)

    def release(self) -> None:
        if self._actor is not None:
            try:
                _ray().get(self._actor.release.remote(self.token), timeout=30)
            finally:
                self._actor = None


# --- the embedded cluster -------------------------------------------------------------------
class EmbeddedCluster:
    """Starts the keeper process and waits for the cluster's address."""

    def __init__(self, state_dir: Path, nodes: int, cpus_per_node: int) -> None:
        self.state_dir = state_dir
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.proc: subprocess.Popen | None = None

    def start(self, controller: ProcRef, timeout: float = 120.0) -> str:
        address_file = self.state_dir / "ray-address"
        address_file.unlink(missing_ok=True)
        with open(self.state_dir / "ray-keeper.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drillbit.executors.ray", "keep", "--nodes", str(self.nodes),
                 "--cpus", str(self.cpus_per_node), "--state-dir", str(self.state_dir),
                 "--controller-pid", str(controller.pid), "--controller-start", repr(controller.start_time)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while not address_file.exists():
            if self.proc.poll() is not None:
                raise DrillError(f"the embedded Ray cluster did not start (see {self.state_dir / 'ray-keeper.log'})")
            if time.time() > deadline:
                self.stop()
                raise DrillError(f"the embedded Ray cluster was not up in {timeout:g} s")
            time.sleep(0.1)
        return address_file.read_text().strip()

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # Ray's processes share the keeper's fate
            self.proc.wait()


def keep(nodes: int, cpus: int, state_dir: Path, controller: ProcRef, linger: float) -> int:
    """The keeper's loop: up, then down on SIGTERM or after the orphaned agents are done."""
    loopback_env()
    from ray.cluster_utils import Cluster

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": cpus, "resources": {f"{NODE_RESOURCE}0": 1}, "include_dashboard": False,
        "node_ip_address": "127.0.0.1"})
    try:
        for i in range(1, nodes):
            cluster.add_node(num_cpus=cpus, resources={f"{NODE_RESOURCE}{i}": 1}, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        tmp = state_dir / "ray-address.tmp"
        tmp.write_text(cluster.address)
        os.replace(tmp, state_dir / "ray-address")
        while not stop.wait(0.5):
            if not controller.alive():
                # the agents heal and stop the job on their own; give them the time to
                until = time.time() + linger
                while time.time() < until and not stop.is_set():
                    done = [p for p in state_dir.glob("agent-*.deadman.jsonl") if "orphan.done" in p.read_text()]
                    if len(done) >= nodes:
                        break
                    stop.wait(0.5)
                break
    finally:
        cluster.shutdown()
    return 0


def reachable(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast on an address nobody answers at (ray.init would retry for minutes)."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise DrillError(f"cannot reach the Ray cluster at {address}: {exc}") from None


# --- the executor ---------------------------------------------------------------------------
class RayExecutor(AgentExecutor):
    """Agents as Ray actors on a running cluster (``address``) or the embedded one."""

    def __init__(self, run_dir: Path, cluster_name: str, *, address: str | None, nodes: int | None,
                 cpus_per_node: int = 2, deadman_s: float = 5.0, job_grace_s: float = 30.0,
                 skew: dict[str, float] | None = None, lease_ttl: float = 15.0) -> None:
        super().__init__(run_dir, deadman_s=deadman_s, job_grace_s=job_grace_s)
        self.cluster_name = cluster_name
        self.address = address
        self.nodes = nodes
        self.embedded = EmbeddedCluster(run_dir, nodes or 2, cpus_per_node) if address is None else None
        self.skew = skew or {}
        self.lease_ttl = lease_ttl
        self.actors: dict[str, Any] = {}
        self.lease: RayLease | None = None
        self._controller: ProcRef | None = None

    def start(self, controller: ProcRef) -> None:
        self._controller = controller
        super().start(controller)

    def _init(self) -> None:
        ray = _ray()
        if ray.is_initialized():
            return
        address = self.address
        if self.embedded is not None:
            assert self._controller is not None
            address = self.embedded.start(self._controller)
        self.values["ray_address"] = address or ""
        reachable(address)
        extra = {"_node_ip_address": "127.0.0.1"} if self.embedded is not None else {}
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False, **extra)

    def acquire(self, holder: str) -> RayLease | Lease:
        """The cluster lease: a named actor on a running cluster; a file lock for the embedded
        one, which lives on this machine only."""
        if self.embedded is not None:
            lease = Lease(self.cluster_name, holder)
            lease.acquire()
            return lease
        self._init()
        self.lease = RayLease(self.cluster_name, holder, self.lease_ttl)
        self.lease.acquire()
        return self.lease

    def _nodes(self) -> list[tuple[str, str]]:
        alive = [n for n in _ray().nodes() if n["Alive"]]
        named = []
        for n in alive:
            tags = [k for k in n["Resources"] if k.startswith(NODE_RESOURCE)]
            name = tags[0][len("drillbit-"):] if tags else n.get("NodeName") or n["NodeManagerAddress"]
            named.append((name, n["NodeID"]))
        if any(name.startswith("node-") for name, _ in named):
            named = sorted((x for x in named if x[0].startswith("node-")), key=lambda x: int(x[0][5:]))
        if self.nodes is not None:
            if len(named) < self.nodes:
                raise DrillError(f"cluster {self.cluster_name!r} has {len(named)} live nodes, {self.nodes} wanted")
            named = named[: self.nodes]
        return named

    def connect(self) -> dict[str, AgentClient]:
        self._init()
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor_cls = ray.remote(num_cpus=0, max_concurrency=8)(RayAgent)
        tag = f"{self.run_dir.name}-{os.getpid()}"
        for name, node_id in self._nodes():
            self.actors[name] = actor_cls.options(
                name=f"drillbit-agent-{tag}-{name}", namespace=NAMESPACE, lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(name, str(self.run_dir), self.skew.get(name, 0.0))
        return {name: RayAgentClient(name, actor) for name, actor in self.actors.items()}

    def on_beat(self) -> None:
        if self.lease is not None:
            self.lease.renew()

    def close(self) -> None:
        ray = _ray()
        try:
            super().close()
            for actor in self.actors.values():
                try:
                    ray.get(actor.shutdown.remote(), timeout=10)
                    ray.kill(actor)
                except Exception:
                    pass
            if self.lease is not None:
                try:
                    self.lease.release()
                except Exception:
                    pass
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if self.embedded is not None:
                self.embedded.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drillbit.executors.ray")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keep", help="run the embedded local Ray cluster until told to stop")
    k.add_argument("--nodes", type=int, default=2)
    k.add_argument("--cpus", type=int, default=2)
    k.add_argument("--state-dir", required=True)
    k.add_argument("--controller-pid", type=int, required=True)
    k.add_argument("--controller-start", type=float, required=True)
    k.add_argument("--linger", type=float, default=120.0,
                   help="after the controller died, the longest the cluster waits for its agents")
    args = p.parse_args(argv)
    return keep(args.nodes, args.cpus, Path(args.state_dir),
                ProcRef(pid=args.controller_pid, start_time=args.controller_start), args.linger)


if __name__ == "__main__":
    raise SystemExit(main())

