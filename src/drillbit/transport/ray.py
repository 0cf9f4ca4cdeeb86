"""The Ray transport: one agent actor per node of a Ray cluster (or of the embedded one).

Each agent is a detached :class:`~drillbit.agent.rayactor.AgentActor` (``num_cpus=0``,
pinned to its node by a hard node-affinity strategy) so it outlives a controller that was
killed: then it misses the heartbeats, heals what it holds, and exits. The actor has one
method, ``call(method, payload)``; this client is the other half of that.
"""
from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbit.agent.leftovers import heal_folders_here
from drillbit.agent.rayactor import AgentActor
from drillbit.core.errors import DrillError
from drillbit.core.lease import Lease
from drillbit.core.proc import ProcRef
from drillbit.transport import aids, rayauth
from drillbit.transport.client import AgentClient
from drillbit.core.netns import call_in
from drillbit.transport.netcluster import SERVICE_HOST, Topology, bring_up, take_down
from drillbit.transport.nodes import Nodes
from drillbit.transport.raycluster import NAMESPACE, NODE_RESOURCE, EmbeddedCluster, RayLease, _ray, reachable
import contextlib

if TYPE_CHECKING:
    from drillbit.spec.config import RayCluster


class RayAgentClient(AgentClient):
    def __init__(self, node: str, actor: Any, token: str) -> None:
        super().__init__(node)
        self.actor = actor
        self.token = token

    def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
        ray = _ray()
        try:
            return ray.get(self.actor.call.remote(method, payload, self.token), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise DrillError(f"agent on {self.node}: {method} gave no answer in {timeout:g} s") from None
        except ray.exceptions.RayActorError as exc:
            raise DrillError(f"agent on {self.node} is gone: {exc}") from None
        except ray.exceptions.RayTaskError as exc:  # the cluster could not even load the actor
            raise DrillError(f"agent on {self.node}: {exc.cause!r}; is the same drillbit installed on the "
                             "cluster?") from None

    def _post(self, method: str, payload: dict[str, Any]) -> None:
        self.actor.call.remote(method, payload, self.token)  # fire and forget: a slow answer must not delay the next beat


class RayNodes(Nodes):
    """Agents as Ray actors on a running cluster (``address``) or the embedded one."""

    engine = "ray"
    provides = frozenset({"ray_address"})

    @classmethod
    def for_cluster(cls, run_dir: Path, name: str, cluster: "RayCluster") -> "RayNodes":
        """The nodes of a cluster entry of engine ray: its address, size and token read here."""
        return cls(run_dir, name, address=cluster.address, nodes=cluster.nodes,
                   cpus_per_node=cluster.cpus_per_node, deadman_s=cluster.deadman,
                   job_grace_s=cluster.job_grace, skew=aids.clock_skew(),
                   lease_ttl=cluster.lease_ttl, version=aids.agent_version(),
                   auth_token=cluster.ray_auth_token.get_secret_value() if cluster.ray_auth_token else None,
                   auth_token_file=cluster.ray_auth_token_file,
                   topology=Topology(cluster.nodes or 2, frontend_mbit=cluster.frontend_mbit)
                   if cluster.topology == "netns" else None, services=cluster.services)

    def __init__(self, run_dir: Path, cluster_name: str, *, address: str | None, nodes: int | None,
                 cpus_per_node: int = 2, deadman_s: float = 5.0, job_grace_s: float = 30.0,
                 skew: dict[str, float] | None = None, lease_ttl: float = 15.0, version: str | None = None,
                 auth_token: str | None = None, auth_token_file: str | None = None,
                 topology: Topology | None = None, services: Any = ()) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=deadman_s, job_grace_s=job_grace_s)
        self.address = address
        self.nodes = nodes
        # a namespace cluster under the embedded Ray cluster: one node per namespace
        self.topology = topology if address is None else None
        self.services = list(services)
        if self.topology is not None:
            self.provides = self.provides | {"service_host"}
        self.embedded = EmbeddedCluster(run_dir, nodes or 2, cpus_per_node,
                                        self.topology.run_id if self.topology else None) if address is None else None
        self.skew = skew or {}
        self.lease_ttl = lease_ttl
        self.version = version
        self.actors: dict[str, Any] = {}
        self.token = secrets.token_hex(16)  # the drill's: only this controller's calls are obeyed
        self.lease: RayLease | None = None
        self._controller: ProcRef | None = None
        self._auth = (auth_token, auth_token_file)

    def start(self, controller: ProcRef) -> None:
        self._controller = controller
        super().start(controller)

    def _init(self) -> None:
        ray = _ray()
        if ray.is_initialized():
            return
        address = self.address
        if self.topology is not None:  # the namespaces first, then a Ray node in each
            bring_up(self.topology, self.cluster_name, self.services, self.values, self.run_dir, self.note)
        if self.embedded is not None:  # token authentication on, with this process's token
            assert self._controller is not None
            address = self.embedded.start(self._controller)
        self.values["ray_address"] = address or ""
        if self.topology is not None:
            # the driver joins from the switch's namespace, on a thread of its own: every thread
            # Ray starts for it is made there, and the controller stays on this machine's network
            call_in(f"/run/netns/{self.topology.switch}",
                    lambda: self._init_driver(address, _node_ip_address=SERVICE_HOST))
            self._await_nodes()
            return
        reachable(address)
        if self.embedded is None and address and "://" not in address and address != "auto":
            token, source = (None, "RAY_AUTH_MODE=disabled") if rayauth.disabled() else rayauth.find_token(*self._auth)
            if token is not None:
                rayauth.use(token)
            rayauth.check(address, self.cluster_name, source, sent=token is not None)
        self._init_driver(address, **({"_node_ip_address": "127.0.0.1"} if self.embedded is not None else {}))

    def _init_driver(self, address: str | None, **extra: Any) -> None:
        ray = _ray()
        # off the main thread (a namespace cluster's driver) ray.init leaves SIGTERM alone, and
        # warns that it does: this controller handles its own signals
        quiet = logging.getLogger("ray._private.worker")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR",
                     configure_logging=False, **extra)
        finally:
            quiet.setLevel(level)

    def _await_nodes(self, timeout: float = 120.0) -> None:
        """Until every node of the namespace cluster has joined (the keeper starts the raylets
        once the head answers, and does not wait for them)."""
        want = {f"{NODE_RESOURCE}{i}" for i in range(self.topology.nodes)} if self.topology else set()
        deadline = time.time() + timeout
        while True:
            have = {k for n in _ray().nodes() if n["Alive"] for k in n["Resources"] if k.startswith(NODE_RESOURCE)}
            if want <= have:
                return
            if time.time() > deadline:
                raise DrillError(f"the Ray cluster on {self.cluster_name!r} has nodes "
                                 f"{sorted(have & want) or 'none'} of {sorted(want)} after {timeout:g} s "
                                 f"(see {self.run_dir / 'ray-nodes.log'})")
            time.sleep(0.5)

    def acquire(self, holder: str) -> RayLease | Lease:
        """The cluster lease: a named actor on a running cluster; a file lock for the embedded
        one, which lives on this machine only."""
        if self.embedded is not None:
            return super().acquire(holder)
        self._init()
        identity = _ray().get_runtime_context().gcs_address or self.address or self.cluster_name
        self.lease = RayLease(self.cluster_name, holder, self.lease_ttl, identity=identity)
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

        actor_cls = ray.remote(num_cpus=0, max_concurrency=8)(AgentActor)
        tag = f"{self.run_dir.name}-{os.getpid()}"
        for name, node_id in self._nodes():
            self.actors[name] = actor_cls.options(
                name=f"drillbit-agent-{tag}-{name}", namespace=NAMESPACE, lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(name, str(self.run_dir), self.skew.get(name, 0.0), self.version, self.token)
        return {name: RayAgentClient(name, actor, self.token) for name, actor in self.actors.items()}

    def node_values(self) -> dict[str, dict[str, str]]:
        values = super().node_values()
        if self.topology is None:
            return values
        return {n: {**v, "service_host": SERVICE_HOST} for n, v in values.items()}

    def node_env(self, node: str) -> dict[str, str]:
        # gloo and NCCL pick the node's veth, not an address they would guess from the hostname
        return {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"} if self.topology is not None else {}

    def head_host(self) -> str:
        return self.topology.address(self.topology.node_names()[0]) if self.topology is not None else "127.0.0.1"

    def beat_period(self) -> float:
        """A running cluster's lease is renewed with the beat: at least three renewals a TTL."""
        return min(super().beat_period(), self.lease_ttl / 3)

    def on_beat(self) -> None:
        if self.lease is not None:
            self.lease.renew()
            if self.lease.lost:
                self.problem = self.lease.lost

    def close(self) -> None:
        ray = _ray()
        try:
            super().close()
            for actor in self.actors.values():
                try:
                    ray.get(actor.shutdown.remote(self.token), timeout=10)
                    ray.kill(actor)
                except Exception:
                    pass
            if self.lease is not None:
                with contextlib.suppress(Exception):
                    self.lease.release()
        finally:
            if ray.is_initialized():
                ray.shutdown()
            try:
                if self.embedded is not None:
                    self.embedded.stop()
            finally:
                if self.topology is not None and self.topology.reaper is not None:
                    take_down(self.topology, self.note)


def heal_on_nodes(name: str, cluster: "RayCluster", folders: list[str], *, force: bool = False,
                  abandon: str | None = None, timeout: float = 600.0) -> tuple[list[dict], list[str]]:
    """``drill heal`` on every live node of a running Ray cluster: a task pinned to each node
    heals the registries its agents left in those run folders, where their processes are.
    Returns (each node's Leftovers, the nodes that did not answer, with why)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        nodes = RayNodes.for_cluster(Path(scratch), name, cluster.model_copy(update={"nodes": None}))  # every live node
        nodes._init()
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = ray.remote(num_cpus=0, max_retries=0)(heal_folders_here)
        pending = {node_name: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                   .remote(folders, force, abandon) for node_name, node_id in nodes._nodes()}
        done: list[dict] = []
        unreached: list[str] = []
        for node_name, ref in pending.items():
            try:
                done += ray.get(ref, timeout=timeout)
            except Exception as exc:  # noqa: BLE001 — a node that died or never answered: named, not fatal
                unreached.append(f"{node_name}: {exc.__class__.__name__}: {str(exc)[:200]}")
        ray.shutdown()
    return done, unreached
