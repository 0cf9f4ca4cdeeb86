"""A job of the user's own, drilled through a drill.yaml alone: a plain training loop under
torchrun that reports through ``drillbit.job`` (tests/integration/jobs/own_loop.py). kill-rank
PASSes when it resumes from its checkpoint and FAILs the same loop without resuming; a
profile that cannot see progress is refused before anything launches; a job whose lines
match nothing ends with an error that says what the logs held."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from drillbit.runs.session import execute, resolve
from tests.integration.cli import drill_cli
from tests.integration.short import short_window
from tests.integration.ranks import NPROC

HERE = Path(__file__).parent
LOOP = HERE / "jobs" / "own_loop.py"


def config(tmp_path: Path, *extra: str, step_signal: bool = True) -> Path:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", NPROC, "--max-restarts", "3",
               "--monitor-interval", "0.5", str(LOOP), "--ckpt", "{run_dir}/ckpt", *extra]
    job = {"presets": ["drillbit", "torchrun"] if step_signal else ["torchrun"],
           "launch": {"command": command, "env": {"DRILLBIT_EVENTS": "{run_dir}/events.log", "LOGLEVEL": "INFO"}},
           "ranks": {"cmdline": "own_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
           "logs": ["{run_dir}/events.log", "{run_dir}/job.out"], "checkpoint": {"dir": "{run_dir}/ckpt",
               "layout": "glob", "glob": "step_*.json", "step_regex": "step_(\\d+)"}}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"mine": job}}))
    return path


@pytest.mark.slow
def test_kill_rank_passes_when_the_loop_resumes_and_fails_when_it_does_not(tmp_path):
    ok, _ = execute(resolve(str(HERE / "drills" / "kill-rank-own-loop.yaml"), job="mine",
                            config_path=str(config(tmp_path / "a"))), reports_dir=str(tmp_path / "a"))
    assert ok["verdict"] == "pass", ok["reasons"]
    m = ok["measurements"]
    assert m["restored_step"] % 5 == 0 and m["lost_steps"] == m["step_at_fault"] - m["restored_step"] < 5
    assert m["time_to_detect"] is not None  # torchrun's own line, read by the torchrun preset
    broken = resolve(str(HERE / "drills" / "kill-rank-own-loop.yaml"), job="mine",
                     config_path=str(config(tmp_path / "b", "--no-resume")))
    bad, _ = execute(short_window(broken, 20), reports_dir=str(tmp_path / "b"))
    assert bad["verdict"] == "fail", bad["reasons"]
    lost = next(s for s in bad["slos"] if s["name"] == "max_lost_steps")
    assert lost["status"] == "fail" and bad["measurements"]["restored_step"] == 0  # began again from step 1


def test_a_profile_that_cannot_see_progress_is_refused_before_launch(tmp_path):
    path = config(tmp_path, step_signal=False)
    proc = drill_cli("run", "kill-rank", "--job", "mine", "--config", str(path), "--cluster", "local-process",
                     "--reports", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no step signal and no heartbeat_file" in proc.stderr and not (tmp_path / "r").exists()


@pytest.mark.slow  # a real job under torchrun until its steady-state timeout
def test_no_steady_state_says_what_the_logs_held(tmp_path):
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"chatty": {
        "presets": ["drillbit"],
        "launch": {"command": [sys.executable, "-c", "import time\nfor i in range(99): print('epoch 0 batch', i, "
                               "flush=True); time.sleep(0.05)\ntime.sleep(30)"]},
        "ranks": {"cmdline": "never"}, "logs": ["{run_dir}/job.out", "{run_dir}/nothing.log"]}}}))
    spec = tmp_path / "quick.yaml"
    spec.write_text((HERE / "drills" / "kill-rank-fast.yaml").read_text().replace(
        "steady: {warmup_steps: 3}", "steady: {warmup_steps: 3, timeout: 4s}"))
    proc = drill_cli("run", str(spec), "--job", "chatty", "--config", str(path), "--cluster", "local-process",
                     "--reports", str(tmp_path / "r"), "--json", timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # nothing established; not a harness bug
    error = json.loads(proc.stdout)["error"]
    assert "no steady state: 0 steps in 4 s" in error and "presets ['drillbit']" in error
    assert "nothing.log" in error and "first lines no step signal matched: 'epoch 0 batch 0'" in error


@pytest.mark.slow  # a real job under torchrun, started by the test, drilled in place
def test_a_job_already_running_is_drilled_in_place_by_attach_pid_and_left_running(tmp_path):
    """docs/attach.md's one-node path: the job was started by someone else (here, the test, in
    a session of its own); the profile names its torchrun by pid and start time, and nothing
    is launched. kill-rank PASSes on the job's own restart, and the drill leaves the job
    running: it stops only what it launched."""
    import os
    import signal
    import subprocess

    import psutil

    run = tmp_path / "job"
    run.mkdir()
    env = {**os.environ, "DRILLBIT_EVENTS": str(run / "events.log"), "LOGLEVEL": "INFO"}
    with open(run / "job.out", "w") as out:
        job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", NPROC,
                                "--max-restarts", "3", "--monitor-interval", "0.5", str(LOOP), "--ckpt",
                                str(run / "ckpt")], stdout=out, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    try:
        profile = {"presets": ["drillbit", "torchrun"], "attach_pid": job.pid,
                   "attach_start_time": psutil.Process(job.pid).create_time(),
                   "ranks": {"cmdline": "own_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
                   "logs": [str(run / "events.log"), str(run / "job.out")]}
        (tmp_path / "drill.yaml").write_text(json.dumps({"reports_dir": "reports", "jobs": {"running": profile}}))
        proc = drill_cli("run", str(HERE / "drills" / "kill-rank-own-loop.yaml"), "--job", "running",
                         "--cluster", "local-process", "--json", cwd=tmp_path, timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["verdict"] == "pass", result["reasons"]
        assert result["measurements"]["restarts"] >= 1  # torchrun's restart, not a launch of the drill's
        # the README's relative reports_dir, taken from the project folder
        (history_file,) = (tmp_path / "reports").glob("*/history.jsonl")
        history = history_file.read_text()
        assert '"job.attach"' in history and '"job.launch"' not in history
        assert job.poll() is None, "the drill stopped a job it did not launch"
    finally:
        try:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def test_a_log_the_job_never_writes_ends_the_drill_at_its_grace_listing_what_the_launch_wrote(tmp_path):
    """The profile names {run_dir}/logs/train.log; the job writes {run_dir}/train.log. Within
    logs_grace of the job's ranks being found, and long before the steady-state timeout (300 s),
    the drill ends with exit 2 naming the log and listing the run folder's files."""
    job = ("import sys, time\nprint('starting', flush=True)\n"
           "with open(sys.argv[1] + '/train.log', 'a') as log:\n"
           "    for i in range(1, 2000):\n        print('step', i, file=log, flush=True); time.sleep(0.1)\n")
    path = tmp_path / "drill.yaml"
    path.write_text(json.dumps({"jobs": {"wrong-log": {
        "presets": ["torchrun"], "signals": [{"kind": "step", "pattern": "^step (?P<n>\\d+)$", "ints": ["n"]}],
        "launch": {"command": [sys.executable, "-c", job, "{run_dir}"], "env": {"RANK": "0"}},
        "ranks": {"cmdline": "train\\.log"}, "logs": ["{run_dir}/logs/train.log"], "logs_grace": "2s"}}}))
    proc = drill_cli("run", str(HERE / "drills" / "kill-rank-fast.yaml"), "--job", "wrong-log", "--config",
                     str(path), "--cluster", "local-process", "--reports", str(tmp_path / "r"), "--json", timeout=150)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # the description, not the job
    error = json.loads(proc.stdout)["error"]
    assert "logs/train.log was never written" in error and "no steady state" not in error, error
    assert "train.log (" in error and "job.out (" in error, error  # what the launch wrote, in the run folder
