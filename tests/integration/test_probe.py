"""``drill probe``: a job of the user's own (tests/integration/jobs/own_loop.py, reporting
through drillbit.job under torchrun) watched without touching it — its ranks, the signals
that fired with what they parsed, the step time, its checkpoints in their layout, and the
drills it can and cannot run; and a job whose lines no step signal matches (exit 2, the
lines shown)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli

HERE = Path(__file__).parent


@pytest.mark.slow  # runs the reference job, ~6 s
def test_probe_reports_what_drillbit_sees_and_touches_nothing(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--monitor-interval", "0.5",
               str(HERE / "jobs" / "own_loop.py"), "--ckpt", "{run_dir}/ckpt", "--step-s", "0.1"]
    job = {"presets": ["drillbit", "torchrun"],
           "launch": {"command": command, "env": {"DRILLBIT_EVENTS": "{run_dir}/events.log"}},
           "ranks": {"cmdline": "own_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
           "logs": ["{run_dir}/events.log", "{run_dir}/job.out"],
           "checkpoint": {"dir": "{run_dir}/ckpt", "layout": "glob", "glob": "step_*.json",
                          "step_regex": "step_(\\d+)"}}
    config = tmp_path / "drill.yaml"
    config.write_text(json.dumps({"jobs": {"mine": job}}))
    proc = drill_cli("probe", "--job", "mine", "--config", str(config), "--cluster", "local-process",
                     "--steps", "12", "--reports", str(tmp_path / "r"), "--json", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    assert found["ranks"] == {"local": [0, 1]} and found["steps_seen"] >= 12
    assert 0.05 < found["step_time_s"] < 1.0
    step = next(s for s in found["signals"] if s["kind"] == "step" and s["source"] == "drillbit")
    assert step["count"] >= 12 and isinstance(step["fields"]["n"], int) and "epoch s" in step["fields"]["t"]
    saves = next(s for s in found["signals"] if s["kind"] == "ckpt.save")
    assert saves["count"] >= 2 and saves["fields"]["path"].endswith(".json")
    ck = found["checkpoints"]
    assert ck["layout"] == "glob" and ck["count"] >= 2 and ck["found"][0]["step"] % 5 == 0
    cat = found["catalogue"]
    assert cat["kill-rank"]["ready"] and cat["corrupt-checkpoint"]["ready"]
    assert not cat["fail-node-replacement"]["ready"] and "replacement" in cat["fail-node-replacement"]["missing"][0]
    assert any("straggler" in m for m in cat["slow-rank"]["missing"])
    run_dir = Path(found["run_dir"])
    assert not (run_dir / "history.jsonl").exists()  # no drill ran; nothing was injected


@pytest.mark.slow  # runs a job, ~5 s
def test_probe_of_a_job_no_step_signal_matches_exits_2_and_shows_its_lines(tmp_path):
    config = tmp_path / "drill.yaml"
    config.write_text(json.dumps({"jobs": {"chatty": {
        "presets": ["drillbit"],
        "launch": {"command": [sys.executable, "-c", "import time\nfor i in range(999): print('epoch 0 batch', i, "
                               "flush=True); time.sleep(0.05)"]},
        "ranks": {"cmdline": "epoch 0 batch"}, "logs": ["{run_dir}/job.out"]}}}))
    proc = drill_cli("probe", "--job", "chatty", "--config", str(config), "--cluster", "local-process",
                     "--seconds", "3", "--reports", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no step signal fired" in proc.stderr and "epoch 0 batch 0" in proc.stdout
