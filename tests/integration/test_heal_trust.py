"""What a heal may trust (#43), on real files as root: a hard-linked checkpoint is refused before
it is damaged; the heal restores the file through no link, keeping the job's owner, mode
and times; a link planted where the heal writes is never written through; a planted registry's
backup folder is never removed as "the copy"."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import time
import sys
from pathlib import Path

import psutil
import pytest

from drillbit.agent import NodeAgent
from drillbit.core.errors import ConfigError
from drillbit.faults.ckptfile import Backup, discard
from drillbit.core.proc import ProcRef
from tests.integration.test_audit import checkpoint_dir, custom, sha

JOB_UID, JOB_GID = 4242, 4343  # a job's user, not root: the heal runs as root


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def the_jobs(path: Path, mode: int) -> Path:
    """The file as the job's user leaves it: its owner, its mode."""
    os.chown(path, JOB_UID, JOB_GID)
    os.chmod(path, mode)
    return path


def inject_and_heal(tmp_path: Path, root: Path, mode: str, between=None):
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = sleeper()
    try:
        handle = agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                              {"checkpoint": custom(root), "mode": mode})
        if between is not None:
            between(handle)
        return handle, agent.heal(handle)
    finally:
        victim.kill()
        victim.wait()


def test_a_hard_linked_checkpoint_file_is_refused_before_it_is_damaged(tmp_path):
    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    outside = tmp_path / "elsewhere.pt"
    os.link(ckpt / "model.pt", outside)
    before = sha(outside)
    agent = NodeAgent("n0", tmp_path / "agent-n0.json")
    victim = sleeper()
    try:
        with pytest.raises(ConfigError, match="hard links"):
            agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                         {"checkpoint": custom(root), "mode": "flip-bytes"})
    finally:
        victim.kill()
        victim.wait()
    # before: flipped in place (both names), healed by a rename: the outside name kept the damage, "verified"
    assert sha(outside) == before and agent.active() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_root_heal_gives_back_the_jobs_owner_mode_and_times(tmp_path):
    """#43 put the bytes back into the same inode; #57 exchanges a fresh copy for the damage
    (atomic, and a save the job makes meanwhile is kept), so the copy carries the original's
    owner, mode and times."""
    root = tmp_path / "ckpt"
    model = the_jobs(checkpoint_dir(root) / "model.pt", 0o600)
    os.utime(model, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    before = sha(model)
    _, report = inject_and_heal(tmp_path, root, "flip-bytes")
    info = os.stat(model)
    # before: root:root 600 (copy and rename), and the job got "Permission denied" on its own checkpoint
    assert report.verified and sha(model) == before, report
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (JOB_UID, JOB_GID, 0o600)
    assert info.st_mtime_ns == 1_700_000_000_000_000_000 and "exchanged atomically" in report.detail


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_deleted_shard_comes_back_as_the_jobs_file_and_a_planted_link_is_not_followed(tmp_path):
    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    model = the_jobs(ckpt / "model.pt", 0o640)
    before = sha(model)
    other = tmp_path / "outside" / "other.txt"
    other.parent.mkdir()
    other.write_text("someone else's file")

    def plant(_handle) -> None:  # whoever can write the checkpoint folder plants links at the heal's names
        (ckpt / ".model.pt.drillbit-heal").symlink_to(other)

    _, report = inject_and_heal(tmp_path, root, "delete-shard", between=plant)
    # before: the heal copied through the link: other.txt overwritten, model.pt a link to it, "verified"
    assert other.read_text() == "someone else's file"
    assert not model.is_symlink() and sha(model) == before and report.verified, report
    info = os.stat(model)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (JOB_UID, JOB_GID, 0o640)


def test_discard_removes_only_a_backup_folder_it_made(tmp_path):
    """A planted registry names a 'backup' whose parent is an unrelated folder: discard() once
    rmtree'd it ("already intact")."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("keep")
    discard(Backup(checkpoint=str(tmp_path), file=str(tmp_path / "x"), backup=str(precious / "data"),
                   original_sha256=""))
    assert (precious / "data").read_text() == "keep"


# --- a planted registry, a stopped controller, no false all-clear --------------------------------------
def left_in_place(tmp_path: Path, reports: Path, deadman_s: float) -> tuple[Path, Path, str, subprocess.Popen]:
    """A run folder whose drill died with corrupt-checkpoint in place: its registry still holds
    the fault, the checkpoint's model.pt is damaged. Returns (run folder, model.pt, its original
    sha256, the 'controller' the registry's guardian watches)."""
    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    original = sha(ckpt / "model.pt")
    run = reports / "20261204-101010-corrupt-checkpoint"
    run.mkdir(parents=True, mode=0o700)
    (run / "history.jsonl").write_text('{"seq": 0, "t": 1, "source": "harness", "kind": "drill.start", "node": null, '
                                       '"rank": null, "data": {"cluster": "local-process"}}\n')
    agent = NodeAgent("local", run / "agent-local.json")
    victim = sleeper()
    agent.inject("corrupt-checkpoint", ProcRef.of(psutil.Process(victim.pid), rank=1),
                 {"checkpoint": custom(root), "mode": "flip-bytes", "then_kill": False})
    controller = sleeper()
    agent.arm(ProcRef.of(psutil.Process(controller.pid)), deadman_s=deadman_s)
    victim.kill()
    victim.wait()
    assert sha(ckpt / "model.pt") != original
    return run, ckpt / "model.pt", original, controller


def end(proc: subprocess.Popen) -> None:
    proc.send_signal(18)  # SIGCONT: a stopped process takes SIGKILL too, but its guardian then sees it go
    proc.kill()
    proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another user needs root to make")
def test_a_run_folder_another_user_planted_is_not_obeyed_and_ours_is(tmp_path):
    from tests.integration.cli import drill_cli

    reports = tmp_path / "shared-reports"
    reports.mkdir()
    os.chmod(reports, 0o1777)  # a shared reports folder, as a team keeps one
    run, model, original, controller = left_in_place(tmp_path, reports, deadman_s=600)  # its guardian waits
    try:
        os.kill(controller.pid, 19)  # SIGSTOP: "still running" would skip it; stopped counts as gone
        for p in (run, run / "agent-local.json"):
            os.chown(p, JOB_UID, JOB_GID)  # as if another user had planted it
        damaged = sha(model)
        # #57: root reads a reports folder others can write only where DRILLBIT_SAFE_DIRECTORY names it
        done = drill_cli("heal", "--cluster", "local-process", "--reports", str(reports), cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and "anyone can write it" in done.stderr, done.stdout + done.stderr
        named = {**os.environ, "DRILLBIT_SAFE_DIRECTORY": str(reports)}
        for args, env in ((["heal", str(run)], None),
                          (["heal", "--cluster", "local-process", "--reports", str(reports)], named)):
            done = drill_cli(*args, cwd=tmp_path, env=env, timeout=120)
            assert done.returncode == 2, done.stdout + done.stderr
            assert "not trusted" in done.stdout and "belongs to uid 4242" in done.stdout, done.stdout
            assert sha(model) == damaged  # nothing it names was touched
        for p in (run, run / "agent-local.json"):
            os.chown(p, 0, 0)  # the drill's own: healed, though its controller is stopped (state T)
        done = drill_cli("heal", str(run), cwd=tmp_path, timeout=120)
        assert done.returncode == 0 and "healed corrupt-checkpoint" in done.stdout, done.stdout + done.stderr
        assert sha(model) == original
    finally:
        end(controller)


def test_no_false_all_clear_for_an_unknown_cluster_or_a_missing_reports_folder(tmp_path):
    from tests.integration.cli import drill_cli

    for args, says in ((["--cluster", "no-such-cluster"], "unknown cluster 'no-such-cluster'"),
                       (["--cluster", "local-process"], "is not a folder"),
                       (["--cluster", "local-process", "--reports", str(tmp_path / "missing")], "is not a folder")):
        done = drill_cli("heal", *args, cwd=tmp_path, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (args, done.stdout, done.stderr)
        assert "nothing left in place" not in done.stdout


def test_the_guardian_heals_once_its_controller_has_been_stopped_past_the_dead_man_limit(tmp_path):
    """#43: Ctrl-Z on the controller mid-fault: 45 s later the file was still damaged; the
    guardian took a stopped process for a live one."""
    run, model, original, controller = left_in_place(tmp_path, tmp_path / "reports", deadman_s=1.0)
    try:
        os.kill(controller.pid, 19)  # SIGSTOP
        deadline = time.time() + 30
        while sha(model) != original and time.time() < deadline:
            time.sleep(0.2)
        assert sha(model) == original
        log = (run / "agent-local.deadman.jsonl").read_text()
        assert "stopped (state T)" in log, log
    finally:
        end(controller)


def test_two_drills_on_one_file_the_second_is_refused_before_it_touches_anything(tmp_path):
    """#43: two drills on two cluster names, one checkpoint file: the file ended damaged while both
    heals were verified. One claim per file (device, inode) on the host, from the act to the
    verified heal; then the file is free again."""
    root = tmp_path / "ckpt"
    model = checkpoint_dir(root) / "model.pt"
    original = sha(model)
    first, second = (NodeAgent("n0", tmp_path / f"{name}" / "agent-n0.json") for name in ("gate", "gameday"))
    victim = sleeper()
    try:
        target = ProcRef.of(psutil.Process(victim.pid), rank=1)
        params = {"checkpoint": custom(root), "mode": "flip-bytes", "then_kill": False}
        handle = first.inject("corrupt-checkpoint", target, params)
        damaged = sha(model)
        with pytest.raises(ConfigError, match="already damaged by another drill"):
            second.inject("corrupt-checkpoint", target, params)
        assert sha(model) == damaged and second.active() == []
        assert first.heal(handle).verified and sha(model) == original
        again = second.inject("corrupt-checkpoint", target, params)  # free once the first heal is verified
        assert second.heal(again).verified and sha(model) == original
    finally:
        victim.kill()
        victim.wait()


# --- only what the job wrote in this run ----------------------------------------------------------------
SIX_YEARS = 6 * 365 * 86400


def test_a_checkpoint_the_job_did_not_write_in_this_run_is_refused_unless_asked_for(tmp_path):
    """#43: a checkpoint folder the job never writes, its file dated six years before the launch,
    was damaged (and a rank killed) with no save ever seen. The agent knows the job's root (found
    by its own rank discovery, under the job it launched): a file older than the root's start is
    not this run's; refused (exit 2 at the CLI), nothing touched, no rank killed — unless the drill
    says older_ok, and then the evidence says so."""
    from drillbit.agent.jobproc import start_job
    from drillbit.spec.config import RankDiscovery

    root = tmp_path / "ckpt"
    ckpt = checkpoint_dir(root)
    old = time.time() - SIX_YEARS
    for f in ckpt.iterdir():
        os.utime(f, (old, old))
    original = sha(ckpt / "model.pt")
    job = start_job([sys.executable, "-c", "import time; time.sleep(120)", "a-rank"], {"RANK": "0"}, None,
                    tmp_path / "job.out", stop_timeout=5.0)
    try:
        agent = NodeAgent("n0", tmp_path / "agent-n0.json")
        deadline = time.time() + 20
        ranks: list = []
        while not ranks and time.time() < deadline:
            ranks = agent.find_ranks(RankDiscovery(cmdline="a-rank"), root=job.ref)
            time.sleep(0.05)
        assert len(ranks) == 1, ranks
        params = {"checkpoint": custom(root), "mode": "flip-bytes"}  # then_kill by default
        with pytest.raises(ConfigError, match="before the job's run began") as refused:
            agent.inject("corrupt-checkpoint", ranks[0], params)
        assert "days before the job's first process started" in str(refused.value)
        assert sha(ckpt / "model.pt") == original and ranks[0].alive() and agent.active() == []
        # asked for by name: damaged, and the evidence says the file was not this run's
        handle = agent.inject("corrupt-checkpoint", ranks[0], {**params, "then_kill": False, "older_ok": True})
        assert handle.state["older"] is True and sha(ckpt / "model.pt") != original
        assert agent.heal(handle).verified and sha(ckpt / "model.pt") == original
        # a file the job wrote since its run began is this run's: no refusal
        (ckpt / "model.pt").touch()
        handle = agent.inject("corrupt-checkpoint", ranks[0], {**params, "then_kill": False})
        assert handle.state["older"] is False
        assert agent.heal(handle).verified
    finally:
        job.stop(5.0)


# --- a registry obeys only what its drill wrote -----------------------------------------------------------
def test_a_registry_changed_on_disk_is_obeyed_by_neither_the_guardian_nor_drill_heal(tmp_path):
    """#43: every path in a registry must lie inside the checkpoint folder it names or the agent's
    scratch folder. A registry changed on disk after its agent wrote it (here: its "copy" named
    as a file outside, whose bytes a heal would write over the checkpoint) is not obeyed: the
    guardian obeys only the handles its agent told it over a pipe, and `drill heal` checks every
    path. Nothing it names is touched; each says why."""
    from tests.integration.cli import drill_cli

    run, model, original, controller = left_in_place(tmp_path, tmp_path / "reports", deadman_s=600)
    try:
        damaged = sha(model)
        planted = tmp_path / "planted.bin"
        planted.write_bytes(b"what another would have written into the checkpoint")
        registry = run / "agent-local.json"
        payload = json.loads(registry.read_text())
        payload["faults"][0]["state"]["backup"] = str(planted)
        payload["faults"][0]["state"]["original_sha256"] = sha(planted)
        registry.write_text(json.dumps(payload))
        controller.kill()  # the guardian takes over, and reads the changed registry
        controller.wait()
        deadline = time.time() + 30
        log = run / "agent-local.deadman.jsonl"
        while "changed on disk" not in (log.read_text() if log.exists() else "") and time.time() < deadline:
            time.sleep(0.2)
        assert "changed on disk" in log.read_text()
        assert sha(model) == damaged
        done = drill_cli("heal", str(run), "--force", cwd=tmp_path, timeout=120)
        assert "not trusted: its copy" in done.stdout + done.stderr, done.stdout + done.stderr
        assert done.returncode != 0 and sha(model) == damaged and planted.exists()
    finally:
        end(controller)
        for p in psutil.process_iter(["cmdline"]):
            if str(run / "agent-local.json") in (p.info["cmdline"] or []):
                p.kill()  # the guardian keeps retrying what it may not obey: this test's own, by its registry


def test_drill_heal_never_runs_a_revive_read_from_disk_and_says_what_to_run(tmp_path):
    """#43: revive commands come from the drill's own spec, never from a file on disk. A node
    declared dead whose agent and guardian are gone: `drill heal` prints the revive for the
    operator and runs nothing; the guardian (told by its agent) does run it."""
    from tests.integration.cli import drill_cli

    ran = tmp_path / "revived"
    hook = {"command": "get-node", "shim_dir": str(tmp_path / "run" / "shim"), "declare_dead": ["true"],
            "revive": ["touch", str(ran)]}
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    agent = NodeAgent("local", run / "agent-local.json")
    victim = sleeper()
    try:
        agent.inject("fail-node-replacement", ProcRef.of(psutil.Process(victim.pid), rank=0, node="node-1"),
                     {"mode": "fail", "hook": hook})
    finally:
        victim.kill()
        victim.wait()
    done = drill_cli("heal", str(run), cwd=tmp_path, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and not ran.exists(), out
    assert "never runs" in out and f"touch {ran}" in out, out
