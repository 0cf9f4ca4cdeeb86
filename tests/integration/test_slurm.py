"""Engine slurm on a real Slurm (Debian's slurm-wlm 22.05 and munge): munged, slurmctld and
three ``slurmd -N n1|n2|n3`` from a configuration in the test's folder (drillbit.core.slurm.local),
started and stopped by each test. Where this machine allows namespaces (root, iproute2,
nftables) the nodes are namespace nodes, as a multi-node cluster runs: each slurmd in its
node's namespace on the node's address (10.77.0.1-3) and hostname, slurmctld on the switch's,
reached through it (``slurm_via``); elsewhere every daemon is on 127.0.0.1. The reference job runs as a batch
job (``sbatch -N 1 --requeue``), the agents inside its allocation (``srun --overlap``).

Two settings make the two sides: the requeue hold (the credential lifetime; Slurm's default
120 s, 5 s in the tuned cluster) and the scheduler's pass interval (60 s by default, 1 s
tuned); and ReturnToService=2, which returns a DOWN node whose slurmd still answers at once.
After every drill the failed node is up again and no process of the job is left.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drillbit.core.slurm.local import LocalSlurm, missing_binaries
from drillbit.core.slurm.scheduler import job_processes
from drillbit.transport import netcluster
from drillbit.transport.netcluster import Topology
from tests.integration import netleft
from tests.integration.cli import drill_script

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.xdist_group("slurm"),
              pytest.mark.skipif(bool(missing_binaries()), reason=f"needs Slurm: {missing_binaries()}"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the local Slurm runs as SlurmUser=root")]
HERE = Path(__file__).parent / "drills"
TUNED = {"requeue_hold": 5, "sched_interval": 1}
DEFAULTS = {"requeue_hold": 120, "sched_interval": 60}
NETNS = netleft.namespace_nodes()  # the nodes are namespace nodes: the default where allowed


def start_cluster(tmp_path: Path, topology: Topology | None = None, **settings) -> LocalSlurm:
    cluster = LocalSlurm(tmp_path / "slurm", topology=topology, **settings)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    (tmp_path / "drill.yaml").write_text(
        f"clusters:\n  slurm:\n    engine: slurm\n    slurm_conf: {cluster.conf}\n"
        f"    state_dir: {tmp_path / 'agents'}\n"  # the nodes' agents' registries: this test's, not the user's
        f"    slurm_via: {json.dumps(cluster.via)}\n")  # a namespace cluster's switch: where slurmctld listens
    return cluster


@pytest.fixture
def slurm_cluster(tmp_path, request):
    before = netleft.leftovers() if NETNS else set()
    topology = Topology(3) if NETNS else None
    if topology is not None:
        topology.up()
    try:
        cluster = start_cluster(tmp_path, topology, **getattr(request, "param", TUNED))
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        if topology is not None:
            assert topology.down() == []
            netleft.assert_nothing_left(before)


def run(tmp_path: Path, drill: str, *args: str, timeout: float = 300) -> tuple[int, dict]:
    proc = subprocess.run([drill_script(), "run", str(HERE / drill), "--cluster", "slurm", "--reports",
                           str(tmp_path / "reports"), "--json", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def history(tmp_path: Path) -> list[dict]:
    path = next((tmp_path / "reports").glob("*/history.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def job_id(events: list[dict]) -> str:
    return next(e["data"]["job_id"] for e in events if e["kind"] == "slurm.submit")


def all_up(cluster: LocalSlurm) -> dict[str, str]:
    deadline = time.time() + 30
    states = cluster.node_states()
    while time.time() < deadline and not all(s in ("IDLE", "MIXED", "ALLOCATED") for s in states.values()):
        time.sleep(0.25)
        states = cluster.node_states()
    return states


def assert_nothing_left(cluster: LocalSlurm, events: list[dict]) -> None:
    jid = job_id(events)
    info = cluster.slurm.job(jid)
    assert info is None or info.finished, info
    deadline = time.time() + 20
    while job_processes(jid) and time.time() < deadline:
        time.sleep(0.25)
    assert not job_processes(jid), [p.cmdline() for p in job_processes(jid)]
    states = all_up(cluster)
    assert all(s == "IDLE" for s in states.values()), states


def test_kill_rank_under_sbatch_recovers_inside_the_job(tmp_path, slurm_cluster):
    code, r = run(tmp_path, "kill-rank-slurm-fast.yaml")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["restarts"] == 1 and m["time_to_requeue"] is None  # torchrun restarted it; Slurm never requeued
    events = history(tmp_path)
    ready = [e for e in events if e["kind"] == "agent.ready" and e["node"] != "slurmctld"]
    assert [e["data"]["job_id"] for e in ready] == [job_id(events)]  # one agent, inside the job's allocation
    assert_nothing_left(slurm_cluster, events)


def test_node_down_requeues_and_reruns_on_another_node(tmp_path, slurm_cluster):
    code, r = run(tmp_path, "node-down-fast.yaml")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["failed_nodes"] == ["n1"] and m["rerun_nodes"] and "n1" not in m["rerun_nodes"]
    assert m["time_to_requeue"] < 5 and m["time_to_requeue"] <= m["time_to_restart"] <= m["time_to_first_step"]
    assert m["restored_step"] is not None and m["lost_steps"] <= 20
    events = history(tmp_path)
    ready = [e for e in events if e["kind"] == "agent.ready" and e["node"] != "slurmctld"]
    assert [(e["node"], e["data"]["restarts"]) for e in ready] == [("n1", 0), (m["rerun_nodes"][0], 1)]
    heal = next(e for e in events if e["kind"] == "fault.heal")
    assert heal["data"]["healed"] and heal["data"]["verified"]
    assert_nothing_left(slurm_cluster, events)


@pytest.mark.parametrize("slurm_cluster", [DEFAULTS], indirect=True)
def test_node_down_fails_with_slurms_default_requeue_hold(tmp_path, slurm_cluster):
    code, r = run(tmp_path, "node-down-hold-fast.yaml")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert m["time_to_requeue"] < 5  # requeued at once, then held
    assert any("no restart within 30 s" in reason for reason in r["reasons"]), r["reasons"]
    states = [e["data"] for e in history(tmp_path) if e["kind"] == "job.state"]
    assert any(s["state"] == "PENDING" and s["reason"] == "BeginTime" for s in states), states
    assert_nothing_left(slurm_cluster, history(tmp_path))


@pytest.mark.parametrize("slurm_cluster", [{**TUNED, "return_to_service": 2}], indirect=True)
def test_return_to_service_2_puts_the_rerun_back_on_the_failed_node(tmp_path, slurm_cluster):
    code, r = run(tmp_path, "node-down-fast.yaml")
    m = r["measurements"]
    assert code == 1 and r["verdict"] == "fail", r["reasons"]
    assert m["rerun_on_failed_node"] is True and m["rerun_nodes"] == ["n1"]
    assert any("ran again on n1, the node the fault took down" in reason for reason in r["reasons"]), r["reasons"]
    assert_nothing_left(slurm_cluster, history(tmp_path))


def test_node_crash_requeues_after_slurmd_timeout_and_heals_the_node(tmp_path, slurm_cluster):
    code, r = run(tmp_path, "node-crash-fast.yaml")
    m = r["measurements"]
    assert code == 0 and r["verdict"] == "pass", r["reasons"]
    assert m["time_to_requeue"] >= 10  # nothing reported the death: Slurm waited out SlurmdTimeout (10 s)
    assert "n1" not in m["rerun_nodes"]
    events = history(tmp_path)
    heal = next(e for e in events if e["kind"] == "fault.heal")
    assert "slurmd started again" in heal["data"]["detail"] and heal["data"]["verified"], heal["data"]
    assert_nothing_left(slurm_cluster, events)
    assert len([p for p in slurm_cluster.own_daemons() if p.name() == "slurmd"]) == 3
    if NETNS:
        topology = slurm_cluster.topology
        assert {n: f["NodeAddr"] for n, f in slurm_cluster.slurm.nodes().items()} == {
            "n1": "10.77.0.1", "n2": "10.77.0.2", "n3": "10.77.0.3"}
        # each node's agent ran in its node's namespace, under its hostname (n1 is node-0), and
        # the job's torchrun named its node's host
        ready = {(e["node"], e["data"]["host"]) for e in events if e["kind"] == "agent.ready" and e["node"] != "slurmctld"}
        assert ready and all(host == f"node-{int(n[1:]) - 1}" for n, host in ready), ready
        assert re.search(r"master_addr=node-[0-2]\b", next((tmp_path / "reports").glob("*/job/launcher.log")).read_text())
        # the heal started n1's slurmd again in n1's namespace
        [slurmd] = [p for p in slurm_cluster.own_daemons() if "n1" in p.cmdline()]
        assert netcluster.named_inode(topology.namespace("node-0")) == os.stat(f"/proc/{slurmd.pid}/ns/net").st_ino


# SIGINT is the extended tier's here: the handler's heal is drilled in the CI tier on local-process
# (test_reference_drills.py), and SIGKILL, the dead-man's switch's, on Slurm below
@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGINT, marks=pytest.mark.extended)])
def test_a_killed_or_interrupted_controller_leaves_no_node_down(tmp_path, slurm_cluster, sig):
    """SIGKILL the drill while node n1 is DOWN: the scheduler agent's guardian resumes it;
    Ctrl-C (SIGINT): the drill heals before it exits."""
    proc = subprocess.Popen([drill_script(), "run", str(HERE / "node-down-fast.yaml"), "--cluster", "slurm",
                             "--reports", str(tmp_path / "reports"), "--json"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        confirmed = False
        while time.time() < deadline and not confirmed and proc.poll() is None:
            time.sleep(0.1)
            for path in (tmp_path / "reports").glob("*/history.jsonl"):
                confirmed = '"fault.confirmed"' in path.read_text()
        assert confirmed, "the fault never took effect"
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            assert "DOWN" in slurm_cluster.node_states()["n1"]
        else:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 4  # aborted, after healing
        seen = []
        deadline = time.time() + 40
        while time.time() < deadline and (not seen or seen[-1] not in ("IDLE", "MIXED", "ALLOCATED")):
            state = slurm_cluster.node_states()["n1"]
            if not seen or seen[-1] != state:
                seen.append(state)
            time.sleep(0.25)
        assert seen[-1] in ("IDLE", "MIXED", "ALLOCATED"), seen
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_attached_to_a_running_job_the_drill_never_cancels_it(tmp_path, slurm_cluster):
    """slurm.job_id: the drill attaches to a job someone else submitted, drills it, and leaves
    it running."""
    from drillbit.transport.slurm import batch_script
    from drillbit.spec.config import BUILTIN_JOBS

    job = BUILTIN_JOBS["reference-slurm"]
    script = tmp_path / "mine.sh"
    script.write_text(batch_script(job, {"python": sys.executable, "run_dir": str(tmp_path)}))
    slurm = slurm_cluster.slurm
    jid = slurm.sbatch(["-N", "1", "-o", str(tmp_path / "mine.out"), str(script)])
    try:
        with (tmp_path / "drill.yaml").open("a") as f:
            f.write(f"""jobs:
  mine:
    presets: [reference, torchrun]
    slurm: {{job_id: "{jid}"}}
    ranks: {{cmdline: "-m drillbit\\\\.fixtures\\\\.reference\\\\.train", exclude_cmdline: "torch\\\\.distributed\\\\.run"}}
    logs: ["{tmp_path}/job/events.log", "{tmp_path}/job/launcher.log"]
""")
        code, r = run(tmp_path, "kill-rank-slurm-fast.yaml", "--job", "mine")
        assert code == 0 and r["verdict"] == "pass", r["reasons"]
        events = history(tmp_path)
        assert not any(e["kind"] == "slurm.submit" for e in events)
        info = slurm.job(jid)
        assert info is not None and info.state == "RUNNING"  # still the user's, still running
    finally:
        slurm.scancel(jid)


def test_the_own_job_pages_slurm_example_passes_kill_rank_one_torchrun_per_node(tmp_path, slurm_cluster):
    """docs/own-job.md's Slurm example as printed, this test's Slurm in place of the page's
    slurm.conf (`# yours`): a batch job of two nodes, one torchrun on each through srun, the
    rendezvous at the allocation's first node ({head} in each task), every node's output in the
    batch output, read unnamed."""
    from tests.integration.cli import drill_cli
    from tests.integration.own_docs import project

    folder = project(tmp_path / "gpt", "# drill.yaml: a multi-node torchrun job on Slurm", cluster={
        "engine": "slurm", "slurm_conf": str(slurm_cluster.conf), "state_dir": str(tmp_path / "agents"),
        "slurm_via": slurm_cluster.via})
    proc = drill_cli("run", "kill-rank", "--job", "gpt", "--cluster", "hpc", "--json", cwd=folder, timeout=420)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["verdict"] == "pass", result["reasons"]
    assert result["measurements"]["restarts"] == 1 and result["measurements"]["time_to_requeue"] is None
    (run_dir,) = (folder / "reports").glob("*-kill-rank")
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert len({e["node"] for e in events if e["kind"] == "agent.ready" and e["node"] != "slurmctld"}) == 2
    assert_nothing_left(slurm_cluster, events)
