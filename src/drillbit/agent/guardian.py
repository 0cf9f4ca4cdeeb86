"""The guardian of the dead-man's switch: ``python -m drillbit.agent guard``.

One per armed agent, in a session of its own, for the whole drill: it watches the process the
agent's controller lives in and, released (SIGTERM) by a controller that heals for itself,
ends having done nothing. Only when what it watches dies (or stays stopped past the dead-man
limit) does it load the agent's fault machinery and heal
(:func:`drillbit.agent.deadman.heal_orphaned`). So this module imports nothing of the
harness but :class:`~drillbit.core.proc.ProcRef`: a guardian starts with every drill on every
node, and what it would import for a heal it rarely does (models, faults, the spec) cost
more than its whole watch.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from drillbit.core.proc import ProcRef


def _deadman_limit(registry: Path, default: float = 10.0) -> float:
    """The dead-man limit the controller armed the agent with (its heartbeats' deadline)."""
    try:
        return float((json.loads(registry.read_text()).get("armed") or {}).get("deadman_s") or default)
    except (OSError, ValueError, TypeError):
        return default


def listen_to_agent(fd: int) -> tuple[set[str], threading.Event]:
    """Every handle digest the agent tells over ``fd`` (the guardian's stdin, which only the agent
    holds), gathered by a thread until the agent closes it or dies. Every digest ever told
    counts: an agent that dies between telling and writing leaves a told state on disk."""
    told: set[str] = set()
    closed = threading.Event()

    def read() -> None:  # os.read on the bare fd: a buffered reader's lock would stall the exit
        pending = b""
        try:
            while chunk := os.read(fd, 1 << 16):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    try:
                        told.update(str(d) for d in json.loads(line))
                    except (ValueError, TypeError):
                        continue
        except OSError:
            pass
        finally:
            closed.set()

    threading.Thread(target=read, daemon=True, name="told").start()
    return told, closed


def guard(registry: Path, watch: ProcRef, poll: float = 0.2) -> int:
    """The guardian's loop: returns when released, or once ``watch`` died and all is healed."""
    stop = threading.Event()
    told, agent_gone = listen_to_agent(sys.stdin.fileno())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the drill's terminal is not our end
    stopped_since: float | None = None
    lost = f"the process it watched (pid {watch.pid}) is gone"
    while not stop.is_set():
        status = watch.status()
        if status is None:
            break
        # a controller stopped (SIGSTOP, Ctrl-Z) heals nothing: past the dead-man limit it is lost too
        if status == psutil.STATUS_STOPPED:
            stopped_since = stopped_since or time.time()
            if time.time() - stopped_since > _deadman_limit(registry):
                lost = (f"the process it watched (pid {watch.pid}) has been stopped (state T) for "
                        f"{time.time() - stopped_since:.0f} s, past the dead-man limit")
                break
        else:
            stopped_since = None
        stop.wait(poll)
    if stop.is_set():
        return 0  # released by a controller that heals for itself
    agent_gone.wait(2.0)  # what a dead agent told last is read to its end (a stopped one's: what came)
    from drillbit.agent.deadman import heal_orphaned  # the fault machinery: only now

    heal_orphaned(registry, set(told), lost, stop)
    return 0
