"""restore_fidelity on step lines shaped as the reference job prints them (loss, lr, samples):
a restore that brings back the weights, the schedule and the data position passes; one that
brings back only the step fails on the part it left out, quoting both figures; a job that
prints none of them is not measured, and never said to be faithful."""
from __future__ import annotations

import math

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
