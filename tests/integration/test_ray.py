"""Drills on a real local Ray cluster of 2 nodes: one agent actor per node, the reference job
with one torchrun per node (c10d rendezvous), kill-node, the dead-man's switch with the
controller SIGKILLed, and clock-offset correction.

The nodes are network namespaces where this machine allows them (root, iproute2, nftables:
``local-ray-netns``, the head's GCS at 10.77.0.1:6379 in node 0's, a raylet in node 1's, each
node its own address and hostname), as a multi-node job runs; elsewhere two simulated nodes on
127.0.0.1 (``local``). On namespaces the tests also check what only separate nodes show: each
agent on its node, the rendezvous over node 0's address, and every namespace, Ray process and
temp dir gone after the drill, whatever its ending."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import psutil

from drillbit.runs.session import execute, resolve
from drillbit.transport import netcluster
from tests.integration import netleft
from tests.integration.short import short_window
from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray cluster at a time under -n
HERE = Path(__file__).parent / "drills"
NETNS = netleft.namespace_nodes()  # the nodes are network namespaces: the default where allowed
LOCAL = "local-ray-netns" if NETNS else "local"


@pytest.fixture(autouse=True)
def no_namespace_left():
    before = netleft.leftovers() if NETNS else set()
    yield
    if NETNS:
        netleft.assert_nothing_left(before)


def write_config(tmp_path: Path, **cluster: object) -> Path:
    lines = ["clusters:", "  ray2:", "    engine: ray", "    nodes: 2"] + (["    topology: netns"] if NETNS else [])
    lines += [f"    {k}: {json.dumps(v)}" for k, v in cluster.items()]
    path = tmp_path / "drill.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(drill: str, tmp_path: Path, *, cluster: str = LOCAL, job: str = "reference",
        config: Path | None = None, window: float | None = None) -> dict:
    resolved = resolve(str(HERE / f"{drill}.yaml"), cluster=cluster, job=job,
                       config_path=str(config) if config else None)
    payload, outcome = execute(short_window(resolved, window) if window else resolved, reports_dir=str(tmp_path))
    return {**payload, "run_dir": str(outcome.run_dir)}


def history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def topology_of(events: list[dict]) -> tuple[list[str], str]:
    """The namespaces the drill's topology was made of, and its run id."""
    [up] = [e for e in events if e["kind"] == "topology.up"]
    namespaces = up["data"]["namespaces"]
    return namespaces, namespaces[0].split("-")[1]


def ray_of(run_id: str) -> tuple[list[Path], list[int]]:
    """The nodes' Ray temp dirs (their sockets) and the processes that name them."""
    return (list(Path("/tmp").glob(f"dbit-ray-{run_id}-*")),
            [p.pid for p in psutil.process_iter(["cmdline"]) if f"dbit-ray-{run_id}" in " ".join(p.info["cmdline"] or ())])


def assert_across_namespaces(run_dir: Path, events: list[dict]) -> None:
    """What only nodes that are namespaces show: each agent ran on its node under its hostname,
    ranks on both, both torchruns rendezvoused at node 0's address and the Ray head is there;
    then the topology went down, verified by listing, with no Ray temp dir or process left."""
    namespaces, run_id = topology_of(events)
    netleft.assert_on_their_nodes(run_dir, events, {"node-0": "node-0", "node-1": "node-1"})
    assert (run_dir / "ray-address").read_text() == "10.77.0.1:6379"
    [down] = [e for e in events if e["kind"] == "topology.down"]
    assert down["data"]["verified"] and not any(ns in netcluster.listed() for ns in namespaces)
    assert ray_of(run_id) == ([], [])


def test_kill_rank_on_two_ray_nodes_with_skewed_agent_clocks(tmp_path):
    """node-0's agent reports time 2 s behind, node-1's 3 s ahead; the controller measures
    those offsets and puts each agent's evidence back on its own clock, so detection is not
    seconds early or late (rendezvous order decides which node holds rank 1)."""
    skew = {"node-0": -2.0, "node-1": 3.0}
    config = write_config(tmp_path)
    with pytest.MonkeyPatch.context() as env:  # a test aid, not a setting (transport.CLOCK_SKEW_ENV)
        env.setenv("DRILLBIT_TEST_CLOCK_SKEW", json.dumps(skew))
        result = run("kill-rank-fast", tmp_path, cluster="ray2", config=config)
    assert result["verdict"] == "pass", result["reasons"]
    events = history(Path(result["run_dir"]))
    ready = {e["node"] for e in events if e["kind"] == "agent.ready"}
    assert ready == {"node-0", "node-1"}
    offsets = {e["node"]: e["data"]["offset_s"] for e in events if e["kind"] == "agent.clock"}
    assert all(abs(offsets[node] - s) < 0.2 for node, s in skew.items()), offsets
    inject = next(e for e in events if e["kind"] == "fault.inject")
    assert inject["rank"] == 1
    confirmed = next(e for e in events if e["kind"] == "fault.confirmed")
    # corrected: the kill is seen after it was sent, and well within the skew
    assert 0 <= confirmed["t"] - inject["t"] < 2.0
    heal = next(e for e in events if e["kind"] == "fault.heal")
    end = next(e for e in events if e["kind"] == "drill.end")
    assert heal["node"] == inject["node"] and confirmed["t"] < heal["t"] <= end["t"]
    if NETNS:
        assert_across_namespaces(Path(result["run_dir"]), events)


def test_stall_nccl_on_two_ray_nodes(tmp_path):
    result = run("stall-nccl-fast", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    assert all(h["verified"] for h in result["fault"]["heals"])


def test_kill_node_recovers_on_the_nodes_left(tmp_path):
    result = run("kill-node-fast", tmp_path)
    assert result["verdict"] == "pass", result["reasons"]
    job_log = (Path(result["run_dir"]) / "job" / "events.log").read_text()
    worlds = [int(w) for w in re.findall(r"kind=worker\.start .*?world=(\d+)", job_log)]
    assert worlds[-1] * 2 == worlds[0], worlds  # the job went on with the surviving node's ranks: half the world


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
    _wait_for(lambda: any(line.startswith("t=") and " kind=step " in line and float(line.split()[0][2:]) > heal["t"]
                          for line in events.read_text().splitlines()), 30, "a step after the heal")
    # then the agents stop the job, and the keeper takes the cluster down
    for node in ("node-0", "node-1"):
        _wait_for(lambda n=node: (run_dir / f"agent-{n}.deadman.jsonl").exists() and "orphan.done" in
                  (run_dir / f"agent-{n}.deadman.jsonl").read_text(), 60, f"{node}'s agent to finish")
    keeper_log = run_dir / "ray-keeper.log"
    assert keeper_log.exists()
    if NETNS:  # the keeper stops every node's Ray, then the reaper takes the namespaces down
        namespaces, run_id = topology_of(history(run_dir))
        _wait_for(lambda: not any(ns in netcluster.listed() for ns in namespaces) and ray_of(run_id) == ([], []),
                  240, "the namespaces and every Ray process and temp dir of them to go")
    # the controller never collected them: `drill report` merges them into the one record
    subprocess.run([drill_script(), "report", str(run_dir)], capture_output=True, timeout=120)
    merged = [e for e in history(run_dir) if e["source"].startswith("agent:")]
    assert {e["kind"] for e in merged} >= {"agent.lost", "fault.heal", "job.stop", "orphan.done"}
    assert any(e["kind"] == "fault.heal" and e["node"] == target["node"] for e in merged)
