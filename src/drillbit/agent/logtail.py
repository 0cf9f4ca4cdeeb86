"""The job's logs, read on the node that writes them.

A cluster without a shared filesystem has its logs on the nodes. The agent follows the
files named for its node, matches the profile's signals there, and keeps the events until
the controller fetches them (``tail_fetch``), with times on the agent's clock (the client
moves them onto the controller's). Back-pressure, not loss: when ``max_buffer`` events are
waiting, the agent stops reading, and the lines stay in the file until the controller
catches up. What can still be lost — a file replaced or truncated before its last bytes
were read — is counted and reported as a gap, never dropped silently.
"""
from __future__ import annotations

import threading
from collections import deque

from drillbit.judging.probes.logs import LineReader
from drillbit.judging.probes.preset import Matcher
from drillbit.judging.probes.tail import FileSet
from drillbit.spec.signals import Signal

CHUNK = 1 << 20  # bytes read per file per poll


class LogTail:
    def __init__(self, paths: list[str], signals: list[Signal], *, clock, max_buffer: int = 20_000,
                 poll: float = 0.1, base: str | None = None) -> None:
        self.files = FileSet(paths)  # globs followed as their files appear
        self.reader = LineReader(Matcher(signals, base))
        self._clock = clock
        self.max_buffer = max_buffer
        self._poll = poll
        self._events: deque[dict] = deque()
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._stop = threading.Event()
        self.paused = 0  # polls skipped because the buffer was full
        self._reported_lost = 0
        self._thread = threading.Thread(target=self._run, name="logtail", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._poll)

    def poll_once(self) -> None:
        with self._reading:  # one reader at a time: the thread, or a final poll at stop
            self._poll_locked()

    def _poll_locked(self) -> None:
        with self._lock:
            full = len(self._events) >= self.max_buffer
        if full:
            self.paused += 1
            for follower in self.files.followers():
                follower.observe()  # a rotation while we wait still counts what it took with it
            self._report_lost([])
            return
        for follower in self.files.followers():
            lines = follower.read_lines(CHUNK)
            now = self._clock()
            out = [{"kind": kind, "t": t if t is not None else now, "rank": rank, "data": data}
                   for line in lines for kind, t, rank, data in self.reader.hits(line)]
            self._report_lost(out)

    def _report_lost(self, out: list[dict]) -> None:
        lost = self.files.lost - self._reported_lost
        if lost > 0:
            self._reported_lost += lost
            out.append({"kind": "probe.gap", "t": self._clock(), "rank": None,
                        "data": {"lost_bytes": lost, "why": "a log file was replaced or truncated before "
                                                          "its last lines were read"}})
        if out:
            with self._lock:
                self._events.extend(out)

    def fetch(self, max_events: int) -> tuple[list[dict], bool]:
        with self._lock:
            n = min(max_events, len(self._events))
            batch = [self._events.popleft() for _ in range(n)]
            return batch, bool(self._events)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll_once()

