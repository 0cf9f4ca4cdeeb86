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

import decimal
import math
import statistics
from operator import attrgetter
from typing import Literal

from pydantic import BaseModel

from drillbit.core.events import Metrics, Step
from drillbit.core.history import Event, StepLine, of, rank_of

PartStatus = Literal["pass", "fail", "unknown", "not measured"]
WINDOW = 5          # steps a level is the median of (at the start, around the restore, after it)
NOISE_STEPS = 20    # pre-fault steps the step-to-step spread is measured over
BAND = 3.0          # the noise band, in medians of |Δ| between consecutive steps
LR_TOLERANCE = 1e-3  # relative: a learning rate printed with 4 significant digits still matches
DATA_KEYS = ("samples", "tokens", "consumed")  # step-line groups that count the data consumed
FIGURE_KEYS = ("loss", "lr", *DATA_KEYS, "digest")

HOW_TO = {"loss": "add a group named loss to the job's step signal (its loss on the same line as the step)",
          "lr": "add a group named lr to the job's step signal (the learning rate the step used)",
          "data": "add a group named samples or tokens to the job's step signal (consumed so far, across ranks)"}


class FidelityPart(BaseModel):
    name: Literal["loss", "learning rate", "data position", "step counter"]
    status: PartStatus
    says: str
    # a restart that began again at step 1: whether this part of the state came back or started over
    # (None: not told)
    came_back: bool | None = None


class Fidelity(BaseModel):
    """The judgement of restore_fidelity, part by part. ``restored_step`` 0: the restart began
    again from the first step, and the parts say which state came back all the same (a model
    loaded into a fresh trainer) and which started over."""

    restored_step: int
    status: Literal["pass", "fail", "unknown"]
    parts: list[FidelityPart]

    def measured(self) -> bool:
        return any(p.status in ("pass", "fail") for p in self.parts)

    def failed(self) -> list[FidelityPart]:
        return [p for p in self.parts if p.status == "fail"]

    def started_over(self) -> str:
        """For a restart from the first step: which state came back and which started over, in
        words ('' where nothing was told)."""
        back = [WHAT[p.name] for p in self.parts if p.came_back]
        over = [WHAT[p.name] for p in self.parts if p.came_back is False]
        if not over:
            return ""
        said = f"{_and(over)} started over" + (" (with the schedule, most often, the optimizer)"
                                              if "learning rate" in [p.name for p in self.parts if p.came_back is False]
                                              else "")
        return (f"the {_and(back)} came back, but " if back else "") + said


WHAT = {"loss": "weights", "learning rate": "schedule", "data position": "data position", "step counter": "step counter"}


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


_LINE_RANK, _PRINTED, _NAMED, _EVENT = (attrgetter(f) for f in ("line_rank", "printed", "named", "event"))


class Lines(list):
    """Step events, read in one pass the first time :func:`one_rank` asks: each line's rank,
    the ranks whose lines print each figure, and the figures any line names and prints. The
    fidelity judgement asks for three figures' series on each side of the fault, and before the
    fault these are all the fleet's step lines: a pass over them for each question cost more
    than the rest of the judgement at 1,024 nodes. :meth:`of_steps` takes what the history read
    of each line as it came (its StepLine), and reads no event to answer."""

    _lines: list[StepLine] | None = None
    _ranks: list[int | None]             # each line's rank
    _printing: dict[str, set[int]]       # figure -> the ranks whose lines print it
    _named: set[str]                     # the figures some line names (printed or not)
    _printed: set[str]                   # the figures some line prints, ranked or not
    _one: dict[str | None, list[Event]]  # one_rank's answers

    @classmethod
    def of_steps(cls, steps: list[StepLine]) -> "Lines":
        out = cls(map(_EVENT, steps))
        out._lines = steps
        return out

    def read(self) -> None:
        if hasattr(self, "_one"):
            return
        printing: dict[str, set[int]] = {k: set() for k in FIGURE_KEYS}
        named: set[str] = set()
        printed: set[str] = set()
        if self._lines is not None:  # walked in C (map, zip): 12,000 lines at 1,024 nodes
            ranks = list(map(_LINE_RANK, self._lines))
            for fields, rank in set(zip(map(_PRINTED, self._lines), ranks, strict=True)):  # their few sets of fields
                printed |= fields.intersection(FIGURE_KEYS)
                if rank is not None:
                    for k in fields.intersection(FIGURE_KEYS):
                        printing[k].add(rank)
            for fields in set(map(_NAMED, self._lines)):
                named |= fields.intersection(FIGURE_KEYS)
        else:
            ranks = []
            for e in self:
                r, data = rank_of(e), e.data
                ranks.append(r)
                for k in FIGURE_KEYS:
                    if k in data:
                        named.add(k)
                        if data[k] is not None:
                            printed.add(k)
                            if r is not None:
                                printing[k].add(r)
        self._ranks, self._printing, self._named, self._printed, self._one = ranks, printing, named, printed, {}

    def names(self, key: str) -> bool:
        """Whether any line names ``key`` (a figure key), printed or not."""
        self.read()
        return key in self._named

    def prints(self, key: str) -> bool:
        """Whether any line prints ``key`` (a figure key)."""
        self.read()
        return key in self._printed


def _names(steps: list[Event], key: str) -> bool:
    return steps.names(key) if isinstance(steps, Lines) and key in FIGURE_KEYS else any(key in e.data for e in steps)


def one_rank(steps: list[Event], key: str | None = None) -> list[Event]:
    """Where ranks print step lines, the lines of the lowest rank that prints ``key`` (any figure,
    without one), and those that name no rank: ranks print different losses, and a series that
    takes whichever came last alternates between them (or takes a rank's line that has none).
    :class:`Lines` are read once for every key."""
    if isinstance(steps, Lines) and (key is None or key in FIGURE_KEYS):
        steps.read()
        if key not in steps._one:
            printing = steps._printing
            steps._one[key] = _lowest(steps, steps._ranks, printing[key] if key else set().union(*printing.values()))
        return steps._one[key]

    def has(e: Event) -> bool:
        return e.data.get(key) is not None if key else any(e.data.get(k) is not None for k in FIGURE_KEYS)

    ranks = [rank_of(e) for e in steps]  # each line's rank read once: these lists are the fleet's step lines
    return _lowest(steps, ranks, {r for e, r in zip(steps, ranks, strict=True) if r is not None and has(e)})


def _lowest(steps: list[Event], line_ranks: list[int | None], ranks: set[int]) -> list[Event]:
    """``one_rank`` of ``steps``, given each line's rank and the ranks that print the figure."""
    if not ranks or len(ranks) < 2 and all(r in ranks for r in line_ranks if r is not None):
        return steps  # no rank prints one, or one rank prints every ranked line
    lowest = min(ranks)  # the lines of ranks that print none are left out too: a step's first line must carry it
    return [e for e, r in zip(steps, line_ranks, strict=True) if r is None or r == lowest]


def _series(steps: list[Event], key: str, first: bool = False) -> dict[int, float]:
    """step number -> the value of ``key`` on its line (NaN and inf kept: they are what the job
    printed), from one rank (:func:`one_rank`); the last line of a step wins, or with ``first``
    the first one (the replay after a restore)."""
    out: dict[int, float] = {}
    if isinstance(steps, Lines) and key in FIGURE_KEYS and not steps.prints(key):
        return out  # no line prints it: nothing to read
    for e in one_rank(steps, key):
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


def _placed(steps: list[Event], key: str) -> set[int]:
    """The steps whose ``key`` was placed on them by position alone (``with_metrics``)."""
    return {int(e.data["n"]) for e in steps if key in (e.data.get(UNBOUND) or ()) and e.data.get("n") is not None}


def _finite(series: dict[int, float]) -> dict[int, float]:
    return {n: v for n, v in series.items() if math.isfinite(v)}


def _g(x: float) -> str:
    return f"{x:.4g}"


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _steps(ns: list[int]) -> str:
    return f"step {ns[0]}" if len(ns) == 1 or ns[0] == ns[-1] else f"steps {ns[0]}–{ns[-1]}"


def _not_a_number(before: dict[int, float], after: dict[int, float], restored: int, name: str,
                  part: Literal["loss", "learning rate"]) -> FidelityPart | None:
    """A NaN or infinite figure soon after the restore: a fail where the job's figures were
    finite before the fault, unknown where they were not already; None where all are finite."""
    post = sorted(after)[:WINDOW]
    bad = [n for n in post if not math.isfinite(after[n])]
    if not bad:
        return None
    n = bad[0]
    where = f"{name} {after[n]} at step {n} after restoring step {restored}"
    earlier = [m for m in sorted(before) if not math.isfinite(before[m])]
    if earlier or not before:
        return FidelityPart(name=part, status="unknown",
                            says=f"{where}, but it was not a number before the fault too (step {earlier[0]})"
                            if earlier else f"{where}, and no {name} was seen before the fault to compare")
    last = sorted(before)[-1]
    return FidelityPart(name=part, status="fail",
                        says=f"{where}, where every {name} the job printed before the fault was a number "
                             f"({_g(before[last])} at step {last}): the state that came back is broken")


def judge_loss(before: dict[int, float], after: dict[int, float], restored: int) -> FidelityPart:
    if not before or not after:
        return FidelityPart(name="loss", status="not measured", says=f"the job's step lines give no loss; {HOW_TO['loss']}")
    broken = _not_a_number(before, after, restored, "loss", "loss")
    if broken is not None:
        return broken
    before, after = _finite(before), _finite(after)
    if not before or not after:
        return FidelityPart(name="loss", status="unknown", says="the job printed no loss that is a number")
    pre = sorted(before)
    recent = pre[-(NOISE_STEPS + 1):]
    diffs = [abs(before[b] - before[a]) for a, b in zip(recent, recent[1:], strict=False) if b == a + 1]
    if len(diffs) < 3:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{len(diffs) + 1} consecutive loss lines before the fault: too few to know the "
                                 "job's own step-to-step spread")
    noise = _median(diffs)
    near = [n for n in pre if restored - WINDOW < n <= restored]
    if not near:
        return FidelityPart(name="loss", status="unknown",
                            says=f"no loss line near the restored step {restored} (the lines seen before the fault "
                                 f"cover steps {pre[0]}–{pre[-1]})")
    level_r = _median([before[n] for n in near])
    band = max(BAND * noise, 1e-9 + 1e-3 * abs(level_r))
    post = sorted(after)[:WINDOW]
    level_post = _median([after[n] for n in post])
    replayed = [n for n in sorted(after) if n in before and n > restored][:WINDOW]
    replay_gap = _median([abs(after[n] - before[n]) for n in replayed]) if len(replayed) >= 2 else None
    at_r = f" ({_g(before[restored])} at step {restored} itself)" if restored in before and len(near) > 1 else ""
    figures = f"median loss {_g(level_post)} over {_steps(post)} after restoring step {restored}, " \
              f"against {_g(level_r)} over {_steps(near)}{at_r}"
    start = [before[n] for n in pre[:WINDOW]] if pre[0] <= WINDOW else []
    if start:
        level_0 = _median(start)
        figures += f" and {_g(level_0)} at the start ({_steps(pre[:WINDOW])})"
    noise_words = f"its step-to-step spread before the fault: {_g(noise)}"
    replay_words = (f"the steps it ran again ({replayed[0]}–{replayed[-1]}) gave the losses they gave before the "
                    f"fault (median gap {_g(replay_gap)})") if replayed and replay_gap is not None else ""
    flat = noise == 0 and len({before[n] for n in pre}) == 1
    if flat:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{figures}: the loss was {_g(level_r)} at every step before the fault, so the same "
                                 "loss after the restore shows nothing (a start over prints it too)")
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
    return _by_level(figures, noise_words, level_0, level_r, level_post, band, restored)


def _by_level(figures: str, noise_words: str, level_0: float, level_r: float, level_post: float, band: float,
              restored: int) -> FidelityPart:
    """The loss part by levels alone (no exact replay): where the loss after the restore sits
    between the restored step's and the start's."""
    moved = abs(level_0 - level_r)
    back = (level_post - level_r) * (1 if level_0 >= level_r else -1)
    if back > moved + band:
        return FidelityPart(name="loss", status="fail",
                            says=f"{figures}: the loss came back beyond even the start of training's — its weights "
                                 f"were not restored (at their initialisation, or broken: not the state saved at step "
                                 f"{restored}; {noise_words})")
    if back > band and back >= 0.5 * moved:
        return FidelityPart(name="loss", status="fail",
                            says=f"{figures}: the model came back nearer the start of training than the step it "
                                 f"restored — its weights were not restored ({noise_words})")
    if abs(level_post - level_r) > band and back < 0:
        return FidelityPart(name="loss", status="pass",
                            says=f"{figures}; lower than the restored step's by more than {_g(band)} ({noise_words}): "
                                 "the model went on from where it was saved")
    if back > band:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{figures}: {_g(back)} back toward the start, more than the noise band ({_g(band)}; "
                                 f"{noise_words}) but less than half the way the loss had moved ({_g(moved)}): neither "
                                 "the state saved nor a start over")
    return FidelityPart(name="loss", status="pass", says=f"{figures}; within {_g(band)} of the restored step's "
                                                         f"({noise_words})")


def judge_lr(before: dict[int, float], after: dict[int, float], restored: int) -> FidelityPart:
    if not before or not after:
        return FidelityPart(name="learning rate", status="not measured",
                            says=f"the job's step lines give no learning rate; {HOW_TO['lr']}")
    broken = _not_a_number(before, after, restored, "learning rate", "learning rate")
    if broken is not None:
        return broken
    before, after = _finite(before), _finite(after)
    if before and after and all(_same(v, next(iter(before.values()))) for v in [*before.values(), *after.values()]):
        return FidelityPart(name="learning rate", status="not measured",
                            says=f"the learning rate was {_g(next(iter(before.values())))} at every step, before and "
                                 "after: a constant rate does not tell a schedule that came back from one that started "
                                 "over")
    replayed = [n for n in sorted(after) if n in before and n > restored]
    if not replayed:
        return FidelityPart(name="learning rate", status="unknown",
                            says=f"no step was run both before the fault and after restoring step {restored} "
                                 "(nothing was replayed to compare)")
    wrong = [n for n in replayed if not _same(after[n], before[n])]
    if wrong:
        n = wrong[0]
        return FidelityPart(name="learning rate", status="fail",
                            says=f"learning rate {_g(after[n])} at step {n} after restoring step {restored}, against "
                                 f"{_g(before[n])} at step {n} before the fault: the schedule (and with it, most often, "
                                 "the optimizer) started over")
    return FidelityPart(name="learning rate", status="pass",
                        says=f"steps {replayed[0]}–{replayed[-1]}, run again after the restore, had the learning rates "
                             "they had before the fault")


def _same(a: float, b: float) -> bool:
    """Two printed learning rates are one (4 significant digits still match); never for a non-number."""
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= LR_TOLERANCE * max(abs(a), abs(b), 1e-30)


def judge_data(before: dict[int, float], after: dict[int, float], restored: int, key: str | None) -> FidelityPart:
    """The count after the restore goes on from the restored step's, within one step's worth
    (a restart on fewer ranks consumes fewer per step from there on); where the restored
    step's count was not seen, a replayed step's count must be what it was before."""
    before, after = _finite(before), _finite(after)
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


# lines that end an attempt's figures: a figure waiting for its step is never given to a step after one
_ATTEMPT_BOUNDS = ("restart", "restore.begin", "restore", "job.launch")
_PENDING_BOUNDS = (*_ATTEMPT_BOUNDS, "detect", "job.exit", "fault.confirmed")
FIGURES = ("loss", "lr", *DATA_KEYS)
UNBOUND = "unbound"  # a merged step's field: the figures placed on it by position alone


def epoch_step(epoch: str | None, steps_per_epoch: int | None) -> int | None:
    """The optimizer step an epoch fraction names (the Hugging Face Trainer's ``'epoch':
    '0.04102'``, global step / steps in an epoch), where its printed digits place one step
    for certain; None where they cannot (too few digits for the epoch count, or a fraction
    that is no whole step)."""
    if epoch is None or not steps_per_epoch or steps_per_epoch <= 0:
        return None
    try:
        exact = decimal.Decimal(epoch.strip())
        if not exact.is_finite() or exact < 0 or exact.adjusted() > 12:  # no run trains 10^12 epochs
            return None
        exponent = exact.as_tuple().exponent
        if not isinstance(exponent, int):
            return None
        half = decimal.Decimal(5).scaleb(exponent - 1)  # half a unit of its last printed digit
        steps, spread = exact * steps_per_epoch, half * steps_per_epoch
        nearest = steps.to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
        if spread >= decimal.Decimal("0.5") or abs(steps - nearest) > spread:
            return None
    except (decimal.DecimalException, ValueError):  # digits past what a Decimal context holds
        return None
    return int(nearest) if nearest >= 1 else None


def _figures(said: Metrics) -> dict:
    """The figures a metrics line gives (a count of data under any of its names)."""
    return {k: v for k in FIGURES if (v := getattr(said, k, None)) is not None}


def _named_step(e: Event, steps_per_epoch: int | None, accumulation: int | None) -> int | None:
    """The step a metrics line names, by its own evidence, or None. An epoch fraction names one
    only where an optimizer step is one batch: the Trainer counts its epoch in batches, and with
    gradient accumulation that does not divide them, batches over the batches an epoch holds is
    not steps over its (rounded-up) steps per epoch."""
    said = Metrics.of(e)
    named = said.n if said.n is not None else said.step
    if named is not None:
        return named
    return epoch_step(said.epoch, steps_per_epoch) if accumulation in (None, 1) else None


def with_metrics(steps: list[Event], events: list[Event]) -> list[Event]:
    """The step events with the figures of ``metrics`` events merged in, never across an
    attempt (a restart, a restore, a new launch between them).

    A line that names its step (group n or step, or an epoch fraction with the attempt's steps
    per epoch) goes to the step event of that number nearest it in the history, within its
    attempt. One that names none goes to the next step event, and is marked ``unbound``: the
    order of a job's lines is no proof (tqdm redraws its bar when it likes, and the steps and
    the figures are read by separate probes), so what such figures show can be unknown, never a
    fail. A figure still waiting for its step when the attempt ends (the dead attempt's last
    dict) is dropped."""
    if not of(events, "metrics"):
        return steps
    wanted = {e.seq for e in steps}
    segment = 0
    segments: dict[int, int] = {}                         # step seq -> its attempt's segment
    by_number: dict[tuple[int, int], list[Event]] = {}    # (segment, n) -> step events
    named: list[tuple[int, int, Event]] = []              # (segment, n, metrics event)
    pending: dict = {}
    placed: dict[int, dict] = {}                          # step seq -> figures, by position
    steps_per_epoch: int | None = None
    accumulation: int | None = None
    for e in sorted(of(events, "metrics", "step", *_PENDING_BOUNDS), key=lambda e: e.seq):
        if e.kind in _PENDING_BOUNDS:
            pending = {}
        if e.kind in _ATTEMPT_BOUNDS:
            segment += 1
            steps_per_epoch = accumulation = None
        if e.kind == "metrics":
            said = Metrics.of(e)
            steps_per_epoch = said.steps_per_epoch or steps_per_epoch
            accumulation = said.accumulation or accumulation
            figures = _figures(said)
            if not figures:
                continue
            n = _named_step(e, steps_per_epoch, accumulation)
            if n is not None:
                named.append((segment, n, e))
            else:
                pending.update(figures)
        elif e.kind == "step":
            segments[e.seq] = segment
            by_number.setdefault((segment, Step.of(e).n), []).append(e)
            if pending and e.seq in wanted:
                placed[e.seq] = pending
            pending = {}
    bound: dict[int, dict] = {}
    for seg, n, m in named:
        near = min(by_number.get((seg, n), []), key=lambda s: abs(s.seq - m.seq), default=None)
        if near is not None:
            bound.setdefault(near.seq, {}).update(_figures(Metrics.of(m)))
    out = []
    for e in steps:
        own = {k: v for k, v in e.data.items() if v is not None}
        guessed = {k: v for k, v in placed.get(e.seq, {}).items() if k not in own and k not in bound.get(e.seq, {})}
        extra = {**guessed, **bound.get(e.seq, {})}
        if guessed:
            extra[UNBOUND] = sorted(guessed)
        out.append(e.model_copy(update={"data": {**extra, **own}}) if extra else e)
    return out


def restore_fidelity(before: list[Event], after: list[Event], restored: int | None,
                     newest_saved: int | None = None) -> Fidelity | None:
    """The judgement, or None where there is nothing to judge. ``before``: the job's step events
    before the fault; ``after``: those of the attempt that restored, from its first step.
    ``restored`` 0 (the restart began again from the first step) is judged against the newest
    step the job said it saved before the fault (``newest_saved``): which state came back all
    the same, and which started over (:func:`started_over`)."""
    if restored is None or not after:
        return None
    before, after = (steps if isinstance(steps, Lines) else Lines(steps) for steps in (before, after))
    if restored <= 0:
        return started_over(before, after, newest_saved)
    key = next((k for k in DATA_KEYS if _names(after, k) and _names(before, k)), None)
    parts = [judge_loss(_series(before, "loss"), _first(after, "loss"), restored),
             _unless_placed(judge_lr(_series(before, "lr"), _first(after, "lr"), restored), before, after, "lr"),
             _unless_placed(judge_data(_series(before, key) if key else {}, _first(after, key) if key else {}, restored,
                                       key), before, after, key)]
    # a part that could not tell (unknown) leaves the whole unknown: the state that came back is the state
    # saved only where every part the job prints says so ("not measured" parts are named, never claimed)
    status: Literal["pass", "fail", "unknown"] = (
        "fail" if any(p.status == "fail" for p in parts) else
        "unknown" if any(p.status == "unknown" for p in parts) else
        "pass" if any(p.status == "pass" for p in parts) else "unknown")
    return Fidelity(restored_step=restored, status=status, parts=parts)


def _unless_placed(part: FidelityPart, before: list[Event], after: list[Event], key: str | None) -> FidelityPart:
    """A step-by-step comparison that failed on figures placed by position alone (a line that
    names no step) is unknown: the mismatch may be a line read out of its step's order."""
    if part.status != "fail" or key is None or not (_placed(before, key) or _placed(after, key)):
        return part
    return part.model_copy(update={
        "status": "unknown",
        "says": part.says + f" — but the lines that printed the {key} name no step, so they were placed on the step "
                            "that followed them, and a job's line order does not prove that; unknown, not a fail "
                            "(print the step number with them, or the epoch with the steps per epoch)"})


def started_over(before: list[Event], after: list[Event], newest_saved: int | None) -> Fidelity | None:
    """A restart whose steps began again from the first (no restore, or one that brought back
    no step count), against the newest step saved before the fault: the step counter started
    over; the loss tells whether the weights came back all the same (a model loaded into a
    fresh trainer), the learning rate whether the schedule did, the data count whether the
    loader did. None where the job said it saved nothing before the fault."""
    if not newest_saved or newest_saved <= 0:
        return None
    first = min(int(e.data["n"]) for e in after if e.data.get("n") is not None)
    parts = [FidelityPart(name="step counter", status="fail", came_back=False,
                          says=f"the first step after the restart was step {first}, though the job had said it saved "
                               f"step {newest_saved} before the fault")]
    parts.append(_weights_back(_finite(_series(before, "loss")), _finite(_first(after, "loss")), newest_saved))
    parts.append(_same_as_at_start(_series(before, "lr"), _first(after, "lr"), newest_saved, "learning rate", "lr"))
    key = next((k for k in DATA_KEYS if _names(after, k) and _names(before, k)), None)
    parts.append(_same_as_at_start(_series(before, key) if key else {}, _first(after, key) if key else {},
                                   newest_saved, "data position", key))
    return Fidelity(restored_step=0, status="fail", parts=parts)


def _weights_back(before: dict[int, float], after: dict[int, float], saved: int) -> FidelityPart:
    """After a start from the first step: a loss near the saved step's, far from the start of
    training's, is weights that came back; one back at the start's, weights that did not."""
    if not before or not after:
        return FidelityPart(name="loss", status="not measured", says=f"the job's step lines give no loss; {HOW_TO['loss']}")
    pre = sorted(before)
    near = [n for n in pre if saved - WINDOW < n <= saved]
    start = [n for n in pre[:WINDOW] if n <= WINDOW]
    diffs = [abs(before[b] - before[a]) for a, b in zip(pre, pre[1:], strict=False) if b == a + 1][-NOISE_STEPS:]
    if not near or not start or len(diffs) < 3:
        return FidelityPart(name="loss", status="unknown",
                            says=f"the loss before the fault does not show both the start of training and the saved "
                                 f"step {saved}, so what the weights came back as cannot be told")
    level_s, level_0 = _median([before[n] for n in near]), _median([before[n] for n in start])
    post = sorted(after)[:WINDOW]
    level_post = _median([after[n] for n in post])
    band = max(BAND * _median(diffs), 1e-9 + 1e-3 * abs(level_s))
    figures = (f"median loss {_g(level_post)} over {_steps(post)} after the restart, against {_g(level_s)} over "
               f"{_steps(near)} (the saved step) and {_g(level_0)} at the start ({_steps(start)})")
    if abs(level_0 - level_s) <= 2 * band:
        return FidelityPart(name="loss", status="unknown",
                            says=f"{figures}: the loss had moved only {_g(abs(level_0 - level_s))} by the saved step, "
                                 f"inside twice the noise band ({_g(band)}); whether the weights came back cannot be told")
    if abs(level_post - level_s) < abs(level_post - level_0) and abs(level_post - level_0) > band:
        return FidelityPart(name="loss", status="pass", came_back=True,
                            says=f"{figures}: the weights came back")
    return FidelityPart(name="loss", status="fail", came_back=False,
                        says=f"{figures}: the weights started over too")


def _same_as_at_start(before: dict[int, float], after: dict[int, float], saved: int,
                      name: Literal["learning rate", "data position"], key: str | None) -> FidelityPart:
    """After a start from the first step: a figure (learning rate, data consumed) equal to the
    one the same step number had at the start of training started over; one going on from the
    saved step's came back."""
    before, after = _finite(before), _finite(after)
    words = "learning rate" if name == "learning rate" else f"{key} consumed"
    if key is None or not before or not after:
        return FidelityPart(name=name, status="not measured",
                            says=f"the job's step lines give no {words}; {HOW_TO['lr' if name == 'learning rate' else 'data']}")
    again = [n for n in sorted(after) if n in before][:WINDOW]
    if again and all(_same(after[n], before[n]) for n in again):
        if saved in before and _same(before[saved], before[again[0]]):
            return FidelityPart(name=name, status="unknown",
                                says=f"{words} {_g(after[again[0]])} at step {again[0]} after the restart, as at the "
                                     f"start and at the saved step {saved} alike: it does not tell")
        return FidelityPart(name=name, status="fail", came_back=False,
                            says=f"{words} {_g(after[again[0]])} at step {again[0]} after the restart, as at step "
                                 f"{again[0]} of the first run (and {_g(before[saved])} at the saved step {saved})"
                            if saved in before else
                            f"{words} {_g(after[again[0]])} at step {again[0]} after the restart, as at step "
                            f"{again[0]} of the first run")
    if saved in before:
        n = min(after)
        near_saved = _same(after[n], before[saved]) if name == "learning rate" else after[n] >= before[saved]
        if near_saved:
            return FidelityPart(name=name, status="pass", came_back=True,
                                says=f"{words} {_g(after[n])} at step {n} after the restart, going on from "
                                     f"{_g(before[saved])} at the saved step {saved}")
    return FidelityPart(name=name, status="unknown",
                        says=f"the {words} after the restart matches neither the start's nor the saved step's")
