"""corrupt-checkpoint on a job in Megatron-LM's checkpoint layout and log format
(tests/integration/jobs/megatron_format.py), described with the built-in ``megatron`` preset
and layout as a user would. Megatron's load line names the folder it loads from
(``successfully loaded checkpoint from {load_dir} … at iteration N``), not the checkpoint:
judged by basename it once passed a job that had loaded the damaged checkpoint. Judged by
containment and step, and by what each rank read after the damage, it FAILs that job, and
PASSes the same job verifying a checksum and falling back to the iteration before."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve

pytestmark = pytest.mark.slow

JOB = Path(__file__).parent / "jobs" / "megatron_format.py"

CORRUPT = """name: corrupt-megatron
class: recovery-path
summary: flip bytes in the newest Megatron checkpoint, kill a rank, expect a fallback restore
fault:
  type: corrupt-checkpoint
  targets: {ranks: [1]}
  params: {mode: flip-bytes}
  trigger: {at_step: 21}   # saves every 5 iterations: iter_0000020 is the newest, iter_0000015 the one before;
                           # four steps (1.2 s) before iter_0000025 (a CI run triggered at 23 saw 25 saved before the kill)
steady: {warmup_steps: 3}
observe: {until_steps_after_recovery: 4, window: 60s}
slo: {detect_within: 30s, first_step_within: 45s}
abort: {max_duration: 3m}
"""


def drill(tmp_path: Path, *extra: str) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "3",
               "--monitor-interval", "0.5", str(JOB), "--save", "{run_dir}/ckpt", "--load", "{run_dir}/ckpt", *extra]
    job = {"presets": ["torchrun", "megatron"],
           "launch": {"command": command, "env": {"LOGLEVEL": "INFO"}},
           "ranks": {"cmdline": "megatron_format\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
           "logs": ["{run_dir}/job.out"],
           "checkpoint": {"dir": "{run_dir}/ckpt", "layout": "megatron"}}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "drill.yaml").write_text(json.dumps({"jobs": {"megatron": job}}))
    (tmp_path / "corrupt-megatron.yaml").write_text(CORRUPT)
    payload, _ = execute(resolve(str(tmp_path / "corrupt-megatron.yaml"), cluster="local-process", job="megatron",
                                 config_path=str(tmp_path / "drill.yaml")), reports_dir=str(tmp_path / "reports"))
    return payload


def test_a_megatron_job_that_loads_the_damaged_checkpoint_fails(tmp_path):
    r = drill(tmp_path)
    assert r["verdict"] == "fail" and r["exit_code"] == 1, r["reasons"]
    m = r["measurements"]
    assert (m["corrupted_checkpoint"], m["corrupted_step"], m["restored_step"]) == ("iter_0000020", 20, 20), m
    assert Path(m["restored_path"]).name == "ckpt"  # the line named the folder above the checkpoint
    slo = next(s for s in r["slos"] if s["name"] == "restore_skipped_corrupted")
    assert slo["status"] == "fail", slo
    witnesses = {w["name"]: w for w in m["damaged_restore"]["witnesses"]}
    assert witnesses["reads"]["loaded"] is True, witnesses
    assert "iter_0000020/mp_rank_00/model_optim_rng.pt after it was damaged" in witnesses["reads"]["says"], witnesses
    assert witnesses["restore line"]["loaded"] is True and witnesses["resumed"]["loaded"] is True, witnesses
    assert any("training resumed from step 20" in reason for reason in r["reasons"]), r["reasons"]
    assert all(h["verified"] for h in r["fault"]["heals"]), r["fault"]["heals"]


def test_the_same_job_verifying_its_checksum_falls_back_and_passes(tmp_path):
    r = drill(tmp_path, "--verify")
    assert r["verdict"] == "pass" and r["exit_code"] == 0, r["reasons"]
    m = r["measurements"]
    assert (m["corrupted_checkpoint"], m["restored_step"]) == ("iter_0000020", 15), m
    assert m["rejected_corrupted"] is None  # Megatron prints no line for a refused checkpoint: not known from it
    slo = next(s for s in r["slos"] if s["name"] == "restore_skipped_corrupted")
    assert slo["status"] == "pass" and "the damaged one was rejected" in slo["detail"], slo
    witnesses = {w["name"]: w for w in m["damaged_restore"]["witnesses"]}
    assert witnesses["reads"]["loaded"] is False and witnesses["resumed"]["loaded"] is False, witnesses
