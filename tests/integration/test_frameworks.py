"""Jobs built with the frameworks people train with, drilled through a drill.yaml alone: a
Hugging Face Trainer job and a Lightning job (tests/integration/jobs/), each 3 ranks of DDP
on CPU under torchrun, read by the built-in hf-trainer / lightning and torchrun presets,
with their checkpoints in their own layouts. Nothing in drillbit knows these scripts.

kill-rank PASSes when the job resumes from its newest checkpoint and FAILs when the same job
starts over. corrupt-checkpoint damages the newest checkpoint in the framework's own layout
and FAILs both: neither framework verifies a checkpoint before it loads it (measured here,
transformers 5.25 and lightning 2.6.6), so the restart trains on from damaged weights. Its
heal puts every byte back, or keeps the job's newer file where the job has saved over it."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from drillbit.spec.checkpoints import CheckpointSpec, scan
from drillbit.judging.probes.preset import load, matcher
from drillbit.judging.probes.tail import FileFollower
from drillbit.runs.session import execute, resolve
from tests.integration.short import short_window
from tests.integration.ranks import NPROC

# whether the frameworks are installed, without importing them: an import here would cost every
# xdist worker Lightning's 3.7 CPU-s at collection (the jobs import them, in their own processes)
pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("transformers", "lightning")),
                                reason="needs transformers and lightning (the stacks extra)")

HERE = Path(__file__).parent
JOBS = {
    "hf": {"script": "hf_trainer.py", "presets": ["torchrun", "hf-trainer"], "layout": "hf", "out": "{run_dir}/out"},
    "lightning": {"script": "lightning_job.py", "presets": ["torchrun", "lightning"], "layout": "lightning",
                  "out": "{run_dir}/out"},
}
CKPT_DIR = {"hf": "{run_dir}/out", "lightning": "{run_dir}/out/checkpoints"}


def config(tmp_path: Path, *extra: str) -> Path:
    """The drill.yaml a team would write for these two jobs (here as JSON, which is YAML)."""
    jobs = {}
    for name, job in JOBS.items():
        command = ["{python}", "-m", "torch.distributed.run", "--nproc-per-node", NPROC, "--max-restarts", "3",
                   "--monitor-interval", "0.5", str(HERE / "jobs" / job["script"]), "--out", job["out"], *extra]
        jobs[name] = {"presets": job["presets"], "launch": {"command": command, "env": {"LOGLEVEL": "INFO"}},
                      "ranks": {"cmdline": job["script"].replace(".", "\\."), "exclude_cmdline": "torch\\.distributed\\.run"},
                      "logs": ["{run_dir}/job.out"], "checkpoint": {"dir": CKPT_DIR[name], "layout": job["layout"]}}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": jobs}))
    return path


def drill(name: str, job: str, tmp_path: Path, *extra: str, window: float | None = None, at_step: int | None = None,
          params: dict | None = None) -> tuple[dict, Path]:
    resolved = resolve(str(HERE / "drills" / f"{name}.yaml"), job=job, config_path=str(config(tmp_path, *extra)),
                       cluster="local-process")
    if window is not None:
        resolved = short_window(resolved, window)
    fault = resolved.spec.fault
    if at_step is not None:
        fault = fault.model_copy(update={"trigger": fault.trigger.model_copy(update={"at_step": at_step})})
    if params:
        fault = fault.model_copy(update={"params": {**fault.params, **params}})
    resolved = replace(resolved, spec=resolved.spec.model_copy(update={"fault": fault}))
    result, outcome = execute(resolved, reports_dir=str(tmp_path))
    return result, outcome.run_dir


@pytest.mark.slow
@pytest.mark.parametrize("job", ["hf", "lightning"])
def test_kill_rank_passes_when_the_framework_job_resumes(job, tmp_path):
    result, _ = drill("kill-rank-frameworks", job, tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    m = result["measurements"]
    assert m["time_to_detect"] is not None and m["restarts"] == 1  # torchrun's lines, read by its preset
    assert m["restored_step"] == 10 and m["lost_steps"] == m["step_at_fault"] - 10 <= 5
    if job == "hf":
        assert m["restored_path"].endswith("checkpoint-10")  # the Trainer's own "Loading model from" line
        # a learning rate that warms up moves every step: the Trainer's dict (no step number of its own,
        # before or after its bar's count as tqdm redraws) is bound to its step by its epoch fraction, and
        # the replayed steps 11-12 had the rates and losses they had before the fault (#56: a false FAIL)
        fidelity = next(s for s in result["slos"] if s["name"] == "restore_fidelity")
        assert fidelity["status"] == "pass", fidelity
        assert "learning rate: pass" in fidelity["detail"] and "loss: pass" in fidelity["detail"], fidelity


@pytest.mark.slow
def test_kill_rank_fails_naming_what_started_over_when_only_the_weights_come_back(tmp_path):
    """A restart that loads the newest checkpoint's weights into a fresh Trainer: the step count,
    the schedule, the optimizer and the data position start over, the weights do not (#56: it was
    told as 'restored step 0', as if nothing had come back)."""
    result, _ = drill("kill-rank-frameworks", "hf", tmp_path, "--resume", "weights", window=60, at_step=22)
    assert result["verdict"] == "fail", result["reasons"]
    m = result["measurements"]
    assert m["restored_step"] == 0 and m["first_step"] == 1
    lost = next(r for r in result["reasons"] if "steps were lost" in r)
    assert "the weights came back, but step counter and schedule started over" in lost, lost
    assert "the saved step" in lost and "at the start" in lost, lost


@pytest.mark.slow
# Lightning's is the extended tier's: its layout's choice of last.ckpt is unit-tested
# (test_layouts_and_presets.py), and the Trainer's drills the same path
@pytest.mark.parametrize("job", ["hf", pytest.param("lightning", marks=pytest.mark.extended)])
def test_corrupt_checkpoint_on_the_framework_layout_heals_byte_for_byte(job, tmp_path):
    # the spec's own window: this drill FAILs on what the restart loaded, not on a stall, so a
    # restart that comes late costs nothing to wait for. Lightning 2.6's SIGTERM handler
    # broadcasts to the other ranks (dist.broadcast); with a peer dead it blocks, so torchrun's
    # SIGTERM does not end that worker and torchrun waits out its 30 s grace before SIGKILL
    # (a 40 s window once ended before that restart: 'no restart ever produced a step')
    # Lightning's checkpoint gets NaN over half its largest tensor (nan-fill), the Trainer's flipped bytes
    mode = {"hf": "flip-bytes", "lightning": "nan-fill"}[job]
    result, run_dir = drill("corrupt-checkpoint-frameworks", job, tmp_path, params={"mode": mode})
    confirmed = [e for e in map(json.loads, (run_dir / "history.jsonl").read_text().splitlines())
                 if e["kind"] == "fault.confirmed"]
    evidence = confirmed[0]["data"]["evidence"][0]["data"]
    touched = Path(evidence["file"])
    expected = {"hf": "model.safetensors", "lightning": "last.ckpt"}[job]
    assert touched.name == expected, touched  # the layout chose the file the framework loads first
    heal = result["fault"]["heals"][0]
    assert heal["verified"] and heal["rank"] == 1, heal
    if "byte for byte" in heal["detail"]:
        # put back and verified by the agent; a job still running until teardown may have saved
        # last.ckpt again since (a loaded machine once made that window long enough)
        healed_at = next(json.loads(line)["t"] for line in (run_dir / "history.jsonl").read_text().splitlines()
                         if json.loads(line)["kind"] == "fault.heal")
        assert hashlib.sha256(touched.read_bytes()).hexdigest() == evidence["original_sha256"] \
            or touched.stat().st_mtime > healed_at, heal
    else:  # the job saved a newer file under the same name (last.ckpt): its data is kept, the original aside
        assert "since replaced or removed by the job" in heal["detail"], heal
    # neither framework checks a checkpoint before it loads it: flipped bytes inside the tensor data
    # load without an error, and the job trains on from damaged weights
    assert result["verdict"] == "fail", result["reasons"]
    assert f"restored {touched.name if job == 'lightning' else 'checkpoint-10'}, the checkpoint the harness had " \
           "corrupted: nothing verified it before loading" in result["reasons"][0], result["reasons"]
    if job == "lightning":
        # it trains on NaN from the restart on, where every loss before the fault was a number (#56: a NaN
        # loss was a fidelity pass, every comparison with it false)
        fidelity = next(s for s in result["slos"] if s["name"] == "restore_fidelity")
        assert fidelity["status"] == "fail" and "loss nan at step" in fidelity["detail"], fidelity


@pytest.mark.slow  # a Trainer run, 17 s
def test_hf_trainer_checkpoints_read_through_the_hf_layout(tmp_path):
    """The layout and the preset against what the library wrote and printed, in one process."""
    import subprocess

    log = tmp_path / "out.log"
    for steps in (6, 8):  # 8: resumes from checkpoint-6
        with open(log, "ab") as fh:
            subprocess.run([sys.executable, str(HERE / "jobs" / "hf_trainer.py"), "--out", str(tmp_path / "out"),
                            "--max-steps", str(steps), "--save-steps", "3", "--step-time", "0"],
                           stdout=fh, stderr=subprocess.STDOUT, check=True, timeout=300)
    found = scan(CheckpointSpec(dir=str(tmp_path / "out"), layout="hf"))
    assert [c.step for c in found] == [8, 6, 3]
    assert found[0].data[0].name == "model.safetensors" and found[0].metadata.name == "trainer_state.json"
    hits = [(k, d.get("n", d.get("step"))) for line in FileFollower(log).read_lines()
            for k, _, d in matcher(load("hf-trainer").signals).match(line)]
    steps = [n for k, n in hits if k == "step"]
    assert sorted(set(steps)) == list(range(1, 9))
    assert ("restore", 6) in hits and ("ckpt.save", 3) in hits and ("ckpt.save", 8) in hits
