"""The fleet-relative straggler detector and NVRx's rule on step times with real noise."""
from __future__ import annotations

import random

from drillbit.fixtures.reference.straggler import FleetMedianDetector, NVRxRule

BASE = 0.2520
NOISE = 0.003  # ~0.3% relative noise, as measured on the reference job's compute times


def feed(detector, slow_rank: int | None, slowdown: float, steps: int, ranks: int = 8, seed: int = 0):
    rng = random.Random(seed)
    for n in range(steps):
        for r in range(ranks):
            t = BASE * (1 + rng.gauss(0, NOISE))
            if r == slow_rank:
                t *= 1 + slowdown
            detector.observe(r, t)
        named = detector.evaluate()
        if named:
            return n, named
    return None, []


def test_fleet_median_names_a_three_percent_straggler():
    step, named = feed(FleetMedianDetector(), slow_rank=5, slowdown=0.03, steps=200)
    assert named and named[0][0] == 5
    assert step < 60
    assert 0.02 < named[0][1] < 0.04


def test_nvrx_rule_misses_three_percent_but_catches_forty():
    assert feed(NVRxRule(), slow_rank=5, slowdown=0.03, steps=200)[1] == []
    _, named = feed(NVRxRule(), slow_rank=5, slowdown=0.40, steps=200)
    assert named and named[0][0] == 5


def test_no_false_alarm_without_a_fault():
    assert feed(FleetMedianDetector(), slow_rank=None, slowdown=0.0, steps=2000, seed=3)[1] == []


def test_a_recovered_rank_can_be_named_again():
    det = FleetMedianDetector(window=5, patience=2)
    feed(det, slow_rank=1, slowdown=0.1, steps=20)
    assert det.flagged == {1}
    feed(det, slow_rank=None, slowdown=0.0, steps=20)
    assert det.flagged == set()
