"""Checkpoint saves seen as file events, and the crash points inside one save.

A save is a burst of file events under the checkpoint folder (:mod:`drillbit.core.dirwatch`): it
begins with the first create or publish after the watch is armed, after a quiet spell of
``settle_s`` without events, or with a file written again that this save already closed (a
file rewritten in place by every save, faster than any quiet spell), and ends with the next
quiet spell or the next save. A quiet spell inside the folder the save itself created does
not end it: a writer paused mid-save (the Hugging Face Trainer between its config files and
its weights, on a loaded machine) or a late flush (DCP's ``.metadata`` after an asynchronous
save) is still in that save, and what comes outside that folder after such a pause is the
next save, however soon (the next checkpoint folder), so saves never chain into one. Deletes (the job pruning an
old checkpoint) belong to whichever save is open, and never start one.

A :class:`CrashPoint` names where in a save a crash lands: at the ``create`` of a file (it
exists and is being written: what a crash *before* it is complete leaves), at its ``close``
(written, and nothing after it yet), ``torn`` (closed, then cut to half its size after the
crash: what a page cache never flushed leaves), or at a ``publish`` (the rename that puts a
folder or file in place). Files are named by a pattern of their name — digits turned into
``*``, so ``.tmp-step_00000020-4711`` matches the same point in every save — and the
occurrence of that pattern within the save (``shard_*.pt`` #2 is the second shard).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Literal

from drillbit.core.dirwatch import FileEvent

PointKind = Literal["create", "close", "torn", "publish"]
_LABEL = re.compile(r"^(create|close|torn|publish) (\S+?)(?: #(\d+))?$")


def pattern_of(name: str) -> str:
    """The name with every run of digits made a wildcard: the same file in any save. A
    temporary file's random name (``.tmpuOfxnN``, as tempfile and the writers built on it
    make them) is ``.tmp*``."""
    if re.fullmatch(r"\.?tmp[A-Za-z0-9_]{4,12}", name):
        return name[: name.index("tmp") + 3] + "*"
    return re.sub(r"\d+", "*", name)


@dataclass(frozen=True)
class CrashPoint:
    kind: PointKind
    file: str = "*"          # fnmatch pattern on the file's or folder's own name
    occurrence: int = 1      # the n-th event of that kind and pattern in the save

    @property
    def event(self) -> str:
        """The file event the crash lands on (a torn file is first closed)."""
        return "close" if self.kind == "torn" else self.kind

    def label(self) -> str:
        return f"{self.kind} {self.file}" + (f" #{self.occurrence}" if self.occurrence > 1 else "")

    @classmethod
    def parse(cls, text: str) -> "CrashPoint":
        m = _LABEL.match(text.strip())
        if not m:
            raise ValueError(f"crash point {text!r}: write it as 'KIND PATTERN [#N]', KIND one of create, close, "
                             "torn, publish (e.g. 'torn shard_*.pt', 'publish step_*')")
        return cls(kind=m.group(1), file=m.group(2), occurrence=int(m.group(3) or 1))  # type: ignore[arg-type]

    def matches(self, event: FileEvent, seen: dict[tuple[str, str], int]) -> bool:
        """Is ``event`` this point? ``seen`` counts earlier matches in the same save."""
        if event.kind != self.event or not fnmatch.fnmatchcase(event.name, self.file):
            return False
        key = (self.event, self.file)
        seen[key] = seen.get(key, 0) + 1
        return seen[key] == self.occurrence


@dataclass
class Save:
    number: int
    events: list[FileEvent] = field(default_factory=list)
    paused: bool = False  # it went on inside its own folder after a quiet spell

    @property
    def started(self) -> float:
        return self.events[0].t

    def made(self) -> set[str]:
        """The folders directly under the checkpoint folder that this save created."""
        return {e.path for e in self.events if e.kind == "create" and e.is_dir and e.path == e.top}

    def tops(self) -> set[str]:
        """The entries directly under the checkpoint folder that the save touched."""
        return {e.top for e in self.events}

    def files(self) -> dict[str, dict]:
        """Each file the save created: its last known size and whether it was closed."""
        out: dict[str, dict] = {}
        for e in self.events:
            if e.is_dir:
                continue
            if e.kind == "create":  # a write begins (a new file, or one rewritten in place)
                out[e.path] = {"size": e.size, "closed": False}
            elif e.kind == "close":
                out.setdefault(e.path, {"size": e.size, "closed": False}).update(size=e.size, closed=True)
        return out


class SaveTracker:
    """Cut a stream of file events into saves."""

    def __init__(self, settle_s: float = 0.5) -> None:
        self.settle_s = settle_s
        self.saves: list[Save] = []
        self._last_t: float | None = None

    @property
    def current(self) -> Save | None:
        return self.saves[-1] if self.saves else None

    def feed(self, event: FileEvent) -> Save | None:
        """Add one event; returns the save it belongs to (None: a delete outside any save).
        A file written again after it closed in the open save begins the next save, quiet
        spell or not: a job that rewrites ``ckpt.pt`` in place with ``torch.save`` every step
        saves more often than any quiet spell, and each rewrite is one save."""
        quiet = self._last_t is None or event.t - self._last_t >= self.settle_s
        current = self.current
        rewrite = current is not None and event.kind == "create" and not event.is_dir \
            and any(e.kind == "close" and e.path == event.path for e in current.events)
        # only across a quiet spell, or after such a pause, is it asked what folders the save made
        inside = current is not None and (quiet or current.paused) and event.path != event.top \
            and event.top in current.made()
        if quiet and not rewrite and inside and current is not None and event.kind != "delete":
            quiet, current.paused = False, True  # a pause in the save (a busy writer, a late flush), not a new save
        elif current is not None and current.paused and not inside and event.kind != "delete":
            quiet = True  # after such a pause, what is outside its folder is the next save, however soon
        quiet = quiet or rewrite
        if event.kind != "delete":
            self._last_t = event.t
        if quiet and event.kind != "delete":
            self.saves.append(Save(number=len(self.saves) + 1))
        elif quiet and event.kind == "delete":
            return None
        save = self.saves[-1]
        save.events.append(event)
        return save

    def ended(self, now: float) -> bool:
        """The current save is over: nothing came for ``settle_s``."""
        return self._last_t is not None and now - self._last_t >= self.settle_s


def crash_points(save: Save) -> list[CrashPoint]:
    """Every crash point one recorded save offers, in the order the save reached them."""
    counts: dict[tuple[str, str], int] = {}
    points: list[CrashPoint] = []

    def add(kind: PointKind, event: str, pattern: str) -> None:
        n = counts.get((event, pattern), 0)
        points.append(CrashPoint(kind=kind, file=pattern, occurrence=n))

    for e in save.events:
        if e.kind == "delete":
            continue
        pattern = pattern_of(e.name)
        counts[(e.kind, pattern)] = counts.get((e.kind, pattern), 0) + 1
        if e.kind == "create":
            add("create", "create", pattern)
        elif e.kind == "close":
            add("close", "close", pattern)
            add("torn", "close", pattern)
        elif e.kind == "publish":
            add("publish", "publish", pattern)
    return points


def sample(points: list[CrashPoint], n: int | None) -> list[CrashPoint]:
    """``n`` points spread evenly over the save, first and last included (all when n is None)."""
    if n is None or n >= len(points):
        return list(points)
    if n <= 1:
        return points[-1:] if n == 1 else []
    idx = sorted({round(i * (len(points) - 1) / (n - 1)) for i in range(n)})
    return [points[i] for i in idx]
