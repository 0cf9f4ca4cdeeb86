"""The history: the append-only record of one drill run.

Every harness action and every observation is an :class:`Event`, written to
``history.jsonl`` and flushed as it happens, so a crash in a checker (or of the
controller) loses nothing. Checkers read a History; nothing else judges. The file is opened
without following a link at its name, for writing and for reading alike (a link or a FIFO
planted there is refused: OSError).
"""
from __future__ import annotations

import bisect
import json
import math
import os
import threading
import time
from array import array
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from drillbit.core import events
from drillbit.core.events import Kind, Step
from drillbit.core.heap import frozen
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


class StepLine(NamedTuple):
    """A step event's fields that the measurers walk, read once from its payload: the checks walk
    a run's step lines a dozen times, and at 1,024 nodes (12,000 step events) a walk over the
    events themselves, allocated one by one over a 30 s drill among everything else it
    allocated, cost three times a walk over the same events read back from the file."""

    t: float
    seq: int
    rank: int | None            # the event's own (the node's probe put it there)
    n: int
    since: float | None
    new_attempt: bool | None
    line_rank: int | None       # the rank the line is from: the event's, else an int group named rank
    named: frozenset[str]       # the payload's fields, as the line gave them
    printed: frozenset[str]     # those with a value
    event: Event

    @classmethod
    def of(cls, event: Event) -> "StepLine":
        """The line of one step event; raises as Step.of does where its payload does not read."""
        step, data = Step.of(event), event.data
        return cls(event.t, event.seq, event.rank, step.n, step.since, step.new_attempt, rank_of(event),
                   _shared(tuple(data)), _shared(tuple(k for k, v in data.items() if v is not None)), event)


def rank_of(e: Event) -> int | None:
    """The rank a line is from: the event's own, else an int group named rank."""
    r = e.rank if e.rank is not None else e.data.get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) else None


_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _shared(keys: tuple[str, ...]) -> frozenset[str]:
    """One frozenset for each set of field names: a fleet's step lines all name the same few."""
    found = _SETS.get(keys)
    if found is None:
        if len(_SETS) > 4096:  # payloads with names of their own (a job's groups): not worth keeping
            return frozenset(keys)
        found = _SETS.setdefault(keys, frozenset(keys))
    return found


class Events(list):
    """Some of a run's events in their order (a check's window of the history), with each kind's
    places found in one pass over them: the measurers ask for a kind thirty-odd times, and at
    1,024 nodes each pass over 14,000 events cost 4-8 ms. ``steps``: the window's step lines,
    where whoever made the window had them already (the history keeps them as they come)."""

    _places: dict[str, list[int]] | None = None
    steps: list[StepLine] | None = None
    unread: list[Event] = []  # the step events among them whose payload does not read (with ``steps``)

    @classmethod
    def placed(cls, events: Iterable[Event], places: dict[str, list[int]]) -> "Events":
        """The events, with each kind's places in them already known."""
        out = cls(events)
        out._places = {kind: at for kind, at in places.items() if at}
        return out

    def of(self, *kinds: str) -> list[Event]:
        if self._places is None:
            places: dict[str, list[int]] = {}
            for i, e in enumerate(self):
                places.setdefault(e.kind, []).append(i)
            self._places = places
        if len(kinds) == 1:
            return [self[i] for i in self._places.get(kinds[0], ())]
        return [self[i] for i in sorted(i for kind in set(kinds) for i in self._places.get(kind, ()))]


def of(events: list[Event], *kinds: str) -> list[Event]:
    """The events of these kinds, in their order (from the index where ``events`` keeps one)."""
    if isinstance(events, Events):
        return events.of(*kinds)
    return [e for e in events if e.kind in kinds]


def steps_of(events: list[Event]) -> list[StepLine]:
    """The step lines of ``events``, in their order (those the window kept, where it has them).
    Raises as Step.of does where a step event's payload does not read."""
    if isinstance(events, Events) and events.steps is not None:
        for e in events.unread:
            Step.of(e)  # raises
        return events.steps
    return [StepLine.of(e) for e in of(events, Kind.STEP)]


def _without(events: list[Event], out: list[int]) -> list[Event]:
    """``events`` less those at the places ``out`` (ascending), copied in slices between them."""
    kept: list[Event] = []
    start = 0
    for i in out:
        kept.extend(events[start:i])
        start = i + 1
    kept.extend(events[start:])
    return kept


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
        self._steps: list[StepLine] = []  # the step events' lines, read as steps() is asked for them
        self._unread: list[int] = []      # the places of step events whose payload does not read
        self._steps_read = 0              # the step events read so far, into either
        self._reading = threading.Lock()  # taken before the lock, never while holding it
        self._times = array("d")  # each event's time, beside it: a window is cut without reading an event
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
        self._times.append(event.t)
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

    def window(self, end: float | None, also: tuple[str, ...] = ()) -> Events:
        """The events to ``end`` (every one, without it), and those of the kinds ``also`` whatever
        their time, in the history's order, with their kinds' places and their step lines
        (``steps``; ``unread``: the step events among them whose payload does not read). Cut from
        the times and kinds the history keeps beside its events, without reading an event (the
        checks' window at 1,024 nodes, 14,000 events allocated over a drill, cost 10-20 ms to
        filter), and taken in one hold of the lock: its step lines are its own step events'."""
        with self._reading:
            self._read_steps()  # most of them outside the lock: a probe's thread records meanwhile
            with self._lock:
                self._read_steps()  # the few recorded since
                events, times = list(self._events), self._times[:]
                by_kind = {kind: list(places) for kind, places in self._by_kind.items()}
                lines, unread = list(self._steps), [self._events[i] for i in self._unread]
        if end is None:
            window = Events.placed(events, by_kind)
        else:
            also_at = {i for kind in also for i in by_kind.get(kind, ())}
            # the events left out: after the end (NaN is no time before it) and not of those kinds.
            # Few, and nearly all at the history's end (what the drill recorded after the watch)
            out = [i for i, t in enumerate(times) if not t <= end and i not in also_at]
            gone = set(out)

            def moved(places: list[int]) -> list[int]:  # places in the window: less those left out before them
                unmoved = bisect.bisect_left(places, out[0])
                return places[:unmoved] + [i - bisect.bisect_left(out, i) for i in places[unmoved:] if i not in gone]

            window = Events.placed(events, by_kind) if not out else Events.placed(
                _without(events, out), {kind: moved(places) for kind, places in by_kind.items()})
            also_steps = Kind.STEP.value in also
            lines = [s for s in lines if s.t <= end or also_steps]
            unread = [e for e in unread if e.t <= end or also_steps]
        window.steps, window.unread = lines, unread
        return window

    def steps(self) -> list[StepLine]:
        """The step events' lines (:class:`StepLine`), in the history's order, less those whose
        payload does not read (:meth:`unread_steps`). Each is read from its event once, the
        first time it is asked for after it was recorded, outside the history's lock: the
        watch asks on every poll, and the checks after the drill find them read."""
        with self._reading:
            self._read_steps()
        with self._lock:
            return list(self._steps)

    def unread_steps(self) -> list[Event]:
        """The step events whose payload does not read (a history an older drillbit wrote, a
        bug): left out of :meth:`steps`; a measurer that needs them says so, as Step.of does."""
        with self._reading:
            self._read_steps()
        with self._lock:
            return [self._events[i] for i in self._unread]

    def times(self, kind: str) -> list[float]:
        """The times of the events of one kind, in the history's order, without reading one."""
        with self._lock:
            return [self._times[i] for i in self._by_kind.get(kind, ())]

    def _read_steps(self) -> None:
        """The step events recorded since the last call, read into lines. The caller holds
        ``_reading`` (one reader at a time, so each is read once and the lines stay in order);
        with the history's lock held too, they are read under it."""
        with self._lock:
            new = [(i, self._events[i]) for i in self._by_kind.get(Kind.STEP.value, [])[self._steps_read:]]
        lines: list[StepLine] = []
        unread: list[int] = []
        for i, event in new:
            try:
                lines.append(StepLine.of(event))
            except (ValueError, TypeError):
                unread.append(i)
        with self._lock:
            self._steps.extend(lines)
            self._unread.extend(unread)
            self._steps_read += len(new)

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
        a bad line anywhere else is an error. Read with the heap frozen out of the collector's
        walks (core/heap.py): in a drill's process at 1,024 nodes a load cost twice as much
        without."""
        with os.fdopen(open_file(Path(path)), encoding="utf-8") as fh:
            lines = [line for line in fh.read().splitlines() if line.strip()]
        events = []
        with frozen():  # every event is kept: the collector's walks over the heap would find nothing
            for i, line in enumerate(lines):
                try:  # pydantic's own JSON reader: a third faster than json's and a model from its dict
                    events.append(Event.model_validate_json(line))
                    continue
                except ValueError:
                    pass
                try:  # what it refuses, read as before: json's reader is the file's contract, and its words
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
