"""Checkpoint cadence and the fleet simulator against the published numbers (Daly 2006; BLOOM's chronicles;
OPT-175B's logbook)."""
from __future__ import annotations

import math

import pytest

from drillbit.judging.fleet.cadence import cadence, daly, daly_first, expected_goodput, young
from drillbit.judging.fleet.simulate import Scenario, load_scenario, params_for, simulate

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0


@pytest.mark.parametrize("mtbf,expected_min", [(24 * HOUR, 116.7), (6 * HOUR, 56.7), (15 * MIN, 9.1)])
def test_daly_published_checks(mtbf, expected_min):
    # Daly 2006: C = 5 min
    assert daly(5 * MIN, mtbf) / MIN == pytest.approx(expected_min, abs=0.05)


def test_bloom_young_interval():
    # BLOOM: C = 40 s, M = 1 week -> tau = 1.93 h
    assert young(40, 7 * DAY) / HOUR == pytest.approx(1.93, abs=0.005)


def test_daly_limits():
    assert daly_first(5, 1000) == pytest.approx(math.sqrt(2 * 5 * 1000) - 5)
    assert daly(100, 40) == 40  # C >= 2M: checkpoint once per MTBF


def test_bloom_analytic_goodput():
    # C = 40 s, tau = 3 h, M = 1 week, "lose at most 3 hours" = tau/2 + D + R -> ~97.8%
    assert expected_goodput(40, 3 * HOUR, 7 * DAY, 0, 1.5 * HOUR) == pytest.approx(0.978, abs=0.0005)


def test_cadence_report_compares_actual_interval():
    c = cadence(40, 7 * DAY, actual_interval_s=3 * HOUR)
    assert c.ratio_to_optimum == pytest.approx(3 * HOUR / c.daly_s)
    assert c.actual_goodput < c.expected_goodput  # the optimum is better
    with pytest.raises(ValueError):
        cadence(0, DAY)


def test_simulator_is_seeded_and_deterministic():
    sc = load_scenario("bloom-176b")
    p = params_for(sc)
    a, b = simulate(sc, p, trials=200, seed=7), simulate(sc, p, trials=200, seed=7)
    assert a == b
    assert simulate(sc, p, trials=200, seed=8).goodput_mean != a.goodput_mean


def test_llama3_interruptions_match_the_logbook():
    sc = load_scenario("llama3-405b")
    assert sc.rate() == pytest.approx(4.7e-4, rel=0.02)  # Llama 3 (arXiv 2407.21783): ~4.7e-4 per GPU-day
    res = simulate(sc, params_for(sc, save_s=60, interval_s=HOUR, detect_s=300, restart_s=600), trials=1000, seed=1)
    # 419 unexpected in 54 days; the mean of 1000 Poisson(419) trials has sd ~0.65
    assert res.interruptions_mean == pytest.approx(419, abs=3)
    assert res.interruptions_p5 < 419 < res.interruptions_p95
    shares = res.gpu_hours_lost_by_cause
    assert max(shares, key=shares.get) == "faulty-gpu"  # 148 of 419
    assert shares["faulty-gpu"] / sum(shares.values()) == pytest.approx(148 / 419, abs=0.02)


def test_opt_host_losses_per_day():
    sc = load_scenario("opt-175b")
    res = simulate(sc, params_for(sc, save_s=600, interval_s=3 * HOUR, detect_s=600, restart_s=1800), trials=1000)
    # "~2 machines go down every day" on ~128 hosts, plus the one 5-host burst in 33 days
    assert 2.0 <= res.host_losses_per_day <= 2.0 + 5 / 33 + 0.05
    assert sc.rate() == pytest.approx(90 / (1024 * 33), rel=0.01)


def test_bloom_simulated_goodput_matches_analytic():
    sc = load_scenario("bloom-176b")
    res = simulate(sc, params_for(sc), trials=2000, seed=3)
    analytic = expected_goodput(40, 3 * HOUR, 1 / (3.72e-4 * 384) * DAY, 0, 1.5 * HOUR)
    assert analytic == pytest.approx(0.978, abs=0.001)
    assert res.goodput_mean == pytest.approx(analytic, abs=0.002)


def _toy(spares: int, delay: str) -> Scenario:
    return Scenario.model_validate({
        "name": "toy", "gpus": 800, "days": 30, "rate_per_gpu_day": 1e-3,
        "causes": {"gpu": {"count": 1, "replace": True}},
        "checkpoint": {"save": "60s", "interval": "1h"}, "recovery": {"detect": "60s", "restart": "10m"},
        "spares": {"hosts": spares, "replacement_delay": delay},
    })


def test_spare_pool_exhaustion_costs_waits():
    tight = simulate(_toy(1, "24h"), params_for(_toy(1, "24h")), trials=200)
    roomy = simulate(_toy(50, "24h"), params_for(_toy(50, "24h")), trials=200)
    assert tight.spare_wait_hours_mean > 10
    assert roomy.spare_wait_hours_mean == 0
    assert tight.goodput_p50 < roomy.goodput_p50


def test_missing_parameters_are_named():
    with pytest.raises(ValueError, match="--save-seconds"):
        params_for(load_scenario("llama3-405b"))
