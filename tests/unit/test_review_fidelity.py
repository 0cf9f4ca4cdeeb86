"""restore_fidelity / with_metrics / epoch_step / started_over, attacked (drillbit #56 area).

Found by an adversarial review of #56's change; each test states what drillbit should have said
(each failed at 1d98abb, unless named test_held_: a guard that held). F5 (a sparse step line taken
for the restored step), F6 (a restore beyond anything the run reached) and the epoch arithmetic of
gradient accumulation as epoch_step alone would do it are left open (see the changelog)."""
from __future__ import annotations

import math

import pytest

from drillbit.core.history import History
from drillbit.judging.checks import check
from drillbit.judging.checks.fidelity import epoch_step, judge_loss, judge_lr, restore_fidelity, with_metrics
from tests.unit.test_checks import BASE, T_FAULT, spec
from tests.unit.test_fidelity import RESTORED, loss_at, lr_at, parts, run

# ---------------------------------------------------------------------------------------------------
# F1 (wrong PASS, whole drill): a restore line that names step 20, but the restarted job counts its
# steps from 1 again (a checkpoint loaded into a fresh trainer: the step counter, and here everything
# else, started over). drillbit skips the re-run steps 1..20 as "not past the restored step", takes
# step 21 as the first step after recovery, reports lost_steps 5 and a faithful restore, and PASSes.
# ---------------------------------------------------------------------------------------------------

def _restore_then_count_from_one() -> History:
    rows = [(BASE, "drill.start"), (BASE + 0.1, "job.launch")]
    rows += [(BASE + 5 + i * 0.25, "step", {"n": n, "loss": loss_at(n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 26))]
    rows.append((BASE + 6.5, "steady", {"baseline_step_s": 0.25}))
    rows += [(BASE + 5 + 19 * 0.25 + 0.01, "ckpt.save", {"step": 20, "path": "/c/step_20"})]
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20"})]
    # the restarted job steps 1, 2, 3, ... again, with the very figures of the first run
    rows += [(T_FAULT + 6 + i * 0.05, "step", {"n": n, "loss": loss_at(n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 41))]
    end = T_FAULT + 6 + 40 * 0.05 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True})]
    return History.build(rows)


def test_F1_a_restore_line_whose_restart_counts_from_step_one_again_is_no_pass():
    result = check(spec(detect_within=60, first_step_within=180, max_lost_steps=20, restore_fidelity=True),
                   _restore_then_count_from_one())
    m = result.measurements
    # the job re-ran steps 1..25: every step before the fault was lost, and its first step after the
    # restart was step 1, not 21
    assert m.first_step == 1, (m.first_step, m.lost_steps)
    assert result.verdict == "fail", (result.verdict, result.reasons, m.lost_steps, m.fidelity)


# ---------------------------------------------------------------------------------------------------
# F2 (wrong PASS, loss part): judge_loss's last return says "within <band> of the restored step's"
# whatever the distance. A loss that comes back 40% of the way to the start of training (3.6x the
# restored step's, three noise bands above it) passes, with a sentence that is false.
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("frac", [0.2, 0.3, 0.4])
def test_F2_a_loss_far_above_the_restored_steps_is_not_called_within_the_band(frac):
    level_r, level_0 = loss_at(RESTORED), loss_at(1)
    f = run(after=lambda n: {"loss": level_r + frac * (level_0 - level_r) + (0.6 if n % 2 else -0.6)})
    loss = parts(f)["loss"]
    # e.g. frac 0.4: "median loss 14.96 over steps 41–45 after restoring step 40, against 4.122 over
    # steps 36–40 ...; within 3.611 of the restored step's" — 14.96 is 10.8 above 4.122
    assert loss.status != "pass", loss.says
    assert "within" not in loss.says, loss.says


# ---------------------------------------------------------------------------------------------------
# F3 (wrong PASS, loss part): a loss that never moves (a model that learns nothing, a constant
# placeholder) "replays exactly" whatever state came back; the exact-replay shortcut passes it, while
# the very sentence says the start of training had the same loss. A start over looks the same.
# ---------------------------------------------------------------------------------------------------

def test_F3_a_loss_that_never_moved_cannot_show_the_weights_came_back():
    flat = {n: 2.302585 for n in range(1, 46)}
    part = judge_loss(flat, {n: 2.302585 for n in range(41, 51)}, 40)
    assert part.status == "unknown", part.says  # drillbit: pass, "... and 2.303 at the start ...; median gap 0"


# ---------------------------------------------------------------------------------------------------
# F4 (vacuous PASS, lr part): a constant learning rate is the same at every step, so a replay
# matching it says nothing about whether the schedule/optimizer came back. started_over() already
# calls that case "it does not tell" (unknown); judge_lr calls it a pass.
# ---------------------------------------------------------------------------------------------------

def test_F4_a_constant_learning_rate_cannot_show_the_schedule_came_back():
    part = judge_lr({n: 1e-3 for n in range(1, 46)}, {n: 1e-3 for n in range(41, 51)}, 40)
    assert part.status != "pass", part.says


# ---------------------------------------------------------------------------------------------------
# F8 (crash -> inconclusive "drillbit bug"): one odd epoch in the job's output ('epoch': '1e999999999',
# which the hf-trainer preset's epoch group [\d.eE+-]+ accepts) raises decimal.Overflow /
# InvalidOperation inside epoch_step; the fidelity measurer dies and the whole drill is inconclusive,
# blamed on drillbit. epoch_step's contract is None for a fraction that places no step.
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("epoch", ["1e999999999", "1E+1000000", "9e999999", "1e-999999999"])
def test_F8_an_extreme_epoch_places_no_step_and_raises_nothing(epoch):
    assert epoch_step(epoch, 512) is None


def test_F8_an_extreme_epoch_line_does_not_make_the_drill_a_drillbit_bug():
    from tests.unit.test_checks import prelude

    rows = prelude()
    rows.insert(2, (BASE + 4.9, "metrics", {"steps_per_epoch": 512}))
    rows.insert(3, (BASE + 4.95, "metrics", {"loss": 5.0, "lr": 1e-3, "epoch": "1e999999999"}))
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20"})]
    rows += [(T_FAULT + 6.0 + i * 0.25, "step", {"n": n}) for i, n in enumerate(range(21, 41))]
    end = T_FAULT + 6.0 + 19 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True})]
    result = check(spec(), History.build(rows))
    assert not result.measurements.measure_errors, result.measurements.measure_errors
    assert result.verdict == "pass", result.reasons


# ---------------------------------------------------------------------------------------------------
# Guards that held (kept as passing regression checks of what was tried).
# ---------------------------------------------------------------------------------------------------

def test_held_named_figures_never_cross_attempts_and_nan_after_the_restore_fails():
    h = History()
    h.record("probe", "step", t=1.0, n=22)
    h.record("probe", "metrics", t=1.1, step=22, lr=0.0042)
    h.record("probe", "restart", t=2.0, attempt=1)
    h.record("probe", "step", t=2.2, n=22)
    a, b = with_metrics(h.of("step"), list(h))
    assert a.data["lr"] == 0.0042 and "lr" not in b.data
    f = run(after=lambda n: {"loss": math.nan} if n == RESTORED + 1 else {})
    assert parts(f)["loss"].status == "fail"


@pytest.mark.parametrize("epoch, step", [("4.102e-02", 21), ("0.0410", 21), ("0.041015625", 21), ("0.04", None)])
def test_held_epoch_digits(epoch, step):
    assert epoch_step(epoch, 512) == step


def test_held_a_start_over_without_a_restore_line_is_named():
    h = History()
    for n in range(1, 46):
        h.record("probe", "step", t=float(n), n=n, loss=loss_at(n), lr=lr_at(n), samples=n * 64)
    before = h.of("step")
    for i, n in enumerate(range(1, 9)):
        h.record("probe", "step", t=100.0 + i, n=n, loss=loss_at(n), lr=lr_at(n), samples=n * 64)
    f = restore_fidelity(before, h.of("step")[len(before):], 0, 40)
    assert f is not None and f.status == "fail" and parts(f)["loss"].came_back is False


# ---------------------------------------------------------------------------------------------------
# F9 (wrong PASS, lost steps): two attempts after one fault. Attempt 1 restores step 20, makes steps 21
# and 22 and dies; attempt 2 restores step 5 (the older checkpoint) and steps on 6..40. The job lost 20
# steps of the 25 it had made; drillbit keeps attempt 1's restore (restored_step 20, first_step 21,
# lost_steps 5) and PASSes max_lost_steps: 10.
# ---------------------------------------------------------------------------------------------------

def test_F9_a_later_restore_of_an_older_step_counts_the_steps_it_lost():
    from tests.unit.test_checks import prelude, steps

    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}),
             (T_FAULT + 3, "restart", {"attempt": 1}), (T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20"})]
    rows += steps(21, 22, T_FAULT + 6.0)
    rows += [(T_FAULT + 8, "restart", {"attempt": 2}), (T_FAULT + 9, "restore", {"step": 5, "path": "/c/step_5"})]
    rows += steps(6, 40, T_FAULT + 10.0)
    end = T_FAULT + 10.0 + 34 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True})]
    result = check(spec(detect_within=60, first_step_within=180, max_lost_steps=10), History.build(rows))
    m = result.measurements
    assert m.lost_steps == 20, (m.restored_step, m.lost_steps)
    assert result.verdict == "fail", (result.verdict, result.reasons)


# ---------------------------------------------------------------------------------------------------
# F10 (wrong PASS, restore_fidelity asked): a restart that began again at step 1 with everything reset
# (loss back at the start's, learning rate and samples as at step 1), in a job whose profile reads no
# save lines. started_over() returns None when no save was seen, _judge_restore_fidelity then adds no
# result at all, and a drill whose only SLO is `restore_fidelity: true` PASSes with no SLO judged. The
# SLO's own description: "without those lines it is not measured, and then the drill is inconclusive".
# ---------------------------------------------------------------------------------------------------

def test_F10_restore_fidelity_asked_for_a_start_over_is_never_a_silent_pass():
    rows = [(BASE, "drill.start"), (BASE + 0.1, "job.launch")]
    rows += [(BASE + 5 + i * 0.25, "step", {"n": n, "loss": loss_at(n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 46))]
    rows.append((BASE + 6.5, "steady", {"baseline_step_s": 0.25}))
    tf = BASE + 5 + 44 * 0.25 + 0.1
    rows += [(tf - 0.01, "fault.inject"), (tf, "fault.confirmed"), (tf + 0.2, "detect", {"by": "torchrun"}),
             (tf + 3, "restart", {"attempt": 1})]
    rows += [(tf + 6 + i * 0.25, "step", {"n": n, "loss": loss_at(n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 21))]
    end = tf + 6 + 20 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True})]
    result = check(spec(restore_fidelity=True), History.build(rows))
    assert result.verdict != "pass", (result.verdict, [(s.name, s.status) for s in result.slos])
    assert any(s.name == "restore_fidelity" for s in result.slos), result.slos
