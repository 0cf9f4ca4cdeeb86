"""A graded sweep on the real reference job (#58), as a user runs it: the installed `drill sweep
slow-rank --param slowdown=…` from a project folder. Two levels, one repeat each (the suite's
budget): a 30% slower rank is named by the job's fleet-median detector, and the report says the
level's rate, its Wilson interval and the rank it named; the reach is whatever the levels said,
never asserted from a timing."""
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


def test_a_graded_sweep_of_slow_rank_reports_each_level_and_a_reach(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "drill.yaml", project / "drill.yaml")
    shutil.copy(SPEC, project / "slow-rank-fast.yaml")
    # a fleet median needs a fleet: 4 ranks (the suite's reference job runs 2), rank 2 slowed
    env = {**os.environ, "DRILLBIT_REFERENCE_NPROC": "4"}
    done = drill_cli("sweep", "slow-rank-fast.yaml", "--param", "slowdown=0.5%,30%", "--repeats", "1",
                     "--cluster", "local-process", "--json", cwd=project, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    folder = Path(report["folder"])
    assert (folder / "graded.md").exists() and (folder / "graded.svg").read_text().startswith("<svg")
    assert (folder / "graded.png").exists() or (folder / "graded.png.txt").exists()
    levels = {s["level"]: s for s in report["levels"]}
    assert list(levels) == ["0.5%", "30%"]
    big = levels["30%"]
    assert big["counted"] == 1, big["not_counted"]
    assert big["detected"] == 1 and big["right_rate"] == 1.0 and big["false_blames"] == 0
    assert big["ci"] is not None and big["ci"][1] == 1.0
    assert report["reach"] is None or report["reach"]["level"] in ("0.5%", "30%")
    md = (folder / "graded.md").read_text()
    assert "reach:" in md and "95% CI" in md
    # a parameter the fault does not have: exit 2, nothing run
    wrong = drill_cli("sweep", "slow-rank-fast.yaml", "--param", "slowness=1%", "--cluster", "local-process",
                      cwd=project, timeout=120)
    assert wrong.returncode == 2 and "has no parameter 'slowness'" in wrong.stderr, wrong.stderr
