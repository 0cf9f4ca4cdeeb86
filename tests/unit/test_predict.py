"""Detection predicted from a job's declared timeouts (judging/checks/predict.py): the first timeout
that can see the fault, the SLOs it decides, the orderings that cannot work, and what a
dry run prints."""
from __future__ import annotations

from drillbit.judging.checks.predict import predict, warnings
from drillbit.faults import get as get_fault
from drillbit.spec.config import JobTimeouts
from drillbit.spec.models import SLO

SLO_ = SLO(detect_within=30.0, first_step_within=60.0)


def of(fault: str, timeouts: JobTimeouts | None, slo: SLO = SLO_):
    cls = get_fault(fault)
    return predict(cls.seen_by(), cls.verb, timeouts, slo)


def test_a_stopped_rank_is_seen_first_by_the_fastest_timeout_that_can_see_it():
    p = of("hang-collective", JobTimeouts(watchdog=10, collective=1800, monitor_interval=0.5))
    assert (p.detect_s, p.by) == (10, "watchdog")  # the launcher's poll sees no dead worker: it is alive
    assert [(s.name, s.status) for s in p.slos] == [("detect_within", "pass")]
    liveness = of("hang-collective", JobTimeouts(heartbeat=5, collective=600))
    assert (liveness.detect_s, liveness.by) == (5, "heartbeat")  # a stopped process stops heartbeating too


def test_a_rank_waiting_on_data_is_not_seen_by_a_heartbeat():
    p = of("dataloader-hang", JobTimeouts(heartbeat=5, collective=600))
    assert (p.detect_s, p.by) == (600, "collective")
    assert {(s.name, s.status) for s in p.slos} == {("detect_within", "fail"), ("first_step_within", "fail")}


def test_without_a_watchdog_the_collectives_default_decides():
    p = of("hang-collective", JobTimeouts(collective=1800, monitor_interval=0.5))
    assert p.by == "collective" and p.slos[0].status == "fail"


def test_a_killed_rank_is_seen_at_the_launchers_poll():
    p = of("kill-rank", JobTimeouts(monitor_interval=0.5, collective=1800))
    assert (p.detect_s, p.by) == (0.5, "monitor_interval")


def test_what_is_not_declared_is_not_guessed():
    assert of("kill-rank", None) is None  # no timeouts: no prediction
    p = of("kill-rank", JobTimeouts(watchdog=10))
    assert p.detect_s is None and not p.never and "declares none of them" in p.why and p.slos == []


def test_a_slowdown_trips_no_timeout():
    p = of("slow-rank", JobTimeouts(watchdog=10, collective=600), SLO(detect_within=30.0))
    assert p.never and p.detect_s is None and p.slos[0].status == "fail"


def test_a_watchdog_slower_than_the_collective_is_a_warning():
    assert warnings(JobTimeouts(watchdog=900, collective=600))
    assert not warnings(JobTimeouts(watchdog=10, collective=600))
    assert of("kill-rank", JobTimeouts(watchdog=900, collective=600, monitor_interval=1)).warnings


def test_the_dry_run_prints_the_prediction():
    from drillbit.runs.session import plan_text, resolve

    text = plan_text(resolve("stall-nccl", job="reference-nowatchdog", cluster="local-process"))
    assert "predicted detected within 1800 s by collective" in text
    assert "detect_within (60 s) will fail" in text


def test_a_process_group_timeout_above_the_train_timeout_is_a_warning():
    from drillbit.judging.checks.predict import warnings
    from drillbit.spec.config import BUILTIN_JOBS, JobTimeouts

    [note] = warnings(JobTimeouts(collective=1800, train=60))
    assert "process group's timeout (1800 s) is above the train timeout (60 s)" in note
    assert warnings(JobTimeouts(collective=10, train=10)) == []
    assert warnings(BUILTIN_JOBS["torchft"].timeouts) == []  # the built-in job sets both from --timeout
