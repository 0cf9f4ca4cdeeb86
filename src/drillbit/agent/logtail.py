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

import contextlib
import os
import sys
import threading
import time
import traceback
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
        self.paused = 0  # polls skipped because the buffer was full
        self._reported_lost = 0
        self._stopped = False
        _POLLER.add(self)

    @property
    def period(self) -> float:
        return self._poll

    def poll_once(self) -> None:
        with self._reading:  # one reader at a time: the poller, or a final poll at stop
            if not self._stopped:
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
        """The last read, then no more: a poll the poller had begun is waited for, and none comes
        after (what it read would be fetched by no one)."""
        _POLLER.remove(self)
        with self._reading:
            if not self._stopped:
                try:
                    self._poll_locked()
                finally:
                    self._stopped = True


class _Poller:
    """One thread a process polls every log tail in it, each every ``poll`` seconds. An agent
    has one tail; a process that holds many agents (the controller of a process-engine cluster,
    64 simulated nodes a host in bench/fleetsim.py) had a thread per tail, and 1,024 of them
    waking ten times a second cost 0.6-0.8 CPU-s a second on 2 cores, about 70 us a wake-up
    for a stat that found nothing new (docs/fleet-scale.md).

    A tail whose read raises (anything, SystemExit included) is dropped with its traceback
    printed where stderr still takes it, as its own thread died before; the others go on. The
    reads are one after another: in a process of many tails, one whose file hangs (a dead NFS
    server) holds up the others' reads, where a thread each held up only its own; an agent on
    its node has one tail (helper-22). A forked child starts with no tails of its parent's and
    its own reader for those it starts."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[LogTail, float] = {}  # each tail's next read, monotonic
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, tail: LogTail) -> None:
        with self._lock:
            self._due[tail] = 0.0  # read at once, as its own thread did
            self._ensure_thread()
        self._wake.set()

    def _ensure_thread(self) -> None:
        """A running reader (the caller holds the lock); one that cannot start raises, and the
        tails waiting for it are left for the next add to start one."""
        if self._thread is not None and self._thread.is_alive():
            return
        thread = threading.Thread(target=self._run, name="logtail", daemon=True)
        thread.start()
        self._thread = thread

    def remove(self, tail: LogTail) -> None:
        with self._lock:
            self._due.pop(tail, None)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
                    if self._due:  # a tail added as it ended, or it ended some other way: another takes over
                        with contextlib.suppress(Exception):
                            self._ensure_thread()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._due:
                    return  # _run lets go of the thread; the next add starts another
                now = time.monotonic()
                due = [tail for tail, at in self._due.items() if at <= now]
            for tail in due:
                try:
                    tail.poll_once()
                except BaseException:  # noqa: BLE001 — one tail's end, never the others'
                    with contextlib.suppress(BaseException):  # a stderr whose reader is gone
                        traceback.print_exc(file=sys.stderr)
                    self.remove(tail)
                    continue
                with self._lock:
                    if tail in self._due:
                        self._due[tail] = time.monotonic() + tail.period
            with self._lock:
                soonest = min(self._due.values(), default=0.0)
            self._wake.wait(max(0.0, soonest - time.monotonic()))
            self._wake.clear()


_POLLER = _Poller()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POLLER._reset)  # the parent's lock may be held, its thread is not here
