"""matches_uninterrupted (judging/checks/twin.py): the run after its restore against the same
job run once without the fault. Exact where every figure is as printed; within a tolerance;
different from the first step beyond it, named; unknown where the comparison cannot tell (no
uninterrupted steps, none after the restore, the two runs differing before the fault already,
an uninterrupted run that restored a checkpoint). NaN, inf, empty, out of order, digests."""
from __future__ import annotations

import math

import pytest

from drillbit.core.history import History
from drillbit.judging.checks.recovery import Measurements
from drillbit.judging.checks.slo import Judging, _judge_matches_uninterrupted
from drillbit.judging.checks.twin import compare, judge, rel_diff, twin_steps_of
from drillbit.spec.models import SLO

FAULT, RESTORED, LAST = 25, 20, 32


def loss_at(n: int) -> float:
    return round(30 * math.exp(-n / 15) + 2 + (0.6 if n % 2 else -0.6), 5)


def healthy(n: int) -> dict:
    return {"loss": loss_at(n), "lr": round(0.01 * 0.995 ** n, 8), "samples": n * 64}


def history(after=lambda n: {}, twin=lambda n: {}, twin_steps=range(1, LAST + 1), twin_said=None,
            before=lambda n: {}) -> tuple[History, list, list]:
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, **{**healthy(n), **before(n)})
    first = len(h.of("step"))
    for i, n in enumerate(range(RESTORED + 1, LAST + 1)):
        h.record("probe", "step", t=100.0 + i, n=n, **{**healthy(n), **after(n)})
    steps = h.of("step")
    h.record("drillbit", "uninterrupted", run_dir="/r/uninterrupted", until_step=LAST,
             reached=max(twin_steps, default=0), **(twin_said or {}))
    for n in twin_steps:
        h.record("drillbit", "uninterrupted.step", n=n, **{**healthy(n), **twin(n)})
    return h, steps[:first], steps[first:]


def judged(tolerance=0.0, steps=None, **kw):
    h, before, after = history(**kw)
    return judge(compare(before, after, RESTORED, list(h)), tolerance, steps)


def test_a_faithful_restore_is_exact_and_says_over_which_steps():
    v = judged()
    assert v.status == "pass" and v.result == "exact" and v.steps == LAST - RESTORED, v
    assert "exact over steps 21-32" in v.says and "25 steps before the fault agreed too" in v.says


def test_other_noise_after_the_restore_is_different_from_the_first_step_naming_both_figures():
    v = judged(after=lambda n: {"loss": loss_at(n) + 0.01})
    assert v.status == "fail" and v.result == "different" and v.first.n == 21 and v.first.figure == "loss", v
    assert f"{loss_at(21) + 0.01:g}" in v.says and f"{loss_at(21):g} uninterrupted" in v.says


def test_a_tolerance_passes_a_small_difference_and_says_the_largest():
    v = judged(tolerance=1e-3, after=lambda n: {"loss": loss_at(n) * (1 + 1e-4)})
    assert v.status == "pass" and v.result == "within" and "the largest" in v.says, v
    assert judged(tolerance=1e-5, after=lambda n: {"loss": loss_at(n) * (1 + 1e-4)}).status == "fail"


def test_a_difference_beyond_the_steps_compared_is_not_seen():
    v = judged(steps=3, after=lambda n: {"loss": loss_at(n) + 1} if n > 25 else {})
    assert v.status == "pass" and v.steps == 3, v


def test_runs_that_differ_before_the_fault_are_not_deterministic_and_unknown():
    v = judged(before=lambda n: {"loss": loss_at(n) + 0.5} if n == 7 else {}, after=lambda n: {"loss": 99.0})
    assert v.status == "unknown" and "before the fault already" in v.says and "step 7" in v.says, v


def test_an_uninterrupted_run_that_restored_a_checkpoint_is_unknown():
    v = judged(twin_said={"restored": 20, "restored_from": "/shared/ckpt/step_20"})
    assert v.status == "unknown" and "restored step 20 from /shared/ckpt/step_20" in v.says, v


def test_no_uninterrupted_steps_or_none_after_the_restore_is_unknown():
    assert judged(twin_steps=[], twin_said={"error": "the job exited (code 1)"}).status == "unknown"
    v = judged(twin_steps=range(1, RESTORED + 1), twin_said={"error": "it reached step 20 of 32"})
    assert v.status == "unknown" and "no step after the restore" in v.says and "reached step 20" in v.says, v


def test_a_digest_must_be_equal_whatever_the_tolerance():
    v = judged(tolerance=0.5, after=lambda n: {"digest": "abc" if n < 24 else "abd"},
               twin=lambda n: {"digest": "abc"}, before=lambda n: {"digest": "abc"})
    assert v.status == "fail" and v.first.n == 24 and v.first.figure == "digest", v


@pytest.mark.parametrize("bad, same", [(math.nan, False), (math.inf, False), (-math.inf, False)])
def test_nan_and_inf_are_never_within_a_tolerance(bad, same):
    v = judged(tolerance=1.0, after=lambda n: {"loss": bad} if n == 22 else {})
    assert v.status == "fail" and v.first.n == 22, v


def test_both_runs_diverging_alike_are_the_same():
    assert rel_diff(math.nan, math.nan) == 0 and rel_diff(math.inf, math.inf) == 0
    assert rel_diff(1.0, None) == math.inf and rel_diff("a", 1.0) == math.inf and rel_diff(0.0, 0.0) == 0
    v = judged(after=lambda n: {"loss": math.nan} if n > 30 else {}, twin=lambda n: {"loss": math.nan} if n > 30 else {})
    assert v.status == "pass", v


def test_steps_out_of_order_or_printed_twice_keep_their_first_line():
    h = History()
    for n in (3, 1, 2):
        h.record("probe", "step", t=float(n), n=n, loss=float(n))
    h.record("probe", "step", t=4.0, n=2, loss=99.0)  # printed again later: the first one counts
    out = twin_steps_of(list(h))
    assert [s["n"] for s in out] == [1, 2, 3] and out[1]["loss"] == 2.0


def test_empty_histories_are_unknown_not_a_crash():
    assert judge(compare([], [], None, []), 0.0).status == "unknown"
    assert judge(compare([], [], RESTORED, []), 0.0).status == "unknown"


def test_the_slo_fails_naming_the_step_and_what_matched_and_is_unknown_without_a_run():
    h, before, after = history(after=lambda n: {"loss": loss_at(n) + 0.01})
    m = Measurements(restored_step=RESTORED, uninterrupted=compare(before, after, RESTORED, list(h)), t_fault=1.0)
    j = Judging(slo=SLO(matches_uninterrupted={}), m=m, watched=10.0, baseline=None)
    _judge_matches_uninterrupted(j)
    assert j.results[0].status == "fail", j.results
    assert "at step 21 its loss was" in j.reasons[0] and "lr, samples matched" in j.reasons[0], j.reasons
    j = Judging(slo=SLO(matches_uninterrupted={}), m=Measurements(restored_step=RESTORED, t_fault=1.0), watched=10.0,
                baseline=None)
    _judge_matches_uninterrupted(j)
    assert j.results[0].status == "unknown" and "not made" in j.results[0].detail


def test_a_tolerance_that_is_not_a_number_is_refused():
    with pytest.raises(ValueError):
        SLO(matches_uninterrupted={"tolerance": math.nan})
    with pytest.raises(ValueError):
        SLO(matches_uninterrupted={"tolerance": -1})


def test_ranks_that_print_different_losses_are_compared_rank_for_rank():
    """Each rank prints its own loss; the lines come in whatever order the logs are read. The
    comparison (and restore_fidelity's series) keeps to the lowest rank that prints one."""
    h = History()
    for n in range(1, FAULT + 1):
        for rank in ((1, 0) if n % 2 else (0, 1)):
            h.record("probe", "step", t=float(n) + rank / 10, n=n, rank=rank, loss=loss_at(n) + rank)
    before = h.of("step")
    for n in range(RESTORED + 1, LAST + 1):
        for rank in (1, 0):
            h.record("probe", "step", t=100.0 + n + rank / 10, n=n, rank=rank, loss=loss_at(n) + rank)
    after = h.of("step")[len(before):]
    h.record("drillbit", "uninterrupted", run_dir="/r", until_step=LAST, reached=LAST)
    for n in range(1, LAST + 1):
        h.record("drillbit", "uninterrupted.step", n=n, loss=loss_at(n))  # rank 0's, as recorded
    v = judge(compare(before, after, RESTORED, list(h)), 0.0)
    assert v.status == "pass" and v.result == "exact", v


def test_the_second_run_is_refused_for_a_job_it_cannot_start_from_nothing():
    from drillbit.loop.preflight import _uninterrupted_refusals
    from drillbit.spec.config import BUILTIN_JOBS
    from drillbit.spec.load import catalogue
    from drillbit.faults.loading import load_drill

    spec = load_drill(catalogue()["restore-exact"])
    job = BUILTIN_JOBS["reference-augment"]
    assert _uninterrupted_refusals(spec, job, "reference-augment") == []
    shared = job.model_copy(update={"checkpoint": job.checkpoint.model_copy(update={"dir": "/shared/ckpt"})})
    said = _uninterrupted_refusals(spec, shared, "mine")
    assert said and "/shared/ckpt" in said[0] and "save over them" in said[0], said
    attached = job.model_copy(update={"launch": None, "attach_pid": 1})
    assert "attached to" in _uninterrupted_refusals(spec, attached, "mine")[0]
    plain = spec.model_copy(update={"slo": spec.slo.model_copy(update={"matches_uninterrupted": None})})
    assert _uninterrupted_refusals(plain, shared, "mine") == []



# --- the adversary's findings (helper-13) ----------------------------------------------------------
def test_a_figure_one_run_did_not_print_at_a_step_is_not_a_difference():
    v = judged(twin=lambda n: {"loss": None} if n == LAST else {})
    assert v.status == "pass" and v.result == "exact", v
    v = judged(after=lambda n: {"loss": None} if n == 22 else {})
    assert v.status == "pass", v


def test_a_rank_whose_lines_carry_no_figure_never_decides():
    """Rank 1 prints its step lines without a loss, sometimes before rank 0's: the comparison keeps
    to rank 0's lines, which carry it."""
    h = History()
    for n in range(1, FAULT + 1):
        h.record("probe", "step", t=float(n), n=n, rank=1)
        h.record("probe", "step", t=float(n) + 0.1, n=n, rank=0, **healthy(n))
    before = h.of("step")
    for n in range(RESTORED + 1, LAST + 1):
        h.record("probe", "step", t=100.0 + n, n=n, rank=1)
        h.record("probe", "step", t=100.1 + n, n=n, rank=0, **healthy(n))
    after = h.of("step")[len(before):]
    h.record("drillbit", "uninterrupted", run_dir="/r", until_step=LAST, reached=LAST)
    for n in range(1, LAST + 1):
        h.record("drillbit", "uninterrupted.step", n=n, **healthy(n))
    v = judge(compare(before, after, RESTORED, list(h)), 0.0)
    assert v.status == "pass" and v.result == "exact", v


def test_no_step_before_the_fault_in_common_is_unknown_never_a_pass():
    """An uninterrupted run that resumed from the drill's checkpoint (a folder the job hard-codes)
    begins past the fault: nothing shows the job deterministic, or that run started from nothing."""
    v = judged(twin_steps=range(FAULT + 1, LAST + 1))
    assert v.status == "unknown" and "no step before the fault" in v.says and f"began at {FAULT + 1}" in v.says, v


def test_figures_that_are_not_numbers_in_both_runs_tell_nothing():
    nan = lambda n: {"loss": math.nan, "lr": None, "samples": None}  # noqa: E731
    v = judged(before=nan, after=nan, twin=nan)
    assert v.status == "unknown", v
    v = judged(twin=lambda n: {"loss": None, "lr": None, "samples": None})
    assert v.status == "unknown" and "no figure in common" in v.says, v


def test_a_checkpoint_or_log_that_climbs_out_of_the_run_folder_is_refused():
    from drillbit.loop.preflight import _uninterrupted_refusals
    from drillbit.spec.config import BUILTIN_JOBS
    from drillbit.spec.load import catalogue
    from drillbit.faults.loading import load_drill

    spec = load_drill(catalogue()["restore-exact"])
    job = BUILTIN_JOBS["reference-augment"]
    for folder in ("{run_dir}/../ckpt", "/data/{run_dir}", "{run_dir}/../../shared/ckpt"):
        moved = job.model_copy(update={"checkpoint": job.checkpoint.model_copy(update={"dir": folder})})
        assert _uninterrupted_refusals(spec, moved, "mine"), folder
    logged = job.model_copy(update={"logs": ["/var/log/train.log"]})
    assert "/var/log/train.log" in _uninterrupted_refusals(spec, logged, "mine")[0]


@pytest.mark.parametrize("bad", ["true", "yes", "5", "1", "-1", ".nan", "'5%'"])
def test_a_tolerance_that_is_a_flag_or_not_below_one_is_refused(tmp_path, bad):
    from drillbit.faults.loading import load_drill
    from drillbit.spec.load import catalogue
    from drillbit.core.errors import SpecError

    text = catalogue()["restore-exact"].read_text().replace("matches_uninterrupted: {tolerance: 0}",
                                                            f"matches_uninterrupted: {{tolerance: {bad}}}")
    (tmp_path / "d.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_drill(tmp_path / "d.yaml")
    assert any(p.line and "tolerance" in str(p) for p in err.value.problems), err.value.problems


def test_a_graded_drill_or_a_campaign_cannot_ask_for_it(tmp_path):
    from drillbit.core.errors import SpecError
    from drillbit.faults.loading import load_drill
    from drillbit.runs.campaign import load_campaign
    from drillbit.spec.load import catalogue

    text = catalogue()["slow-rank-reach"].read_text().replace("slo:\n", "slo:\n  matches_uninterrupted: {}\n", 1)
    (tmp_path / "g.yaml").write_text(text)
    with pytest.raises(SpecError, match="a graded drill"):
        load_drill(tmp_path / "g.yaml")
    campaign = catalogue()["kill-rank"].parents[1] / "campaigns" / "mixed-faults.yaml"
    ctext = campaign.read_text().replace("\nslo:\n", "\nslo:\n  matches_uninterrupted: {}\n", 1)
    (tmp_path / "c.yaml").write_text(ctext)
    with pytest.raises(SpecError, match="no uninterrupted run"):
        load_campaign(tmp_path / "c.yaml")
