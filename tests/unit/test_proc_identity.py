"""A process is named by its pid and when it started after the node booted, so a step of the
wall clock does not make a live process look gone or a reused pid look like it.

psutil's create_time() is the start after boot plus the boot time the kernel derives from the
wall clock, read afresh at every call (psutil#2526): a 1 s step of the clock moves every
process's create time by 1 s. A CI run took such a step (drill run, real clock stepped +1 s:
reproduced by hand, docs/reliability.md): every drill then running found its job's ranks gone
("the job has ranks []", exit 2), heals could not be verified, and dead-man's switches found
their controller dead and stopped its job. Here the step is faked in psutil's boot time, the one
place the wall clock enters create_time: stepping this machine's clock would disturb every
test running beside (tests/integration/test_clock_step.py steps the real one, opt-in)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import psutil._pslinux as pslinux
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.proc import ProcRef, since_boot
from drillbit.spec.config import RankDiscovery
from drillbit.transport import netcluster

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/stat is Linux's")


@pytest.fixture
def step_clock(monkeypatch):
    """Fake a step of the wall clock by ``seconds``: what psutil's create_time sees of it."""
    real = pslinux.boot_time

    def step(seconds: float) -> None:
        monkeypatch.setattr(pslinux, "boot_time", lambda: real() + seconds)
    return step


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


def stopped(pid: int) -> bool:
    """Whether the process shows stopped within 5 s (a signal is delivered when it is next scheduled)."""
    deadline = time.monotonic() + 5.0
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_live_process_stays_itself_across_a_step_of_the_wall_clock_faked(sleeper, step_clock):
    before = psutil.Process(sleeper.pid).create_time()
    ref = ProcRef.of(psutil.Process(sleeper.pid), rank=1, node="n0")
    assert ref.boot_start == since_boot(sleeper.pid) is not None
    step_clock(1.0)
    assert psutil.Process(sleeper.pid).create_time() == pytest.approx(before + 1.0)  # the fake takes
    assert ref.alive() and ref.process() is not None
    assert ref.send(signal.SIGSTOP) and stopped(sleeper.pid)
    assert ref.send(signal.SIGCONT)
    again = ProcRef.of(psutil.Process(sleeper.pid), rank=1, node="n0")
    assert again.start_time != ref.start_time and again == ref and again in {ref} and again.key == ref.key
    # what a reference by wall-clock start alone (a pid file's, a profile's) makes of the same step
    assert not ProcRef(pid=sleeper.pid, start_time=ref.start_time).alive()


def test_a_reused_pid_is_still_refused(sleeper):
    ref = ProcRef.of(psutil.Process(sleeper.pid))
    other = ref.model_copy(update={"boot_start": ref.boot_start - 0.01})  # one tick earlier: another process
    assert not other.alive() and other.send(signal.SIGSTOP) is False
    assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    assert other != ref


def test_rank_discovery_finds_the_ranks_after_a_step(tmp_path, ranks, step_clock):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    root = ProcRef.of(psutil.Process())
    files = tmp_path / "pids"
    files.mkdir()
    for i, p in enumerate(ranks):
        proc = psutil.Process(p.pid)
        (files / f"rank{i}.json").write_text(json.dumps({"pid": p.pid, "rank": i, "node_id": "n0",
                                                         "start_time": proc.create_time(),
                                                         "boot_start": since_boot(p.pid)}))
    step_clock(-1.0)
    assert [r.rank for r in agent.find_ranks(RankDiscovery(cmdline="fake-rank"), root=root)] == [0, 1, 2]
    assert [r.rank for r in agent.find_ranks(RankDiscovery(pidfiles=str(files / "*.json")), not_before=root)] == [0, 1, 2]


def test_the_dead_mans_switch_watches_the_controller_by_its_start_after_boot(tmp_path, step_clock):
    agent = NodeAgent("n0", tmp_path / "reg.json")
    me = ProcRef.of(psutil.Process())
    agent.arm(me)
    try:
        argv = list(agent._guardian.args)  # what it was started with (its /proc cmdline is pytest's until it execs)
        assert argv[argv.index("--watch-boot-start") + 1] == repr(me.boot_start)
    finally:
        assert agent.disarm()
    step_clock(1.0)
    assert ProcRef(pid=me.pid, start_time=me.start_time, boot_start=float(argv[argv.index("--watch-boot-start") + 1])).alive()


def test_a_namespace_topologys_owner_stays_alive_across_a_step(step_clock):
    me = psutil.Process()
    manifest = {"owner_pid": me.pid, "owner_start": me.create_time(), "owner_boot_start": since_boot(me.pid)}
    step_clock(1.0)
    assert netcluster._owner_alive(manifest)  # the reaper leaves a live drill's namespaces alone
    assert not netcluster._owner_alive({**manifest, "owner_boot_start": None})  # the wall clock alone: gone
