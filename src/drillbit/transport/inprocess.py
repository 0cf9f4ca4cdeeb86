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
from drillbit.spec.config import ServiceSpec
from drillbit.transport.netcluster import SERVICE_HOST, Topology, bring_up, take_down
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
        bring_up(self.topology, self.cluster_name, self.services, self.values, self.run_dir, self.note)
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
            take_down(self.topology, self.note)
