"""The in-process transport (engine ``process``, cluster ``local-process``): one agent in
the controller's own process, reached through the same client and the same method table
as Ray and SSH. Requests and replies go through JSON on the way, so what works here works
over a wire. The agent's guardian watches this process: if the controller is killed, the
guardian heals.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drillbit.agent.service import AgentService
from drillbit.atomic import write_private
from drillbit.errors import ConfigError, DrillError
from drillbit.spec.config import ServiceSpec
from drillbit.spec.placeholders import expand
from drillbit.transport.netcluster import SERVICE_HOST, Topology, TopologyError, preflight
from drillbit.transport.nodes import Nodes
from drillbit.transport.client import AgentClient


class InProcessClient(AgentClient):
    def __init__(self, service: AgentService) -> None:
        super().__init__(service.node)
        self.service = service

    def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
        return json.loads(json.dumps(self.service.dispatch(method, json.loads(json.dumps(payload)))))

    def close(self) -> None:
        self.service.shutdown()


class InProcessNodes(Nodes):
    """One node, the agent in the drill's own process: the job runs on this machine."""

    engine = "process"
    local = True

    def __init__(self, run_dir: Path, cluster_name: str = "local-process", node: str = "local", *,
                 deadman_s: float = 5.0, job_grace_s: float = 30.0, version: str | None = None) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=deadman_s, job_grace_s=job_grace_s)
        self.node = node
        self.version = version

    def connect(self) -> dict[str, AgentClient]:
        return {self.node: InProcessClient(AgentService(self.node, self.run_dir, version=self.version))}


class NetnsNodes(InProcessNodes):
    """A cluster of ``nodes`` simulated nodes, each a network namespace on a private bridge
    (:mod:`drillbit.transport.netcluster`), their agents in the drill's own process. The job
    launches in each node's namespace under its hostname, and rendezvouses at node 0's
    address; the namespaces are taken down on close, or by the reaper if this process dies."""

    provides = frozenset({"service_host"})

    def __init__(self, run_dir: Path, cluster_name: str, nodes: int, *, deadman_s: float = 5.0,
                 job_grace_s: float = 30.0, version: str | None = None,
                 services: list[ServiceSpec] | tuple[ServiceSpec, ...] = (),
                 frontend_mbit: float | None = None) -> None:
        super().__init__(run_dir, cluster_name, deadman_s=deadman_s, job_grace_s=job_grace_s, version=version)
        self.topology = Topology(nodes, frontend_mbit=frontend_mbit)
        self.services = list(services)

    def connect(self) -> dict[str, AgentClient]:
        missing = preflight()
        if missing:
            raise ConfigError(f"cluster {self.cluster_name!r} (topology netns) needs " + "; ".join(missing)
                              + "; nothing was started")
        self.topology.up()
        self.note("topology.up", {"namespaces": self.topology.namespaces(), "service_host": SERVICE_HOST,
                                  "addresses": {n: self.topology.address(n) for n in self.topology.node_names()},
                                  **({"frontend": {n: self.topology.frontend_address(n)
                                                   for n in self.topology.node_names()},
                                      "frontend_mbit": self.topology.frontend_mbit}
                                     if self.topology.frontend_mbit else {})})
        values = {**self.values, "service_host": SERVICE_HOST}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            for svc in self.services:
                proc = self.topology.start_service(svc.name, [expand(a, values) for a in svc.command], svc.port,
                                                   self.run_dir / f"service-{svc.name}.log", svc.ready_timeout)
                self.note("service.up", {"name": svc.name, "pid": proc.pid, "address": f"{SERVICE_HOST}:{svc.port}"})
                # {run_dir}/services/NAME.pid: how a profile's control_plane names it
                (self.run_dir / "services").mkdir(mode=0o700, exist_ok=True)
                write_private(self.run_dir / "services" / f"{svc.name}.pid",
                              json.dumps({"pid": proc.pid, "start_time": proc.create_time()}))
        except TopologyError as exc:
            self.topology.down()
            raise DrillError(str(exc)) from exc
        return {n: InProcessClient(AgentService(n, self.run_dir, version=self.version))
                for n in self.topology.node_names()}

    def node_values(self) -> dict[str, dict[str, str]]:
        return {n: {**v, "service_host": SERVICE_HOST} for n, v in super().node_values().items()}

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        return self.topology.wrap(node, argv)

    def node_env(self, node: str) -> dict[str, str]:
        # gloo and NCCL pick the node's veth, not an address they would guess from the hostname
        return {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}

    def head_host(self) -> str:
        return self.topology.address(self.topology.node_names()[0])

    def close(self) -> None:
        try:
            super().close()
        finally:
            left = self.topology.down()
            self.note("topology.down", {"verified": not left, "left": left})
