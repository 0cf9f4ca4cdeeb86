"""The JSON-lines transport on the agent's side (SSH runs it): one request per line in,
one reply per line out.

In: ``{"id": N, "method": NAME, "payload": {...}}``; out: ``{"id": N, "ok": {...}}`` or
``{"id": N, "error": {"kind", "message"}}``, the :class:`~drillbit.agent.api.Envelope` of
:meth:`AgentService.dispatch`. A line that is not such an object is answered with a
``bad-request`` error (id null when none could be read) and the agent lives on. The first
line out is the greeting: ``{"id": 0, "ok": <info>}``. ``{"method": "exit"}`` ends it.
End of input (the SSH connection dropped) counts at once as a lost controller when armed.
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

from drillbit.agent import api
from drillbit.agent.service import AgentService


def _request(line: str) -> tuple[Any, str, Any] | api.RemoteError:
    try:
        req = json.loads(line)
    except ValueError as exc:
        return api.RemoteError(kind="bad-request", message=f"not JSON: {exc}")
    if not isinstance(req, dict) or not isinstance(req.get("method"), str):
        return api.RemoteError(kind="bad-request", message='a request is {"id", "method", "payload"}')
    return req.get("id"), req["method"], req.get("payload")


def serve(service: AgentService, inp: TextIO | None = None, out: TextIO | None = None) -> int:
    inp = inp or sys.stdin
    out = out or sys.stdout
    lock = threading.Lock()

    def reply(rid: Any, envelope: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps({"id": rid, **envelope}) + "\n")
            out.flush()

    def handle(rid: Any, method: str, payload: Any) -> None:
        reply(rid, service.dispatch(method, payload))

    reply(0, service.dispatch("info", {}))
    for line in inp:
        if not line.strip():
            continue
        parsed = _request(line)
        if isinstance(parsed, api.RemoteError):
            try:
                rid = json.loads(line).get("id")
            except (ValueError, AttributeError):
                rid = None
            reply(rid, api.Envelope(error=parsed).model_dump(mode="json"))
            continue
        rid, method, payload = parsed
        if method == "exit":
            service.shutdown()
            return 0
        # heal and confirm may take seconds; heartbeats must not wait behind them
        threading.Thread(target=handle, args=(rid, method, payload), daemon=True).start()
    if service._armed is not None:
        service.lapse()
        service.orphaned.wait()
    service.shutdown()
    return 0
