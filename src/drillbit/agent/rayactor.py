"""The Ray transport's agent side: one small actor class whose name and shape never change.

Ray pickles an actor class by reference (module and name), so the class a controller asks
for must exist in the cluster's drillbit. This one only forwards ``call(method, payload)``
to :meth:`AgentService.dispatch`; a cluster running another drillbit release answers the
``info`` handshake with its own version, and the controller refuses it by name instead of
failing with "Can't get attribute …".
"""
from __future__ import annotations

import hmac
import os
from typing import Any


class AgentActor:
    """Named actors can be looked up by any client of the cluster, so every call carries
    the drill's token (made by the controller, given at creation, never logged); a call
    without it is refused and nothing else happens."""

    def __init__(self, node: str, state_dir: str, skew_s: float = 0.0, version: str | None = None,
                 token: str | None = None) -> None:
        import ray

        from drillbit.agent.service import AgentService

        self._token = token
        self.service = AgentService(node, state_dir, skew_s=skew_s, version=version,
                                    node_id=ray.get_runtime_context().get_node_id())
        self.service.on_orphaned = lambda: os._exit(0)

    def _ours(self, token: str | None) -> bool:
        return self._token is None or (token is not None and hmac.compare_digest(token, self._token))

    def call(self, method: str, payload: Any, token: str | None = None) -> dict[str, Any]:
        if not self._ours(token):
            return {"ok": None, "error": {"kind": "refused", "message": "this agent answers only the controller "
                                                                        "that started it (no or wrong drill token)"}}
        return self.service.dispatch(method, payload)

    def shutdown(self, token: str | None = None) -> bool:
        if not self._ours(token):
            return False
        self.service.shutdown()
        return True
