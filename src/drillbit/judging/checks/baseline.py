"""The baseline a regression SLO compares against: the last K passing runs of the same
drill, cluster and job — a distribution, not one run.

A run is flagged only when its value lies outside both the SLO's relative allowance and the
baseline's own spread:

    threshold = median + max(allowance x |median|,  3 x 1.4826 x MAD,  floor)

(``median -`` for measurements where higher is better). MAD is the median absolute
deviation of the baseline runs (1.4826 x MAD estimates a standard deviation for normal
noise, and ignores an outlier run); ``floor`` is an absolute margin per measurement: three
baseline step times for the times a step quantises (detect, restart, restore, first step),
two steps for lost steps. One sub-second detection that takes 0.5 s instead of 0.2 s on a
job with 0.25 s steps is noise, not a regression (the case #13 measured).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from drillbit.judging.checks.recovery import Measurements
from drillbit.spec.models import HIGHER_IS_BETTER

RUNS = 10  # passing runs a baseline holds
K_MAD = 3.0
NORMAL = 1.4826  # MAD -> standard deviation for normally distributed noise
STEP_FLOOR = 3.0  # step times of margin for step-quantised times
LOST_STEPS_FLOOR = 2


@dataclass
class Baseline:
    runs: list[int] = field(default_factory=list)
    samples: list[Measurements] = field(default_factory=list)

    def values(self, name: str) -> list[float]:
        """The passing runs' figures; one that is not a number (an older run's bug) is left out."""
        return [float(v) for s in self.samples if (v := getattr(s, name, None)) is not None and math.isfinite(v)]

    def floor(self, name: str) -> float:
        if name == "lost_steps":
            return LOST_STEPS_FLOOR
        if name.startswith("time_to"):
            steps = self.values("baseline_step_s")
            return STEP_FLOOR * statistics.median(steps) if steps else 0.0
        return 0.0

    def judge(self, name: str, value: float, allowed: float) -> "Verdict | None":
        """None when the baseline has no value for ``name``."""
        values = self.values(name)
        if not values:
            return None
        med = statistics.median(values)
        mad = statistics.median(abs(v - med) for v in values)
        margin = max(allowed * abs(med), K_MAD * NORMAL * mad, self.floor(name))
        higher_better = name in HIGHER_IS_BETTER
        threshold = med - margin if higher_better else med + margin
        regressed = value < threshold if higher_better else value > threshold
        worse = ((med - value) if higher_better else (value - med)) / abs(med) if med else 0.0
        return Verdict(median=med, mad=mad, margin=margin, threshold=threshold, worse=worse, regressed=regressed,
                       runs=len(values), allowance_margin=allowed * abs(med), spread_margin=K_MAD * NORMAL * mad,
                       floor=self.floor(name))

    def to_json(self) -> dict:
        return {"runs": self.runs, "samples": [s.model_dump() for s in self.samples]}

    @classmethod
    def from_json(cls, data: dict) -> "Baseline":
        if "samples" not in data:  # a run folder from before baselines held several runs
            return cls(runs=[data["run"]], samples=[Measurements.model_validate(data["measurements"])])
        return cls(runs=list(data["runs"]), samples=[Measurements.model_validate(s) for s in data["samples"]])


@dataclass
class Verdict:
    median: float
    mad: float
    margin: float
    threshold: float
    worse: float
    regressed: bool
    runs: int
    allowance_margin: float
    spread_margin: float
    floor: float

    def why(self) -> str:
        which = max((("the allowance", self.allowance_margin), ("the baseline's spread", self.spread_margin),
                     ("the floor", self.floor)), key=lambda x: x[1])[0]
        return (f"baseline median {self.median:.3g} over {self.runs} run(s), MAD {self.mad:.3g}; flagged beyond "
                f"{self.threshold:.3g} ({which} sets the margin, {self.margin:.3g})")
