"""Naming torchrun-shared-store (mechanisms.py, defect.py) on evidence that does not show it.
Found by an adversarial review of #56's change: each test
failed at 1d98abb, unless named test_held_ (a guard that held).

mechanisms.py's own contract: "Nothing is named on suspicion: the mark must be in the job's own
error lines from a restarted attempt, or in a restarted attempt's stuck frames (stacks.json), and only
when the restart never produced a step." """
from __future__ import annotations

from pathlib import Path

from drillbit.core.history import History
from drillbit.judging.checks import check
from tests.unit.test_checks import T_FAULT, prelude, spec
from tests.unit.test_mechanisms import REFUSED, WAITING, failed_restart

DRILLS = Path("/work/main/drills/known-defects")
ELSEWHERE = ["forward (model.py:10)", "train_step (job.py:40)", "main (job.py:80)"]


def named(h: History) -> list[str]:
    return [r for r in check(spec(), h).reasons if "carries the mark of" in r]


def _attempt0_error_then_restart_stuck_elsewhere() -> History:
    """A worker of the attempt the fault hit says 'connectFullMesh failed ... Connection refused' (its
    peer was just killed), BEFORE torchrun restarts the group; the restarted attempt's ranks are all
    readable and stuck in forward, not in any process-group set-up."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}),
             (T_FAULT + 0.3, "error", {"message": REFUSED, "by": "torchrun", "rank": 1}),  # attempt 0
             (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}),
             (T_FAULT + 200, "observe.end")]
    ranks = [{"rank": r, "pid": 100 + r, "node": "local", "ok": True, "error": "", "hit": False, "frames": ELSEWHERE}
             for r in (0, 1)]
    rows.append((T_FAULT + 200.1, "stacks", {"attempt": 1, "where": "ranks 0–1 of attempt 1 in forward",
                                             "ranks": ranks}))
    return History.build(rows)


def test_M1_an_error_of_the_attempt_the_fault_hit_is_no_mark_of_the_restart():
    """drillbit: 'the restart carries the mark of torchrun-shared-store: the job said, after the restart:
    RuntimeError: Gloo connectFullMesh failed ...' — the line came 0.2 s BEFORE the restart (job_errors
    itself files it under attempt 0), and the restarted ranks were stuck in forward."""
    h = _attempt0_error_then_restart_stuck_elsewhere()
    assert [e.attempts for e in check(spec(), h).measurements.job_errors] == [[0]]  # drillbit's own reading
    assert named(h) == []


def test_M1_a_known_defect_is_not_recognised_from_the_attempt_the_fault_hit():
    """The same history judged by the known-defect drill: drillbit opens its verdict with 'known defect
    pytorch/pytorch#135712: the job said, after the restart: ...' (compare then counts the FAIL as the
    expected one)."""
    from drillbit.faults.loading import load_drill
    from drillbit.spec.config import DrillConfig, with_builtins

    drill = load_drill(str(DRILLS / "torchrun-restart-store-trainer.yaml"), with_builtins(DrillConfig()))
    result = check(drill, _attempt0_error_then_restart_stuck_elsewhere())
    assert result.verdict == "fail"
    assert result.reasons[0].startswith("not clearly pytorch/pytorch#135712"), result.reasons[0]


def test_M2_ranks_waiting_for_a_node_the_fault_took_are_no_mark_of_the_shared_store():
    """kill-node with torchrun's default static rendezvous: the surviving node's launcher restarts its
    workers at once, and they wait in init_process_group for ranks 2-3, whose node is gone (their stacks
    cannot be read). That wait is the fault itself, not pytorch#135712; drillbit names the mechanism
    because 'every rank it could read' (the two survivors) waits in init_process_group."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"),
             (T_FAULT, "fault.confirmed", {"hurts": "node", "expects": "crash", "verb": "kill",
                                           "evidence": [{"kind": "node-gone", "node": "b", "processes": 2}]}),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}),
             (T_FAULT + 200, "observe.end")]
    ranks = [{"rank": r, "pid": 100 + r, "node": "a" if r < 2 else "b", "ok": r < 2,
              "error": "" if r < 2 else "agent on b lost", "hit": r >= 2, "frames": WAITING if r < 2 else []}
             for r in range(4)]
    rows.append((T_FAULT + 200.1, "stacks", {"attempt": 1, "where": "ranks 0–1 of attempt 1 …", "ranks": ranks}))
    h = History.build(rows)
    assert not h.of("event.invalid"), h.of("event.invalid")
    assert named(h) == []


def test_M3_an_error_printed_after_the_window_closed_is_no_mark():
    """DESIGN: only events before observe.end count. The window closed with the restarted ranks in
    forward; a gloo 'connectFullMesh failed ... Connection refused' printed 2 s later, while the harness
    healed and tore the job down, names torchrun-shared-store ('the job said, after the restart: ...'):
    _mark reads history.of(ERROR) whole, unwindowed."""
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}),
             (T_FAULT + 200, "observe.end"),
             (T_FAULT + 200.05, "stacks", {"attempt": 1, "where": "ranks 0–1 of attempt 1 in forward",
                                           "ranks": [{"rank": r, "pid": 100 + r, "node": "local", "ok": True, "error": "",
                                                      "hit": False, "frames": ELSEWHERE} for r in (0, 1)]}),
             (T_FAULT + 201, "fault.heal", {"healed": True}),
             (T_FAULT + 202, "error", {"message": REFUSED, "rank": 1, "by": "torchrun"})]
    assert named(History.build(rows)) == []


# ---------------------------------------------------------------------------------------------------
# Guards that held.
# ---------------------------------------------------------------------------------------------------

def test_held_attempt_zero_stacks_and_unread_ranks_name_nothing():
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}),
             (T_FAULT + 200, "observe.end")]
    ranks = [{"rank": r, "pid": 100 + r, "node": "local", "ok": True, "error": "", "hit": False, "frames": WAITING}
             for r in (0, 1)]
    zero = rows + [(T_FAULT + 200.1, "stacks", {"attempt": 0, "where": "…", "ranks": ranks})]
    assert named(History.build(zero)) == []
    unread = [{**r, "ok": False} for r in ranks]
    assert named(History.build(rows + [(T_FAULT + 200.1, "stacks", {"attempt": 1, "where": "…", "ranks": unread})])) == []


def test_held_an_error_before_the_fault_names_nothing():
    rows = prelude()
    rows.insert(5, (T_FAULT - 3, "error", {"message": REFUSED, "rank": 0}))
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}), (T_FAULT + 200, "observe.end")]
    assert named(History.build(rows)) == []
    assert named(failed_restart(by="ft_launcher")) == []
