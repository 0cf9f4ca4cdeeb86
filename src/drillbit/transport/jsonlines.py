"""The controller's side of the JSON-lines agent protocol (:mod:`drillbit.agent.serve`),
over any pair of text streams: an SSH channel (ssh.py) or an ``srun`` process (Slurm).

Requests carry an id; a reader thread hands each reply to the caller waiting on that id.
When the stream ends (the connection dropped, the job's allocation ended and the agent
with it) every waiter is woken with a "closed" reply and :attr:`closed` is set.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from drillbit.core.errors import DrillError
from drillbit.transport.client import AgentClient


class Writer(Protocol):
    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class JsonLinesClient(AgentClient):
    channel = "stream"  # what the streams are, in error messages

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self._lock = threading.Lock()
        self._next = 1
        self._waiting: dict[int, tuple[threading.Event, list]] = {}
        self.closed = threading.Event()

    def _begin(self, out: Writer, inp: Iterable[str], greeting_timeout: float = 60.0) -> None:
        """Start reading ``inp``; wait for the server's greeting (id 0): it started."""
        self._out, self._in = out, inp
        first: tuple[threading.Event, list] = (threading.Event(), [])
        self._waiting[0] = first
        self._reader = threading.Thread(target=self._read, name=f"agent-{self.node}", daemon=True)
        self._reader.start()
        self._wait(0, first, greeting_timeout, "start")

    def _stderr(self) -> str:
        """What the agent's side printed on its error stream, for an error message."""
        return ""

    def _read(self) -> None:
        try:
            for line in self._in:
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                slot = self._waiting.pop(reply.get("id", -1), None) if isinstance(reply, dict) else None
                if slot is not None:
                    slot[1].append(reply)
                    slot[0].set()
        except (OSError, ValueError):
            pass
        self.closed.set()
        for event, box in list(self._waiting.values()):
            box.append({"closed": True})
            event.set()

    def _write(self, method: str, payload: dict, want: bool) -> tuple[int, tuple[threading.Event, list]]:
        slot: tuple[threading.Event, list] = (threading.Event(), [])
        with self._lock:
            rid = self._next
            self._next += 1
            if want:
                self._waiting[rid] = slot
                if self.closed.is_set():
                    slot[1].append({"closed": True})
                    slot[0].set()
                    return rid, slot
            self._out.write(json.dumps({"id": rid, "method": method, "payload": payload}) + "\n")
            self._out.flush()
        return rid, slot

    def _wait(self, rid: int, slot: tuple[threading.Event, list], timeout: float, method: str) -> Any:
        event, box = slot
        if not event.wait(timeout):
            self._waiting.pop(rid, None)
            raise DrillError(f"agent on {self.node}: {method} gave no answer in {timeout:g} s {self._stderr()}".strip())
        reply = box[0]
        if reply.get("closed"):
            raise DrillError(f"agent on {self.node}: {method}: the {self.channel} closed {self._stderr()}".strip())
        return {k: v for k, v in reply.items() if k != "id"}

    def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
        try:
            rid, slot = self._write(method, payload, want=True)
        except (OSError, ValueError) as exc:
            raise DrillError(f"agent on {self.node}: the {self.channel} is gone ({exc})") from None
        return self._wait(rid, slot, timeout, method)

    def _post(self, method: str, payload: dict[str, Any]) -> None:
        if not self.closed.is_set():
            self._write(method, payload, want=False)
