"""Nothing is left behind, on real processes and files: a fault is recorded before it acts,
two faults never hold one file, an agent injects only into the ranks it found, a stopped
lease holder is named, and `drill heal` undoes what a drill left after its controller *and*
its agent's guardian were SIGKILLed."""
from __future__ import annotations

import hashlib
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
from drillbit.agent.service import AgentService
from drillbit.core.errors import FaultError, LeaseError
from drillbit.faults.corrupt_checkpoint import CorruptParams
from drillbit.faults.hang_collective import HangCollective
from drillbit.core.lease import Lease
from drillbit.core.proc import ProcRef
from drillbit.fixtures.reference import checkpoint
from drillbit.spec.config import RankDiscovery
from drillbit.transport.client import AgentError
from drillbit.transport.inprocess import InProcessClient
from tests.integration.cli import drill_cli


@pytest.fixture
def sleepers(ranks):
    time.sleep(0.3)  # let them start (the discovery test reads their command lines)
    return ranks[:2]


def status(pid: int, want: str | None = None, timeout: float = 5.0) -> str:
    """The process's status; with ``want``, once it reaches it (signals land asynchronously)."""
    deadline = time.time() + timeout
    now = psutil.Process(pid).status()
    while want is not None and now != want and time.time() < deadline:
        time.sleep(0.01)
        now = psutil.Process(pid).status()
    return now


def test_a_fault_is_recorded_before_it_acts(tmp_path, sleepers, monkeypatch):
    """SIGINT lands between the SIGSTOP and the agent's bookkeeping: the registry already
    holds the fault, so it is healed (before: an empty registry and a rank left in T)."""
    real_act = HangCollective.act

    def act_then_interrupted(self, target, params, intent):
        real_act(self, target, params, intent)
        raise KeyboardInterrupt

    monkeypatch.setattr(HangCollective, "act", act_then_interrupted)
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    target = ProcRef.of(psutil.Process(sleepers[1].pid), rank=1)
    with pytest.raises(KeyboardInterrupt):
        agent.inject("hang-collective", target, {})
    assert status(target.pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    registry = json.loads((tmp_path / "agent-n0.json").read_text())
    assert [f["target"]["pid"] for f in registry["faults"]] == [target.pid]
    [handle] = agent.active()
    assert agent.heal(handle).healed and status(target.pid, psutil.STATUS_SLEEPING) != psutil.STATUS_STOPPED


def test_two_faults_never_hold_one_checkpoint_file(tmp_path, sleepers):
    root = tmp_path / "ckpt"
    checkpoint.write_checkpoint(root, 10, {"shard_0.pt": bytes(range(256)) * 64}, {"world_size": 2})
    shard = next((root).rglob("shard_0.pt"))
    original = hashlib.sha256(shard.read_bytes()).hexdigest()
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    params = CorruptParams(mode="truncate", checkpoint={"dir": str(root)}, then_kill=False).model_dump()
    first = agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(sleepers[0].pid), rank=0), params)
    with pytest.raises(FaultError, match="already held by an active corrupt-checkpoint fault"):
        agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(sleepers[1].pid), rank=1), params)
    assert agent.heal(first).verified
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == original  # not the first fault's damage
    assert agent.active() == [] and not list((tmp_path / "scratch-n0").rglob("shard_0.pt"))  # backup gone


def test_an_agent_injects_only_into_ranks_it_found(tmp_path, sleepers):
    client = InProcessClient(AgentService("n0", tmp_path))
    try:
        target = ProcRef.of(psutil.Process(sleepers[0].pid), rank=0, node="n0")
        with pytest.raises(AgentError, match="not a rank this agent found for this drill"):
            client.inject("hang-collective", target, {})
        assert status(target.pid) != psutil.STATUS_STOPPED
        found = client.find_ranks(RankDiscovery(cmdline="fake-rank"), ProcRef.of(psutil.Process()))
        assert [r.pid for r in found][:2] == [p.pid for p in sleepers]
        handle = client.inject("hang-collective", found[0], {})
        assert client.heal(handle).healed
    finally:
        client.close()


def test_a_stopped_lease_holder_is_named_as_stopped(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time
        from drillbit.core.lease import Lease
        Lease("c3", holder="frozen drill").acquire()
        print("held", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        with pytest.raises(LeaseError, match="frozen drill.*its process is stopped"):
            Lease("c3", holder="me").acquire()
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()


CONTROLLER = textwrap.dedent("""
    import sys, time, psutil
    from pathlib import Path
    from drillbit.agent import NodeAgent
    from drillbit.core.proc import ProcRef
    agent = NodeAgent("n0", Path(sys.argv[1]))
    agent.arm(ProcRef.of(psutil.Process()))
    target = ProcRef.of(psutil.Process(int(sys.argv[2])), rank=1)
    handle = agent.inject("hang-collective", target, {})
    print("injected", agent._guardian.pid, flush=True)
    time.sleep(120)
""")


def test_drill_heal_after_the_controller_and_the_guardian_were_sigkilled(tmp_path, sleepers):
    registry = tmp_path / "agent-n0.json"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(registry), str(sleepers[1].pid)],
                                  stdout=subprocess.PIPE, text=True)
    word, guardian = controller.stdout.readline().split()
    assert word == "injected"
    os.kill(int(guardian), signal.SIGKILL)  # the agent's guardian dies first ...
    controller.kill()  # ... then the controller, with its agent in it
    controller.wait()
    time.sleep(0.5)
    assert status(sleepers[1].pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED  # nobody healed it
    proc = drill_cli("heal", str(tmp_path), "--json", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [done] = json.loads(proc.stdout)
    assert done["node"] == "n0" and done["failed"] == [] and "hang-collective on rank 1" in done["healed"][0]
    assert status(sleepers[1].pid) != psutil.STATUS_STOPPED
    assert json.loads(registry.read_text())["faults"] == []
    records = [json.loads(line) for line in registry.with_suffix(".deadman.jsonl").read_text().splitlines()]
    assert records[-1]["kind"] == "fault.heal" and records[-1]["data"]["by"] == "drill heal"
    again = drill_cli("heal", str(tmp_path), timeout=120)  # idempotent
    assert again.returncode == 0 and "nothing left in place" in again.stdout


def test_drill_heal_leaves_a_running_drill_alone(tmp_path, sleepers):
    registry = tmp_path / "agent-n0.json"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(registry), str(sleepers[1].pid)],
                                  stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout.readline().split()[0] == "injected"
        proc = drill_cli("heal", str(tmp_path), timeout=120)
        assert proc.returncode == 0 and "its drill is still running" in proc.stdout
        assert status(sleepers[1].pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    finally:
        controller.kill()
        controller.wait()
    deadline = time.time() + 10  # the guardian heals once the controller is gone
    while time.time() < deadline and status(sleepers[1].pid) == psutil.STATUS_STOPPED:
        time.sleep(0.1)
    assert status(sleepers[1].pid) != psutil.STATUS_STOPPED
