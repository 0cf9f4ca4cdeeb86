"""Stop conditions (``abort.when``): the job's own metrics, read from the cluster's Prometheus
by a thread of the controller every ``abort.check_every``. A condition that holds for its
``for`` stops the drill: the loop's next wait raises Aborted naming it and the value seen,
and the heal runs as on every ending (exit 4).

Every condition is evaluated once before anything is launched: a Prometheus that cannot be
reached or a query it refuses is a config error (exit 2), nothing touched. A condition that
cannot be read during the drill for 30 s (or its ``for``, if longer) stops it too: a drill
does not go on without the brake it was given.

A condition is live once it has read healthy (not holding; an empty answer counts, as a
counter that only exists once something went wrong) after the job reached its steady state:
before that the job is starting, and a metric of a job not yet up (Prometheus' ``up`` of an
endpoint not yet listening is 0) says nothing about the drill. The fault waits up to 30 s for
every condition to be live, and the drill is aborted with nothing injected when one never is
(``not_live``).
"""
from __future__ import annotations

from typing import Any

import math
import time

from drillbit.core.errors import ConfigError
from drillbit.core.history import History
from drillbit.loop.nemesis import HARNESS
from drillbit.judging.probes.poller import Poller
from drillbit.judging.probes.prometheus import PrometheusError, describe, query
from drillbit.spec.models import StopCondition

UNREADABLE_S = 30.0


def label(cond: StopCondition) -> str:
    side = f"above {cond.above:g}" if cond.above is not None else f"below {cond.below:g}"
    held = f" for {cond.for_:g} s" if cond.for_ else ""
    return f"{cond.name or cond.prometheus} {side}{held}"


def holds(cond: StopCondition, value: float) -> bool:
    if math.isnan(value):
        return False
    return value > cond.above if cond.above is not None else value < cond.below  # type: ignore[operator]


class StopWatch(Poller):
    name = "drillbit-stop-conditions"

    def __init__(self, conditions: list[StopCondition], url: str, every: float, history: History,
                 counting: bool = True) -> None:
        super().__init__(every, join_timeout=15.0)
        self.conditions = conditions
        self.url = url
        self.history = history
        self.fired: str | None = None
        self._since: list[float | None] = [None] * len(conditions)
        self._unread_since: list[float | None] = [None] * len(conditions)
        self._live: list[bool] = [False] * len(conditions)
        self.counting = counting  # False until the job's steady state: readings before it are the job starting

    def check_ready(self) -> None:
        """Each condition once, before the drill touches anything; every problem at once."""
        problems = []
        for cond in self.conditions:
            try:
                query(self.url, cond.prometheus)
            except PrometheusError as exc:
                problems.append(f"abort.when {label(cond)!r}: {exc}")
        if problems:
            raise ConfigError("stop conditions cannot be read, so the drill would run without its brake: "
                              + "; ".join(problems))
        self.history.record(HARNESS, "stop.armed", prometheus=self.url,
                            conditions=[label(c) for c in self.conditions])

    def done(self) -> bool:
        return self.fired is not None

    def poll_once(self) -> None:
        self.check_once()

    def check_once(self, now: float | None = None) -> str | None:
        for i, cond in enumerate(self.conditions):
            now = time.time() if now is None else now
            try:
                samples = query(self.url, cond.prometheus)
            except PrometheusError as exc:
                since = self._unread_since[i] = self._unread_since[i] or now
                if now - since >= max(UNREADABLE_S, cond.for_ or 0.0):
                    return self._fire(cond, f"stop condition {label(cond)!r} could not be read for "
                                            f"{now - since:.0f} s: {exc}", unreadable=True)
                continue
            self._unread_since[i] = None
            hits = [(labels, v) for labels, v in samples if holds(cond, v)]
            if not hits:
                self._since[i] = None
                if not self._live[i] and self.counting:
                    self._live[i] = True
                    self.history.record(HARNESS, "stop.live", condition=label(cond))
                continue
            if not self._live[i]:
                continue  # not healthy since the steady state yet: the job is still starting
            since = self._since[i] = self._since[i] or now
            if now - since >= (cond.for_ or 0.0):
                labels, value = max(hits, key=lambda h: h[1]) if cond.above is not None else min(hits, key=lambda h: h[1])
                series = describe(labels)
                return self._fire(cond, f"stop condition {label(cond)!r} held: {series + ' ' if series else ''}"
                                        f"was {value:g}" + (f" for {now - since:.0f} s" if cond.for_ else ""),
                                  value=value, series=series)
        return None

    def not_live(self) -> list[str]:
        """The conditions that have not read healthy since the steady state (they cannot brake yet)."""
        return [label(c) for c, live in zip(self.conditions, self._live, strict=False) if not live]

    def _fire(self, cond: StopCondition, reason: str, **data: Any) -> str:
        self.fired = reason
        self.history.record(HARNESS, "stop.fired", condition=label(cond), query=cond.prometheus, reason=reason, **data)
        return reason
