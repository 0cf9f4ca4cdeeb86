"""The Ray transport's agent side: one small actor class whose name and shape never change.

Ray pickles an actor class by reference (module and name), so the class a controller asks
for must exist in the cluster's drillbit. This one only forwards ``call(method, payload)``
to :meth:`AgentService.dispatch`; a cluster running another drillbit release answers the
``info`` handshake with its own version, and the controller refuses it by name instead of
failing with "Can't get attribute …".
"""
from __future__ import annotations

import os
from typing import Any


class AgentActor:
    def __init__(self, node: str, state_dir: str, skew_s: float = 0.0, version: str | None = None) -> None:
        import ray

        from drillbit.agent.service import AgentService

        self.service = AgentService(node, state_dir, skew_s=skew_s, version=version,
                                    node_id=ray.get_runtime_context().get_node_id())
        self.service.on_orphaned = lambda: os._exit(0)

    def call(self, method: str, payload: Any) -> dict[str, Any]:
        return self.service.dispatch(method, payload)

    def shutdown(self) -> None:
        self.service.shutdown()
