"""The gate, the pytest plugin and the game-day prompts, on the real reference job."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from drillbit.runs.store import Store
from tests.integration.cli import drill_cli

HERE = Path(__file__).parent / "drills"
GATE_FAST = HERE / "suites" / "gate-fast.yaml"




def junit_cases(path: Path) -> list[ET.Element]:
    return ET.parse(path).getroot().findall(".//testcase")


@pytest.mark.slow
def test_gate_pre_deploy_passes_on_the_reference_job(tmp_path):
    proc = drill_cli("gate", "--suite", "pre-deploy", "--reports", str(tmp_path), "--junit", str(tmp_path / "j.xml"),
                     "--summary", str(tmp_path / "summary.md"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = junit_cases(tmp_path / "j.xml")
    assert [c.get("name") for c in cases] == ["kill-rank", "stall-nccl"]
    assert all(c.find("failure") is None and c.find("error") is None for c in cases)
    assert "Recovery gate: ✅ PASS" in (tmp_path / "summary.md").read_text()
    with Store(tmp_path / "drills.db") as store:
        assert {r["verdict"] for r in store.runs()} == {"pass"}


@pytest.mark.slow
def test_gate_fails_against_a_broken_profile(tmp_path):
    proc = drill_cli("gate", "--suite", str(HERE / "suites" / "gate-fast-broken.yaml"), "--job", "reference-norestarts",
                     "--reports", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [gate_dir] = tmp_path.glob("gate-*")
    [case] = junit_cases(gate_dir / "junit.xml")
    failure = case.find("failure")
    assert case.get("name") == "kill-rank-fast-short" and failure is not None
    message = failure.get("message")
    assert "the job never made a step again; the job exited (code 1)" in message  # torchrun --max-restarts 0


@pytest.mark.slow
def test_gate_fails_a_drill_that_recovers_slower_than_its_baseline(tmp_path):
    # the last passing run recovered in 1 s; today's ~6 s is far more than 20% worse (a machine
    # under load only makes today's slower, so this test runs beside others)
    with Store(tmp_path / "drills.db") as store:
        store.record({"drill": "kill-rank-fast", "cluster": "local-process", "job": "reference", "verdict": "pass",
                      "measurements": {"time_to_detect": 0.1, "time_to_first_step": 1.0}}, "earlier")
    proc = drill_cli("gate", "--suite", str(GATE_FAST), "--reports", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [gate_dir] = tmp_path.glob("gate-*")
    failure = junit_cases(gate_dir / "junit.xml")[0].find("failure")
    assert "time_to_first_step regressed" in failure.get("message")
    assert "against a baseline median of 1 " in failure.get("message")


@pytest.mark.slow
def test_pytest_plugin_runs_a_drill_in_a_test(pytester, tmp_path):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.drill({str(HERE / 'kill-rank-fast.yaml')!r})
        def test_kill_rank_recovers(drill):
            drill.assert_pass()
            assert drill.result["measurements"]["time_to_first_step"] > 0

        def test_marker_less_fixture_needs_a_run(drill):
            with pytest.raises(RuntimeError, match="no drill has run"):
                drill.result
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--drill-reports={tmp_path}", "-q")
    result.assert_outcomes(passed=2)
    assert list(tmp_path.glob("*kill-rank-fast/result.json"))


def test_gameday_declined_drills_are_skipped_and_reviewed(tmp_path):
    proc = drill_cli("gameday", "run", "game-day", "--reports", str(tmp_path), stdin="n\n" * 8)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "next drill: kill-rank" in proc.stdout and "next drill: stall-nccl" in proc.stdout
    [review] = tmp_path.glob("gameday-*/review.md")
    text = review.read_text()
    for name in ("kill-rank", "kill-node", "stall-nccl", "dataloader-hang", "corrupt-checkpoint", "restore-hang",
                 "fail-node-replacement", "slow-rank"):
        assert f"- [ ] {name}: skipped at the prompt" in text
    assert "**Incomplete game day:** 0 of 8 drills ran" in text and "PASS" not in text
    assert not list(tmp_path.glob("*-kill-rank"))  # nothing ran


def test_bad_suite_is_a_usage_error_and_touches_nothing(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("name: s\ndrills: [kill-rank, nope]\n")
    proc = drill_cli("suite", "run", str(bad), "--reports", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "unknown drill 'nope'" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_run_json_output_and_dry_run(tmp_path):
    proc = drill_cli("run", "stall-nccl", "--dry-run", "--reports", str(tmp_path))
    assert proc.returncode == 0 and "hang-collective" in proc.stdout and "nothing was launched" in proc.stdout
    assert not list(tmp_path.iterdir())
    proc = drill_cli("run", "nope")
    assert proc.returncode == 2 and "no such drill" in proc.stderr


@pytest.mark.slow
def test_a_repeated_drill_reports_its_spread_and_keeps_every_run(tmp_path):
    proc = drill_cli("run", str(HERE / "kill-rank-fast.yaml"), "--cluster", "local-process", "--repeat", "2",
                     "--reports", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    agg = json.loads(proc.stdout)
    assert agg["passes"] == 2 and agg["stats"]["time_to_first_step"]["n"] == 2
    s = agg["stats"]["time_to_first_step"]
    assert s["min"] <= s["median"] <= s["max"] and (Path(agg["folder"]) / "summary.md").exists()
    with Store(tmp_path / "drills.db") as store:
        assert [r["verdict"] for r in store.runs("kill-rank-fast")] == ["pass", "pass"]
