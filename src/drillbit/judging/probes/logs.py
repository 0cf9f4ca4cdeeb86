"""The probes: a thread that follows the job's logs and records what the presets match.

``ProgressProbe`` records ``step`` events (from step lines, or from a heartbeat file whose
content is ``<step> <epoch>``); ``EventsProbe`` records everything else a preset knows
(detect, restart, restore, ckpt.save, ...). Both stamp an event with the time in the line
when the line has one, else with the time it was read.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from drillbit.core.history import History
from drillbit.judging.probes.poller import Poller
from drillbit.judging.probes.preset import NEW_ATTEMPT, Matcher, matcher
from drillbit.spec.signals import Signal
from drillbit.judging.probes.tail import FileSet


class LineReader:
    """What reading a job's log does to each line, on the controller (LogProbe) or on a node
    (agent/logtail.py): count it, keep the first lines no signal matched, take a step
    number seen twice in a row (a progress bar redrawn) as one step — unless a restart or
    restore line came between (a job killed at step 21 that restored step 20 steps 21 again:
    that step is the new attempt's first, and says so: ``new_attempt``) — and the same membership
    printed again as no change.
    ``resets``: where ``match`` reads no restart or restore lines (the controller's progress
    probe), a matcher that does."""

    def __init__(self, match: Matcher, resets: Matcher | None = None) -> None:
        self._match = match
        self._resets = resets
        self.lines = 0  # lines read, for "no steady state" to say what the logs held
        self.unmatched: list[str] = []  # the first few lines no signal matched
        self._last_step: int | None = None
        self._reset = False  # a restart or restore line since the last step
        self._last_members: dict[str | None, str] = {}

    def hits(self, line: str) -> list[tuple[str, float | None, int | None, dict]]:
        """(kind, time from the line or None, rank, data) for each signal the line fires."""
        self.lines += 1
        if self._resets is not None and self._resets.match(line):
            self._last_step, self._reset = None, True
        hits = self._match.match(line, repeat_of=self._last_step)
        if not hits and len(self.unmatched) < 5 and line.strip():
            self.unmatched.append(line[:200])
        out = []
        for kind, t, data in hits:
            if kind in NEW_ATTEMPT:
                self._last_step, self._reset = None, True
            elif kind == "step":
                if data.get("n") == self._last_step:
                    continue  # the same step again: one step, one event
                self._last_step = data.get("n")
                if self._reset:
                    data["new_attempt"] = True
                    self._reset = False
            elif kind == "members":
                key = repr(sorted((k, v) for k, v in data.items() if k != "t_source"))
                if key == self._last_members.get(data.get("by")):
                    continue  # the same membership again (stacks print it every step): one change, one event
                self._last_members[data.get("by")] = key
            out.append((kind, t, data.pop("rank", None), data))
        return out


class LogProbe(Poller):
    source = "probe:logs"
    final_poll = True  # the lines written just before the stop

    def __init__(self, history: History, paths: list[Path], match: Matcher, poll: float = 0.1,
                 resets: Matcher | None = None) -> None:
        super().__init__(poll)
        self.name = self.source
        self._history = history
        self.files = FileSet(paths)  # globs followed as their files appear
        self.reader = LineReader(match, resets)
        self._reading = threading.Lock()

    def poll_once(self) -> None:
        """Read what the logs gained since the last read. Safe from any thread: the runner reads
        the logs to their end itself, from its own thread, just before it injects a fault (what
        was written before the fault is stamped before it) and when the job exits."""
        with self._reading:  # one reader at a time: the probe's thread or the runner's
            self._read()

    def _poll_step(self) -> None:
        """The probe's own thread: a read that fails is recorded (the drill's checks see the
        gap) and the next poll reads on; the thread never ends on it."""
        try:
            self.poll_once()
        except Exception as exc:  # noqa: BLE001 — recorded, as the agents' log probe does
            self._history.record(self.source, "probe.error", detail=f"{exc.__class__.__name__}: {exc}")

    def _read(self) -> None:
        for follower in self.files.followers():
            for line in follower.read_lines():
                for kind, t, rank, data in self.reader.hits(line):
                    self._history.record(self.source, kind, t=t, rank=rank, **data)


class ProgressProbe(LogProbe):
    source = "probe:progress"

    def __init__(self, history: History, paths: list[Path], signals: list[Signal], poll: float = 0.1,
                 base: str | None = None) -> None:
        super().__init__(history, paths, matcher(signals, kinds={"step"}, base=base), poll,
                         resets=matcher(signals, kinds=set(NEW_ATTEMPT), base=base))
        self.paths = paths
        self.step_patterns = [s.pattern for s in signals if s.kind == "step"]

    def missing(self) -> dict[str | None, list[str]]:
        """The logs followed here that no file answers yet (by node: None, this machine)."""
        gone = self.files.missing()
        return {None: gone} if gone else {}

    def explain(self) -> str:
        """Why no step was seen, in terms a person can fix."""
        missing = self.files.missing()
        parts = [f"step signals: {self.step_patterns or 'none'}",
                 f"the logs held {self.reader.lines} line(s)"
                 + (f"; not found: {', '.join(missing)}" if missing else f" ({', '.join(map(str, self.paths))})")]
        if self.reader.unmatched:
            parts.append("first lines no step signal matched: "
                         + " | ".join(repr(u) for u in self.reader.unmatched[:3]))
        return "; ".join(parts)


class EventsProbe(LogProbe):
    source = "probe:events"

    def __init__(self, history: History, paths: list[Path], signals: list[Signal], poll: float = 0.1,
                 base: str | None = None) -> None:
        super().__init__(history, paths, matcher(signals, exclude={"step"}, base=base), poll)


class HeartbeatProbe(LogProbe):
    """Progress from a heartbeat file holding ``<step> <epoch>``, for jobs without step lines."""

    source = "probe:progress"

    def __init__(self, history: History, path: Path, poll: float = 0.1) -> None:
        super().__init__(history, [], Matcher([]), poll)
        self._path = Path(path)
        self._last: int | None = None

    def _read(self) -> None:
        try:
            fields = self._path.read_text().split()
            n, t = int(fields[0]), float(fields[1])
        except (OSError, ValueError, IndexError):
            return
        if n != self._last:
            self._last = n
            self._history.record(self.source, "step", t=t if t <= time.time() + 1 else None, n=n)
