"""drillbit's own confirmation of a fail-slow fault (issue 58): which rank the job's own
per-rank step times say slowed, and by how much, independent of the job's detector.

A job that prints each rank's own time in each step (``rank.time`` events: the part of the
step before the rank waits for its peers, the compute that tells ranks apart, since after an
all-reduce every rank has waited for the slowest) gives drillbit the evidence a detector has.
Per step, each rank's time is divided by the median of that step's ranks, so what every rank
shares (a slow step, a busy machine) cancels; a rank's **shift** is the median of those
ratios while the fault is on over their median just before it, less one. Its noise is the
standard error of that difference of medians, from the spread (MAD) of the rank's own ratios
before the fault (at least 0.05%): with no fault on both sides share it, and a fault that
makes the rank's times vary more must not hide the shift it causes. A rank is **named**
when its shift is at least :data:`Z` of those errors above zero, the largest such; none is
named otherwise (and with fewer than :data:`MIN_RANKS` ranks or :data:`MIN_STEPS` steps a
side, nothing can be, and the result says so). The time to name
is the first step at which the steps so far while the fault was on were enough.

The same test on a stretch with no fault on (its first half against its second) is the null
level: a rank named there is a false name.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from drillbit.core.history import Event

MIN_RANKS = 3     # a median of peers needs a fleet
MIN_STEPS = 10    # steps a side before a shift is read
BEFORE_STEPS = 60  # at most this many steps just before the fault
Z = 5.0           # how many standard errors above zero a shift must be to name its rank
SPREAD_FLOOR = 5e-4  # the least spread a rank's ratios are taken to have


@dataclass(frozen=True)
class Named:
    rank: int | None        # None: nobody stood out
    shift: float | None     # the named rank's own slowdown against its peers (0.01 = 1%)
    z: float | None         # how many standard errors that is
    t: float | None         # when the evidence first sufficed
    steps_before: int
    steps_after: int
    why: str | None = None  # why nothing could be read (too few ranks or steps)
    shifts: dict[int, float] | None = None  # every rank's shift, named or not


def _finite_pos(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def ratios(events: Iterable[Event]) -> dict[int, list[tuple[float, float]]]:
    """rank -> [(time, its step time over the median of that step's ranks)], in time order.
    A step counts once per rank (the last line wins: a restarted attempt repeats steps);
    times that are not finite and positive are left out."""
    by_step: dict[int, dict[int, tuple[float, float]]] = defaultdict(dict)
    for e in events:
        if e.kind != "rank.time" or e.rank is None:
            continue
        n, s = e.data.get("n"), _finite_pos(e.data.get("s"))
        if not isinstance(n, int) or s is None:
            continue
        by_step[n][e.rank] = (e.t, s)
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for ranks in by_step.values():
        if len(ranks) < MIN_RANKS:
            continue
        med = statistics.median(s for _, s in ranks.values())
        for rank, (t, s) in ranks.items():
            out[rank].append((t, s / med))
    for series in out.values():
        series.sort()
    return dict(out)


def _mad(xs: list[float]) -> float:
    med = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - med) for x in xs)


def _shift(before: list[float], after: list[float]) -> tuple[float, float]:
    """The shift of ``after`` over ``before`` and its z: standard errors of a difference of
    medians (1.253 σ/√n each), σ the rank's own spread before the fault (with no fault both
    sides share it; a fault that makes the rank's times vary more must not hide its shift)."""
    b, a = statistics.median(before), statistics.median(after)
    shift = a / b - 1.0
    # a spread of at least 0.05%: ratios that hardly vary (a quantised clock, a sleep-based
    # stand-in) must not make a hair's shift count
    se = 1.253 * max(_mad(before) / b, SPREAD_FLOOR) * math.sqrt(1 / len(before) + 1 / len(after))
    return shift, shift / se


def name_slowed(events: Iterable[Event], t0: float, t_end: float) -> Named:
    """Which rank slowed at ``t0``, from the steps before it and the steps up to ``t_end``."""
    series = ratios(events)
    if len(series) < MIN_RANKS:
        return Named(None, None, None, None, 0, 0, why=f"per-rank step times of {len(series)} rank(s); "
                                                       f"a median of peers needs {MIN_RANKS}")
    sides = {r: ([x for t, x in s if t < t0][-BEFORE_STEPS:], [(t, x) for t, x in s if t0 <= t <= t_end])
             for r, s in series.items()}
    nb = min(len(b) for b, _ in sides.values())
    na = min(len(a) for _, a in sides.values())
    if nb < MIN_STEPS or na < MIN_STEPS:
        return Named(None, None, None, None, nb, na, why=f"{nb} step(s) before the fault and {na} after it with "
                                                         f"every rank's time; {MIN_STEPS} a side are needed")
    best: tuple[float, int, float] | None = None
    shifts: dict[int, float] = {}
    for rank, (before, after) in sides.items():
        shift, z = _shift(before, [x for _, x in after])
        shifts[rank] = shift
        if shift > 0 and z >= Z and (best is None or z > best[0]):
            best = (z, rank, shift)
    if best is None:
        return Named(None, None, None, None, nb, na, shifts=shifts)
    z, rank, shift = best
    return Named(rank, shift, z, _first_sufficed(*sides[rank]), nb, na, shifts=shifts)


def _first_sufficed(before: list[float], after: list[tuple[float, float]], every: int = 4) -> float:
    """When the steps after the fault first named the rank (tried every ``every`` steps)."""
    for k in range(MIN_STEPS, len(after) + every, every):
        part = after[:k]
        shift, z = _shift(before, [x for _, x in part])
        if shift > 0 and z >= Z:
            return part[-1][0]
    return after[-1][0]


def false_names(events: list[Event], t0: float, t1: float) -> tuple[int, int]:
    """The same test on a stretch with no fault on, its first half against its second: (ranks
    named, steps tested). A stretch too short to read tests no step."""
    mid = (t0 + t1) / 2
    inside = [e for e in events if t0 < e.t <= t1]
    named = name_slowed(inside, mid, t1)
    if named.why is not None:
        return 0, 0
    steps = len({e.data.get("n") for e in inside if e.kind == "rank.time"})
    return (0 if named.rank is None else 1), steps
