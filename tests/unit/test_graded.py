"""A graded sweep's arithmetic (#58): levels as users write them, the detection rate and its
Wilson interval, what one repeat's result.json says, and the reach, fed the inputs that break
arithmetic (NaN, inf, empty, out of order, a repeat that reached no verdict)."""
from __future__ import annotations

import math

import pytest

from drillbit.core.errors import ConfigError
from drillbit.runs.graded import build, curve_svg, outcome, page, parse_levels, wilson


def test_levels_read_as_users_write_them_in_the_order_of_the_axis():
    name, levels = parse_levels("slowdown=10%,1%,2.5%,0.5%")
    assert name == "slowdown"
    assert [lv.label for lv in levels] == ["0.5%", "1%", "2.5%", "10%"]
    assert [lv.value for lv in levels] == pytest.approx([0.005, 0.01, 0.025, 0.1])
    _, stalls = parse_levels("duration=2m,5s,500ms,15")
    assert [lv.value for lv in stalls] == [0.5, 5.0, 15, 120.0]
    assert isinstance(stalls[2].value, int)  # a bare integer stays one (a count, a port)


@pytest.mark.parametrize("text", ["slowdown", "Slow-down=1%", "slowdown=", "slowdown=abc,1%", "slowdown=1%,1%",
                                  "slowdown=nan", "slowdown=inf%", "slowdown=1e999"])
def test_a_wrong_param_is_a_clear_error(text):
    with pytest.raises(ConfigError, match="--param"):
        parse_levels(text)


def test_every_mistake_at_once():
    with pytest.raises(ConfigError) as err:
        parse_levels("slowdown=x,y")
    assert "'x'" in str(err.value) and "'y'" in str(err.value)


def test_the_wilson_interval_says_how_little_five_repeats_tell():
    lo, hi = wilson(5, 5)
    assert hi == 1.0 and 0.5 < lo < 0.6  # 5 of 5 cannot rule out a detector that misses 1 in 2.3
    lo, hi = wilson(0, 5)
    assert lo == 0.0 and 0.4 < hi < 0.5
    assert wilson(0, 0) is None


def payload(*, detected: float | None, correct: bool | None = True, false: list[int] | None = None,
            verdict: str = "pass", exit_code: int = 0, confirmed: bool = True, tax: float | None = 0.05,
            fault: str = "slow-rank") -> dict:
    return {"verdict": verdict, "exit_code": exit_code,
            "fault": {"type": fault, "confirmed": confirmed},
            "measurements": {"time_to_straggler": detected, "time_to_detect": detected, "straggler_correct": correct,
                             "straggler_rank": 1 if correct else 0, "fleet_tax": tax, "observed_s": 100.0,
                             "baseline_step_s": 0.1, "attribution": {"false_blames": false or []}}}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_time_to_detect_that_is_not_a_number_is_not_a_detection(bad):
    o = outcome(payload(detected=bad))
    assert o["counts"] and not o["detected"] and o["ttd"] is None


def test_a_repeat_that_reached_no_verdict_counts_in_no_rate():
    assert not outcome(payload(detected=3.0, verdict="aborted", exit_code=4))["counts"]
    assert not outcome(payload(detected=3.0, exit_code=2, verdict="aborted"))["counts"]
    assert not outcome(payload(detected=None, confirmed=False))["counts"]


def test_a_straggler_named_wrong_is_a_false_blame():
    o = outcome(payload(detected=2.0, correct=False))
    assert o["detected"] and o["false_blames"] == 1 and o["right"] is False
    assert outcome(payload(detected=2.0, false=[0, 2]))["false_blames"] == 2


def levels_report(rows: dict[str, list[dict]]) -> dict:
    name, levels = parse_levels("slowdown=" + ",".join(rows))
    return build("slow-rank", "local", "reference", name, levels,
                 {k: [outcome(p) for p in v] for k, v in rows.items()}, repeats=5)


def test_the_reach_is_the_smallest_level_from_which_every_larger_one_is_caught():
    good = [payload(detected=1.0)] * 5
    report = levels_report({"20%": good, "1%": [payload(detected=None)] * 5, "5%": good,
                            "2%": [payload(detected=1.0)] * 4 + [payload(detected=None)]})
    assert report["reach"]["level"] == "5%"
    s = {x["level"]: x for x in report["levels"]}
    assert s["2%"]["rate"] == 0.8 and s["1%"]["detected"] == 0 and s["1%"]["ttd_median"] is None
    assert s["5%"]["false_per_10k_steps"] == 0


def test_a_fluke_below_a_miss_is_no_reach_and_a_false_blame_breaks_it():
    good = [payload(detected=1.0)] * 5
    assert levels_report({"1%": good, "2%": [payload(detected=None)] * 5, "5%": good})["reach"]["level"] == "5%"
    blamed = [payload(detected=1.0)] * 4 + [payload(detected=1.0, correct=False)]
    assert levels_report({"5%": good, "10%": blamed})["reach"] is None


def test_empty_levels_and_levels_that_never_counted_draw_and_say_none():
    report = levels_report({"1%": [], "2%": [payload(detected=1.0, verdict="aborted", exit_code=4)]})
    assert report["reach"] is None
    assert all(s["rate"] is None and s["ci"] is None for s in report["levels"])
    svg = curve_svg(report)
    assert svg.startswith("<svg") and "nan" not in svg
    md = page(report).markdown()
    assert "reach: **none**" in md and "aborted" in md


def test_no_figure_in_the_report_is_a_nan():
    report = levels_report({"3%": [payload(detected=float("nan"), tax=float("inf"))] * 2,
                            "5%": [payload(detected=2.0, tax=0.1), payload(detected=4.0, tax=float("nan"))]})
    s = {x["level"]: x for x in report["levels"]}
    assert s["3%"]["fleet_tax_median"] is None and s["5%"]["fleet_tax_median"] == pytest.approx(0.1)
    assert s["5%"]["ttd_median"] == 3.0 and s["5%"]["ttd_p90"] == 4.0
    for x in report["levels"]:
        for v in x.values():
            assert not (isinstance(v, float) and not math.isfinite(v))
