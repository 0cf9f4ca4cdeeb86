"""matches_uninterrupted: the run after its restore against the same job, same seed, run
once without the fault (issue 59). LMResiliency/lm-resiliency passes a fault cycle only when
the final state equals an uninterrupted baseline's; restore_fidelity (fidelity.py) judges
the loss within the job's own noise band, which a restore that lost the random number
generators' state passes: the model trains on, on other noise (transformers#17032). For a
deterministic job the stronger test is the step-by-step one: every step after the restore
gives the figures the uninterrupted run gave at that step.

The figures compared are the groups the job prints on its step lines (or its metrics lines,
read to their step): loss, lr, samples or tokens, and digest (a hash of the state, compared
as text). Three results: exact (every figure as printed), within the tolerance (the largest
relative difference), or different, naming the first step and figure that differs.

The steps before the fault are compared the same way first: where the two runs already
differ there, the job is not deterministic to within the tolerance, and a difference after
the restore says nothing about the restore (unknown, never a fail). The uninterrupted run
must start from nothing: one that restored a checkpoint (a checkpoint folder outside the
run's own) is not uninterrupted, and the check is unknown.

Pure: step events in, a comparison out; the tolerance is the SLO's, applied by :func:`judge`.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from drillbit.core.events import Restore, Uninterrupted
from drillbit.core.history import Event, of
from drillbit.judging.checks.fidelity import UNBOUND, one_rank, with_metrics

FIGURES = ("loss", "lr", "samples", "tokens", "digest")
Value = float | str | None


class StepDiff(BaseModel):
    """The largest difference at one step: the figure, both values, and its relative size
    (inf for a digest, or a number against a non-number)."""

    n: int
    figure: str
    drill: Value
    twin: Value
    rel: float


class TwinComparison(BaseModel):
    """What the two runs printed, compared (the tolerance not yet applied)."""

    restored_step: int | None
    twin_dir: str | None = None
    twin_error: str | None = None      # the uninterrupted run did not get far enough, and why
    twin_restored: int | None = None   # it restored this step: not an uninterrupted run
    twin_restored_from: str | None = None
    figures: list[str] = []            # printed by both runs
    before: list[StepDiff] = []        # every step before the fault both made (rel 0 where equal)
    after: list[StepDiff] = []         # every step after the restore both made
    largest: dict[str, float] = {}     # each figure's largest relative difference after the restore
    twin_steps: int = 0                # steps the uninterrupted run printed
    twin_first: int | None = None      # its first step number


class TwinJudgement(BaseModel):
    status: Literal["pass", "fail", "unknown"]
    result: Literal["exact", "within", "different"] | None = None
    says: str
    first: StepDiff | None = None      # the first step after the restore beyond the tolerance
    steps: int = 0


def rel_diff(a: Value, b: Value) -> float:
    """0 for the same value as printed (two NaN are the same: both runs diverged alike); inf
    for text that differs, or a number against a non-number; else |a - b| over the larger."""
    if a == b:
        return 0.0
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def _value(e: Event, figure: str) -> Value:
    """A figure of a step line; one a metrics line placed on it by position alone (UNBOUND) is
    not the step's for sure, and is left out."""
    v = e.data.get(figure)
    if v is None or figure in (e.data.get(UNBOUND) or ()):
        return None
    if figure == "digest":
        return str(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _by_step(events: list[Event]) -> dict[int, Event]:
    """The first line of each step number, in step order (a line printed out of order, or
    twice, keeps its first), from one rank where several print figures."""
    out: dict[int, Event] = {}
    for e in sorted(one_rank(events), key=lambda e: (e.t, e.seq)):
        n = e.data.get("n")
        if isinstance(n, int) and not isinstance(n, bool) and n not in out:
            out[n] = e
    return dict(sorted(out.items()))


def _compared(a: Value, b: Value) -> bool:
    """A pair the two runs both printed, with something in it: a figure one run did not print at
    that step (a metrics line not read yet, a rank's line without it) is not a difference, and two
    figures that are not numbers (NaN, inf; the history keeps them as null) tell nothing."""
    if a is None or b is None:
        return False
    return not all(isinstance(v, float) and not math.isfinite(v) for v in (a, b))


def _diffs(mine: dict[int, Event], twin: dict[int, Event], figures: list[str]) -> list[StepDiff]:
    out = []
    for n in sorted(set(mine) & set(twin)):
        worst: StepDiff | None = None
        for f in figures:
            a, b = _value(mine[n], f), _value(twin[n], f)
            if not _compared(a, b):
                continue
            d = StepDiff(n=n, figure=f, drill=a, twin=b, rel=rel_diff(a, b))
            if worst is None or d.rel > worst.rel:
                worst = d
        if worst is not None:
            out.append(worst)
    return out


def compare(before: list[Event], after: list[Event], restored: int | None, history: list[Event]) -> TwinComparison:
    """``before``: the drill's step events before the fault; ``after``: those of the attempt
    that restored; ``history``: where the uninterrupted run's events are."""
    done = next(iter(of(history, "uninterrupted")), None)
    twin_steps = of(history, "uninterrupted.step")
    c = TwinComparison(restored_step=restored)
    if done is not None:
        said = Uninterrupted.of(done)
        c.twin_dir, c.twin_error = said.run_dir, said.error
        c.twin_restored, c.twin_restored_from = said.restored, said.restored_from
    if restored is None or not twin_steps:
        return c
    twin = _by_step(twin_steps)
    c.twin_steps, c.twin_first = len(twin), min(twin, default=None)
    mine_after = {n: e for n, e in _by_step(after).items() if n > restored}
    mine_before = _by_step(before)  # every step before the fault, the lost ones too: the same job, the same steps
    printed = [f for f in FIGURES if any(_value(e, f) is not None for e in twin.values())
               and any(_value(e, f) is not None for e in (*mine_after.values(), *mine_before.values()))]
    c.figures = printed
    c.before = _diffs(mine_before, twin, printed)
    c.after = _diffs(mine_after, twin, printed)
    for n in sorted(set(mine_after) & set(twin)):
        for f in printed:
            a, b = _value(mine_after[n], f), _value(twin[n], f)
            if _compared(a, b):
                c.largest[f] = max(c.largest.get(f, 0.0), rel_diff(a, b))
    return c


def _show(v: Value) -> str:
    return "nothing" if v is None else v if isinstance(v, str) else f"{v:g}"


def _at(d: StepDiff) -> str:
    return f"step {d.n}: {d.figure} {_show(d.drill)} against {_show(d.twin)} uninterrupted"


def judge(c: TwinComparison, tolerance: float, steps: int | None = None) -> TwinJudgement:
    """Exact, within ``tolerance``, or different (the first step beyond it); unknown where the
    comparison cannot tell."""
    if c.twin_restored is not None:
        return TwinJudgement(status="unknown", says=(
            f"the uninterrupted run restored step {c.twin_restored}"
            + (f" from {c.twin_restored_from}" if c.twin_restored_from else "")
            + ": it did not start from nothing (its checkpoint folder is not the run's own; put it under {run_dir})"))
    if c.restored_step is None:
        return TwinJudgement(status="unknown", says="the drill never said which step it restored")
    why = f" ({c.twin_error})" if c.twin_error else ""
    if not c.figures:
        return TwinJudgement(status="unknown", says=(
            f"nothing to compare: the uninterrupted run printed no step{why}" if c.twin_steps == 0
            else "the two runs printed no figure in common (loss, lr, samples, tokens or digest on the step lines)"))
    if not c.before:
        return TwinJudgement(status="unknown", says=(
            "no step before the fault was made by both runs with a figure to compare"
            + (f" (the uninterrupted run's steps began at {c.twin_first})" if c.twin_first is not None else "")
            + ": nothing shows the job deterministic, or the uninterrupted run started from nothing"))
    off = [d for d in c.before if d.rel > tolerance]
    if off:
        return TwinJudgement(status="unknown", says=(
            f"the two runs differed before the fault already ({_at(off[0])}): the job is not deterministic "
            + ("as printed" if tolerance == 0 else f"to within {tolerance:g}")
            + ", so a difference after the restore would say nothing of it (seed it, or set a tolerance)"))
    after = c.after[:steps] if steps else c.after
    if not after:
        return TwinJudgement(status="unknown", says=f"no step after the restore of step {c.restored_step} was made by "
                                                    f"both runs{why}")
    span = f"steps {after[0].n}-{after[-1].n}" if len(after) > 1 else f"step {after[0].n}"
    what = ", ".join(c.figures)
    beyond = next((d for d in after if d.rel > tolerance), None)
    if beyond is not None:
        return TwinJudgement(status="fail", result="different", first=beyond, steps=len(after),
                             says=f"different from {_at(beyond)} ({len(after)} steps after the restore compared: {what})")
    worst = max(after, key=lambda d: d.rel)
    if worst.rel == 0:
        return TwinJudgement(status="pass", result="exact", steps=len(after),
                             says=f"exact over {span} ({what}; {len(c.before)} steps before the fault agreed too)")
    return TwinJudgement(status="pass", result="within", steps=len(after),
                         says=f"within {tolerance:g} over {span} ({what}; the largest {worst.rel:.2g} at {_at(worst)})")


def twin_steps_of(events: list[Event]) -> list[dict]:
    """The uninterrupted run's step lines as uninterrupted.step payloads (the first of each
    step; its figures as printed, a metrics line's read to its step)."""
    out = []
    for n, e in _by_step(with_metrics(of(events, "step"), events)).items():
        said = {k: _value(e, k) for k in FIGURES}
        out.append({"n": n, **{k: v for k, v in said.items() if v is not None}})
    return out


def first_restore(events: list[Event]) -> tuple[int | None, str | None]:
    """A restore of a step above 0 the run made (then it was not uninterrupted)."""
    for e in of(events, "restore"):
        r = Restore.of(e)
        if r.step:
            return r.step, r.path
    return None, None
