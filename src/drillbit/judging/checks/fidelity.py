"""restore_fidelity: whether the state that came back is the state that was saved, judged
from the job's own step lines — not only the step number it came back at.

A restart that reads its checkpoint, resumes the iteration count and says "loaded", but
brings back no weights (the classic ``load_state_dict(..., strict=False)`` into keys that
differ: pytorch/vision#3285, subhc/unsup-parts#12, ScrollPrize/villa#1475), or a fresh
optimizer and schedule, or a data loader at sample zero (msed-Ebrahimi/ARoFace#8: after a
resume, the loss of epoch 0), steps on from the right number. Each part below reads one
group of the job's step lines; a part whose group the job never prints is *not measured*,
and says how to add it. Nothing here claims what it did not measure.

- **loss**: the median loss of the first steps after the restore, against the loss around
  the restored step and at the start of training. A model that comes back nearer the start
  than the step it restored was not restored. The noise band is the job's own step-to-step
  spread before the fault (3 × the median of |Δloss| over the last steps), never a constant;
  where the loss has moved less than twice that band since the start, a restore and a start
  over look alike and the part says so (unknown). Steps the job ran both before the fault and
  again after the restore (the lost ones, replayed) are compared too: the same losses there,
  within the band, settle it.
- **learning rate**: a replayed step's learning rate must be the one that step had before
  the fault (the schedule is a function of the step); another one means the schedule — and
  with it, most often, the optimizer — started over.
- **data position**: samples or tokens consumed at a replayed step must be what they were
  at that step before the fault; without replayed steps, the count must go on from the
  restored step's at the rate it grew before. A count back near zero: the loader started
  over (repeated data).

The whole fails where a part fails, and passes only where every part the job prints passed: a
part that could not tell (unknown) leaves the whole unknown, never a pass on the other parts (a
restart that brought back the schedule and the loader but not the weights passes both of
those).

Pure: step events in, a judgement out.
"""
from __future__ import annotations

import statistics
from typing import Literal

from pydantic import BaseModel

from drillbit.core.history import Event

PartStatus = Literal["pass", "fail", "unknown", "not measured"]
WINDOW = 5          # steps a level is the median of (at the start, around the restore, after it)
NOISE_STEPS = 20    # pre-fault steps the step-to-step spread is measured over
BAND = 3.0          # the noise band, in medians of |Δ| between consecutive steps
LR_TOLERANCE = 1e-3  # relative: a learning rate printed with 4 significant digits still matches
DATA_KEYS = ("samples", "tokens", "consumed")  # step-line groups that count the data consumed

HOW_TO = {"loss": "add a group named loss to the job's step signal (its loss on the same line as the step)",
          "lr": "add a group named lr to the job's step signal (the learning rate the step used)",
          "data": "add a group named samples or tokens to the job's step signal (consumed so far, across ranks)"}


class FidelityPart(BaseModel):
    name: Literal["loss", "learning rate", "data position"]
    status: PartStatus
    says: str


class Fidelity(BaseModel):
    """The judgement of restore_fidelity, part by part."""

    restored_step: int
    status: Literal["pass", "fail", "unknown"]
    parts: list[FidelityPart]

    def measured(self) -> bool:
        return any(p.status in ("pass", "fail") for p in self.parts)

    def failed(self) -> list[FidelityPart]:
        return [p for p in self.parts if p.status == "fail"]


def _series(steps: list[Event], key: str, first: bool = False) -> dict[int, float]:
    """step number -> the value of ``key`` on its line; the last line of a step wins, or with
    ``first`` the first one (the replay after a restore)."""
    out: dict[int, float] = {}
    for e in steps:
        value, n = e.data.get(key), e.data.get("n")
        if n is None or value is None or (first and int(n) in out):
            continue
        try:
            out[int(n)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def _first(steps: list[Event], key: str) -> dict[int, float]:
    return _series(steps, key, first=True)


def _g(x: float) -> str:
    return f"{x:.4g}"


def _median(values: list[float]) -> float:
    return statistics.median(values)


def judge_loss(before: dict[int, float], after: dict[int, float], restored: int) -> FidelityPart:
    if not before or not after:
        return FidelityPart(name="loss", status="not measured", says=f"the job's step lines give no loss; {HOW_TO['loss']}")
    pre = sorted(before)
    recent = pre[-(NOISE_STEPS + 1):]
    diffs = [abs(before[b] - before[a]) for a, b in zip(recent, recent[1:], strict=False) if b == a + 1]
    if len(diffs) < 3:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{len(diffs) + 1} consecutive loss lines before the fault: too few to know the "
                                 "job's own step-to-step spread")
    noise = _median(diffs)
    around = [before[n] for n in pre if restored - WINDOW < n <= restored]
    if not around:
        return FidelityPart(name="loss", status="unknown",
                            says=f"no loss line near the restored step {restored} (the lines seen before the fault "
                                 f"cover steps {pre[0]}–{pre[-1]})")
    level_r = _median(around)
    band = max(BAND * noise, 1e-9 + 1e-3 * abs(level_r))
    post = sorted(after)[:WINDOW]
    level_post = _median([after[n] for n in post])
    replayed = [n for n in sorted(after) if n in before and n > restored][:WINDOW]
    replay_gap = _median([abs(after[n] - before[n]) for n in replayed]) if len(replayed) >= 2 else None
    figures = f"loss {_g(level_post)} over the first {len(post)} step(s) after restoring step {restored}, " \
              f"against {_g(level_r)} at step {restored}"
    start = [before[n] for n in pre[:WINDOW]] if pre[0] <= WINDOW else []
    if start:
        level_0 = _median(start)
        figures += f" and {_g(level_0)} at the start (step {pre[0]})"
    noise_words = f"its step-to-step spread before the fault: {_g(noise)}"
    replay_words = (f"the steps it ran again ({replayed[0]}–{replayed[-1]}) gave the losses they gave before the "
                    f"fault (median gap {_g(replay_gap)})") if replayed and replay_gap is not None else ""
    if replay_gap is not None and replay_gap <= 1e-3 * abs(level_r) + 1e-9:
        # a deterministic replay, exact: the restored state gave the same losses, however little the loss
        # moved and whether or not the start of training was seen
        return FidelityPart(name="loss", status="pass", says=f"{figures}; {replay_words}")
    if not start:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{figures}; the start of training was not seen, so a return toward it cannot be "
                                 "told from noise" + (f" (the replayed steps differ by {_g(replay_gap)})"
                                                      if replay_gap is not None else ""))
    moved = abs(level_0 - level_r)
    if moved <= 2 * band:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{figures}: the loss had moved only {_g(moved)} since the start, inside twice the "
                                 f"noise band ({_g(band)}; {noise_words}); a restore and a start over look alike "
                                 "here — trigger the fault later in training")
    if replay_gap is not None and replay_gap <= band:
        return FidelityPart(name="loss", status="pass", says=f"{figures}; {replay_words} ({noise_words})")
    back = (level_post - level_r) * (1 if level_0 >= level_r else -1)
    if back > band and back >= 0.5 * moved:
        return FidelityPart(name="loss", status="fail",
                            says=f"{figures}: the model came back nearer the start of training than the step it "
                                 f"restored — its weights were not restored ({noise_words})")
    return FidelityPart(name="loss", status="pass", says=f"{figures}; within {_g(band)} of the restored step's "
                                                         f"({noise_words})")


def judge_lr(before: dict[int, float], after: dict[int, float], restored: int) -> FidelityPart:
    if not before or not after:
        return FidelityPart(name="learning rate", status="not measured",
                            says=f"the job's step lines give no learning rate; {HOW_TO['lr']}")
    replayed = [n for n in sorted(after) if n in before and n > restored]
    if not replayed:
        return FidelityPart(name="learning rate", status="unknown",
                            says=f"no step was run both before the fault and after restoring step {restored} "
                                 "(nothing was replayed to compare)")
    wrong = [n for n in replayed
             if abs(after[n] - before[n]) > LR_TOLERANCE * max(abs(before[n]), abs(after[n]), 1e-30)]
    if wrong:
        n = wrong[0]
        return FidelityPart(name="learning rate", status="fail",
                            says=f"learning rate {_g(after[n])} at step {n} after restoring step {restored}, against "
                                 f"{_g(before[n])} at step {n} before the fault: the schedule (and with it, most often, "
                                 "the optimizer) started over")
    return FidelityPart(name="learning rate", status="pass",
                        says=f"steps {replayed[0]}–{replayed[-1]}, run again after the restore, had the learning rates "
                             "they had before the fault")


def judge_data(before: dict[int, float], after: dict[int, float], restored: int, key: str | None) -> FidelityPart:
    """The count after the restore goes on from the restored step's, within one step's worth
    (a restart on fewer ranks consumes fewer per step from there on); where the restored
    step's count was not seen, a replayed step's count must be what it was before."""
    if key is None or not before or not after:
        return FidelityPart(name="data position", status="not measured",
                            says=f"the job's step lines give no count of data consumed; {HOW_TO['data']}")
    pre = sorted(before)
    steps_up = [before[b] - before[a] for a, b in zip(pre, pre[1:], strict=False) if b == a + 1]
    rate = _median(steps_up) if steps_up else None
    tolerance = max(abs(rate) if rate else 0.0, 1.0)
    first = min(after)
    if restored in before and rate is not None:
        expected = before[restored] + (first - restored) * rate
        if abs(after[first] - expected) <= tolerance * max(1, first - restored):
            return FidelityPart(name="data position", status="pass",
                                says=f"{_g(after[first])} {key} consumed at step {first}, going on from "
                                     f"{_g(before[restored])} at the restored step {restored}")
        return FidelityPart(name="data position", status="fail",
                            says=f"{_g(after[first])} {key} consumed at step {first} after restoring step {restored}, "
                                 f"against {_g(before.get(first, expected))} at step {first} before the fault: "
                                 + _which_way(after[first], expected, key))
    replayed = [n for n in sorted(after) if n in before and n > restored][:1]
    if not replayed:
        return FidelityPart(name="data position", status="unknown",
                            says=f"no {key} count at the restored step {restored} to go on from, and no step run again")
    n = replayed[0]
    if abs(after[n] - before[n]) <= tolerance:
        return FidelityPart(name="data position", status="pass",
                            says=f"{_g(after[n])} {key} consumed at step {n}, run again after the restore, as before "
                                 "the fault")
    return FidelityPart(name="data position", status="fail",
                        says=f"{_g(after[n])} {key} consumed at step {n} after restoring step {restored}, against "
                             f"{_g(before[n])} at step {n} before the fault: " + _which_way(after[n], before[n], key))


def _which_way(got: float, want: float, key: str) -> str:
    if got < 0.5 * want:
        return f"the data loader started over (the {key} since the start are seen again)"
    return "the data loader resumed from elsewhere than the restored step"


def with_metrics(steps: list[Event], events: list[Event]) -> list[Event]:
    """The step events with the figures of ``metrics`` events merged in: one that names its
    step (group n or step) is that step's; one that does not is the next step's."""
    metrics = [e for e in events if e.kind == "metrics"]
    if not metrics:
        return steps
    by_n: dict[int, dict] = {}
    pending: dict = {}
    merged: dict[int, dict] = {}  # step event seq -> figures
    ordered = sorted([*steps, *metrics], key=lambda e: e.seq)
    for e in ordered:
        figures = {k: v for k, v in e.data.items() if k in ("loss", "lr", *DATA_KEYS)}
        if e.kind == "metrics":
            n = e.data.get("n", e.data.get("step"))
            if n is not None:
                by_n.setdefault(int(n), {}).update(figures)
            else:
                pending.update(figures)
        elif pending:
            merged[e.seq] = pending
            pending = {}
    out = []
    for e in steps:
        extra = {**merged.get(e.seq, {}), **by_n.get(int(e.data.get("n", -1)), {})}
        out.append(e.model_copy(update={"data": {**extra, **e.data}}) if extra else e)
    return out


def restore_fidelity(before: list[Event], after: list[Event], restored: int | None) -> Fidelity | None:
    """The judgement, or None where nothing was restored. ``before``: the job's step events
    before the fault; ``after``: those of the attempt that restored, from its first step."""
    if restored is None or restored <= 0 or not after:
        return None  # nothing restored (a start over is what lost steps judge)
    key = next((k for k in DATA_KEYS if any(k in e.data for e in before) and any(k in e.data for e in after)), None)
    parts = [judge_loss(_series(before, "loss"), _first(after, "loss"), restored),
             judge_lr(_series(before, "lr"), _first(after, "lr"), restored),
             judge_data(_series(before, key) if key else {}, _first(after, key) if key else {}, restored, key)]
    # a part that could not tell (unknown) leaves the whole unknown: the state that came back is the state
    # saved only where every part the job prints says so ("not measured" parts are named, never claimed)
    status: Literal["pass", "fail", "unknown"] = (
        "fail" if any(p.status == "fail" for p in parts) else
        "unknown" if any(p.status == "unknown" for p in parts) else
        "pass" if any(p.status == "pass" for p in parts) else "unknown")
    return Fidelity(restored_step=restored, status=status, parts=parts)
