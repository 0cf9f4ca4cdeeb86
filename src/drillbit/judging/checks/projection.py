"""From one drill to a fleet: the projection gate and the checkpoint-cadence check.

Pure functions: scenarios come in already loaded; the simulator is seeded.
"""
from __future__ import annotations

import statistics

from pydantic import BaseModel

from drillbit.judging.checks.recovery import Measurements
from drillbit.core.events import Save
from drillbit.core.history import History
from drillbit.judging.fleet.cadence import Cadence, cadence
from drillbit.judging.fleet.simulate import Scenario, params_for, simulate
from drillbit.spec.models import CadenceSLO, ProjectSLO


class Projection(BaseModel):
    scenario: str
    detect_s: float
    restart_s: float
    save_s: float
    interval_s: float
    goodput: float          # p50 over the trials
    goodput_p5: float
    interruptions: float
    trials: int
    seed: int
    goodput_min: float
    status: str


def recovery_split(m: Measurements) -> tuple[float, float] | None:
    """D and R of the goodput model: detection, then restart + restore + first step."""
    if m.time_to_detect is None or m.time_to_first_step is None:
        return None
    return m.time_to_detect, max(0.0, m.time_to_first_step - m.time_to_detect)


def project(slo: ProjectSLO, scenario: Scenario, m: Measurements) -> Projection | str:
    split = recovery_split(m)
    if split is None:
        return "no detection or no first step after recovery was measured, so nothing to project"
    d, r = split
    try:
        params = params_for(scenario, detect_s=d, restart_s=r, save_s=slo.save, interval_s=slo.interval)
    except ValueError as exc:
        return str(exc)
    sim = simulate(scenario, params, trials=slo.trials, seed=slo.seed)
    return Projection(scenario=scenario.name, detect_s=d, restart_s=r, save_s=params.save_s,
                      interval_s=params.interval_s, goodput=sim.goodput_p50, goodput_p5=sim.goodput_p5,
                      interruptions=sim.interruptions_mean, trials=slo.trials, seed=slo.seed,
                      goodput_min=slo.goodput_min,
                      status="pass" if sim.goodput_p50 >= slo.goodput_min else "fail")


def save_stats(history: History) -> tuple[float, float] | None:
    """(median save seconds, median interval between saves) from ckpt.save events."""
    saves = history.of("ckpt.save")
    if len(saves) < 2:
        return None
    said = [Save.of(e) for e in saves]
    seconds = statistics.median(s.seconds or 0.0 for s in said)
    intervals = [b.t - a.t for a, b, sa, sb in zip(saves, saves[1:], said, said[1:], strict=False)
                 if (sb.step or 0) > (sa.step or 0)]
    if not intervals or seconds <= 0:
        return None
    return seconds, statistics.median(intervals)


def check_cadence(slo: CadenceSLO, history: History, m: Measurements,
                  scenario: Scenario | None) -> tuple[Cadence, str] | str:
    stats = save_stats(history)
    if stats is None:
        return "fewer than two checkpoint saves were seen, so the save interval is unknown"
    save_s, interval_s = stats
    if slo.mtbf is not None:
        mtbf = slo.mtbf
    else:
        assert scenario is not None
        gpus = slo.gpus or scenario.gpus
        mtbf = 86400.0 / (scenario.rate() * gpus)
    split = recovery_split(m) or (0.0, 0.0)
    result = cadence(save_s, mtbf, detect_s=split[0], restart_s=split[1], actual_interval_s=interval_s)
    ratio = result.ratio_to_optimum or 0.0
    status = "pass" if 1.0 / slo.max_ratio <= ratio <= slo.max_ratio else "fail"
    return result, status
