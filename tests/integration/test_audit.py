"""The second safety audit's endings, each on real processes and files: a fault is disarmed
only once it is healed (the guardian retries until it is, or an operator abandons it), a
heal waits for its act, links are never written through, a step the job saved again is
the job's, the whole job stops (a worker in its own session that ignores SIGTERM, one whose
launcher is gone), ``drill heal`` judges only its own host's registries, a squatted state
folder is refused, and kill-node never climbs into a shell."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.agent.deadman import heal_with_deadline
from drillbit.agent.jobproc import job_processes, start_job
from drillbit.agent.service import AgentService
from drillbit.core.errors import ConfigError
from drillbit.faults.corrupt_checkpoint import CorruptCheckpoint
from drillbit.faults.kill_node import TORCHRUN, job_tree
from drillbit.core.proc import ProcRef
from drillbit.core.statedir import private_dir
from tests.integration.cli import drill_cli


def sleeper(*marks: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *marks],
                            env={**os.environ, **(env or {})})


def wait_for(predicate, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def records(registry: Path) -> list[dict]:
    path = registry.with_suffix(".deadman.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- 1. disarmed only when healed -------------------------------------------------------------
@pytest.fixture
def lost_tier(tmp_path):
    """lose-local-tier on a real process, its heal blocked: a file now stands where the tier's
    folder must be put back (a replacement host's disk that is not mounted yet)."""
    tier = tmp_path / "job" / "local" / "rank1"
    tier.mkdir(parents=True)
    (tier / "step_10.pt").write_bytes(b"x" * 1000)
    victim = sleeper("fake-rank", env={"RANK": "1"})
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    handle = agent.inject("lose-local-tier", ProcRef.of(psutil.Process(victim.pid), rank=1), {"folder": str(tier)})
    victim.wait(timeout=10)
    tier.rmdir()
    tier.write_text("not a folder")
    watched = sleeper()
    yield agent, handle, tier, watched
    watched.kill()
    watched.wait()
    if agent._guardian is not None and agent._guardian.poll() is None:
        agent._guardian.kill()
        agent._guardian.wait()


@pytest.mark.slow
def test_a_fault_whose_heal_failed_is_not_disarmed_and_its_guardian_retries_until_it_heals(tmp_path, lost_tier):
    agent, handle, tier, watched = lost_tier
    report = heal_with_deadline(agent.heal, handle, timeout=10)
    assert not report.healed, report
    agent.arm(ProcRef.of(psutil.Process(watched.pid)))
    assert agent.disarm() is False  # before: disarmed unconditionally, the guardian SIGTERMed, nothing retried
    registry = json.loads((tmp_path / "agent-n0.json").read_text())
    assert registry["armed"] and len(registry["faults"]) == 1
    watched.kill()  # the controller is gone: the guardian takes over, and keeps trying
    wait_for(lambda: any(r["kind"] == "heal.retry" for r in records(agent.registry_path)), what="a heal.retry")
    tier.unlink()  # the obstacle is cleared: the next attempt heals
    wait_for(lambda: any(r["kind"] == "orphan.done" for r in records(agent.registry_path)), timeout=30,
             what="the guardian's orphan.done")
    kinds = [r["kind"] for r in records(agent.registry_path)]
    assert "heal.failed" in kinds and kinds.index("fault.heal") > kinds.index("heal.failed"), kinds
    assert (tier / "step_10.pt").read_bytes() == b"x" * 1000
    assert json.loads((tmp_path / "agent-n0.json").read_text())["faults"] == []
    assert agent._guardian.wait(timeout=10) == 0


@pytest.mark.slow
def test_drill_heal_abandon_records_the_reason_and_ends_the_retries(tmp_path, lost_tier):
    agent, handle, tier, watched = lost_tier
    agent.arm(ProcRef.of(psutil.Process(watched.pid)))
    watched.kill()
    wait_for(lambda: any(r["kind"] == "heal.retry" for r in records(agent.registry_path)), what="a heal.retry")
    proc = drill_cli("heal", str(tmp_path), "--abandon", "disk replaced by hand", "--json", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [done] = json.loads(proc.stdout)
    assert done["abandoned"] and "lose-local-tier on rank 1" in done["abandoned"][0]
    wait_for(lambda: any(r["kind"] == "orphan.done" for r in records(agent.registry_path)), timeout=90,
             what="the guardian giving up the abandoned fault")
    [abandoned] = [r for r in records(agent.registry_path) if r["kind"] == "fault.abandoned"]
    assert abandoned["data"]["reason"] == "disk replaced by hand"
    registry = json.loads((tmp_path / "agent-n0.json").read_text())
    assert registry["faults"] == [] and registry["abandoned"][0]["reason"] == "disk replaced by hand"
    assert agent._guardian.wait(timeout=10) == 0


# --- 1b. a heal waits for its act ---------------------------------------------------------------
def checkpoint_dir(root: Path, step: int = 10, *, meta: Path | None = None) -> Path:
    ckpt = root / f"step_{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(bytes(range(256)) * 64)
    if meta is None:
        (ckpt / "meta.json").write_text(json.dumps({"step": step}))
    else:
        (ckpt / "meta.json").symlink_to(meta)
    (ckpt / "COMPLETE").write_text("")
    return ckpt


def custom(root: Path) -> dict:
    return {"dir": str(root), "layout": "custom", "glob": "step_*", "step_regex": r"step_(\d+)",
            "marker": "COMPLETE", "metadata": "meta.json"}


def test_a_heal_that_comes_while_the_act_still_runs_waits_for_it(tmp_path, monkeypatch):
    """The controller gave up on an inject (its RPC timed out) and heals: before, the heal
    found the file intact, discarded the copy, and then the act's write landed for good."""
    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    before = sha(ckpt / "model.pt")
    real_act = CorruptCheckpoint.act

    def slow_act(self, target, params, intent):
        time.sleep(1.5)
        return real_act(self, target, params, intent)

    monkeypatch.setattr(CorruptCheckpoint, "act", slow_act)
    victim = sleeper()
    try:
        agent = NodeAgent("n0", tmp_path / "agent-n0.json")
        target = ProcRef.of(psutil.Process(victim.pid), rank=1)
        injecting = threading.Thread(target=agent.inject, args=("corrupt-checkpoint", target,
                                                                {"checkpoint": custom(root), "mode": "flip-bytes"}))
        injecting.start()
        wait_for(lambda: agent.active(), what="the intent in the registry")
        [intent] = agent.active()  # what a controller that gave up holds
        report = agent.heal(intent)
        injecting.join(timeout=10)
        assert report.healed and report.verified, report
        assert sha(ckpt / "model.pt") == before, "the act's damage landed after the heal"
        assert agent.active() == []
    finally:
        victim.kill()
        victim.wait()


# --- 2. verified means verified ------------------------------------------------------------------
def test_a_link_out_of_the_checkpoint_is_never_written_through(tmp_path):
    outside = tmp_path / "victim.txt"
    outside.write_text("someone else's file")
    root = tmp_path / "ckpt"
    checkpoint_dir(root, meta=outside)
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = sleeper()
    try:
        with pytest.raises(ConfigError, match="outside the job's checkpoint folder"):  # exit 2, not 5 (#43)
            agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                         {"checkpoint": custom(root), "mode": "corrupt-metadata"})
    finally:
        victim.kill()
        victim.wait()
    assert outside.read_text() == "someone else's file" and agent.active() == []


def test_a_link_inside_the_checkpoint_is_healed_at_its_real_file(tmp_path):
    root = tmp_path / "ckpt"
    shared = root / "shared"
    shared.mkdir(parents=True)
    real = shared / "meta-10.json"
    real.write_text(json.dumps({"step": 10}))
    ckpt = checkpoint_dir(root, meta=real)
    original = sha(real)
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = sleeper()
    try:
        handle = agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                              {"checkpoint": custom(root), "mode": "corrupt-metadata"})
        assert handle.state["file"] == str(real) and sha(real) != original
        report = agent.heal(handle)
    finally:
        victim.kill()
        victim.wait()
    # before: the heal put a file over the link and said "byte for byte" while the real file stayed damaged
    assert report.verified and sha(real) == original, report
    assert (ckpt / "meta.json").is_symlink()


@pytest.mark.parametrize("mode, name", [("delete-shard", "model.pt"), ("drop-marker", "COMPLETE")])
def test_a_file_the_job_saved_again_is_the_jobs(tmp_path, mode, name):
    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = sleeper()
    try:
        handle = agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                              {"checkpoint": custom(root), "mode": mode})
        assert not (ckpt / name).exists()
        (ckpt / name).write_bytes(b"saved again by the job")  # the job saved step 10 again
        report = agent.heal(handle)
    finally:
        victim.kill()
        victim.wait()
    # before: the old file went back over the job's new one, and the step mixed two saves
    assert report.healed and (ckpt / name).read_bytes() == b"saved again by the job", report
    assert "newer data is kept" in report.detail


# --- 3. the whole job stops ------------------------------------------------------------------------
LAUNCHER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c",
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], 'w').close(); "
        "time.sleep(30)", sys.argv[1] + ".ignoring", "stubborn-worker"],
        # as torch 2.13 starts its workers: a session of their own, no parent-death signal; "clean":
        # an environment of its own too (no DRILLBIT_JOB mark to be found by)
        start_new_session=True, env={} if sys.argv[3] == "clean" else None)
    open(sys.argv[1], "w").write(str(worker.pid))
    while not os.path.exists(sys.argv[1] + ".ignoring"):  # gone only once the worker is stubborn
        time.sleep(0.05)
    if sys.argv[2] == "stay":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        time.sleep(60)
""")


@pytest.mark.slow
@pytest.mark.parametrize("env", ["marked", "clean"])
@pytest.mark.parametrize("launcher", ["stay", "gone"])
def test_a_worker_in_its_own_session_that_ignores_sigterm_is_stopped(tmp_path, launcher, env):
    pidfile = tmp_path / "worker.pid"
    job = start_job([sys.executable, "-c", LAUNCHER, str(pidfile), launcher, env], {"DRILLBIT_JOBINIT_GRACE_S": "1"},
                    None, tmp_path / "job.out", stop_timeout=2.0)
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the worker's pid")
    # a SIGTERM before the worker ignores it ends it at once (ci46): wait until it is stubborn
    wait_for(lambda: Path(f"{pidfile}.ignoring").exists(), what="the worker ignoring SIGTERM")
    worker = psutil.Process(int(pidfile.read_text()))
    if env == "clean":
        assert "DRILLBIT_JOB" not in worker.environ()
    if launcher == "stay":
        assert any(p.pid == worker.pid for p in job_processes(job.ref, job.mark))
        job.stop()
    else:
        # the launcher exited: the worker was adopted by the job's init (the subreaper), not by
        # PID 1, and the init ends what its launcher left before it ends itself
        assert job.popen.wait(timeout=20) == 0
    # before: a clean-environment worker whose launcher had gone was nobody's and carried no mark,
    # and lived on for 30 s. A SIGKILLed process reads as running while it exits; it is gone (or a
    # zombie) moments later
    wait_for(lambda: not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE, timeout=5.0,
             what="the worker gone")
    assert job_processes(job.ref, job.mark) == []
    left = [p.info for p in psutil.process_iter(["pid", "ppid", "status", "cmdline"])
            if f"{pidfile}.ignoring" in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert left == []


# --- 4. drill heal judges its own host's registries only --------------------------------------------
def test_drill_heal_leaves_another_hosts_registry_alone_and_says_where_to_run(tmp_path):
    victim = sleeper("fake-rank", env={"RANK": "1"})
    try:
        agent = NodeAgent("node-1", tmp_path / "agent-node-1.json")
        agent.inject("hang-collective", ProcRef.of(psutil.Process(victim.pid), rank=1), {})
        registry = tmp_path / "agent-node-1.json"
        payload = json.loads(registry.read_text())
        payload["host"] = "gpu-node-1.cluster"  # written there, by that host's agent
        registry.write_text(json.dumps(payload))
        proc = drill_cli("heal", str(tmp_path), timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "written on host gpu-node-1.cluster" in proc.stdout and "nothing was judged or changed" in proc.stdout
        assert len(json.loads(registry.read_text())["faults"]) == 1  # before: "healed" and dropped
        assert psutil.Process(victim.pid).status() == psutil.STATUS_STOPPED
    finally:
        victim.send_signal(signal.SIGCONT)
        victim.kill()
        victim.wait()


# --- 5. a squatted state folder ----------------------------------------------------------------------
def test_a_state_folder_someone_else_owns_or_can_write_is_refused(tmp_path):
    squatted = tmp_path / "drillbit"
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)  # created first by another user
    (squatted / "agent-n0.json").write_text(json.dumps({"node": "n0", "faults": [], "job": None, "armed": None}))
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        AgentService("n0", squatted)
    out = subprocess.run([sys.executable, "-m", "drillbit.agent", "heal", "--state-dir", str(squatted)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "belongs to uid 65534" in out.stderr, out
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(ConfigError, match="group or others can write"):
        private_dir(open_to_all)
    mine = private_dir(tmp_path / "fresh")
    assert (mine.stat().st_mode & 0o777) == 0o700


# --- 6. kill-node never climbs into a shell -------------------------------------------------------------
def test_kill_node_stops_at_the_shell_a_launcher_runs_in(tmp_path):
    """`bash -c "torchrun …"` (or screen, tmux) matches torchrun's regex: the climb must stop
    below it, or kill-node kills the operator's shell or multiplexer."""
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'fake-rank']); time.sleep(60)")
    shell = subprocess.Popen(["bash", "-c", f"{sys.executable} -c \"{script}\" torchrun; true"])
    try:
        def is_rank(p: psutil.Process) -> bool:
            return p.cmdline()[-1:] == ["fake-rank"]

        wait_for(lambda: any(is_rank(c) for c in psutil.Process(shell.pid).children(True)), what="the rank")
        rank = next(c for c in psutil.Process(shell.pid).children(True) if is_rank(c))
        tree = job_tree(ProcRef.of(rank, rank=0), TORCHRUN)
        assert shell.pid not in {m.pid for m in tree}, [m.pid for m in tree]
        assert {rank.pid, rank.ppid()} <= {m.pid for m in tree}
    finally:
        for p in psutil.Process(shell.pid).children(True):
            p.kill()
        shell.kill()
        shell.wait()
