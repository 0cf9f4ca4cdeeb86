"""The history: the append-only record of one drill run.

Every harness action and every observation is an :class:`Event`, written to
``history.jsonl`` and flushed as it happens, so a crash in a checker (or of the
controller) loses nothing. Checkers read a History; nothing else judges. The file is opened
without following a link at its name, for writing and for reading alike (a link or a FIFO
planted there is refused: OSError).
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from pydantic import BaseModel, ConfigDict, Field

from drillbit.core import events
from drillbit.core.events import Kind
from drillbit.core.trust import open_file


class Event(BaseModel):
    """One event: the envelope (when, who recorded it, where) and its payload, ``data``, as
    written to the history file; ``payload`` is the same read through its kind's model
    (core/events.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    t: float
    source: str
    kind: str
    node: str | None = None
    rank: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)

    @cached_property
    def payload(self) -> events.Payload:
        return events.read(self.kind, self.data)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> "Event":
        """A copy; its payload is read anew from its own data (a copy with other data must not
        keep the original's)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("payload", None)
        return copied


class Events(list):
    """Some of a run's events in their order (a check's window of the history), with each kind's
    found in one pass over them: the measurers ask for a kind thirty-odd times, and at 1,024
    nodes each pass over 14,000 events cost 4-8 ms."""

    _by_kind: dict[str, list[Event]] | None = None

    def of(self, kind: str) -> list[Event]:
        if self._by_kind is None:
            by_kind: dict[str, list[Event]] = {}
            for e in self:
                by_kind.setdefault(e.kind, []).append(e)
            self._by_kind = by_kind
        return self._by_kind.get(kind, [])


def of(events: list[Event], *kinds: str) -> list[Event]:
    """The events of these kinds, in their order (from the index where ``events`` keeps one)."""
    if isinstance(events, Events) and len(kinds) == 1:
        return events.of(kinds[0])
    return [e for e in events if e.kind in kinds]


def _a_time(t: float | None, problem: str | None) -> tuple[float | None, str | None]:
    """``t``, or None (now) where it is not a finite number, with that said beside ``problem``."""
    if t is None or math.isfinite(t):
        return t, problem
    said = f"t: {t!r} is not a time; recorded with the time it was recorded at"
    return None, said if problem is None else f"{problem}; {said}"


class History:
    """Events in order; optionally mirrored to a JSONL file, flushed per event."""

    def __init__(self, path: Path | None = None, events: Iterable[Event] = ()) -> None:
        self._events: list[Event] = []
        # each kind's events' places in the history, kept as they are added: the checks and the
        # watch's polls ask for one kind at a time, and a pass over every event for each question
        # grew with the fleet's step lines (14,000 events at 1,024 nodes, asked 9 times a check)
        self._by_kind: dict[str, list[int]] = {}
        for event in events:
            self._put(event)
        self._lock = threading.RLock()  # a listener may record
        self._fh = None if path is None else os.fdopen(  # open for the history's life
            open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", buffering=1, encoding="utf-8")
        self._listeners: list[Any] = []

    def record(self, source: str, kind: str, *, t: float | None = None, node: str | None = None,
               rank: int | None = None, **data: Any) -> Event:
        """Record one event, its payload validated against its kind (core/events.py). A payload
        its kind does not have is kept as given and followed by an ``event.invalid`` event:
        a drillbit bug, which makes the verdict inconclusive; recording never raises on it.
        So is a time that is not a number (NaN, inf: an agent's clock gone wrong): the event
        gets the time it was recorded (JSON has no NaN, and a null there made the file
        unreadable to ``drill report``)."""
        return self.record_many(source, [(kind, t, node, rank, data)])[0]

    def record_many(self, source: str, rows: Iterable[tuple[str, float | None, str | None, int | None,
                                                         dict[str, Any]]]) -> list[Event]:
        """:meth:`record` on each (kind, t, node, rank, data) row, in order: validated before the
        lock is taken, then added in one hold of it and written to the file in one write. A
        probe that fetched a thousand lines' events records them as one, not as a thousand
        turns at a lock every other probe's thread is waiting for."""
        checked = [(kind, *_a_time(t, problem), node, rank, kept) for kind, t, node, rank, data in rows
                   for kept, problem in [events.check(kind, data)]]
        out: list[Event] = []
        with self._lock:
            added: list[Event] = []
            lines: list[str] = []
            try:
                for kind, t, problem, node, rank, kept in checked:
                    out.append(self._new(source, kind, t, node, rank, kept, lines))
                    added.append(out[-1])
                    if problem is not None:
                        added.append(self._new(source, Kind.EVENT_INVALID.value, None, node, rank,
                                               {"recorded_as": kind, "seq": out[-1].seq, "problem": problem}, lines))
            finally:  # a row that cannot be written raises, after the rows before it
                self._write(lines)
                # under the lock: probes on several threads record at once, and a listener (the
                # progress view) must see the events in their order
                for event in added:
                    for listener in list(self._listeners):
                        listener(event)
        return out

    def _new(self, source: str, kind: str, t: float | None, node: str | None, rank: int | None,
             data: dict[str, Any], lines: list[str]) -> Event:
        """The next event, its line added to ``lines`` to be written, then the event appended
        (the caller holds the lock): one that cannot be written raises here and is in neither,
        so the file and the memory keep the same events, numbered without a gap."""
        event = Event(seq=len(self._events), t=time.time() if t is None else t,
                      source=source, kind=kind, node=node, rank=rank, data=data)
        lines.append(event.model_dump_json())
        self._put(event)
        return event

    def _put(self, event: Event) -> None:
        self._by_kind.setdefault(event.kind, []).append(len(self._events))
        self._events.append(event)

    def _write(self, lines: list[str]) -> None:
        if self._fh is not None and lines:
            self._fh.write("\n".join(lines) + "\n")
            self._fh.flush()

    def subscribe(self, listener: Any) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def append(self, event: Event) -> None:
        """Add an event recorded elsewhere (drill report's merge of the agents' records);
        it is not written to this history's file: the caller rewrites the file whole."""
        with self._lock:
            self._put(event)

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def _places(self, kinds: tuple[str, ...]) -> list[int]:
        with self._lock:  # a list copied whole: a probe's thread may be adding to it
            if len(kinds) == 1:
                return list(self._by_kind.get(kinds[0], ()))
            return sorted(i for kind in set(kinds) for i in self._by_kind.get(kind, ()))

    def of(self, *kinds: str) -> list[Event]:
        """The events of these kinds, in the history's order."""
        events = self._events
        return [events[i] for i in self._places(kinds)]

    def first(self, kind: str, *, after: float | None = None, before: float | None = None) -> Event | None:
        for e in self.of(kind):
            if (after is None or e.t >= after) and (before is None or e.t <= before):
                return e
        return None

    def last(self, kind: str, *, before: float | None = None) -> Event | None:
        for e in reversed(self.of(kind)):
            if before is None or e.t < before:
                return e
        return None

    def unreadable(self) -> list[tuple[Event, str]]:
        """Events whose payload this version's models do not read and that nothing recorded as
        invalid when they were written: a history an older (or newer) drillbit wrote."""
        known = {e.data.get("seq") for e in self._events if e.kind == Kind.EVENT_INVALID}
        out = []
        for e in self._events:
            if e.seq not in known and e.kind != Kind.EVENT_INVALID:
                _, problem = events.check(e.kind, e.data)
                if problem is not None:
                    out.append((e, problem))
        return out

    @classmethod
    def load(cls, path: Path) -> "History":
        """Read a history.jsonl. A torn last line (the controller died mid-write) is left out;
        a bad line anywhere else is an error."""
        with os.fdopen(open_file(Path(path)), encoding="utf-8") as fh:
            lines = [line for line in fh.read().splitlines() if line.strip()]
        events = []
        for i, line in enumerate(lines):
            try:
                events.append(Event.model_validate(json.loads(line)))
            except ValueError as exc:
                if i == len(lines) - 1:
                    break
                raise ValueError(f"{path}:{i + 1}: not an event: {exc}") from None
        return cls(events=events)

    @classmethod
    def build(cls, rows: Iterable[tuple[float, str, dict[str, Any]] | tuple[float, str]]) -> "History":
        """A history from (t, kind[, data]) rows: how tests hand-build one. A field the kind
        requires and the row leaves out gets a stand-in (events.stand_ins), so a test names
        only what it is about."""
        history = cls()
        for row in rows:
            t, kind = row[0], row[1]
            data = dict(row[2]) if len(row) > 2 else {}  # type: ignore[misc]
            rank = data.pop("rank", None)
            history.record("test", kind, t=t, rank=rank, **{**events.stand_ins(kind, data), **data})
        return history
