"""drillbit's own reading of a fail-slow fault from the job's per-rank step times (#58): the
rank whose times moved against its peers' is named, with its shift; noise alone names no one;
and the inputs that break arithmetic (NaN, inf, zero, negative, empty, out of order, too few
ranks or steps) name no one and say why, never raise."""
from __future__ import annotations

import random

import pytest

from drillbit.core.history import Event, History
from drillbit.judging.checks.ownslow import MIN_STEPS, false_names, name_slowed, ratios
from drillbit.judging.checks.recovery import measure


def times(ranks: int = 4, steps: int = 80, slow: int | None = None, shift: float = 0.0, at: int = 40,
          noise: float = 0.0035, seed: int = 1, step_s: float = 0.26) -> list[Event]:
    rng = random.Random(seed)
    out = []
    for n in range(steps):
        common = 1 + rng.gauss(0, noise)  # what every rank shares in a step
        for r in range(ranks):
            s = 0.25 * common * (1 + rng.gauss(0, noise))
            if r == slow and n >= at:
                s *= 1 + shift
            out.append(Event(seq=len(out), t=100.0 + n * step_s + r * 1e-3, source="job", kind="rank.time", rank=r,
                             data={"n": n, "s": s}))
    return out


T0 = 100.0 + 40 * 0.26 - 0.01


def test_a_rank_slowed_by_one_percent_is_named_with_its_shift():
    # per-rank noise of 0.35% a step: what the reference job's compute times showed alone (bench/straggler_sensitivity.py)
    named = name_slowed(times(slow=2, shift=0.01), T0, 200.0)
    assert named.rank == 2 and 0.006 < named.shift < 0.014 and named.z >= 5
    assert named.t is not None and named.t >= T0 and named.steps_before == 40 and named.steps_after == 40
    assert named.shifts[2] == named.shift and all(abs(v) < 0.005 for r, v in named.shifts.items() if r != 2)


@pytest.mark.parametrize("seed", range(20))
def test_noise_alone_names_no_one(seed):
    assert name_slowed(times(seed=seed), T0, 200.0).rank is None
    assert false_names(times(seed=seed), 99.0, 200.0)[0] == 0


def test_what_the_whole_fleet_shares_is_no_straggler():
    events = times()
    for e in events:  # every rank 10% slower from step 40: a slow step, not a slow rank
        if e.data["n"] >= 40:
            e.data["s"] *= 1.10
    assert name_slowed(events, T0, 200.0).rank is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 0.0, -1.0, None, "x"])
def test_times_that_are_not_numbers_are_left_out(bad):
    events = times(slow=1, shift=0.05)
    for e in events[::7]:
        e.data["s"] = bad
    named = name_slowed(events, T0, 200.0)
    assert named.rank == 1
    assert all(0 < x < 10 for series in ratios(events).values() for _, x in series)


def test_too_few_ranks_or_steps_is_said_not_guessed():
    two = name_slowed(times(ranks=2, slow=1, shift=0.3), T0, 200.0)
    assert two.rank is None and "needs 3" in two.why
    short = name_slowed(times(steps=45, slow=1, shift=0.3), T0, 200.0)
    assert short.rank is None and f"{MIN_STEPS} a side" in short.why
    assert name_slowed([], T0, 200.0).why is not None
    assert false_names(times(steps=12), 99.0, 200.0) == (0, 0)  # too short to test: no step counted


def test_out_of_order_and_repeated_lines_read_the_same():
    events = times(slow=3, shift=0.03)
    shuffled = list(events)
    random.Random(5).shuffle(shuffled)
    assert name_slowed(shuffled, T0, 200.0).rank == 3
    # a restarted attempt prints its steps again: the last line of a (rank, step) counts once
    doubled = events + [Event(seq=0, t=e.t + 0.001, source="job", kind="rank.time", rank=e.rank, data=dict(e.data))
                        for e in events]
    assert name_slowed(doubled, T0, 200.0).rank == 3


def test_a_drill_measures_it_and_says_so_without_per_rank_times():
    steady = Event(seq=0, t=99.0, source="harness", kind="steady", data={"baseline_step_s": 0.26, "step": 0})
    inject = Event(seq=0, t=T0, source="harness", kind="fault.inject", rank=2, data={"fault": "slow-rank"})
    confirmed = Event(seq=0, t=T0, source="harness", kind="fault.confirmed",
                      data={"evidence": [], "expects": "slow", "hurts": "rank", "verb": "slowed"})
    steps = [Event(seq=0, t=100.0 + n * 0.26, source="job", kind="step", data={"n": n, "dt": 0.26}) for n in range(80)]
    end = Event(seq=0, t=121.0, source="harness", kind="observe.end", data={"reason": "window elapsed"})
    base = [steady, *steps, inject, confirmed, end]
    with_times = History(events=[e.model_copy(update={"seq": i}) for i, e in
                                 enumerate(sorted(base + times(slow=2, shift=0.02), key=lambda e: e.t))])
    m = measure(with_times)
    assert m.effect_rank == 2 and m.effect_correct and m.effect_target_shift > 0.01 and m.effect_unread is None
    without = History(events=[e.model_copy(update={"seq": i}) for i, e in enumerate(sorted(base, key=lambda e: e.t))])
    m = measure(without)
    assert m.effect_rank is None and "no per-rank step times" in m.effect_unread
