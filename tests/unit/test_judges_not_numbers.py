"""#56: every judge fed the figures that break arithmetic. A NaN compares false both ways (a
fidelity once fell through to its pass on a NaN loss), an infinity passes or fails any limit, and
-inf passes every 'within': a judgement on such a figure is a lie either way, so it is unknown,
with no reason of its own. The measurers turn such a figure into a measure error (the drill is
then inconclusive, a drillbit bug named); the baseline leaves such a run's figure out."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from drillbit.core.history import History
from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.recovery import Measurements, measure
from drillbit.judging.checks.slo import evaluate
from drillbit.spec.models import SLO

NUMERIC = [n for n, f in Measurements.model_fields.items() if f.annotation in (float | None, int | None, float, int)
           and n not in ("t_fault", "t_observe_end", "observed_s")]
SLO_ALL = SLO(detect_within=10, restart_within=10, restore_within=10, first_step_within=10, max_lost_steps=5,
              goodput_min=0.5, straggler_within=10, requeue_within=10, recover_or_escalate_within=10,
              keep_stepping=True, restore_fidelity=True, attribution="exact",
              limits={k: {"max": 1} for k in ("time_to_detect", "goodput", "lost_steps", "slowdown_achieved",
                                              "fleet_tax", "steps_behind_best")},
              regression={"time_to_detect": 0.2, "goodput": 0.2, "lost_steps": 0.2})
HEALTHY = dict(t_fault=0.0, observed_s=60.0, time_to_detect=1.0, time_to_restart=1.5, time_to_restore=2.0,
               time_to_first_step=2.5, lost_steps=1, restored_step=20, step_at_fault=21, goodput=0.9,
               baseline_step_s=0.1, last_step_s=59.0, steps_after_recovery=10)
NOT_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf])


def _baseline(value: float) -> Baseline:
    return Baseline(runs=[1, 2, 3], samples=[Measurements(**{**HEALTHY, "time_to_detect": v})
                                             for v in (1.0, value, 1.1)])


@settings(max_examples=150, deadline=None)
@given(fields=st.lists(st.sampled_from(NUMERIC), min_size=1, max_size=4, unique=True), bad=NOT_NUMBERS,
       old=NOT_NUMBERS)
def test_no_judge_passes_or_fails_on_a_figure_that_is_not_a_number(fields, bad, old):
    m = Measurements(**HEALTHY)
    for name in fields:
        setattr(m, name, bad)
    results, reasons = evaluate(SLO_ALL, m, History(), _baseline(old))
    for r in results:
        value = getattr(m, r.measurement, None)
        if isinstance(value, float) and not math.isfinite(value):
            assert r.status == "unknown" and "not a number" in r.detail, r
        assert r.measured is None or math.isfinite(r.measured), r
    assert not any(w in reason for reason in reasons for w in ("nan", " inf")), reasons


def test_a_baseline_run_whose_figure_is_not_a_number_is_left_out():
    assert _baseline(math.nan).values("time_to_detect") == [1.0, 1.1]
    verdict = _baseline(math.inf).judge("time_to_detect", 1.05, 0.2)
    assert verdict is not None and not verdict.regressed and math.isfinite(verdict.threshold)


def _history(detect_t: float) -> History:
    h = History()
    h.record("harness", "steady", t=1.0, baseline_step_s=0.1, step=5)
    for n in range(1, 6):
        h.record("probe", "step", t=float(n), n=n)
    h.record("harness", "fault.inject", t=6.0, rank=1, node="local", fault="kill-rank")
    h.record("harness", "fault.confirmed", t=6.0, fault="kill-rank", expects="crash", verb="kill", hurts="rank",
             evidence=[])
    h.record("probe", "detect", t=detect_t, by="torchrun")
    h.record("harness", "observe.end", t=30.0)
    return h


def test_a_line_stamped_not_a_number_is_never_a_detection():
    assert measure(_history(math.nan)).time_to_detect is None
    assert measure(_history(7.0)).time_to_detect == 1.0


def test_a_measurer_whose_figure_comes_out_not_a_number_is_a_measure_error(monkeypatch):
    """A measurer's NaN or inf (a division by an empty window, say) is that family's bug: its
    figures are unknown and named, and the drill cannot pass or fail on them."""
    from drillbit.judging.checks import recovery

    def broken(m, w):
        m.time_to_detect = math.inf

    patched = tuple(r if r.name != "restarts" else recovery.Measurer(r.name, broken, r.reads, r.writes, r.slow, r.poll)
                    for r in recovery.MEASURERS)
    monkeypatch.setattr(recovery, "MEASURERS", patched)
    m = measure(_history(7.0))
    assert m.time_to_detect is None and "time_to_detect came out inf" in m.measure_errors["restarts"], m.measure_errors


@given(order=st.permutations(list(range(1, 9))))
@settings(max_examples=40, deadline=None)
def test_steps_out_of_order_never_break_the_measurers(order):
    h = History()
    h.record("harness", "steady", t=0.5, baseline_step_s=0.1, step=3)
    for i, n in enumerate(order):
        h.record("probe", "step", t=1.0 + i, n=n)
    h.record("harness", "fault.confirmed", t=5.0, fault="kill-rank", expects="crash", verb="kill", hurts="rank",
             evidence=[])
    h.record("harness", "observe.end", t=20.0)
    m = measure(h)
    assert not m.measure_errors, m.measure_errors
    evaluate(SLO_ALL, m, h)
