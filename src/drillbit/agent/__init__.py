"""The node agent: what runs on every node of a drill, and the one API it serves.

    api.py       the protocol: a request and a reply model per method, the method table
    service.py   AgentService: the method table's handlers, the heartbeat dead-man's switch
    node.py      NodeAgent: rank discovery, faults and their durable registry
    deadman.py   the dead-man's switch routine, its records, and the guardian process
    jobproc.py   the job's launcher on this node (a session of its own)
    serve.py     the JSON-lines transport's agent side (SSH)
    rayactor.py  the Ray transport's agent side (one stable actor class)

Transports (``drillbit.transport``) carry ``(method, request)`` to
:meth:`AgentService.dispatch` and its Envelope back; nothing else reaches an agent.
"""
from drillbit.agent.jobproc import LaunchedJob, free_port, start_job, stop_job
from drillbit.agent.node import NodeAgent

__all__ = ["LaunchedJob", "NodeAgent", "free_port", "start_job", "stop_job"]
