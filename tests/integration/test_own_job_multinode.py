"""A multi-node job of the user's own on the embedded Ray cluster, described from
docs/own-job.md alone: the page's drill.yaml as printed, its train.py (a data-parallel torchrun
script on gloo that logs and checkpoints as Megatron-LM does, nothing of drillbit's in it:
tests/integration/jobs/megatron_ddp.py), one torchrun per node on ``local``'s two nodes, run
with the commands the page shows from the project folder. No log is named: each node's
launcher output (job-node-0.out, job-node-1.out) is read as it is. kill-rank PASSes (torchrun
restarts both nodes' workers, which load the newest checkpoint); corrupt-checkpoint FAILs,
since the script loads its newest checkpoint without verifying it. The SSH and Slurm examples
of the same page run in test_ssh.py and test_slurm.py, with those engines' machines."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli
from tests.integration.own_docs import project

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time under -n


def history(folder: Path, drill: str) -> list[dict]:
    (path,) = (folder / "reports").glob(f"*-{drill}/history.jsonl")  # the page's relative reports_dir
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_pages_ray_example_passes_kill_rank_and_fails_corrupt_checkpoint(tmp_path):
    folder = project(tmp_path / "gpt", "# drill.yaml: a multi-node torchrun job on Ray")
    assert drill_cli("validate", "drill.yaml", cwd=folder, timeout=120).returncode == 0
    proc = drill_cli("run", "kill-rank", "--job", "gpt", "--cluster", "local", "--json", cwd=folder, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["restarts"] == 1 and m["restored_step"] % 5 == 0 and m["restored_step"] > 0, m
    events = history(folder, "kill-rank")
    steps = [e for e in events if e["kind"] == "step"]
    assert steps and all(e["data"].get("loss") is not None for e in steps)  # Megatron's training_log, parsed
    (run_dir,) = (folder / "reports").glob("*-kill-rank")
    assert sorted(p.name for p in run_dir.glob("job*.out")) == ["job-node-0.out", "job-node-1.out"]

    proc = drill_cli("run", "corrupt-checkpoint", "--job", "gpt", "--cluster", "local", "--json", cwd=folder,
                     timeout=420)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["verdict"] == "fail", result["reasons"]
    slo = next(s for s in result["slos"] if s["name"] == "restore_skipped_corrupted")
    assert slo["status"] == "fail", slo
    m = result["measurements"]
    assert m["restored_step"] == m["corrupted_step"], m  # it loaded the damaged checkpoint and trained on
