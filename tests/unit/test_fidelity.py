"""restore_fidelity on step lines shaped as the reference job prints them (loss, lr, samples):
a restore that brings back the weights, the schedule and the data position passes; one that
brings back only the step fails on the part it left out, quoting both figures; a job that
prints none of them is not measured, and never said to be faithful."""
from __future__ import annotations

import math

import pytest

from drillbit.judging.checks.fidelity import restore_fidelity
from drillbit.judging.checks.slo import Judging, _judge_restore_fidelity
from drillbit.judging.checks.recovery import Measurements
from drillbit.core.history import History
from drillbit.spec.models import SLO

FAULT, RESTORED = 45, 40


def loss_at(n: int) -> float:
    """A training loss falling from ~33 to ~3 by step 40, with step-to-step noise."""
    return 30 * math.exp(-n / 15) + 2 + (0.6 if n % 2 else -0.6)


def lr_at(n: int) -> float:
    return 0.01 * 0.995 ** (n - 1)


def run(after=lambda n: {}, keys=("loss", "lr", "samples")):
    """Steps 1..FAULT before the fault, then RESTORED+1..RESTORED+10 after it, each field as
    the healthy job gives it unless ``after`` says otherwise for the steps after."""
    h = History()
    healthy = lambda n: {"loss": loss_at(n), "lr": lr_at(n), "samples": n * 64}  # noqa: E731
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, **{k: v for k, v in healthy(n).items() if k in keys})
    before = h.of("step")
    for i, n in enumerate(range(RESTORED + 1, RESTORED + 11)):
        fields = {**healthy(n), **after(n)}
        h.record("probe", "step", t=100.0 + i, n=n, **{k: v for k, v in fields.items() if k in keys})
    return restore_fidelity(before, h.of("step")[len(before):], RESTORED)


def parts(f):
    return {p.name: p for p in f.parts}


def test_a_faithful_restore_passes_every_part():
    f = run()
    assert f.status == "pass" and {p.status for p in f.parts} == {"pass"}, f


def test_weights_not_restored_fail_on_the_loss_quoting_both_figures():
    f = run(after=lambda n: {"loss": loss_at(n - RESTORED)})  # the loss of a model back at the start
    loss = parts(f)["loss"]
    assert f.status == "fail" and loss.status == "fail", f
    assert "after restoring step 40" in loss.says and "at the start" in loss.says and "weights were not restored" \
        in loss.says
    assert parts(f)["learning rate"].status == "pass"  # the schedule came back: only the weights are named


def test_a_schedule_that_started_over_fails_on_the_learning_rate():
    f = run(after=lambda n: {"lr": lr_at(n - RESTORED)})
    lr = parts(f)["learning rate"]
    assert f.status == "fail" and lr.status == "fail"
    assert "0.01 at step 41 after restoring step 40" in lr.says and "started over" in lr.says


def test_a_loader_from_sample_zero_fails_on_the_data_position():
    f = run(after=lambda n: {"samples": (n - RESTORED) * 64})
    data = parts(f)["data position"]
    assert f.status == "fail" and data.status == "fail"
    assert "64 samples consumed at step 41" in data.says and "started over" in data.says


def test_a_job_that_prints_none_of_it_is_not_measured_and_never_called_faithful():
    f = run(keys=())
    assert f.status == "unknown" and {p.status for p in f.parts} == {"not measured"}
    assert all("add a group named" in p.says for p in f.parts)
    m = Measurements(restored_step=RESTORED, fidelity=f)
    j = Judging(slo=SLO(), m=m, watched=60.0, baseline=None)
    _judge_restore_fidelity(j)
    assert j.results == []  # unset: no verdict from what was not measured
    j = Judging(slo=SLO(restore_fidelity=True), m=m, watched=60.0, baseline=None)
    _judge_restore_fidelity(j)
    assert [r.status for r in j.results] == ["unknown"]  # asked for: inconclusive, never pass


def test_a_loss_that_has_hardly_moved_cannot_tell_a_restore_from_a_start_over():
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, loss=5.0 + (0.5 if n % 2 else -0.5))
    before = h.of("step")
    for i, n in enumerate(range(RESTORED + 1, RESTORED + 6)):
        h.record("probe", "step", t=100.0 + i, n=n, loss=5.3)
    f = restore_fidelity(before, h.of("step")[len(before):], RESTORED)
    assert parts(f)["loss"].status == "unknown" and "look alike" in parts(f)["loss"].says


def test_a_failed_part_fails_the_slo_with_a_reason_naming_it():
    f = run(after=lambda n: {"samples": (n - RESTORED) * 64})
    j = Judging(slo=SLO(), m=Measurements(restored_step=RESTORED, fidelity=f), watched=60.0, baseline=None)
    _judge_restore_fidelity(j)
    assert [r.status for r in j.results] == ["fail"]
    assert j.reasons and "resumed at step 40, but not the state saved there" in j.reasons[0]
    assert "data position" in j.reasons[0]


def test_figures_on_a_line_of_their_own_are_the_next_steps_as_the_trainer_prints_them():
    """The Hugging Face Trainer prints its dict before its progress bar counts the step, on a
    line of its own with no step number (the hf-trainer preset's `metrics` signal)."""
    from drillbit.judging.checks.fidelity import with_metrics
    from drillbit.judging.probes.preset import load, matcher

    m = matcher(load("hf-trainer").signals)
    lines = ["  0%|          | 0/40 [00:00<?, ?it/s]{'loss': '4.637', 'grad_norm': '2.6', 'learning_rate': '2e-05', "
             "'num_tokens': '100', 'epoch': '0.002'}", "  2%|▎         | 1/40 [00:00<00:03, 11.12it/s]",
             "{'loss': '4.6', 'grad_norm': '2.6', 'learning_rate': '1.9e-05', 'num_tokens': '200', 'epoch': '0.004'}",
             "  5%|▌         | 2/40 [00:00<00:02, 18.10it/s]"]
    h = History()
    for t, line in enumerate(lines):
        for kind, _, data in m.match(line):
            h.record("probe", kind, t=float(t), **data)
    steps = with_metrics(h.of("step"), list(h))
    assert [(e.data["n"], e.data["loss"], e.data["lr"], e.data["tokens"]) for e in steps] == [
        (1, 4.637, 2e-05, 100.0), (2, 4.6, 1.9e-05, 200.0)]


def test_a_world_that_shrank_at_the_restart_goes_on_from_the_saved_count():
    """An elastic restart on fewer nodes consumes fewer samples a step from there on (a CI run
    of kill-node: 4 ranks, then 2): the count goes on from the saved one, within a step's worth."""
    f = run(after=lambda n: {"samples": RESTORED * 64 + (n - RESTORED) * 32})
    assert parts(f)["data position"].status == "pass", f


def noisy_run(after_loss):
    """A loss that moves little against its noise (as 2 ranks of the reference job print it);
    the schedule and the loader come back either way."""
    h = History()
    loss = lambda n: 20 - 0.2 * n + (4.0 if n % 2 else -4.0)  # noqa: E731 (moves 8.8 by step 45, band 24)
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, loss=loss(n), lr=lr_at(n), samples=n * 64)
    before = h.of("step")
    for i, n in enumerate(range(RESTORED + 1, RESTORED + 11)):
        h.record("probe", "step", t=100.0 + i, n=n, loss=after_loss(n, loss), lr=lr_at(n), samples=n * 64)
    return restore_fidelity(before, h.of("step")[len(before):], RESTORED)


def test_a_loss_that_cannot_tell_leaves_the_whole_unknown_though_the_schedule_and_loader_came_back():
    """A restart without its weights, on a loss too noisy to show it: the learning rate and the
    data position pass, and the whole must still not pass (found with 2 ranks of the reference
    job: restore-fidelity passed reference-noweights)."""
    f = noisy_run(lambda n, loss: loss(1))  # the weights came back at their initialisation
    assert parts(f)["loss"].status == "unknown" and "look alike" in parts(f)["loss"].says
    assert parts(f)["learning rate"].status == "pass" and parts(f)["data position"].status == "pass"
    assert f.status == "unknown", f
    asked = Judging(slo=SLO(restore_fidelity=True), m=Measurements(restored_step=RESTORED, fidelity=f), watched=60.0,
                    baseline=None)
    _judge_restore_fidelity(asked)
    assert [r.status for r in asked.results] == ["unknown"] and "loss: unknown" in asked.results[0].detail
    unasked = Judging(slo=SLO(), m=Measurements(restored_step=RESTORED, fidelity=f), watched=60.0, baseline=None)
    _judge_restore_fidelity(unasked)
    assert unasked.results == [] and unasked.reasons == []  # not asked for, not decided: no claim either way


def test_an_exact_replay_shows_the_state_came_back_however_little_the_loss_moved():
    f = noisy_run(lambda n, loss: loss(n))  # steps 41-45 again, with the losses they had
    assert parts(f)["loss"].status == "pass" and "gave the losses they gave before" in parts(f)["loss"].says
    assert f.status == "pass", f


# --- figures bound to their own step, within their own attempt (#56) --------------------------------

def _trainer_lines(h: History, steps: range, lr_of, loss_of, dict_first, spe: int = 512, t0: float = 0.0) -> None:
    """The Trainer's output as the probes record it: its 'Num update steps per epoch' line, then per
    step a progress-bar count and a dict with no step number, in either order (tqdm's redraws decide)."""
    from drillbit.judging.probes.preset import load, matcher

    m = matcher(load("hf-trainer").signals)

    def put(line: str, t: float) -> None:
        for kind, _, data in m.match(line):
            h.record("probe", kind, t=t, **data)

    put(f"[transformers]   Num update steps per epoch = {spe:,}", t0)
    for i, n in enumerate(steps):
        bar = f" 10%|█         | {n}/1000 [00:01<00:09,  4.51it/s]"
        d = "{" + f"'loss': '{loss_of(n):.4g}', 'grad_norm': '0.79', 'learning_rate': '{lr_of(n):.4g}', " \
                  f"'epoch': '{n / spe:.4g}'" + "}"
        lines = [d, bar] if dict_first(n) else [bar, d]
        for j, line in enumerate(lines):
            put(line, t0 + i + j / 10)


def _warmup(n: int) -> float:
    return 2e-4 * (n - 1)


def test_a_trainer_dict_is_its_own_steps_whether_printed_before_or_after_the_bar():
    """transformers 5.25 printed the dict before the bar's count of its step, and after it, in one
    run; a replay with the very learning rates of a warmup must pass (it failed: 'learning rate
    0.0044 at step 22 after restoring step 20, against 0.0042')."""
    from drillbit.judging.checks.fidelity import with_metrics

    h = History()
    _trainer_lines(h, range(1, 26), _warmup, lambda n: 5 - 0.05 * n + (0.02 if n % 2 else -0.02),
                   dict_first=lambda n: n % 3 != 0)
    before = h.of("step")
    h.record("probe", "restart", t=100.0, attempt=1)
    h.record("probe", "restore", t=101.0, step=20, path="/x/checkpoint-20")
    _trainer_lines(h, range(21, 27), _warmup, lambda n: 5 - 0.05 * n + (0.02 if n % 2 else -0.02),
                   dict_first=lambda n: n % 2 == 0, t0=102.0)
    after = h.of("step")[len(before):]
    events = list(h)
    merged = with_metrics(after, events)
    assert [(e.data["n"], e.data["lr"]) for e in merged][:3] == [(21, 0.004), (22, 0.0042), (23, 0.0044)]
    assert not any("unbound" in e.data for e in merged)
    f = restore_fidelity(with_metrics(before, events), merged, 20)
    assert parts(f)["learning rate"].status == "pass", f
    assert parts(f)["loss"].status == "pass" and "median gap 0" in parts(f)["loss"].says, f


def test_a_figure_waiting_for_its_step_never_crosses_the_restart():
    """The dead attempt's last dict (step 25's) was read but its bar never counted the step; it
    must not become the restored attempt's first step's figures."""
    from drillbit.judging.checks.fidelity import with_metrics

    h = History()
    for n in range(1, 4):
        h.record("probe", "metrics", t=float(n), loss=9.0, lr=0.5)   # names no step: the next step's
        h.record("probe", "step", t=n + 0.5, n=n)
    h.record("probe", "metrics", t=10.0, loss=7.0, lr=0.25)           # the dead attempt's last
    h.record("probe", "restart", t=11.0, attempt=1)
    h.record("probe", "step", t=12.0, n=3)
    merged = with_metrics(h.of("step"), list(h))
    assert "lr" not in merged[-1].data and merged[0].data["unbound"] == ["loss", "lr"]


def test_a_bound_figure_goes_to_its_own_attempts_step_of_that_number():
    from drillbit.judging.checks.fidelity import with_metrics

    h = History()
    h.record("probe", "step", t=1.0, n=22)
    h.record("probe", "metrics", t=1.1, n=22, lr=0.0042)
    h.record("probe", "restore", t=2.0, step=20)
    h.record("probe", "metrics", t=2.1, n=22, lr=0.0099)
    h.record("probe", "step", t=2.2, n=22)
    a, b = with_metrics(h.of("step"), list(h))
    assert (a.data["lr"], b.data["lr"]) == (0.0042, 0.0099)


def test_a_schedule_mismatch_on_figures_placed_by_position_alone_is_unknown_never_a_fail():
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "metrics", t=float(n), lr=lr_at(n))
        h.record("probe", "step", t=n + 0.5, n=n, loss=loss_at(n))
    from drillbit.judging.checks.fidelity import with_metrics

    before = h.of("step")
    h.record("probe", "restore", t=100.0, step=RESTORED)
    for i, n in enumerate(range(RESTORED + 1, RESTORED + 8)):
        h.record("probe", "metrics", t=101.0 + i, lr=lr_at(n + 1))  # a line read out of its step's order
        h.record("probe", "step", t=101.5 + i, n=n, loss=loss_at(n))
    events = list(h)
    f = restore_fidelity(with_metrics(before, events), with_metrics(h.of("step")[len(before):], events), RESTORED)
    lr = parts(f)["learning rate"]
    assert lr.status == "unknown" and "name no step" in lr.says, lr
    assert f.status == "unknown"


@pytest.mark.parametrize("epoch, spe, step", [
    ("0.001953", 512, 1), ("0.04102", 512, 21), ("1.953", 512, 1000), ("19.53", 512, None), ("0.3333", 3, 1),
    ("0.5", 512, None), ("nan", 512, None), ("-0.1", 10, None), ("x", 10, None), ("0.04102", 0, None),
    ("0.04102", None, None), ("1e+03", 1, None), ("12.5", 2, 25)])
def test_an_epoch_fraction_names_a_step_only_where_its_digits_place_one(epoch, spe, step):
    from drillbit.judging.checks.fidelity import epoch_step

    assert epoch_step(epoch, spe) == step


# --- figures that are not numbers (#56) -------------------------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_loss_that_is_not_a_number_after_the_restore_fails_naming_it(bad):
    f = run(after=lambda n: {"loss": bad} if n >= RESTORED + 2 else {})
    loss = parts(f)["loss"]
    assert f.status == "fail" and loss.status == "fail", f
    assert f"loss {bad} at step {RESTORED + 2}" in loss.says and "was a number" in loss.says


def test_a_loss_that_was_not_a_number_before_the_fault_too_is_unknown():
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, loss=math.nan if n == 30 else loss_at(n))
    before = h.of("step")
    for i, n in enumerate(range(RESTORED + 1, RESTORED + 6)):
        h.record("probe", "step", t=100.0 + i, n=n, loss=math.nan)
    f = restore_fidelity(before, h.of("step")[len(before):], RESTORED)
    assert parts(f)["loss"].status == "unknown" and "before the fault too (step 30)" in parts(f)["loss"].says


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_learning_rate_that_is_not_a_number_after_the_restore_fails(bad):
    f = run(after=lambda n: {"lr": bad})
    assert parts(f)["learning rate"].status == "fail" and f.status == "fail", f


def test_data_counts_that_are_not_numbers_never_decide():
    f = run(after=lambda n: {"samples": math.nan})
    assert parts(f)["data position"].status == "not measured", f


def test_a_loss_beyond_the_start_is_called_so():
    f = run(after=lambda n: {"loss": loss_at(1) * 3})
    loss = parts(f)["loss"]
    assert loss.status == "fail" and "beyond even the start" in loss.says, loss
    assert "median loss" in loss.says and "over steps 36–40" in loss.says


# --- a restart from the first step: what came back all the same (#56) ---------------------------------

def started(after_loss, after_lr=lr_at, saved=RESTORED):
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, loss=loss_at(n), lr=lr_at(n), samples=n * 64)
    before = h.of("step")
    for i, n in enumerate(range(1, 9)):
        h.record("probe", "step", t=100.0 + i, n=n, loss=after_loss(n), lr=after_lr(n), samples=n * 64)
    return restore_fidelity(before, h.of("step")[len(before):], 0, saved)


def test_a_model_only_restore_names_the_weights_back_and_the_rest_started_over():
    f = started(lambda n: loss_at(RESTORED + n))
    assert f.status == "fail" and f.restored_step == 0
    assert parts(f)["loss"].came_back is True and parts(f)["learning rate"].came_back is False
    assert parts(f)["data position"].came_back is False and parts(f)["step counter"].came_back is False
    assert f.started_over() == ("the weights came back, but step counter, schedule and data position started over "
                                "(with the schedule, most often, the optimizer)")
    m = Measurements(restored_step=0, lost_steps=FAULT, step_at_fault=FAULT, fidelity=f)
    j = Judging(slo=SLO(max_lost_steps=5), m=m, watched=60.0, baseline=None)
    from drillbit.judging.checks.slo import _judge_max_lost_steps

    _judge_restore_fidelity(j)
    _judge_max_lost_steps(j)
    assert [r.name for r in j.results] == ["max_lost_steps"]  # unasked: lost steps judge a start over
    assert "the weights came back, but step counter, schedule and data position started over" in j.reasons[0]
    assert "the saved step" in j.reasons[0]


def test_a_start_over_with_nothing_back_says_the_weights_started_over_too():
    f = started(loss_at)
    assert parts(f)["loss"].came_back is False and "started over too" in parts(f)["loss"].says
    assert f.started_over().startswith("step counter, weights, schedule and data position started over")


def test_a_start_over_with_nothing_saved_is_not_judged():
    assert started(loss_at, saved=None) is None


def test_with_gradient_accumulation_the_trainers_epoch_fraction_binds_nothing():
    """The Trainer's epoch counts batches; with accumulation that does not divide them it is not
    steps over 'Num update steps per epoch' (3001 batches, 4 a step: epoch '0.877' is step 658, the
    fraction says 659). Its figures are then placed by position, marked so, and never fail."""
    from drillbit.judging.checks.fidelity import with_metrics

    h = History()
    h.record("probe", "metrics", t=0.0, steps_per_epoch=751)
    h.record("probe", "metrics", t=0.0, accumulation=4)
    h.record("probe", "metrics", t=1.0, loss=1.0, lr=0.1, epoch="0.877")
    h.record("probe", "step", t=1.1, n=658)
    [step] = with_metrics(h.of("step"), list(h))
    assert step.data["lr"] == 0.1 and step.data["unbound"] == ["loss", "lr"]
