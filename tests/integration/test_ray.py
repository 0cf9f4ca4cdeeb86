"""Drills on a real local Ray cluster of 2 simulated nodes on 127.0.0.1: one agent actor
per node, the reference job with one torchrun per node (c10d rendezvous), kill-node, the
dead-man's switch with the controller SIGKILLed, and clock-offset correction."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from drillbit.session import execute, resolve
from tests.integration.short import short_window
from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time under -n
HERE = Path(__file__).parent / "drills"


def write_config(tmp_path: Path, **cluster: object) -> Path:
    lines = ["clusters:", "  ray2:", "    engine: ray", "    nodes: 2"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in cluster.items()]
    path = tmp_path / "drill.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(drill: str, tmp_path: Path, *, cluster: str = "local", job: str = "reference",
        config: Path | None = None, window: float | None = None) -> dict:
    resolved = resolve(str(HERE / f"{drill}.yaml"), cluster=cluster, job=job,
                       config_path=str(config) if config else None)
    payload, outcome = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    return {**payload, "run_dir": str(outcome.run_dir)}


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_kill_rank_on_two_ray_nodes_with_skewed_agent_clocks(tmp_path):
    """node-0's agent reports time 2 s behind, node-1's 3 s ahead; the controller measures
    those offsets and puts each agent's evidence back on its own clock, so detection is not
    seconds early or late (rendezvous order decides which node holds rank 2)."""
    skew = {"node-0": -2.0, "node-1": 3.0}
    config = write_config(tmp_path, simulate_clock_skew=skew)
    result = run("kill-rank-fast", tmp_path, cluster="ray2", config=config)
    assert result["verdict"] == "pass", result["reasons"]
    events = history(Path(result["run_dir"]))
    ready = {e["node"] for e in events if e["kind"] == "agent.ready"}
    assert ready == {"node-0", "node-1"}
    offsets = {e["node"]: e["data"]["offset_s"] for e in events if e["kind"] == "agent.clock"}
    assert all(abs(offsets[node] - s) < 0.2 for node, s in skew.items()), offsets
    inject = next(e for e in events if e["kind"] == "fault.inject")
    assert inject["rank"] == 2
    confirmed = next(e for e in events if e["kind"] == "fault.confirmed")
    # corrected: the kill is seen after it was sent, and well within the skew
    assert 0 <= confirmed["t"] - inject["t"] < 2.0
    heal = next(e for e in events if e["kind"] == "fault.heal")
    end = next(e for e in events if e["kind"] == "drill.end")
    assert heal["node"] == inject["node"] and confirmed["t"] < heal["t"] <= end["t"]


def test_stall_nccl_on_two_ray_nodes(tmp_path):
    result = run("stall-nccl-fast", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    assert all(h["verified"] for h in result["fault"]["heals"])


def test_kill_node_recovers_on_the_nodes_left(tmp_path):
    result = run("kill-node-fast", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    job_log = (Path(result["run_dir"]) / "job" / "events.log").read_text()
    assert "world=2" in job_log  # the job went on with the surviving node's 2 ranks


def test_kill_node_fails_a_job_that_needs_every_node(tmp_path):
    result = run("kill-node-fast", tmp_path, job="reference-rigid", window=20)
    assert result["verdict"] == "fail"
    assert any("never made a step again" in r or "no first step" in r for r in result["reasons"]), result["reasons"]


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_deadman_heals_when_the_controller_is_sigkilled(tmp_path):
    """SIGKILL the controller in the middle of stall-nccl (no watchdog, so only the heal can
    unstick the job): each agent misses its heartbeats, SIGCONTs the stopped rank on its
    own, lets the job show it recovered, stops it, and the cluster goes down after."""
    config = write_config(tmp_path, deadman="3s", job_grace="10s")
    reports = tmp_path / "reports"
    proc = subprocess.Popen(
        [drill_script(), "run", str(HERE / "stall-nccl-fast.yaml"), "--cluster", "ray2",
         "--job", "reference-nowatchdog", "--config", str(config), "--reports", str(reports)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_dir = _wait_for(lambda: next(iter(reports.glob("*/history.jsonl")), None), 60, "the run folder").parent
        _wait_for(lambda: any(e["kind"] == "fault.confirmed" for e in history(run_dir)), 120, "the stall")
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    target = next(e for e in history(run_dir) if e["kind"] == "fault.inject")
    log = run_dir / f"agent-{target['node']}.deadman.jsonl"
    heal = _wait_for(lambda: next((r for r in map(json.loads, log.read_text().splitlines())
                                   if r["kind"] == "fault.heal"), None) if log.exists() else None, 30, "the heal")
    assert heal["data"]["by"] == "dead-man" and heal["data"]["pid"] == target["data"]["pid"]
    assert heal["data"]["healed"] and heal["data"]["verified"]
    assert heal["t"] - killed_at < 3 + 5  # the dead-man deadline plus a poll and a heal (controller's clock)
    # the job recovers: steps after the heal, made by the ranks the controller left stopped
    events = run_dir / "job" / "events.log"
    _wait_for(lambda: any(l.startswith("t=") and " kind=step " in l and float(l.split()[0][2:]) > heal["t"]
                          for l in events.read_text().splitlines()), 30, "a step after the heal")
    # then the agents stop the job, and the keeper takes the cluster down
    for node in ("node-0", "node-1"):
        _wait_for(lambda n=node: (run_dir / f"agent-{n}.deadman.jsonl").exists() and "orphan.done" in
                  (run_dir / f"agent-{n}.deadman.jsonl").read_text(), 60, f"{node}'s agent to finish")
    keeper_log = run_dir / "ray-keeper.log"
    assert keeper_log.exists()
    # the controller never collected them: `drill report` merges them into the one record
    subprocess.run([drill_script(), "report", str(run_dir)], capture_output=True, timeout=120)
    merged = [e for e in history(run_dir) if e["source"].startswith("agent:")]
    assert {e["kind"] for e in merged} >= {"agent.lost", "fault.heal", "job.stop", "orphan.done"}
    assert any(e["kind"] == "fault.heal" and e["node"] == target["node"] for e in merged)
