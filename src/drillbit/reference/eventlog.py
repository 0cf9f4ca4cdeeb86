"""Structured event lines written by the reference job and its watchdog.

One line per event, ``t=<epoch> kind=<kind> key=value ...``, appended with a single
``write`` on an ``O_APPEND`` file so lines from several processes never interleave.
The ``reference`` signal preset (probes/presets/reference.yaml) reads exactly this.
"""
from __future__ import annotations

import os
import time


class EventLog:
    """Append-only event line writer shared by ranks and the watchdog."""

    def __init__(self, path: str, source: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._source = source

    def emit(self, kind: str, **fields: object) -> None:
        parts = [f"t={time.time():.6f}", f"kind={kind}", f"src={self._source}"]
        for key, value in fields.items():
            text = str(value).replace(" ", "_").replace("\n", "_")
            parts.append(f"{key}={text}")
        os.write(self._fd, (" ".join(parts) + "\n").encode())

    def worker_start(self, marker: str, attempt: int, world: int) -> None:
        """Rank 0's ``worker.start``, and ``restart`` for any worker group after the job's
        first (``marker`` is a file that says one already started). The launcher's attempt
        count alone misses restarts: across nodes a node whose peers failed restarts its
        workers without counting one, and Ray Train keeps no count in the workers."""
        self.emit("worker.start", attempt=attempt, world=world, pid=os.getpid())
        if attempt > 0 or os.path.exists(marker):
            self.emit("restart", attempt=attempt)
        open(marker, "a").close()

    def close(self) -> None:
        os.close(self._fd)


def parse_line(line: str) -> dict[str, str] | None:
    """Parse one event line into its key=value fields (None if it is not one)."""
    if not line.startswith("t="):
        return None
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields if "kind" in fields else None
