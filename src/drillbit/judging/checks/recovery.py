"""Recovery measurements from a history (DESIGN.md, Contracts / Measurements).

All times are seconds from the fault's confirmed effect (t_fault). Only events before
``observe.end`` count: what happens after the harness healed the fault is not the
job's own recovery.
"""
from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel

from drillbit.judging.checks.attribution import Attribution, attribute
from drillbit.judging.checks.fidelity import Fidelity, Lines, restore_fidelity, with_metrics
from drillbit.judging.checks.twin import TwinComparison, compare as compare_twin
from drillbit.judging.checks.ownslow import name_slowed
from drillbit.judging.checks.witness import DamagedRestore, judge_damaged_restore, relation
from drillbit.core.evidence import FileDamage, LinkCut, NodeGone, NodeState, SaveCrash, Slowed, TierLost, effects
from drillbit.core.events import (CkptTiers, Error, FaultConfirmed, JobAttach, JobExit, JobLaunch, JobNodes, Kind,
                                  Predicted, Reject, ReplaceDone, Restart, Restore, RestoreCopy, RestoreFailed, Save,
                                  SaveBegin, SteadyReached, Step, Straggler)
from drillbit.core.history import Event, Events, History, StepLine, of, steps_of


class JobError(BaseModel):
    """The job's own error for one or more failed attempts (attempt 0: the run the fault hit;
    N: the N-th restart), one rank's or an unnamed one's, deduplicated by its words."""

    attempts: list[int]
    rank: int | None = None
    message: str
    by: str | None = None

    def quote(self) -> str:
        a = self.attempts
        span = (f"attempt {a[0]}" if len(a) == 1 else f"attempts {a[0]}–{a[-1]}" if a == list(range(a[0], a[-1] + 1))
                else "attempts " + ", ".join(map(str, a)))
        who = f", rank {self.rank}" if self.rank is not None else ""
        text = self.message if len(self.message) <= 160 else self.message[:157] + "…"
        return f"{span}{who}: {text}"


class RecoveryFigures(BaseModel):
    """Every drill: the fault, detection, restart, restore, the first step after it, what
    was lost, the job's exit and its own errors, goodput."""

    t_fault: float | None = None
    t_observe_end: float | None = None
    observed_s: float | None = None
    baseline_step_s: float | None = None
    step_at_fault: int | None = None
    time_to_detect: float | None = None
    time_to_restart: float | None = None
    time_to_restore: float | None = None
    restored_step: int | None = None
    # the digest of the state the job printed when it restored, and when it saved that step
    restored_digest: str | None = None
    saved_digest: str | None = None
    time_to_first_step: float | None = None
    first_step: int | None = None
    lost_steps: int | None = None
    # the job's last save line before the fault: its step, and how long before the fault it came
    # (a restart that restores an older step lost a checkpoint the job believed it had)
    newest_save_step: int | None = None
    newest_save_s: float | None = None
    restarts: int = 0
    steps_after_recovery: int = 0
    last_step_s: float | None = None
    job_exit_s: float | None = None
    job_exit_code: int | None = None
    goodput: float | None = None
    expects: str | None = None                # what the fault expects of the job: stop, hang, slow
    target_ranks: list[int] = []
    # the event kinds the job's profile can read (None: not recorded, an older history)
    signal_kinds: list[str] | None = None
    # the job's own errors after the fault, the first per rank per attempt (error signals)
    job_errors: list[JobError] = []
    # a measurer that failed (a drillbit bug): its name and the error; its figures are unknown
    measure_errors: dict[str, str] = {}


class FidelityFigures(BaseModel):
    """Whether what came back is what was saved: loss, learning rate, data position
    (judging/checks/fidelity.py)."""

    fidelity: Fidelity | None = None
    # the run after the restore against the same job run without the fault (judging/checks/twin.py)
    uninterrupted: TwinComparison | None = None


class FailSlowFigures(BaseModel):
    """A slowed rank (slow-rank, throttle-clocks): how slow, who was named, what the
    fleet paid, and the escalation."""

    target_slowdown: float | None = None
    slowdown_achieved: float | None = None
    time_to_straggler: float | None = None
    straggler_rank: int | None = None
    straggler_node: str | None = None
    straggler_correct: bool | None = None
    slowdown: float | None = None
    fleet_tax: float | None = None
    time_to_escalate: float | None = None
    link: str | None = None  # a link fault (lossy-link): whose link, and what it dropped


class EffectFigures(BaseModel):
    """drillbit's own confirmation of a fail-slow fault, from the job's per-rank step times
    (``rank.time``; judging/checks/ownslow.py): the rank they say slowed, by how much against
    its peers, and when the evidence first sufficed."""

    effect_rank: int | None = None
    effect_shift: float | None = None
    effect_z: float | None = None
    time_to_effect: float | None = None
    effect_correct: bool | None = None
    effect_unread: str | None = None  # why nothing could be read (no per-rank times, too few steps)
    effect_target_shift: float | None = None  # the slowed rank's own shift, named or not: what the fault delivered


class ReplacementFigures(BaseModel):
    """A node replacement that failed (fail-node-replacement): how often, and what came back."""

    replace_failures: int = 0
    replacement_node: str | None = None


class DamageFigures(BaseModel):
    """A damaged checkpoint (corrupt-checkpoint, restore-hang): which one, and whether the
    restart loaded it (the witnesses of judging/checks/witness.py)."""

    corrupted_checkpoint: str | None = None   # its name (the folder's, or the file's)
    corrupted_path: str | None = None
    corrupted_step: int | None = None
    restored_path: str | None = None
    rejected_corrupted: bool | None = None
    damaged_restore: DamagedRestore | None = None


class SaveCrashFigures(BaseModel):
    """A crash inside a save (kill-during-save): where it landed and what the restart made of it."""

    crash_point: str | None = None
    crash_lag_s: float | None = None          # the crash point's file event -> the kill
    crashed_checkpoint: str | None = None     # what the cut-short save left visible (None: nothing)
    crashed_step: int | None = None
    crashed_complete: bool | None = None
    crashed_why: str | None = None
    best_complete_step: int | None = None     # the newest complete checkpoint when the job died
    best_complete: str | None = None
    restored_incomplete: bool | None = None
    fell_back_further_than_needed: bool | None = None


class AttributionFigures(BaseModel):
    """Whom the stack blamed, against whom the fault hurt (judging/checks/attribution.py)."""

    attribution: Attribution | None = None


class RequeueFigures(BaseModel):
    """A scheduler's requeue (Slurm): the fault -> the job requeued -> running again, and where."""

    time_to_requeue: float | None = None
    failed_nodes: list[str] = []
    rerun_nodes: list[str] | None = None
    rerun_on_failed_node: bool | None = None


class TierFigures(BaseModel):
    """Multi-tier checkpoints: where the restore came from, against the best copy left."""

    restored_from: str | None = None          # the tier the job's lines name (local, peer, persistent)
    best_available_step: int | None = None    # the newest step any surviving copy held when the fault hit
    #                                            (a tier known from save lines: saved before the restore)
    best_available_tier: str | None = None
    lost_copies: list[str] = []               # tier copies the fault took away
    steps_behind_best: int | None = None
    # a heal from a live peer (torchft's): how long the copy took, and from where, as the job said
    peer_copy_s: float | None = None
    peer_copy_from: str | None = None


class PredictionFigures(BaseModel):
    """Detection as the job's declared timeouts predicted it before the drill (judging/checks/predict.py),
    beside what was measured; not judged."""

    predicted_detect_s: float | None = None
    predicted_by: str | None = None           # the timeout predicted to see the fault first


# The families, in the order their fields are reported (result.json keeps one flat object).
FAMILIES: tuple[type[BaseModel], ...] = (RecoveryFigures, FidelityFigures, FailSlowFigures, EffectFigures,
                                         ReplacementFigures, DamageFigures,
                                         SaveCrashFigures, AttributionFigures, RequeueFigures, TierFigures,
                                         PredictionFigures)


class Measurements(PredictionFigures, TierFigures, RequeueFigures, AttributionFigures, SaveCrashFigures,
                   DamageFigures, ReplacementFigures, EffectFigures, FailSlowFigures, FidelityFigures,
                   RecoveryFigures):
    """One drill's figures: the families above, flat (a field belongs to exactly one)."""

    @staticmethod
    def family_of(name: str) -> type[BaseModel]:
        return next(f for f in FAMILIES if name in f.model_fields)


AFTER_THE_WATCH = ("observe.end", "uninterrupted", "uninterrupted.step")


def _window(history: History) -> tuple[Events, float | None]:
    end = history.first("observe.end")
    t_end = end.t if end else None
    # the uninterrupted run (matches_uninterrupted) is made after the drill, for its judgement
    return history.window(t_end, AFTER_THE_WATCH), t_end


def _from_going_back(before: list[StepLine], after: list[StepLine], recovered: list[StepLine],
                     floor: int) -> list[StepLine]:
    """The new attempt's steps, where the job's own numbering shows where it began: a step at or
    below the one before it from the same rank, above the restored step, at or before the first
    step the times put after the restore. The times alone can miss it: a stamp of whole seconds
    (Megatron's training_log) read after its second is the start of that second, earlier than a
    restore line that has no stamp and gets the time it was read (a CI run: "resumed from step
    21" with step 20 restored, the line for step 21 put before the restore). Steps come from
    each log in the order written, so the going-back is the restart whatever the stamps say."""
    end = recovered[0].seq if recovered else None
    last: dict[int | None, int] = {s.rank: s.n for s in before}
    back: int | None = None
    for i, s in enumerate(after):
        if end is not None and s.seq > end:
            break
        prev = last.get(s.rank)
        if prev is not None and s.n <= prev and s.n > floor:
            back = i
        last[s.rank] = s.n
    if back is None:
        return recovered
    return [s for s in after[back:] if s.n > floor]


def _attempt(restart: Event) -> int | str:
    """Which attempt a restart line counts (one attempt number is one restart)."""
    attempt = Restart.of(restart).attempt
    return attempt if attempt is not None else f"event-{restart.seq}"


def _since(step: StepLine) -> float:
    """The earliest a step can have been made: a step read from a metric, after its ``since``."""
    return step.since if step.since is not None else step.t


@dataclass
class Window:
    """What the measurers read, found once: the events observed (to ``observe.end``), the
    fault's confirmed moment, and the steps on each side of it. Measurers earlier in
    :data:`MEASURERS` leave what later ones need here (the restart, the restore, the steps
    that recovered)."""

    events: list[Event]
    confirmed: Event
    t0: float
    injected: float           # when the fault was injected (a scheduler may requeue before it is confirmed)
    before: list[StepLine]    # the steps before the fault
    after: list[StepLine]     # the steps after it
    late: set[int]            # seqs of first steps of a new attempt read after the fault, whatever their stamp
    restart: Event | None = None
    restore: Event | None = None
    recovered: list[StepLine] = field(default_factory=list)
    first_at: float | None = None   # when the first step after recovery was made
    damaged: FileDamage | None = None
    crash_dir: str = ""
    crash_names: list[str] = field(default_factory=list)

    def first(self, kind: str) -> Event | None:
        return next((e for e in of(self.events, kind) if e.t >= self.t0), None)

    @classmethod
    def of(cls, events: list[Event], confirmed: Event) -> "Window":
        t0 = confirmed.t
        steps = steps_of(events)
        # A stall is confirmed only after a quiet spell; a step that was already in flight
        # when the rank froze may land inside it and still belongs before the fault.
        settle = FaultConfirmed.of(confirmed).progress_quiet_s or 0.0
        # the first step after a restart or restore line, read after the fault was confirmed, is after
        # it whatever its stamp says: a stamp of whole seconds (Megatron's) can put it up to 1 s earlier
        late = {s.seq for s in steps if s.new_attempt and s.seq > confirmed.seq and s.t >= t0 - 1.0}
        before = [s for s in steps if s.t < t0 + settle and s.seq not in late]
        taken = {s.seq for s in before}  # by seq: a list's `in` compared every event with every other
        after = [s for s in steps if (s.t >= t0 or s.seq in late) and s.seq not in taken]
        injected = next((e.t for e in of(events, "fault.inject") if e.t <= t0), t0)
        return cls(events=events, confirmed=confirmed, t0=t0, injected=injected, before=before, after=after, late=late)


def _fault(m: Measurements, w: Window) -> None:
    """The fault's moment, how long it was watched, and where the job stood."""
    events = w.events
    m.t_fault = w.t0
    last_t = m.t_observe_end if m.t_observe_end is not None else max(e.t for e in events)
    m.observed_s = max(0.0, last_t - w.t0)
    m.step_at_fault = w.before[-1].n if w.before else None
    saves = [e for e in of(events, Kind.CKPT_SAVE) if e.t <= w.t0 and Save.of(e).step is not None]
    if saves:
        m.newest_save_step, m.newest_save_s = Save.of(saves[-1]).step, w.t0 - saves[-1].t
    m.expects = FaultConfirmed.of(w.confirmed).expects
    m.target_ranks = sorted({e.rank for e in of(events, "fault.inject") if e.rank is not None})


def _restarts(m: Measurements, w: Window) -> None:
    """Detection, the restarts the job announced, its exit and its own errors."""
    events, t0 = w.events, w.t0
    # Restarts as the job announces them; a launcher's lines (torchrun's restart_count, with
    # `by`) count only for a job that announces none itself — on several nodes each launcher
    # numbers its own attempts — and one attempt number is one restart.
    restarts = [e for e in of(events, "restart") if e.t >= t0]
    restarts = [e for e in restarts if Restart.of(e).by is None] or restarts
    # a launcher that restarts its healthy workers because another node joined (torchrun's
    # "Detected N new nodes") is part of that node's recovery when another launcher counted
    # an attempt within seconds of it; alone (a node that left and came straight back), it
    # is a restart of its own, which no attempt count shows
    counted = [e.t for e in restarts if Restart.of(e).attempt is not None]
    restarts = [e for e in restarts
                if Restart.of(e).waiting is None or not any(abs(t - e.t) <= 10.0 for t in counted)]
    w.restart = restarts[0] if restarts else None
    m.restarts = len({_attempt(e) for e in restarts})
    m.job_errors = job_errors(events, t0, [e.t for e in restarts])
    detect = w.first("detect")
    if detect:
        m.time_to_detect = detect.t - t0
    if w.restart:
        m.time_to_restart = w.restart.t - t0
    exit_ = w.first("job.exit")
    if exit_:
        m.job_exit_s = exit_.t - t0
        m.job_exit_code = JobExit.of(exit_).code


def _restore(m: Measurements, w: Window) -> tuple[float, int]:
    """The restore the job announced (or a restart it did not): where recovery's steps begin
    (a time) and the step number they must pass."""
    restore = w.restore = w.first("restore")
    if restore:
        said = Restore.of(restore)
        m.restored_path = said.path or None
        m.time_to_restore = restore.t - w.t0
        m.restored_step = said.step  # None: a stack that names only the path (Lightning's last.ckpt)
        if said.digest and m.restored_step is not None:
            m.restored_digest = said.digest
            saved = [Save.of(e) for e in of(w.events, Kind.CKPT_SAVE) if e.t <= restore.t]
            saved = [s for s in saved if s.digest and s.step == m.restored_step]
            m.saved_digest = saved[-1].digest if saved else None
        return restore.t, m.restored_step or 0
    if w.restart:
        return w.restart.t, 0  # restarted without a restore: from wherever it began
    # a step number at or below the one at the fault is a restart the job did not
    # announce (its supervisor printed nothing we read): it began again from there
    back = next((s for s in w.after if m.step_at_fault is not None and s.n <= m.step_at_fault), None)
    if back is not None:
        w.restart = back.event
        m.restarts = max(m.restarts, 1)
        return back.t, 0
    return w.t0, m.step_at_fault if m.step_at_fault is not None else -1


def _first_step(m: Measurements, w: Window, marker: float, floor: int) -> None:
    """The first step of recovery, and how many followed it."""
    # a step read from a metric happened somewhere after its ``since``: across a restart it
    # counts only when that whole span is after the restart (the old workers' last steps are not)
    recovered = [s for s in w.after if _since(s) >= marker and s.n > floor]
    if w.restart or w.restore:
        recovered = _from_going_back(w.before, w.after, recovered, floor)
    w.recovered = recovered
    if recovered:
        # no earlier than the line that began its attempt, where its own stamp is coarser
        w.first_at = max(recovered[0].t, marker) if recovered[0].seq in w.late else recovered[0].t
        m.time_to_first_step = w.first_at - w.t0
        m.first_step = recovered[0].n
        m.steps_after_recovery = len({s.n for s in recovered}) - 1
        if m.restored_step is None and (w.restart or w.restore):
            m.restored_step = m.first_step - 1


def _counted_from(m: Measurements, w: Window, marker: float, floor: int) -> int:
    """The step the restart really went on from. A restore line is the job's word; its steps are
    what it did: where the first step after the restore is the first step of training (a restore
    line for step 20, then step 1), the job's count began again, and nothing was kept. (A step
    below the restored one but past the start is a survivor's that did not restart, as torchft's
    replicas step on while one heals: no evidence the count began again.)"""
    if w.restore is None:
        return floor
    first = next((s for s in w.after if s.t >= marker), None)
    if first is None or floor <= 1 or first.n > 1:
        return floor
    m.restored_step = first.n - 1
    return m.restored_step


def _fell_back(m: Measurements, w: Window) -> None:
    """A later restart that restored an older step than the first (the job died again after it
    recovered, and went back further): the steps from that older step on were lost too. Only a
    restore after another restart line counts."""
    if w.restore is None or m.restored_step is None:
        return
    again = next((e.t for e in of(w.events, "restart") if e.t > w.restore.t), None)
    if again is None:
        return  # one attempt's restore lines (a tier it fell back from) are the restore's own story
    later = [Restore.of(e).step for e in of(w.events, "restore") if e.t > again]
    older = min((s for s in later if s is not None), default=None)
    if older is not None and older < m.restored_step:
        m.restored_step = older


def _recovery(m: Measurements, w: Window) -> None:
    """RecoveryFigures: the restore, the first step after it, what was lost."""
    marker, floor = _restore(m, w)
    _first_step(m, w, marker, _counted_from(m, w, marker, floor))
    _fell_back(m, w)
    if m.step_at_fault is not None and m.restored_step is not None:
        m.lost_steps = max(0, m.step_at_fault - m.restored_step)
    elif m.step_at_fault is not None and m.time_to_first_step is not None:
        m.lost_steps = 0  # progress resumed without a restart
    if w.after:
        m.last_step_s = w.after[-1].t - w.t0


def _fidelity(m: Measurements, w: Window) -> None:
    """FidelityFigures: whether what came back is what was saved."""
    twin = bool(of(w.events, "uninterrupted"))
    if not (twin or w.restart or w.restore):
        return
    before, recovered = _lines(w.before, w.events), _lines(w.recovered, w.events)
    if w.restart or w.restore:
        m.fidelity = restore_fidelity(before, recovered, m.restored_step, m.newest_save_step)
    if twin:
        m.uninterrupted = compare_twin(before, recovered, m.restored_step, w.events)


def _lines(steps: list[StepLine], events: list[Event]) -> list[Event]:
    """The step lines' events with the figures of metrics lines merged in (with_metrics), or,
    where the job prints none, as Lines that fidelity reads from what the history read."""
    if of(events, "metrics"):
        return with_metrics([s.event for s in steps], events)
    return Lines.of_steps(steps)


def _attribution(m: Measurements, w: Window) -> None:
    confirmed = FaultConfirmed.of(w.confirmed)
    m.attribution = attribute(w.events, w.t0, confirmed.hurts, confirmed.verb)


def _requeue(m: Measurements, w: Window) -> None:
    _measure_requeue(m, w.events, w.confirmed, w.t0, w.injected)


def _slow(m: Measurements, w: Window) -> None:
    _measure_slow(m, w.events, w.confirmed, w.t0)


def _effect(m: Measurements, w: Window) -> None:
    end = m.t_observe_end if m.t_observe_end is not None else max((e.t for e in w.events), default=w.t0)
    if not of(w.events, "rank.time"):
        m.effect_unread = "the job prints no per-rank step times (rank.time)"
        return
    named = name_slowed(w.events, w.t0, end)
    m.effect_unread = named.why
    shifts = [v for r, v in (named.shifts or {}).items() if r in m.target_ranks]
    m.effect_target_shift = max(shifts) if shifts else None
    if named.rank is not None:
        m.effect_rank, m.effect_shift, m.effect_z = named.rank, named.shift, named.z
        m.time_to_effect = max(0.0, named.t - w.t0) if named.t is not None else None
        m.effect_correct = named.rank in m.target_ranks


def _damage_found(m: Measurements, w: Window) -> None:
    """DamageFigures and SaveCrashFigures as the fault found them: which checkpoint it
    damaged, or where a save was cut short and what was complete then."""
    for effect in effects(w.confirmed.data):
        if isinstance(effect, FileDamage):
            w.damaged = effect
            m.corrupted_path = effect.checkpoint.rstrip("/")
            m.corrupted_checkpoint = os.path.basename(m.corrupted_path)
            m.corrupted_step = effect.step
        elif isinstance(effect, SaveCrash):
            m.crash_point, m.crash_lag_s = effect.point, effect.lag_s
            m.crashed_checkpoint, m.crashed_step = effect.crashed, effect.crashed_step
            m.crashed_complete, m.crashed_why = effect.crashed_complete, effect.crashed_why or None
            m.best_complete_step, m.best_complete = effect.best_complete_step, effect.best_complete
            w.crash_dir = effect.dir or ""
            w.crash_names = [str(c.get("name")) for c in effect.checkpoints]
    if m.corrupted_path is not None and m.corrupted_step is None:
        # a checkpoint with no step in its name (one file rewritten in place): the step the
        # job's last save line before the damage named
        m.corrupted_step = saved_step(w.events, m.corrupted_path, w.injected)
        if w.damaged is not None:
            w.damaged = w.damaged.model_copy(update={"step": m.corrupted_step})
    if m.crash_point is not None and m.crashed_checkpoint is not None and m.crashed_step is None:
        # the save the crash cut short: the step its begin line named
        m.crashed_step = saved_step(w.events, os.path.join(w.crash_dir, m.crashed_checkpoint), w.t0,
                                    "ckpt.save.begin")
    if m.crash_point is not None and m.best_complete is not None and m.best_complete_step is None:
        m.best_complete_step = (m.crashed_step if m.best_complete == m.crashed_checkpoint else
                                saved_step(w.events, os.path.join(w.crash_dir, m.best_complete), w.injected))
    if m.corrupted_path is not None and (m.signal_kinds is None or "ckpt.reject" in m.signal_kinds):
        # the job's own word that it refused the damaged one; a profile that reads no reject
        # line cannot say either way (the witnesses still judge what was loaded)
        rejected = [Reject.of(e).path for e in of(w.events, Kind.CKPT_REJECT) if e.t >= w.t0]
        m.rejected_corrupted = any(path and relation(path, m.corrupted_path) == "same" for path in rejected)


def _damaged_restore(m: Measurements, w: Window) -> None:
    """Whether the restart loaded the damaged checkpoint: the witnesses (judging/checks/witness.py)."""
    if w.damaged is not None:
        m.damaged_restore = judge_damaged_restore(w.events, w.injected, w.damaged, w.restore,
                                                  w.recovered[0].event if w.recovered else None, w.restart is not None,
                                                  w.first_at)


def _save_crash(m: Measurements, w: Window) -> None:
    if m.crash_point is not None:
        _judge_crash_restore(m, w.restore is not None or w.restart is not None, w.crash_dir, w.crash_names)


def _replacement(m: Measurements, w: Window) -> None:
    """ReplacementFigures, and an escalation (time_to_escalate)."""
    escalate = w.first("escalate")
    if escalate:
        m.time_to_escalate = escalate.t - w.t0
    m.replace_failures = sum(1 for e in of(w.events, "replace.failed") if e.t >= w.t0)
    done = w.first("replace.done")
    if done:
        m.replacement_node = ReplaceDone.of(done).node_name


def _tiers(m: Measurements, w: Window) -> None:
    _measure_tiers(m, w.events, w.confirmed, w.t0, w.restore)


@dataclass(frozen=True)
class Measurer:
    """One family's figures from the window. ``reads``: the event kinds it reads; ``writes``:
    the figures it sets, put back to unknown when it fails; ``slow``: whether it measures a
    fail-slow fault too; ``poll``: whether the observe phase's stop test needs it."""

    name: str
    measure: Callable[[Measurements, Window], None]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    slow: bool = False
    poll: bool = False


def _fields(*families: type[BaseModel], but: tuple[str, ...] = (), plus: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f for fam in families for f in fam.model_fields if f not in but) + plus


# In the order they run: each may read what the ones before it left in the window.
MEASURERS: tuple[Measurer, ...] = (
    Measurer("fault", _fault, ("fault.confirmed", "fault.inject", "step", "ckpt.save"),
             ("t_fault", "observed_s", "step_at_fault", "newest_save_step", "newest_save_s", "expects", "target_ranks"),
             slow=True, poll=True),
    Measurer("restarts", _restarts, ("detect", "restart", "job.exit", "error"),
             ("time_to_detect", "time_to_restart", "restarts", "job_errors", "job_exit_s", "job_exit_code"),
             slow=True, poll=True),
    Measurer("recovery", _recovery, ("restore", "step", "ckpt.save"),
             ("time_to_restore", "restored_step", "restored_digest", "saved_digest", "time_to_first_step", "first_step",
              "steps_after_recovery", "lost_steps", "last_step_s", "restored_path"), poll=True),
    Measurer("fail-slow", _slow, ("step", "straggler", "fault.inject"),
             _fields(FailSlowFigures, but=("time_to_escalate",), plus=("steps_after_recovery", "lost_steps")),
             slow=True, poll=True),
    Measurer("effect", _effect, ("rank.time",), _fields(EffectFigures), slow=True),
    Measurer("attribution", _attribution, ("blame", "members", "job.ranks", "fault.inject", "straggler"),
             _fields(AttributionFigures), slow=True),
    Measurer("requeue", _requeue, ("requeue", "job.nodes"), _fields(RequeueFigures), slow=True),
    Measurer("fidelity", _fidelity, ("step", "metrics", "uninterrupted", "uninterrupted.step"),
             _fields(FidelityFigures)),
    Measurer("damage", _damage_found, ("ckpt.save", "ckpt.save.begin", "ckpt.reject"),
             _fields(DamageFigures, but=("restored_path", "damaged_restore")) + _fields(SaveCrashFigures)),
    Measurer("damaged-restore", _damaged_restore, ("ckpt.read", "restore", "step"), ("damaged_restore",)),
    Measurer("save-crash", _save_crash, (), ("restored_incomplete", "fell_back_further_than_needed")),
    Measurer("replacement", _replacement, ("escalate", "replace.failed", "replace.done"),
             _fields(ReplacementFigures, plus=("time_to_escalate",))),
    Measurer("tiers", _tiers, ("restore.copy", "ckpt.tiers", "ckpt.save", "restore"), _fields(TierFigures)),
)


def _before_the_fault(m: Measurements, events: list[Event]) -> None:
    """What the run says before any fault: its baseline, the prediction, what it can read."""
    steady = next(iter(of(events, Kind.STEADY)), None)
    m.baseline_step_s = SteadyReached.of(steady).baseline_step_s if steady else None
    predicted = next(iter(of(events, Kind.PREDICTED)), None)
    if predicted is not None:
        m.predicted_detect_s, m.predicted_by = Predicted.of(predicted).detect_s, Predicted.of(predicted).by
    launch = next((e.payload for e in of(events, Kind.JOB_LAUNCH.value, Kind.JOB_ATTACH.value)), None)
    if isinstance(launch, (JobLaunch, JobAttach)) and "reads" in launch.model_fields_set:
        m.signal_kinds = list(launch.reads)


def measure(history: History, *, poll: bool = False) -> Measurements:
    """Every figure of one run, family by family (:data:`MEASURERS`). A measurer that raises
    leaves its figures unknown (None), names itself and the error in ``measure_errors``, and
    the others still measure; the SLOs that need its figures then say unknown, never pass.
    ``poll``: only what the observe phase's stop test reads (``recovered``, ``awaiting``)."""
    events, t_end = _window(history)
    m = Measurements(t_observe_end=t_end)
    confirmed = next(iter(of(events, "fault.confirmed")), None)
    try:
        _before_the_fault(m, events)
        if confirmed is None:
            return m
        w = Window.of(events, confirmed)
    except (ValueError, TypeError) as exc:  # a payload its kind does not read (an older history, a bug)
        m.measure_errors["window"] = f"{exc.__class__.__name__}: {exc}"
        return m
    slow = FaultConfirmed.of(confirmed).expects == "slow"
    for measurer in MEASURERS:
        if (poll and not measurer.poll) or (slow and not measurer.slow) or \
                (measurer.name in ("fail-slow", "effect") and not slow):
            continue
        try:
            measurer.measure(m, w)
            bad = [f"{name} came out {v}" for name in measurer.writes
                   if isinstance(v := getattr(m, name), float) and not math.isfinite(v)]
            if bad:  # NaN or inf: a figure no comparison can judge (an event's time that was not a number)
                raise ValueError("; ".join(bad))
        except Exception as exc:  # noqa: BLE001 — one family's bug is that family's unknown
            defaults = Measurements()
            for name in measurer.writes:
                setattr(m, name, getattr(defaults, name))
            m.measure_errors[measurer.name] = f"{exc.__class__.__name__}: {exc}"
    return m


def saved_step(events: list[Event], path: str, before: float, kind: str = "ckpt.save") -> int | None:
    """The step of the job's last save line (``kind``) before ``before`` that names ``path``
    (or, where the lines name no path, the last one with a step)."""
    saves = [s for s in (e.payload for e in of(events, kind) if e.t <= before)
             if isinstance(s, (Save, SaveBegin)) and s.step is not None]
    named = [s for s in saves if s.path and relation(s.path, path) == "same"]
    picked = named or [s for s in saves if not s.path]
    return picked[-1].step if picked else None


def job_errors(events: list[Event], t0: float, restarts_at: list[float]) -> list[JobError]:
    """The first error line per rank per attempt after the fault, merged across attempts that
    said the same (digits aside: ports, pids and addresses change between attempts)."""
    first: dict[tuple[int, int | None], Event] = {}
    for e in of(events, Kind.ERROR.value):
        if e.t < t0:
            continue
        attempt = sum(1 for t in restarts_at if t <= e.t)
        rank = e.rank if e.rank is not None else e.data.get("rank")
        first.setdefault((attempt, rank if isinstance(rank, int) else None), e)
    merged: dict[tuple[int | None, str], JobError] = {}
    for (attempt, rank), e in sorted(first.items(), key=lambda kv: (kv[0][0], kv[1].t)):
        message = Error.of(e).message
        key = (rank, re.sub(r"\d+", "#", message))
        if key in merged:
            merged[key].attempts.append(attempt)
        else:
            by = Error.of(e).by
            merged[key] = JobError(attempts=[attempt], rank=rank, message=message, by=None if by is None else str(by))
    return list(merged.values())


def _measure_requeue(m: Measurements, events: list[Event], confirmed: Event, t0: float, injected: float) -> None:
    """A scheduler that requeued the job: how soon, and whether the rerun's allocation kept a
    node the fault took down."""
    m.failed_nodes = sorted({str(e.node) for e in effects(confirmed.data)
                             if isinstance(e, (NodeState, NodeGone)) and e.node}
                            if FaultConfirmed.of(confirmed).hurts == "node" else set())
    # the scheduler can requeue before the harness has recorded its own confirmation (node-down:
    # scontrol's DOWN and the requeue land in the same few milliseconds): from the injection on
    requeue = next((e for e in of(events, "requeue") if e.t >= injected), None)
    if requeue is None:
        return
    m.time_to_requeue = max(0.0, requeue.t - t0)
    rerun = next((e for e in of(events, "job.nodes") if e.t >= requeue.t), None)
    if rerun is not None:
        m.rerun_nodes = list(JobNodes.of(rerun).nodes)
        if m.failed_nodes:
            m.rerun_on_failed_node = bool(set(m.rerun_nodes) & set(m.failed_nodes))


def _measure_tiers(m: Measurements, events: list[Event], confirmed: Event, t0: float,
                   restore: Event | None) -> None:
    """Which tier the restore came from, and how far behind the best copy that survived the
    fault (the tiers as they were when it hit, less the copies it took away)."""
    copy = next((RestoreCopy.of(e) for e in of(events, Kind.RESTORE_COPY) if e.t >= t0
                 and RestoreCopy.of(e).seconds is not None), None)
    if copy is not None:
        m.peer_copy_s = copy.seconds
        m.peer_copy_from = str(copy.peer) if copy.peer is not None else None
    found = next((e for e in reversed(of(events, Kind.CKPT_TIERS)) if e.t <= t0), None)
    snapshot = CkptTiers.of(found) if found is not None else None
    order = list(snapshot.tiers) if snapshot is not None else []
    if restore is not None and m.time_to_first_step is not None:
        # between the restart's first restore and its first step (DESIGN); a restore that never
        # led to a step restored nothing the job trained from: one process of a restart that
        # hangs may have named its tier while another never got that far
        m.restored_from = restored_tier(events, restore, t0 + m.time_to_first_step, order)
    if snapshot is None:
        return
    lost: set[str] = set()
    for effect in effects(confirmed.data):
        if isinstance(effect, TierLost):
            lost.add(effect.lost.rstrip("/"))
    tiers = {name: dict(copies) for name, copies in snapshot.tiers.items()}
    fault = FaultConfirmed.of(confirmed)
    # a tier with no folder (shared memory): the newest step the job said it saved there before
    # its restart restored. A save line without a time of its own is stamped when it was read,
    # which can be after the kill that came just after it (a DLRover rank killed at step 18,
    # under load: its "saved step=18 tier=memory" was read 56 ms after the kill was confirmed,
    # and the restart restored 18 from memory); a survivor's save between the fault and the
    # restore is a copy the restore could take too.
    said_until = restore.t if restore is not None else t0
    for name, lost_with in (snapshot.saved or {}).items():
        saved = [s.step for s in (Save.of(e) for e in of(events, Kind.CKPT_SAVE) if e.t <= said_until)
                 if s.tier == name and s.step is not None]
        said = f"{name} (the job's saves)"
        tiers[name] = {said: max(saved)} if saved else {}
        if saved and (fault.hurts == "node" or (lost_with == "process" and fault.expects == "crash")):
            lost.add(said)
    m.lost_copies = sorted(lost)
    best: tuple[int, str] | None = None
    for tier, copies in tiers.items():
        for path, step in copies.items():
            if step is not None and path.rstrip("/") not in lost and (best is None or step > best[0]):
                best = (int(step), tier)
    if best is not None:
        m.best_available_step, m.best_available_tier = best
        if m.restored_step is not None:
            m.steps_behind_best = max(0, best[0] - m.restored_step)


def tier_rank(tier: str, order: list[str]) -> int:
    """How far a tier is from the job: the profile's tiers in their order, nearest first; a
    peer's copy (fetched from another process's local tier) just after the nearest tier."""
    if tier in order:
        i = order.index(tier)
        return i if i == 0 else i + 1
    return 1 if tier == "peer" else len(order) + 1


def restored_tier(events: list[Event], restore: Event, until: float | None, order: list[str]) -> str | None:
    """The tier one restart restored from: each process may name its own (one its local copy,
    another a peer's), and a fallback of all of them names another; the farthest tier named
    between the first restore and the first step after it, less a tier whose restore then
    failed (restore.failed), is where the job's state came from."""
    named: list[tuple[float, str]] = []
    failed_at = None
    for e in of(events, Kind.RESTORE.value, Kind.RESTORE_FAILED.value):
        if e.t < restore.t or (until is not None and e.t > until):
            continue
        if e.kind == Kind.RESTORE and (tier := Restore.of(e).tier):
            named.append((e.t, tier))
        elif e.kind == Kind.RESTORE_FAILED and (tier := RestoreFailed.of(e).tier):
            named = [(t, other) for t, other in named if other != tier]
            failed_at = e.t
    if until is None and failed_at is not None and all(t < failed_at for t, _ in named):
        return None  # a restore failed, nothing was tried after it, and the job never stepped again
    if not named:
        return None
    return max((tier for _, tier in named), key=lambda tier: tier_rank(tier, order))


def _judge_crash_restore(m: Measurements, restarted: bool, crash_dir: str = "",
                         crash_names: list[str] | None = None) -> None:
    """kill-during-save: did the restart load what the crash left incomplete, and did it
    fall back further than the newest complete checkpoint? The restore line's path is compared
    by containment (a restore from the folder above it, at its step, is it), then by step; a
    job with one checkpoint only (a file rewritten in place) restored that one if it restored."""
    if not restarted and m.time_to_first_step is None:
        return  # never came back: nothing was restored, rightly or wrongly
    if m.crashed_checkpoint is not None and m.crashed_complete is False:
        crashed = os.path.join(crash_dir, m.crashed_checkpoint) if crash_dir else m.crashed_checkpoint
        rel = relation(m.restored_path, crashed) if m.restored_path else None
        by_step = (m.restored_step == m.crashed_step if m.restored_step is not None and m.crashed_step is not None
                   else None)
        if rel == "same" or (crash_names is not None and crash_names == [m.crashed_checkpoint]):
            m.restored_incomplete = True
        elif rel == "other":
            m.restored_incomplete = False
        else:  # a folder above it, or no path: the step decides, where both are known
            m.restored_incomplete = by_step
    elif m.restored_path is not None or m.restored_step is not None:
        m.restored_incomplete = False
    if m.best_complete_step is None:
        m.fell_back_further_than_needed = False  # nothing complete to fall back to: any restart is as good
    elif m.restored_step is not None:
        m.fell_back_further_than_needed = m.restored_step < m.best_complete_step


def crash_class(m: Measurements, verdict: str) -> str:
    """A kill-during-save run in one word, for the sweep's matrix: pass; silent (resumed from
    a checkpoint the crash left incomplete); hard-fail (never stepped again); lost-work (fell
    back further than needed); fail (another SLO)."""
    if m.restored_incomplete and m.time_to_first_step is not None:
        return "silent"
    if m.time_to_first_step is None:
        return "hard-fail"
    if m.fell_back_further_than_needed:
        return "lost-work"
    return "pass" if verdict == "pass" else "fail"


def _measure_slow(m: Measurements, events: list[Event], confirmed: Event, t0: float) -> None:
    """A fail-slow fault: was the right rank named, how fast, and what did it cost the fleet."""
    slowed = [e for e in effects(confirmed.data) if isinstance(e, Slowed)]
    cut = next((e for e in effects(confirmed.data) if isinstance(e, LinkCut)), None)
    if cut is not None:
        nodes = sorted({e.node for e in of(events, "fault.inject") if e.node})
        what = (f"capped at {cut.rate_mbit:g} Mbit/s" if cut.rate_mbit is not None
                else f"{cut.loss_pct:g}% of packets dropped" + (f" to and from {cut.endpoint}" if cut.endpoint else ""))
        m.link = f"the link of {', '.join(nodes) or 'the target node'} ({what})"
    m.slowdown_achieved = next((e.slowdown_achieved for e in slowed if e.slowdown_achieved is not None), None)
    m.target_slowdown = next((e.target_slowdown for e in slowed), None)
    steps = list(of(events, "step"))
    before = [e for e in steps if e.t < t0]
    m.step_at_fault = Step.of(before[-1]).n if before else None
    named = next((e for e in of(events, "straggler") if e.t >= t0), None)
    after = [e for e in steps if e.t >= t0]
    if named is not None:
        m.time_to_straggler = named.t - t0
        m.straggler_rank = named.rank
        m.straggler_node = named.node or Straggler.of(named).node
        m.straggler_correct = named.rank in m.target_ranks
        m.steps_after_recovery = sum(1 for e in after if e.t > named.t)
    dts = [dt for dt in (Step.of(e).dt for e in after) if dt is not None]
    # compare with the steps just before the fault when there are enough of them: the
    # warm-up baseline is taken right after start, when steps are still settling
    steady = next(iter(of(events, "steady")), None)
    pre = [dt for dt in (Step.of(e).dt for e in before if steady is None or e.t > steady.t) if dt is not None]
    reference = statistics.median(pre) if len(pre) >= 5 else m.baseline_step_s
    if dts and reference:
        m.slowdown = statistics.median(dts) / reference
        m.fleet_tax = m.slowdown - 1.0
    m.lost_steps = 0


def quiet_after_fault(history: History, m: Measurements) -> float | None:
    """Longest stretch without a step from the fault to the end of observation."""
    if m.t_fault is None or m.t_observe_end is None:
        return None
    times = [m.t_fault] + [t for t in history.times("step") if m.t_fault <= t <= m.t_observe_end] + [m.t_observe_end]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def recovered(history: History, until_steps: int, m: Measurements | None = None) -> bool:
    """The observe phase's stop test: the job recovered from the fault (the straggler was
    named, for a fail-slow fault) and made ``until_steps`` more steps. Pure. ``m``: the
    history's poll measurement, where the caller has it already (one per poll, not one per
    question)."""
    m = m if m is not None else measure(history, poll=True)
    if awaits_restore(m, history):
        return False
    done = m.time_to_straggler if m.expects == "slow" else m.time_to_first_step
    return done is not None and m.steps_after_recovery >= until_steps


def awaits_restore(m: Measurements, history: History) -> bool:
    """Survivors stepping on while the restarted process is still on its way back: a restart
    was announced, the job tells its restores and none has come, and every step since the
    restart went forward from the step at the fault (a restarted process that started over
    would have stepped from the beginning again). torchft's lighthouse forms a quorum without
    the dead group once its heartbeat expires: the survivor's steps are not the recovery of
    the group that torchrun restarted, whose heal from a peer is (ci)."""
    if (m.expects == "slow" or m.time_to_restart is None or m.time_to_restore is not None
            or m.signal_kinds is None or "restore" not in m.signal_kinds or m.step_at_fault is None
            or m.t_fault is None):
        return False
    events, _ = _window(history)
    since = m.t_fault + m.time_to_restart
    for e in events.unread:
        if e.t >= since:
            Step.of(e)  # raises: a step it cannot read (as measuring does)
    after = [s for s in events.steps or () if s.t >= since]  # the window's lines: an unread one before since is not read
    return bool(after) and all(s.n > m.step_at_fault for s in after)


def awaiting(history: History, until_steps: int, m: Measurements | None = None) -> str:
    """What the observe phase is waiting for, in words, for the live status line."""
    m = m if m is not None else measure(history, poll=True)
    if m.expects == "slow":
        return "the straggler to be named" if m.time_to_straggler is None else f"{until_steps} more steps"
    if m.time_to_detect is None:
        return "detection"
    if m.time_to_restart is None and m.time_to_first_step is None:
        return "restart"
    if m.time_to_first_step is None:
        return "first step after recovery"
    if awaits_restore(m, history):
        return "the restarted process's restore"
    return f"{until_steps - m.steps_after_recovery} more steps"
