"""Checkers driven from hand-built histories (no processes)."""
from __future__ import annotations

import pytest

from drillbit.judging.checks import check
from drillbit.judging.checks.recovery import measure
from drillbit.judging.checks.verdict import worst
from drillbit.core.history import History
from drillbit.spec.models import DrillSpec

BASE = 1000.0


def spec(**slo) -> DrillSpec:
    return DrillSpec.model_validate({
        "name": "t", "class": "fail-stop", "summary": "s",
        "fault": {"type": "kill-rank", "trigger": {"at_step": 5}},
        "slo": slo or {"detect_within": 60, "first_step_within": 180, "max_lost_steps": 20},
    })


def steps(first: int, last: int, t0: float, dt: float = 0.25) -> list[tuple]:
    return [(t0 + i * dt, "step", {"n": n}) for i, n in enumerate(range(first, last + 1))]


def prelude(until_step: int = 25) -> list[tuple]:
    rows = [(BASE, "drill.start"), (BASE + 0.1, "job.launch")]
    rows += steps(1, until_step, BASE + 5)
    rows.append((BASE + 6.5, "steady", {"baseline_step_s": 0.25}))
    return rows


T_FAULT = BASE + 5 + 24 * 0.25 + 0.1  # just after step 25


def kill_pass_history() -> History:
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20"})]
    rows += steps(21, 40, T_FAULT + 6.0)
    end = T_FAULT + 6.0 + 19 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True}), (end + 0.5, "drill.end")]
    return History.build(rows)


def test_kill_rank_measurements_and_pass():
    result = check(spec(), kill_pass_history())
    m = result.measurements
    assert result.verdict == "pass", result.reasons
    assert m.time_to_detect == pytest.approx(0.2)
    assert m.time_to_restart == pytest.approx(3.0)
    assert m.time_to_restore == pytest.approx(5.8)
    assert m.time_to_first_step == pytest.approx(6.0)
    assert (m.step_at_fault, m.restored_step, m.lost_steps) == (25, 20, 5)
    assert [s.status for s in result.slos] == ["pass", "pass", "pass"]


def test_slow_detection_fails_with_reason():
    result = check(spec(detect_within=0.1), kill_pass_history())
    assert result.verdict == "fail"
    assert any("detection took 0.2 s" in r for r in result.reasons)


def test_too_many_lost_steps_fails():
    result = check(spec(max_lost_steps=2), kill_pass_history())
    assert result.verdict == "fail"
    assert any("5 steps were lost" in r for r in result.reasons)


def test_stall_never_detected_fails_with_diagnosis():
    rows = prelude() + [(T_FAULT, "fault.confirmed", {"progress_quiet_s": 2.0}),
                        (T_FAULT + 183, "observe.end")]
    result = check(spec(detect_within=60, first_step_within=120), History.build(rows))
    assert result.verdict == "fail"
    assert result.reasons[0] == "no step for 183 s after the fault; the stall was never detected"


def test_restart_that_never_steps_fails_and_names_the_exit():
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 0.2, "detect"),
                        (T_FAULT + 3, "restart", {"attempt": 1}), (T_FAULT + 6, "restart", {"attempt": 2}),
                        (T_FAULT + 18, "job.exit", {"code": 1}), (T_FAULT + 18.1, "observe.end")]
    result = check(spec(), History.build(rows))
    assert result.verdict == "fail"
    assert "no restart ever produced a step" in result.reasons[0]
    assert "exited (code 1)" in result.reasons[0]
    first_step = next(s for s in result.slos if s.name == "first_step_within")
    assert first_step.status == "fail"
    lost = next(s for s in result.slos if s.name == "max_lost_steps")
    assert lost.status == "unknown"  # no recovery, so nothing to count


def test_in_flight_step_during_stall_confirmation_is_not_recovery():
    rows = prelude() + [(T_FAULT, "fault.confirmed", {"progress_quiet_s": 2.0}),
                        (T_FAULT + 0.05, "step", {"n": 26}), (T_FAULT + 100, "observe.end")]
    m = measure(History.build(rows))
    assert m.step_at_fault == 26
    assert m.time_to_first_step is None


def test_missing_steady_state_is_inconclusive():
    rows = [(BASE, "drill.start"), (BASE + 300, "abort", {"reason": "harness error: no steady state"})]
    result = check(spec(), History.build(rows))
    assert result.verdict == "aborted"
    assert any("never reached steady state" in r for r in result.reasons)


def test_fault_never_confirmed_is_inconclusive_never_pass():
    rows = prelude() + [(T_FAULT, "fault.inject"),
                        (T_FAULT + 10, "fault.unconfirmed", {"reason": "no evidence of effect on rank(s) [2]"})]
    result = check(spec(), History.build(rows))
    assert result.verdict == "inconclusive"
    assert "could not be confirmed" in result.reasons[0]


def test_observation_shorter_than_limit_is_unknown_not_fail():
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 10, "observe.end")]
    result = check(spec(detect_within=60), History.build(rows))
    assert result.verdict == "inconclusive"
    assert result.slos[0].status == "unknown"


def test_missing_step_signal_is_inconclusive():
    rows = [(BASE, "drill.start"), (BASE + 1, "steady", {"baseline_step_s": 0.25}),
            (BASE + 2, "fault.confirmed"), (BASE + 3, "detect"), (BASE + 200, "observe.end")]
    result = check(spec(detect_within=60), History.build(rows))
    assert result.verdict == "inconclusive"
    assert any("no step signal" in r for r in result.reasons)


def test_abort_outranks_inconclusive_and_fail_outranks_abort():
    assert worst("pass", "inconclusive", "aborted") == "aborted"
    assert worst("aborted", "fail") == "fail"
    assert worst() == "pass"
    history = kill_pass_history()
    history.record("harness", "abort", t=T_FAULT + 20, reason="interrupted by SIGINT")
    assert check(spec(), history).verdict == "aborted"


def test_checker_that_throws_is_inconclusive():
    """#46: a measurer that raises leaves its own family unknown, says so, and the others
    still measure; the drill is neither pass nor fail on a drillbit bug. Here the bug is an
    event recorded with a payload its kind does not have (a restore whose path is a list):
    it is kept as given, named by an event.invalid, and reading it typed raises."""
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 1, "restore", {"path": ["p"], "step": 10})]
    history = History.build(rows)
    [invalid] = history.of("event.invalid")
    assert invalid.data["recorded_as"] == "restore" and invalid.data["problem"].startswith("path:")
    result = check(spec(), history)
    assert result.verdict == "inconclusive"
    assert "recovery" in result.measurements.measure_errors
    assert result.measurements.measure_errors["recovery"].startswith("ValidationError")
    assert any(r.startswith("could not measure recovery (ValidationError") for r in result.reasons), result.reasons
    assert any(r.startswith("drillbit recorded 1 event(s) it cannot read: restore (event ") for r in result.reasons)
    assert result.measurements.t_fault == T_FAULT  # the fault's own family was measured


def test_a_restore_whose_step_cannot_be_read_is_a_restore_of_an_unknown_step():
    """A number the job's line gives where one is optional reads as unknown, not as an error:
    the restore still happened (its time counts), and its step is not known."""
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 1, "restore", {"path": "p", "step": "ten"})]
    history = History.build(rows)
    assert not history.of("event.invalid") and history.first("restore").data == {"path": "p", "step": None}
    m = check(spec(), history).measurements
    assert m.time_to_restore == pytest.approx(1.0) and m.restored_step is None and not m.measure_errors


def test_a_measurer_bug_is_never_a_pass_or_a_fail_and_hides_no_other_family(monkeypatch):
    from drillbit.judging.checks import recovery

    def broken(m, w):
        m.attribution = None
        raise RuntimeError("a bug in one family")

    monkeypatch.setattr(recovery, "MEASURERS", tuple(
        recovery.Measurer(x.name, broken, x.reads, x.writes, x.slow, x.poll) if x.name == "attribution" else x
        for x in recovery.MEASURERS))
    result = check(spec(), kill_pass_history())
    assert result.verdict == "inconclusive", result.reasons
    m = result.measurements
    assert m.measure_errors == {"attribution": "RuntimeError: a bug in one family"}
    assert m.time_to_first_step is not None and m.restored_step is not None  # the rest was measured


def test_polling_measures_only_what_the_stop_test_reads():
    from drillbit.judging.checks.recovery import MEASURERS, measure

    full, polled = measure(kill_pass_history()), measure(kill_pass_history(), poll=True)
    assert polled.time_to_first_step == full.time_to_first_step and polled.steps_after_recovery == full.steps_after_recovery
    assert {x.name for x in MEASURERS if x.poll} == {"fault", "restarts", "recovery", "fail-slow"}


def test_goodput_counts_recomputed_steps_once():
    m = check(spec(), kill_pass_history()).measurements
    # steady lands with step 7 (t=BASE+6.5); new steps are 8..40 = 33 distinct: the
    # replayed 21..25 count once
    window = (T_FAULT + 6.0 + 19 * 0.25 + 0.1) - (BASE + 6.5)
    assert m.goodput == pytest.approx(33 * 0.25 / window)


def test_events_after_observe_end_do_not_count():
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 100, "observe.end"),
                        (T_FAULT + 101, "detect")]
    assert measure(History.build(rows)).time_to_detect is None


def test_a_step_number_going_back_is_a_restart_even_unannounced():
    """A job whose supervisor printed nothing drillbit reads, restarted from scratch: its
    steps start again at 1. Before, that read as 'progress resumed, 0 steps lost'."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed")]
    rows += steps(1, 12, T_FAULT + 4)
    m = measure(History.build(rows))
    assert m.restarts == 1 and m.first_step == 1 and m.restored_step == 0
    assert m.lost_steps == 25 and m.time_to_first_step == pytest.approx(4.0)
    result = check(spec(max_lost_steps=5), History.build(rows))
    assert result.verdict == "fail"


def test_lost_steps_name_the_save_the_restart_did_not_load():
    """Ray Train 2.60 commits a reported checkpoint only at its controller's next poll of every
    worker (2 s apart): a rank killed between its report and that poll takes the checkpoint with
    it, and the restart starts over. The job said it saved step 20; the verdict says so."""
    rows = prelude()
    rows.insert(-1, (BASE + 5 + 19 * 0.25 + 0.01, "ckpt.save", {"step": "20", "path": "ray-checkpoint-20"}))
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"), (T_FAULT + 1, "restart", {"attempt": 1})]
    rows += steps(1, 8, T_FAULT + 4)
    result = check(spec(max_lost_steps=10), History.build(rows))
    m = result.measurements
    assert (m.newest_save_step, m.restored_step, m.lost_steps) == (20, 0, 25)
    assert m.newest_save_s == pytest.approx(T_FAULT - (BASE + 5 + 19 * 0.25 + 0.01))
    assert result.verdict == "fail"
    assert any(r.startswith("25 steps were lost (restored step 0, fault at step 25)") and
               "the job had said it saved step 20 1.3 s before the fault, and the restart did not load it" in r
               for r in result.reasons), result.reasons
    # a restart that loaded the newest save says nothing of the kind
    result = check(spec(max_lost_steps=2), kill_pass_history())
    assert not any("did not load" in r for r in result.reasons)


def test_a_failed_restart_quotes_the_jobs_own_error_per_attempt():
    """Restarts that never stepped: the verdict quotes what the job printed for each failed
    attempt (the first error line per rank per attempt, merged across attempts that said the
    same; ports differ), not just "no restart ever produced a step"."""
    from drillbit.judging.probes.preset import matcher, signals_of

    m = matcher(signals_of(["torchrun"]), kinds={"error"})
    line = ("[rank3]: RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
            "pair.cc:144] no error; connect to 127.0.0.1:{port} failed: Connection refused")
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"), (T_FAULT + 0.2, "detect", {"by": "torchrun"})]
    for attempt in (1, 2, 3):
        t = T_FAULT + 3 * attempt
        rows.append((t, "restart", {"attempt": attempt}))
        [(kind, _, data)] = m.match(line.format(port=40000 + attempt))
        rows.append((t + 1, kind, data))
        rows.append((t + 1.1, kind, m.match("[rank3]: ValueError: a later line of the same attempt")[0][2]))
    rows += [(T_FAULT + 12, "job.exit", {"code": 1}), (T_FAULT + 12.5, "observe.end"), (T_FAULT + 13, "drill.end")]
    result = check(spec(), History.build(rows))
    assert result.verdict == "fail"
    first = result.reasons[0]
    assert first.startswith("detected after 0.2 s, restarted 3 times but no restart ever produced a step"), first
    assert "attempts 1–3, rank 3: RuntimeError: Gloo connectFullMesh failed" in first, first
    assert "ValueError" not in first  # the first exception line per rank per attempt only


def test_attribution_is_unknown_when_the_profile_reads_no_blame_lines():
    """Nobody blamed is a breach only where the job's lines could have named someone: a
    profile with no blame or members signal cannot tell, and the drill is inconclusive."""
    def history(reads: list[str]) -> History:
        rows = prelude()
        rows[1] = (BASE + 0.1, "job.launch", {"reads": reads})
        rows += [(T_FAULT - 0.01, "fault.inject", {"rank": 1}), (T_FAULT, "fault.confirmed", {"hurts": "rank"}),
                 (T_FAULT + 0.2, "detect", {"by": "torchrun"})]
        rows += steps(21, 40, T_FAULT + 6.0)
        rows += [(T_FAULT + 11, "observe.end"), (T_FAULT + 11.5, "drill.end")]
        return History.build(rows)

    blind = check(spec(attribution="exact"), history(["detect", "restart", "step"]))
    slo = next(s for s in blind.slos if s.name == "attribution")
    assert slo.status == "unknown" and "reads no blame or members lines" in slo.detail
    assert blind.verdict == "inconclusive", blind.reasons
    seeing = check(spec(attribution="exact"), history(["blame", "detect", "step"]))
    assert next(s for s in seeing.slos if s.name == "attribution").status == "fail"


def lossy_history(reads: list[str], blamed: int | None = None) -> History:
    """A lossy link on node-1 (ranks 2 and 3), its steps 20% slower; the stack blames
    ``blamed`` (a straggler line) or nobody."""
    rows = prelude()
    rows[1] = (BASE + 0.1, "job.launch", {"reads": reads})
    rows.append((T_FAULT - 1, "job.ranks", {"ranks": [{"rank": r, "pid": 10 + r, "node": f"node-{r // 2}"}
                                                      for r in range(4)]}))
    cut = {"table": "inet drillbit_x", "netns": "/run/netns/dbit-x-node-1", "scope": "node", "endpoint": None,
           "direction": "both", "loss_pct": 5.0}
    rows += [(T_FAULT - 0.01, "fault.inject", {"rank": 3, "node": "node-1"}),
             (T_FAULT, "fault.confirmed", {"hurts": "node", "expects": "slow", "verb": "behind the lossy link",
                                           "evidence": [{"t": T_FAULT, "what": "link cut", "kind": "link-cut",
                                                         "data": cut}]})]
    rows += [(T_FAULT + 0.3 * (i + 1), "step", {"n": 26 + i, "dt": 0.3}) for i in range(40)]
    if blamed is not None:
        rows.append((T_FAULT + 5, "straggler", {"rank": blamed, "node": f"node-{blamed // 2}"}))
    rows += [(T_FAULT + 13, "observe.end"), (T_FAULT + 13.5, "drill.end")]
    return History.build(rows)


def lossy_spec() -> DrillSpec:
    return DrillSpec.model_validate({"name": "lossy-link", "class": "fail-slow", "summary": "s",
                                     "fault": {"type": "lossy-link", "trigger": {"at_step": 20}},
                                     "slo": {"attribution": "no-false-blame"}})


def test_a_lossy_link_blamed_on_nobody_passes_and_names_the_link():
    result = check(lossy_spec(), lossy_history(["step", "straggler"]))
    [slo] = result.slos
    assert result.verdict == "pass", result.reasons
    assert "nothing the stack printed after the fault blamed a rank" in slo.detail
    assert "the link of node-1 (5% of packets dropped)" in slo.detail
    assert result.measurements.fleet_tax == pytest.approx(0.2)


def test_a_lossy_link_blamed_on_a_healthy_rank_fails_and_one_the_stack_cannot_hear_is_unknown():
    wrong = check(lossy_spec(), lossy_history(["step", "straggler"], blamed=0))
    assert wrong.verdict == "fail"
    assert "rank(s) 0 blamed for a fault that did not hurt them" in wrong.reasons[0], wrong.reasons
    behind = check(lossy_spec(), lossy_history(["step", "straggler"], blamed=3))
    assert behind.verdict == "pass", behind.reasons  # a rank behind the lossy link is not a false blame
    deaf = check(lossy_spec(), lossy_history(["step"]))
    assert deaf.slos[0].status == "unknown" and deaf.verdict == "inconclusive"


def digest_history(restored: str) -> History:
    """A save of step 20 and, after the fault, its restore, each with a digest of the state."""
    rows = prelude()
    rows.insert(-1, (BASE + 6.2, "ckpt.save", {"step": 20, "path": "/c/step_20.pt", "digest": "aaaa"}))
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20.pt", "digest": restored})]
    rows += steps(21, 40, T_FAULT + 6.0)
    end = T_FAULT + 6.0 + 19 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True}), (end + 0.5, "drill.end")]
    return History.build(sorted(rows, key=lambda r: r[0]))


def test_a_restore_must_load_the_state_its_save_was_called_with():
    same = check(spec(), digest_history("aaaa"))
    assert same.verdict == "pass", same.reasons
    assert next(s for s in same.slos if s.name == "restore_matches_save").status == "pass"
    other = check(spec(), digest_history("bbbb"))
    slo = next(s for s in other.slos if s.name == "restore_matches_save")
    assert other.verdict == "fail" and slo.status == "fail" and slo.detail == "step 20: saved aaaa, restored bbbb"
    assert any("not the state it had when it saved that step (aaaa)" in r for r in other.reasons)
    # no digest on the restore line: nothing to judge, no SLO
    assert all(s.name != "restore_matches_save" for s in check(spec(), kill_pass_history()).slos)


def membership_history(counted_too: bool) -> History:
    """torchrun's restart lines only (a job that announces none itself): a membership restart
    ("Detected 1 new nodes"), with or without another agent's counted attempt beside it."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 4.0, "restart", {"waiting": 1, "group_rank": 0, "by": "torchrun"})]
    if counted_too:
        rows.append((T_FAULT + 3.0, "restart", {"attempt": 1, "by": "torchrun"}))
    rows += [(T_FAULT + 5.8, "restore", {"step": 20, "path": "/c/step_20"})]
    rows += steps(21, 40, T_FAULT + 6.0)
    end = T_FAULT + 6.0 + 19 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "drill.end")]
    return History.build(sorted(rows, key=lambda r: r[0]))


def test_a_membership_restart_counts_alone_and_is_part_of_another_nodes_counted_one():
    assert measure(membership_history(counted_too=False)).restarts == 1  # a node that left and came straight back
    assert measure(membership_history(counted_too=True)).restarts == 1   # one recovery, seen by two agents


def heal_history(healed_step_at: float, copy_s: float) -> History:
    """torchft: replica 1 killed and healed from replica 0, which trained on alone until the
    healing replica joined its quorum, then waited for it in the all-reduce."""
    rows = [(BASE, "drill.start"), (BASE + 0.1, "job.launch")]
    for i, n in enumerate(range(1, 26)):
        rows += [(BASE + 5 + i * 0.25, "step", {"n": n, "rank": 0}), (BASE + 5.01 + i * 0.25, "step", {"n": n, "rank": 1})]
    rows.append((BASE + 6.5, "steady", {"baseline_step_s": 0.25}))
    rows += [(T_FAULT - 0.01, "fault.inject", {"rank": 1}), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 2, "restart", {"attempt": 1, "by": "torchrun"})]
    rows += [(T_FAULT + 0.5 + i * 0.25, "step", {"n": n, "rank": 0}) for i, n in enumerate(range(26, 40))]
    rows.append((T_FAULT + 4, "restore", {"step": 40, "tier": "peer", "rank": 1}))
    rows.append((T_FAULT + 4 + copy_s, "restore.copy", {"peer": "http://node-0:4100", "seconds": copy_s}))
    rows += [(healed_step_at + i * 0.25, "step", {"n": n, "rank": 0}) for i, n in enumerate(range(41, 60))]
    end = healed_step_at + 5
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True}), (end + 0.5, "drill.end")]
    return History.build(rows)


def test_a_heal_from_a_peer_counts_the_healed_replicas_first_step_and_names_the_copy():
    """A first step that came late after a heal names the copy's time and source, as the job
    said them (torchft's 'fetching checkpoint from URL took Xs')."""
    slow = check(spec(first_step_within=30), heal_history(T_FAULT + 50, 45.2))
    m = slow.measurements
    assert m.time_to_first_step == pytest.approx(50) and m.restored_from == "peer"
    assert (m.peer_copy_s, m.peer_copy_from) == (45.2, "http://node-0:4100")
    assert slow.verdict == "fail"
    assert slow.reasons[0] == ("first step after recovery took 50.0 s after the fault; the SLO allows 30 s; copying a "
                               "live peer's state from http://node-0:4100 took 45.2 s of it (the job's own line)")
    fast = check(spec(first_step_within=30), heal_history(T_FAULT + 6, 1.2))
    assert fast.verdict == "pass" and fast.measurements.time_to_first_step == pytest.approx(6)


def test_observation_waits_for_a_restarted_process_to_restore_when_survivors_step_on():
    """torchft under load (ci): the dead group's torchrun restarted it, the lighthouse let the
    survivor go on alone once the dead heartbeat expired, and five survivor steps ended the
    observation before the restarted group healed from its peer. A job that tells its
    restores has recovered when the restarted process restored, not when survivors stepped."""
    from drillbit.judging.checks.recovery import awaiting, recovered

    rows = prelude()
    rows[1] = (BASE + 0.1, "job.launch", {"reads": ["step", "restart", "restore"]})
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.1, "detect", {"by": "torchft"}), (T_FAULT + 0.5, "restart", {"by": "torchrun"})]
    rows += steps(26, 35, T_FAULT + 5.0)  # the survivor, alone
    survivors_only = History.build(rows)
    assert measure(survivors_only).time_to_first_step == pytest.approx(5.0)
    assert not recovered(survivors_only, 5)
    assert awaiting(survivors_only, 5) == "the restarted process's restore"

    rows += [(T_FAULT + 8.0, "restore", {"step": 35, "tier": "peer"})] + steps(36, 41, T_FAULT + 8.1)
    healed = History.build(rows)
    assert recovered(healed, 5)
    m = measure(healed)
    assert m.restored_from == "peer" and m.time_to_first_step == pytest.approx(8.1)

    rows_plain = [r if r[1] != "job.launch" else (r[0], "job.launch", {"reads": ["step", "restart"]})
                  for r in rows[:len(prelude()) + 4 + 10]]
    assert recovered(History.build(rows_plain), 5)  # a job that tells no restores: its steps are the recovery

    # restarted and started over (Ray Train when get_checkpoint() gave it nothing): its
    # steps from the beginning again are the recovery; no restore is awaited
    over = prelude()
    over[1] = (BASE + 0.1, "job.launch", {"reads": ["step", "restart", "restore"]})
    over += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.6, "detect", {"by": "ray-train"}), (T_FAULT + 6.6, "restart", {"attempt": 0})]
    over += steps(1, 10, T_FAULT + 9.0)
    assert recovered(History.build(over), 5)


def coarse_restart_history(first_new: int = 21) -> History:
    """A restart whose restore line has no stamp (the time it was read) while its steps have
    Megatron's whole-second stamps, read after their second: the new attempt's first step is
    recorded after the restore line but stamped before it."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": first_new - 1, "path": "/c/iter_0000020"}),
             (T_FAULT + 5.0, "step", {"n": first_new})]  # written at +5.9, stamped +5, read at +6.2
    rows += steps(first_new + 1, 40, T_FAULT + 6.0)
    end = T_FAULT + 6.0 + 19 * 0.25 + 0.1
    rows += [(end, "observe.end"), (end + 0.1, "fault.heal", {"healed": True}), (end + 0.5, "drill.end")]
    return History.build(rows)


def test_a_new_attempts_first_step_stamped_before_the_fault_is_still_after_it():
    """ci49: killed 0.07 s after step 21's line, restored step 20 and stepped 21 again within the
    same second; Megatron's whole-second stamp put the new step 21 before the fault. The
    progress probe saw the restore line before it (new_attempt) and read it after the fault:
    that is the new attempt's first step, no earlier than the restore line — not step 22, which
    said "resumed from step 21" and made a job that loaded the damaged step 20 look like one
    that skipped it."""
    t_fault = BASE + 5 + 20 * 0.25 + 0.07  # just after step 21
    rows = prelude(until_step=21)
    rows += [(t_fault - 0.04, "fault.inject"), (t_fault, "fault.confirmed"),
             (t_fault + 0.12, "detect", {"by": "torchrun"}), (t_fault + 0.43, "restart", {"attempt": 1}),
             (t_fault + 0.63, "restore", {"step": 20, "path": "/c/iter_0000020"}),
             (t_fault - 0.08, "step", {"n": 21, "new_attempt": True})]
    rows += steps(22, 40, t_fault + 1.24)
    rows += [(t_fault + 7, "observe.end")]
    m = measure(History.build(rows))
    assert (m.step_at_fault, m.first_step, m.restored_step, m.lost_steps) == (21, 21, 20, 1)
    assert m.time_to_first_step == pytest.approx(0.63)  # the restore line's time: its stamp is coarser
    # the same line without the probe's word (read before the fault, or an old reader): as before
    rows = [(t, "step", {"n": 21}) if len(r) == 3 and r[2].get("new_attempt") else r for r in rows for t in (r[0],)]
    assert measure(History.build(rows)).first_step == 22


def test_the_new_attempts_first_step_is_where_its_numbering_went_back_whatever_its_stamp():
    m = measure(coarse_restart_history())
    assert (m.first_step, m.restored_step, m.lost_steps) == (21, 20, 5)
    assert m.time_to_first_step == pytest.approx(5.0)
    # no going-back (the job killed before its newest save resumed past it): the times decide, as before
    rows = prelude(until_step=25)
    rows += [(T_FAULT, "fault.confirmed"), (T_FAULT + 3, "restart", {"attempt": 1}),
             (T_FAULT + 5.8, "restore", {"step": 25, "path": "/c/step_25"})]
    rows += steps(26, 40, T_FAULT + 6.0)
    rows += [(T_FAULT + 11, "observe.end")]
    later = measure(History.build(rows))
    assert (later.first_step, later.restored_step, later.time_to_first_step) == (26, 25, pytest.approx(6.0))


def test_an_event_recorded_wrong_is_still_read_for_the_verdict_it_decides():
    """A heal that failed is recorded with a payload its kind does not have (a drillbit bug):
    the drill still fails on the fault left in place, says what the bug was, and the check
    itself does not fall over on the event that decides it."""
    rows = prelude() + [(T_FAULT, "fault.confirmed"), (T_FAULT + 10, "observe.end"),
                        (T_FAULT + 11, "heal.failed", {"fault": "kill-rank", "pid": "not-a-pid", "detail": "stuck"})]
    result = check(spec(), History.build(rows))
    assert result.verdict == "fail"
    assert "fault left in place: kill-rank on node ?: stuck" in result.reasons, result.reasons
    assert any(r.startswith("drillbit recorded 1 event(s) it cannot read: heal.failed") for r in result.reasons)


def test_the_check_leaves_nothing_frozen_from_the_collector_on_a_verdict_or_a_checker_error(monkeypatch):
    """check() freezes what was alive before it (the history) out of the collector's walks
    while it judges; afterwards nothing stays frozen, whether it judged or a checker raised."""
    import gc

    from drillbit.judging import checks

    seen: list[int] = []
    real = checks.measure

    def spying(history):
        seen.append(gc.get_freeze_count())
        return real(history)

    monkeypatch.setattr(checks, "measure", spying)
    assert check(spec(), kill_pass_history()).verdict == "pass"
    assert seen[0] > 0 and gc.get_freeze_count() == 0

    def broken(history):
        raise ZeroDivisionError("a checker bug")

    monkeypatch.setattr(checks, "measure", broken)
    result = check(spec(), kill_pass_history())
    assert result.verdict == "inconclusive" and "ZeroDivisionError" in result.reasons[0]
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_its_own_objects_keeps_them_frozen_and_two_checks_share_one_freeze(monkeypatch):
    import gc
    import threading
    import time

    from drillbit.judging import checks

    mine = [object() for _ in range(100)]
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        check(spec(), kill_pass_history())
        assert gc.get_freeze_count() > 0  # the caller's own freeze is not thawed (thawed, it would be 0)
    finally:
        gc.unfreeze()
    del mine
    # two checks at once: the first to end does not thaw the other's history under it
    inside = threading.Barrier(2)
    counts: list[int] = []
    real = checks.measure

    def waiting(history):
        inside.wait(timeout=10)  # both are inside the freeze
        result = real(history)
        if threading.current_thread().name == "late":
            time.sleep(0.2)  # the other one has ended by now
            counts.append(gc.get_freeze_count())
        return result

    monkeypatch.setattr(checks, "measure", waiting)
    threads = [threading.Thread(target=check, args=(spec(), kill_pass_history()), name=n) for n in ("early", "late")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert counts and counts[0] > 0 and gc.get_freeze_count() == 0
