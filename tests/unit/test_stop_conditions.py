"""abort.when's logic on a fake Prometheus (the real one is in
tests/integration/test_prometheus.py): a condition must hold for its ``for``, a NaN never
holds, an unreadable condition stops the drill after 30 s, and one is refused before the drill
when it cannot be read at all."""
from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from drillbit.core.errors import ConfigError
from drillbit.core.history import History
from drillbit.loop import stop
from drillbit.judging.probes.prometheus import PrometheusError
from drillbit.spec.models import Abort, StopCondition


def watch(monkeypatch, answers, **cond):
    """A StopWatch whose queries answer from ``answers`` in turn (a value list, or an exception)."""
    it = iter(answers)

    def fake(url, expr, timeout=10.0):
        a = next(it)
        if isinstance(a, Exception):
            raise a
        return [({"__name__": "up", "job": "train", "instance": "h:1"}, v) for v in a]

    monkeypatch.setattr(stop, "query", fake)
    return stop.StopWatch([StopCondition.model_validate({"prometheus": "up", **cond})], "http://p", 1.0,
                          History(None))


def test_a_condition_must_hold_for_its_for(monkeypatch):
    w = watch(monkeypatch, [[0.0], [0.0], [1.0], [0.0], [0.0]], below=1, **{"for": "10s"})
    assert w.check_once(now=100) is None and w.check_once(now=105) is None
    assert w.check_once(now=108) is None  # it stopped holding: the clock starts again
    assert w.check_once(now=110) is None
    fired = w.check_once(now=121)
    assert fired == 'stop condition \'up below 1 for 10 s\' held: up{instance="h:1",job="train"} was 0 for 11 s'
    assert w.fired == fired


def test_the_worst_series_is_named_and_nan_never_holds(monkeypatch):
    w = watch(monkeypatch, [[math.nan], [3.0, 9.0, 5.0]], above=4, name="loss")
    assert w.check_once(now=1) is None
    assert w.check_once(now=2).endswith("was 9")


def test_an_unreadable_condition_stops_the_drill_after_30_s(monkeypatch):
    err = PrometheusError("http://p: Connection refused")
    w = watch(monkeypatch, [err, err, [5.0], err, err], above=10)
    assert w.check_once(now=0) is None and w.check_once(now=20) is None
    assert w.check_once(now=25) is None  # read again: the count starts over
    assert w.check_once(now=26) is None
    assert "could not be read for 30 s: http://p: Connection refused" in w.check_once(now=56)


def test_a_condition_that_cannot_be_read_before_the_drill_is_a_config_error(monkeypatch):
    w = watch(monkeypatch, [PrometheusError("'up[': HTTP 400 parse error")], above=1)
    with pytest.raises(ConfigError, match="stop conditions cannot be read.*parse error"):
        w.check_ready()


@pytest.mark.parametrize("cond", [{"prometheus": "up"}, {"prometheus": "up", "above": 1, "below": 0}])
def test_a_condition_needs_exactly_one_threshold(cond):
    with pytest.raises(ValidationError, match="above: X or below: X"):
        Abort.model_validate({"when": [cond]})


def test_a_condition_goes_live_only_once_it_read_healthy_after_the_steady_state(monkeypatch):
    """Prometheus' up of an endpoint not yet listening is 0, and before the first scrape there is
    no series at all: readings before the job's steady state are the job starting (seen under
    load: a brake on min(up) < 1 aborted the drill before the fault). After it, a holding reading
    (a stale failed scrape) waits; the first that does not hold makes the brake live."""
    w = watch(monkeypatch, [[], [0.0], [0.0], [1.0], [0.0]], below=1)
    w.counting = False  # as the runner makes it until the steady state
    assert w.not_live() == ["up below 1"]
    assert w.check_once(now=0) is None and w.check_once(now=1) is None and w.not_live()
    w.counting = True
    assert w.check_once(now=2) is None and w.fired is None and w.not_live()  # stale: still starting
    assert w.check_once(now=3) is None and w.not_live() == []
    assert w.check_once(now=4) == "stop condition 'up below 1' held: up{instance=\"h:1\",job=\"train\"} was 0"
    assert [e.kind for e in w.history].count("stop.live") == 1


def test_a_brake_on_a_series_that_exists_only_when_something_goes_wrong_is_live_when_empty(monkeypatch):
    """increase(nccl_timeouts_total[1m]) > 0 answers nothing while all is well: that is healthy."""
    w = watch(monkeypatch, [[], [2.0]], above=0)
    assert w.check_once(now=1) is None and w.not_live() == []
    assert w.check_once(now=2).endswith("was 2")


def test_no_fault_is_injected_while_a_brake_has_never_read_healthy(monkeypatch):
    from drillbit.loop.runner import Aborted, DrillRunner as Runner

    w = watch(monkeypatch, [], below=1)  # never polled: never live
    runner = Runner.__new__(Runner)
    runner.stopwatch = w
    runner.tick = lambda delay=0.1: None
    with pytest.raises(Aborted, match="'up below 1' held since the steady state and never read healthy in the 0.2 s "
                                      "before the fault, so it could not brake the drill: nothing was injected"):
        runner._await_live_brakes(limit_s=0.2)
