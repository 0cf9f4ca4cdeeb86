"""runs/repeat.py (never_recovered, aggregate) and a repeated drill as a suite row, attacked.
Found by an adversarial review of #56's change: each test
failed at 1d98abb, unless named test_held_ (a guard that held)."""
from __future__ import annotations

import pytest

from drillbit.judging.checks.verdict import interrupted
from drillbit.runs.repeat import aggregate, never_recovered
from drillbit.runs.suite import repeated_payload


def run(verdict: str, reasons=(), error_kind=None, **m) -> dict:
    return {"drill": "kill-rank", "cluster": "local", "job": "reference", "verdict": verdict,
            "reasons": list(reasons), "error": "boom" if error_kind else None, "error_kind": error_kind,
            "measurements": {"time_to_detect": 0.3, "time_to_first_step": 5.0, "expects": "crash", **m}}


PASS = run("pass")
CTRL_C = run("aborted", ["aborted: interrupted by SIGINT"], time_to_first_step=None)


def test_R1_a_repeat_the_operator_interrupted_is_aborted_whatever_the_pass_rate():
    """drill run kill-rank --repeat 10 --min-pass-rate 0.5, Ctrl-C during run 3 (run_repeated stops
    there): aggregate sees 3 payloads, 2 passes >= ceil(0.5 * 3) and says PASS, exit 0 — for a repeat of
    10 the operator stopped after 2."""
    agg = aggregate("kill-rank", [PASS, PASS, CTRL_C], ["a", "b", "c"], min_pass_rate=0.5)
    assert (agg["verdict"], agg["exit_code"]) == ("aborted", 4), (agg["verdict"], agg["exit_code"], agg["reasons"])


def test_R2_a_suite_stops_after_a_repeated_entry_the_operator_interrupted():
    """verdict.interrupted's contract: 'The operator stopped this drill (Ctrl-C, SIGTERM): a suite, repeat
    or sweep stops too, rather than start the next drill'. A repeated entry's row (repeated_payload)
    never reads as interrupted: its reasons are 'run 3: aborted: aborted: interrupted by SIGINT', and
    run_suite goes on to the next drill after the Ctrl-C."""
    row = repeated_payload(aggregate("kill-rank", [PASS, PASS, CTRL_C], ["a", "b", "c"]))
    assert row["verdict"] == "aborted"       # held
    assert interrupted(row), row["reasons"]


def test_R3_no_run_passed_is_no_pass():
    """--min-pass-rate 0 is accepted (click.FloatRange(0, 1), SuiteEntry ge=0): every run failing on an
    SLO, or inconclusive, gives a PASS with exit 0 ('0 of 3 runs passed' is not even said)."""
    runs = [run("fail", ["detection took 9.0 s after the fault; the SLO allows 1 s"], time_to_detect=9.0),
            run("inconclusive", ["the fault could not be confirmed"]), run("fail", ["slow"])]
    agg = aggregate("kill-rank", runs, ["a", "b", "c"], min_pass_rate=0.0)
    assert agg["verdict"] != "pass" and agg["exit_code"] != 0, (agg["verdict"], agg["exit_code"], agg["reasons"])


def test_R4_a_payload_without_measurements_is_no_traceback():
    """never_recovered reads payload.get('measurements') or {}; the statistics read p['measurements'] and
    raise KeyError / AttributeError on the same payload."""
    bare = {"drill": "kill-rank", "cluster": "local", "job": "reference", "verdict": "aborted",
            "reasons": ["aborted: the job exited before steady state"], "error": None}
    for broken in (bare, {**bare, "measurements": None}):
        agg = aggregate("kill-rank", [PASS, broken], ["a", "b"])
        assert agg["verdict"] == "aborted"


# ---------------------------------------------------------------------------------------------------
# Guards that held.
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload, lost", [
    (run("fail", time_to_first_step=None), True),
    (run("fail", time_to_first_step=None, expects="slow"), False),            # fail-slow
    (run("fail", time_to_first_step=None, time_to_escalate=30.0), False),      # escalated
    (run("fail", time_to_first_step=None, expects=None), False),               # fault never took
    (run("inconclusive", time_to_first_step=None), False),
    ({"verdict": "fail"}, False),
])
def test_held_never_recovered(payload, lost):
    assert never_recovered(payload) is lost


def test_held_a_lost_recovery_fails_at_any_rate_and_errors_win():
    lost = run("fail", ["no restart ever produced a step"], time_to_first_step=None)
    agg = aggregate("kill-rank", [PASS] * 9 + [lost], ["r"] * 10, min_pass_rate=0.5)
    assert agg["verdict"] == "fail" and agg["exit_code"] == 1 and agg["never_recovered"]["rate"] == 0.1
    broken = aggregate("kill-rank", [PASS, run("fail", error_kind="harness")], ["a", "b"], min_pass_rate=0.5)
    assert broken["exit_code"] == 5
