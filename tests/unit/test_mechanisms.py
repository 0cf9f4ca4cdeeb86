"""#56: a restart that never stepped again, with the mark of a known mechanism in its evidence,
names the mechanism and its fix; without the mark, or where the restart came back, nothing is
named. Histories built by hand, shaped as a plain Hugging Face Trainer job under torchrun (torch
2.13, gloo) recorded them: attempt 1 refused by gloo, attempt 2 waiting in init_process_group."""
from __future__ import annotations

from pathlib import Path

from drillbit.judging.checks import check
from drillbit.core.history import History
from tests.unit.test_checks import BASE, T_FAULT, prelude, spec, steps

DRILLS = Path(__file__).resolve().parents[2] / "drills" / "known-defects"
REFUSED = ("RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
           "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:45093")
WAITING = ["_new_process_group_helper (distributed_c10d.py:2169)", "init_process_group (distributed_c10d.py:1899)",
           "_time_logger.<locals>.wrapper (c10d_logger.py:97)", "PartialState.__init__ (state.py:282)",
           "main (hfplain.py:55)", "<module> (hfplain.py:67)"]


def failed_restart(*, by="torchrun", error: str | None = REFUSED, frames=WAITING, other=None) -> History:
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1, "by": by})]
    if error:
        rows.append((T_FAULT + 6, "error", {"message": error, "by": "torchrun", "rank": 0}))
    rows += [(T_FAULT + 7, "restart", {"attempt": 2, "by": by}), (T_FAULT + 120, "observe.end")]
    ranks = [{"rank": r, "pid": 100 + r, "node": "local", "ok": True, "error": "", "hit": False,
              "frames": frames if r == 0 or other is None else other} for r in (0, 1)]
    rows.append((T_FAULT + 120.1, "stacks", {"attempt": 2, "where": "ranks 0–1 of attempt 2 …", "ranks": ranks}))
    return History.build(rows)


def named(h: History) -> list[str]:
    return [r for r in check(spec(), h).reasons if "carries the mark of" in r]


def test_a_refused_connect_after_the_restart_names_torchruns_shared_store_and_its_fix():
    [said] = named(failed_restart())
    assert "torchrun-shared-store: the job said, attempt 1" in said and "connectFullMesh failed" in said
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in said and "pytorch/pytorch/issues/135712" in said


def test_every_rank_of_a_restart_waiting_in_init_process_group_names_it_too():
    [said] = named(failed_restart(error=None))
    assert "every rank of attempt 2 was waiting in init_process_group (distributed_c10d.py:1899)" \
        in said


def test_a_rank_elsewhere_is_no_mark():
    assert named(failed_restart(error=None, other=["forward (model.py:10)", "main (hfplain.py:80)"])) == []


def test_another_launcher_or_a_restart_that_came_back_names_nothing():
    assert named(failed_restart(by="ft_launcher")) == []
    rows = prelude()
    rows += [(T_FAULT - 0.01, "fault.inject"), (T_FAULT, "fault.confirmed"),
             (T_FAULT + 0.2, "detect", {"by": "torchrun"}), (T_FAULT + 0.5, "restart", {"attempt": 1, "by": "torchrun"}),
             (T_FAULT + 6, "error", {"message": REFUSED, "rank": 0}), (T_FAULT + 7, "restart", {"attempt": 2, "by": "torchrun"}),
             (T_FAULT + 9, "restore", {"step": 20})]
    rows += steps(21, 30, T_FAULT + 10) + [(T_FAULT + 20, "observe.end")]
    assert named(History.build(rows)) == []
    assert BASE < T_FAULT


def test_a_known_defect_marked_by_a_mechanism_is_named_from_its_stuck_frames_or_error_lines():
    from drillbit.faults.loading import load_drill
    from drillbit.spec.config import DrillConfig, with_builtins

    spec = load_drill(str(DRILLS / "torchrun-restart-store-trainer.yaml"), with_builtins(DrillConfig()))
    for history in (failed_restart(), failed_restart(error=None)):
        result = check(spec, history)
        assert result.verdict == "fail" and result.reasons[0].startswith("known defect pytorch/pytorch#135712"), \
            result.reasons
    other = check(spec, failed_restart(error=None, other=["forward (model.py:10)"]))
    assert other.reasons[0].startswith("not clearly pytorch/pytorch#135712"), other.reasons


def test_every_defect_mark_in_the_catalogue_is_a_known_mechanism():
    import yaml

    from drillbit.judging.checks.mechanisms import KNOWN

    marks = {(yaml.safe_load(p.read_text()).get("defect") or {}).get("mark") for p in
             DRILLS.glob("*.yaml")} - {None}
    assert marks and marks <= {m.id for m in KNOWN}, marks
