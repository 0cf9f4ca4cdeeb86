"""The node agent: what runs on every node of a drill, and the one API it serves.

    api.py       the protocol: a request and a reply model per method, the method table
    service.py   AgentService: the method table's handlers, the heartbeat dead-man's switch
    node.py      NodeAgent: rank discovery, faults and their durable registry
    deadman.py   the dead-man's switch routine and its records
    guardian.py  the guardian process (``python -m drillbit.agent guard``), light until it trips
    jobproc.py   the job's launcher on this node (a session and a cgroup of its own)
    jobcgroup.py the job's cgroup: made, joined by the job's init, killed as a whole, removed
    jobinit.py   the job's first process: joins its cgroup, adopts its orphans (a subreaper)
    serve.py     the JSON-lines transport's agent side (SSH)
    rayactor.py  the Ray transport's agent side (one stable actor class)

Transports (``drillbit.transport``) carry ``(method, request)`` to
:meth:`AgentService.dispatch` and its Envelope back; nothing else reaches an agent.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drillbit.agent.jobproc import LaunchedJob, free_port, start_job, stop_job
    from drillbit.agent.node import NodeAgent

# loaded when first asked for: the guardian, started with every drill on every node, imports a
# submodule of this package and none of these
_WHERE = {"LaunchedJob": "jobproc", "free_port": "jobproc", "start_job": "jobproc", "stop_job": "jobproc",
          "NodeAgent": "node"}

__all__ = ["LaunchedJob", "NodeAgent", "free_port", "start_job", "stop_job"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"drillbit.agent.{_WHERE[name]}"), name)
