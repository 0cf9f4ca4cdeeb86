"""A graded drill's gate and the null level (#58): the reach SLO judged on a sweep's report,
the quiet stretches with no fault on, the order of one launch's segments, the hang-length
axis's false restarts, and the spec rules, fed NaN, inf, empty and out-of-order inputs. The
sweeps themselves run on the real job in tests/integration/test_graded_sweep.py and
test_graded_gate.py."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from drillbit.core.errors import SpecError
from drillbit.core.history import Event, History
from drillbit.faults.loading import load_drill
from drillbit.runs.graded import (GradedLaunch, add_nulls, build, curve_svg, judge_reach, outcome, page,
                                  late_ranks, parse_levels, quiet_stretch, together)
from drillbit.spec.models import ReachSLO


def payload(detected, *, correct=True, restarts=None, back=None, fault="slow-rank"):
    return {"verdict": "pass", "exit_code": 0, "fault": {"type": fault, "confirmed": True},
            "measurements": {"time_to_straggler": detected, "time_to_detect": detected, "straggler_correct": correct,
                             "straggler_rank": 1 if correct else 0, "observed_s": 10.0, "baseline_step_s": 0.1,
                             "restarts": restarts, "time_to_first_step": back}}


def report(rows: dict[str, list[dict]], null: dict | None = None) -> dict:
    name, levels = parse_levels("slowdown=" + ",".join(rows))
    return build("slow-rank-reach", "local", "reference", name, levels,
                 {k: [outcome(p) for p in v] for k, v in rows.items()}, repeats=3,
                 null=null if null is not None else add_nulls([{"steps": 400, "false_blames": 0, "late": 0,
                                                                 "seconds": 100.0}]), mode="one")


SLO = ReachSLO(at_most="5%")
CAUGHT = [payload(1.0)] * 3
MISSED = [payload(None)] * 3


def test_a_detector_that_catches_the_limit_and_up_passes_and_says_so():
    verdict, reasons, row = judge_reach(report({"2%": MISSED, "5%": CAUGHT, "10%": CAUGHT}), SLO)
    assert verdict == "pass" and row["status"] == "pass" and row["measured"] == "5%"
    assert "reach 5%" in reasons[0] and "400 steps with no fault on" in reasons[0]


def test_a_detector_blind_at_the_limit_fails_naming_the_level_and_its_count():
    verdict, reasons, row = judge_reach(report({"2%": MISSED, "5%": [payload(1.0), payload(None), payload(None)],
                                                "10%": CAUGHT}), SLO)
    assert verdict == "fail" and row["status"] == "fail"
    assert reasons == ["slowdown 5% was detected in 1 of 3 repeats (the reach must be 5% or less: every level "
                       "from it up detected in ≥ 95%)"]


def test_naming_the_wrong_rank_at_a_gated_level_fails_however_fast():
    verdict, reasons, _ = judge_reach(report({"5%": [payload(1.0, correct=False)] * 3, "10%": CAUGHT}), SLO)
    assert verdict == "fail" and "healthy rank(s) were blamed" in reasons[0]


def test_false_blames_with_no_fault_on_fail_a_detector_that_catches_everything():
    null = add_nulls([{"steps": 300, "false_blames": 2, "late": 0, "seconds": 80.0},
                      {"steps": 100, "false_blames": 0, "late": 1, "seconds": 20.0}])
    assert null["false_per_10k_steps"] == 50.0 and null["late"] == 1
    verdict, reasons, _ = judge_reach(report({"5%": CAUGHT, "10%": CAUGHT}, null), SLO)
    assert verdict == "fail" and "2 false blame(s) in 400 steps with no fault on (50.0 per 10,000" in reasons[0]
    assert judge_reach(report({"5%": CAUGHT}, null), ReachSLO(at_most="5%", false_blames_per_10k_steps=60))[0] == "pass"


def test_unknown_is_inconclusive_never_pass():
    # a gated level where no repeat reached a verdict
    aborted = [{**payload(1.0), "verdict": "aborted", "exit_code": 4}] * 3
    verdict, reasons, row = judge_reach(report({"5%": aborted, "10%": CAUGHT}), SLO)
    assert verdict == "inconclusive" and row["status"] == "unknown" and "5%" in reasons[0]
    # no step with the fault off: the null level is unknown
    empty = add_nulls([])
    assert empty["false_per_10k_steps"] is None and empty["steps"] == 0
    assert judge_reach(report({"5%": CAUGHT}, empty), SLO)[0] == "inconclusive"
    # no level at or above the limit
    assert judge_reach(report({"2%": CAUGHT}), SLO)[0] == "inconclusive"
    # a fail stays a fail when the null is unknown too
    assert judge_reach(report({"5%": MISSED}, empty), SLO)[0] == "fail"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), None])
def test_figures_that_are_not_numbers_detect_nothing_and_draw_no_nan(bad):
    r = report({"10%": [payload(bad)] * 3, "5%": CAUGHT})
    assert judge_reach(r, SLO)[0] == "fail"
    svg = curve_svg(r)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()


def test_a_quiet_gap_counts_steps_and_tells_a_late_detection_from_a_false_blame():
    events = [Event(seq=i, t=10.0 + i, source="job", kind="step", data={"n": 100 + i // 2}) for i in range(10)]
    events += [Event(seq=20, t=11.5, source="job", kind="straggler", rank=2, data={}),   # the healed rank, late
               Event(seq=21, t=12.5, source="job", kind="straggler", rank=1, data={}),   # a healthy rank
               Event(seq=22, t=18.5, source="job", kind="straggler", rank=2, data={}),   # the healed rank, much later
               Event(seq=23, t=30.0, source="job", kind="straggler", rank=3, data={})]   # outside the gap
    history = History(events=sorted(events, key=lambda e: e.t))
    q = quiet_stretch(history, 10.0, 20.0, slow=True, late={2}, late_s=5.0)
    assert q == {"steps": 5, "false_blames": 2, "late": 1, "seconds": 10.0}
    assert quiet_stretch(history, 20.0, 10.0, slow=True)["seconds"] == 0.0  # out of order: an empty stretch
    # a hang's detector: a detection with no fault on is the false alarm
    alarm = History(events=[Event(seq=0, t=1.0, source="job", kind="detect", data={})])
    assert quiet_stretch(alarm, 0.0, 2.0, slow=False)["false_blames"] == 1


def test_one_launch_puts_every_level_in_every_round_in_a_seeded_order():
    _, levels = parse_levels("slowdown=1%,2%,5%,10%")
    from drillbit.spec.models import DrillSpec

    spec = DrillSpec.model_validate({"name": "x", "class": "fail-slow", "summary": "x",
                                     "fault": {"type": "slow-rank", "trigger": {"at_step": 1}}})
    a = GradedLaunch(spec, "slowdown", levels, 3, gap=5.0, seed=7)
    b = GradedLaunch(spec, "slowdown", levels, 3, gap=5.0, seed=7)
    assert [lv.label for lv, _ in a.order] == [lv.label for lv, _ in b.order]
    for r in range(3):
        assert sorted(lv.order for lv, rr in a.order if rr == r) == [0.01, 0.02, 0.05, 0.1]
    c = GradedLaunch(spec, "slowdown", levels, 3, gap=5.0, seed=8)
    assert [lv.label for lv, _ in c.order] != [lv.label for lv, _ in a.order]


def test_on_the_hang_axis_a_restart_for_a_pause_the_job_would_survive_is_false():
    hang = dict(fault="hang-collective")
    o = outcome(payload(8.0, restarts=1, back=25.0, **hang), pause_s=30.0, survives_s=1800.0)
    assert o["restarted"] and o["false_restart"] and o["back_s"] == 25.0
    assert not outcome(payload(8.0, restarts=1, **hang), pause_s=3600.0, survives_s=1800.0)["false_restart"]
    assert not outcome(payload(8.0, restarts=1, **hang), pause_s=30.0, survives_s=None)["false_restart"]  # unknown
    assert not outcome(payload(8.0, restarts=1, **hang), pause_s=float("nan"), survives_s=1800.0)["false_restart"]
    name, levels = parse_levels("duration=5s,30s")
    r = build("stall-nccl", "local", "reference", name, levels,
              {"5s": [outcome(payload(None, restarts=0, **hang), 5.0, 1800.0)],
               "30s": [o]}, repeats=1, null=None)
    s = {x["level"]: x for x in r["levels"]}
    assert s["30s"]["false_restarts"] == 1 and s["5s"]["restarts"] == 0 and s["30s"]["back_median"] == 25.0
    md = page(r).markdown()
    assert "false restarts" in md and "the hang-length axis" in md.lower()


def test_several_detectors_share_one_table_and_one_figure():
    a = {**report({"5%": CAUGHT, "50%": CAUGHT}), "job": "reference"}
    b = {**report({"5%": MISSED, "50%": CAUGHT}), "job": "reference-nvrx"}
    both = together([a, b])
    md = page(both).markdown()
    assert "reference: reach: **5%**" in md and "reference-nvrx: reach: **50%**" in md
    svg = curve_svg(both)
    assert svg.count("<polyline") == 2 and "reference-nvrx" in svg
    assert together([a]) is a


SPEC = """name: reach
class: fail-slow
summary: x
fault:
  type: slow-rank
  trigger: {{at_step: 5}}
{grade}
slo:
{slo}
"""


@pytest.mark.parametrize("grade,slo,where,says", [
    ("", "  reach: {at_most: 5%}", ":9: slo.reach:", "go together"),
    ("grade: {param: slowdown, levels: [5%]}", "  detect_within: 10s", ":1: ", "go together"),
    ("grade: {param: slowdown, levels: [5%, 10%]}", "  reach: {at_most: 2%}", ":9: slo.reach.at_most:",
     "not one of the levels"),
    ("grade: {param: slowdown, levels: [2%, 10%]}", "  reach: {at_most: 5%}", ":9: slo.reach.at_most:",
     "not one of the levels"),
    ("grade: {param: slowdown, levels: [-5%, 500%]}", "  reach: {at_most: 500%}", ":7: grade.levels:",
     "slow-rank's slowdown -5%: Input should be greater than 0"),
    ("grade: {param: duration, levels: [0s, 5s]}", "  reach: {at_most: 5s}", ":7: grade.levels:",
     "0s: a duration must be above 0 s"),
    ("grade: {param: slowdown, levels: [5%, true]}", "  reach: {at_most: 5%}", ":7: grade.levels:",
     "true is not a level"),
    ("grade: {param: slownes, levels: [5%]}", "  reach: {at_most: 5%}", ":7: grade.param:", "did you mean 'slowdown'"),
    ("grade: {param: slowdown, levels: [5%, nan]}", "  reach: {at_most: 5%}", ":7: grade:", "'nan' is not"),
    ("grade: {param: slowdown, levels: []}", "  reach: {at_most: 5%}", ":7: grade.levels:", "at least 1"),
    ("grade: {param: slowdown, levels: [5%]}", "  reach: {at_most: lots}", ":9: slo.reach.at_most:", "'lots'"),
])
def test_a_wrong_graded_spec_is_a_clear_error_with_its_line(tmp_path: Path, grade, slo, where, says):
    path = tmp_path / "reach.yaml"
    path.write_text(SPEC.format(grade=grade, slo=slo))
    with pytest.raises(SpecError) as err:
        load_drill(path)
    text = str(err.value)
    assert where in text and says in text, text


def test_the_limit_is_judged_at_its_own_level_with_every_repeat_counted():
    # a level missed below the limit and none at it: never a pass (the limit is a level it drills)
    r = report({"2%": MISSED, "10%": CAUGHT})
    assert judge_reach(r, SLO)[0] == "inconclusive"
    # 1.1% and 0.011 are one level
    r = report({"1.1%": CAUGHT, "5%": CAUGHT})
    assert judge_reach(r, ReachSLO(at_most=0.011))[0] == "pass"
    # a gated level where only one repeat of three reached a verdict: not established
    aborted = {**payload(1.0), "verdict": "aborted", "exit_code": 4}
    verdict, reasons, _ = judge_reach(report({"5%": [payload(1.0), aborted, aborted], "10%": CAUGHT}), SLO)
    assert verdict == "inconclusive" and "5%: 1 of the 3 repeats reached a verdict" in reasons[0]
    # a launch that ended early
    r = {**report({"5%": CAUGHT, "10%": CAUGHT}), "segments_run": 4, "segments_planned": 6}
    verdict, reasons, _ = judge_reach(r, SLO)
    assert verdict == "inconclusive" and "after 4 of its 6 segments" in reasons[-1]


def test_the_curve_puts_levels_in_the_order_of_the_axis_whoever_drew_them():
    before = {**report({"5%": CAUGHT, "10%": CAUGHT}), "detector": "before"}
    after = {**report({"2%": MISSED, "0.05": CAUGHT, "20%": CAUGHT}), "detector": "after"}
    svg = curve_svg(together([before, after]))
    xs = [svg.index(f">{label}</text>") for label in ("2%", "5%", "10%", "20%")]
    assert xs == sorted(xs) and ">0.05</text>" not in svg  # 0.05 is the 5% place


def test_the_catalogue_reach_drill_loads():
    spec = load_drill(Path(__file__).resolve().parents[2] / "drills" / "slow-rank-reach.yaml")
    assert spec.grade is not None and spec.grade.one_launch and spec.slo.reach is not None
    assert math.isclose(spec.slo.reach.at_most_order, 0.05)


def test_each_launch_drills_every_level_without_its_grade_and_reads_each_null(monkeypatch, tmp_path):
    """Without --one-launch every repeat is a drill of its own (session.execute), at its level,
    judged as a drill: its spec carries no grade (a graded drill would sweep again) and no
    reach; its null level is its steps from the steady state to the fault."""
    import drillbit.runs.graded as graded
    from types import SimpleNamespace

    from drillbit.spec.models import DrillSpec

    spec = DrillSpec.model_validate({
        "name": "reach", "class": "fail-slow", "summary": "x", "grade": {"param": "slowdown", "levels": ["5%"]},
        "fault": {"type": "slow-rank", "trigger": {"at_step": 1}}, "slo": {"reach": {"at_most": "5%"}}})
    seen = []

    def fake_execute(resolved, **_kw):
        seen.append(resolved.spec)
        events = [Event(seq=0, t=1.0, source="drill", kind="steady", data={"baseline_step_s": 0.1, "step": 1}),
                  *[Event(seq=i, t=1.0 + i * 0.1, source="job", kind="step", data={"n": i}) for i in range(1, 11)],
                  Event(seq=20, t=1.55, source="job", kind="straggler", rank=1, data={}),
                  Event(seq=21, t=2.5, source="drill", kind="fault.inject", data={})]
        return payload(1.0), SimpleNamespace(run_dir=tmp_path / f"run{len(seen)}",
                                             history=History(events=sorted(events, key=lambda e: e.t)))

    monkeypatch.setattr(graded, "execute", fake_execute)
    from drillbit.runs.session import Resolved

    resolved = Resolved(spec=spec, cluster="local", job="reference",
                        config=SimpleNamespace(reports_dir=str(tmp_path), jobs={}))
    _, levels = parse_levels("slowdown=5%,10%")
    report, folder = graded.run_graded(resolved, "slowdown", levels, 2, write_report=False)
    assert folder is None and len(seen) == 4
    assert all(s.grade is None and s.slo.reach is None for s in seen)
    assert sorted(s.fault.params["slowdown"] for s in seen) == [0.05, 0.05, 0.1, 0.1]
    assert report["mode"] == "each" and report["null"]["stretches"] == 4
    assert report["null"]["steps"] == 4 * 10 and report["null"]["false_blames"] == 4


def test_a_judge_that_failed_is_no_miss_of_the_detector():
    """A segment whose checkers raised (a fleet scenario not loaded, #58's first hang sweep)
    reached no verdict on the detector: not counted, and said why; never a miss."""
    broken = {**payload(None), "verdict": "inconclusive", "reasons": ["checker error: KeyError: 'bloom-176b'"]}
    o = outcome(broken)
    assert not o["counts"] and "checker error" in o["why"]


def test_a_link_fault_hurts_every_rank_behind_the_link_so_naming_one_is_no_false_blame():
    """lossy-link and slow-link hurt a node (its link), not the one rank they were injected
    through: the drill's own attribution counts every rank on that node as hurt, and a graded
    segment must agree (#58: a slow-link sweep counted rank 2, behind node 1's capped link with
    the target rank 3, as a false blame, while the same drill run alone passed)."""
    link = payload(2.0, correct=False, fault="slow-link")
    link["measurements"] |= {"straggler_rank": 2, "attribution": {"hurt": [2, 3], "false_blames": []}}
    o = outcome(link)
    assert o["detected"] and o["right"] is True and o["false_blames"] == 0
    elsewhere = payload(2.0, correct=False, fault="slow-link")  # a rank on the healthy node: false
    elsewhere["measurements"] |= {"straggler_rank": 0, "attribution": {"hurt": [2, 3], "false_blames": [0]}}
    assert outcome(elsewhere)["right"] is False and outcome(elsewhere)["false_blames"] == 1
    rank = payload(2.0, correct=False)  # slow-rank hurts its rank only, whatever shares its node
    rank["measurements"] |= {"attribution": {"hurt": [1], "false_blames": []}}
    assert outcome(rank)["false_blames"] == 1


def test_after_a_link_fault_a_late_blame_of_any_rank_behind_that_link_is_late_not_false():
    table = Event(seq=0, t=1.0, source="harness", kind="job.ranks",
                  data={"ranks": [{"rank": r, "node": f"node-{r // 2}", "pid": 100 + r} for r in range(4)]})
    node = Event(seq=1, t=2.0, source="harness", kind="fault.confirmed", data={"hurts": "node", "evidence": []})
    history = History(events=[table, node])
    assert late_ranks(history, [3]) == {2, 3}
    one = Event(seq=1, t=2.0, source="harness", kind="fault.confirmed", data={"hurts": "rank", "evidence": []})
    assert late_ranks(History(events=[table, one]), [3]) == {3}
    assert late_ranks(History(events=[node]), [3]) == {3}  # no rank table: only the target
