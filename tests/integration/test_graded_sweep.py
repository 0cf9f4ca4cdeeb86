"""A graded sweep on the real reference job (#58), as a user runs it: the installed `drill sweep
slow-rank --param slowdown=… --one-launch` from a project folder. The CI subset: two levels,
two repeats each, every repeat a segment of one launch after a quiet gap with no fault on. A
30% slower rank is named by the job's fleet-median detector in both repeats, and the report
says each level's rate, its Wilson interval and the rank it named, and the null level: the
steps with no fault on and what the detector blamed there. The reach is whatever the levels
said, never asserted from a timing."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SPEC = Path(__file__).parent / "drills" / "slow-rank-fast.yaml"


@pytest.mark.alone  # a fleet-median detector at 1.5%: another drill's load on 2 cores names a healthy rank (ci10)
@pytest.mark.xdist_group("alone")
def test_a_graded_sweep_of_slow_rank_reports_each_level_and_a_reach(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "drill.yaml", project / "drill.yaml")
    shutil.copy(SPEC, project / "slow-rank-fast.yaml")
    # a fleet median needs a fleet: 4 ranks (the suite's reference job runs 2), rank 2 slowed
    env = {**os.environ, "DRILLBIT_REFERENCE_NPROC": "4"}
    # two levels, given out of the axis's order; each 10 s (the detector names a rank some 16
    # steps, 4 s, into a fault): the test runs with nothing beside it, so every second is the suite's
    done = drill_cli("sweep", "slow-rank-fast.yaml", "--param", "slowdown=30%,0.5%", "--repeats", "2",
                     "--one-launch", "--window", "10", "--gap", "4", "--cluster", "local-process", "--json",
                     cwd=project, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    folder = Path(report["folder"])
    assert (folder / "graded.md").exists() and (folder / "graded.svg").read_text().startswith("<svg")
    assert (folder / "graded.png").exists() or (folder / "graded.png.txt").exists()
    levels = {s["level"]: s for s in report["levels"]}
    assert list(levels) == ["0.5%", "30%"]  # the axis's order, whatever the order given
    assert report["mode"] == "one" and report["segments_run"] == report["segments_planned"] == 4
    assert all(s["repeats"] == 2 for s in levels.values())
    big = levels["30%"]
    assert big["counted"] == 2, big["not_counted"]
    assert big["detected"] == 2 and big["right_rate"] == 1.0 and big["false_blames"] == 0
    assert big["ci"] is not None and big["ci"][1] == 1.0
    assert report["reach"] is None or report["reach"]["level"] in ("0.5%", "30%")
    # the null level: five quiet gaps (one before each segment, one after the last)
    null = report["null"]
    assert null["stretches"] == 5 and null["steps"] > 0 and null["false_blames"] >= 0
    md = (folder / "graded.md").read_text()
    assert "reach:" in md and "95% CI" in md and "null (no fault)" in md and "one launch" in md
    # the launch's own folder holds the report too, and drill report judges it again from its history
    launch = Path(report["run_dir"])
    again = drill_cli("report", str(launch), "--json", cwd=project, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    rejudged = json.loads(again.stdout)["graded_report"]
    assert [(s["level"], s["detected"], s["counted"]) for s in rejudged["levels"]] == \
        [(s["level"], s["detected"], s["counted"]) for s in report["levels"]]
    assert (launch / "graded.md").exists()
    # a parameter the fault does not have: exit 2, nothing run
    wrong = drill_cli("sweep", "slow-rank-fast.yaml", "--param", "slowness=1%", "--cluster", "local-process",
                      cwd=project, timeout=120)
    assert wrong.returncode == 2 and "has no parameter 'slowness'" in wrong.stderr, wrong.stderr
