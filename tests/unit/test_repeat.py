"""Repeats judged as a whole: statistics per measurement, every run must pass (or
min_pass_rate), each failing run named with its reason; an error still wins the code."""
from __future__ import annotations

from drillbit.runs.repeat import aggregate, p90, summary_markdown
from drillbit.judging.report import junit
from drillbit.runs.suite import repeated_payload


def run(verdict: str, detect: float, reasons=(), error_kind=None) -> dict:
    return {"drill": "kill-rank", "cluster": "local", "job": "reference", "verdict": verdict,
            "reasons": list(reasons), "error": "boom" if error_kind else None, "error_kind": error_kind,
            "measurements": {"time_to_detect": detect, "lost_steps": 5, "goodput": None}}


def test_statistics_and_a_failing_run_named():
    runs = [run("pass", d) for d in (0.2, 0.5, 0.3, 0.9)] + [run("fail", 2.0, ["detected after 2.0 s; the SLO says 1 s"])]
    agg = aggregate("kill-rank", runs, [f"r{i}" for i in range(5)])
    s = agg["stats"]["time_to_detect"]
    assert (s["median"], s["p90"], s["min"], s["max"], s["n"]) == (0.5, 2.0, 0.2, 2.0, 5)
    assert "goodput" not in agg["stats"]  # never measured
    assert agg["verdict"] == "fail" and agg["exit_code"] == 1 and agg["passes"] == 4
    assert agg["reasons"][0] == "4 of 5 runs passed; the drill needs every run to pass"
    assert agg["reasons"][1] == "run 5: fail: detected after 2.0 s; the SLO says 1 s"
    assert agg["failing"][0]["run_dir"] == "r4"
    assert "| time_to_detect | 0.5 | 2 | 0.2 | 2 | 5 |" in summary_markdown(agg)


def test_min_pass_rate_tolerates_some_failures_but_not_errors():
    runs = [run("pass", 0.2)] * 4 + [run("fail", 2.0, ["slow"])]
    assert aggregate("kill-rank", runs, ["r"] * 5, min_pass_rate=0.8)["verdict"] == "pass"
    assert aggregate("kill-rank", runs, ["r"] * 5, min_pass_rate=0.9)["verdict"] == "fail"
    broken = runs[:4] + [run("aborted", 0.2, error_kind="config")]
    assert aggregate("kill-rank", broken, ["r"] * 5, min_pass_rate=0.5)["exit_code"] == 2
    assert p90([1.0]) == 1.0 and p90(list(range(1, 11))) == 9


def test_a_repeated_drill_is_one_row_of_a_suite_and_of_junit():
    agg = aggregate("kill-rank", [run("pass", 0.2), run("pass", 0.4)], ["a", "b"])
    row = repeated_payload(agg)
    assert row["drill"] == "kill-rank x2" and abs(row["measurements"]["time_to_detect"] - 0.3) < 1e-9
    assert 'name="kill-rank x2"' in junit.to_xml("drillbit.s", [row])


def regressed(verdict="fail"):
    return {"drill": "kill-rank", "verdict": verdict, "error": None,
            "reasons": ["time_to_detect regressed: 5 against a baseline median of 0.2 (+2400%), beyond 0.95 — …"]
            if verdict == "fail" else [],
            "slos": [{"name": "regression.time_to_detect", "measurement": "time_to_detect",
                      "status": "fail" if verdict == "fail" else "pass"}]}


def test_a_suspected_regression_is_confirmed_or_cleared_by_re_runs():
    from drillbit.runs.suite import confirm_regression, suspected

    assert suspected(regressed()) and not suspected(regressed("pass"))
    other = {**regressed(), "slos": [*regressed()["slos"], {"name": "detect_within", "measurement": "time_to_detect",
                                                            "status": "fail"}]}
    assert not suspected(other)  # an SLO failed too: that is no suspicion, it is a failure
    runs = iter([regressed(), regressed("pass")])
    cleared = confirm_regression(regressed(), 2, lambda: next(runs))
    assert cleared["verdict"] == "pass"
    assert cleared["regression_check"].startswith("suspected regression, not confirmed after 2 re-run(s)")
    confirmed = confirm_regression(regressed(), 2, lambda: regressed())
    assert confirmed["verdict"] == "fail"
    assert confirmed["reasons"][0].startswith("confirmed: regressed in the first run and in all 2 re-run(s)")


def stuck(reasons=("detected after 0.4 s, restarted 2 times but no restart ever produced a step",)) -> dict:
    """A run whose restart never stepped again (a plain Trainer job under torchrun, torch 2.13)."""
    return {"drill": "kill-rank", "cluster": "local", "job": "hf", "verdict": "fail", "reasons": list(reasons),
            "error": None, "error_kind": None,
            "measurements": {"expects": "crash", "time_to_detect": 0.4, "time_to_first_step": None,
                             "time_to_escalate": None, "lost_steps": None}}


def test_a_restart_that_never_came_back_fails_whatever_the_pass_rate():
    runs = [run("pass", 0.2)] * 4 + [stuck(["no restart ever produced a step", "no first step within 100 s",
                                            "where the job was stuck: init_process_group",
                                            "the restart carries the mark of torchrun-shared-store: …"])]
    agg = aggregate("kill-rank", runs, ["r"] * 5, min_pass_rate=0.8)
    assert agg["verdict"] == "fail" and agg["exit_code"] == 1
    assert agg["never_recovered"] == {"runs": [5], "rate": 0.2}
    assert any("never stepped again after the fault in 1 of 5 runs (20%: run 5)" in r for r in agg["reasons"])
    assert any(r.startswith("run 5: fail:") and "torchrun-shared-store" in r for r in agg["reasons"])
    assert "| never stepped again | 1 of 5 |" in summary_markdown(agg)


def test_a_slow_figure_within_the_pass_rate_still_passes_and_counts_no_lost_recovery():
    slow = run("fail", 2.0, ["detected after 2.0 s; the SLO says 1 s"])
    slow["measurements"].update({"expects": "crash", "time_to_first_step": 5.0})
    agg = aggregate("kill-rank", [run("pass", 0.2)] * 4 + [slow], ["r"] * 5, min_pass_rate=0.8)
    assert agg["verdict"] == "pass" and agg["never_recovered"]["runs"] == []
