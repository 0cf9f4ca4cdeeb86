"""The Ray transport's agent side: one small actor class whose name and shape never change.

Ray pickles an actor class by reference (module and name), so the class a controller asks
for must exist in the cluster's drillbit. This one only forwards ``call(method, payload)``
to :meth:`AgentService.dispatch`; a cluster running another drillbit release answers the
``info`` handshake with its own version, and the controller refuses it by name instead of
failing with "Can't get attribute …".
"""
from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

from drillbit.agent.service import AgentService


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class AgentActor:
    """Named actors can be looked up by any client of the cluster, so every call carries
    the drill's token (made by the controller, given at creation, never logged); a call
    without it is refused and nothing else happens. The actor keeps only the token's
    sha256, and has no method but these: Ray gives every actor class ``__ray_call__`` (run
    any function on the actor, token or not), and this class declares itself already
    prepared (``__ray_actor_class__``) so Ray adds none of its own methods to it."""

    def __init__(self, node: str, state_dir: str, skew_s: float = 0.0, version: str | None = None,
                 token: str | None = None) -> None:
        import ray

        self._digest = _digest(token) if token is not None else None
        self.service = AgentService(node, state_dir, skew_s=skew_s, version=version,
                                    node_id=ray.get_runtime_context().get_node_id())
        self.service.on_orphaned = lambda: os._exit(0)

    def _ours(self, token: str | None) -> bool:
        return self._digest is None or (token is not None and hmac.compare_digest(_digest(token), self._digest))

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



def _ready(self: Any) -> bool:
    return True


def _terminate(self: Any) -> None:
    import ray

    ray.actor.exit_actor()


class _ItsOwnClass:
    """``cls.__ray_actor_class__`` is ``cls`` — as a descriptor, not a class attribute that
    is the class itself (Ray's collision check disassembles a class's attributes, and would
    recurse into that one forever)."""

    def __get__(self, obj: Any, owner: type) -> type:
        return owner


def sealed(cls: type) -> type:
    """``cls`` as a Ray actor class without ``__ray_call__``: Ray adds its default methods to
    a class only once (it marks the result with ``__ray_actor_class__``), so marking it here
    leaves it with its own methods and what it needs of Ray's — readiness, and the exit a
    handle going out of scope asks for (anyone may ``ray.kill`` an actor anyway)."""
    cls.__ray_ready__ = _ready  # type: ignore[attr-defined]
    cls.__ray_terminate__ = _terminate  # type: ignore[attr-defined]
    cls.__ray_actor_class__ = _ItsOwnClass()  # type: ignore[attr-defined]
    return cls


sealed(AgentActor)
