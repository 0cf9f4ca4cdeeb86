"""Checkpoint cadence: Young's and Daly's optimal intervals, overhead and lost work.

With C the cost of one save and M the mean time between failures (same unit):
  Young:              tau = sqrt(2 C M)
  Daly, first order:  tau = sqrt(2 C M) - C
  Daly, higher order: tau = sqrt(2 C M) [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C   for C < 2M,
                      tau = M otherwise
Checks (Daly 2006, "A higher order estimate of the optimum checkpoint interval"; BLOOM from bigscience
train/tr11-176B-ml/chronicles.md): C = 5 min gives 116.7 min at M = 24 h, 56.7 at 6 h and
9.1 at 15 min; BLOOM (C = 40 s, M = 1 week) gives Young's tau = 1.93 h.

Expected goodput (the first-order model of Young 1974 and Daly 2006): G ~ 1 - C/tau - (tau/2 + D + R)/M, D the detection time and
R the restart + restore time.
"""
from __future__ import annotations

import math

from pydantic import BaseModel


def young(c: float, m: float) -> float:
    return math.sqrt(2.0 * c * m)


def daly_first(c: float, m: float) -> float:
    return math.sqrt(2.0 * c * m) - c


def daly(c: float, m: float) -> float:
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def expected_goodput(c: float, tau: float, m: float, d: float = 0.0, r: float = 0.0) -> float:
    """First-order expected goodput of a run checkpointing every tau (all in one unit)."""
    return 1.0 - c / tau - (tau / 2.0 + d + r) / m


class Cadence(BaseModel):
    save_s: float
    mtbf_s: float
    young_s: float
    daly_first_s: float
    daly_s: float
    save_overhead: float          # C / tau at Daly's interval
    lost_work_per_failure_s: float  # tau / 2 at Daly's interval
    expected_goodput: float       # at Daly's interval, with the given D and R
    detect_s: float = 0.0
    restart_s: float = 0.0
    actual_interval_s: float | None = None
    actual_goodput: float | None = None
    ratio_to_optimum: float | None = None


def cadence(save_s: float, mtbf_s: float, *, detect_s: float = 0.0, restart_s: float = 0.0,
            actual_interval_s: float | None = None) -> Cadence:
    if save_s <= 0 or mtbf_s <= 0:
        raise ValueError("save time and MTBF must be positive")
    tau = daly(save_s, mtbf_s)
    result = Cadence(
        save_s=save_s, mtbf_s=mtbf_s, young_s=young(save_s, mtbf_s), daly_first_s=daly_first(save_s, mtbf_s),
        daly_s=tau, save_overhead=save_s / tau, lost_work_per_failure_s=tau / 2.0,
        expected_goodput=expected_goodput(save_s, tau, mtbf_s, detect_s, restart_s),
        detect_s=detect_s, restart_s=restart_s,
    )
    if actual_interval_s:
        result.actual_interval_s = actual_interval_s
        result.actual_goodput = expected_goodput(save_s, actual_interval_s, mtbf_s, detect_s, restart_s)
        result.ratio_to_optimum = actual_interval_s / tau
    return result
