"""drill compare's verdict arithmetic and its tables, on payloads shaped like result.json:
a known defect's FAIL does not count, one that passes is pointed out, n/a is not a failure,
and an unexpected FAIL is exit code 1."""
from __future__ import annotations

from drillbit.runs.compare import Cell, Comparison, html, markdown
from drillbit.spec.models import SuiteSpec


def payload(verdict: str, reasons: list[str] | None = None, error_kind: str | None = None, blamed=(1,)) -> dict:
    return {"verdict": verdict, "reasons": reasons or [], "error": "boom" if error_kind else None,
            "error_kind": error_kind,
            "measurements": {"time_to_detect": 0.5, "time_to_first_step": 3.0, "lost_steps": 0, "goodput": 0.9,
                             "restored_step": 20, "restored_from": "peer" if verdict == "pass" else None,
                             "attribution": {"correct": list(blamed) == [1], "blamed": list(blamed), "hurt": [1]}}}


def comparison(*cells: Cell) -> Comparison:
    suite = SuiteSpec(name="stacks", drills=["blame-kill-rank"])
    return Comparison(suite=suite, jobs=sorted({c.job for c in cells}), cluster="local-process", cells=list(cells))


def test_known_defects_do_not_fail_the_comparison_but_a_new_failure_does():
    ok = Cell("torchft", "blame-kill-rank", payload("pass"))
    known = Cell("nvrx", "blame-kill-rank", payload("fail", ["the stack blamed rank 0"], blamed=(0,)), known="x")
    na = Cell("torchft", "corrupt-checkpoint", na="does not apply: no checkpoints")
    assert comparison(ok, known, na).exit_code == 0
    new = Cell("dlrover", "blame-kill-rank", payload("fail", ["the stack blamed no rank"], blamed=()))
    assert comparison(ok, known, na, new).exit_code == 1
    broken = Cell("dlrover", "blame-kill-rank", payload("aborted", error_kind="harness"), known="y")
    assert comparison(ok, known, broken).exit_code == 5  # a known defect never hides a harness error
    assert known.note().startswith("known defect: x. the stack blamed rank 0")
    fixed = Cell("nvrx", "blame-stall", payload("pass"), known="monitors blame both")
    assert "passes now" in fixed.note() and comparison(fixed).exit_code == 0


def test_tables_show_each_job_and_drill_with_whom_it_blamed():
    comp = comparison(Cell("torchft", "blame-kill-rank", payload("pass")),
                      Cell("nvrx", "blame-kill-rank", payload("fail", ["a | b"], blamed=(0, 1)), known="k"),
                      Cell("torchft", "corrupt-checkpoint", na="does not apply: no checkpoints"))
    md = markdown(comp)
    assert "| torchft | blame-kill-rank | 0.50 | 3.00 | 20 (peer) | 0 | 0.90 | ✓ 1 (hurt 1) | pass | all SLOs met |" in md
    assert "| nvrx | blame-kill-rank |" in md and "✗ 0, 1 (hurt 1) | fail (known) | known defect: k. a \\| b |" in md
    assert "| n/a | does not apply: no checkpoints |" in md
    page = html(comp)
    assert page.count("<tr>") == 4 and "fail (known)" in page and "a | b" in page


def test_a_drill_a_job_cannot_take_is_not_applicable():
    from drillbit.runs.compare import not_applicable
    from drillbit.runs.session import resolve

    assert not_applicable(resolve("kill-node", cluster="local", job="torchft"), "torchft") is None  # one launcher per node
    assert "runs on one node" in not_applicable(resolve("kill-node", cluster="local", job="nvrx"), "nvrx")
    assert "needs the job's checkpoints" in not_applicable(resolve("corrupt-checkpoint", job="torchft"), "torchft")
    assert not_applicable(resolve("corrupt-checkpoint", job="dlrover"), "dlrover") is None


def test_the_stacks_suite_names_known_jobs_and_a_drill_its_own_cluster(tmp_path):
    import pytest

    from drillbit.core.errors import SpecError
    from drillbit.spec.config import DrillConfig, with_builtins
    from drillbit.spec.load import load_suite

    config = with_builtins(DrillConfig())
    suite = load_suite("stacks", config)
    assert [e.cluster for e in suite.entries()][-1] == "local"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndrills:\n  - drill: kill-rank\n    known_defects:\n      torchfft: typo\n")
    with pytest.raises(SpecError) as err:
        load_suite(str(bad), config)
    assert "bad.yaml:5" in str(err.value) and "unknown job profile 'torchfft'" in str(err.value)


def defect(**over):
    from drillbit.spec.models import Defect

    fields = dict(id="huggingface/transformers#35782", url="https://github.com/huggingface/transformers/issues/35782",
                  title="auto-resume picks an incomplete checkpoint", stack="transformers", version="5.24.0",
                  reproduced="at-version", signature=r"trainer_state\.json", fixed="hf-autoresume-complete")
    return Defect(**{**fields, **over})


def test_a_defect_counts_as_known_only_when_its_verdict_named_it_from_the_jobs_own_lines():
    d = defect()
    named = Cell("hf-autoresume", "hf-autoresume-incomplete",
                 payload("fail", ["known defect huggingface/transformers#35782 (…): the job said, …"]),
                 known="k", defect=d, role="affected")
    fixed = Cell("hf-autoresume-complete", "hf-autoresume-incomplete", payload("pass"), defect=d, role="fixed")
    assert comparison(named, fixed).exit_code == 0
    other = Cell("hf-autoresume", "hf-autoresume-incomplete",
                 payload("fail", ["not clearly huggingface/transformers#35782: …"]), known="k", defect=d,
                 role="affected")
    assert comparison(other, fixed).exit_code == 1  # failed, but not on the defect's mark
    broken_fix = Cell("hf-autoresume-complete", "hf-autoresume-incomplete", payload("fail", ["x"]), defect=d,
                      role="fixed")
    assert comparison(named, broken_fix).exit_code == 1
    gone = Cell("hf-autoresume", "hf-autoresume-incomplete", payload("pass"), known="k", defect=d, role="affected")
    assert "not reproduced" in gone.note()
    md = markdown(comparison(named, fixed))
    row = next(line for line in md.splitlines() if line.startswith("| [huggingface/transformers#35782]"))
    assert "(https://github.com/huggingface/transformers/issues/35782)" in row and "at-version" in row
    assert "`hf-autoresume`: FAIL, first step 3.0 s" in row and "`hf-autoresume-complete`: PASS" in row


def test_a_defect_needs_its_evidence_and_the_checker_names_it_only_on_it():
    import pytest
    from pydantic import ValidationError

    from drillbit.judging.checks.defect import recognise
    from drillbit.judging.checks.recovery import JobError, Measurements
    from drillbit.judging.checks.slo import SLOResult
    from drillbit.core.history import History

    with pytest.raises(ValidationError, match="needs its evidence"):
        defect(signature=None)
    m = Measurements(t_fault=1.0, job_errors=[JobError(attempts=[1, 2], rank=0, message=(
        "FileNotFoundError: [Errno 2] No such file or directory: 'out/checkpoint-10/trainer_state.json'"))])
    said = recognise(defect(), m, History(), [])
    assert said.startswith("known defect huggingface/transformers#35782 (auto-resume picks")
    assert "attempts 1–2, rank 0: FileNotFoundError" in said
    assert recognise(defect(), Measurements(t_fault=1.0), History(), []).startswith("not clearly")
    silent = defect(signature=None, check="restore_matches_save")
    slo = SLOResult(name="restore_matches_save", measurement="restored_digest", limit=1, measured=0, status="fail",
                    detail="step 15: saved a, restored b")
    assert "restore_matches_save failed (step 15: saved a, restored b)" in recognise(silent, m, History(), [slo])
    assert recognise(silent, m, History(), [slo.model_copy(update={"status": "pass"})]).startswith("not clearly")


def test_the_known_defects_suite_runs_each_drill_on_its_affected_and_its_fixed_job():
    from drillbit.runs.compare import _defect_plan
    from drillbit.spec.config import DrillConfig, with_builtins
    from drillbit.spec.load import load_suite

    suite = load_suite("known-defects", with_builtins(DrillConfig()))
    plan, problems = _defect_plan(suite, lambda entry: "local-process", None)
    assert problems == []
    pairs = [(job, role) for job, _, _, role in plan]
    assert ("hf-autoresume", "affected") in pairs and ("hf-autoresume-complete", "fixed") in pairs
    assert ("redo-save-guard", "affected") in pairs and ("async-save-copy", "fixed") in pairs
    for _, _, resolved, _ in plan:
        assert resolved.spec.defect is not None and resolved.cluster == "local-process"


def test_two_jobs_show_what_changed_in_each_verdict_and_figure():
    from drillbit.runs.compare import changes, versions_line

    def at(detect, first, verdict):
        p = payload(verdict)
        p["measurements"].update(time_to_detect=detect, time_to_first_step=first)
        return p

    comp = comparison(Cell("nvrx-old", "blame-stall", at(10.0, 30.0, "pass")),
                      Cell("nvrx-new", "blame-stall", at(12.5, None, "fail")),
                      Cell("nvrx-old", "kill-rank", at(1.0, 5.0, "pass")),
                      Cell("nvrx-new", "kill-rank", at(1.0, 4.0, "pass")))
    comp.jobs = ["nvrx-old", "nvrx-new"]
    comp.presets = {"nvrx-old": ["nvrx", "torchrun"], "nvrx-new": ["torchrun", "nvrx"]}
    comp.job_versions = {"nvrx-old": {"nvidia-resiliency-ext": "0.4.1"}, "nvrx-new": {"nvidia-resiliency-ext": "0.7.0"}}
    rows = {r["drill"]: r for r in changes(comp)}
    assert rows["blame-stall"]["verdict"] == "pass → **fail**"
    assert rows["blame-stall"]["detect s"] == "10.00 → 12.50 (+2.50)" and rows["blame-stall"]["first step s"] == "30.00 → —"
    assert rows["kill-rank"]["verdict"] == "pass" and rows["kill-rank"]["first step s"] == "5.00 → 4.00 (-1.00)"
    assert rows["kill-rank"]["detect s"] == "1.00, same"
    assert versions_line(comp) == "nvrx-old: nvidia-resiliency-ext 0.4.1; nvrx-new: nvidia-resiliency-ext 0.7.0"
    assert "What changed from `nvrx-old` to `nvrx-new`" in markdown(comp)


def test_a_jobs_own_interpreter_is_asked_for_its_versions_and_names_python_in_its_command():
    import sys

    from drillbit.runs.compare import versions
    from drillbit.spec.config import LaunchSpec
    from drillbit.transport.nodes import with_python

    found = versions(["torchrun", "hf-trainer"], python=sys.executable)
    assert found["torch"].startswith("2.13") and found["transformers"]
    assert versions(["torchrun"], python="/nonexistent/python")["torch"] == "not found by /nonexistent/python"
    spec = LaunchSpec(command=["{python}", "-m", "x"], python="/opt/{node}/bin/python")
    assert with_python(spec, {"python": "/usr/bin/python3", "node": "n1"})["python"] == "/opt/n1/bin/python"
    assert with_python(LaunchSpec(command=["x"]), {"python": "p"}) == {"python": "p"}


def test_a_suite_that_is_not_of_known_defects_needs_its_jobs():
    import pytest

    from drillbit.runs.compare import _defect_plan
    from drillbit.core.errors import ConfigError
    from drillbit.spec.config import DrillConfig, with_builtins
    from drillbit.spec.load import load_suite

    with pytest.raises(ConfigError, match="--jobs: give the job profiles to compare; blame-kill-rank in suite stacks"):
        _defect_plan(load_suite("stacks", with_builtins(DrillConfig())), lambda entry: None, None)
