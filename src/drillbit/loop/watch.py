"""Watch: the probes that follow the job, built from its profile, and the progress view.

The probes turn the job's own output into history events (``step``, ``detect``,
``restart``, ...). :class:`Progress` follows the ``step`` events as they are recorded, for
the phases that wait on them (steady state, a step trigger, a stall's quiet spell).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, Protocol

from drillbit.core.events import SteadyReached, Step
from drillbit.core.history import Event, History
from drillbit.judging.probes.logs import EventsProbe, HeartbeatProbe, ProgressProbe
from drillbit.judging.probes.preset import signals_of
from drillbit.loop.bind import job_folder
from drillbit.spec.config import JobProfile
from drillbit.spec.placeholders import expand


class Probe(Protocol):
    def start(self) -> None: ...
    def poll_once(self) -> None: ...
    def stop(self) -> None: ...
    def explain(self) -> str:
        """What it read, in words, when the job never reached steady state ('' when it has nothing to say)."""
        ...


# (history, job profile, its log paths, placeholder values) -> the probes of one drill
ProbeFactory = Callable[[History, JobProfile, list[Path], dict[str, str]], list[Probe]]


def log_probes(history: History, job: JobProfile, logs: list[Path], values: dict[str, str]) -> list[Probe]:
    """The probes a job profile asks for: progress from step lines (or the heartbeat file
    when no preset reads steps), and every other signal its presets know."""
    signals = signals_of(job.presets, job.signals)
    base = job_folder(job, Path(values["run_dir"])) if "run_dir" in values else None  # its lines' relative paths
    progress: Probe
    if job.heartbeat_file and not any(s.kind == "step" for s in signals):
        progress = HeartbeatProbe(history, Path(expand(job.heartbeat_file, values)))
    else:
        progress = ProgressProbe(history, logs, signals, base=base)
    return [progress, EventsProbe(history, logs, signals, base=base)]


class Progress:
    """Steps as they arrive. ``tick(delay)`` is the loop's wait: it raises once the drill's
    time is up, so nothing here can wait forever."""

    def __init__(self, history: History, tick: Callable[[float], None]) -> None:
        self.history = history
        self.tick = tick
        self.steps: list[Event] = []
        self._advances = 0
        history.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.kind == "step":
            # the step number as recorded (History.record checked it an int; reading the typed
            # payload here was 40% of recording a step, on a fleet's thousands a second); a step
            # whose number is not one (recorded, then event.invalid) counts no advance
            last = self.steps[-1] if self.steps else None
            n, was = event.data.get("n"), last.data.get("n") if last is not None else None
            if type(n) is int and type(was) is int and n > was and event.t > last.t:  # type: ignore[union-attr]
                self._advances += 1
            self.steps.append(event)

    @property
    def last(self) -> Event | None:
        return self.steps[-1] if self.steps else None

    def baseline(self, last_n: int) -> tuple[float, int]:
        """The median time from one step seen to the next over the last ``last_n`` steps, and
        the newest step. The same step seen again (another rank's line of it), or several
        seen at once (every rank's series in one scrape), is not a step: only a later sight
        of a larger number counts."""
        deltas: list[float] = []
        for a, b in zip(reversed(self.steps[:-1]), reversed(self.steps[1:]), strict=False):
            if Step.of(b).n > Step.of(a).n and b.t > a.t:
                deltas.append(b.t - a.t)
                if len(deltas) == last_n:
                    break
        if not deltas:  # every step seen was the same number (a job whose steps do not count up)
            recent = self.steps[-(last_n + 1):]
            deltas = [b.t - a.t for a, b in zip(recent, recent[1:], strict=False)]
        return statistics.median(deltas), Step.of(self.steps[-1]).n

    def advances(self) -> int:
        """How many times the step number grew: steps, not lines (several ranks may report
        the same step)."""
        return self._advances  # counted as they arrive: the steady phase asks on every tick

    def rate(self, window: float = 5.0) -> float:
        now = time.time()
        return len([e for e in self.steps[-50:] if e.t >= now - window]) / window

    def wait_quiet(self, t_effect: float) -> float | None:
        """Seconds without a step since the effect, once they reach several baseline step
        times; None if steps keep coming (global progress did not stall)."""
        steady = self.history.first("steady")
        baseline = (SteadyReached.of(steady).baseline_step_s if steady else None) or 0.5
        need = max(5 * baseline, 2.0)
        limit = time.time() + need + 10 * baseline + 5.0
        while time.time() < limit:
            last = self.last
            since = time.time() - max(t_effect, last.t if last else t_effect)
            if since >= need:
                return since
            self.tick(0.05)
        return None
