"""The gate on a detector's reach (#58), as a user runs it: `drill gate` of a suite holding a
graded drill (grade: + slo.reach) against a job profile of the user's own, described in a
project folder's drill.yaml the way the README's reference-slow is. The healthy profile
passes: its fleet-median straggler detector names a 10% slower rank in both repeats, and
blames no one in the quiet gaps. Then the user raises the detector's threshold to 20% (the
change a gate is for); the same gate fails, naming the level the detector went blind at,
and its summary draws the curve before (the last passing run) and after, side by side. The
verdicts are asserted, never a time."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli

pytestmark = [pytest.mark.slow]

PROFILE = """default_cluster: local-process
default_job: mydetector
reports_dir: reports
jobs:
  mydetector:
    description: the reference job{extra_words}
    presets: [reference, torchrun]
    launch:
      command: ["{{python}}", "-m", "drillbit.fixtures.reference.launch", "--run-dir", "{{run_dir}}/job"{extra}]
    ranks: {{cmdline: '-m drillbit\\.fixtures\\.reference\\.train\\b', exclude_cmdline: 'torch\\.distributed\\.run'}}
    launcher: 'torch\\.distributed\\.run|drillbit\\.fixtures\\.reference\\.launch'
    logs: ["{{run_dir}}/job/events.log", "{{run_dir}}/job/launcher.log"]
    checkpoint: {{dir: "{{run_dir}}/job/ckpt", layout: reference}}
"""

DRILL = """name: reach-10pct
class: fail-slow
summary: one rank 10% slower, twice in one launch; the detector must name it both times
fault:
  type: slow-rank
  targets: {ranks: [2]}
  params: {period_ms: 100}
  trigger: {at_step: 20}
steady: {warmup_steps: 3}
observe: {until_steps_after_recovery: 3, window: 10s}
grade: {param: slowdown, levels: [10%], repeats: 2, gap: 5s}
slo:
  reach: {at_most: 10%, false_blames_per_10k_steps: 0}
abort: {max_duration: 4m}
"""

SUITE = """name: reach-gate
description: the straggler detector's reach
drills: [reach-10pct.yaml]
"""


def _profile(project: Path, threshold: float | None) -> None:
    extra = f', "--straggler-threshold", "{threshold}"' if threshold is not None else ""
    words = f" with its straggler threshold at {threshold:.0%}" if threshold is not None else ""
    (project / "drill.yaml").write_text(PROFILE.format(extra=extra, extra_words=words))


def _gate(project: Path, env: dict[str, str]):
    return drill_cli("gate", "--suite", "reach-gate.yaml", "--json", cwd=project, env=env, timeout=600)


@pytest.mark.alone  # a fleet-median detector at 1.5%: another drill's load on 2 cores names a healthy rank (ci10)
@pytest.mark.xdist_group("alone")
def test_the_gate_fails_a_detector_whose_threshold_was_raised_and_shows_both_curves(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "reach-10pct.yaml").write_text(DRILL)
    (project / "reach-gate.yaml").write_text(SUITE)
    # a fleet median needs a fleet; and the reference job's 1 ms compute slice (the suite's 5 ms
    # slice hides most of a duty cycle's few-ms stops)
    env = {**{k: v for k, v in os.environ.items() if k != "DRILLBIT_REFERENCE_SLICE_MS"},
           "DRILLBIT_REFERENCE_NPROC": "4"}

    _profile(project, None)
    healthy = _gate(project, env)
    assert healthy.returncode == 0, healthy.stdout[:6000] + healthy.stderr[-3000:]
    result = json.loads(healthy.stdout)["drills"][0]
    assert result["verdict"] == "pass" and result["slos"][0]["name"] == "reach"
    assert result["graded"]["levels"][0]["detected"] == 2 and result["graded"]["null"]["steps"] > 0

    _profile(project, 0.2)  # the change: the same profile, its detector's threshold raised
    blind = _gate(project, env)
    assert blind.returncode == 1, blind.stdout[-3000:] + blind.stderr[-3000:]
    gated = json.loads(blind.stdout)
    result = gated["drills"][0]
    assert result["verdict"] == "fail"
    assert "slowdown 10% was detected in 0 of 2 repeats" in result["reasons"][0], result["reasons"]
    assert result["before"]["levels"][0]["detected"] == 2  # the last passing run's curve, kept beside it
    summary = Path(gated["outputs"]) / "summary.html"
    html = summary.read_text()
    assert "before: the last passing run" in html and "after: this run" in html and "<polyline" in html
    junit = (Path(gated["outputs"]) / "junit.xml").read_text()
    assert "<failure" in junit and "reach" in junit
