"""The goodput ledger, regression, projection and cadence SLOs, and the results store."""
from __future__ import annotations

import pytest

from drillbit.judging.checks import check
from drillbit.judging.checks.baseline import Baseline
from drillbit.judging.checks.goodput import BUCKETS, ledger
from drillbit.judging.checks.recovery import Measurements, measure
from drillbit.core.history import History
from drillbit.judging.fleet.simulate import load_scenario
from drillbit.runs.store import Store
from drillbit.spec.models import MEASUREMENTS, DrillSpec
from tests.unit.test_checks import BASE, T_FAULT, kill_pass_history, prelude, steps


def spec(**slo) -> DrillSpec:
    return DrillSpec.model_validate({"name": "t", "class": "fail-stop", "summary": "s",
                                     "fault": {"type": "kill-rank", "trigger": {"at_step": 5}}, "slo": slo})


def with_saves(rows):
    return rows + [(BASE + 5 + i * 2.5, "ckpt.save", {"step": 10 * i, "seconds": 0.01}) for i in range(1, 3)]


def test_measurement_names_in_step_with_the_model():
    assert set(MEASUREMENTS) <= set(Measurements.model_fields)


@pytest.mark.parametrize("history", [
    kill_pass_history(),
    History.build(prelude() + [(T_FAULT, "fault.confirmed", {"progress_quiet_s": 2.0}), (T_FAULT + 60, "observe.end")]),
    History.build(with_saves(prelude()) + [(T_FAULT, "fault.confirmed"), (T_FAULT + 0.3, "detect"),
                                           (T_FAULT + 5, "restart"), (T_FAULT + 40, "job.exit", {"code": 1}),
                                           (T_FAULT + 40.1, "observe.end")]),
], ids=["recovered", "never-detected", "never-recovered"])
def test_ledger_categories_add_up_to_wall_time(history):
    m = measure(history)
    led = ledger(history, m)
    assert set(led.categories()) == set(BUCKETS)
    assert sum(led.categories().values()) == pytest.approx(led.wall_s, abs=1e-9)


def test_ledger_splits_the_disruption():
    history = kill_pass_history()
    history.record("test", "ckpt.save", t=BASE + 8.0, step=10, seconds=0.05)
    m = measure(history)
    led = ledger(history, m)
    assert led.detection_s == pytest.approx(0.2)
    assert led.infrastructure_recovery_s == pytest.approx(5.6)  # detect -> restore (restore has no seconds)
    assert led.checkpoint_restore_s == pytest.approx(0.0)
    assert led.wasted_progress_s == pytest.approx(5 * 0.25)  # steps 21..25 replayed
    assert led.checkpoint_save_s == pytest.approx(0.05)
    assert check(spec(), history).measurements.goodput == pytest.approx(led.goodput)


def test_undetected_stall_is_all_detection_badput():
    history = History.build(prelude() + [(T_FAULT, "fault.confirmed", {"progress_quiet_s": 2.0}),
                                         (T_FAULT + 60, "observe.end")])
    led = ledger(history, measure(history))
    assert led.detection_s == pytest.approx(60)
    assert led.infrastructure_recovery_s == 0


def test_slowdown_tax_while_a_slow_fault_is_active():
    rows = prelude() + [(T_FAULT, "fault.confirmed", {"expects": "slow"})]
    rows += [(T_FAULT + 0.5 * i, "step", {"n": 25 + i, "dt": 0.5}) for i in range(1, 21)]
    rows += [(T_FAULT + 10.2, "fault.heal"), (T_FAULT + 10.3, "observe.end")]
    history = History.build(rows)
    led = ledger(history, measure(history))
    assert led.slowdown_s == pytest.approx(20 * 0.25)
    assert sum(led.categories().values()) == pytest.approx(led.wall_s)


def test_regression_against_baseline():
    history = kill_pass_history()  # first step at +6.0 s, 0.25 s steps
    base = Baseline(runs=[1], samples=[Measurements(time_to_first_step=4.0, goodput=0.5, baseline_step_s=0.25)])
    slow = check(spec(regression={"time_to_first_step": 0.2}), history, baseline=base)
    assert slow.verdict == "fail"
    assert any("time_to_first_step regressed: 6.0 against a baseline median of 4 (+50%)" in r for r in slow.reasons)
    ok = check(spec(regression={"time_to_first_step": 0.6}), history, baseline=base)
    assert ok.verdict == "pass"
    first = check(spec(regression={"time_to_first_step": 0.2}), history, baseline=None)
    assert first.verdict == "pass" and first.slos[0].detail == "no passing baseline run yet"


def test_sub_second_noise_is_not_a_regression_but_a_real_shift_is():
    """#13: time_to_detect 0.53 s against one baseline run of 0.18 s failed the gate while
    every SLO held. Against the rule (median, spread, floor of three step times) it passes;
    a shift well beyond the baseline's spread still fails."""
    one = Baseline(runs=[1], samples=[Measurements(time_to_detect=0.18, baseline_step_s=0.25)])
    assert one.judge("time_to_detect", 0.53, 0.5).regressed is False  # the floor: 3 x 0.25 s
    noisy = Baseline(runs=list(range(10)), samples=[Measurements(time_to_detect=v, baseline_step_s=0.25)
                                                    for v in (0.2, 0.5, 1.1, 0.3, 1.6, 0.4, 0.9, 0.25, 1.3, 0.6)])
    verdict = noisy.judge("time_to_detect", 1.8, 0.5)
    assert not verdict.regressed and verdict.spread_margin > verdict.floor  # its own spread sets the margin
    assert noisy.judge("time_to_detect", 5.0, 0.5).regressed  # a watchdog deadline doubled is not noise
    better = Baseline(runs=[1, 2], samples=[Measurements(goodput=0.97), Measurements(goodput=0.96)])
    assert better.judge("goodput", 0.80, 0.05).regressed and not better.judge("goodput", 0.95, 0.05).regressed


def test_absolute_limits_on_any_measurement():
    result = check(spec(limits={"time_to_restore": {"max": 5.0}, "goodput": {"min": 0.1}}), kill_pass_history())
    by_name = {s.name: s for s in result.slos}
    assert by_name["limits.time_to_restore.max"].status == "fail"
    assert by_name["limits.goodput.min"].status == "pass"


def test_unknown_measurement_in_limits_is_a_spec_error():
    with pytest.raises(ValueError, match="unknown measurement"):
        spec(limits={"time_to_coffee": {"max": 1}})


def _with_recovery(restart_after_detect: float) -> History:
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 1, "detect"),
                        (T_FAULT + 1 + restart_after_detect, "restart")]
    rows += steps(26, 40, T_FAULT + 1 + restart_after_detect + 0.25)
    rows.append((T_FAULT + 1 + restart_after_detect + 5, "observe.end"))
    return History.build(rows)


def test_projection_gate_passes_fast_recovery_and_fails_slow_one():
    scenarios = {"bloom-176b": load_scenario("bloom-176b")}
    slo = {"project": {"scenario": "bloom-176b", "goodput_min": 0.97, "trials": 300}}
    fast = check(spec(**slo), _with_recovery(10.0), scenarios=scenarios)
    assert fast.verdict == "pass", fast.reasons
    assert fast.projection.goodput > 0.98
    slow = check(spec(**slo), _with_recovery(4 * 3600.0), scenarios=scenarios)  # R = 4 h
    assert slow.verdict == "fail"
    assert "bloom-176b would run at" in slow.reasons[-1]


def test_cadence_slo_from_save_events():
    rows = with_saves(prelude()) + [(T_FAULT, "fault.confirmed"), (T_FAULT + 0.2, "detect")]
    rows += steps(26, 40, T_FAULT + 0.5)
    rows.append((T_FAULT + 5, "observe.end"))
    history = History.build(rows)
    tight = check(spec(cadence={"mtbf": "168h"}), history)
    c = next(s for s in tight.slos if s.name == "cadence")
    assert c.status == "fail"  # saves every 2.5 s; Daly's optimum for C = 0.01 s, M = 1 week is ~110 s
    assert tight.cadence.daly_s == pytest.approx(110, rel=0.02)
    loose = check(spec(cadence={"mtbf": "168h", "max_ratio": 100}), history)
    assert next(s for s in loose.slos if s.name == "cadence").status == "pass"


def test_store_records_and_finds_the_last_passing_runs_as_baseline(tmp_path):
    with Store(tmp_path / "drills.db") as store:
        def payload(verdict, ttfs):
            return {"drill": "kill-rank", "cluster": "local", "job": "reference", "verdict": verdict,
                    "measurements": {"time_to_first_step": ttfs, "time_to_detect": 0.2}}
        first = store.record(payload("pass", 6.0), "r1")
        second = store.record(payload("pass", 6.5), "r2")
        store.record(payload("fail", None), "r3")
        base = store.baseline("kill-rank", "local", "reference")
        assert base.runs == [second, first] and base.values("time_to_first_step") == [6.5, 6.0]
        assert store.baseline("kill-rank", "local", "reference", runs=1).runs == [second]
        assert store.baseline("kill-rank", "local", "other") is None
        assert [r["verdict"] for r in store.runs("kill-rank")] == ["fail", "pass", "pass"]
        assert Baseline.from_json(base.to_json()).values("time_to_detect") == [0.2, 0.2]


def test_ledger_partitions_the_window_when_steps_run_faster_than_the_baseline():
    """The case that printed `other -0.09 s` (#13): more distinct steps in the window than
    baseline step times fit in it."""
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 0.5, "detect"), (T_FAULT + 1.0, "restart")]
    rows += steps(26, 60, T_FAULT + 2.0, dt=0.1)  # 0.1 s steps against a 0.25 s baseline
    rows += [(T_FAULT + 6.0, "ckpt.save", {"step": 50, "seconds": 0.3}), (T_FAULT + 6.0, "observe.end")]
    history = History.build(rows)
    led = ledger(history, measure(history))
    cats = led.categories()
    assert min(cats.values()) >= 0 and sum(cats.values()) == pytest.approx(led.wall_s, abs=1e-9), cats


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    given = None

if given is not None:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.floats(0.02, 1.0), min_size=8, max_size=60), st.floats(0.0, 5.0), st.floats(0.0, 3.0),
           st.integers(0, 30), st.booleans())
    def test_no_ledger_category_is_negative_and_they_sum_to_the_window(dts, detect_after, save_s, rewind, slow):
        rows, t, n = [], BASE, 0
        for dt in dts[:6]:
            t, n = t + dt, n + 1
            rows.append((t, "step", {"n": n, "dt": dt}))
        rows.insert(4, (rows[3][0] + 0.001, "steady", {"baseline_step_s": 0.25, "step": 4}))
        t_fault = t + 0.01
        rows += [(t_fault, "fault.confirmed", {"expects": "slow" if slow else "crash"}),
                 (t_fault + detect_after, "detect")]
        n = max(0, n - rewind)
        for dt in dts[6:]:
            t, n = t + dt, n + 1
            rows.append((t + detect_after, "step", {"n": n, "dt": dt}))
        rows += [(t + detect_after, "ckpt.save", {"step": n, "seconds": save_s}), (t + detect_after + 0.5, "observe.end")]
        history = History.build(sorted(rows, key=lambda r: r[0]))
        led = ledger(history, measure(history))
        if led is None:
            return
        cats = led.categories()
        assert min(cats.values()) >= 0, cats
        assert sum(cats.values()) == pytest.approx(led.wall_s, abs=1e-9), cats


class _Reading:
    """Measurements that note which fields a judge read."""

    def __init__(self, m):
        object.__setattr__(self, "_m", m)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._m, name)


def test_measurements_come_in_families_and_each_judge_reads_only_its_own():
    from drillbit.judging.checks.attribution import Attribution
    from drillbit.judging.checks.recovery import FAMILIES, Measurements
    from drillbit.judging.checks.witness import DamagedRestore
    from drillbit.judging.checks.slo import JUDGES, Judging
    from drillbit.spec.models import SLO

    owners = {}
    for family in FAMILIES:
        for name in family.model_fields:
            assert name not in owners, f"{name} in {owners.get(name)} and {family.__name__}"
            owners[name] = family
    assert set(owners) == set(Measurements.model_fields)  # every figure in exactly one family
    assert list(Measurements.model_dump(Measurements())) == list(owners)  # reported family by family
    slo = SLO.model_validate({
        "detect_within": "5s", "restart_within": "10s", "restore_within": "15s", "first_step_within": "20s",
        "max_lost_steps": 5, "goodput_min": 0.5, "straggler_within": "30s", "attribution": "exact",
        "requeue_within": "60s", "restore_tier": {"max_steps_behind_best": 0}, "rerun_avoids_failed_node": True,
        "recover_or_escalate_within": "90s", "limits": {"restarts": {"max": 1}}, "regression": {"time_to_detect": 0.2}})
    m = Measurements(t_fault=100.0, observed_s=120.0, time_to_detect=1.0, time_to_restart=2.0, time_to_restore=3.0,
                     time_to_first_step=4.0, step_at_fault=20, restored_step=10, lost_steps=10, restarts=1,
                     goodput=0.6, expects="slow", target_ranks=[1], straggler_rank=1, time_to_straggler=3.0,
                     straggler_correct=True, time_to_requeue=5.0, failed_nodes=["n1"], rerun_nodes=["n2"],
                     rerun_on_failed_node=False, best_available_step=10, steps_behind_best=0, restored_from="local",
                     crash_point="create", crashed_complete=False, restored_incomplete=False,
                     fell_back_further_than_needed=False,
                     damaged_restore=DamagedRestore(checkpoint="/c/step_10", step=10, loaded=True, resumed=True,
                                                    witnesses=[], why="read after the damage"),
                     attribution=Attribution(hurt=[1], blamed=[1], correct=True))
    for judge, families in JUDGES:
        reading = _Reading(m)
        judge(Judging(slo=slo, m=reading, watched=120.0, baseline=None))
        allowed = {n for f in families for n in f.model_fields}
        read = reading.read & set(Measurements.model_fields)
        assert read <= allowed, f"{judge.__name__} reads {sorted(read - allowed)} outside {families}"
