"""SLOs: each limit in the spec judged against its measurement.

A measurement that never came is a breach when the drill watched longer than the limit
(or the job exited), and ``unknown`` when observation ended before the limit elapsed.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Literal

from pydantic import BaseModel

from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.twin import judge as judge_twin
from drillbit.judging.checks.recovery import (AttributionFigures, DamageFigures, FAMILIES, FailSlowFigures,
    FidelityFigures, Measurements, RecoveryFigures, ReplacementFigures, RequeueFigures, SaveCrashFigures, TierFigures)
from drillbit.core.history import History
from drillbit.spec.models import SLO

Status = Literal["pass", "fail", "unknown"]

# slo field -> (measurement, what it is in words, comparison)
_TIMED = {
    "detect_within": ("time_to_detect", "detection"),
    "restart_within": ("time_to_restart", "restart"),
    "restore_within": ("time_to_restore", "restore"),
    "first_step_within": ("time_to_first_step", "first step after recovery"),
    "requeue_within": ("time_to_requeue", "requeue by the scheduler"),
}


class SLOResult(BaseModel):
    name: str
    measurement: str
    limit: float
    measured: int | float | None
    status: Status
    detail: str = ""


@dataclass
class Judging:
    """What every judge reads (the SLO, the measurements, how long the drill watched, the
    baseline) and what it adds to (results, and a reason a person reads for each breach)."""

    slo: SLO
    m: Measurements
    watched: float
    baseline: Baseline | None
    results: list[SLOResult] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


Judge = Callable[[Judging], None]


def _judge_timed(j: Judging) -> None:
    """The timed SLOs (detect, restart, restore, first step, requeue): a measurement that never
    came is a breach once the drill watched past the limit or the job exited, else unknown."""
    slo = j.slo
    m = j.m
    watched = j.watched
    for name, (measure, words) in _TIMED.items():
        limit = getattr(slo, name)
        if limit is None:
            continue
        value = getattr(m, measure)
        if _not_a_number(j, name, measure, limit, value):
            continue
        if value is not None:
            ok = value <= limit
            j.results.append(SLOResult(name=name, measurement=measure, limit=limit, measured=round(value, 3),
                                       status="pass" if ok else "fail"))
            if not ok:
                j.reasons.append(f"{words} took {value:.1f} s after the fault; the SLO allows {limit:g} s"
                                 + _peer_copy(m, measure))
        elif watched >= limit or m.job_exit_s is not None:
            j.results.append(SLOResult(name=name, measurement=measure, limit=limit, measured=None, status="fail",
                                       detail=f"never seen in {watched:.0f} s of observation"))
            j.reasons.append(f"no {words} within {limit:g} s of the fault (watched {watched:.0f} s)")
        else:
            j.results.append(SLOResult(name=name, measurement=measure, limit=limit, measured=None, status="unknown",
                                       detail=f"observation ended {watched:.0f} s after the fault"))


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _not_a_number(j: Judging, name: str, measure: str, limit: float, value: object) -> bool:
    """A figure that came out NaN or infinite, judged unknown (for judges that judge several
    figures in one call; :func:`evaluate` catches the others)."""
    if not isinstance(value, float) or math.isfinite(value):
        return False
    j.results.append(SLOResult(name=name, measurement=measure, limit=limit, measured=None, status="unknown",
                               detail=f"{measure} came out {value} (not a number): nothing can be judged from it"))
    return True


def _peer_copy(m: Measurements, measure: str) -> str:
    """A late recovery that healed from a live peer: how long the copy took and from where,
    as the job's own line said (torchft's 'fetching checkpoint from URL took Xs')."""
    if m.peer_copy_s is None or measure not in ("time_to_first_step", "time_to_restore"):
        return ""
    where = f" from {m.peer_copy_from}" if m.peer_copy_from else ""
    return f"; copying a live peer's state{where} took {m.peer_copy_s:.1f} s of it (the job's own line)"


def _judge_recover_or_escalate(j: Judging) -> None:
    """Recovery path: recovered, or escalated to a human, within the limit."""
    slo = j.slo
    m = j.m
    watched = j.watched
    if slo.recover_or_escalate_within is not None:
        limit = slo.recover_or_escalate_within
        outcomes = [(v, w) for v, w in ((m.time_to_first_step, "recovered"), (m.time_to_escalate, "escalated"))
                    if v is not None]
        if outcomes:
            value, how = min(outcomes)
            ok = value <= limit
            j.results.append(SLOResult(name="recover_or_escalate_within", measurement=f"time_to_{how}", limit=limit,
                                       measured=round(value, 3), status="pass" if ok else "fail",
                                       detail=how + (f" after {m.replace_failures} failed replacement request(s)"
                                                     if m.replace_failures else "")))
            if not ok:
                j.reasons.append(f"the stack {how} only after {value:.1f} s; it should recover or escalate within "
                                 f"{limit:g} s, not wait")
        elif watched >= limit or m.job_exit_s is not None:
            j.results.append(SLOResult(name="recover_or_escalate_within", measurement="time_to_first_step",
                                       limit=limit, measured=None, status="fail",
                                       detail=f"watched {watched:.0f} s" + (f"; {m.replace_failures} failed replacement "
                                                                            "request(s)" if m.replace_failures else "")))
            j.reasons.append(f"neither recovered nor escalated within {limit:g} s: the stack just waited")
        else:
            j.results.append(SLOResult(name="recover_or_escalate_within", measurement="time_to_first_step",
                                       limit=limit, measured=None, status="unknown"))


# a job counts as stepping at the end of the watch when its last step came no longer before
# the end than this many baseline step times, and at least this many seconds
STILL_STEPPING_STEPS, STILL_STEPPING_MIN_S = 10, 5.0


def _judge_keep_stepping(j: Judging) -> None:
    """The job survived the fault: still stepping when the watch ended (its last step no more
    than the quiet limit before the end), never exited. A job that finished its training
    inside the watch (exit 0) cannot show either way: unknown."""
    m = j.m
    if not j.slo.keep_stepping:
        return
    quiet_limit = max(STILL_STEPPING_STEPS * (m.baseline_step_s or 0.0), STILL_STEPPING_MIN_S)
    watched = j.watched
    quiet = watched - m.last_step_s if m.last_step_s is not None else None

    def result(status: Status, detail: str) -> None:
        j.results.append(SLOResult(name="keep_stepping", measurement="quiet_at_end_s", limit=round(quiet_limit, 3),
                                   measured=None if quiet is None or m.job_exit_s is not None else round(quiet, 3),
                                   status=status, detail=detail))

    last = f"its last step came {m.last_step_s:.1f} s after the fault" if m.last_step_s is not None \
        else "it made no step after the fault"
    if m.job_exit_s is not None and m.job_exit_code == 0:
        result("unknown", f"the job finished (exit 0) {m.job_exit_s:.0f} s after the fault, inside the watch; {last}")
    elif m.job_exit_s is not None:
        result("fail", f"the job exited (code {m.job_exit_code}) {m.job_exit_s:.0f} s after the fault; {last}")
        j.reasons.append(f"the job did not survive the fault: it exited (code {m.job_exit_code}) {m.job_exit_s:.0f} s "
                         f"after it; {last}")
    elif quiet is None or quiet > quiet_limit:
        result("fail", f"{last}; no step in the last {quiet if quiet is not None else watched:.1f} s of the "
                       f"{watched:.0f} s watched")
        j.reasons.append(f"the job stopped making steps: {last}, and none came in the "
                         f"{quiet if quiet is not None else watched:.0f} s after that (watched {watched:.0f} s; a job "
                         f"that goes on steps within {quiet_limit:g} s)")
    else:
        result("pass", f"still stepping when the watch ended {watched:.0f} s after the fault (its last step "
                       f"{quiet:.1f} s before)")


def _judge_rerun_avoids_failed_node(j: Judging) -> None:
    """Slurm: the requeued job ran again without the node the fault took down."""
    slo = j.slo
    m = j.m
    if slo.rerun_avoids_failed_node and m.rerun_on_failed_node is not None:
        ok = not m.rerun_on_failed_node
        j.results.append(SLOResult(name="rerun_avoids_failed_node", measurement="rerun_nodes", limit=1,
                                   measured=int(ok), status="pass" if ok else "fail",
                                   detail=f"rerun on {', '.join(m.rerun_nodes or [])}; "
                                          f"failed: {', '.join(m.failed_nodes)}"))
        if not ok:
            j.reasons.append(f"the requeued job ran again on {', '.join(m.failed_nodes)}, the node the fault took down "
                             f"(rerun on {', '.join(m.rerun_nodes or [])}): Slurm returned it to service "
                             "(ReturnToService=2 lets a DOWN node's slurmd re-register at once); drain a failed node "
                             "instead, or requeue with it excluded")


def _judge_restore_tier(j: Judging) -> None:
    """Multi-tier checkpoints: the restore fell back no further than the tiers allowed."""
    slo = j.slo
    m = j.m
    watched = j.watched
    if slo.restore_tier is not None:
        j.results.append(_restore_tier(slo.restore_tier.max_steps_behind_best, m, watched, j.reasons))


def _effect_text(m) -> str:
    """What drillbit read itself from the job's per-rank step times, for a reason."""
    if m.effect_rank is not None and _finite(m.effect_shift):
        return (f"; its step times say rank {m.effect_rank} slowed {m.effect_shift:.1%} against its peers "
                f"(drillbit's own reading, {m.effect_z:.0f} standard errors)")
    if m.effect_rank is None and m.effect_unread is None and "effect" not in m.measure_errors:
        return "; drillbit's own reading of the per-rank step times found no rank slower than its peers either"
    return ""


def _judge_straggler(j: Judging) -> None:
    """Fail-slow: the slowed rank, and no other, was named in time."""
    slo = j.slo
    m = j.m
    watched = j.watched
    if slo.straggler_within is not None:
        limit = slo.straggler_within
        if m.time_to_straggler is not None and m.straggler_correct:
            ok = m.time_to_straggler <= limit
            j.results.append(SLOResult(name="straggler_within", measurement="time_to_straggler", limit=limit,
                                       measured=round(m.time_to_straggler, 3), status="pass" if ok else "fail",
                                       detail=f"named rank {m.straggler_rank} on {m.straggler_node}"))
            if not ok:
                j.reasons.append(f"the slow rank was named after {m.time_to_straggler:.1f} s; "
                                 f"the SLO allows {limit:g} s")
        elif m.time_to_straggler is not None:
            j.results.append(SLOResult(name="straggler_within", measurement="time_to_straggler", limit=limit,
                                       measured=round(m.time_to_straggler, 3), status="fail",
                                       detail=f"named rank {m.straggler_rank}; the slow rank was {m.target_ranks}"))
            j.reasons.append(f"the detector named rank {m.straggler_rank}, but the slowed rank was "
                             f"{', '.join(map(str, m.target_ranks))}{_effect_text(m)}")
        elif watched >= limit:
            j.results.append(SLOResult(name="straggler_within", measurement="time_to_straggler", limit=limit,
                                       measured=None, status="fail", detail=f"nobody named in {watched:.0f} s"))
            tax = f"; the job ran {m.fleet_tax:.1%} slower meanwhile" if _finite(m.fleet_tax) else ""
            slowed = next((v for v in (m.slowdown_achieved, m.target_slowdown) if v and _finite(v)), None)
            j.reasons.append(f"rank {', '.join(map(str, m.target_ranks))} "
                             + (f"ran {slowed:.1%} slower" if slowed is not None else "was slowed")
                             + f" and was never named within {limit:g} s{tax}{_effect_text(m)}")
        else:
            j.results.append(SLOResult(name="straggler_within", measurement="time_to_straggler", limit=limit,
                                       measured=None, status="unknown",
                                       detail=f"observation ended after {watched:.0f} s"))


def _judge_attribution(j: Judging) -> None:
    """Whom the stack blamed against whom the fault hurt."""
    slo = j.slo
    m = j.m
    if slo.attribution is not None:
        j.results.append(_attribution(slo.attribution, m, j.reasons))


def _judge_restore_skipped_corrupted(j: Judging) -> None:
    """A damaged checkpoint: the restore did not load it (judged whenever a fault damaged one)."""
    m = j.m
    if m.damaged_restore is not None:
        j.results.append(_skipped_damaged(m.damaged_restore, m.rejected_corrupted, j.reasons))


def _judge_crash_invariants(j: Judging) -> None:
    """A crash inside a save: the invariants of a crash-consistent checkpoint."""
    m = j.m
    if m.crash_point is not None:
        j.results += _crash_invariants(m, j.reasons)


def _judge_restore_matches_save(j: Judging) -> None:
    """An invariant wherever the job prints a digest of its state when it saves and when it
    restores: the state a restart loads is the state that was saved at that step."""
    m = j.m
    if m.restored_digest is None:
        return
    if m.saved_digest is None:
        j.results.append(SLOResult(name="restore_matches_save", measurement="restored_digest", limit=1, measured=None,
                                   status="unknown", detail=f"the job restored step {m.restored_step} (digest "
                                                            f"{m.restored_digest}); no save line of that step gave one"))
        return
    same = m.restored_digest == m.saved_digest
    j.results.append(SLOResult(name="restore_matches_save", measurement="restored_digest", limit=1, measured=int(same),
                               status="pass" if same else "fail",
                               detail=f"step {m.restored_step}: saved {m.saved_digest}, restored {m.restored_digest}"))
    if not same:
        j.reasons.append(f"the job restored step {m.restored_step}, but the state it loaded (digest {m.restored_digest}) "
                         f"is not the state it had when it saved that step ({m.saved_digest}): the checkpoint holds "
                         "values written after the save was called")


def _judge_restore_fidelity(j: Judging) -> None:
    """What came back is what was saved (judging/checks/fidelity.py): judged wherever the job prints a
    loss, learning rate or data count on its step lines, or where the spec asks. Where the spec
    asks, a fidelity that could not be told (a job that prints none of it, or a part that could
    not tell) is unknown, and the drill inconclusive. Where it does not ask, only a decided
    fidelity is an SLO: a fail, or a pass of every part the job prints; one the job's lines could
    not decide stays in the measurements, with each part's words, and claims nothing."""
    asked, f = j.slo.restore_fidelity, j.m.fidelity
    if f is None and asked and (j.m.restarts or j.m.restored_step is not None):
        j.results.append(SLOResult(name="restore_fidelity", measurement="fidelity", limit=1, measured=None,
                                   status="unknown", detail="nothing to judge the state that came back against: the "
                                   "restart began again from the first step (or never stepped) and the job said it "
                                   "saved nothing before the fault"))
        return
    if asked is False or f is None or (f.restored_step == 0 and not asked):
        return  # a start from the first step is lost steps' to judge; its reason says what came back all the same
    said = "; ".join(f"{p.name}: {p.status} — {p.says}" for p in f.parts)
    if not f.measured() or (f.status == "unknown" and not asked):
        if asked:
            j.results.append(SLOResult(name="restore_fidelity", measurement="fidelity", limit=1, measured=None,
                                       status="unknown", detail=said))
        return
    j.results.append(SLOResult(name="restore_fidelity", measurement="fidelity", limit=1,
                               measured=None if f.status == "unknown" else int(f.status == "pass"), status=f.status,
                               detail=said))
    if f.status == "fail" and f.restored_step == 0:
        j.reasons.append(f"the restart began again from the first step: {f.started_over()} ("
                         + "; ".join(f"{p.name}: {p.says}" for p in f.parts if p.came_back is not None) + ")")
    elif f.status == "fail":
        j.reasons.append(f"the restart resumed at step {f.restored_step}, but not the state saved there: "
                         + "; ".join(f"{p.name}: {p.says}" for p in f.failed()))


def _judge_matches_uninterrupted(j: Judging) -> None:
    """The run after its restore against the same job run once without the fault
    (judging/checks/twin.py): exact, within the tolerance, or different from a named step."""
    asked = j.slo.matches_uninterrupted
    if asked is None:
        return
    c = j.m.uninterrupted
    if c is None:
        said = ("the uninterrupted run was not made (the drill ended before it could be)" if j.m.restored_step is not None
                else "the job never restored a checkpoint: there is no run after a restore to compare")
        j.results.append(SLOResult(name="matches_uninterrupted", measurement="uninterrupted", limit=asked.tolerance,
                                   measured=None, status="unknown", detail=said))
        return
    verdict = judge_twin(c, asked.tolerance, asked.steps)
    j.results.append(SLOResult(name="matches_uninterrupted", measurement="uninterrupted", limit=asked.tolerance,
                               measured=None if verdict.status == "unknown" else verdict.steps, status=verdict.status,
                               detail=verdict.says))
    if verdict.status == "fail" and verdict.first is not None:
        d = verdict.first
        same = [f for f in c.figures if f != d.figure and c.largest.get(f, math.inf) <= asked.tolerance]
        j.reasons.append(
            f"the run after the restore of step {c.restored_step} is not the run without the fault: at step {d.n} its "
            f"{d.figure} was {_shown(d.drill)} where the same job, uninterrupted, had {_shown(d.twin)}"
            + (f" ({', '.join(same)} matched: what differs is state they do not show, such as the random number "
               "generators' or a buffer's)" if same and d.figure in ("loss", "digest") else "")
            + ("; restore_fidelity, which judges the loss within the job's own noise band, passed it"
               if j.m.fidelity is not None and j.m.fidelity.status == "pass" else ""))


def _shown(v: object) -> str:
    return "nothing" if v is None else str(v) if isinstance(v, str) else f"{v:g}"


def _judge_max_lost_steps(j: Judging) -> None:
    """Steps between the fault and the restored checkpoint."""
    slo = j.slo
    m = j.m
    if slo.max_lost_steps is not None:
        lost = m.lost_steps
        status = "unknown" if lost is None else ("pass" if lost <= slo.max_lost_steps else "fail")
        j.results.append(SLOResult(name="max_lost_steps", measurement="lost_steps", limit=slo.max_lost_steps,
                                   measured=lost, status=status))
        if status == "fail":
            unloaded = ""
            if m.newest_save_step is not None and m.restored_step is not None and m.newest_save_step > m.restored_step:
                when = f" {m.newest_save_s:.1f} s before the fault" if _finite(m.newest_save_s) else " before the fault"
                unloaded = (f"; the job had said it saved step {m.newest_save_step}{when}, and the restart did not "
                            "load it")
            j.reasons.append(f"{lost} steps were lost (restored step {m.restored_step}, fault at step "
                             f"{m.step_at_fault}); the SLO allows {slo.max_lost_steps}{unloaded}"
                             f"{_what_came_back(m, any(r.name == 'restore_fidelity' for r in j.results))}")


def _what_came_back(m: Measurements, said: bool) -> str:
    """For a restart from the first step: which state came back all the same, and which started
    over, with the figures that tell (judging/checks/fidelity.py); '' where restore_fidelity's
    own reason ``said`` it."""
    f = m.fidelity
    if said or f is None or f.restored_step != 0 or not f.started_over():
        return ""
    told = [p for p in f.parts if p.came_back is not None and p.name != "step counter"]
    return f"; {f.started_over()}" + (" (" + "; ".join(f"{p.name}: {p.says}" for p in told) + ")" if told else "")


def _judge_goodput_min(j: Judging) -> None:
    """The share of the window spent on steps that were kept."""
    slo = j.slo
    m = j.m
    if slo.goodput_min is not None:
        g = m.goodput
        status = "unknown" if g is None else ("pass" if g >= slo.goodput_min else "fail")
        j.results.append(SLOResult(name="goodput_min", measurement="goodput", limit=slo.goodput_min,
                                   measured=None if g is None else round(g, 4), status=status))
        if status == "fail":
            j.reasons.append(f"goodput over the window was {g:.2f}; the SLO floor is {slo.goodput_min:g}")


def _judge_limits(j: Judging) -> None:
    """Absolute limits on any measurement."""
    slo = j.slo
    m = j.m
    for name, limit in slo.limits.items():
        value = getattr(m, name)
        for bound, words in ((limit.max, "at most"), (limit.min, "at least")):
            if bound is None:
                continue
            key = f"limits.{name}.{'max' if words == 'at most' else 'min'}"
            if _not_a_number(j, key, name, bound, value):
                continue
            if value is None:
                j.results.append(SLOResult(name=key, measurement=name, limit=bound, measured=None, status="unknown"))
                continue
            ok = value <= bound if words == "at most" else value >= bound
            j.results.append(SLOResult(name=key, measurement=name, limit=bound, measured=_round(value),
                                       status="pass" if ok else "fail"))
            if not ok and name == "restarts":
                j.reasons.append(f"the job restarted {value:g} time{'s' if value != 1 else ''} after one fault (each "
                                 f"failed restart spends the restart budget); the SLO allows {bound:g}")
            elif not ok:
                j.reasons.append(f"{name} was {_round(value)}; the SLO says {words} {bound:g}")


def _judge_regression(j: Judging) -> None:
    """Against the last passing runs' distribution (judging/checks/baseline.py)."""
    slo = j.slo
    m = j.m
    baseline = j.baseline
    for name, allowed in slo.regression.items():
        value = getattr(m, name)
        key = f"regression.{name}"
        if _not_a_number(j, key, name, allowed, value):
            continue
        if baseline is None or not baseline.samples:
            # The first passing run becomes the baseline; there is nothing to regress from (but a figure this run
            # never measured is no pass either: such a run must not become the baseline on it)
            j.results.append(SLOResult(name=key, measurement=name, limit=allowed, measured=None,
                                       status="pass" if value is not None else "unknown",
                                       detail="no passing baseline run yet" + ("" if value is not None else
                                                                             "; not measured in this run")))
            continue
        verdict = baseline.judge(name, float(value), allowed) if value is not None else None
        if verdict is None:
            j.results.append(SLOResult(name=key, measurement=name, limit=allowed, measured=None, status="unknown",
                                       detail="not measured in this run or the baseline"))
            continue
        j.results.append(SLOResult(name=key, measurement=name, limit=allowed, measured=round(verdict.worse, 4),
                                   status="fail" if verdict.regressed else "pass",
                                   detail=f"{_round(value)} now; {verdict.why()}"))
        if verdict.regressed:
            j.reasons.append(f"{name} regressed: {_round(value)} against a baseline median of {verdict.median:.3g} "
                             f"({verdict.worse:+.0%}), beyond {verdict.threshold:.3g} — outside the SLO's "
                             f"{allowed:.0%} and the last {verdict.runs} passing run(s)' own spread")


# The judges, in the order their results and reasons are reported, each with the families
# of measurements it reads (limits and regressions name any measurement).
JUDGES: tuple[tuple[Judge, tuple[type[BaseModel], ...]], ...] = (
    (_judge_timed, (RecoveryFigures, RequeueFigures)),
    (_judge_recover_or_escalate, (RecoveryFigures, FailSlowFigures, ReplacementFigures)),
    (_judge_keep_stepping, (RecoveryFigures,)),
    (_judge_rerun_avoids_failed_node, (RequeueFigures,)),
    (_judge_restore_tier, (RecoveryFigures, TierFigures)),
    (_judge_straggler, (RecoveryFigures, FailSlowFigures)),
    (_judge_attribution, (RecoveryFigures, AttributionFigures)),
    (_judge_restore_skipped_corrupted, (RecoveryFigures, DamageFigures)),
    (_judge_crash_invariants, (RecoveryFigures, SaveCrashFigures)),
    (_judge_restore_matches_save, (RecoveryFigures,)),
    (_judge_restore_fidelity, (FidelityFigures,)),
    (_judge_matches_uninterrupted, (FidelityFigures,)),
    (_judge_max_lost_steps, (RecoveryFigures, FidelityFigures)),
    (_judge_goodput_min, (RecoveryFigures,)),
    (_judge_limits, FAMILIES),
    (_judge_regression, FAMILIES),
)


def evaluate(slo: SLO, m: Measurements, history: History,
             baseline: Baseline | None = None) -> tuple[list[SLOResult], list[str]]:
    """Every SLO the spec sets (and the checks every drill gets), judged; with no fault
    injected there is nothing to judge."""
    if m.t_fault is None:
        return [], []
    j = Judging(slo=slo, m=m, watched=m.observed_s or 0.0, baseline=baseline)
    bad = not_numbers(m)
    for judge, reads in JUDGES:
        results, reasons = len(j.results), len(j.reasons)
        judge(j)
        if reads is not FAMILIES:  # limits and regressions judge each figure by itself (_not_a_number)
            _unknown_on_not_numbers(j, {n: v for n, v in bad.items() if any(n in f.model_fields for f in reads)},
                                    results, reasons)
    return j.results, j.reasons


def not_numbers(m: Measurements) -> dict[str, float]:
    """The figures that came out NaN or infinite: every comparison with them is a lie (NaN
    compares false both ways; -inf passes any 'within')."""
    return {name: value for name, value in m if isinstance(value, float) and not math.isfinite(value)}


def _unknown_on_not_numbers(j: Judging, bad: dict[str, float], results: int, reasons: int) -> None:
    """What one judge just added, where a figure of the families it reads is not a number:
    unknown, never a pass or a fail, and no reason of its own."""
    if not bad or len(j.results) == results:
        return
    said = ", ".join(f"{n} came out {v}" for n, v in bad.items())
    for i in range(results, len(j.results)):
        j.results[i] = j.results[i].model_copy(update={
            "status": "unknown", "measured": None, "detail": f"{said} (not a number): nothing can be judged from it"})
    del j.reasons[reasons:]


def _restore_tier(limit: int, m: Measurements, watched: float, reasons: list[str]) -> SLOResult:
    if m.best_available_step is None:
        return SLOResult(name="restore_tier", measurement="steps_behind_best", limit=limit, measured=None,
                         status="unknown", detail="no tier held a checkpoint when the fault hit (or none configured)")
    if m.restored_step is None:
        return SLOResult(name="restore_tier", measurement="steps_behind_best", limit=limit, measured=None,
                         status="unknown", detail=f"no restore seen in {watched:.0f} s")
    if m.time_to_first_step is None:  # a restore began (a line named its step) and the job never stepped
        return SLOResult(name="restore_tier", measurement="steps_behind_best", limit=limit, measured=None,
                         status="unknown", detail=f"a restore of step {m.restored_step} began and the job never "
                                                  f"stepped again in {watched:.0f} s: nothing was restored")
    behind = m.steps_behind_best or 0
    ok = behind <= limit
    where = f" from {m.restored_from}" if m.restored_from else ""
    if not ok:
        reasons.append(f"restored step {m.restored_step}{where} while step {m.best_available_step} survived in the "
                       f"{m.best_available_tier} tier: {behind} step(s) behind the best copy left (the SLO allows "
                       f"{limit})")
    return SLOResult(name="restore_tier", measurement="steps_behind_best", limit=limit, measured=behind,
                     status="pass" if ok else "fail",
                     detail=f"restored {m.restored_step}{where}; best left {m.best_available_step} "
                            f"({m.best_available_tier})")


def _attribution(rule: str, m: Measurements, reasons: list[str]) -> SLOResult:
    """SLO attribution: exact (the hurt ranks, no other) or superset (at least them)."""
    a = m.attribution
    if rule == "no-false-blame":
        return _no_false_blame(m, reasons)
    if a is None and m.signal_kinds is not None and not {"blame", "members"} & set(m.signal_kinds):
        return SLOResult(name="attribution", measurement="attribution", limit=1, measured=None, status="unknown",
                         detail=f"{rule}: the job's profile reads no blame or members lines, so nothing it printed "
                                "could name a culprit; add a preset or a signal of kind blame (rank, pid or "
                                "blamed_node) or members")
    if a is None:
        hurt = ", ".join(map(str, m.target_ranks)) or "?"
        reasons.append(f"the stack blamed no rank: nothing it printed named rank {hurt}, which the fault hurt")
        return SLOResult(name="attribution", measurement="attribution", limit=1, measured=None, status="fail",
                         detail=f"{rule}: nobody blamed")
    ok = a.correct if rule == "exact" else a.covers()
    if not ok:
        reasons.append(a.describe() + (" — it must blame exactly the hurt rank(s)" if rule == "exact" and a.covers()
                                       else ""))
    return SLOResult(name="attribution", measurement="attribution", limit=1, measured=int(ok),
                     status="pass" if ok else "fail", detail=f"{rule}: {a.describe()}")


def _no_false_blame(m: Measurements, reasons: list[str]) -> SLOResult:
    """SLO attribution no-false-blame: the stack blamed no rank the fault did not hurt.
    Silence passes only where the profile reads the lines a blame would be in (straggler,
    blame, members): a stack drillbit cannot hear is unknown, never a pass."""
    a = m.attribution
    where = f"; the fault was on {m.link}" if m.link else ""
    if a is None:
        reads = sorted({"blame", "members", "straggler"} & set(m.signal_kinds or ()))
        if not reads:
            return SLOResult(name="attribution", measurement="attribution", limit=1, measured=None, status="unknown",
                             detail="no-false-blame: the job's profile reads no straggler, blame or members lines, "
                                    "so a blame could not have been heard")
        return SLOResult(name="attribution", measurement="attribution", limit=1, measured=1, status="pass",
                         detail=f"no-false-blame: nothing the stack printed after the fault blamed a rank (the profile "
                                f"reads its {', '.join(reads)} lines){where}")
    ok = not a.false_blames
    if not ok:
        reasons.append(f"{a.describe()}: rank(s) {', '.join(map(str, a.false_blames))} blamed for a fault that did "
                       f"not hurt them{where}")
    return SLOResult(name="attribution", measurement="attribution", limit=1, measured=int(ok),
                     status="pass" if ok else "fail", detail=f"no-false-blame: {a.describe()}{where}")


def _skipped_damaged(d, rejected: bool | None, reasons: list[str]) -> SLOResult:
    """An invariant, not an option: the restart must not load the checkpoint the harness
    damaged. Judged from the witnesses (judging/checks/witness.py); unknown when none could tell."""
    status: Status = "unknown" if d.loaded is None else ("fail" if d.loaded else "pass")
    name = os.path.basename(d.checkpoint)
    detail = f"damaged {name}" + (f" (step {d.step})" if d.step is not None else "") + f": {d.why}"
    if rejected:
        detail += "; the job's own line rejected it"
    if status == "fail" and d.resumed:
        reasons.append(f"the job restored {name}, the checkpoint the harness had corrupted: nothing verified it "
                       f"before loading ({d.why})")
    elif status == "fail":
        reasons.append(f"the job did not skip {name}, the checkpoint the harness had corrupted: {d.why} — it never "
                       "got past it and never trained again")
    return SLOResult(name="restore_skipped_corrupted", measurement="damaged_restore", limit=1,
                     measured=None if d.loaded is None else int(not d.loaded), status=status, detail=detail)


def _crash_invariants(m: Measurements, reasons: list[str]) -> list[SLOResult]:
    """kill-during-save's invariants, judged whenever the crash landed: a restart must not
    load a checkpoint the crash left incomplete, nor fall back past the newest complete one."""
    out: list[SLOResult] = []
    where = f"the crash at '{m.crash_point}'"
    status: Status = "unknown" if m.restored_incomplete is None else ("fail" if m.restored_incomplete else "pass")
    out.append(SLOResult(name="restored_incomplete", measurement="restored_incomplete", limit=0,
                         measured=None if m.restored_incomplete is None else int(m.restored_incomplete),
                         status=status, detail=f"{where} left {m.crashed_checkpoint or 'nothing visible'}"
                         + (f" incomplete ({m.crashed_why})" if m.crashed_complete is False else "")))
    if status == "fail":
        reasons.append(f"the job resumed from {m.crashed_checkpoint}, which {where} left incomplete "
                       f"({m.crashed_why}): nothing checked the checkpoint was complete before loading it")
    fell = m.fell_back_further_than_needed
    status = "unknown" if fell is None else ("fail" if fell else "pass")
    out.append(SLOResult(name="fell_back_further_than_needed", measurement="restored_step",
                         limit=m.best_complete_step if m.best_complete_step is not None else 0,
                         measured=m.restored_step, status=status,
                         detail=f"newest complete checkpoint when the job died: {m.best_complete or 'none'}"))
    if status == "fail":
        reasons.append(f"the job restored step {m.restored_step}, but {m.best_complete} (step {m.best_complete_step}) "
                       f"was complete when it crashed: {(m.best_complete_step or 0) - (m.restored_step or 0)} steps of "
                       "work thrown away")
    return out


def _round(value: float | int) -> float | int:
    return round(value, 3) if isinstance(value, float) else value
