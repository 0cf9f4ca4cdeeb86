"""slo.py (evaluate and its judges) and baseline.py, attacked. Found by an adversarial review of
#56's change: each test failed at 1d98abb, unless named test_held_ (a guard that held)."""
from __future__ import annotations

import math

from drillbit.core.history import History
from drillbit.judging.checks import check
from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.recovery import Measurements
from drillbit.judging.checks.slo import evaluate
from drillbit.spec.models import SLO
from tests.unit.test_checks import BASE, T_FAULT, prelude, spec
from tests.unit.test_fidelity import loss_at, lr_at


def test_S1_a_job_that_never_came_back_does_not_pass_on_a_regression_with_no_baseline():
    """The first run of a drill whose SLO is a regression on time_to_first_step: the restart never
    stepped and the job exited 1. _judge_regression says 'pass' ('no passing baseline run yet') for a
    figure that was never measured, the drill PASSes (exit 0) and becomes the baseline of later runs.
    With a baseline, the same missing figure is 'unknown'."""
    rows = prelude() + [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
                        (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1}),
                        (T_FAULT + 300, "job.exit", {"code": 1}), (T_FAULT + 300.1, "observe.end")]
    result = check(spec(regression={"time_to_first_step": 0.2}), History.build(rows))
    assert result.measurements.time_to_first_step is None
    assert result.verdict != "pass", (result.verdict, [(s.name, s.status, s.detail) for s in result.slos])


def _start_over_history() -> History:
    """A restart from step 1 (no restore line) that brought the weights back but not the step counter,
    schedule or loader; the job had said it saved step 40; fault at step 45."""
    rows = [(BASE, "drill.start"), (BASE + 0.1, "job.launch")]
    rows += [(BASE + 5 + i * 0.25, "step", {"n": n, "loss": loss_at(n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 46))]
    rows.append((BASE + 6.5, "steady", {"baseline_step_s": 0.25}))
    rows.append((BASE + 5 + 39 * 0.25 + 0.01, "ckpt.save", {"step": 40, "path": "/c/step_40"}))
    tf = BASE + 5 + 44 * 0.25 + 0.1
    rows += [(tf - 0.01, "fault.inject"), (tf, "fault.confirmed"), (tf + 0.2, "detect", {"by": "torchrun"}),
             (tf + 3, "restart", {"attempt": 1})]
    rows += [(tf + 6 + i * 0.25, "step", {"n": n, "loss": loss_at(40 + n), "lr": lr_at(n), "samples": 64 * n})
             for i, n in enumerate(range(1, 21))]
    end = tf + 6 + 20 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True})]
    return History.build(rows)


def test_S3_a_failed_restore_fidelity_always_says_why():
    """restore_fidelity asked, max_lost_steps generous (100): the start over FAILs restore_fidelity, but
    the reason is left to max_lost_steps ('else its reason says the same'), which passed and says
    nothing: the verdict is FAIL with reasons == []."""
    result = check(spec(max_lost_steps=100, restore_fidelity=True), _start_over_history())
    assert result.verdict == "fail"                                  # held
    assert result.reasons, [(s.name, s.status) for s in result.slos]
    assert any("started over" in r for r in result.reasons), result.reasons


# ---------------------------------------------------------------------------------------------------
# Guards that held.
# ---------------------------------------------------------------------------------------------------

def test_held_not_numbers_are_unknown_and_never_quoted():
    m = Measurements(t_fault=0.0, observed_s=60.0, time_to_detect=math.nan, time_to_first_step=-math.inf,
                     lost_steps=1, goodput=math.inf, newest_save_step=30, newest_save_s=math.nan, restored_step=20,
                     step_at_fault=40)
    slo = SLO(detect_within=10, first_step_within=10, goodput_min=0.5, max_lost_steps=0,
              limits={"time_to_detect": {"max": 1}}, regression={"time_to_detect": 0.2})
    base = Baseline(runs=[1], samples=[Measurements(time_to_detect=math.nan)])
    results, reasons = evaluate(slo, m, History(), base)
    assert all(r.status == "unknown" for r in results if r.measurement in ("time_to_detect", "time_to_first_step",
                                                                           "goodput")), results
    assert not any("nan" in r or " inf" in r for r in reasons), reasons


def test_held_spec_refuses_non_finite_limits():
    import pytest
    from pydantic import ValidationError

    for bad in ({"limits": {"lost_steps": {"max": math.nan}}}, {"regression": {"time_to_detect": math.inf}}):
        with pytest.raises(ValidationError):
            SLO.model_validate(bad)
