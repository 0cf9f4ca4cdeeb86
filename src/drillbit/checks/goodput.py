"""Goodput over the observed window.

goodput = (distinct new steps completed x baseline step time) / window wall time, where
the window runs from steady state to the end of observation and recomputed steps (those
replayed after a restore) count once.
"""
from __future__ import annotations

from drillbit.checks.recovery import Measurements
from drillbit.history import History


def goodput(history: History, m: Measurements) -> float | None:
    steady = history.first("steady")
    if steady is None or m.baseline_step_s is None or m.t_observe_end is None:
        return None
    start, end = steady.t, m.t_observe_end
    if end <= start:
        return None
    seen_before = [e.data["n"] for e in history.of("step") if e.t <= start]
    high = max(seen_before) if seen_before else 0
    done = {e.data["n"] for e in history.of("step") if start < e.t <= end and e.data["n"] > high}
    return min(1.0, len(done) * m.baseline_step_s / (end - start))
