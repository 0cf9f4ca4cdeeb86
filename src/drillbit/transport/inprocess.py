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
