"""Detection predicted from the job's own timeouts, before anything runs.

A job profile may declare its timeouts (``timeouts:`` — the collective's, a progress
watchdog's, a liveness heartbeat's, the launcher's poll). Each fault names the ones that can
see it (``Fault.seen_by``: a stopped rank stops heartbeating, a rank waiting for data does
not). The first of those the job declares is the predicted detection, and from it the timed
SLOs that must fail; the report then sets it beside the measurement. A timeout the job does
not declare is not guessed: the prediction says what to declare."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from drillbit.spec.config import JobTimeouts
from drillbit.spec.models import SLO


class PredictedSLO(BaseModel):
    name: str
    limit: float
    status: Literal["pass", "fail"]


class Prediction(BaseModel):
    detect_s: float | None       # None: no declared timeout sees it (never), or unknown (see why)
    by: str | None
    never: bool = False           # the job's declared timeouts cannot see this fault at all
    why: str
    slos: list[PredictedSLO] = []
    warnings: list[str] = []


def warnings(t: JobTimeouts) -> list[str]:
    """Orderings of a job's timeouts that cannot work."""
    out = []
    if t.watchdog is not None and t.collective is not None and t.watchdog >= t.collective:
        out.append(f"the watchdog ({t.watchdog:g} s) is no faster than the collective timeout ({t.collective:g} s): "
                   "on a hung collective the process group gives up first, and the watchdog never acts")
    if t.train is not None and t.collective is not None and t.collective > t.train:
        out.append(f"the process group's timeout ({t.collective:g} s) is above the train timeout ({t.train:g} s): "
                   "the step gives up on a collective the process group is still waiting in, and the next step "
                   "starts on a process group that may never come back")
    return out


def predict(seen_by: tuple[str, ...], verb: str, timeouts: JobTimeouts | None, slo: SLO) -> Prediction | None:
    if timeouts is None:
        return None
    declared = {n: getattr(timeouts, n) for n in seen_by if getattr(timeouts, n, None) is not None}
    notes = warnings(timeouts)
    if not seen_by:
        never = [PredictedSLO(name="detect_within", limit=float(slo.detect_within), status="fail")] \
            if slo.detect_within is not None else []
        return Prediction(detect_s=None, by=None, never=True, warnings=notes, slos=never,
                          why=f"no timeout sees a rank {verb}: only a straggler detector can name it")
    if not declared:
        return Prediction(detect_s=None, by=None, warnings=notes,
                          why=f"a rank {verb} is seen by {' or '.join(seen_by)}; the profile declares none of them "
                              "(timeouts: in the job profile)")
    by, seconds = min(declared.items(), key=lambda kv: kv[1])
    slos = []
    if slo.detect_within is not None:  # a timeout equal to the limit fires at it: the detection comes just after
        slos.append(PredictedSLO(name="detect_within", limit=float(slo.detect_within),
                                 status="fail" if seconds >= slo.detect_within else "pass"))
    if slo.first_step_within is not None and seconds >= slo.first_step_within:  # no first step before detection
        slos.append(PredictedSLO(name="first_step_within", limit=float(slo.first_step_within), status="fail"))
    others = [f"{n} {v:g} s" for n, v in declared.items() if n != by]
    return Prediction(detect_s=float(seconds), by=by, slos=slos, warnings=notes,
                      why=f"{by} ({seconds:g} s) is the first of the job's timeouts to see a rank {verb}"
                          + (f" (then {', '.join(others)})" if others else ""))
