"""Faults, the agent registry, the dead-man's switch and the lease on real processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.errors import LeaseError
from drillbit.core.lease import Lease
from drillbit.core.proc import ProcRef
from drillbit.spec.config import RankDiscovery


def wait_status(pid: int, want: str, timeout: float = 5.0) -> str:
    deadline = time.time() + timeout
    status = ""
    while time.time() < deadline:
        status = psutil.Process(pid).status()
        if status == want:
            return status
        time.sleep(0.01)
    return status


def test_agent_finds_ranks_by_cmdline_and_env(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    me = ProcRef.of(psutil.Process())
    found = agent.find_ranks(RankDiscovery(cmdline="fake-rank"), root=me)
    assert [r.rank for r in found] == [0, 1, 2], (found, [p.pid for p in ranks])
    assert [r.pid for r in found] == [p.pid for p in ranks]


def test_agent_never_scans_the_whole_node_and_checks_the_roots_start_time(tmp_path, ranks):
    """Without a root named by pid and start time there are no ranks: another job's ranks
    on a shared node (these would match) are never candidates."""
    agent = NodeAgent("n0", tmp_path / "reg.json")
    assert agent.find_ranks(RankDiscovery(cmdline="fake-rank"), root=None) == []
    me = psutil.Process()
    stale = ProcRef(pid=me.pid, start_time=me.create_time() - 50)  # same pid, another process's start time
    assert agent.find_ranks(RankDiscovery(cmdline="fake-rank"), root=stale) == []


def test_pid_files_are_checked_against_start_time_and_command_line(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    files = tmp_path / "pids"
    files.mkdir()
    for i, p in enumerate(ranks):
        started = psutil.Process(p.pid).create_time()
        info = {"pid": p.pid, "rank": i, "node_id": "n0", "start_time": started - (100 if i == 2 else 0)}
        (files / f"rank{i}.json").write_text(json.dumps(info))
    found = agent.find_ranks(RankDiscovery(pidfiles=str(files / "*.json")))
    assert [r.rank for r in found] == [0, 1]  # rank 2's file names another process (a reused pid)
    assert agent.find_ranks(RankDiscovery(pidfiles=str(files / "*.json"), cmdline="no-such-cmd")) == []
    time.sleep(0.05)  # past the clock tick the ranks started in
    later = subprocess.Popen([sys.executable, "-c", "pass"])  # a launcher started after these ranks
    try:
        not_before = ProcRef.of(psutil.Process(later.pid))
    finally:
        later.wait()
    assert agent.find_ranks(RankDiscovery(pidfiles=str(files / "*.json")), not_before=not_before) == []
    wall_only = max(psutil.Process(p.pid).create_time() for p in ranks) + 5  # a root a profile names by its start time
    assert agent.find_ranks(RankDiscovery(pidfiles=str(files / "*.json")),
                            not_before=ProcRef(pid=1, start_time=wall_only)) == []


def test_hang_collective_stops_and_heals(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(ranks[1].pid), rank=1)
    handle = agent.inject("hang-collective", target, {})
    evidence = agent.confirm(handle)
    assert evidence is not None and evidence.data["status"] == psutil.STATUS_STOPPED
    assert json.loads((tmp_path / "reg.json").read_text())["faults"][0]["target"]["pid"] == ranks[1].pid
    report = agent.heal(handle)
    assert report.healed and report.verified
    assert psutil.Process(ranks[1].pid).status() != psutil.STATUS_STOPPED
    assert agent.active() == []
    assert agent.heal(handle).healed  # idempotent


def test_kill_rank_confirms_process_gone(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(ranks[2].pid), rank=2)
    before = time.time()
    handle = agent.inject("kill-rank", target, {"signal": "SIGKILL"})
    sent_by = time.time()
    ranks[2].wait(timeout=5)
    time.sleep(0.3)  # a confirm that comes late (a loaded agent) still dates the fault to the kill
    evidence = agent.confirm(handle)
    assert evidence is not None and before <= evidence.t <= sent_by
    assert ranks[2].returncode == -signal.SIGKILL


def test_signal_never_reaches_a_reused_pid(ranks):
    proc = psutil.Process(ranks[0].pid)
    stale = ProcRef(pid=proc.pid, start_time=proc.create_time() - 100.0)  # same pid, other process
    assert not stale.alive()
    assert stale.send(signal.SIGSTOP) is False
    assert proc.status() != psutil.STATUS_STOPPED


def test_heal_of_dead_target_is_a_noop(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(ranks[0].pid), rank=0)
    handle = agent.inject("hang-collective", target, {})
    ranks[0].kill()
    ranks[0].wait()
    report = agent.heal(handle)
    assert report.healed and "gone" in report.detail


CONTROLLER = textwrap.dedent("""
    import sys, time, psutil
    from pathlib import Path
    from drillbit.agent import NodeAgent
    from drillbit.core.proc import ProcRef
    agent = NodeAgent("n0", Path(sys.argv[1]))
    agent.arm(ProcRef.of(psutil.Process()))
    target = ProcRef.of(psutil.Process(int(sys.argv[2])), rank=1)
    handle = agent.inject("hang-collective", target, {})
    assert agent.confirm(handle) is not None
    print("injected", flush=True)
    time.sleep(120)
""")


def test_dead_mans_switch_heals_after_controller_sigkill(tmp_path, ranks):
    registry = tmp_path / "reg.json"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(registry), str(ranks[1].pid)],
                                  stdout=subprocess.PIPE, text=True)
    assert controller.stdout.readline().strip() == "injected"
    assert psutil.Process(ranks[1].pid).status() == psutil.STATUS_STOPPED
    guardians = [c for c in psutil.process_iter(["cmdline"])  # attrs: a zombie elsewhere must not raise
                 if "drillbit.agent guard" in " ".join(c.info["cmdline"] or [])
                 and str(registry) in " ".join(c.info["cmdline"] or [])]
    assert len(guardians) == 1
    controller.kill()
    controller.wait()
    assert wait_status(ranks[1].pid, psutil.STATUS_SLEEPING, timeout=10) == psutil.STATUS_SLEEPING
    guardians[0].wait(timeout=10)
    log = [json.loads(line) for line in registry.with_suffix(".deadman.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in log] == ["agent.lost", "fault.heal", "orphan.done"]
    heal = log[1]
    assert heal["data"]["by"] == "dead-man" and heal["data"]["healed"] and heal["data"]["pid"] == ranks[1].pid


def test_lease_refuses_second_holder_and_expires_with_dead_holder(tmp_path):
    with Lease("c1", holder="drill a"), pytest.raises(LeaseError, match="held by drill a"):
        Lease("c1", holder="drill b").acquire()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from drillbit.core.lease import Lease
        Lease("c2", holder="doomed").acquire()
        print("held", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LeaseError, match="doomed"):
        Lease("c2", holder="me").acquire()
    holder.kill()
    holder.wait()
    lease = Lease("c2", holder="me")
    lease.acquire()  # the dead holder's lease expired with it
    lease.release()


@pytest.mark.alone  # it measures the duty cycle it achieved: nothing else runs beside it
@pytest.mark.xdist_group("alone")  # with the other alone tests, one after another
def test_slow_rank_duty_cycle_hits_its_target_and_heals(tmp_path, ranks):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    target = ProcRef.of(psutil.Process(ranks[1].pid), rank=1)
    handle = agent.inject("slow-rank", target, {"slowdown": 0.05, "period_ms": 50, "confirm_s": 2.0})
    evidence = agent.confirm(handle)
    assert evidence is not None
    achieved = evidence.data["slowdown_achieved"]
    assert abs(achieved - 0.05) < 0.01, achieved  # within a point of the target
    report = agent.heal(handle)
    assert report.healed and report.verified
    assert wait_status(ranks[1].pid, psutil.STATUS_SLEEPING) == psutil.STATUS_SLEEPING
