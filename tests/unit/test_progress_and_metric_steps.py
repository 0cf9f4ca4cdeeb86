"""Steps seen several at a time: the same step on every rank's line, or every rank's series in
one Prometheus scrape. Steady state counts steps that grew, the baseline is one sight of a
larger step to the next, and a step read from a metric carries the look before it changed
(``since``), so that an old worker's last steps are never taken for the restart's first."""
from __future__ import annotations

from drillbit.core.history import History
from drillbit.loop.watch import Progress
from drillbit.judging.probes import prometheus as prom
from drillbit.spec.config import PrometheusSignal


def progress_of(steps: list[tuple[float, int]]) -> Progress:
    history = History(None)
    progress = Progress(history, lambda delay: None)
    for t, n in steps:
        history.record("probe:progress", "step", t=t, n=n)
    return progress


def test_every_ranks_line_of_one_step_is_one_step():
    p = progress_of([(0.0, 1), (0.01, 1), (0.5, 2), (0.51, 2), (1.0, 3), (1.01, 3), (1.5, 4), (1.52, 4)])
    assert p.advances() == 3
    baseline, newest = p.baseline(3)
    assert abs(baseline - 0.49) < 0.011 and newest == 4


def test_a_scrape_of_every_rank_at_once_is_one_sight():
    # four ranks' series, each at its own step, read at the same instant, once a second
    p = progress_of([(t, n + r) for t, n in ((10.0, 14), (11.0, 21), (12.0, 28)) for r in range(4)])
    assert p.advances() == 2
    assert p.baseline(2)[0] == 1.0


def test_a_metric_step_names_the_look_before_it_changed(monkeypatch):
    answers = iter([
        [({"rank": "0"}, 17.0, 100.0)],
        [({"rank": "0"}, 23.0, 101.0)],   # the old worker, still stepping: changed after 100.0
        [],                               # its series gone (the process died)
        [({"rank": "0"}, 3.0, 103.0)],    # the restarted worker: changed after 102.0, when it was seen absent
    ])
    monkeypatch.setattr(prom, "query_timed", lambda url, expr, timeout=10.0: next(answers))
    history = History(None)
    probe = prom.PrometheusProbe(history, "http://p", [PrometheusSignal(query="train_step", kind="step")])
    for now in (100.0, 101.0, 102.0, 103.0):
        probe.poll_once(now)
    steps = [(e.t, e.rank, e.data["n"], e.data.get("since")) for e in history.of("step")]
    assert steps == [(100.0, 0, 17, None), (101.0, 0, 23, 100.0), (103.0, 0, 3, 102.0)]


def test_a_rising_counter_is_a_detection_and_a_series_above_zero_a_straggler(monkeypatch):
    answers = iter([
        [({"rank": "0"}, 0.0, 10.0)], [({"rank": "1"}, 0.0, 10.0), ({"rank": "3"}, 0.0, 10.0)],
        [({"rank": "0"}, 0.0, 11.0)], [({"rank": "1"}, 0.0, 11.0), ({"rank": "3"}, 1.0, 11.0)],
        [({"rank": "0"}, 2.0, 12.0)], [({"rank": "1"}, 0.0, 12.0), ({"rank": "3"}, 1.0, 12.0)],
    ])
    monkeypatch.setattr(prom, "query_timed", lambda url, expr, timeout=10.0: next(answers))
    history = History(None)
    probe = prom.PrometheusProbe(history, "http://p", [
        PrometheusSignal(query="sum by (rank) (watchdog_timeouts_total)", kind="detect"),
        PrometheusSignal(query="straggler_flag", kind="straggler")])
    for now in (10.0, 11.0, 12.0):
        probe.poll_once(now)
    assert [(e.t, e.rank, e.data["value"]) for e in history.of("detect")] == [(12.0, 0, 2.0)]
    assert [(e.t, e.rank) for e in history.of("straggler")] == [(11.0, 3)]  # named once, not at every look
